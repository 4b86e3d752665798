"""``measure``: the timing protocol, as named phases over one explicit state.

``measure(arms, ...)`` times several callables ("arms": candidate, baseline, control...)
the same way, in rounds, and returns a frozen ``Measurement`` holding every raw sample.

1. ``_pick_timer``: CUDA events on a GPU, ``perf_counter_ns`` on the CPU (where every mode
   degrades to plain host timing, and the result says so). Tests inject a virtual timer.
2. Open the clock monitor (NVML on a GPU) before anything runs, in the timer's time base.
3. ``_prime``: one round not counted in the warm-up budget (JIT, autotune, lazy init); in
   graph mode first the side-stream warm-up and the CUDA-graph capture of every arm × slot.
4. ``_warm_up`` by time budget (``warmup_ms``) in interleaved rounds; samples are discarded.
5. ``_settle``: take the reference SM clock from the tail of warm-up (under load, not
   idle, not throttled); extend the warm-up (at most ``WARMUP_MAX_EXTENSIONS`` times) while
   no clean reading exists, so the reference is never an idle or throttled clock; then
   extend it while the clock is still falling (``CLOCK_SETTLE_TOLERANCE``), so rounds are
   timed at the sustained clock, not in the boost burst before the power limiter settles.
   In graph mode ``_chain_graphs`` then captures K calls per sample (``graph_replays``,
   auto from warm-up): one graph per arm and start slot, so a sample is one launch.
6. ``_measure_rounds``. Round r runs every arm once, in the r-th of ``round_orders`` (every
   arm first, and one and two calls after each arm, equally often), so drift hits all arms
   alike. Before each call, outside the timed window, the caller's ``prepare`` runs (the
   sweep poisons the output there). Each call uses the next input slot of a global
   rotation (see ``rotation_slots``). Each round records its (t0, t1) so the monitor can
   attribute clocks to it (``_attribute``). With ``lead_calls`` = k (cold and hot modes),
   each timed call is preceded by k untimed calls of the same arm on earlier slots, back to
   back, so the GPU runs as busy and as power-limited as in a loop of calls (the timed call
   stays isolated); the outputs checked after timing may then be a lead call's, computed
   by the same kernel on the same inputs. After each measured call, outside its window,
   the timer's host time for the enqueue is kept (``host_us``), and the caller's ``spot``
   hook may copy the call's output: one measured call per arm, chosen at random
   (reservoir sampling, ``spot_seed``). With a ``refresh`` hook, at rounds of a seeded
   schedule (``refresh_seed``; timing/refresh.py) each arm's timed call gets new input
   content just before it, after its lead calls and before ``prepare``: written in place or
   into new buffers by the caller (in place only in graph mode: the graphs read the captured
   addresses); ``keep_refreshed`` may copy the output of one such call per arm and kind.
   Every measured call is labelled first-seen or seen (by the arm, per slot version).
7. Stop adaptively, when the criterion says (timing/criteria.py; ``[timing] stop``): after
   ``min_samples`` kept rounds and ``min_time_ms`` of measured time, when every arm's
   ``rel_noise`` ≤ ``noise_target`` ("noise_target"; the noise stop) or every bar quantity's
   paired interval is within ``precision`` at a scheduled look ("precision"; the statistic
   stop); else at ``max_samples`` rounds ("max_samples"); else at ``timeout_s`` ("timeout").
   With a refresh hook, the target also waits for the schedule's guaranteed refreshed rounds
   and for enough first-seen and seen calls per arm to judge (``refresh_pending``).
8. ``_result``: drop rounds whose minimum SM clock < ``throttle_threshold`` × reference
   (their samples are kept separately); the measurement is ``throttled`` when the dropped
   fraction exceeds ``max_drop_fraction`` or the reference itself was taken under an
   abnormal throttle, or when clocks were monitored but could not be checked.
   On the host, a round is dropped the same way when one of its calls waited on a run
   queue for ≥ ``WAIT_DROP_MS`` (descheduled: the sample holds another process's time
   slice; ``HostTimer.last_cpu``), counted apart (``n_waited``). Such rounds are not
   samples: they count neither toward ``max_samples`` (the measurement runs on, up to
   ``WAIT_MAX_ROUNDS_FACTOR`` × max_samples rounds and the timeout, until it has its
   rounds) nor toward ``max_drop_fraction`` (the kept calls ran undisturbed); the sweep
   calls a row whose share of waited rounds exceeds ``max_drop_fraction`` rig-noisy (a
   loaded host). Each arm's CPU time per kept call and its waited calls are kept
   (``cpu``), and an arm whose kept samples sit on a scheduler tick (``stats.quantum``,
   the timer's ``ticks_ms``) is named in ``quanta``: the sweep calls that row rig-noisy.
   With a refresh hook, each arm's first-seen against seen samples (kept rounds) are judged
   (``judge_input_memory``): slower first-seen calls mean answers from memory.

Modes (GPU): ``cold`` zeroes a flush buffer of ``flush_bytes(L2)`` before every sample,
outside the timed window; ``hot`` relies on input rotation (``n_slots`` copies) to keep
the working set out of L2; ``graph`` times CUDA-graph replays (launch overhead removed).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping

from harness.errors import UserError
from harness.measurement import clocks as _clocks
from harness.measurement.clocks import ClockMonitor
from harness.measurement.stats import quantum
from harness.measurement.timing.criteria import Criterion, Progress, criterion_for
from harness.measurement.timing.graphs import auto_replays, capture_chains, capture_graphs
from harness.measurement.timing.policy import TimingPolicy
from harness.measurement.timing.refresh import judge_input_memory
from harness.measurement.timing.results import ArmResult, Measurement, RefreshRecord, Round
from harness.measurement.timing.rounds import RawRound, RoundRunner
from harness.measurement.timing.timers import (BLOCK_MAX_S, CPU_OVER_WALL_RATE, CPU_OVER_WALL_SLACK_MS, CallClock, CallCpu,
                                               CudaEventTimer, HostTimer, Timer, clock_disagreement, clock_gap_us)

WARMUP_MIN_ROUNDS = 1
WARMUP_MAX_EXTENSIONS = 3
# Sustained clocks: the warm-up is extended (up to WARMUP_SETTLE_MAX_EXTENSIONS more
# budgets) while the SM clock in its second half is > CLOCK_SETTLE_TOLERANCE below its first
# half: a compute-bound kernel timed in the boost burst before the power limiter settles
# reads faster than it runs in a loop of calls (docs/measurement.md#clocks-and-throttling).
WARMUP_SETTLE_MAX_EXTENSIONS = 8
CLOCK_SETTLE_TOLERANCE = 0.01
# Time budgets compare with this slack so float round-off (0.12 - 0.02 < 0.1) never adds a round.
TIME_EPS_S = 1e-9
# A reference below this fraction of the GPU's max SM clock is an idle or throttled reading
# (an idle GPU reads a small fraction of its max clock), never a reference to judge rounds against.
REFERENCE_MIN_FRACTION = 0.5
# A round's drop reason when one of its calls waited on a run queue (HostTimer.last_cpu).
WAIT_REASON = "descheduled"


@dataclass
class _State:
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


def measure(arms: Mapping[str, Callable[[int], None]], *, n_slots: int, policy: TimingPolicy, device: str,
            timer: Timer | None = None, monitor: ClockMonitor | None = None,
            prepare: Mapping[str, Callable[[int], None]] | None = None,
            spot: Mapping[str, Callable[[int], None]] | None = None, spot_seed: int = 0,
            refresh: Callable[[int, int, str], None] | None = None,
            keep_refreshed: Mapping[str, Callable[[int, str], None]] | None = None,
            refresh_seed: int = 0, watch: Callable[[str, bool], None] | None = None,
            criterion: Criterion | None = None) -> Measurement:
    """Time ``arms`` (name -> fn(slot)) interleaved under ``policy`` on ``device`` (module docstring).

    ``criterion`` says when the rounds stop (timing/criteria.py); by default the one
    ``policy.stop`` registers for these arms (``criterion_for``: the statistic stop's quantities
    are then each candidate's speedup and the control; the sweep adds the bar's peers).

    ``prepare[name](slot)``, when given, runs before each of that arm's calls outside the
    timed window (the sweep poisons the arm's output there, so no call can skip its work
    by finding the last answer still in place).

    ``spot[name](slot)``, when given, runs right after one of that arm's measured calls,
    outside the window, chosen uniformly at random among all of them (reservoir sampling,
    ``random.Random(spot_seed)``, one uniform per round shared by the arms: arms with as
    many calls choose the same round, and on one slot the same content): the sweep copies
    that call's output there and checks it after timing, so a kernel right only on some
    calls cannot count on which are checked. It may run more than once (each later choice
    replaces the earlier); the last is the one.

    ``refresh(slot, seed, how)``, when given, writes new content (drawn from ``seed``) into
    input slot ``slot`` before a timed call at scheduled rounds (``refresh_seed``), ``how``
    "in_place" (same buffers) or "fresh_buffers" (new tensors replacing the slot's; never in
    graph mode). ``keep_refreshed[name](slot, how)`` runs right after one such call per arm
    and ``how`` (reservoir sampling, one uniform per round shared by the arms; the last call
    is the one), so the caller can check that
    its output matches the new content. The Measurement records every refresh, per arm the
    content version each slot's output was last computed from, and the memory judgement.

    ``watch(name, spot)``, when given, runs first before each of arm ``name``'s calls, ahead of
    its lead calls: whatever the process looks like then (global state, host threads) is what
    the previous arm's calls left, leads included, so the caller can blame the right arm.
    ``spot`` is true before the call ``spot[name]`` will run after (drawn before the call).
    """
    names = tuple(arms)
    if not names:
        raise ValueError("measure() needs at least one arm")
    if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
        raise ValueError(f"n_slots must be an integer ≥ 1, got {n_slots!r}")
    timer, mode, timing_note = _pick_timer(policy, device, timer)
    criterion = criterion or criterion_for(policy, names)
    st = _State(names, timing_note)
    own_monitor = monitor is None
    if monitor is None:  # before anything runs: idle readings included
        monitor, note = _clocks.open_monitor(device)
        if note:
            st.clock_notes.append(note)
    ctx = contextlib.ExitStack()
    if device.startswith("cuda"):  # events, flush buffer, graphs and arms all on the requested device
        import torch

        ctx.enter_context(torch.cuda.device(torch.device(device)))
    st.t_begin = timer.now_s()
    st.deadline = st.t_begin + policy.timeout_s
    if monitor is not None:
        monitor.start(timer)
    runner = None
    try:
        runner = RoundRunner(arms, n_slots, policy, mode, device, timer, prepare, spot, spot_seed,
                             refresh, keep_refreshed, refresh_seed, watch)
        _prime(runner, device)
        _warm_up(st, runner, policy)
        if monitor is not None:
            _settle(st, runner, policy, monitor)
        if mode == "graph":
            _chain_graphs(st, runner, policy, device)
        _measure_rounds(st, runner, policy, monitor, criterion)
    finally:
        if monitor is not None:
            monitor.stop()
            if own_monitor:
                monitor.source.close()
        if runner is not None:
            runner.release()
        ctx.close()
    return _result(st, runner, policy, monitor, criterion)


def _pick_timer(policy: TimingPolicy, device: str, timer: Timer | None) -> tuple[Timer, str, str | None]:
    """(timer, effective mode, timing note): CUDA events on a GPU; host timing on the CPU,
    where every mode degrades to "host" and the note says so."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"device '{device}' requested but torch.cuda.is_available() is False: "
                            f"run on a GPU machine or use device 'cpu'")
        return timer or CudaEventTimer(device), policy.mode, None
    note = (f"{device}: mode '{policy.mode}' degrades to host timing (perf_counter around each "
            f"call; no L2 flush, no CUDA graph)")
    return timer or HostTimer(), "host", note


