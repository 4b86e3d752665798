"""Timers: how calls are timed. ``Timer`` is the protocol (and the test seam: tests inject a
virtual timer); ``HostTimer`` times CPU work, ``CudaEventTimer`` GPU calls between events.
Everything that times a kernel — ``measure``, the sustained phase, the ceilings — goes
through one."""

from __future__ import annotations

import os
import statistics
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from harness.measurement.leftover import drain_s
from harness.measurement.stats import QUANTUM_TICKS_MS


class Timer(Protocol):
    """Times calls: one isolated call (``time_call``), or calls back to back (``time_loop``).
    ``before`` runs outside the timed window (cold-mode flush).

    ``again()``, when given, returns a (fn, before) pair for the same arm on the next input
    slot: a timer that must re-run a call (CudaEventTimer, after a host gap) takes that,
    so the re-run never reads inputs the failed attempt left in L2.

    After each call, ``last_host_s`` holds the host time the call's enqueue took
    (perf_counter around ``fn``): the row's ``host_us``. A timer of device work drains the
    whole device after each call, outside the window, and keeps how long that took in
    ``last_drain_s`` (None where there is no device): the next call never runs beside work
    this one left on another stream, and the drain shows that such work was there
    (measurement/leftover.py).

    Optional (read with ``getattr`` defaults; a timer without them is not judged by them):
    ``last_cpu`` (arm -> ``CallCpu`` of that arm's latest ``time_call``: CPU time and
    run-queue wait; ``measure`` takes each after its round and drops a round whose call
    waited), ``wait_source`` (how waits are seen: "schedstat", "thread_time"), and
    ``ticks_ms`` (the scheduler ticks its samples can sit on: host timing; a row whose arm
    sits on one is rig-noisy, ``stats.quantum``).
    """

    name: str
    virtual: bool
    last_host_s: float
    last_drain_s: float | None

    def now_s(self) -> float: ...

    def time_call(self, fn: Callable[[], None], *, arm: str = "",
                  before: Callable[[], None] | None = None,
                  again: Callable[[], tuple[Callable[[], None], Callable[[], None] | None]] | None = None
                  ) -> float:
        """Run ``fn`` once and return its duration in ms."""
        ...

    def time_loop(self, calls: Sequence[tuple[Callable[[], None], Callable[[], None] | None]], *,
                  arm: str = "") -> list[float]:
        """Run ``(fn, before)`` pairs back to back, as a loop of calls runs, and return each
        ``fn``'s duration in ms (``before`` outside its window). No hold, no per-call sync."""
        ...


def median_ms(timer: Timer, fn: Callable[[], None], *, reps: int, warmup: int, arm: str = "") -> float:
    """Median of ``reps`` calls of ``fn`` timed back to back (``time_loop``) after ``warmup``
    untimed ones: a fixed-count rate of a long call, as a loop runs it (the ceilings);
    ``measure`` is the protocol for comparing arms."""
    for _ in range(warmup):
        fn()
    return statistics.median(timer.time_loop([(fn, None)] * reps, arm=arm))


# A timed host call whose threads waited this long on a run queue (runnable, not running)
# was descheduled: its sample holds another process's time slice, not the call, and its round
# is dropped. Measured on the 2-core host (torch, 2 intra-op threads; 256² matmul, the
# example's sdpa and torch_stack): honest calls' summed wait is 0 at the median and ≤ 80 µs
# at the 95th percentile (intra-op workers waking up); a preempted call waits ≥ 1 ms, mostly
# whole 4 ms ticks, and its wall time with it (0.03 ms sdpa calls read 7.5–10 ms when they
# waited). On an idle host every threshold from 0.05 to 1 ms kept the same calls; on a busy
# one (a second test run beside it) wake-ups alone reached 0.1-0.3 ms, which both arms pay
# alike, and a 0.1 ms threshold dropped 8-17 of 20 rounds of honest kernels. 0.5 ms is above
# any wake-up seen and below the shortest preemption (1 ms).
WAIT_DROP_MS = 0.5
WAIT_SOURCE_SCHEDSTAT = "schedstat"
WAIT_SOURCE_THREAD_TIME = "thread_time"


@dataclass(frozen=True)
class CallCpu:
    """What one timed host call did besides its wall time: ``cpu_ms`` of the calling thread,
    ``process_cpu_ms`` of all the process's threads (None without schedstat), ``wait_ms`` on
    a run queue (schedstat: summed over the process's threads; else wall − thread CPU)."""

    wall_ms: float
    cpu_ms: float
    process_cpu_ms: float | None
    wait_ms: float
    source: str

    @property
    def waited(self) -> bool:
        """Descheduled inside the window: the wait, capped at the wall time (a wait can delay
        the call by no more than the call took; waits summed over threads, or read just
        outside the window, can exceed it: measured, a 0.03 ms call beside a 4 ms wait that
        a worker spent outside it), reaches ``WAIT_DROP_MS``."""
        return min(self.wait_ms, self.wall_ms) >= WAIT_DROP_MS


