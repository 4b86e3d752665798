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
   alike. Before each call, outside the timed window, the caller's ``hooks.prepare`` runs (the
   sweep poisons the output there). Each call uses the next input slot of a global
   rotation (see ``rotation_slots``). Each round records its (t0, t1) so the monitor can
   attribute clocks to it (``summary.attribute``). With ``lead_calls`` = k (cold and hot modes),
   each timed call is preceded by k untimed calls of the same arm on earlier slots, back to
   back, so the GPU runs as busy and as power-limited as in a loop of calls (the timed call
   stays isolated); the outputs checked after timing may then be a lead call's, computed
   by the same kernel on the same inputs. After each measured call, outside its window,
   the timer's host time for the enqueue is kept (``host_us``), and the caller's ``hooks.spot``
   may copy the call's output: one measured call per arm, chosen at random
   (reservoir sampling, ``spot_seed``). With a ``hooks.refresh``, at rounds of a seeded
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
8. ``summary.result``: drop rounds whose minimum SM clock < ``throttle_threshold`` × reference
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
from typing import Callable, Mapping

from harness.errors import UserError
from harness.measurement import clocks as _clocks
from harness.measurement.clocks import ClockMonitor
from harness.measurement.timing.criteria import Criterion, Progress, criterion_for
from harness.measurement.timing.graphs import auto_replays, capture_chains, capture_graphs
from harness.measurement.timing.hooks import NO_HOOKS, CallHooks
from harness.measurement.timing.policy import TimingPolicy
from harness.measurement.timing.results import Measurement
from harness.measurement.timing.rounds import RoundRunner
from harness.measurement.timing.summary import MeasureState, attribute, result
from harness.measurement.timing.timers import CudaEventTimer, HostTimer, Timer

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
def measure(arms: Mapping[str, Callable[[int], None]], *, n_slots: int, policy: TimingPolicy, device: str,
            timer: Timer | None = None, monitor: ClockMonitor | None = None, hooks: CallHooks = NO_HOOKS,
            criterion: Criterion | None = None) -> Measurement:
    """Time ``arms`` (name -> fn(slot)) interleaved under ``policy`` on ``device`` (module docstring).

    ``criterion`` says when the rounds stop (timing/criteria.py); by default the one
    ``policy.stop`` registers for these arms (``criterion_for``: the statistic stop's quantities
    are then each candidate's speedup and the control; the sweep adds the bar's peers).
    ``hooks`` are what the caller runs around each timed call, outside its window
    (timing/hooks.py: the watch, the content refresh, prepare, the spot copy, the refreshed
    call's copy). ``timer`` and ``monitor`` are injectable (tests pass virtual ones). The
    Measurement records every refresh, per arm the content version each slot's output was
    last computed from, and the memory judgement.
    """
    names = tuple(arms)
    if not names:
        raise ValueError("measure() needs at least one arm")
    if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
        raise ValueError(f"n_slots must be an integer ≥ 1, got {n_slots!r}")
    timer, mode, timing_note = _pick_timer(policy, device, timer)
    criterion = criterion or criterion_for(policy, names)
    st = MeasureState(names, timing_note)
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
        runner = RoundRunner(arms, n_slots, policy, mode, device, timer, hooks)
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
    return result(st, runner, policy, monitor, criterion)


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


def _warm_up(st: MeasureState, runner: RoundRunner, policy: TimingPolicy) -> None:
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


def _settle(st: MeasureState, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor) -> None:
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


def _chain_graphs(st: MeasureState, runner: RoundRunner, policy: TimingPolicy, device: str) -> None:
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


def _measure_rounds(st: MeasureState, runner: RoundRunner, policy: TimingPolicy, monitor: ClockMonitor | None,
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
            attribute(st, monitor, policy, final=False)
        kept = [i for i in range(len(st.raw))
                if not st.waited[i] and not (i < len(st.drops) and st.drops[i][1])]
        runner.kept = kept
        now = timer.now_s()
        st.stop_reason = criterion.stop(Progress(
            st.samples, kept, judged=len(st.drops) if monitor is not None else len(st.raw), rounds=len(st.raw),
            counted=len(st.raw) - sum(map(bool, st.waited)), pending=runner.refresh_pending(kept),
            min_time_met=now - t_m0 >= policy.min_time_ms / 1000.0 - TIME_EPS_S,
            timed_out=now >= st.deadline - TIME_EPS_S))