def _prime(runner: RoundRunner, device: str) -> None:
    """One round not counted in the warm-up budget (JIT, autotune, lazy init); in graph mode
    the per-slot graphs are captured first (their side-stream warm-up included)."""
    if runner.mode == "graph":
        runner.graphs = capture_graphs(runner.arms, runner.names, runner.n_slots, device)
        runner.saw_all()
    runner.round(0)


def _warm_up(st: _State, runner: RoundRunner, policy: TimingPolicy) -> None:
    """Interleaved rounds for ``warmup_ms`` (at least WARMUP_MIN_ROUNDS), samples kept only in
    ``st.warm``; stops at the deadline (``st.timed_out``). Sets ``st.window``."""
    timer = runner.timer
    w0 = timer.now_s()
    n = 0
    while n < WARMUP_MIN_ROUNDS or timer.now_s() - w0 < policy.warmup_ms / 1000.0 - TIME_EPS_S:
        if timer.now_s() >= st.deadline - TIME_EPS_S:
            st.timed_out = True
            break
        runner.round(st.warmup_rounds, st.warm)
        st.warmup_rounds += 1
        n += 1
    st.window = (w0, timer.now_s())


def _settle(st: _State, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor) -> None:
    """The reference clock from the tail of warm-up. The warm-up is extended while the
    reference is not clean (idle, throttled, missing), then while the clock is still falling
    (sustained, not burst, clocks); an extension for one reason re-checks the other, so the
    final reference always comes from the last window and is clean when one exists."""
    clean_ext = settle_ext = 0
    while True:
        w0, w1 = st.window
        st.ref = _clocks.reference_clock(monitor, w0, w1)
        falling = _clocks.still_falling(monitor, w0, w1, CLOCK_SETTLE_TOLERANCE)
        if st.timed_out:
            break
        if not st.ref.clean and clean_ext < WARMUP_MAX_EXTENSIONS:
            clean_ext += 1
        elif st.ref.clean and falling and settle_ext < WARMUP_SETTLE_MAX_EXTENSIONS:
            settle_ext += 1
        else:
            break
        _warm_up(st, runner, policy)
    st.extensions = clean_ext + settle_ext
    if falling:
        st.clock_notes.append(f"SM clock still falling at the end of warm-up ({falling[0]:.0f} -> "
                              f"{falling[1]:.0f} MHz): raise [timing] warmup_ms")
    if st.ref.note:
        st.clock_notes.append(st.ref.note)