def _close_fds(fds: dict) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


class RunQueueClock:
    """CPU time and run-queue wait summed over every thread of this process, from Linux's
    /proc/self/task/*/schedstat (ns on a CPU, ns waiting on a run queue, timeslices).

    Every thread, not the caller's alone: torch's intra-op workers are threads of it, and a
    worker waiting on a run queue holds the call at its barrier while the calling thread
    spins on a CPU (measured: a 0.12 ms 256² matmul read 7.5 ms of wall and 3.7 ms of the
    caller's CPU time with 2 busy processes on 2 cores; only the worker's wait showed it).
    Files stay open (``pread`` re-reads one in ~2 µs); a read is ~5 µs for 3 threads, and
    always outside the timed window. A wait of another of the process's threads (a runtime's
    helper) can drop an honest call: the rule errs toward dropping, never toward keeping.
    """

    TASKS = "/proc/self/task"

    def __init__(self):
        self._fds: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)

    @classmethod
    def open(cls) -> "RunQueueClock | None":
        """A reader, or None where schedstat cannot be read (not Linux, /proc hidden)."""
        clock = cls()
        try:
            clock.snapshot()
        except (OSError, ValueError, IndexError):
            clock.close()
            return None
        return clock

    def close(self) -> None:
        self._finalizer()

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Thread id -> (ns on a CPU, ns waiting on a run queue)."""
        out = {}
        for tid in os.listdir(self.TASKS):
            fd = self._fds.get(tid)
            try:
                if fd is None:
                    fd = self._fds[tid] = os.open(f"{self.TASKS}/{tid}/schedstat", os.O_RDONLY)
                fields = os.pread(fd, 128, 0).split()
            except (ProcessLookupError, FileNotFoundError):  # the thread ended between the listing and the read
                fd = self._fds.pop(tid, None)
                if fd is not None:
                    os.close(fd)
                continue
            out[tid] = (int(fields[0]), int(fields[1]))
        for tid in set(self._fds) - set(out):  # ended threads
            os.close(self._fds.pop(tid))
        return out

    @staticmethod
    def delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> tuple[int, int]:
        """(CPU ns, wait ns) between two snapshots: threads born in between count whole,
        threads ended in between are lost (their last counts are gone with them)."""
        cpu = wait = 0
        for tid, (c1, w1) in after.items():
            c0, w0 = before.get(tid, (0, 0))
            cpu, wait = cpu + max(c1 - c0, 0), wait + max(w1 - w0, 0)
        return cpu, wait


class HostTimer:
    """Wall time around the call (CPU work only: it does not synchronize a GPU).

    Each ``time_call`` also records the call's CPU time and run-queue wait (``last_cpu``,
    ``CallCpu``), read outside the window: schedstat of every thread of the process where
    Linux has it (``wait_source`` "schedstat"), else wall − the calling thread's CPU time
    ("thread_time": it misses a worker descheduled while the caller spins at a barrier).
    ``time_loop`` records none: its calls stay back to back, as a loop runs them."""

    name = "host"
    virtual = False
    last_drain_s = None  # no device to drain
    ticks_ms = QUANTUM_TICKS_MS  # a host call that waited resumes on a scheduler tick

    def __init__(self):
        self._rq = RunQueueClock.open()
        self.wait_source = WAIT_SOURCE_SCHEDSTAT if self._rq is not None else WAIT_SOURCE_THREAD_TIME
        self.last_cpu: dict[str, CallCpu] = {}

    def now_s(self) -> float:
        return time.perf_counter()

    def time_call(self, fn, *, arm="", before=None, again=None) -> float:
        if before is not None:
            before()
        rq = self._rq
        s0 = rq.snapshot() if rq is not None else None
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        s1 = rq.snapshot() if rq is not None else None
        ms = (t1 - t0) / 1e6
        self.last_host_s = ms / 1e3  # on the host, the whole call is host time
        cpu_ms = (c1 - c0) / 1e6
        if rq is not None:
            pcpu, wait = RunQueueClock.delta(s0, s1)
            self.last_cpu[arm] = CallCpu(ms, cpu_ms, pcpu / 1e6, wait / 1e6, WAIT_SOURCE_SCHEDSTAT)
        else:
            self.last_cpu[arm] = CallCpu(ms, cpu_ms, None, max(ms - cpu_ms, 0.0), WAIT_SOURCE_THREAD_TIME)
        return ms

    def time_loop(self, calls, *, arm="") -> list[float]:
        out = []
        for fn, before in calls:
            if before is not None:
                before()
            t0 = time.perf_counter_ns()
            fn()
            ms = (time.perf_counter_ns() - t0) / 1e6
            self.last_host_s = ms / 1e3
            out.append(ms)
        return out


# The spin that holds the stream while the host enqueues a timed call (CudaEventTimer).
BLOCK_MIN_S = 20e-6
BLOCK_MAX_S = 5e-3
FALLBACK_SM_HZ = 2.0e9
# Times a call is run again (on the next input slot, with at least twice the hold, up to
# BLOCK_MAX_S) when the spin ended before the host had enqueued it: the window may then
# hold host launch gaps.
HOST_GAP_RETRIES = 3


def max_sm_hz(device) -> float:
    """The GPU's max SM clock in Hz (NVML), or FALLBACK_SM_HZ when NVML cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        idx = device.index if device.index is not None else 0
        h = pynvml.nvmlDeviceGetHandleByIndex(idx)
        return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)) * 1e6
    except Exception:  # NVML missing: the spin is only a lower bound on the hold time
        return FALLBACK_SM_HZ


