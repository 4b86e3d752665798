"""The sustained mode: absolute rates at the sustained clock, one arm's calls back to back, as a
loop runs them.

The interleaved rounds of ``timing.measure`` isolate every call (a held stream, a
synchronize): right for a ratio of arms, which then share one clock, but a GPU that idles
between calls runs a multi-millisecond compute-bound kernel in its boost burst, above the
clock a loop of calls settles at. An absolute rate (TFLOP/s, GB/s) is what a user checks
with an independent timer, ``triton.testing.do_bench``, which times a loop. So for lines
whose bar judges an absolute rate, each candidate's rates come from this phase, which is
do_bench's protocol:

1. warm: ``warm_s`` of back-to-back calls, untimed, so the clock and power reach the level
   a loop holds (a compute-bound kernel's clock falls for about a second under load);
2. timed: at least ``min_calls`` calls and ``timed_s`` of them, each timed by its own
   window but enqueued back to back (``Timer.time_loop``), on the next input slot of the
   rotation, each after the caller's ``prepare`` (the sweep poisons the output there, so
   the output checked after the phase was written by the last timed call) and then
   do_bench's L2 flush, whatever the line's timing mode;
3. the median call, with the SM and memory clocks, power and clock-event reasons NVML saw
   during the timed calls, and the cycles per call: each call's time × the SM clock of its
   batch (the calls one synchronize closes, about ``BATCH_S`` long), median over the calls.

Why the flush in every mode: do_bench zeroes a 256 MB buffer before each call, which
leaves the L2 full of dirty lines that the timed kernel then writes back: a memory-bound
kernel pays for that inside its window (measured in
docs/benchmarks-log.md#why-decodes-rate-differed-from-do_benchs-the-flushs-dirty-lines). A rate that a user checks with do_bench is measured under do_bench's flush; the line's own mode still
governs the interleaved rounds, their speedups and the row's ``interleaved_ms``.

On the CPU there is no boost clock: no warm-up, a short timed loop.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping

from harness.measurement.timing.timers import clock_disagreement, clock_gap_us
from harness.measurement.clocks import kcycles as median_kcycles
from harness.measurement import clocks
from harness.measurement.timing.policy import l2_flush
from harness.measurement.timing.timers import CudaEventTimer, HostTimer

# Back-to-back load before timing: long enough for a compute-bound kernel's clock to settle
# near the level a long loop holds (docs/measurement.md#clocks-and-throttling: the settling curve on the H200).
WARM_S = {"cuda": 1.0, "cpu": 0.0}
# Timed loop length: as long as do_bench's default measurement loop is in the same order.
# Not shortened by a precision stop: on the H200 the calls right after the warm-up run ~1-3%
# slower than those 0.4 s later (the power limiter recovering from its overshoot), so a loop
# that stopped once its median's CI was tight (0.1 s) read triton_flash at N 4096 2.2% slower
# than the whole window (docs/benchmarks-log.md, issue 32).
TIMED_S = {"cuda": 0.5, "cpu": 0.05}
MIN_CALLS = 10
# Calls are enqueued in batches of about BATCH_S of device time, one synchronize per
# batch: the queue stays short, and the gap at a batch boundary (one host enqueue) is a
# negligible part of the load.
BATCH_S = 0.05
MAX_BATCH = 256


@dataclass(frozen=True)
class Sustained:
    """One arm's back-to-back calls: raw per-call times (ms) kept, statistics derived."""

    arm: str
    flush: str                      # what preceded each timed call: "l2_zero" (a GPU) or "none"
    timer: str
    warm_s: float                   # back-to-back load before the timed calls (s)
    samples: tuple[float, ...]      # per-call times of the timed calls (ms)
    last_slot: int                  # input slot of the last timed call (its output is checked)
    sm_mhz: float | None            # mean SM clock during the timed calls (NVML; None on the CPU)
    power_w: float | None           # mean board power during the timed calls
    clock_note: str | None = None
    mem_mhz: float | None = None    # mean memory clock during the timed calls: a memory-bound rate moves with it
    reasons: tuple[str, ...] = ()   # NVML clock-event reasons seen during the timed calls (sorted)
    # Why the timed calls' windows disagree with the independent clock (timers.clock_disagreement),
    # or None; and the evidence (timers.clock_gap_us). None/{} for a timer that keeps no windows.
    clock_fault: str | None = None
    clock_check: dict = field(default_factory=dict)
    # Per batch of timed calls (enqueued back to back, one synchronize): how many calls, and the
    # mean SM and memory clocks NVML read during it (None without NVML: the CPU).
    batch_calls: tuple[int, ...] = ()
    batch_sm_mhz: tuple[float | None, ...] = ()
    batch_mem_mhz: tuple[float | None, ...] = ()

    @property
    def kcycles(self) -> float | None:
        """Thousands of SM cycles per call: median over the calls of its time × its batch's SM
        clock (``clocks.kcycles``); None without a clock."""
        per_call = [mhz for n, mhz in zip(self.batch_calls, self.batch_sm_mhz) for _ in range(n)]
        return median_kcycles(list(zip(self.samples, per_call)))

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples)

    def as_dict(self) -> dict:
        return {"arm": self.arm, "flush": self.flush, "timer": self.timer, "warm_s": self.warm_s,
                "n_calls": len(self.samples), "median_ms": self.median_ms, "samples_ms": list(self.samples),
                "last_slot": self.last_slot, "sm_mhz": self.sm_mhz, "power_w": self.power_w,
                "mem_mhz": self.mem_mhz, "reasons": list(self.reasons), "clock_note": self.clock_note,
                "clock_fault": self.clock_fault, "clock_check": dict(self.clock_check),
                "kcycles": self.kcycles, "batches": {"calls": list(self.batch_calls), "sm_mhz": list(self.batch_sm_mhz),
                                                     "mem_mhz": list(self.batch_mem_mhz)}}