def _chain_graphs(st: _State, runner: RoundRunner, policy: TimingPolicy, device: str) -> None:
    """Graph mode: K calls per sample (``graph_replays``, or auto from the warm-up samples);
    for K > 1 one graph per arm and start slot replaces the per-slot graphs."""
    runner.replays = policy.graph_replays or auto_replays(st.warm)
    if runner.replays > 1:
        # Every start slot the measured rounds will reach (the counter steps by replays).
        c0, k, n_slots = runner.slot_counter, runner.replays, runner.n_slots
        starts = sorted({(c0 + i * k) % n_slots for i in range(n_slots)})
        runner.chains = capture_chains(runner.arms, runner.names, n_slots, starts, k, device)
        runner.graphs = {}
        runner.saw_all()


def _measure_rounds(st: _State, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor | None,
                    criterion: Criterion) -> None:
    """Interleaved rounds until ``criterion`` stops them (its target, max_samples, timeout); the
    rounds' clocks are attributed as readings arrive, so dropped rounds do not count as kept."""
    timer = runner.timer
    st.stop_reason = "timeout" if st.timed_out else None
    st.gaps0 = {k: dict(getattr(timer, k, {})) for k in ("host_gaps", "host_gaps_kept")}
    cpu = getattr(timer, "last_cpu", None)
    if cpu is not None:
        cpu.clear()  # warm-up's calls are not this phase's
    windows = getattr(timer, "clock_calls", None)
    if windows is not None:
        windows.clear()  # nor its windows
    t_m0 = timer.now_s()
    while st.stop_reason is None:
        rnd = runner.round(len(st.raw), None, st.host_s, st.drain_s)
        st.raw.append(rnd)
        for n in st.names:
            st.samples[n].append(rnd.samples[n])
        calls = {n: cpu.pop(n) for n in st.names if n in cpu} if cpu is not None else {}
        st.calls.append(calls)
        # The window of the sample kept (the last attempt: a host-gap re-run replaces the first).
        st.clocks.append({n: windows.pop(n)[-1] for n in st.names if windows.get(n)} if windows is not None else {})
        st.waited.append(tuple(n for n, c in calls.items() if c.waited))
        if monitor is not None:
            _attribute(st, monitor, policy, final=False)
        kept = [i for i in range(len(st.raw))
                if not st.waited[i] and not (i < len(st.drops) and st.drops[i][1])]
        runner.kept = kept
        now = timer.now_s()
        st.stop_reason = criterion.stop(Progress(
            st.samples, kept, judged=len(st.drops) if monitor is not None else len(st.raw), rounds=len(st.raw),
            counted=len(st.raw) - sum(map(bool, st.waited)), pending=runner.refresh_pending(kept),
            min_time_met=now - t_m0 >= policy.min_time_ms / 1000.0 - TIME_EPS_S,
            timed_out=now >= st.deadline - TIME_EPS_S))