def hold_stream(seconds: float, cycles_per_s: float) -> None:
    """Enqueue a spin of at least ``seconds`` on the current stream (``cycles_per_s`` from
    ``max_sm_hz``: at a lower clock the spin only lasts longer, which is harmless)."""
    import torch

    torch.cuda._sleep(int(seconds * cycles_per_s))


class CudaEventTimer:
    """CUDA events around the call on the current stream; ``before`` is enqueued first.

    The flush kernel (``before``) is enqueued ahead of the start event, so its execution
    is outside the [start, end] window; it also keeps the GPU busy while the host enqueues
    the call, hiding launch latency in cold mode.
    """

    name = "cuda_event"
    virtual = False

    def __init__(self, device: str = "cuda"):
        import torch

        self._torch = torch
        self._device = torch.device(device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._enqueue_s: dict[str, float] = {}
        # Per arm: calls run again for a host gap; samples kept with one (retries spent).
        self.host_gaps: dict[str, int] = {}
        self.host_gaps_kept: dict[str, int] = {}
        self._cycles_per_s = max_sm_hz(self._device)
        self.last_drain_s: float | None = None

    def now_s(self) -> float:
        return time.perf_counter()

    def time_call(self, fn, *, arm="", before=None, again=None) -> float:
        # Hold the stream with a spin kernel while the host enqueues the call (nvbench's
        # blocking kernel): otherwise a launch-bound call is timed with the host's launch
        # gaps inside the window, and those depend on which arm ran last. The spin lasts
        # twice this arm's last host enqueue time, within [BLOCK_MIN_S, BLOCK_MAX_S].
        # Held and synchronized per call, not per round: a round queued behind one hold
        # widened the control's order effects (docs/measurement.md#control-arm-and-order-effects).
        for attempt in range(HOST_GAP_RETRIES + 1):
            if attempt and again is not None:
                fn, before = again()  # fresh inputs: the failed attempt left its own in L2
            if before is not None:
                before()
            hold = min(max(2.0 * self._enqueue_s.get(arm, BLOCK_MAX_S), BLOCK_MIN_S), BLOCK_MAX_S)
            hold_stream(hold, self._cycles_per_s)
            self._start.record()
            h0 = time.perf_counter()
            fn()
            self._end.record()
            enqueued = time.perf_counter() - h0
            # Checked, not assumed: if the start event is already reached now (the end
            # event enqueued too), the spin ended before the host had enqueued the whole
            # call, and the GPU may have waited on the host inside the window. (A spin that
            # ends in the few µs between the end record and this query reads as a gap too:
            # one needless re-run, never a missed gap.) Such a call is run again with at
            # least twice the hold, up to BLOCK_MAX_S: a host enqueue slower than usual (an
            # allocation, a cache miss) made the last-enqueue hold too short.
            gap = self._start.query()
            self._end.synchronize()
            ms = float(self._start.elapsed_time(self._end))
            self.last_host_s = enqueued
            # The whole device, not just this stream: work the call left on another stream
            # must not run beside the next call, and how long it still ran is evidence.
            self.last_drain_s = drain_s(self._device)
            if not gap:
                self._enqueue_s[arm] = enqueued
                return ms
            self._enqueue_s[arm] = max(enqueued, hold)
            if hold >= BLOCK_MAX_S or attempt == HOST_GAP_RETRIES:
                break  # no longer hold to try: keep the sample, counted
            self.host_gaps[arm] = self.host_gaps.get(arm, 0) + 1
        self.host_gaps_kept[arm] = self.host_gaps_kept.get(arm, 0) + 1
        return ms

    def time_loop(self, calls, *, arm="") -> list[float]:
        # Each call between its own events, all enqueued back to back and synchronized once:
        # the GPU goes from one call to the next as in a user's loop (triton.testing.do_bench),
        # with the next launch queued while the previous call runs.
        torch = self._torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in calls]
        for (fn, before), (start, end) in zip(calls, events):
            if before is not None:
                before()
            start.record()
            fn()
            end.record()
        if events:
            events[-1][1].synchronize()
        self.last_drain_s = drain_s(self._device)
        return [float(start.elapsed_time(end)) for start, end in events]
