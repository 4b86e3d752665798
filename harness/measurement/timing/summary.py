"""The state ``measure``'s phases fill in (``MeasureState``), and the frozen ``Measurement``
made of it (``result``): the rounds' clock attribution and drops, the throttle judgement, the
host gaps, CPU times and clock checks of the kept calls, the content refresh's record, and
the criterion's record of its stop."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from harness.measurement import clocks as _clocks
from harness.measurement.clocks import ClockMonitor
from harness.measurement.stats import quantum
from harness.measurement.timing.criteria import Criterion
from harness.measurement.timing.policy import TimingPolicy
from harness.measurement.timing.refresh import judge_input_memory
from harness.measurement.timing.results import ArmResult, Measurement, RefreshRecord, Round
from harness.measurement.timing.rounds import RawRound, RoundRunner
from harness.measurement.timing.timers import (BLOCK_MAX_S, CPU_OVER_WALL_RATE, CPU_OVER_WALL_SLACK_MS, CallClock,
                                               CallCpu, Timer, clock_disagreement, clock_gap_us)

# A reference below this fraction of the GPU's max SM clock is an idle or throttled reading
# (an idle GPU reads a small fraction of its max clock), never a reference to judge rounds against.
REFERENCE_MIN_FRACTION = 0.5
# A round's drop reason when one of its calls waited on a run queue (HostTimer.last_cpu).
WAIT_REASON = "descheduled"


@dataclass
class MeasureState:
    """What one measure() call has seen so far; the phases fill it in, in order."""

    names: tuple[str, ...]
    timing_note: str | None
    t_begin: float = 0.0
    deadline: float = math.inf
    clock_notes: list[str] = field(default_factory=list)
    warm: dict[str, list[float]] = field(default_factory=dict)   # warm-up samples (sizes graph chains)
    warmup_rounds: int = 0
    timed_out: bool = False
    window: tuple[float, float] = (0.0, 0.0)                     # the last warm-up window
    ref: _clocks.Reference = _clocks.Reference(None, False)
    extensions: int = 0
    raw: list[RawRound] = field(default_factory=list)            # measured rounds
    drops: list[tuple[float | None, bool, tuple[str, ...]]] = field(default_factory=list)  # per round: round_drop()
    calls: list[dict[str, CallCpu]] = field(default_factory=list)  # per measured round: arm -> its call's CPU record
    clocks: list[dict[str, CallClock]] = field(default_factory=list)  # per measured round: arm -> its window
    waited: list[tuple[str, ...]] = field(default_factory=list)    # per measured round: arms whose call waited
    samples: dict[str, list[float]] = field(default_factory=dict)
    host_s: dict[str, list[float]] = field(default_factory=dict)
    drain_s: dict[str, list[float]] = field(default_factory=dict)  # device drain after each measured call
    stop_reason: str | None = None
    gaps0: dict[str, dict[str, int]] = field(default_factory=dict)  # timer's host-gap counts before rounds

    def __post_init__(self):
        for d in (self.warm, self.samples, self.host_s, self.drain_s):
            d.update({n: [] for n in self.names})


def attribute(st: MeasureState, monitor: ClockMonitor, policy: TimingPolicy, *, final: bool) -> None:
    """Judge each measured round's clocks. A round is final once a reading after its end
    exists (no later reading can fall inside it); after the monitor stops, every round is."""
    while len(st.drops) < len(st.raw):
        t0, t1 = st.raw[len(st.drops)][:2]
        if not final and monitor.last_t <= t1:
            break
        st.drops.append(_clocks.round_drop(monitor.during(t0, t1), st.ref.mhz, policy.throttle_threshold))


def result(st: MeasureState, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor | None,
            criterion: Criterion) -> Measurement:
    """The frozen Measurement: final clock attribution, drops, the throttle judgement, notes."""
    timer, names, ref = runner.timer, st.names, st.ref
    if monitor is not None:
        attribute(st, monitor, policy, final=True)
        if monitor.error:
            st.clock_notes.append(f"clock polling stopped early: {monitor.error}")
    clock_drops = [st.drops[i] if monitor is not None else (None, False, ()) for i in range(len(st.raw))]
    rounds = tuple(
        Round(i, t0, t1, order, out, low, dropped or bool(st.waited[i]),
              reasons + ((WAIT_REASON,) if st.waited[i] else ()), st.waited[i],
              *(_clocks.window_clocks(monitor.during(t0, t1)) if monitor is not None else (None, None)))
        for i, ((t0, t1, order, out), (low, dropped, reasons)) in enumerate(zip(st.raw, clock_drops)))
    arm_results = {n: ArmResult.build(n, [r.samples[n] for r in rounds if not r.dropped],
                                      [r.samples[n] for r in rounds if r.dropped]) for n in names}
    clock = None
    if monitor is not None:
        span = (rounds[0].t0, rounds[-1].t1) if rounds else st.window
        clock = _clocks.summarize(monitor, span[0], span[1], ref, [d[2] for d in clock_drops if d[1]])
        if clock.poll_hz < _clocks.MIN_POLL_HZ:
            st.clock_notes.append(f"clock poll rate {clock.poll_hz:.0f} Hz < {_clocks.MIN_POLL_HZ:.0f} Hz: "
                                  f"rounds are attributed to sparse readings")
    throttled, throttle_note = _throttle(rounds, ref, policy, monitor, [d[1] for d in clock_drops])
    timing_note = st.timing_note
    if st.timed_out:
        timing_note = "; ".join(filter(None, [timing_note, "timed out during warm-up: no measured rounds"]))
    host_gaps = _host_gaps(st, timer)
    kept_gaps = {n: c["kept"] for n, c in host_gaps.items() if c["kept"]}
    if kept_gaps:
        timing_note = "; ".join(filter(None, [timing_note, "samples that may include host launch gaps (the "
                                              "host's enqueue outlasted the hold on every try, up to "
                                              f"{BLOCK_MAX_S * 1e3:.0f} ms): " +
                                              ", ".join(f"{n} {k}" for n, k in kept_gaps.items())]))
    kept_idx = [r.index for r in rounds if not r.dropped]
    host_us, host_samples_us = {}, {}
    for n in names:
        vals = [st.host_s[n][i] * 1e6 for i in kept_idx if math.isfinite(st.host_s[n][i])] if rounds else []
        host_us[n] = statistics.median(vals) if vals else None
        host_samples_us[n] = tuple(vals)  # the row keeps them: verify recomputes host_us (ledger/audit.py)
    cpu = _cpu(st, kept_idx) if any(st.calls) else {}
    clock_faults, clock_check = _clock_check(st, timer, kept_idx)
    ticks = tuple(getattr(timer, "ticks_ms", ()) or ())
    quanta = {}
    if ticks:
        for n, a in arm_results.items():
            q = quantum(a.samples, ticks)
            if q is not None:
                quanta[n] = q.as_dict() | {"why": q.describe()}
    return Measurement(
        arms=arm_results, rounds=rounds, stop_reason=st.stop_reason, mode=policy.mode, effective_mode=runner.mode,
        n_slots=runner.n_slots, graph_replays=runner.replays, timer=timer.name, policy=policy,
        warmup_rounds=st.warmup_rounds, warmup_extensions=st.extensions, elapsed_s=timer.now_s() - st.t_begin,
        clock=clock, clock_note="; ".join(st.clock_notes) or None, timing_note=timing_note, throttled=throttled,
        throttle_note=throttle_note, host_gaps=host_gaps, host_us=host_us, host_samples_us=host_samples_us,
        drain_s={n: tuple(v) for n, v in st.drain_s.items() if v}, spot_calls=runner.spot_calls,
        spot_seed=runner.hooks.spot_seed if runner.hooks.spot else None, cpu=cpu,
        wait_source=getattr(timer, "wait_source", None) if any(st.calls) else None, quanta=quanta,
        refresh=_refresh_record(runner, rounds), clock_faults=clock_faults, clock_check=clock_check,
        stop=criterion.record({n: a.samples for n, a in arm_results.items()}, st.stop_reason))


def _clock_check(st: MeasureState, timer: Timer, kept_idx: list[int]) -> tuple[dict[str, str], dict[str, dict]]:
    """(per arm, why its timed calls cannot be believed; per arm, the evidence) against two
    clocks the timer does not read through its own: the independent clock around every
    window of the measured rounds (the harness's own timers keep them, ``clock_calls``: no
    window may read longer than it; those of calls that ran undisturbed may not read shorter
    by more than the timer's slack at the median), and
    the calling thread's CPU time, which one thread cannot spend faster than the wall clock
    runs (its median over the kept calls above their median wall time, beyond
    CPU_OVER_WALL_SLACK_MS: issue 47's row read 0.0454 ms of CPU in 0.0139 ms)."""
    faults: dict[str, list[str]] = {}
    check: dict[str, dict] = {}
    if getattr(timer, "clock_calls", None) is not None:
        # Judged at the median: this arm's windows in rounds not dropped for clocks, less those
        # whose own call waited on a run queue (descheduled between two reads: not a sample).
        clock_ok = [i for i in range(len(st.raw)) if not (i < len(st.drops) and st.drops[i][1])]
        for n in st.names:
            every = [c[n] for c in st.clocks if n in c]
            kept = [st.clocks[i][n] for i in clock_ok
                    if n in st.clocks[i] and not (n in st.calls[i] and st.calls[i][n].waited)]
            check[n] = clock_gap_us(kept) | {"max_over_us_all": clock_gap_us(every)["max_over_us"]}
            why = clock_disagreement(every, getattr(timer, "clock_slack_ms"), getattr(timer, "clock_resolution_ms"), kept)
            if why is not None:
                faults.setdefault(n, []).append(why)
    for n in st.names:
        calls = [st.calls[i][n] for i in kept_idx if n in st.calls[i]]
        if not calls:
            continue
        cpu, wall = statistics.median(c.cpu_ms for c in calls), statistics.median(c.wall_ms for c in calls)
        check.setdefault(n, {})["cpu_over_wall_us"] = (cpu - wall) * 1e3
        allowed = CPU_OVER_WALL_SLACK_MS + CPU_OVER_WALL_RATE * wall
        if cpu > wall + allowed:
            faults.setdefault(n, []).append(
                f"its calling thread spent {cpu:.4g} ms on a CPU at the median against {wall:.4g} ms of wall time "
                f"(one thread cannot run longer than the window it ran in; an honest call reads at most "
                f"{allowed * 1e3:.3g} µs over: {CPU_OVER_WALL_SLACK_MS * 1e3:g} µs of CPU reads outside it and the "
                f"CPU clock's rate, {CPU_OVER_WALL_RATE:.0%} of the wall time)")
    return {n: "; ".join(why) for n, why in faults.items()}, check


def _cpu(st: MeasureState, kept_idx: list[int]) -> dict[str, dict]:
    """Per arm: median CPU time of its kept calls (calling thread; all threads where
    schedstat says), their median run-queue wait, and its calls that waited (all measured
    rounds: each dropped its round)."""
    out = {}
    for n in st.names:
        kept = [st.calls[i][n] for i in kept_idx if n in st.calls[i]]
        every = [c[n] for c in st.calls if n in c]

        def med(vals):
            vals = [v for v in vals if v is not None]
            return statistics.median(vals) if vals else None

        out[n] = {"cpu_ms": med([c.cpu_ms for c in kept]), "process_cpu_ms": med([c.process_cpu_ms for c in kept]),
                  "wait_ms": med([c.wait_ms for c in kept]), "waited": sum(c.waited for c in every),
                  "calls": len(every)}
    return out


def _refresh_record(runner: RoundRunner, rounds: tuple[Round, ...]) -> RefreshRecord | None:
    """What the content refresh did and the memory judgement per arm (kept rounds only, as
    every timing figure), or None without a refresh hook."""
    if runner.schedule is None:
        return None
    kept = [r for r in rounds if not r.dropped]
    memory, fresh_rounds, sham_rounds = {}, {}, {}
    for n in runner.names:
        fresh_rounds[n] = tuple(r.index for r in rounds if runner.judged_fresh(n, r.index))
        sham_rounds[n] = tuple(r.index for r in rounds if runner.compared(n, r.index))
        memory[n] = judge_input_memory([(r.index, r.samples[n]) for r in kept if runner.judged_fresh(n, r.index)],
                                       [(r.index, r.samples[n]) for r in kept if runner.compared(n, r.index)],
                                       runner.schedule.shams)
    note = "graph mode: refreshed in place only (captured graphs read fixed addresses)" \
        if runner.mode == "graph" else None
    return RefreshRecord(seed=runner.hooks.refresh_seed, span=runner.schedule.span, refreshes=tuple(runner.refreshes),
                         shams=tuple(runner.shams), fresh_rounds=fresh_rounds, sham_rounds=sham_rounds,
                         last_versions={n: tuple(v) for n, v in runner.last_version.items()},
                         checks=runner.refresh_checks, memory=memory, note=note)


def _throttle(rounds: tuple[Round, ...], ref: _clocks.Reference, policy: TimingPolicy,
              monitor: ClockMonitor | None, clock_dropped: list[bool]) -> tuple[bool, str | None]:
    """(throttled, why): too many rounds dropped (for clocks, or for a call that waited on a
    run queue), a reference taken under an abnormal throttle, or (fail closed) clocks
    monitored but the drop rule could not be applied."""
    # Rounds dropped for a wait do not count: their calls were another process's time, and the
    # kept ones ran undisturbed (the sweep calls a row with many of them rig-noisy instead).
    n_clock = sum(clock_dropped)
    timed = [r for r, c in zip(rounds, clock_dropped) if c or not r.waited]
    if timed and n_clock / len(timed) > policy.max_drop_fraction:
        return True, (f"{n_clock}/{len(timed)} rounds dropped (max {policy.max_drop_fraction:.0%}) for SM clock < "
                      f"{policy.throttle_threshold} × {ref.mhz:.0f} MHz")
    if ref.mhz is not None and not ref.clean and _clocks.ABNORMAL_REASONS.intersection(ref.reasons):
        return True, f"the GPU stayed throttled through warm-up: {ref.note}"
    if monitor is not None:
        unverified = _unverified_clocks(ref, monitor)
        if unverified:
            return True, f"clocks unverified: {unverified}"
    return False, None


def _unverified_clocks(ref: _clocks.Reference, monitor: ClockMonitor) -> str | None:
    """Why the rounds' clocks could not be checked against a trustworthy reference, or None."""
    if monitor.error:
        return f"clock polling stopped early ({monitor.error}): later rounds have no readings of their own"
    if ref.mhz is None:
        return "no clock reading in the tail of warm-up: no reference clock (raise [timing] warmup_ms)"
    if not ref.clean and _clocks.IDLE_REASON in ref.reasons:
        return f"the only reference available was read while the GPU reported idle ({ref.mhz:.0f} MHz)"
    max_clock = monitor.limits[0]
    if max_clock and ref.mhz < REFERENCE_MIN_FRACTION * max_clock:
        return (f"reference clock {ref.mhz:.0f} MHz is below {REFERENCE_MIN_FRACTION:.0%} of the max SM clock "
                f"{max_clock:.0f} MHz: an idle or throttled reading")
    return None


def _host_gaps(st: MeasureState, timer: Timer) -> dict[str, dict[str, int]]:
    """Per arm with any: calls of the measured rounds re-run for a host gap, and samples kept with one."""
    host_gaps = {}
    for n in st.names:
        counts = {key: getattr(timer, attr, {}).get(n, 0) - st.gaps0[attr].get(n, 0)
                  for key, attr in (("retried", "host_gaps"), ("kept", "host_gaps_kept"))}
        if any(counts.values()):
            host_gaps[n] = counts
    return host_gaps


__all__ = ["REFERENCE_MIN_FRACTION", "WAIT_REASON", "MeasureState", "attribute", "result"]