def _attribute(st: _State, monitor: ClockMonitor, policy: TimingPolicy, *, final: bool) -> None:
    """Judge each measured round's clocks. A round is final once a reading after its end
    exists (no later reading can fall inside it); after the monitor stops, every round is."""
    while len(st.drops) < len(st.raw):
        t0, t1 = st.raw[len(st.drops)][:2]
        if not final and monitor.last_t <= t1:
            break
        st.drops.append(_clocks.round_drop(monitor.during(t0, t1), st.ref.mhz, policy.throttle_threshold))


def _result(st: _State, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor | None,
            criterion: Criterion) -> Measurement:
    """The frozen Measurement: final clock attribution, drops, the throttle judgement, notes."""
    timer, names, ref = runner.timer, st.names, st.ref
    if monitor is not None:
        _attribute(st, monitor, policy, final=True)
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
        spot_seed=runner.spot_seed if runner.spot else None, cpu=cpu,
        wait_source=getattr(timer, "wait_source", None) if any(st.calls) else None, quanta=quanta,
        refresh=_refresh_record(runner, rounds), clock_faults=clock_faults, clock_check=clock_check,
        stop=criterion.record({n: a.samples for n, a in arm_results.items()}, st.stop_reason))


def _clock_check(st: _State, timer: Timer, kept_idx: list[int]) -> tuple[dict[str, str], dict[str, dict]]:
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
            why = clock_disagreement(every, timer.clock_slack_ms, timer.clock_resolution_ms, kept)
            if why is not None:
                faults.setdefault(n, []).append(why)
    for n in st.names:
        kept = [st.calls[i][n] for i in kept_idx if n in st.calls[i]]
        if not kept:
            continue
        cpu, wall = statistics.median(c.cpu_ms for c in kept), statistics.median(c.wall_ms for c in kept)
        check.setdefault(n, {})["cpu_over_wall_us"] = (cpu - wall) * 1e3
        allowed = CPU_OVER_WALL_SLACK_MS + CPU_OVER_WALL_RATE * wall
        if cpu > wall + allowed:
            faults.setdefault(n, []).append(
                f"its calling thread spent {cpu:.4g} ms on a CPU at the median against {wall:.4g} ms of wall time "
                f"(one thread cannot run longer than the window it ran in; an honest call reads at most "
                f"{allowed * 1e3:.3g} µs over: {CPU_OVER_WALL_SLACK_MS * 1e3:g} µs of CPU reads outside it and the "
                f"CPU clock's rate, {CPU_OVER_WALL_RATE:.0%} of the wall time)")
    return {n: "; ".join(why) for n, why in faults.items()}, check


def _cpu(st: _State, kept_idx: list[int]) -> dict[str, dict]:
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
    return RefreshRecord(seed=runner.refresh_seed, span=runner.schedule.span, refreshes=tuple(runner.refreshes),
                         shams=tuple(runner.shams), fresh_rounds=fresh_rounds, sham_rounds=sham_rounds, last_versions={n: tuple(v) for n, v in runner.last_version.items()},
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


def _host_gaps(st: _State, timer: Timer) -> dict[str, dict[str, int]]:
    """Per arm with any: calls of the measured rounds re-run for a host gap, and samples kept with one."""
    host_gaps = {}
    for n in st.names:
        counts = {key: getattr(timer, attr, {}).get(n, 0) - st.gaps0[attr].get(n, 0)
                  for key, attr in (("retried", "host_gaps"), ("kept", "host_gaps_kept"))}
        if any(counts.values()):
            host_gaps[n] = counts
    return host_gaps
