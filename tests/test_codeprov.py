"""The commit stamp covers the code that ran: the code packages come from the checkout being
measured, and from source — a planted ``.pyc`` never runs (issue 26, item 1)."""

from __future__ import annotations

import importlib.util
import py_compile
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.provenance import code as codeprov
from tests.conftest import TINY, bench_env, build_wheel, copy_project, init_repo, tree_pyc
from tests.test_provenance import _with_code, clone, commit_all


def _bench(cwd: Path, *args: str, pythonpath: Path | None = None, safe_path: bool = False):
    env = bench_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    flags = ["-P"] if safe_path else []  # -P: no cwd on sys.path, as the `bench` console script runs
    return subprocess.run([sys.executable, *flags, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def _rows(root: Path) -> list[dict]:
    import json

    led = root / "ledger" / "tiny.jsonl"
    return [json.loads(x) for x in led.read_text().splitlines()] if led.exists() else []


def _code_repo(tmp_path: Path) -> Path:
    repo = _with_code(init_repo(tmp_path / "proj", {"tiny": TINY}))
    assert _bench(repo, "register", "tiny").returncode == 0
    commit_all(repo, "register tiny")
    return repo


def _plant(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """An UNCHECKED_HASH ``.pyc`` for kernels/torch_stack.py that leaves a marker when it runs:
    Python would run it for that module without reading the source."""
    src = repo / "kernels" / "torch_stack.py"
    marker = tmp_path / "PLANTED_RAN"
    evil = tmp_path / "torch_stack.py"
    evil.write_text(src.read_text() + f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    pyc = tree_pyc(src)
    py_compile.compile(str(evil), cfile=str(pyc), dfile=str(src), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return pyc, marker


def test_a_planted_pyc_is_refused_by_name_before_anything_runs(tmp_path):
    repo = _code_repo(tmp_path)
    pyc, marker = _plant(repo, tmp_path)
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    r = _bench(repo, "sweep", "tiny", "--no-ceilings")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr + r.stdout
    assert "kernels/__pycache__/torch_stack.cpython-311.pyc (ignored)" in r.stderr.replace(
        sys.implementation.cache_tag, "cpython-311") and "delete it" in r.stderr, r.stderr
    assert not marker.exists(), "the planted bytecode ran"
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before


def test_a_committed_pyc_is_never_run(tmp_path):
    """Even bytecode the commit holds never stands in for its source: the loader reads source only."""
    repo = _code_repo(tmp_path)
    pyc, marker = _plant(repo, tmp_path)
    subprocess.run(["git", "add", "-f", str(pyc)], cwd=repo, check=True)
    commit_all(repo, "a committed pyc")
    r = _bench(repo, "sweep", "tiny", "--no-ceilings")
    assert r.returncode == 0, r.stderr + r.stdout
    assert not marker.exists(), "the planted bytecode ran"
    # The kernels ran (from source): each pair has its outcome (`skipped` only where a loaded
    # machine left the timing unjudgeable), none incorrect nor crashed.
    assert sorted(row["kind"] for row in _rows(repo) if row["kind"] not in ("registered",)) in (
        ["result", "result"], ["result", "skipped"], ["skipped", "skipped"])
    assert pyc.is_file()  # untouched: bench never reads (nor rewrites) the repository's bytecode


def test_only_pythons_own_cache_of_a_source_is_allowed_in_pycache(tmp_path):
    src = tmp_path / "pkg" / "mod.py"
    src.parent.mkdir()
    src.write_text("X = 1\n")
    own = tree_pyc(src)
    py_compile.compile(str(src), cfile=str(own), doraise=True)
    assert codeprov.own_bytecode(own)
    src.write_text("X = 2\n")  # stale: the source moved on
    assert not codeprov.own_bytecode(own)
    stray = own.with_name("gone." + own.name.split(".", 1)[1])  # the cache of no source
    stray.write_bytes(own.read_bytes())
    assert not codeprov.own_bytecode(stray)
    other = own.with_name("mod.other-99.pyc")  # another interpreter's
    other.write_bytes(own.read_bytes())
    assert not codeprov.own_bytecode(other)


def test_code_from_another_clone_is_refused_by_path(tmp_path):
    origin = _code_repo(tmp_path)
    a, b = clone(origin, tmp_path / "A"), clone(origin, tmp_path / "B")
    (a / "kernels" / "torch_stack.py").write_text((a / "kernels" / "torch_stack.py").read_text() + "\n# faster\n")
    before = (b / "ledger" / "tiny.jsonl").read_bytes()
    for args in (("sweep", "tiny", "--no-ceilings"), ("verdict", "tiny")):
        r = _bench(b, *args, pythonpath=a, safe_path=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"loaded from {a.resolve()}" in r.stderr and f"({b.resolve()})" in r.stderr, r.stderr
        assert "python -m harness" in r.stderr and "pip install -e ." in r.stderr, r.stderr
    assert (b / "ledger" / "tiny.jsonl").read_bytes() == before
    assert subprocess.run(["git", "status", "--porcelain"], cwd=b, capture_output=True, text=True).stdout == ""


def _fake_module(monkeypatch, name: str, file: Path, cached: Path | None = None):
    mod = types.ModuleType(name)
    mod.__file__ = str(file)
    mod.__cached__ = str(cached) if cached else None
    mod.__spec__ = importlib.util.spec_from_file_location(name, file)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def test_a_module_from_outside_the_repository_is_refused_in_any_process(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    for folder in ("harness", "kernels"):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "__init__.py").write_text("")
    # This process's own code modules (loaded by earlier tests) lie outside the fake repo
    # too: set them aside, so the one named is the planted one, whatever ran before.
    for name in [n for n in sys.modules if n.partition(".")[0] in codeprov.CODE_PACKAGES]:
        monkeypatch.delitem(sys.modules, name)
    _fake_module(monkeypatch, "bench_kernels.elsewhere", tmp_path / "other" / "kernels" / "elsewhere.py")
    with pytest.raises(UserError, match=r"bench_kernels\.elsewhere is loaded from .*other/kernels/elsewhere\.py, "
                                        r"outside the repository being measured .*pip install -e \."):
        codeprov.require_from_repository(repo)
    # A repository that holds no harness (bench installed next to it) is not asked to, even
    # where it has a kernels/ folder of its own: that folder is not bench's.
    (repo / "harness" / "__init__.py").unlink()
    codeprov.require_from_repository(repo)


def test_bytecode_that_is_not_its_source_is_refused(tmp_path, monkeypatch):
    src = tmp_path / "mod.py"
    src.write_text("X = 1\n")
    pyc = tmp_path / "mod.pyc"
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    _fake_module(monkeypatch, "harness._probe", src, pyc)
    codeprov.require_source_loaded()  # the honest cache of this source
    planted = tmp_path / "planted.py"
    planted.write_text("X = 2\n")
    py_compile.compile(str(planted), cfile=str(pyc), dfile=str(src), doraise=True)
    with pytest.raises(UserError, match=r"harness\._probe may have run from .*mod\.pyc"):
        codeprov.require_source_loaded()


def test_every_code_module_of_this_process_loaded_from_source():
    import harness
    import bench_kernels.torch_stack  # noqa: F401

    mods = codeprov.code_modules()
    assert isinstance(mods["bench_kernels.torch_stack"].__spec__.loader, harness.SourceOnlyLoader)
    assert isinstance(mods["harness.provenance.code"].__spec__.loader, harness.SourceOnlyLoader)
    codeprov.require_source_loaded()


def test_workers_check_their_code_at_start_and_after_each_config(monkeypatch, tmp_path):
    from harness.execution import workers

    seen = []
    monkeypatch.setattr(codeprov, "require_from_repository", lambda root: seen.append(root))
    workers.require_worker_code(str(tmp_path))
    assert seen == [tmp_path]
    src = Path(workers.__file__).read_text()
    assert src.count("require_worker_code(root)") == 2  # in worker_main, and in _serve after each job
    assert "self.root" in src and "prepare" in src


# --- bench itself from outside the repository ---------------------------------------------------

def _bench_from(cwd: Path, site: Path, *args: str):
    env = bench_env()
    env["PYTHONPATH"] = str(site)  # bench comes from `site` only (-P: not from the working directory)
    return subprocess.run([sys.executable, "-P", "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.slow
def test_an_installed_bench_is_named_in_every_row_and_a_changed_installed_file_is_refused(tmp_path):
    site = tmp_path / "site"
    wheel = build_wheel(copy_project(tmp_path / "src"), tmp_path / "dist")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    repo = init_repo(tmp_path / "proj", {"tiny": TINY})  # registrations and ledgers only
    assert _bench_from(repo, site, "register", "tiny").returncode == 0
    commit_all(repo, "register tiny")
    r = _bench_from(repo, site, "sweep", "tiny", "--no-ceilings")
    assert r.returncode == 0, r.stderr + r.stdout
    rows = _rows(repo)
    from harness import __version__

    for row in rows:
        code = {c["package"]: c for c in row["code"]}
        assert set(code) == {"harness", "bench_kernels"}, row["kind"]
        for c in code.values():
            assert (c["name"], c["version"], c["editable"]) == ("bench", __version__, False)
            assert c["files"] > 10 and len(c["sha256"]) == 64
    assert len({r["code"][0]["sha256"] for r in rows}) == 1
    text = (repo / "ledger" / "tiny.jsonl").read_text()
    assert str(tmp_path) not in text  # a row never names a directory of this machine

    # One installed file changed after pip wrote it: no release holds that code.
    f = site / "bench_kernels" / "torch_stack.py"
    f.write_text(f.read_text() + "\n# faster\n")
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    r = _bench_from(repo, site, "verdict", "tiny")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "bench_kernels/torch_stack.py of the installed distribution bench" in r.stderr, r.stderr
    assert "pip install --force-reinstall bench==" in r.stderr, r.stderr
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before


def test_bench_from_a_directory_no_distribution_holds_is_refused_by_path(tmp_path):
    loose = copy_project(tmp_path / "loose")  # on PYTHONPATH, never installed
    repo = init_repo(tmp_path / "proj", {"tiny": TINY})
    r = _bench_from(repo, loose, "register", "tiny")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"harness is loaded from {(loose / 'harness').resolve()}" in r.stderr, r.stderr
    assert "pip install -e" in r.stderr, r.stderr
    assert not (repo / "ledger" / "tiny.jsonl").exists()


def test_a_build_egg_info_beside_the_code_is_not_an_installed_distribution(tmp_path, monkeypatch):
    """`pip install -e .` leaves bench.egg-info (SOURCES.txt, no RECORD) in the checkout: its
    stale file list names no installed release, so it never vouches for the code."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("")
    info = tmp_path / "bench.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: bench\nVersion: 0.1.0\n")
    (info / "top_level.txt").write_text("harness\n")
    (info / "SOURCES.txt").write_text("harness/__init__.py\nharness/gone.py\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import distributions

    assert any(str(tmp_path) in str(getattr(d, "_path", "")) for d in distributions(name="bench"))
    assert codeprov._distribution_holding("harness", (tmp_path / "harness" / "__init__.py").resolve()) is None
