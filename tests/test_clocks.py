"""Clock monitoring and the throttle policy, with scripted clocks in virtual time."""

from __future__ import annotations

import time

import pytest

from harness.measurement.clocks import (
    ClockMonitor, ClockUnavailable, NvmlClockSource, open_monitor, reason_names, reference_clock)
from harness.measurement.timing import HostTimer, TimingPolicy, measure
from tests.timers import ScriptedClockSource, ScriptedTimer

IDLE, LOAD = 345.0, 1980.0
ARMS = ("candidate", "baseline", "control")
POL = TimingPolicy(warmup_ms=100.0, min_samples=40, max_samples=40, min_time_ms=0.0, timeout_s=1e5)


def run(sm, reasons=None, pol=POL, ms=10.0, **src_kw):
    timer = ScriptedTimer({a: ms for a in ARMS})
    mon = ClockMonitor(ScriptedClockSource(sm, reasons=reasons, **src_kw), hz=200)
    m = measure({a: (lambda s: None) for a in ARMS}, n_slots=1, policy=pol, device="cpu", timer=timer, monitor=mon)
    return m


def rounds_of_a_clean_run():
    """Round windows are deterministic: learn them from a run at constant clocks."""
    return [(r.t0, r.t1) for r in run(lambda t: LOAD).rounds]


def in_any(t, spans):
    return any(a < t < b for a, b in spans)


# -- readings -------------------------------------------------------------------------------
def test_reason_names_maps_the_nvml_bits():
    assert reason_names(0) == ()
    assert reason_names(0x1 | 0x4 | 0x40) == ("gpu_idle", "sw_power_cap", "hw_thermal_slowdown")
    assert reason_names(0x8 | 0x80 | 0x100) == ("hw_slowdown", "hw_power_brake_slowdown", "display_clock_setting")
    assert reason_names(1 << 40) == ("unknown_0x10000000000",)


def test_virtual_monitor_reads_on_an_exact_grid():
    timer = ScriptedTimer({"a": 7.0})
    mon = ClockMonitor(ScriptedClockSource(lambda t: 1000 + t * 1000), hz=100)
    mon.start(timer)
    for _ in range(10):
        timer.time_call(lambda: None, arm="a")  # 70 ms of virtual time
    mon.stop()
    ts = [r.t for r in mon.readings()]
    assert ts == pytest.approx([k / 100 for k in range(len(ts))])
    assert ts[-1] >= 0.07  # stop() adds a reading after the end
    assert mon.achieved_hz() == pytest.approx(100.0)
    assert mon.readings()[3].sm_mhz == pytest.approx(1030.0)
    timer.time_call(lambda: None, arm="a")  # a stopped monitor ignores further time
    assert len(mon.readings()) == len(ts)


def test_during_falls_back_to_the_bracketing_readings():
    timer = ScriptedTimer({})
    mon = ClockMonitor(ScriptedClockSource(lambda t: t * 1e3), hz=200)  # readings at 0, 5, 10 ms
    mon.start(timer)
    timer.advance(0.010)
    mon.stop()
    assert [r.t for r in mon.during(0.004, 0.006)] == pytest.approx([0.005])
    assert [r.t for r in mon.during(0.006, 0.007)] == pytest.approx([0.005, 0.010])


def test_thread_monitor_polls_at_least_100_hz_in_the_timer_time_base():
    timer = HostTimer()
    mon = ClockMonitor(ScriptedClockSource(lambda t: LOAD), hz=1000)
    t0 = timer.now_s()
    mon.start(timer)
    time.sleep(0.3)
    mon.stop()
    rs = mon.readings()
    assert mon.achieved_hz() >= 100
    assert all(a.t <= b.t for a, b in zip(rs, rs[1:]))
    assert t0 <= rs[0].t and rs[-1].t <= timer.now_s()


def test_reference_is_max_of_loaded_clean_readings_in_the_warm_up_tail():
    timer = ScriptedTimer({})
    src = ScriptedClockSource(lambda t: IDLE if t < 0.05 else (LOAD if t < 0.09 else 1900.0),
                              reasons=lambda t: ("gpu_idle",) if t < 0.05 else ())
    mon = ClockMonitor(src)
    mon.start(timer)
    timer.advance(0.1)
    assert reference_clock(mon, 0.0, 0.1).mhz == LOAD  # tail = [0.05, 0.1]
    ref = reference_clock(mon, 0.0, 0.06)               # tail = [0.03, 0.06]: idle ones excluded
    assert ref.mhz == LOAD and ref.clean


