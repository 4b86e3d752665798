"""Where a line's bar and code come from: repository-relative registration paths that work in
any clone, no ignored code, entry-point kernels named by package and version, byte-exact
registrations and ledgers under core.autocrlf, and no silent re-opening of a line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.provenance import code as codeprov
from harness.governance import line as gl
from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from harness.ledger.verify import verify
from tests.conftest import REPO, TINY, bench_env, git, installed_dist, run_bench

ENV = {"host": "test"}
OUTCOMES = ("result", "skipped", "incorrect", "throttled", "crashed", "unsupported")


def rows(root: Path, line: str = "tiny") -> list[dict]:
    return read_rows(root / "ledger" / f"{line}.jsonl")


def commit_all(root: Path, msg: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", msg)


def clone(src: Path, dst: Path, *config: str) -> Path:
    subprocess.run(["git", "clone", "-q", *config, str(src), str(dst)], check=True, capture_output=True)
    git(dst, "config", "user.email", "test@example.com")
    git(dst, "config", "user.name", "test")
    return dst


# --- 1. registration paths -------------------------------------------------------------------

def test_the_registration_path_is_stored_relative_to_the_root_whatever_form_was_typed(repo, tmp_path, monkeypatch):
    forms = ["absolute", "relative", "dot", "parent", "symlinked_cwd", "through_link", "line_id"]
    for f in forms:
        (repo / "registrations" / f"{f}.toml").write_text(TINY)
    (repo / "sub").mkdir()
    (repo / "sub" / "keep").write_text("")
    commit_all(repo, "one registration per path form")
    link = tmp_path / "link"
    link.symlink_to(repo)
    typed = {"absolute": (repo, str(repo / "registrations" / "absolute.toml")),
             "relative": (repo, "registrations/relative.toml"),
             "dot": (repo, "./registrations/dot.toml"),
             "parent": (repo / "sub", "../registrations/parent.toml"),
             "symlinked_cwd": (link / "sub", "../registrations/symlinked_cwd.toml"),
             "through_link": (repo, str(link / "registrations" / "through_link.toml")),
             "line_id": (repo, "line_id")}
    for f, (cwd, arg) in typed.items():
        monkeypatch.chdir(cwd)
        row = gl.register(arg, env=ENV)
        assert row.registration["path"] == f"registrations/{f}.toml", (f, row.registration["path"])
    text = "".join((repo / "ledger" / f"{f}.jsonl").read_text() for f in forms)
    assert str(repo) not in text and str(tmp_path) not in text


def _rewrite_row0_path(root: Path, line: str, path: str) -> None:
    """Re-create a ledger whose (correctly chained) row 0 names ``path`` as its registration."""
    (row,) = rows(root, line)
    led = root / "ledger" / f"{line}.jsonl"
    led.unlink()
    Ledger(root, line).append("registered", {**{k: v for k, v in row.dump().items() if k not in ("hash", "kind")},
                                              "registration": {**row.registration, "path": path}})
    assert verify(led).ok


@pytest.mark.parametrize("form", ["absolute", "escaping"])
def test_a_row_0_path_that_is_absolute_or_leaves_the_repository_is_refused(repo, form):
    assert run_bench(repo, "register", "tiny").returncode == 0
    # Both still name the very file that was registered (same hash): the path alone is refused.
    path = str(repo / "registrations" / "tiny.toml") if form == "absolute" else f"../{repo.name}/registrations/tiny.toml"
    _rewrite_row0_path(repo, "tiny", path)
    commit_all(repo, "a ledger registered elsewhere")
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    r = run_bench(repo, "sweep", "tiny")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    why = "absolute path of the machine" if form == "absolute" else "leaves the repository"
    assert why in r.stderr and path in r.stderr and "bench register tiny --reopen" in r.stderr, r.stderr
    assert run_bench(repo, "verdict", "tiny").returncode == 2
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before
    assert run_bench(repo, "ledger", "verify", "tiny").returncode == 0  # still readable


def test_a_closed_line_with_an_absolute_path_names_amends(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    _rewrite_row0_path(repo, "tiny", "/somewhere/registrations/tiny.toml")
    Ledger(repo, "tiny").append("verdict", {"outcome": "GO"})
    with pytest.raises(UserError, match='as a new line .*amends = "tiny"'):
        gl._checked_line(gl.gitguard.CleanTree(repo, git(repo, "rev-parse", "HEAD")), "tiny", "a sweep")


def test_the_shipped_old_lines_stay_readable_but_refuse_to_sweep():
    for line, fix in (("flash-h200", "amends"), ):
        led = REPO / "ledger" / f"{line}.jsonl"
        assert verify(led).ok
        rs = read_rows(led)
        with pytest.raises(UserError, match=fix):
            gl.registered_path(rs[0], line, closed=any(r.kind == "verdict" for r in rs))
    for led in sorted((REPO / "ledger").glob("*.jsonl")):
        rs = read_rows(led)
        if rs and rs[0].kind == "registered" and led.stem != "flash-h200":
            assert gl.registered_path(rs[0], led.stem, closed=False) == f"registrations/{led.stem}.toml"


@pytest.mark.slow
def test_a_line_sweeps_from_a_clone_at_another_path_and_an_edit_there_is_refused(repo, tmp_path):
    assert run_bench(repo, "register", "tiny").returncode == 0
    commit_all(repo, "register tiny")
    other = clone(repo, tmp_path / "elsewhere" / "checkout")
    s = run_bench(other, "sweep", "tiny", "--no-ceilings")
    assert s.returncode == 0, s.stderr + s.stdout
    assert sum(r.kind == "result" for r in rows(other)) == 2
    # The original checkout still exists with the registered bytes: the clone must hash its own file.
    p = other / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace(">= 0.01", ">= 0.001"))
    git(other, "commit", "-qam", "loosen the bar in the clone")
    n = len(rows(other))
    r = run_bench(other, "sweep", "tiny", "--no-ceilings")
    assert r.returncode == 2 and "changed since it was registered" in r.stderr, r.stderr
    assert len(rows(other)) == n


# --- 2. no ignored code; entry-point kernels named by package ---------------------------------

def _with_code(repo: Path) -> Path:
    """The repository holds its own copy of harness/ and kernels/ (as this project does)."""
    for pkg in ("harness", "kernels"):
        shutil.copytree(REPO / pkg, repo / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    commit_all(repo, "the harness and kernels")
    return repo


EVIL = textwrap.dedent('''\
    import pathlib
    pathlib.Path(__file__).with_name("IMPORTED").write_text("the baseline is patched")
    ''')


@pytest.mark.parametrize("where,path", [("exclude", "kernels/evil.py"), ("gitignore", "kernels/evil.py"),
                                        ("exclude", "kernels/evil.cu"), ("gitignore", "harness/evil.py")])
def test_ignored_code_is_refused_by_name_before_it_is_imported(repo, where, path):
    _with_code(repo)
    assert run_bench(repo, "register", "tiny").returncode == 0
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    (repo / path).write_text(EVIL)
    if where == "exclude":
        with open(repo / ".git" / "info" / "exclude", "a") as fh:
            fh.write(f"{path}\n")
    else:
        with open(repo / ".gitignore", "a") as fh:
            fh.write(f"{path}\n")
        commit_all(repo, "ignore it")
    assert path not in git(repo, "status", "--porcelain")  # invisible to the dirty-tree check
    for args in (("sweep", "tiny"), ("verdict", "tiny")):
        r = run_bench(repo, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"{path} (ignored)" in r.stderr, r.stderr
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before
    assert not (repo / path).with_name("IMPORTED").exists()
    (repo / "registrations" / "tiny2.toml").write_text(TINY)
    commit_all(repo, "another line")
    r = run_bench(repo, "register", "tiny2")
    assert r.returncode == 2 and f"{path} (ignored)" in r.stderr
    assert not (repo / "ledger" / "tiny2.jsonl").exists()
    assert not (repo / path).with_name("IMPORTED").exists()


def test_an_imported_module_from_the_repository_must_be_tracked_and_unchanged(repo):
    import importlib.util

    (repo / "tools").mkdir()
    (repo / "tools" / "helper.py").write_text("X = 1\n")
    (repo / ".gitignore").write_text((repo / ".gitignore").read_text() + "tools/\n")
    (repo / "ledger" / "plugin.py").write_text("Y = 1\n")
    commit_all(repo, "a helper in ledger/")
    (repo / "ledger" / "plugin.py").write_text("Y = 2\n")  # the dirty-tree check exempts ledger/
    gl.require_tracked_code(repo, load_kernels=False)  # nothing of the repository imported yet
    names = []
    try:
        for name, file in (("bench_test_helper", "tools/helper.py"), ("bench_test_plugin", "ledger/plugin.py")):
            spec = importlib.util.spec_from_file_location(name, repo / file)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[name] = mod
            names.append(name)
        with pytest.raises(UserError) as err:
            gl.require_tracked_code(repo, load_kernels=False)
        assert "tools/helper.py (ignored)" in str(err.value)
        assert "ledger/plugin.py (changed since HEAD)" in str(err.value)
    finally:
        for name in names:
            del sys.modules[name]


def _plugin(where: Path) -> Path:
    """A real installed distribution (dist-info on sys.path) whose entry point adds a kernel."""
    return installed_dist(where, "myplugin", "0.3.1", "[bench.kernels]\nmine = myplugin_kernels\n",
                          {"myplugin_kernels": textwrap.dedent('''\
        from harness import kernel

        @kernel("plugin_stack", workloads=("attention",), dtypes=("float32",), devices=("cpu", "cuda"))
        def plugin_stack(q, k, v, out, *, causal, scale):
            """The torch stack, shipped by another package."""
            from bench_kernels.torch_stack import torch_stack
            torch_stack(q, k, v, out, causal=causal, scale=scale)
        ''')})


@pytest.mark.slow
def test_an_entry_point_kernels_package_and_version_are_in_every_row_using_it(repo, tmp_path):
    plugin = _plugin(tmp_path / "site")
    p = repo / "registrations" / "tiny.toml"
    p.write_text(p.read_text().replace('candidate = "sdpa"', 'candidates = ["plugin_stack", "sdpa"]')
                 .replace('dtype = ["float32"]', 'dtype = ["float32"]\nkv_heads = [1, 2]')
                 .replace("seq_len = [32, 48]", "seq_len = [32]"))
    commit_all(repo, "a plugin candidate")
    env = {**bench_env(), "PYTHONPATH": os.pathsep.join([str(plugin), bench_env()["PYTHONPATH"]])}
    for args in (("register", "tiny"), ("sweep", "tiny", "--no-ceilings")):
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=600)
        assert r.returncode == 0, r.stderr + r.stdout
    outcomes = [r for r in rows(repo) if r.kind in OUTCOMES]
    assert {r.candidate for r in outcomes} == {"plugin_stack", "sdpa"}
    assert {r.kind for r in outcomes} == {"result"}
    for r in outcomes:
        src = r.kernel_sources
        assert src["baseline"]["distribution"] is None and src["baseline"]["sha256"]
        if r.candidate == "plugin_stack":
            dist = src["candidate"]["distribution"]
            assert (dist["name"], dist["version"], dist["editable"], dist["files"]) == ("myplugin", "0.3.1", False, 1)
            assert dist["sha256"] == codeprov.digest({"myplugin_kernels.py": hashlib.sha256(
                (plugin / "myplugin_kernels.py").read_bytes()).hexdigest()})
            # The plugin lives outside the repository: its module path, never a directory of this machine.
            assert src["candidate"]["path"] == "myplugin_kernels.py" and src["candidate"]["sha256"]
        else:
            assert src["candidate"]["distribution"] is None
    # The plugin's file changed after pip installed it: no release of it holds that code.
    f = plugin / "myplugin_kernels.py"
    f.write_text(f.read_text() + "\n# faster\n")
    r = subprocess.run([sys.executable, "-m", "harness", "kernels"], cwd=repo, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 2 and "myplugin_kernels.py of the installed distribution myplugin 0.3.1 is not the file " \
        "pip installed" in r.stderr, r.stderr


def test_kernel_sources_inside_the_repository_are_recorded_relative_to_it(repo):
    from harness import get_kernel
    from harness.pipeline.rows import kernel_source

    spec = get_kernel("torch_stack")
    assert kernel_source(spec, str(REPO))["path"] == "kernels/torch_stack.py"
    # Outside the repository: the module's path under its import root, never a machine's directory.
    assert kernel_source(spec, str(repo))["path"] == "kernels/torch_stack.py"


# --- 7. byte-exact registrations and ledgers under core.autocrlf ------------------------------

@pytest.mark.slow
def test_an_autocrlf_clone_verifies_and_sweeps(repo, tmp_path):
    crlf = "-c", "core.autocrlf=true"
    bare = clone(repo, tmp_path / "control", *crlf)  # without the attributes git rewrites line endings
    assert b"\r\n" in (bare / "registrations" / "tiny.toml").read_bytes()
    shutil.copy(REPO / ".gitattributes", repo / ".gitattributes")
    commit_all(repo, "byte-exact registrations and ledgers")
    assert run_bench(repo, "register", "tiny").returncode == 0
    commit_all(repo, "register tiny")
    other = clone(repo, tmp_path / "crlf", *crlf)
    for f in ("registrations/tiny.toml", "ledger/tiny.jsonl"):
        assert (other / f).read_bytes() == (repo / f).read_bytes(), f
    assert b"\r\n" in (other / ".gitignore").read_bytes()  # the setting is in force elsewhere
    v = run_bench(other, "ledger", "verify")
    assert v.returncode == 0 and "chain intact" in v.stdout, v.stdout + v.stderr
    s = run_bench(other, "sweep", "tiny", "--no-ceilings")
    assert s.returncode == 0, s.stderr + s.stdout
    assert sum(r.kind == "result" for r in rows(other)) == 2


# --- register never silently re-opens a line --------------------------------------------------

def _registered_and_committed(repo: Path, monkeypatch) -> str:
    monkeypatch.chdir(repo)
    gl.register("tiny", env=ENV)
    commit_all(repo, "register tiny")
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize("how", ["committed", "work_tree"])
def test_register_refuses_to_reopen_a_line_whose_ledger_is_in_history(repo, monkeypatch, how):
    at = _registered_and_committed(repo, monkeypatch)
    if how == "committed":
        git(repo, "rm", "-q", "ledger/tiny.jsonl")
        git(repo, "commit", "-qm", "drop the ledger")
    else:
        (repo / "ledger" / "tiny.jsonl").unlink()
    with pytest.raises(UserError, match=f"last existed at commit {at[:12]}.*--reopen"):
        gl.register("tiny", env=ENV)
    assert not (repo / "ledger" / "tiny.jsonl").exists()


def test_reopen_records_what_it_replaces(repo, monkeypatch):
    at = _registered_and_committed(repo, monkeypatch)
    old = rows(repo)
    with pytest.raises(UserError, match="already registered"):
        gl.register("tiny", env=ENV, reopen=True)
    git(repo, "rm", "-q", "ledger/tiny.jsonl")
    git(repo, "commit", "-qm", "drop the ledger")
    r = run_bench(repo, "register", "registrations/tiny.toml", "--reopen")
    assert r.returncode == 0, r.stderr
    (row,) = rows(repo)
    assert row.reopens == {"commit": at, "rows": 1, "last_hash": old[-1].hash}
    assert verify(repo / "ledger" / "tiny.jsonl").ok
    # Committed, the re-opened ledger's history starts after the old one's deletion.
    commit_all(repo, "the re-opened line")
    assert verify(repo / "ledger" / "tiny.jsonl").ok
    r = run_bench(repo, "ledger", "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_forged_reopen_declaration_does_not_hide_a_verdict(repo, monkeypatch):
    """A row 0 claiming to re-open an earlier, undecided version of a ledger that went on to
    get a verdict is caught: the declared commit must hold the old ledger's last version."""
    at = _registered_and_committed(repo, monkeypatch)
    first = rows(repo)
    Ledger(repo, "tiny").append("verdict", {"outcome": "NO-GO"})
    commit_all(repo, "a decided line")
    git(repo, "rm", "-q", "ledger/tiny.jsonl")
    git(repo, "commit", "-qm", "drop the decided ledger")
    Ledger(repo, "tiny").append("registered", {"reopens": {"commit": at, "rows": 1,
                                                           "last_hash": first[-1].hash}})
    commit_all(repo, "a forged re-open")
    res = verify(repo / "ledger" / "tiny.jsonl")
    assert not res.ok and res.bad_row == 0
    assert "not deleted right after it" in res.reason


def test_reopen_refuses_a_line_with_a_verdict_and_a_line_never_committed(repo, monkeypatch):
    monkeypatch.chdir(repo)
    with pytest.raises(UserError, match="no earlier ledger in git history"):
        gl.register("tiny", env=ENV, reopen=True)
    assert not (repo / "ledger" / "tiny.jsonl").exists()
    gl.register("tiny", env=ENV)
    Ledger(repo, "tiny").append("verdict", {"outcome": "NO-GO"})
    commit_all(repo, "a decided line")
    git(repo, "rm", "-q", "ledger/tiny.jsonl")
    git(repo, "commit", "-qm", "drop the ledger")
    with pytest.raises(UserError, match='holds a verdict \\(NO-GO, row 1\\).*amends = "tiny"'):
        gl.register("tiny", env=ENV, reopen=True)
    assert not (repo / "ledger" / "tiny.jsonl").exists()
