"""A line whose kernel fails the gate everywhere is decided, not left open (issue 47, item 1):
NO-GO with the failures as its evidence, committed and closed as any verdict — while pairs
never measured, or measured but not settled (skipped, throttled, rig-noisy), still refuse.
Through the real CLI: a real sweep of a hollow kernel (tests/zoo.py) from an installed plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.ledger.store import Ledger
from harness.ledger.format import read_rows
from tests.conftest import TINY, bench_env, git, init_repo, installed_dist

pytestmark = pytest.mark.slow

HOLLOW = '''\
from harness import kernel
from tests import zoo

kernel("softmax_omitted", workloads=("attention",), dtypes=("float32",), devices=("cpu",))(zoo.softmax_omitted)
'''
# The fields that place an outcome row: where it was measured, under which bar, of which pair.
PLACE = ("commit", "registration_sha256", "registration_commit", "harness_version", "code", "env", "config",
         "config_key", "candidate", "baseline")


def _bench(tmp_path, repo):
    plugin = installed_dist(tmp_path / "site", "hollow", "0.1", "[bench.kernels]\nhollow = hollow_kernels\n",
                            {"hollow_kernels": HOLLOW})
    env = {**bench_env(), "PYTHONPATH": os.pathsep.join([str(plugin), bench_env()["PYTHONPATH"]])}

    def bench(*args, rc=0):
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=900)
        assert r.returncode == rc, (args, r.stdout, r.stderr)
        return r

    return bench


def _outcomes(repo, line):
    return [r for r in read_rows(repo / "ledger" / f"{line}.jsonl") if r.kind in ("result", "incorrect", "skipped")]


def test_a_line_whose_kernel_fails_everywhere_closes_no_go_with_the_failures(tmp_path):
    wrong = TINY.replace('candidate = "sdpa"', 'candidate = "softmax_omitted"').replace(
        "include_noisy = true", "include_noisy = true\nallow_missing = true")
    repo = init_repo(tmp_path / "proj", {"wrong": wrong})
    bench = _bench(tmp_path, repo)
    bench("register", "wrong")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered")
    early = bench("verdict", "wrong", rc=2)  # pairs never measured: refused, as before
    assert "no outcome yet" in early.stderr
    bench("sweep", "wrong", "--no-ceilings")
    first, second = _outcomes(repo, "wrong")
    assert first.kind == second.kind == "incorrect"

    # One pair made a memory skip where it was measured: not settled, it could still pass.
    Ledger(repo, "wrong").append("skipped", {**{k: getattr(second, k) for k in PLACE}, "predicted_bytes": 2,
                                             "available_bytes": 1, "reason": "predicted peak > available"})
    git(repo, "commit", "-qam", "a skip at the sweep's commit")
    unsettled = bench("verdict", "wrong", "--no-commit", rc=2)
    assert len(unsettled.stderr.strip().splitlines()) == 1
    assert (f"every pair decided so far failed its kernel (1), but 1 are not settled (skipped: 1: softmax_omitted @ "
            f"{second.config_key} (skipped)) and could still pass — run `bench sweep wrong --remeasure`"
            in unsettled.stderr), unsettled.stderr
    bench("sweep", "wrong", "--no-ceilings", "--remeasure")
    again = _outcomes(repo, "wrong")[-1]
    assert again.kind == "incorrect" and again.config_key == second.config_key

    before = (repo / "ledger" / "wrong.jsonl").read_bytes()
    dry = bench("verdict", "wrong", "--no-commit", rc=1)
    assert (repo / "ledger" / "wrong.jsonl").read_bytes() == before
    out = " ".join(dry.stdout.split())
    assert "decided on failures: every pair the bar decides on failed its kernel (2 pairs)" in out, dry.stdout
    for r in (first, again):
        assert f"softmax_omitted @ {r.config_key}: incorrect [{r.tag}] (row {r.seq}): {' '.join(r.reason.split())}" \
               in out
    assert "NO-GO" in out

    v = bench("verdict", "wrong", "--format", "json", rc=1)
    doc = json.loads(v.stdout)
    assert doc["outcome"] == "NO-GO" and doc["written"] and doc["commit"] == git(repo, "rev-parse", "HEAD")
    row = read_rows(repo / "ledger" / "wrong.jsonl")[-1]
    assert row.kind == "verdict" and row.outcome == "NO-GO" and row.n_correct == 0
    assert [(f["seq"], f["state"], f["tag"], f["reason"]) for f in row.failures] == [
        (r.seq, "incorrect", r.tag, r.reason) for r in (first, again)]
    assert sorted(row.decided_on) == [first.seq, again.seq]
    assert git(repo, "status", "--porcelain") == ""
    closed = bench("sweep", "wrong", "--no-ceilings", rc=2)
    assert "is closed: its verdict (NO-GO)" in closed.stderr
    assert "closed NO-GO" in bench("status").stdout
    bench("report", "wrong", "--out", str(tmp_path / "rep"))
    assert bench("ledger", "verify", "wrong").returncode == 0


def test_a_bar_over_a_candidate_that_failed_is_unknown_and_one_that_passed_still_decides(tmp_path):
    """Some candidates failed (existing behaviour, kept): a clause over the failed one has no
    value (unknown, no GO); failures do not force NO-GO where the bar has correct rows to read."""
    from harness.registration import bar as barlang
    from harness.vocab.outcomes import latest_outcomes
    from harness.governance.verdict import bar_rows

    go = ('min(speedup where candidate == "softmax_omitted") >= 0.01 and '
          'min(speedup where candidate == "sdpa") >= 0.01')
    mixed = TINY.replace('candidate = "sdpa"', 'candidates = ["sdpa", "softmax_omitted"]').replace(
        "seq_len = [32, 48]", "seq_len = [32]").replace('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"',
                                                        f"go = '{go}'").replace("timeout_s = 5", "timeout_s = 30")
    repo = init_repo(tmp_path / "proj", {"mixed": mixed})
    bench = _bench(tmp_path, repo)
    bench("register", "mixed")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "registered")
    bench("sweep", "mixed", "--no-ceilings")
    # sdpa's result needs min_samples kept rounds: timeout_s 30 gives a busy host the time.
    assert sorted(r.kind for r in _outcomes(repo, "mixed")) == ["incorrect", "result"], \
        [r.reason for r in _outcomes(repo, "mixed")]
    v = bench("verdict", "mixed", "--no-commit", rc=1)
    clauses = [ln for ln in v.stdout.splitlines() if "→" in ln]
    assert "fail" in clauses[0] and "→ — over 0 rows" in clauses[0]  # the failed candidate: unknown
    assert "pass" in clauses[1] and "decided on failures" not in v.stdout and "NO-GO" in v.stdout
    rows, _ = bar_rows(latest_outcomes(read_rows(repo / "ledger" / "mixed.jsonl")), include_noisy=True)
    assert barlang.evaluate(barlang.parse('min(speedup where candidate == "sdpa") >= 0.01'), rows).passed
    assert not barlang.evaluate(barlang.parse("pass_rate == 1.0"), rows).passed