# -- drop rule ------------------------------------------------------------------------------
def test_a_dip_in_round_k_drops_exactly_round_k_with_its_reason():
    spans = rounds_of_a_clean_run()
    k = 17
    a, b = spans[k]
    dip = (a + 0.002, b - 0.002)
    m = run(lambda t: 1500.0 if in_any(t, [dip]) else LOAD,
            reasons=lambda t: ("sw_thermal_slowdown",) if in_any(t, [dip]) else ())
    assert [r.index for r in m.rounds if r.dropped] == [k]
    r = m.rounds[k]
    assert r.min_sm_mhz == 1500.0 and r.drop_reasons == ("sw_thermal_slowdown",)
    assert m.clock.reference_mhz == LOAD and m.clock.dropped_rounds == 1
    assert m.clock.drop_reasons == {"sw_thermal_slowdown": 1}
    assert not m.throttled
    # dropped samples are kept apart, kept ones feed the stats
    assert len(m.arms["candidate"].dropped_samples) == 1 and m.arms["candidate"].stats.n == len(m.rounds) - 1


def test_a_dip_just_above_the_threshold_is_kept():
    spans = rounds_of_a_clean_run()
    a, b = spans[5]
    m = run(lambda t: 0.86 * LOAD if a < t < b else LOAD)
    assert not any(r.dropped for r in m.rounds)


def test_too_many_drops_mark_the_measurement_throttled():
    spans = rounds_of_a_clean_run()
    start = spans[20][0] + 0.001  # rounds 20..39 run slow
    m = run(lambda t: 1500.0 if t >= start else LOAD, reasons=lambda t: ("hw_slowdown",) if t >= start else ())
    assert m.stop_reason == "max_samples" and len(m.rounds) == 40
    assert [r.index for r in m.rounds if r.dropped] == list(range(20, 40))
    assert m.throttled and "20/40" in m.throttle_note
    assert m.clock.drop_reasons == {"hw_slowdown": 20}
    assert m.to_row()["rounds"]["drop_reasons"]["20"] == ["hw_slowdown"]


def test_drops_without_nvml_reason_are_counted_as_such():
    spans = rounds_of_a_clean_run()
    a, b = spans[3]
    m = run(lambda t: 1000.0 if a < t < b else LOAD)
    assert m.rounds[3].drop_reasons == ("no_reason_reported",)


# -- the idle-reference trap ----------------------------------------------------------------
@pytest.mark.parametrize("idle_bit", [True, False])
def test_idle_reading_before_load_is_never_the_reference(idle_bit):
    def sm(t):
        return IDLE if t < 0.05 else LOAD

    reasons = (lambda t: ("gpu_idle",) if t < 0.05 else ()) if idle_bit else None
    m = run(sm, reasons)
    assert m.clock.reference_mhz == LOAD
    assert not any(r.dropped for r in m.rounds)          # must not fail every round
    assert m.clock.min_mhz == LOAD                       # measured rounds were under load
    # ... and must not pass every round: a real throttle later is still caught
    spans = rounds_of_a_clean_run()
    a, b = spans[10]
    m2 = run(lambda t: 1500.0 if a < t < b else sm(t), reasons)
    assert [r.index for r in m2.rounds if r.dropped] == [10]


def test_a_slow_ramp_extends_warm_up_until_the_tail_is_loaded():
    m = run(lambda t: IDLE if t < 0.3 else LOAD, lambda t: ("gpu_idle",) if t < 0.3 else ())
    assert m.clock.reference_mhz == LOAD and m.clock.reference_clean
    assert 1 <= m.warmup_extensions <= 3
    assert not any(r.dropped for r in m.rounds) and m.clock_note is None


def test_warm_up_extends_until_the_clock_stops_falling():
    # Boost at first, then the power limiter pulls the clock down to its sustained value:
    # the rounds must be timed (and judged) at the sustained clock, not in the burst.
    def sm(t):
        return LOAD if t < 0.05 else max(1700.0, LOAD - (t - 0.05) * 700.0)  # 1980 -> 1700 by 0.45 s

    m = run(sm)
    assert m.warmup_extensions >= 3
    assert m.rounds[0].t0 >= 0.4                       # no measured round in the falling part
    assert abs(m.clock.reference_mhz - 1700.0) <= 0.01 * 1700.0
    assert not any(r.dropped for r in m.rounds) and m.clock_note is None


def test_a_clock_that_never_settles_is_said():
    from harness.measurement.timing.measure import WARMUP_SETTLE_MAX_EXTENSIONS

    m = run(lambda t: max(345.0, LOAD - t * 1000.0))   # falls 1000 MHz/s for the whole run
    assert m.warmup_extensions == WARMUP_SETTLE_MAX_EXTENSIONS
    assert "still falling" in m.clock_note and "warmup_ms" in m.clock_note


