"""Timers: how calls are timed. ``Timer`` is the protocol (and the test seam: tests inject a
virtual timer); ``HostTimer`` times CPU work, ``CudaEventTimer`` GPU calls between events.
Everything that times a kernel — ``measure``, the sustained phase, the ceilings — goes
through one."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Protocol, Sequence

from harness.measurement.leftover import drain_s


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


class HostTimer:
    """Wall time around the call (CPU work only: it does not synchronize a GPU)."""

    name = "host"
    virtual = False
    last_drain_s = None  # no device to drain

    def now_s(self) -> float:
        return time.perf_counter()

    def time_call(self, fn, *, arm="", before=None, again=None) -> float:
        if before is not None:
            before()
        t0 = time.perf_counter_ns()
        fn()
        ms = (time.perf_counter_ns() - t0) / 1e6
        self.last_host_s = ms / 1e3  # on the host, the whole call is host time
        return ms

    def time_loop(self, calls, *, arm="") -> list[float]:
        return [self.time_call(fn, arm=arm, before=before) for fn, before in calls]


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
        # widened the control's order effects (docs/benchmarks-log.md).
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
