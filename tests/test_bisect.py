"""`bench bisect` end to end on the CPU, in a real git repository: a copy of this project's
code where a tiny line is registered, then histories on top of it — one where commit 9 of 16
makes the candidate ~30% slower (still correct, so it passes the float64 gate), one flat.
Each probe runs in its commit's own worktree with that commit's code."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.governance import bisect as rule
from tests.conftest import REPO, git

# The planted regression: the candidate spins for this fraction of its own time after its work.
PLANTED_SLOWDOWN = 0.3
N_COMMITS = 16
PLANTED_AT = 9  # 1-based, of N_COMMITS
# Two ends, then halving 15 commits: 4 probes.
MAX_PROBES = 6

LINE = "bis"
# One config, one seed, one family, short timing windows: a probe is its subprocess's start
# (torch's import) and about a second of gate and timing.
REGISTRATION = textwrap.dedent('''\
    schema = 1
    hypothesis = "the planted kernel keeps pace with the torch stack it wraps"
    workload = "attention"
    candidate = "planted"
    baseline = "torch_stack"

    [grid]
    batch = [1]
    heads = [2]
    seq_len = [128]
    head_dim = [32]
    dtype = ["float32"]
    causal = [false]

    [correctness]
    atol = 1e-5
    rtol = 1e-4
    seeds = [0]
    families = ["normal"]

    [timing]
    # hot: no cache flush before each call (on the CPU a flush costs more than the call)
    mode = "hot"
    warmup_ms = 5
    min_samples = 30
    max_samples = 100
    min_time_ms = 30
    noise_target = 0.01
    timeout_s = 60

    [bar]
    go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"
    prediction = 1.0
    include_noisy = true
    ''')
CONFIG = "attention/b1/h2/kv2/n128/d32/float32/full"

KERNEL = '''\
"""tests/test_bisect.py's candidate: the torch stack, then a spin of EXTRA x its own time."""

import time

from bench_kernels.torch_stack import torch_stack
from harness import kernel

REVISION = {revision}
EXTRA = {extra}