# -- throttling during warm-up --------------------------------------------------------------
def test_a_throttle_in_warm_up_does_not_lower_the_reference():
    hot = (0.06, 0.2)  # covers the whole warm-up tail, recovers during the extension

    def sm(t):
        return 1000.0 if hot[0] <= t <= hot[1] else LOAD

    reasons = lambda t: ("hw_thermal_slowdown",) if hot[0] <= t <= hot[1] else ()  # noqa: E731
    m = run(sm, reasons)
    assert m.warmup_extensions >= 1
    assert m.clock.reference_mhz == LOAD and m.clock.reference_clean
    assert not any(r.dropped for r in m.rounds) and not m.throttled
    # a later dip to 1500 is still dropped: the warm-up throttle did not become the reference
    a, b = [(r.t0, r.t1) for r in m.rounds][7]
    m2 = run(lambda t: 1500.0 if a < t < b else sm(t), reasons)
    assert [r.index for r in m2.rounds if r.dropped] == [7]


def test_a_throttle_lasting_through_warm_up_marks_the_measurement_throttled():
    m = run(lambda t: 1000.0 if t >= 0.06 else LOAD, lambda t: ("hw_thermal_slowdown",) if t >= 0.06 else ())
    assert m.warmup_extensions == 3
    assert m.clock.reference_mhz == 1000.0 and not m.clock.reference_clean
    assert m.throttled and "hw_thermal_slowdown" in m.throttle_note
    assert "abnormal throttle" in m.clock_note


# -- summary and NVML -----------------------------------------------------------------------
def test_summary_reports_clock_temperature_power_spans():
    m = run(lambda t: LOAD, temp=lambda t: 40 + 100 * t, power=lambda t: 300.0 + 10 * t,
            max_clock_mhz=1980.0, app_clock_mhz=1755.0)
    c = m.clock
    assert c.poll_hz == pytest.approx(200.0) and c.n_readings > 0
    assert c.max_clock_mhz == 1980.0 and c.app_clock_mhz == 1755.0
    assert c.temp_min_c < c.temp_max_c and c.power_min_w < c.power_max_w
    assert c.min_mhz == c.mean_mhz == c.max_mhz == LOAD
    assert set(c.as_dict()) >= {"reference_mhz", "poll_hz", "drop_reasons", "temp_max_c"}


def test_open_monitor_on_cpu_says_there_are_no_clocks():
    mon, note = open_monitor("cpu")
    assert mon is None and note == "CPU: no GPU clocks to monitor"


def _nvml_works() -> bool:
    try:
        NvmlClockSource().close()
    except ClockUnavailable:
        return False
    return True


@pytest.mark.skipif(_nvml_works(), reason="NVML is present here")
def test_nvml_absent_gives_a_note_not_a_silent_pass():
    with pytest.raises(ClockUnavailable):
        NvmlClockSource()
    mon, note = open_monitor("cuda:0")
    assert mon is None and note.startswith("NVML unavailable:") and "not monitored" in note


# --- fail closed when the drop rule cannot be applied (review of 2026-11-29) ---------------
from harness.measurement.timing import TimingPolicy as _Pol, measure as _measure  # noqa: E402
from tests.timers import ScriptedClockSource as _Src, ScriptedTimer as _Timer  # noqa: E402

_ARMS = ("candidate", "baseline", "control")


def _run(sm, reasons=None, pol=None, ms=10.0, **kw):
    pol = pol or _Pol(warmup_ms=100.0, min_samples=40, max_samples=40, min_time_ms=0.0, timeout_s=1e5)
    mon = ClockMonitor(_Src(sm, reasons=reasons, **kw), hz=200)
    return _measure({a: (lambda s: None) for a in _ARMS}, n_slots=1, policy=pol, device="cpu",
                    timer=_Timer({a: ms for a in _ARMS}), monitor=mon)


def test_an_idle_only_reference_is_unverified_not_a_pass():
    m = _run(lambda t: 345.0 if t < 0.6 else 1980.0, lambda t: ("gpu_idle",) if t < 0.6 else ())
    assert m.clock.reference_mhz == 345.0 and m.throttled and "idle" in m.throttle_note


def test_an_idle_reading_without_the_idle_bit_is_caught_by_the_max_clock():
    m = _run(lambda t: 345.0 if t < 0.6 else 1980.0, max_clock_mhz=1980.0)
    assert m.throttled and "below 50% of the max SM clock" in m.throttle_note


def test_no_reading_in_the_warmup_tail_is_unverified():
    pol = _Pol(warmup_ms=0.0, min_samples=20, max_samples=3000, min_time_ms=200, timeout_s=1e5)
    m = _run(lambda t: 1980.0 if t < 0.002 else 600.0, lambda t: () if t < 0.002 else ("hw_slowdown",), pol=pol,
             ms=0.1)
    assert m.clock.reference_mhz is None and m.throttled and "no reference clock" in m.throttle_note
