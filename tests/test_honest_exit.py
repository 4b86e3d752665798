"""Issue 51 item 5: a sweep that measured nothing usable exits EXIT_NOTHING_USABLE (4) with
its reason as the first line on stderr, computed from the rows' own records."""

from __future__ import annotations

import json

import pytest

from harness.cli.sweep import EXIT_NOTHING_USABLE
from harness.ledger.rows import load
from harness.reporting.analysis.usable import nothing_usable, waited_share
from tests.conftest import TINY, init_repo, run_bench

# A timing budget no round can fit: every pair stops before min_samples (skipped, undersampled).
NO_TIME = TINY.replace("timeout_s = 5", "timeout_s = 0.000001")


def _row(kind: str, config_key: str, **payload) -> object:
    base = {"schema": 1, "seq": 1, "kind": kind, "line": "l", "time": "t", "commit": "c",
            "registration_sha256": "s", "registration_commit": "c", "harness_version": "0", "env": {},
            "prev_hash": "p", "hash": "h", "config": {}, "config_key": config_key, "candidate": "sdpa",
            "baseline": "torch_stack"}
    return load({**base, **payload})


def _skipped(config_key: str, n_rounds: int, n_waited: int) -> object:
    return _row("skipped", config_key, reason="timing stopped (timeout) with 3 kept rounds, fewer than "
                                              "min_samples 10: raise [timing] timeout_s", undersampled=True,
                timing={"n_rounds": n_rounds, "n_waited": n_waited, "stop_reason": "timeout"}, policy={},
                memory={})


def test_a_busy_host_is_named_with_its_run_queue_share():
    rows = [_skipped(f"k{i}", 100, 71) for i in range(16)]
    assert waited_share(rows) == pytest.approx(0.71)
    why = nothing_usable(rows, include_noisy=False, max_waited=0.25, line="example")
    assert why.startswith("16 of 16 configs could not be timed: the host's run queue held other work in "
                                 "71% of rounds")
    assert "run again on a quieter host, or raise [timing] timeout_s" in why


def test_a_quiet_host_gets_the_rows_own_reason_not_the_host():
    rows = [_skipped(f"k{i}", 10, 0) for i in range(3)]
    why = nothing_usable(rows, include_noisy=False, max_waited=0.25, line="example")
    assert why.startswith("3 of 3 configs gave no number the verdict can use (skipped: 3): timing stopped")
    assert "run queue" not in why and "bench sweep example --remeasure" in why


def test_one_usable_pair_is_enough():
    rows = [_skipped("k0", 10, 9), _row("incorrect", "k1", role="candidate", tag="mismatch", reason="wrong")]
    assert nothing_usable(rows, include_noisy=False, max_waited=0.25, line="l") is None
    assert nothing_usable([], include_noisy=False, max_waited=0.25, line="l") is None


@pytest.mark.slow
def test_an_all_skipped_sweep_exits_non_zero_with_its_reason(tmp_path):
    repo = init_repo(tmp_path / "proj", {"notime": NO_TIME})
    assert run_bench(repo, "register", "registrations/notime.toml").returncode == 0
    r = run_bench(repo, "sweep", "notime", "--device", "cpu", "--no-ceilings")
    assert r.returncode == EXIT_NOTHING_USABLE, r.stdout + r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith("bench: nothing usable: 2 of 2 configs "), r.stderr
    rows = [json.loads(x) for x in (repo / "ledger" / "notime.jsonl").read_text().splitlines()]
    assert {x["kind"] for x in rows[1:]} == {"skipped"}, [x["kind"] for x in rows]
    # The reason is the rows': either the host's run queue, or their own recorded reason.
    assert ("could not be timed: the host's run queue" in first
            or "timing stopped (timeout)" in first), first
