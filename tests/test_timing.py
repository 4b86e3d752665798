"""The timing protocol on the CPU, driven by a ScriptedTimer (virtual, deterministic time)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from harness.errors import UserError
from harness.measurement.stats import rel_noise
from harness.measurement.timing import (
    FLUSH_FLOOR_BYTES, MAX_ROTATION_SLOTS, ROTATION_FACTOR, HostTimer, Measurement, TimingPolicy,
    flush_bytes, measure, rotation_slots)
from tests.timers import ScriptedTimer

ARMS3 = ("candidate", "baseline", "control")


def noop(slot: int) -> None:
    pass


def arms_of(names=ARMS3, log=None):
    def make(name):
        def fn(slot):
            if log is not None:
                log.append((name, slot))
        return fn
    return {n: make(n) for n in names}


def noisy(base_ms: float, sigma: float, seed: int):
    rng = np.random.default_rng(seed)
    return lambda k, t: base_ms * float(np.exp(sigma * rng.standard_normal()))


def policy(**kw) -> TimingPolicy:
    base = dict(warmup_ms=100.0, min_samples=10, max_samples=500, min_time_ms=0.0, noise_target=0.005,
                timeout_s=1e5)
    base.update(kw)
    return TimingPolicy(**base)


def run(durations, pol, n_slots=1, log=None, **kw) -> tuple[Measurement, ScriptedTimer]:
    timer = ScriptedTimer(durations, **kw)
    m = measure(arms_of(tuple(durations), log), n_slots=n_slots, policy=pol, device="cpu", timer=timer)
    return m, timer


# -- policy ---------------------------------------------------------------------------------
def test_policy_defaults_are_named_and_valid():
    p = TimingPolicy()
    assert p.throttle_threshold == 0.85 and p.control_tolerance == 0.02 and p.mode in ("cold", "hot", "graph")
    assert TimingPolicy.from_mapping(None) == p
    assert TimingPolicy.from_mapping({"mode": "graph", "min_samples": 5}).mode == "graph"


@pytest.mark.parametrize("bad, key", [
    ({"mode": "warm"}, "mode"), ({"min_samples": 0}, "min_samples"), ({"min_samples": 2.5}, "min_samples"),
    ({"noise_target": 0}, "noise_target"), ({"throttle_threshold": 1.5}, "throttle_threshold"),
    ({"timeout_s": True}, "timeout_s"), ({"max_drop_fraction": -0.1}, "max_drop_fraction"),
    ({"min_samples": 50, "max_samples": 10}, "min_samples"), ({"warmup": 10}, "warmup"),
])
def test_policy_rejects_bad_values_naming_the_key(bad, key):
    with pytest.raises(UserError, match=key):
        TimingPolicy.from_mapping(bad)


def test_policy_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TimingPolicy().mode = "hot"


def test_flush_and_rotation_sizes():
    h200_l2 = 60 * 2**20
    assert flush_bytes(h200_l2) == FLUSH_FLOOR_BYTES          # 4 × 60 MiB < 256 MiB floor
    assert flush_bytes(100 * 2**20) == 400 * 2**20
    n = rotation_slots(10 * 2**20, h200_l2)
    assert n * 10 * 2**20 >= ROTATION_FACTOR * h200_l2 and (n - 1) * 10 * 2**20 < ROTATION_FACTOR * h200_l2
    assert rotation_slots(10 * 2**30, h200_l2) == 1
    assert rotation_slots(1024, h200_l2) == MAX_ROTATION_SLOTS
    with pytest.raises(ValueError):
        rotation_slots(0, h200_l2)


# -- stopping rules -------------------------------------------------------------------------
def test_stops_at_min_samples_when_noise_free():
    m, _ = run({"a": 1.0, "b": 2.0}, policy(min_samples=12))
    assert m.stop_reason == "noise_target" and len(m.rounds) == 12
    assert m.arms["a"].stats.n == 12 and m.arms["a"].stats.rel_noise == 0.0


def test_min_time_holds_the_stop_back():
    # 3 arms × 10 ms = 30 ms per round: 1000 ms needs 34 rounds although noise is 0 after 6.
    m, _ = run({n: 10.0 for n in ARMS3}, policy(min_samples=6, min_time_ms=1000.0))
    assert m.stop_reason == "noise_target" and len(m.rounds) == 34


def test_stops_at_first_round_meeting_the_noise_target():
    durations = {"a": noisy(1.0, 0.01, 1), "b": noisy(2.0, 0.01, 2)}
    m, _ = run(durations, policy(min_samples=10))
    assert m.stop_reason == "noise_target"
    n = len(m.rounds)
    assert 10 < n < 500
    assert all(a.stats.rel_noise <= 0.005 for a in m.arms.values())
    # one round earlier some arm was still above the target
    assert any(rel_noise(a.samples[:-1]) > 0.005 for a in m.arms.values())


def test_stops_at_max_samples_when_too_noisy():
    m, _ = run({"a": noisy(1.0, 0.3, 3), "b": noisy(1.0, 0.3, 4)}, policy(max_samples=40))
    assert m.stop_reason == "max_samples" and len(m.rounds) == 40


def test_stops_at_timeout():
    m, timer = run({"a": noisy(10.0, 0.3, 5), "b": noisy(10.0, 0.3, 6)}, policy(timeout_s=2.0))
    assert m.stop_reason == "timeout"
    assert 2.0 <= m.elapsed_s < 2.0 + 0.2  # stops within one round of the deadline


def test_timeout_during_warm_up_gives_an_empty_but_valid_measurement():
    m, _ = run({"a": 10.0}, policy(warmup_ms=10_000, timeout_s=0.5))
    assert m.stop_reason == "timeout" and m.rounds == () and m.arms["a"].stats.n == 0
    assert "warm-up" in m.timing_note
    json.dumps(m.to_row())


def test_warm_up_runs_by_time_budget_after_the_priming_round():
    # priming round (20 ms) not counted; 100 ms of warm-up at 20 ms/round = 5 rounds.
    m, timer = run({"a": 10.0, "b": 10.0}, policy(warmup_ms=100.0))
    assert m.warmup_rounds == 5
    assert len(timer.calls) == 2 * (1 + 5 + len(m.rounds))
    assert m.rounds[0].t0 == pytest.approx(0.12)


# -- interleaving, rotation, rounds ---------------------------------------------------------
def test_rounds_interleave_through_every_order():
    m, timer = run({n: 1.0 for n in ARMS3}, policy(min_samples=12, max_samples=12))
    orders = [r.order for r in m.rounds]
    assert len(set(orders[:6])) == 6 and orders[6:12] == orders[:6]  # all 3! orders, cycled
    measured = [arm for arm, _ in timer.calls[-3 * len(m.rounds):]]
    assert measured == [a for r in m.rounds for a in r.order]
    firsts = [o[0] for o in orders]
    assert all(firsts.count(a) == len(orders) // 3 for a in ARMS3)
    # and every arm follows every other arm equally often within rounds (carryover balance)
    follows = [(o[i], o[i + 1]) for o in orders for i in range(2)]
    assert len({follows.count(p) for p in set(follows)}) == 1 and len(set(follows)) == 6


@pytest.mark.parametrize("n", [5, 6, 7, 12, 13])
def test_many_arms_are_balanced_for_first_place_and_predecessor(n):
    # Past MAX_PERMUTED_ARMS, blocks of a Williams design: 2n orders, chained, in which every
    # arm runs first, and directly after every other arm, equally often.
    from harness.measurement.timing.orders import MAX_PERMUTED_ARMS, ORDER_BLOCKS, round_orders

    names = tuple(f"arm{i}" for i in range(n))
    assert n > MAX_PERMUTED_ARMS
    orders = round_orders(names)
    assert len(orders) == ORDER_BLOCKS * 2 * n
    for b in range(ORDER_BLOCKS):
        block = orders[b * 2 * n:(b + 1) * 2 * n]
        assert all(sorted(o) == sorted(names) for o in block)
        assert all(nxt[0] == cur[-1] for cur, nxt in zip(block, block[1:] + block[:1]))
        firsts = [o[0] for o in block]
        assert {firsts.count(a) for a in names} == {2}
        follows = [(o[i], o[i + 1]) for o in block for i in range(n - 1)]
        assert len(set(follows)) == n * (n - 1)  # every ordered pair ...
        assert {follows.count(p) for p in set(follows)} == {2}  # ... equally often


@pytest.mark.parametrize("n", range(1, 5))
def test_round_boundaries_are_balanced_too(n):
    # The last call of a round and the first of the next are neighbours as well. Over the
    # cycle of orders, as one sequence of calls, every arm follows every other arm equally
    # often, and follows itself (only at a boundary: orders are chained) equally often;
    # with every permutation (up to 4 arms) two calls back as well.
    from collections import Counter

    from harness.measurement.timing.orders import round_orders

    names = tuple(f"arm{i}" for i in range(n))
    orders = round_orders(names)
    assert all(nxt[0] == cur[-1] for cur, nxt in zip(orders, orders[1:] + orders[:1]))
    calls = [a for o in orders for a in o]
    for lag in (1, 2):
        follows = Counter(zip(calls[-lag:] + calls[:-lag], calls))  # cyclic: (before, after)
        assert len({follows[(a, a)] for a in names}) == 1
        assert len({follows[(a, b)] for a in names for b in names if a != b}) <= 1
        assert sum(follows.values()) == len(calls)


def test_five_arms_two_and_three_calls_back_are_nearly_even():
    # A Williams square alone puts the same arm two calls before another in most rounds
    # (one of two identical decode arms then read 8.5% slower beside a K/V copy). The
    # renamed blocks keep every ordered pair within a few counts of the others at lags 1-3
    # over the first 200 rounds (about 40 each), and each arm's own repeats alike.
    from collections import Counter

    from harness.measurement.timing.orders import round_orders

    names = tuple(f"arm{i}" for i in range(5))
    calls = [a for o in round_orders(names)[:200] for a in o]
    for lag in (1, 2, 3):
        follows = Counter(zip(calls[:-lag], calls[lag:]))
        off = [follows[(a, b)] for a in names for b in names if a != b]
        same = [follows[(a, a)] for a in names]
        assert max(off) - min(off) <= 5 and max(same) - min(same) <= 3, (lag, off, same)


def test_every_call_takes_the_next_slot_of_a_global_rotation():
    log: list = []
    m, _ = run({"a": 1.0, "b": 1.0}, policy(min_samples=10), n_slots=5, log=log)
    assert [s for _, s in log] == [i % 5 for i in range(len(log))]


def test_rounds_record_contiguous_host_timestamps():
    m, _ = run({"a": 1.0, "b": 2.0}, policy(min_samples=10), overhead_ms=0.5)
    for r, nxt in zip(m.rounds, m.rounds[1:]):
        assert r.t1 - r.t0 == pytest.approx(0.004)  # 1 + 2 ms + 2 × 0.5 ms overhead
        assert nxt.t0 == pytest.approx(r.t1)
    assert [r.index for r in m.rounds] == list(range(len(m.rounds)))


def test_samples_are_per_call_durations_and_stats_derive_from_them():
    seq = [1.0 + 0.01 * (k % 7) for k in range(1000)]
    m, _ = run({"a": seq}, policy(min_samples=20, noise_target=0.001))
    # calls: 1 priming + warm-up rounds, then measured ones
    offset = 1 + m.warmup_rounds
    assert m.arms["a"].samples == tuple(seq[offset:offset + len(m.rounds)])
    assert m.arms["a"].stats.median == pytest.approx(float(np.median(m.arms["a"].samples)))


# -- results --------------------------------------------------------------------------------
def test_measurement_is_frozen_and_serializable():
    m, _ = run({n: v for n, v in zip(ARMS3, (1.0, 1.25, 1.25))}, policy(min_samples=10))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.stop_reason = "x"
    row = json.loads(json.dumps(m.to_row()))
    assert row["stop_reason"] == "noise_target" and row["effective_mode"] == "host"
    assert row["arms"]["candidate"]["samples_ms"] == [1.0] * 10
    from harness.measurement.timing.orders import round_orders

    assert row["rounds"]["first"][:6] == [o[0] for o in round_orders(ARMS3)]
    assert row["policy"]["throttle_threshold"] == 0.85


def test_speedup_and_control():
    m, _ = run({"candidate": 1.0, "baseline": 1.25, "control": 1.25}, policy(min_samples=10))
    r, lo, hi = m.speedup()
    assert r == pytest.approx(1.25) and lo == pytest.approx(1.25) and hi == pytest.approx(1.25)
    assert m.control_ratio == pytest.approx(1.0) and m.control_ok is True
    m2, _ = run({"candidate": 1.0, "baseline": 1.25, "control": 1.3}, policy(min_samples=10))
    assert m2.control_ok is False


def test_cpu_degrades_every_mode_to_host_timing_and_says_so():
    for mode in ("cold", "hot", "graph"):
        m, _ = run({"a": 1.0}, policy(mode=mode))
        assert m.mode == mode and m.effective_mode == "host" and m.graph_replays == 1
        assert "degrades to host timing" in m.timing_note


def test_real_host_timer_on_cpu_without_clocks():
    calls = []
    pol = TimingPolicy(warmup_ms=5.0, min_samples=6, max_samples=50, min_time_ms=5.0, timeout_s=5.0)
    m = measure({"a": lambda s: calls.append(s), "b": lambda s: sum(range(100))}, n_slots=2, policy=pol,
                device="cpu")
    assert m.timer == HostTimer.name and 6 <= len(m.rounds) <= 50
    assert m.clock is None and m.clock_note == "CPU: no GPU clocks to monitor"
    assert all(x >= 0 for x in m.arms["a"].samples)


def test_bad_arguments():
    with pytest.raises(ValueError):
        measure({}, n_slots=1, policy=policy(), device="cpu", timer=ScriptedTimer({}))
    with pytest.raises(ValueError):
        measure({"a": noop}, n_slots=0, policy=policy(), device="cpu", timer=ScriptedTimer({"a": 1.0}))


def test_cuda_device_without_cuda_is_a_user_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(UserError, match="cuda"):
        measure({"a": noop}, n_slots=1, policy=policy(), device="cuda", timer=ScriptedTimer({"a": 1.0}))


def test_empty_stats_are_json_safe():
    m, _ = run({"a": 10.0}, policy(warmup_ms=10_000, timeout_s=0.5))
    row = m.to_row()
    assert row["arms"]["a"]["stats"]["median"] == "NaN" and not math.isnan(row["elapsed_s"])  # jsonsafe's spelling


def test_rows_are_strict_json_with_the_ledgers_spelling_of_non_finite_numbers():
    # A control that reads 0 ms makes the control ratio infinite: the row spells it as the
    # ledger does (one sanitiser, harness.jsonsafe), and strict JSON encodes the whole row.
    pol = policy(warmup_ms=0.0, min_samples=6, max_samples=6, noise_target=1.0)
    with np.errstate(divide="ignore"):
        m, _ = run({"candidate": 1.0, "baseline": 1.0, "control": 0.0}, pol)
        row, ratio = m.to_row(), m.control_ratio
    assert ratio == math.inf and row["control_ratio"] == "Infinity" and row["control_ok"] is False
    json.dumps(row, allow_nan=False)


# -- lead calls -----------------------------------------------------------------------------
def test_lead_calls_run_untimed_on_earlier_slots_just_before_each_timed_call():
    log: list[tuple[str, int]] = []
    pol = policy(lead_calls=2, min_samples=12, max_samples=12, warmup_ms=0.0, noise_target=1.0)
    m, timer = run({"baseline": 1.0, "control": 1.0}, pol, n_slots=8, log=log)
    # Every timed call (the timer's record) is preceded by exactly two calls of the same arm,
    # on the two slots before its own (already timed, not timed again for 8 calls).
    timed = iter(timer.calls)
    i = 0
    n_timed = 0
    while i < len(log):
        (a1, s1), (a2, s2), (a3, s3) = log[i:i + 3]
        arm, _ = next(timed)
        assert a1 == a2 == a3 == arm
        assert (s1, s2) == ((s3 - 1) % 8, (s3 - 2) % 8)
        i += 3
        n_timed += 1
    assert n_timed == len(timer.calls)
    # Untimed: the samples are the scripted durations alone, and the policy is on the row.
    assert set(m.arms["baseline"].samples) == {1.0}
    assert m.to_row()["policy"]["lead_calls"] == 2


def test_lead_calls_default_to_none_and_graph_mode_refuses_them():
    log: list[tuple[str, int]] = []
    _, timer = run({"baseline": 1.0}, policy(min_samples=3, max_samples=3, warmup_ms=0.0), n_slots=4, log=log)
    assert len(log) == len(timer.calls)
    with pytest.raises(UserError, match="lead_calls.*graph"):
        TimingPolicy(mode="graph", lead_calls=1)
    with pytest.raises(UserError, match="lead_calls"):
        TimingPolicy(lead_calls=-1)
    with pytest.raises(UserError, match="lead_calls"):
        TimingPolicy.from_mapping({"lead_calls": 1.5})