@kernel("planted", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def planted(q, k, v, out, *, causal, scale):
    t0 = time.perf_counter()
    torch_stack(q, k, v, out, causal=causal, scale=scale)
    if EXTRA:
        end = time.perf_counter() + EXTRA * (time.perf_counter() - t0)
        while time.perf_counter() < end:
            pass
'''


def bench(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m harness` run from ``cwd``: the repository's own copy of the code (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(COLUMNS="200", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _commit_kernel(root: Path, revision: int, extra: float, message: str) -> str:
    (root / "kernels" / "planted.py").write_text(KERNEL.format(revision=revision, extra=extra))
    git(root, "commit", "-q", "-am", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def proj(tmp_path_factory) -> dict:
    """The repository: this checkout's tracked code (harness/, kernels/) and the planted
    kernel, the line registered and committed on `main`; on top of it, branch `regress`
    (commit 9 of 16 plants the slowdown), branch `flat` (16 commits, no change in speed) and
    branch `broken` (a commit whose kernel module does not import, then one that mends it)."""
    root = tmp_path_factory.mktemp("bisect") / "proj"
    root.mkdir()
    tracked = subprocess.run(["git", "ls-files", "-z", "harness", "kernels"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split("\0")
    for rel in filter(None, tracked):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    (root / "kernels" / "planted.py").write_text(KERNEL.format(revision=0, extra=0.0))
    (root / "registrations").mkdir()
    (root / "registrations" / f"{LINE}.toml").write_text(REGISTRATION)
    (root / "ledger").mkdir()
    (root / "ledger" / ".gitkeep").write_text("")
    (root / ".gitignore").write_text("ledger/*.lock\n__pycache__/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "user.name", "test")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the code and the bis line")
    reg = bench(root, "register", LINE)
    assert reg.returncode == 0, reg.stderr
    git(root, "add", "ledger")
    git(root, "commit", "-q", "-m", "register bis")
    base = git(root, "rev-parse", "HEAD")
    shas = {}
    git(root, "checkout", "-q", "-b", "regress")
    for i in range(1, N_COMMITS + 1):
        slow = i >= PLANTED_AT
        shas[i] = _commit_kernel(root, i, PLANTED_SLOWDOWN if slow else 0.0,
                                 f"commit {i}" + (": spin 30% longer" if i == PLANTED_AT else ""))
    git(root, "checkout", "-q", "-b", "flat", base)
    for i in range(1, N_COMMITS + 1):
        _commit_kernel(root, 100 + i, 0.0, f"flat commit {i}")
    git(root, "checkout", "-q", "-b", "broken", base)
    (root / "kernels" / "planted.py").write_text("def planted(:\n")
    git(root, "commit", "-q", "-am", "a kernel that does not import")
    _commit_kernel(root, 200, 0.0, "the kernel imports again")
    # HEAD is `main` (the base): the checkout bisect runs from has neither history's kernel.
    git(root, "checkout", "-q", "main")
    return {"root": root, "base": base, "regress": shas, "planted": shas[PLANTED_AT]}


def _probe_rows(root: Path) -> list[dict]:
    path = root / "ledger" / "_bisect.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_regression_planted_at_commit_9_of_16_is_found_in_at_most_6_probes(proj):
    root = proj["root"]
    before = len(_probe_rows(root))
    res = bench(root, "bisect", LINE, CONFIG, "--good", proj["base"], "--bad", "regress", "--device", "cpu")
    print(res.stdout)  # the probes and the evidence (pytest -rP shows them)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = _probe_rows(root)[before:]
    assert 3 <= len(rows) <= MAX_PROBES, res.stdout
    assert all(r["kind"] == "probe" for r in rows)
    planted = proj["planted"]
    assert f"first bad commit: {planted[:12]} commit {PLANTED_AT}: spin 30% longer" in res.stdout, res.stdout
    # Each row names the commit it measured, and that commit's own code measured it: only the
    # commits from the planted one on are slow, though the checkout bisect ran from is not.
    slow = {sha for i, sha in proj["regress"].items() if i >= PLANTED_AT}
    for r in rows:
        assert r["commit"] in {proj["base"], *proj["regress"].values()}
        assert r["subject"] == git(root, "log", "-1", "--format=%s", r["commit"])
        assert r["gate"] == {"candidate": True, "baseline": True}
        assert r["decision"] == (rule.BAD if r["commit"] in slow else rule.GOOD), r
        assert r["samples"]["n"] >= 30 and r["samples"]["measurements"]
        assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"]
        assert r["bisect"]["config_key"] == CONFIG and r["bisect"]["candidate"] == "planted"
    assert [r["role"] for r in rows[:2]] == ["good end", "bad end"]
    by_commit = {r["commit"]: r for r in rows}
    assert planted in by_commit and proj["regress"][PLANTED_AT - 1] in by_commit
    drop = by_commit[planted]["speedup"] / by_commit[proj["regress"][PLANTED_AT - 1]]["speedup"]
    assert 0.6 < drop < 0.9, drop  # ~1 / 1.3
    # The evidence: the last good and the first bad commit with their speedups and CIs.
    assert f"last good {proj['regress'][PLANTED_AT - 1][:12]}" in res.stdout
    # The rows are committed, in a chain that verifies.
    assert git(root, "status", "--porcelain", "--", "ledger") == ""
    check = bench(root, "ledger", "verify")
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_flat_history_ends_no_regression(proj):
    root = proj["root"]
    before = len(_probe_rows(root))
    # The CPU, shared with whatever else runs, moves a ratio by several percent between runs:
    # a regression counts from 10% here, and two measurements per end settle it.
    res = bench(root, "bisect", LINE, "n128", "--good", proj["base"], "--bad", "flat", "--device", "cpu",
                "--threshold", "0.1", "--budget", "2")
    print(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    flat_tip = git(root, "rev-parse", "flat")
    assert f"no regression between {proj['base'][:12]} and {flat_tip[:12]}" in res.stdout, res.stdout
    rows = _probe_rows(root)[before:]
    assert [r["role"] for r in rows] == ["good end", "bad end"]
    assert [r["commit"] for r in rows] == [proj["base"], flat_tip]
    assert all(r["decision"] == rule.GOOD for r in rows)


def test_a_commit_whose_code_cannot_run_the_probe_is_recorded_and_the_bisect_ends_unclear(proj):
    root = proj["root"]
    before = len(_probe_rows(root))
    res = bench(root, "bisect", LINE, "n128", "--good", "broken~1", "--bad", "broken", "--device", "cpu")
    assert res.returncode == 1, res.stdout + res.stderr
    broken, mended = git(root, "rev-parse", "broken~1"), git(root, "rev-parse", "broken")
    assert f"unclear between {broken[:12]} and {mended[:12]}: the good end could not be measured" in res.stdout
    (row,) = _probe_rows(root)[before:]  # nothing to compare the bad end with: it is not measured
    assert row["commit"] == broken and row["decision"] == rule.SKIP and row["speedup"] is None
    assert "its code cannot run the probe" in row["reason"] and "kernels/planted.py failed to import" in row["reason"]
    assert str(root) not in row["reason"] and "bench-bisect-" not in row["reason"]  # no path of this machine


def test_bisect_speaks_json_with_each_probe_on_stderr(proj):
    root = proj["root"]
    before = len(_probe_rows(root))
    res = bench(root, "bisect", LINE, "n128", "--good", "broken~1", "--bad", "broken", "--device", "cpu",
                "--format", "json")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)  # stdout is the one document
    broken, mended = git(root, "rev-parse", "broken~1"), git(root, "rev-parse", "broken")
    assert doc["outcome"] == rule.UNCLEAR and doc["exit_code"] == 1 and doc["between"] == [broken, mended]
    assert doc["line"] == LINE and doc["candidate"] == "planted" and doc["first_bad"] is None
    (probe,) = doc["probes"]
    (row,) = _probe_rows(root)[before:]
    assert probe["commit"] == row["commit"] == broken and probe["decision"] == row["decision"] == rule.SKIP
    assert probe["estimate"] is None and doc["ledger"] == "ledger/_bisect.jsonl" and doc["committed"] is True
    assert "good end" in res.stderr and broken[:12] in res.stderr  # the probe's line, beside the document


@pytest.mark.parametrize("args, says", [
    (("n128", "--good", "main", "--bad", "regress", "--format", "yaml"), "--format 'yaml': use table, json"),
    ((CONFIG.replace("n128", "n64"), "--good", "main", "--bad", "regress"), "is not in line 'bis'"),
    (("n128", "--good", "nosuchrev", "--bad", "regress"), "--good 'nosuchrev' names no commit"),
    (("n128", "--good", "regress", "--bad", "regress"), "are the same commit"),
    (("n128", "--good", "regress", "--bad", "main"), "is not an ancestor of --bad"),
    (("n128", "--good", "main", "--bad", "regress", "--candidate", "sdpa"), "is not a candidate of line 'bis': name one of"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(proj, args, says):
    root = proj["root"]
    head, rows = git(root, "rev-parse", "HEAD"), _probe_rows(root)
    res = bench(root, "bisect", LINE, *args, "--device", "cpu")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and says in res.stderr, res.stderr
    assert res.stdout == ""
    assert _probe_rows(root) == rows and git(root, "rev-parse", "HEAD") == head


def test_a_dirty_tree_is_refused(proj):
    root = proj["root"]
    (root / "notes.txt").write_text("uncommitted\n")
    try:
        res = bench(root, "bisect", LINE, "n128", "--good", "main", "--bad", "regress")
    finally:
        (root / "notes.txt").unlink()
    assert res.returncode == 2 and "uncommitted changes outside ledger/" in res.stderr, res.stderr


# -- the rule, on figures ------------------------------------------------------------------------

def _est(s, lo, hi):
    return rule.Estimate(s, lo, hi, 40, 1)


def test_the_ends_decide_regression_no_regression_or_unclear():
    good = _est(1.00, 0.97, 1.03)
    assert rule.ends(good, _est(0.77, 0.74, 0.80))[0] == rule.REGRESSION
    assert rule.ends(good, _est(0.99, 0.96, 1.02))[0] == rule.NO_REGRESSION
    assert rule.ends(good, _est(1.30, 1.25, 1.35))[0] == rule.NO_REGRESSION  # faster is no regression
    # apart but by less than the threshold, or too wide to say: measure more
    assert rule.ends(good, _est(0.96, 0.94, 0.955))[0] == rule.UNCLEAR
    assert rule.ends(good, _est(0.90, 0.60, 1.20))[0] == rule.UNCLEAR
    assert rule.ends(good, _est(math.nan, math.nan, math.nan))[0] == rule.UNCLEAR


def test_after_the_budget_ends_not_apart_are_no_regression():
    good, bad = _est(1.00, 0.90, 1.10), _est(0.92, 0.80, 1.02)
    assert rule.ends(good, bad)[0] == rule.UNCLEAR
    assert rule.ends(good, bad, last=True)[0] == rule.NO_REGRESSION
    assert rule.ends(good, _est(0.77, 0.74, 0.80), last=True)[0] == rule.REGRESSION


def test_a_probe_is_good_bad_or_unclear_against_the_ends():
    good, bad = _est(1.00, 0.97, 1.03), _est(0.77, 0.74, 0.80)
    assert rule.classify(_est(0.99, 0.95, 1.02), good, bad)[0] == rule.GOOD
    assert rule.classify(_est(1.20, 1.15, 1.25), good, bad)[0] == rule.GOOD  # faster than the good end
    assert rule.classify(_est(0.78, 0.75, 0.82), good, bad)[0] == rule.BAD
    assert rule.classify(_est(0.88, 0.79, 0.98), good, bad)[0] == rule.UNCLEAR  # overlaps both
    assert rule.classify(_est(0.88, 0.85, 0.91), good, bad)[0] == rule.UNCLEAR  # a step between the ends


def test_next_probe_halves_the_range_around_skipped_commits():
    assert rule.next_probe(-1, 15, set()) == 7
    assert rule.next_probe(7, 9, set()) == 8
    assert rule.next_probe(7, 9, {8}) is None
    assert rule.next_probe(-1, 15, {7}) == 6


def test_a_bisect_ledger_written_by_a_newer_bench_is_refused_before_any_probe(proj):
    root = proj["root"]
    path = root / "ledger" / "_bisect.jsonl"
    kept = path.read_bytes() if path.exists() else None
    n = len(kept.splitlines()) if kept else 0
    newer = {"schema": 2, "seq": n, "kind": "probe", "line": "_bisect", "prev_hash": "0" * 64, "hash": "0" * 64}
    with open(path, "a") as fh:
        fh.write(json.dumps(newer) + "\n")
    try:
        res = bench(root, "bisect", LINE, "n128", "--good", proj["base"], "--bad", "regress", "--device", "cpu")
    finally:
        if kept is None:
            path.unlink()
        else:
            path.write_bytes(kept)
    assert res.returncode == 2 and "ledger schema 2, newer than this bench understands" in res.stderr, res.stderr
    assert res.stdout == ""


def test_config_is_a_full_key_or_a_short_form_one_config_has():
    from harness.errors import UserError
    from harness.registration import schema as registration
    from harness.registration.line_ids import config_of

    reg = registration.load(REPO / "registrations" / "example.toml")
    full = "attention/b2/h4/kv4/n256/d64/float32/full"
    assert config_of(reg, full).key() == full
    assert config_of(reg, "kv4 n256 float32 full").key() == full  # as the line's tables show it
    assert config_of(reg, "kv4/n256/float32/full").key() == full
    with pytest.raises(UserError, match=r"matches 2 configs .*'kv4 n256 float32 full', 'kv2 n256 float32 full'"):
        config_of(reg, "n256 float32 full")
    with pytest.raises(UserError, match="is not in line 'example's grid"):
        config_of(reg, "n25 float32 full")  # a field matches whole, never a prefix
