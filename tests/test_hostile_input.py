"""Hostile input at the CLI (issue 47): every input a user or a kernel controls is refused in one
line, exit 2, with nothing written — no file, no directory, no ledger row, no git change — and
each refusal sits beside the honest path it guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY, bench_env, git, init_repo, installed_dist, run_bench

SMALL = ("--seq-len", "32", "--heads", "2", "--kv-heads", "2", "--head-dim", "16", "--dtype", "float32",
         "--causal", "false")
LONG_ID = "a" * 250
EXAMPLE = (REPO / "registrations" / "integration-example.toml").read_text()
SHIPPED_STEP = 'step = "bench_kernels.tiny_transformer:step"'
# TINY with room to time on a loaded host (its 5 s budget can end a config with too few rounds,
# and the verdict then refuses the skipped pairs): these tests are about what the commands do
# with their input, not about the rig.
ROOMY = TINY.replace("timeout_s = 5", "timeout_s = 30")


def bench(cwd: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`bench` in a subprocess, as run_bench runs it, with ``env`` over its environment."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**bench_env(), **(env or {})})


def snapshot(root: Path) -> dict:
    """Every file of the work tree with its bytes (ignored ones, lock files, included), the
    commit checked out and what git's status says: a refusal changes none of them."""
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(root).parts}
    return {"files": files, "head": git(root, "rev-parse", "HEAD"),
            "status": git(root, "status", "--porcelain", "--ignored")}