@dataclass(frozen=True)
class SustainBudget:
    """How long the sustained phase runs: ``warm_s`` of untimed back-to-back calls, then at
    least ``min_calls`` timed calls and ``timed_s`` of them (None: the device kind's default,
    ``WARM_S`` and ``TIMED_S``)."""

    warm_s: float | None = None
    timed_s: float | None = None
    min_calls: int = MIN_CALLS

    def seconds(self, kind: str) -> tuple[float, float]:
        """(warm_s, timed_s) on a device of ``kind`` ("cuda", "cpu")."""
        return (WARM_S[kind] if self.warm_s is None else self.warm_s,
                TIMED_S[kind] if self.timed_s is None else self.timed_s)


def sustain(arm: str, fn: Callable[[int], None], *, n_slots: int, device: str,
            prepare: Callable[[int], None] | None = None, timer=None, monitor=None,
            budget: SustainBudget = SustainBudget()) -> Sustained:
    """Time ``fn(slot)`` back to back after a warm-up of back-to-back calls (module docstring),
    for as long as ``budget`` says.

    ``timer`` and ``monitor`` are injectable (tests pass a ``ScriptedTimer`` and a clock
    monitor on a scripted source); by default CUDA events and NVML on a GPU, the host clock
    on the CPU. On a GPU every call follows the cold-mode flush (do_bench's), in every mode.
    """
    if n_slots < 1:
        raise ValueError(f"n_slots must be ≥ 1, got {n_slots}")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    warm_s, timed_s = budget.seconds(kind)
    flush = None
    if kind == "cuda":
        timer = timer or CudaEventTimer(device)
        flush = l2_flush(device)
    else:
        timer = timer or HostTimer()
    own = monitor is None
    note = None
    if own:
        monitor, note = clocks.open_monitor(device)
    calls = _Calls(fn, n_slots, prepare, flush)
    if monitor is not None:
        monitor.start(timer)
    try:
        windows = getattr(timer, "clock_calls", None)  # the harness's own timers keep them
        samples, batches, t1, t2 = _loop(timer, arm, calls, warm_s, timed_s, budget.min_calls)
    finally:
        if monitor is not None:
            monitor.stop()
            if own:  # on every exit: a kernel that raised here leaves no NVML session open
                monitor.source.close()
    sm = power = mem = None
    reasons: tuple[str, ...] = ()
    batch_clocks = [(None, None)] * len(batches)
    if monitor is not None:
        batch_clocks = [clocks.window_clocks(monitor.during(b0, b1)) for b0, b1, _ in batches]
        rs = monitor.during(t1, t2)
        sm = _mean([r.sm_mhz for r in rs])
        power = _mean([r.power_w for r in rs])
        mem = _mean([r.mem_mhz for r in rs])
        reasons = tuple(sorted({why for r in rs for why in r.reasons}))
        if monitor.error:
            note = f"clock polling stopped early: {monitor.error}"
        elif sm is None:
            note = "no clock reading during the timed calls"
    fault, check = None, {}
    if windows is not None:
        mine = windows.get(arm, [])
        fault = clock_disagreement(mine, timer.clock_slack_ms, timer.clock_resolution_ms)
        check = clock_gap_us(mine)
    return Sustained(arm=arm, flush="l2_zero" if flush is not None else "none", timer=timer.name, warm_s=warm_s,
                     samples=tuple(samples), last_slot=(calls.next - 1) % n_slots, sm_mhz=sm, power_w=power,
                     clock_note=note, mem_mhz=mem, reasons=reasons, clock_fault=fault, clock_check=check,
                     batch_calls=tuple(n for *_, n in batches),
                     batch_sm_mhz=tuple(c[0] for c in batch_clocks), batch_mem_mhz=tuple(c[1] for c in batch_clocks))


