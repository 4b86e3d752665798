"""Time that was not spent running is not a sample (issue 25): host calls that waited on a run
queue drop their round, and samples that sit on a scheduler tick make a row rig-noisy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.measurement.stats import QUANTUM_MIN_SAMPLES, quantum
from harness.measurement.timing import HostTimer, TimingPolicy, measure
from harness.measurement.timing.summary import WAIT_REASON
from harness.measurement.timing.timers import (
    WAIT_DROP_MS, WAIT_SOURCE_SCHEDSTAT, WAIT_SOURCE_THREAD_TIME, CallCpu, RunQueueClock)
from harness.measurement.timing.results import rig_noise
from tests.timers import ScriptedTimer

ARMS = ("candidate", "baseline", "control")
TICKS = (1.0, 4.0, 10.0)


def policy(**kw) -> TimingPolicy:
    base = dict(warmup_ms=10.0, min_samples=10, max_samples=60, min_time_ms=0.0, noise_target=0.005,
                timeout_s=1e5)
    base.update(kw)
    return TimingPolicy(**base)


def noisy(base_ms: float, seed: int):
    rng = np.random.default_rng(seed)
    return lambda k, t: base_ms * float(np.exp(0.05 * rng.standard_normal()))


def run(durations, pol, **kw):
    timer = ScriptedTimer(durations, **kw)
    m = measure({n: (lambda s: None) for n in durations}, n_slots=1, policy=pol, device="cpu", timer=timer)
    return m, timer


# -- waited calls drop their round ----------------------------------------------------------
def test_a_call_that_waited_drops_its_whole_round_counted_with_its_reason():
    # Two of the candidate's calls in the measured rounds waited 4 ms on a run queue (the
    # priming round and the warm-up take its first calls; virtual time makes this exact).
    waited_calls = set()

    def wait(k, t):
        if k in (14, 19):
            waited_calls.add(k)
            return 4.0
        return 0.0

    # Wall times of at least WAIT_DROP_MS: a wait counts only up to the wall time it delayed.
    durs = {"candidate": noisy(1.0, 1), "baseline": noisy(0.7, 2), "control": noisy(0.7, 3)}
    m, _ = run(durs, policy(warmup_ms=5.0), waits={"candidate": wait, "baseline": 0.01})
    assert waited_calls and m.n_waited == len(waited_calls) == m.n_dropped
    assert not m.throttled  # 2 of ≥ 10 rounds: under max_drop_fraction
    dropped = [r for r in m.rounds if r.dropped]
    assert all(r.waited == ("candidate",) and WAIT_REASON in r.drop_reasons for r in dropped)
    # The whole round goes: every arm's sample of it is a dropped sample.
    assert all(len(a.dropped_samples) == len(dropped) for a in m.arms.values())
    row = json.loads(json.dumps(m.to_row()))
    assert row["n_waited"] == len(dropped) and row["wait_source"] == "scripted"
    assert set(row["rounds"]["waited"]) == {str(r.index) for r in dropped}
    c = row["cpu"]["candidate"]
    assert c["waited"] == len(dropped) and c["calls"] == len(m.rounds)
    assert c["wait_ms"] == 0.0 and c["cpu_ms"] == pytest.approx(1.0, rel=0.2)
    assert row["cpu"]["baseline"]["waited"] == 0  # 0.01 ms: a wake-up, not a descheduling
    assert WAIT_DROP_MS > 0.01


def test_waited_rounds_are_not_samples_and_many_of_them_make_the_row_rig_noisy():
    from harness.measurement.timing.criteria import WAIT_MAX_ROUNDS_FACTOR
    from harness.measurement.timing.results import rig_noise

    durs = {n: noisy(0.6, i) for i, n in enumerate(ARMS)}
    pol = policy(max_samples=40)
    m, _ = run(durs, pol, waits={"baseline": lambda k, t: 8.0 if k % 2 else 0.0})
    # Half the rounds waited: they are dropped, but they are not samples, so the measurement
    # ran on to max_samples undisturbed rounds; the kept calls vouch for themselves.
    assert not m.throttled and m.n_waited > 0.25 * len(m.rounds)
    assert len(m.rounds) - m.n_waited == pol.max_samples <= len(m.rounds) <= WAIT_MAX_ROUNDS_FACTOR * pol.max_samples
    assert m.to_row()["cpu"]["baseline"]["waited"] == m.n_waited
    why = rig_noise(1.0, 0.02, {}, {}, (m.n_waited, len(m.rounds)), pol.max_drop_fraction)
    assert len(why) == 1 and f"{m.n_waited} of {len(m.rounds)} rounds" in why[0] and "loaded host" in why[0]
    assert rig_noise(1.0, 0.02, {}, {}, (1, len(m.rounds)), pol.max_drop_fraction) == []


def test_a_timer_that_cannot_see_waits_drops_nothing():
    m, _ = run({n: noisy(0.6, i) for i, n in enumerate(ARMS)}, policy())
    assert m.n_waited == 0 and m.cpu == {} and m.wait_source is None


# -- samples on a scheduler tick ------------------------------------------------------------
def test_issue_25_samples_sit_on_a_4ms_tick():
    q = quantum([16.00, 16.01, 15.99, 16.00, 16.02, 24.05, 16.00, 15.98, 16.00, 16.00])
    assert q is not None and q.tick_ms == 4.0 and q.share == 1.0 and q.rule == "tick"
    assert "4 ms tick" in q.describe() and "100%" in q.describe()
    # Measured here: a 0.63 ms sdpa call with 2 busy processes on 2 cores (sorted, every 5th).
    waited = [0.63, 7.82, 7.88, 7.96, 7.99, 7.99, 7.99, 8.00, 8.00, 8.00, 8.00, 8.00, 8.01, 8.02, 8.08,
              8.10, 8.14, 8.15, 8.34, 11.38]
    assert quantum(waited).tick_ms == 4.0


def test_continuous_samples_sit_on_no_tick():
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert quantum(np.round(rng.uniform(0.45, 0.7, 100), 6)) is None  # µs resolution, sub-tick
        assert quantum(rng.uniform(2.0, 40.0, 30)) is None                 # spread over many ticks
    assert quantum([16.0] * (QUANTUM_MIN_SAMPLES - 1)) is None             # too few to say


def test_few_distinct_values_are_a_timer_quantum():
    q = quantum([0.0, 15.6, 15.6, 0.0, 15.6, 0.0, 0.0, 15.6, 15.6, 0.0], ticks_ms=())
    assert q is not None and q.rule == "distinct" and q.distinct == 2 and q.tick_ms == pytest.approx(15.6)
    with pytest.raises(ValueError):
        quantum([1.0] * 10, ticks_ms=(0.0,))


def test_a_row_with_an_arm_on_a_tick_is_rig_noisy_naming_the_arm_and_the_tick():
    pattern = [16.00, 24.05, 32.02, 48.00, 16.01, 24.00, 32.0, 15.99]
    durs = {"candidate": lambda k, t: pattern[k % len(pattern)],
            "baseline": lambda k, t: pattern[(k + 3) % len(pattern)] * 1.5,
            "control": lambda k, t: pattern[(k + 3) % len(pattern)] * 1.5}
    m, _ = run(durs, policy(max_samples=30), ticks_ms=TICKS)
    assert set(m.quanta) == set(ARMS) and m.quanta["candidate"]["tick_ms"] == 4.0
    why = rig_noise(m.control_ratio, 0.02, m.host_gaps, m.quanta)
    assert any(w.startswith("candidate:") and "4 ms tick" in w and "%" in w for w in why)
    # Continuous samples under the same timer: no quantum, a clean row.
    m2, _ = run({n: noisy(0.6, i) for i, n in enumerate(ARMS)}, policy(), ticks_ms=TICKS)
    assert m2.quanta == {}
    assert rig_noise(1.0, 0.02, {}, m2.quanta) == []


# -- the real host timer ----------------------------------------------------------------------
def test_run_queue_deltas_count_threads_born_and_ignore_threads_ended():
    before = {"1": (100, 10), "2": (50, 5)}
    after = {"1": (300, 15), "3": (40, 2)}  # 2 ended, 3 born during the call
    assert RunQueueClock.delta(before, after) == (240, 7)


def test_a_wait_longer_than_the_call_took_was_not_inside_it():
    # Measured: a 0.03 ms call read beside 4 ms a worker waited outside its window.
    assert not CallCpu(0.03, 0.03, 0.03, 4.0, WAIT_SOURCE_SCHEDSTAT).waited
    assert CallCpu(8.0, 0.5, 0.6, 7.5, WAIT_SOURCE_SCHEDSTAT).waited
    assert not CallCpu(0.6, 0.6, 1.2, 0.05, WAIT_SOURCE_SCHEDSTAT).waited  # a wake-up


def test_host_timer_records_cpu_time_and_waits_of_a_real_kernel():
    import torch

    from bench_kernels.sdpa import _call

    q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
    out = torch.empty_like(q)
    call = lambda slot: _call(q, k, v, out, False, 0.125, None)  # noqa: E731
    timer = HostTimer()
    m = measure({"sdpa": call, "again": call}, n_slots=1, device="cpu", timer=timer,
                policy=TimingPolicy(warmup_ms=5.0, min_samples=5, max_samples=30, min_time_ms=0.0,
                                    noise_target=0.05, timeout_s=3.0))
    assert m.wait_source == timer.wait_source
    assert timer.wait_source in (WAIT_SOURCE_SCHEDSTAT, WAIT_SOURCE_THREAD_TIME)
    for arm, c in m.cpu.items():
        assert c["calls"] == len(m.rounds) and 0 <= c["waited"] <= len(m.rounds)
        assert c["waited"] == sum(arm in r.waited for r in m.rounds)
        # Waited rounds are not samples: the measurement ran on until it had kept rounds, whose
        # calls ran on a CPU for no longer than they took.
        assert m.arms[arm].samples and c["cpu_ms"] is not None
        assert 0 < c["cpu_ms"] <= 1.5 * m.arms[arm].stats.max and c["wait_ms"] < WAIT_DROP_MS
        if timer.wait_source == WAIT_SOURCE_SCHEDSTAT:
            assert c["process_cpu_ms"] > 0
    assert m.n_waited == sum(bool(r.waited) for r in m.rounds)
    json.dumps(m.to_row())


def test_without_schedstat_the_host_timer_falls_back_to_thread_time(monkeypatch):
    monkeypatch.setattr(RunQueueClock, "open", classmethod(lambda cls: None))
    timer = HostTimer()
    assert timer.wait_source == WAIT_SOURCE_THREAD_TIME
    ms = timer.time_call(lambda: sum(range(20000)), arm="a")
    c = timer.last_cpu["a"]
    assert c.source == WAIT_SOURCE_THREAD_TIME and c.process_cpu_ms is None
    assert c.wall_ms == ms and c.wait_ms == pytest.approx(max(ms - c.cpu_ms, 0.0)) and not math.isnan(c.cpu_ms)