def refused(r: subprocess.CompletedProcess, says: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: ") and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "", (r.stdout, r.stderr)


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


# --- 1. line ids, never paths -------------------------------------------------------------------

def test_bench_new_writes_only_under_registrations_from_a_line_id(repo, tmp_path):
    before = snapshot(repo)
    system = tmp_path / "system"  # what ../../system/probe from registrations/ would reach
    for line, says in (("../../system/probe", "is not a line id"), (f"{repo}/registrations/x", "is not a line id"),
                       ("sub/x", "is not a line id"), (".hidden", "is not a line id"),
                       ("x.toml", "is not a line id (a path: give the line id 'x')"), ("tiny\n", "is not a line id")):
        refused(run_bench(repo, "new", line, "--candidate", "sdpa", "--baseline", "torch_stack", *SMALL,
                          "--prediction", "1.1"), says)
    assert not system.exists() and snapshot(repo) == before
    ok = run_bench(repo, "new", "fresh", "--candidate", "sdpa", "--baseline", "torch_stack", *SMALL,
                   "--prediction", "1.1")
    assert ok.returncode == 0, ok.stderr
    assert set(snapshot(repo)["files"]) - set(before["files"]) == {"registrations/fresh.toml"}


def test_report_and_compare_read_no_ledger_outside_ledger_dir(repo, tmp_path):
    assert run_bench(repo, "register", "tiny").returncode == 0
    commit_all(repo, "registered")
    # A well-formed ledger two levels above ledger/: what LINE = ../../evil would name.
    (tmp_path / "evil.jsonl").write_bytes((repo / "ledger" / "tiny.jsonl").read_bytes())
    before = snapshot(repo)
    for args in (("report", "../../evil"), ("compare", "../../evil", "tiny"), ("compare", "tiny", "../../evil"),
                 ("route", "../../evil"), ("site", "../../evil"), ("compare", "tiny", "--against", "../../evil")):
        refused(run_bench(repo, *args), "'../../evil' is not a line id")
    refused(run_bench(repo, "report", "ledger/tiny.jsonl"), "is not a line id (a path: give the line id 'tiny')")
    assert snapshot(repo) == before
    ok = run_bench(repo, "report", "tiny")
    assert ok.returncode == 0, ok.stderr
    assert (repo / "reports" / "tiny" / "report.html").is_file()


def test_a_registration_path_must_lie_inside_the_repository(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tiny.toml").write_text(TINY)
    before = snapshot(repo)
    for args in (("warm", "../outside/tiny.toml"), ("warm", str(outside / "tiny.toml")),
                 ("sweep", "../outside/tiny.toml"), ("register", str(outside / "tiny.toml"))):
        refused(run_bench(repo, *args), "is outside the repository")
    assert snapshot(repo) == before
    ok = run_bench(repo, "warm", "registrations/tiny.toml")
    assert ok.returncode == 0, ok.stderr


# --- 2. a line id's length ------------------------------------------------------------------------

def test_the_line_id_gate():
    from harness.errors import UserError
    from harness.registration import line_ids

    longest = "a" * line_ids.MAX_LINE_ID
    assert line_ids.check(longest) == longest and line_ids.check("flash-h200.v2_b") == "flash-h200.v2_b"
    for bad in ("tiny\n", "a" * (line_ids.MAX_LINE_ID + 1), "../x", "x/y", ".x", "_device_ceilings", "", "a b",
                "x\\..\\y", "x\x00"):
        with pytest.raises(UserError):
            line_ids.check(bad)


def test_a_250_character_line_id_is_one_line_in_every_command(repo):
    before = snapshot(repo)
    for args in (("sweep", LONG_ID), ("verdict", LONG_ID), ("register", LONG_ID), ("warm", LONG_ID),
                 ("report", LONG_ID), ("ledger", "show", LONG_ID), ("ledger", "verify", LONG_ID),
                 ("ledger", "repair", LONG_ID), ("profile", LONG_ID), ("compare", LONG_ID, "tiny"),
                 ("route", LONG_ID), ("bisect", LONG_ID, "n32", "--good", "HEAD", "--bad", "HEAD"),
                 ("new", LONG_ID, "--candidate", "sdpa", "--baseline", "torch_stack", "--prediction", "1"),
                 ("sweep", f"registrations/{LONG_ID}.toml")):
        refused(run_bench(repo, *args), "is 250 characters long, more than 128")
    assert snapshot(repo) == before


def test_the_longest_line_id_works_end_to_end(repo):
    from harness.registration.line_ids import MAX_LINE_ID

    line = "b" * MAX_LINE_ID
    made = run_bench(repo, "new", line, "--candidate", "sdpa", "--baseline", "torch_stack", *SMALL,
                     "--prediction", "1.1")
    assert made.returncode == 0, made.stderr
    commit_all(repo, "the longest line id")
    reg = run_bench(repo, "register", line)
    assert reg.returncode == 0, reg.stderr
    assert (repo / "ledger" / f"{line}.jsonl").is_file()  # and its locks, <id>.jsonl.lock the longest
    assert run_bench(repo, "ledger", "verify", line).returncode == 0


# --- 3. values written into TOML ----------------------------------------------------------------

def test_kernel_names_are_never_written_into_the_registration_unchecked(repo):
    before = snapshot(repo)
    for flag, value in (("--candidate", 'sdpa"\nnotes = "injected'), ("--baseline", 'torch_stack"\nnotes = "x'),
                        ("--candidate", "sdpa math"), ("--baseline", "x" * 65)):
        args = ["--candidate", "sdpa", "--baseline", "torch_stack"]
        args[args.index(flag) + 1] = value
        refused(run_bench(repo, "new", "inj", *args, *SMALL, "--prediction", "1.1"), "is not a kernel name")
    assert snapshot(repo) == before


def test_every_string_reads_back_exactly_and_the_line_registers(repo):
    hypothesis = ('sdpa beats the "stack" \\ by 5%,\n[bar]\ngo = "pass_rate == 1.0"\n'
                  'with """triple quotes""", a tab\t, \\u0041 and a quote at the end"')
    go = 'geomean(speedup where candidate == "sdpa") >= 1.05 and pass_rate == 1.0'
    r = run_bench(repo, "new", "quoted", "--candidate", "sdpa", "--baseline", "torch_stack", *SMALL,
                  "--hypothesis", hypothesis, "--go", go, "--prediction", "1.1")
    assert r.returncode == 0, r.stderr
    raw = tomllib.loads((repo / "registrations" / "quoted.toml").read_text(encoding="utf-8"))
    assert raw["hypothesis"] == hypothesis and raw["bar"]["go"] == go
    assert set(raw) == {"schema", "hypothesis", "workload", "candidate", "baseline", "grid", "correctness", "timing",
                        "bar"}
    commit_all(repo, "quoted")
    reg = run_bench(repo, "register", "quoted")
    assert reg.returncode == 0, reg.stderr


def test_a_text_that_does_not_read_back_as_given_is_never_written(tmp_path):
    from harness.errors import UserError
    from harness.governance import scaffold

    grid = {"seq_len": [32], "heads": [2], "kv_heads": [2], "head_dim": [16], "dtype": ["float32"]}
    new = scaffold.plan("x", ["sdpa"], 1.1, baseline="torch_stack",
                        grid=scaffold.GridAsk("attention", grid, causal="false"), device="cpu")
    text, want = scaffold.registration_text(new), scaffold.registration_table(new)
    assert scaffold._parsed(text, tmp_path / "x.toml", want).candidates == ("sdpa",)
    for changed in (text + 'notes = "an extra key"\n', text.replace("seeds = 3", "seeds = 1"),
                    text.replace('candidate = "sdpa"', 'candidate = "sdpa_math"'),
                    text.replace("[timing]\n", "[timing]\nwarmup_ms = 1\n")):
        with pytest.raises(UserError, match="does not read back as given"):
            scaffold._parsed(changed, tmp_path / "x.toml", want)


# --- 4. streams that cannot encode what bench prints ---------------------------------------------

ASCII = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
# A C locale without UTF-8 mode: the file system's and the files' default encoding is ASCII too.
ASCII_FILES = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONUTF8": "0"}


@pytest.mark.slow
def test_every_command_works_on_an_ascii_stdout_and_stderr(tmp_path):
    repo = init_repo(tmp_path / "proj", {"tiny": ROOMY})
    assert run_bench(repo, "register", "tiny").returncode == 0
    commit_all(repo, "registered")
    assert run_bench(repo, "sweep", "tiny").returncode == 0
    for env in (ASCII, ASCII_FILES):
        runs = {"help": bench(repo, "--help", env=env), "sweep help": bench(repo, "sweep", "--help", env=env),
                "status": bench(repo, "status", env=env), "kernels": bench(repo, "kernels", env=env),
                "verdict": bench(repo, "verdict", "tiny", "--no-commit", env=env),
                "show": bench(repo, "ledger", "show", "tiny", env=env),
                "report": bench(repo, "report", "tiny", "--out", str(tmp_path / "report"), env=env)}
        for what, r in runs.items():
            assert r.returncode in ((0, 1) if what == "verdict" else (0,)), (what, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr and "UnicodeEncodeError" not in r.stderr, (what, r.stderr)
            assert r.stdout.strip() and r.stdout.isascii() and r.stderr.isascii(), (what, r.stdout, r.stderr)
        assert "GO" in runs["verdict"].stdout and "tiny" in runs["status"].stdout
        assert "—" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")  # files stay UTF-8
        # The one-line error path: its '—' degrades to '-'.
        r = bench(repo, "warm", "/nowhere/x.toml", env=env)
        refused(r, "this repository only - give a line id")
        assert r.stderr.isascii()


def test_the_fallback_degrades_what_an_ascii_stream_cannot_hold(capsys):
    import io

    from harness.reporting.render.console import FALLBACK_ERRORS

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii", errors=FALLBACK_ERRORS)
    out.write("a — b × c → d ≥ e − f 🙂 g \udcff")
    out.flush()
    assert raw.getvalue() == b"a - b x c -> d >= e - f ? g \xff"


# --- 5. a repository at a path that is not UTF-8 ---------------------------------------------------

def _not_utf8(tmp_path: Path) -> Path:
    where = Path(os.fsdecode(os.fsencode(tmp_path) + b"/bench-\xff\xfe"))
    try:
        where.mkdir()
    except (OSError, UnicodeEncodeError) as exc:
        pytest.skip(f"this file system takes no directory name that is not UTF-8 ({exc})")
    return where


@pytest.mark.slow
def test_register_sweep_and_verdict_in_a_clone_at_a_path_that_is_not_utf8(tmp_path):
    root = init_repo(_not_utf8(tmp_path) / "proj", {"tiny": ROOMY})
    reg = run_bench(root, "register", "tiny")
    assert reg.returncode == 0, reg.stderr
    commit_all(root, "registered")
    sweep = run_bench(root, "sweep", "tiny")
    assert sweep.returncode == 0, sweep.stderr
    verdict = run_bench(root, "verdict", "tiny")
    assert verdict.returncode == 0 and "GO" in verdict.stdout, verdict.stderr
    assert git(root, "status", "--porcelain") == ""
    for led in (root / "ledger").glob("*.jsonl"):  # no row names a directory of this machine
        assert os.fsencode(tmp_path) not in led.read_bytes() and b"\xff" not in led.read_bytes(), led.name
    ok = run_bench(root, "ledger", "verify")
    assert ok.returncode == 0 and "tiny.jsonl" in ok.stdout, ok.stderr
    # The committed history is checked there too: a ledger re-chained after its commit is caught.
    from harness.ledger.store import Ledger
    from harness.ledger.format import read_rows

    rows = read_rows(root / "ledger" / "tiny.jsonl")
    (root / "ledger" / "tiny.jsonl").unlink()
    Ledger(root, "tiny").append("registered", {**{k: v for k, v in rows[0].dump().items() if k not in ("hash", "kind")},
                                               "n_configs": 1})
    bad = run_bench(root, "ledger", "verify", "tiny")
    assert bad.returncode == 1, (bad.stdout, bad.stderr)


# --- 6. `bench new` writes a line for the machine it runs on ---------------------------------------

# torch sees no GPU: the machine `bench new` writes for is a CPU one, on a GPU host too.
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def test_bench_new_refuses_a_kernel_that_cannot_run_on_the_device_it_writes_for(repo):
    before = snapshot(repo)
    refused(bench(repo, "new", "gpu", "--candidate", "sdpa", "--baseline", "cublas_stack", *SMALL,
                  "--prediction", "1.1", env=NO_GPU), "kernel 'cublas_stack' cannot run on cpu")
    refused(bench(repo, "new", "gpu", "--candidate", "sdpa", "--device", "tpu", *SMALL, "--prediction", "1.1",
                  env=NO_GPU), "--device 'tpu'")
    assert snapshot(repo) == before
    # Asked for a GPU machine, it writes the GPU baseline and says which device the line is for.
    ok = bench(repo, "new", "gpu", "--candidate", "sdpa", "--device", "cuda", *SMALL, "--prediction", "1.1",
               env=NO_GPU)
    assert ok.returncode == 0, ok.stderr
    text = (repo / "registrations" / "gpu.toml").read_text()
    assert tomllib.loads(text)["baseline"] == "cublas_stack" and "# Written for cuda" in text


@pytest.mark.slow
def test_a_line_bench_new_writes_on_the_cpu_registers_and_sweeps_there(repo):
    made = bench(repo, "new", "cpu-line", "--candidate", "sdpa", *SMALL, "--prediction", "1.1", env=NO_GPU)
    assert made.returncode == 0, made.stderr
    text = (repo / "registrations" / "cpu-line.toml").read_text()
    assert tomllib.loads(text)["baseline"] == "torch_stack" and "# Written for cpu" in text
    commit_all(repo, "cpu-line")
    reg = bench(repo, "register", "cpu-line", env=NO_GPU)
    assert reg.returncode == 0, reg.stderr
    sweep = bench(repo, "sweep", "cpu-line", "--no-ceilings", env=NO_GPU)
    assert sweep.returncode == 0, sweep.stderr
    kinds = [json.loads(x)["kind"] for x in (repo / "ledger" / "cpu-line.jsonl").read_text().splitlines()]
    assert kinds[0] == "registered" and "result" in kinds, kinds


# --- 7. the integration step is code a row can name ------------------------------------------------

def _step_line(repo: Path, name: str, step: str) -> None:
    (repo / "registrations" / f"{name}.toml").write_text(EXAMPLE.replace(SHIPPED_STEP, f'step = "{step}"'))


def test_an_integration_step_outside_the_commit_is_refused_at_register(repo):
    (repo / "reexport.py").write_text('"""A committed module handing out the standard library\'s code."""\n'
                                      "from os import system  # noqa: F401\n")
    (repo / "hidden_step.py").write_text("def step(device, dtype):\n    raise RuntimeError('never runs')\n")
    with open(repo / ".gitignore", "a") as f:
        f.write("hidden_step.py\n")
    cases = {"ossystem": ("os:system", "[integration] step 'os:system': os "),  # frozen, or the standard library's
             "reexport": ("reexport:system", f"system is defined in {os.system.__module__}, not in reexport"),
             "hidden": ("hidden_step:step", "hidden_step.py (ignored) is not committed as it is")}
    for name, (step, _) in cases.items():
        _step_line(repo, name, step)
    _step_line(repo, "shipped", "bench_kernels.tiny_transformer:step")
    commit_all(repo, "integration lines")
    before = snapshot(repo)
    for name, (_, says) in cases.items():
        refused(run_bench(repo, "register", name), says)
    assert snapshot(repo) == before
    ok = run_bench(repo, "register", "shipped")
    assert ok.returncode == 0, ok.stderr


def test_a_step_of_an_installed_distribution_is_recorded_and_a_bare_directory_refused(repo, tmp_path):
    site = installed_dist(tmp_path / "site", "stepdist", "1.5", "",
                          {"dist_step": "def step(device, dtype):\n    raise RuntimeError('never runs')\n"})
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "bare_step.py").write_text("def step(device, dtype):\n    raise RuntimeError('never runs')\n")
    _step_line(repo, "installed", "dist_step:step")
    _step_line(repo, "bare", "bare_step:step")
    commit_all(repo, "integration lines")
    env = {"PYTHONPATH": os.pathsep.join([bench_env()["PYTHONPATH"], str(site), str(bare)])}
    refused(bench(repo, "register", "bare", env=env), "which neither this repository's commit nor an installed")
    assert not (repo / "ledger" / "bare.jsonl").exists()
    ok = bench(repo, "register", "installed", env=env)
    assert ok.returncode == 0, ok.stderr
    row = json.loads((repo / "ledger" / "installed.jsonl").read_text().splitlines()[0])
    (rec,) = [c for c in row["code"] if c["package"] == "dist_step"]
    assert (rec["name"], rec["version"], rec["editable"]) == ("stepdist", "1.5", False) and rec["sha256"]


def test_a_step_that_left_the_commit_is_refused_again_at_sweep(repo):
    (repo / "stepmod.py").write_text((REPO / "kernels" / "tiny_transformer.py").read_text())
    _step_line(repo, "moved", "stepmod:step")
    commit_all(repo, "a step of our own")
    assert run_bench(repo, "register", "moved").returncode == 0
    commit_all(repo, "registered")
    # Untracked and ignored: the tree is clean, and Python would still import it.
    git(repo, "rm", "-q", "--cached", "stepmod.py")
    with open(repo / ".gitignore", "a") as f:
        f.write("stepmod.py\n")
    commit_all(repo, "stepmod.py leaves the commit")
    before = (repo / "ledger" / "moved.jsonl").read_bytes()
    refused(run_bench(repo, "sweep", "moved"), "stepmod.py (ignored) is not committed as it is")
    assert (repo / "ledger" / "moved.jsonl").read_bytes() == before