class _Calls:
    """The next ``n`` calls as ``Timer.time_loop`` takes them: ``fn`` on the next input slot of
    the rotation (``next``: slots handed out so far), each after ``prepare`` and then the flush."""

    def __init__(self, fn: Callable[[int], None], n_slots: int, prepare: Callable[[int], None] | None,
                 flush: Callable[[], None] | None):
        self.fn, self.n_slots, self.prepare, self.flush = fn, n_slots, prepare, flush
        self.next = 0

    def __call__(self, n: int) -> list[tuple[Callable[[], None], Callable[[], None] | None]]:
        fn, prepare, flush = self.fn, self.prepare, self.flush
        out = []
        for _ in range(n):
            s = self.next % self.n_slots
            self.next += 1

            def before(s=s) -> None:
                if prepare is not None:
                    prepare(s)
                if flush is not None:
                    flush()  # last, so prepare's writes do not warm the L2 for the call

            out.append(((lambda s=s: fn(s)), before if (prepare or flush) else None))
        return out


def _loop(timer, arm: str, calls: _Calls, warm_s: float, timed_s: float, min_calls: int):
    """The warm-up and the timed batches: (samples ms, per batch (start, end, calls), the timed
    calls' start and end)."""
    first = timer.time_loop(calls(1), arm=arm)[0]
    batch = max(1, min(MAX_BATCH, math.ceil(BATCH_S * 1e3 / first))) if first > 0 else MAX_BATCH
    t0 = timer.now_s()
    while timer.now_s() - t0 < warm_s:
        timer.time_loop(calls(batch), arm=arm)
    samples: list[float] = []
    windows = getattr(timer, "clock_calls", None)
    if windows is not None:
        windows.pop(arm, None)  # the warm-up's are not the timed calls'
    batches: list[tuple[float, float, int]] = []  # each batch's (start, end, calls), for its clock
    t1 = timer.now_s()
    while len(samples) < min_calls or timer.now_s() - t1 < timed_s:
        b0 = timer.now_s()
        got = timer.time_loop(calls(batch), arm=arm)
        batches.append((b0, timer.now_s(), len(got)))
        samples += got
    return samples, batches, t1, timer.now_s()


def _mean(values) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def rates(cfg, ms: float, workload) -> Mapping[str, float | None]:
    """TFLOP/s and GB/s (all bytes, and the streamed operand's: ``Workload.kv_bytes``, None
    where the workload has none) of one call of ``cfg`` taking ``ms``."""
    secs = ms * 1e-3
    kv = workload.kv_bytes(cfg)
    return {"tflops": workload.flops(cfg) / secs / 1e12, "gbps": workload.min_bytes(cfg) / secs / 1e9,
            "kv_gbps": None if kv is None else kv / secs / 1e9}


__all__ = ["BATCH_S", "MAX_BATCH", "MIN_CALLS", "SustainBudget", "Sustained", "TIMED_S", "WARM_S", "rates", "sustain"]
