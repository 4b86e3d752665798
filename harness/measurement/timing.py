"""The timing protocol: interleaved arms, warm-up by time, adaptive stopping, clock-checked rounds.

``measure(arms, ...)`` times several callables ("arms": candidate, baseline, control...)
the same way, in rounds, and returns a frozen ``Measurement`` holding every raw sample.

Protocol, step by step (each step is marked ``# step N`` in ``measure``):

1. Pick the timer: CUDA events on a GPU, ``perf_counter_ns`` on the CPU (where every mode
   degrades to plain host timing, and the result says so). Tests inject a ``ScriptedTimer``.
2. Open the clock monitor (NVML on a GPU) before anything runs, in the timer's time base.
3. Prime: one untimed-against-the-budget round (JIT, autotune, lazy init); in graph mode
   this is the side-stream warm-up and the CUDA-graph capture of every arm × slot.
4. Warm up by time budget (``warmup_ms``) in interleaved rounds; samples are discarded.
5. Take the reference SM clock from the tail of warm-up (under load, not idle, not
   throttled); extend the warm-up (at most ``WARMUP_MAX_EXTENSIONS`` times) while no clean
   reading exists, so the reference is never an idle or throttled clock; then extend it
   while the clock is still falling (``CLOCK_SETTLE_TOLERANCE``), so rounds are timed at
   the sustained clock, not in the boost burst before the power limiter settles.
6. Measure in rounds. Round r runs every arm once, in the r-th of ``round_orders`` (every
   permutation in turn for up to four arms, chained so that each round starts with the arm
   that ended the one before; past four, renamed blocks of a Williams design) so drift
   hits all arms alike and every arm runs first, and one and two calls after each arm,
   equally often. Before each call, outside the timed window,
   the caller's ``prepare`` runs (the sweep poisons the output there). Each call uses the
   next input slot of a global rotation (see ``rotation_slots``). Each round records its
   (t0, t1) so the monitor can attribute clocks to it. With ``lead_calls`` = k (cold and
   hot modes), each timed call is preceded by k untimed calls of the same arm on earlier
   slots, back to back, so the GPU runs as busy and as power-limited as in a loop of calls
   (the timed call stays isolated); the outputs checked after timing may then be a lead
   call's, computed by the same kernel on the same inputs.
   After each measured call, outside its window, the timer's host time for the enqueue is
   kept (``host_us``), and the caller's ``spot`` hook may copy the call's output: one
   measured call per arm, chosen at random (reservoir sampling, ``spot_seed``).
7. Stop adaptively: after ``min_samples`` kept rounds and ``min_time_ms`` of measured time,
   when every arm's ``rel_noise`` ≤ ``noise_target`` ("noise_target"); else at
   ``max_samples`` rounds ("max_samples"); else at ``timeout_s`` ("timeout").
8. Drop rounds whose minimum SM clock < ``throttle_threshold`` × reference (their samples are
   kept separately); the measurement is ``throttled`` when the dropped fraction exceeds
   ``max_drop_fraction`` or the reference itself was taken under an abnormal throttle.

Modes (GPU): ``cold`` zeroes a flush buffer of ``flush_bytes(L2)`` before every sample,
outside the timed window; ``hot`` relies on input rotation (``n_slots`` copies) to keep
the working set out of L2; ``graph`` times CUDA-graph replays (launch overhead removed): per-slot
graphs during warm-up, then, for K calls per sample (``graph_replays``, auto from warm-up),
one graph per arm and start slot holding K consecutive calls, so a sample is one launch.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import random
import statistics
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Protocol, Sequence

from harness.errors import UserError
from harness.measurement import clocks as _clocks
from harness.measurement.clocks import ClockMonitor, ClockSummary
from harness.measurement.stats import Stats, ratio, rel_noise, speedup_ci

MODES = ("cold", "hot", "graph")
# Policy defaults.
DEFAULT_MODE = "cold"
DEFAULT_WARMUP_MS = 250.0          # long enough for boost clocks to settle under load
DEFAULT_MIN_SAMPLES = 20           # kept rounds; the 95% median CI needs n ≥ 6 to exist at all
DEFAULT_MAX_SAMPLES = 2000         # rounds run (kept + dropped)
DEFAULT_MIN_TIME_MS = 200.0        # measured span, so slow drifts are sampled, not just a burst
DEFAULT_NOISE_TARGET = 0.005       # rel_noise: relative half-width of the median's 95% CI
DEFAULT_TIMEOUT_S = 60.0           # whole measure() call, warm-up included
DEFAULT_THROTTLE_THRESHOLD = 0.85  # drop a round whose min SM clock < 0.85 × reference
DEFAULT_MAX_DROP_FRACTION = 0.25   # more dropped rounds than this: the measurement is throttled
DEFAULT_CONTROL_TOLERANCE = 0.02   # control (= baseline function) must agree within ±2%
DEFAULT_GRAPH_REPLAYS = 0          # 0 = auto: enough replays per sample for GRAPH_TARGET_SAMPLE_MS
DEFAULT_LEAD_CALLS = 0             # untimed calls of the same arm just before each timed one
# A worker that spends longer than this in one phase of one kernel (gate, recheck; timing
# gets its own timeout_s on top) is killed and the pair recorded as crashed: a hung kernel
# costs minutes, not the night. Minutes, because the first call of a shape may compile.
DEFAULT_WATCHDOG_S = 600.0
LEAD_CALLS_MAX = 64
# Protocol constants.
WARMUP_MIN_ROUNDS = 1
WARMUP_MAX_EXTENSIONS = 3
# Sustained clocks: the warm-up is extended (up to WARMUP_SETTLE_MAX_EXTENSIONS more
# budgets) while the SM clock in its second half is > CLOCK_SETTLE_TOLERANCE below its first
# half. On the H200 a compute-bound kernel starts at 1980 MHz and settles at 1680-1820
# under sustained load; timed in the burst before that, SDPA read 4-9% faster than
# triton.testing.do_bench (2026-11-29, docs/benchmarks.md).
WARMUP_SETTLE_MAX_EXTENSIONS = 8
CLOCK_SETTLE_TOLERANCE = 0.01
GRAPH_TARGET_SAMPLE_MS = 0.2       # CUDA events resolve ~0.5 µs: a sample of ≥ 200 µs keeps that < 0.3%
GRAPH_MAX_REPLAYS = 64
GRAPH_SIDE_WARMUP_CALLS = 3        # calls on a side stream before capture (torch CUDA-graph docs)
# Cache policy. Writing exactly L2 bytes does not guarantee eviction (the replacement policy
# is not strict LRU, and Hopper's L2 is two partitions with far-side copies), so the flush
# writes several × L2; the floor keeps small-L2 or misreported devices safely flushed.
L2_FLUSH_FACTOR = 4
FLUSH_FLOOR_BYTES = 256 * 2**20
# Hot mode rotates inputs so the data touched between two uses of a slot exceeds L2 several times.
ROTATION_FACTOR = 4
MAX_ROTATION_SLOTS = 256           # caps graph count and allocations for tiny inputs
# Graph mode rotates inputs past the L2 as hot mode does when that takes at most this many
# copies: a memory-bound kernel (decode's KV cache: 2-8 copies) is then read from HBM, not
# from an L2 its one copy would fit in. Each copy costs a captured graph per arm and chain
# start, so µs kernels on tiny inputs (hundreds of copies) keep one L2-warm copy, as
# do_bench_cudagraph does; the row's n_slots says which.
GRAPH_MAX_ROTATION_SLOTS = 16

ARM_CANDIDATE, ARM_BASELINE, ARM_CONTROL = "candidate", "baseline", "control"
STOP_REASONS = ("noise_target", "max_samples", "timeout")
# Time budgets compare with this slack so float round-off (0.12 - 0.02 < 0.1) never adds a round.
TIME_EPS_S = 1e-9


# ------------------------------------------------------------------------------------------
# Policy
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingPolicy:
    """Every knob of the protocol; validated on construction (UserError names key and fix)."""

    mode: str = DEFAULT_MODE
    warmup_ms: float = DEFAULT_WARMUP_MS
    min_samples: int = DEFAULT_MIN_SAMPLES
    max_samples: int = DEFAULT_MAX_SAMPLES
    min_time_ms: float = DEFAULT_MIN_TIME_MS
    noise_target: float = DEFAULT_NOISE_TARGET
    timeout_s: float = DEFAULT_TIMEOUT_S
    throttle_threshold: float = DEFAULT_THROTTLE_THRESHOLD
    max_drop_fraction: float = DEFAULT_MAX_DROP_FRACTION
    control_tolerance: float = DEFAULT_CONTROL_TOLERANCE
    graph_replays: int = DEFAULT_GRAPH_REPLAYS
    lead_calls: int = DEFAULT_LEAD_CALLS
    watchdog_s: float = DEFAULT_WATCHDOG_S

    def __post_init__(self):
        def num(key, lo, hi, *, integer=False, lo_open=False):
            v = getattr(self, key)
            ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok_type:
                kind = "an integer" if integer else "a number"
                raise UserError(f"timing policy '{key}' = {v!r}: must be {kind} (e.g. {getattr(TimingPolicy, key)})")
            if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or v > hi:
                rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
                raise UserError(f"timing policy '{key}' = {v!r}: must lie in {rng} "
                                f"(default {getattr(TimingPolicy, key)})")

        if self.mode not in MODES:
            raise UserError(f"timing policy 'mode' = {self.mode!r}: must be one of {', '.join(MODES)}")
        num("warmup_ms", 0, 1e7)
        num("min_samples", 1, 10**7, integer=True)
        num("max_samples", 1, 10**7, integer=True)
        num("min_time_ms", 0, 1e7)
        num("noise_target", 0, 1, lo_open=True)
        num("timeout_s", 0, 1e6, lo_open=True)
        num("throttle_threshold", 0, 1, lo_open=True)
        num("max_drop_fraction", 0, 1)
        num("control_tolerance", 0, 1, lo_open=True)
        num("graph_replays", 0, GRAPH_MAX_REPLAYS * 16, integer=True)
        num("lead_calls", 0, LEAD_CALLS_MAX, integer=True)
        num("watchdog_s", 0, 1e6, lo_open=True)
        if self.lead_calls and self.mode == "graph":
            raise UserError(f"timing policy 'lead_calls' = {self.lead_calls} with mode 'graph': a graph sample "
                            f"already replays many calls back to back; use lead_calls with mode cold or hot")
        if self.min_samples > self.max_samples:
            raise UserError(f"timing policy 'min_samples' = {self.min_samples} exceeds 'max_samples' = "
                            f"{self.max_samples}: raise max_samples or lower min_samples")

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None) -> "TimingPolicy":
        """A policy from a registration's [timing] table; unknown keys are an error."""
        if d is not None and not isinstance(d, Mapping):
            raise UserError(f"[timing] must be a table of key = value, got {type(d).__name__}")
        d = dict(d or {})
        valid = [f.name for f in fields(cls)]
        for key in d:
            if key not in valid:
                raise UserError(f"unknown timing policy key '{key}': valid keys are {', '.join(valid)}")
        return cls(**d)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def flush_bytes(l2_bytes: int) -> int:
    """Size of the cold-mode flush buffer for a device with ``l2_bytes`` of L2."""
    return max(L2_FLUSH_FACTOR * int(l2_bytes), FLUSH_FLOOR_BYTES)


def rotation_slots(bytes_per_slot: int, l2_bytes: int, *, factor: int = ROTATION_FACTOR,
                   max_slots: int = MAX_ROTATION_SLOTS) -> int:
    """Input copies so that n × bytes_per_slot ≥ factor × L2 (capped at ``max_slots``).

    When the cap binds (tiny inputs), residual L2 reuse remains: use mode 'cold' there.
    """
    if bytes_per_slot <= 0:
        raise ValueError(f"bytes_per_slot must be > 0, got {bytes_per_slot}")
    return max(1, min(max_slots, math.ceil(factor * l2_bytes / bytes_per_slot)))


def device_l2_bytes(device: str) -> int:
    """L2 size of a CUDA device as torch reports it."""
    import torch

    return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)


# ------------------------------------------------------------------------------------------
# Timers (the test seam)
# ------------------------------------------------------------------------------------------
class Timer(Protocol):
    """Times one call. ``before`` runs outside the timed window (cold-mode flush).

    ``again()``, when given, returns a (fn, before) pair for the same arm on the next input
    slot: a timer that must re-run a call (CudaEventTimer, after a host gap) takes that,
    so the re-run never reads inputs the failed attempt left in L2.

    After each call, ``last_host_s`` holds the host time the call's enqueue took
    (perf_counter around ``fn``): the row's ``host_us``.
    """

    name: str
    virtual: bool
    last_host_s: float

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


class HostTimer:
    """Wall time around the call (CPU work only: it does not synchronize a GPU)."""

    name = "host"
    virtual = False

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


def _max_sm_hz(device) -> float:
    """The GPU's max SM clock in Hz (NVML), or FALLBACK_SM_HZ when NVML cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        idx = device.index if device.index is not None else 0
        h = pynvml.nvmlDeviceGetHandleByIndex(idx)
        return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)) * 1e6
    except Exception:  # NVML missing: the spin is only a lower bound on the hold time
        return FALLBACK_SM_HZ


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
        # torch.cuda._sleep spins for a number of SM cycles; the max SM clock converts time to
        # cycles (at a lower clock the spin only lasts longer, which is harmless).
        self._cycles_per_s = _max_sm_hz(self._device)

    def now_s(self) -> float:
        return time.perf_counter()

    def time_call(self, fn, *, arm="", before=None, again=None) -> float:
        # Hold the stream with a spin kernel while the host enqueues the call (nvbench's
        # blocking kernel). Without it a launch-bound call (several small kernels, µs each)
        # is timed with the host's launch gaps inside the window, and those gaps depend on
        # what the host did just before — which arm ran last — so the control arm (the
        # baseline timed twice) drifted 10-25% from 1.0 on the H200. The spin lasts twice
        # this arm's last host enqueue time, within [BLOCK_MIN_S, BLOCK_MAX_S].
        # Held and synchronized per call, not per round: queueing a whole round behind one
        # hold (calls back to back, a busier GPU) was tried on the H200 at fb4c42d and the
        # control's order effects grew to ±2.5% on µs configs (14/16 within ±2%, not 16/16).
        for attempt in range(HOST_GAP_RETRIES + 1):
            if attempt and again is not None:
                fn, before = again()  # fresh inputs: the failed attempt left its own in L2
            if before is not None:
                before()
            hold = min(max(2.0 * self._enqueue_s.get(arm, BLOCK_MAX_S), BLOCK_MIN_S), BLOCK_MAX_S)
            self._torch.cuda._sleep(int(hold * self._cycles_per_s))
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
            # allocation, a cache miss) made the last-enqueue hold too short, and the first
            # arm of decode explorations at B 1, 8k keys read ~10% slow in hot mode.
            gap = self._start.query()
            self._end.synchronize()
            ms = float(self._start.elapsed_time(self._end))
            self.last_host_s = enqueued
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
        return [float(start.elapsed_time(end)) for start, end in events]


class ScriptedTimer:
    """Virtual clock for tests: scripted durations per arm, time advances by them.

    ``durations[arm]`` is a constant (ms), a sequence (indexed by the arm's call count,
    IndexError when exhausted) or ``f(call_index, t_s) -> ms``. Each call also advances the
    clock by ``overhead_ms``. Listeners (a virtual ``ClockMonitor``) are called with the new
    time after every advance. Time is kept in integer ns so runs are bit-reproducible.
    """

    name = "scripted"
    virtual = True

    def __init__(self, durations: Mapping[str, float | Sequence[float] | Callable[[int, float], float]],
                 *, overhead_ms: float = 0.0, start_s: float = 0.0):
        self._durations = dict(durations)
        self._overhead_ns = round(overhead_ms * 1e6)
        self._ns = round(start_s * 1e9)
        self._count: dict[str, int] = {}
        self._listeners: list[Callable[[float], None]] = []
        self.calls: list[tuple[str, float]] = []  # (arm, start time) of every timed call

    def add_listener(self, cb: Callable[[float], None]) -> None:
        self._listeners.append(cb)

    def now_s(self) -> float:
        return self._ns / 1e9

    def advance(self, seconds: float) -> None:
        """Let virtual time pass outside any call."""
        self._ns += round(seconds * 1e9)
        for cb in self._listeners:
            cb(self.now_s())

    def _duration(self, arm: str) -> float:
        if arm not in self._durations:
            raise KeyError(f"ScriptedTimer has no durations for arm '{arm}'")
        spec, k = self._durations[arm], self._count.get(arm, 0)
        self._count[arm] = k + 1
        if callable(spec):
            return float(spec(k, self.now_s()))
        if isinstance(spec, (int, float)):
            return float(spec)
        return float(spec[k])

    def time_call(self, fn, *, arm="", before=None, again=None) -> float:
        if before is not None:
            before()
        self.calls.append((arm, self.now_s()))
        h0 = time.perf_counter()
        fn()
        self.last_host_s = time.perf_counter() - h0  # real host time: the arm's own Python
        ms = self._duration(arm)
        self.advance((round(ms * 1e6) + self._overhead_ns) / 1e9)
        return ms

    def time_loop(self, calls, *, arm="") -> list[float]:
        return [self.time_call(fn, arm=arm, before=before) for fn, before in calls]


# ------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Round:
    """One interleaved round: when it ran, in which order, each arm's sample (ms), its clocks."""

    index: int
    t0: float
    t1: float
    order: tuple[str, ...]
    samples: dict[str, float]          # never mutated
    min_sm_mhz: float | None = None
    dropped: bool = False
    drop_reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArmResult:
    """Raw samples (ms) of one arm: kept rounds, dropped rounds, and stats of the kept ones."""

    name: str
    samples: tuple[float, ...]
    dropped_samples: tuple[float, ...]
    stats: Stats

    @classmethod
    def build(cls, name: str, samples: Sequence[float], dropped: Sequence[float]) -> "ArmResult":
        s = tuple(float(x) for x in samples)
        return cls(name, s, tuple(float(x) for x in dropped), Stats.from_samples(s))


def _json_safe(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


@dataclass(frozen=True)
class Measurement:
    """Everything one ``measure`` call observed. Statistics are derived from the raw samples."""

    arms: dict[str, ArmResult]         # never mutated; insertion order = arm order
    rounds: tuple[Round, ...]
    stop_reason: str
    mode: str                          # requested
    effective_mode: str                # "host" on the CPU
    n_slots: int
    graph_replays: int                 # K replays per sample (1 outside graph mode)
    timer: str
    policy: TimingPolicy
    warmup_rounds: int
    warmup_extensions: int
    elapsed_s: float
    clock: ClockSummary | None
    clock_note: str | None             # why clocks are missing/doubtful: surface it as a warning
    timing_note: str | None            # e.g. the CPU degrade
    throttled: bool
    throttle_note: str | None = None
    # CUDA-event timer: per arm, calls of the measured rounds re-run because the host had not
    # enqueued them when the hold ended, and samples kept with a possible host gap.
    host_gaps: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per arm: median host time (µs) of enqueuing one timed call, over the kept rounds.
    host_us: dict[str, float | None] = field(default_factory=dict)
    # The random timed call whose output the caller checks (``spot``): per arm, its index
    # among the arm's measured calls and its input slot; the seed that chose it.
    spot_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    spot_seed: int | None = None

    @property
    def n_dropped(self) -> int:
        return sum(r.dropped for r in self.rounds)

    @property
    def drop_fraction(self) -> float:
        return self.n_dropped / len(self.rounds) if self.rounds else 0.0

    def speedup(self, candidate: str = ARM_CANDIDATE, baseline: str = ARM_BASELINE,
                confidence: float = 0.95) -> tuple[float, float, float]:
        """(ratio, lo, hi): baseline median / candidate median with its paired bootstrap CI."""
        b, c = self.arms[baseline].samples, self.arms[candidate].samples
        if not b or not c:
            return math.nan, math.nan, math.nan
        lo, hi = speedup_ci(b, c, confidence=confidence)
        return ratio(b, c), lo, hi

    @property
    def control_ratio(self) -> float | None:
        """baseline median / control median (the same function twice: should be 1)."""
        if ARM_CONTROL not in self.arms or ARM_BASELINE not in self.arms:
            return None
        b, c = self.arms[ARM_BASELINE].samples, self.arms[ARM_CONTROL].samples
        return ratio(b, c) if b and c else None

    @property
    def control_ok(self) -> bool | None:
        r = self.control_ratio
        return None if r is None else abs(r - 1.0) <= self.policy.control_tolerance

    def to_row(self, *, include_rounds: bool = True) -> dict:
        """JSON-serializable record for the ledger (non-finite floats become None)."""
        row: dict[str, Any] = {
            "mode": self.mode, "effective_mode": self.effective_mode, "timer": self.timer,
            "n_slots": self.n_slots, "graph_replays": self.graph_replays, "stop_reason": self.stop_reason,
            "n_rounds": len(self.rounds), "n_dropped": self.n_dropped, "throttled": self.throttled,
            "throttle_note": self.throttle_note, "warmup_rounds": self.warmup_rounds,
            "warmup_extensions": self.warmup_extensions, "elapsed_s": self.elapsed_s,
            "timing_note": self.timing_note, "clock_note": self.clock_note, "policy": self.policy.as_dict(),
            "arms": {name: {"stats": a.stats.as_dict(), "samples_ms": list(a.samples),
                            "dropped_samples_ms": list(a.dropped_samples)} for name, a in self.arms.items()},
            "clock": self.clock.as_dict() if self.clock else None,
            "control_ratio": self.control_ratio, "control_ok": self.control_ok, "host_gaps": self.host_gaps,
            "host_us": self.host_us, "spot_calls": self.spot_calls, "spot_seed": self.spot_seed,
        }
        if include_rounds:  # columnar: compact for thousands of rounds
            row["rounds"] = {
                "t0": [r.t0 for r in self.rounds], "t1": [r.t1 for r in self.rounds],
                "first": [r.order[0] for r in self.rounds],
                "min_sm_mhz": [r.min_sm_mhz for r in self.rounds],
                "dropped": [r.index for r in self.rounds if r.dropped],
                "drop_reasons": {str(r.index): list(r.drop_reasons) for r in self.rounds if r.dropped},
            }
        return _json_safe(row)


# ------------------------------------------------------------------------------------------
# GPU helpers (torch imported lazily)
# ------------------------------------------------------------------------------------------
def _capture_graphs(arms: Mapping[str, Callable[[int], None]], names: Sequence[str], n_slots: int,
                    device: str) -> dict[str, tuple]:
    """One CUDA graph per arm × slot, after a side-stream warm-up (as the torch docs require)."""
    import torch

    dev = torch.device(device)
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream(device=dev)
    graphs: dict[str, tuple] = {}
    for name in names:
        fn = arms[name]
        try:
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for slot in range(n_slots):
                    for _ in range(GRAPH_SIDE_WARMUP_CALLS if slot == 0 else 1):
                        fn(slot)
            torch.cuda.current_stream(dev).wait_stream(side)
            torch.cuda.synchronize(dev)
            per_slot = []
            for slot in range(n_slots):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    fn(slot)
                per_slot.append(g)
            graphs[name] = tuple(per_slot)
        except RuntimeError as exc:
            raise UserError(f"arm '{name}' cannot be captured into a CUDA graph ({exc}): "
                            f"time it with mode 'hot' or 'cold' instead") from exc
    torch.cuda.synchronize(dev)
    return graphs


def _capture_chains(arms: Mapping[str, Callable[[int], None]], names: Sequence[str], n_slots: int,
                    starts: Sequence[int], replays: int, device: str) -> dict[str, dict[int, Any]]:
    """Per arm and start slot, ONE graph of ``replays`` consecutive calls (slots start, start+1, ...).

    A sample is then one graph launch, not ``replays`` launches: on the H200 each launch of
    a separate graph cost ~2 µs of GPU time between graphs, so a 7 µs add read 9 µs per
    replay and arms whose graphs were captured later read up to 6% slower (control 0.94).
    Arms are already warm (step 3/4), so no side-stream warm-up is needed here.
    """
    import torch

    pool = torch.cuda.graph_pool_handle()
    chains: dict[str, dict[int, Any]] = {}
    for name in names:
        fn = arms[name]
        chains[name] = {}
        for start in starts:
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, pool=pool):
                    for j in range(replays):
                        fn((start + j) % n_slots)
            except RuntimeError as exc:
                raise UserError(f"arm '{name}' cannot be captured into a CUDA graph ({exc}): "
                                f"time it with mode 'hot' or 'cold' instead") from exc
            chains[name][start] = g
    torch.cuda.synchronize(torch.device(device))
    return chains


def _auto_replays(warm: Mapping[str, list[float]]) -> int:
    """K so that a graph sample of the fastest arm lasts ≥ GRAPH_TARGET_SAMPLE_MS."""
    import numpy as np

    meds = [float(np.median(v)) for v in warm.values() if v]
    fastest = min(meds) if meds else 0.0
    if fastest <= 0:
        return GRAPH_MAX_REPLAYS
    return max(1, min(GRAPH_MAX_REPLAYS, math.ceil(GRAPH_TARGET_SAMPLE_MS / fastest)))


# ------------------------------------------------------------------------------------------
# The protocol
# ------------------------------------------------------------------------------------------
# Up to this many arms every permutation is used in turn (3 arms: 6 orders), so each arm
# runs first, and follows each other arm, equally often; beyond it, a Williams design.
MAX_PERMUTED_ARMS = 4
# Past MAX_PERMUTED_ARMS, ORDER_BLOCKS blocks of the Williams design (2n rounds each), the
# arms renamed in each block: of ORDER_CANDIDATES seeded shuffles, the one that keeps the
# counts of "arm x ran k calls before arm y" most even for k in ORDER_LAGS (for k = 1 only
# the block boundaries vary: inside a block every pair is even). Seeded: the same orders
# in every run.
ORDER_SEED = 0
ORDER_BLOCKS = 64
ORDER_CANDIDATES = 24
ORDER_LAGS = (1, 2, 3)


def round_orders(names: Sequence[str]) -> list[tuple[str, ...]]:
    """The arm orders rounds cycle through.

    Rotations alone (ABC, BCA, CAB) put every arm first equally often but not after every
    other arm equally often: with a candidate, the baseline follows the candidate in two of
    three rounds and the control follows the baseline in two of three, so whatever one call
    leaves behind (allocator state, host caches, clocks) lands on baseline and control
    unequally — a bias in the control arm. Cycling through all permutations balances both.
    Past MAX_PERMUTED_ARMS (5 arms: 120 orders) a Williams design does it in 2n orders:
    every arm first, and right after every other arm, equally often. Rotations
    there measured 10-20% too slow an arm that always followed a K/V copy, which leaves the
    L2 full of dirty lines for the next call to write back (explore_decode_splits, 12 arms,
    84d7b14: the same kernel read 0.63 of the copy ceiling after copy_kv, 0.76 elsewhere).

    Both designs balance the pairs *inside* a round; the last call of one round and the
    first of the next are a pair too (1 in n of all pairs). In their natural order those
    were unbalanced: with 3 arms the control followed the candidate in half its rounds, the
    baseline in a third; with 5 the first-listed arm followed the fourth-listed 59 times per
    200 rounds, the second-listed 40. Two identical decode arms beside a K/V copy then read
    1-2.5% apart in hot mode (explore_decode_splits --solo, a8c3a21). So the orders are
    chained: each starts with the arm the one before ended with (an Euler circuit over the
    orders, first arm -> last arm, cyclic), and every round boundary is an arm followed by
    itself, which every arm gets equally often (as often as it runs first). The chained
    permutations are then balanced two calls back as well (up to 4 arms).

    A Williams square is balanced only one call back: in its rows the arm two places before
    another is mostly the same one. Beside a K/V copy, whose dirty L2 lines outlast the
    next call, one of two identical decode arms had the copy two calls back in half its
    rounds, the other never, and read 8.5% slower (B 1, 8k keys, hot mode, 2dc074b). So
    past MAX_PERMUTED_ARMS the square is repeated in blocks with the arms renamed, each
    renaming chosen to even out who runs one to three calls before whom (``_blocks``).
    """
    names = tuple(names)
    if len(names) <= MAX_PERMUTED_ARMS:
        return _chain(list(itertools.permutations(names)))
    return [tuple(names[i] for i in row) for row in _blocks(len(names))]


@functools.lru_cache(maxsize=None)
def _blocks(n: int) -> tuple[tuple[int, ...], ...]:
    """ORDER_BLOCKS renamed copies of the chained Williams square on n arms (see
    ``round_orders``): greedy, each block's renaming the seeded candidate that leaves the
    running counts of (x k calls before y), k in ORDER_LAGS, closest to even."""
    block = _chain([tuple(row) for row in _williams(n)])
    rng = random.Random(ORDER_SEED)
    counts = {k: [[0] * n for _ in range(n)] for k in ORDER_LAGS}
    calls: list[int] = []
    orders: list[tuple[int, ...]] = []

    def added(seq: list[int]) -> dict:
        """The (k, x, y) pairs that appending ``seq`` to ``calls`` adds."""
        tail = calls[-max(ORDER_LAGS):]
        full = tail + seq
        return {k: [(full[i - k], full[i]) for i in range(len(tail), len(full)) if i >= k] for k in ORDER_LAGS}

    def spread(new: dict) -> float:
        total = 0.0
        for k, pairs in new.items():
            c = [row[:] for row in counts[k]]
            for x, y in pairs:
                c[x][y] += 1
            off = [c[x][y] for x in range(n) for y in range(n) if x != y]
            same = [c[x][x] for x in range(n)]
            total += max(off) - min(off) + max(same) - min(same)
        return total

    for _ in range(ORDER_BLOCKS):
        best = None
        for _ in range(ORDER_CANDIDATES):
            perm = list(range(n))
            rng.shuffle(perm)
            rows = [tuple(perm[i] for i in row) for row in block]
            new = added([a for row in rows for a in row])
            score = spread(new)
            if best is None or score < best[0]:
                best = (score, rows, new)
        _, rows, new = best
        for k, pairs in new.items():
            for x, y in pairs:
                counts[k][x][y] += 1
        orders += rows
        calls += [a for row in rows for a in row]
    return tuple(orders)


def _williams(n: int) -> list[list[int]]:
    """Williams' balanced Latin square, 2n rows: every symbol first twice, and every ordered
    pair of symbols adjacent twice, with the rows chainable (see ``_chain``).

    The square: the first row 0, 1, n-1, 2, n-2, ..., each next row shifted by one; for odd n
    also every row reversed. For even n its rows run k -> k + n/2 (first -> last), n/2
    separate pairs that no chain can join, so the square is taken twice, the second time
    with the symbols n/2 + j renamed n/2 + (j + 1) mod n/2: still balanced (a renamed
    balanced square is one), and the renamed rows join the pairs into one cycle.
    """
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(i + k) % n for i in first] for k in range(n)]
    if n % 2:
        return rows + [row[::-1] for row in rows]
    half = n // 2
    rename = [j if j < half else half + (j - half + 1) % half for j in range(n)]
    return rows + [[rename[i] for i in row] for row in rows]


def _chain(rows: list[tuple]) -> list[tuple]:
    """``rows`` reordered so that each starts with the last arm of the one before, cyclically
    (Hierholzer's algorithm on the multigraph with an edge first -> last per row; every arm
    starts as many rows as it ends in both designs, so the circuit exists)."""
    out_edges: dict = {}
    for row in rows:
        out_edges.setdefault(row[0], []).append(row)
    for edges in out_edges.values():
        edges.reverse()  # pop() from the end takes rows in their given order
    stack: list[tuple] = []
    circuit: list[tuple] = []
    node = rows[0][0]
    while True:
        if out_edges.get(node):
            row = out_edges[node].pop()
            stack.append(row)
            node = row[-1]
        elif stack:
            circuit.append(stack.pop())
            node = circuit[-1][0]
        else:
            break
    circuit.reverse()
    if len(circuit) != len(rows):
        raise RuntimeError(f"round orders could not be chained ({len(circuit)} of {len(rows)} rows)")
    return circuit


# A reference below this fraction of the GPU's max SM clock is an idle or throttled reading
# (the H200 idles at 345 of 1980 MHz), never a reference to judge rounds against.
REFERENCE_MIN_FRACTION = 0.5


def _unverified_clocks(ref, monitor) -> str | None:
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


def measure(arms: Mapping[str, Callable[[int], None]], *, n_slots: int, policy: TimingPolicy, device: str,
            timer: Timer | None = None, monitor: ClockMonitor | None = None,
            prepare: Mapping[str, Callable[[int], None]] | None = None,
            spot: Mapping[str, Callable[[int], None]] | None = None, spot_seed: int = 0) -> Measurement:
    """Time ``arms`` (name -> fn(slot)) interleaved under ``policy`` on ``device`` (module docstring).

    ``prepare[name](slot)``, when given, runs before each of that arm's calls outside the
    timed window (the sweep poisons the arm's output there, so no call can skip its work
    by finding the last answer still in place).

    ``spot[name](slot)``, when given, runs right after one of that arm's measured calls,
    outside the window, chosen uniformly at random among all of them (reservoir sampling,
    ``random.Random(spot_seed)``): the sweep copies that call's output there and checks it
    after timing, so a kernel right only on some calls cannot count on which are checked.
    It may run more than once (each later choice replaces the earlier); the last is the one.
    """
    names = tuple(arms)
    if not names:
        raise ValueError("measure() needs at least one arm")
    if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
        raise ValueError(f"n_slots must be an integer ≥ 1, got {n_slots!r}")
    on_gpu = device.startswith("cuda")

    # step 1: the timer, and what the mode really means here
    timing_note = None
    if on_gpu:
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"device '{device}' requested but torch.cuda.is_available() is False: "
                            f"run on a GPU machine or use device 'cpu'")
        effective_mode = policy.mode
        timer = timer or CudaEventTimer(device)
    else:
        effective_mode = "host"
        timing_note = (f"{device}: mode '{policy.mode}' degrades to host timing (perf_counter around each "
                       f"call; no L2 flush, no CUDA graph)")
        timer = timer or HostTimer()

    # step 2: clocks, in the timer's time base, before anything runs (idle readings included)
    clock_notes: list[str] = []
    own_monitor = monitor is None
    if monitor is None:
        monitor, note = _clocks.open_monitor(device)
        if note:
            clock_notes.append(note)
    flush_buf = None
    graphs: dict[str, tuple] = {}
    chains: dict[str, dict[int, Any]] = {}
    ctx = contextlib.ExitStack()
    if on_gpu:  # events, flush buffer, graphs and arms all on the requested device
        ctx.enter_context(torch.cuda.device(torch.device(device)))
    t_begin = timer.now_s()
    deadline = t_begin + policy.timeout_s
    if monitor is not None:
        monitor.start(timer)
    try:
        before = None
        if effective_mode == "cold":  # (on a GPU: torch is imported in step 1)
            flush_buf = torch.empty(flush_bytes(device_l2_bytes(device)), dtype=torch.uint8, device=device)
            before = flush_buf.zero_
        replays = 1
        slot_counter = [0]
        orders = round_orders(names)

        def _before(name: str, slot: int) -> Callable[[], None] | None:
            # What runs before a timed call, outside its window: the lead calls, the caller's
            # prepare, then the flush (last, so neither warms the L2 for the call).
            prep = prepare.get(name) if prepare else None
            lead, flush, fn = policy.lead_calls, before, arms[name]
            if prep is None and not lead:
                return flush

            def run() -> None:
                # lead_calls: untimed and back to back, so the GPU is as busy (as hot, as
                # power-limited) as in a loop of calls; the timed call is still isolated by
                # the hold and its own synchronize. On earlier slots (already timed, not
                # timed again for n_slots calls), so a lead never warms a timed call's inputs.
                for i in range(lead):
                    fn((slot - 1 - i) % n_slots)
                if prep is not None:
                    prep(slot)
                if flush is not None:
                    flush()

            return run

        def next_slot() -> int:
            # Global slot rotation across arms: consecutive calls never share inputs.
            slot = slot_counter[0] % n_slots
            slot_counter[0] += replays
            return slot

        def make_call(name: str, slot: int) -> tuple[Callable[[], None], Callable[[], None] | None]:
            """(call, before) of arm ``name`` on input slot ``slot``."""
            if effective_mode == "graph":
                return (chains[name][slot] if chains else graphs[name][slot]).replay, _before(name, slot)
            fn = arms[name]
            return (lambda: fn(slot)), _before(name, slot)

        spot_rng = random.Random(spot_seed)
        spot_seen: dict[str, int] = {}
        spot_calls: dict[str, dict[str, int]] = {}

        def after_call(name: str, slot: int) -> None:
            # Reservoir sampling: the k-th measured call replaces the choice with chance 1/k.
            k = spot_seen[name] = spot_seen.get(name, 0) + 1
            if spot_rng.random() * k < 1.0:
                spot[name](slot)
                spot_calls[name] = {"call": k - 1, "slot": slot}

        def run_round(rot: int, record: dict[str, list[float]] | None,
                      host: dict[str, list[float]] | None = None) -> tuple[float, float, tuple[str, ...], dict]:
            order = orders[rot % len(orders)]
            out: dict[str, float] = {}
            t0 = timer.now_s()
            for name in order:
                slot = next_slot()
                call, pre = make_call(name, slot)
                # A re-run (host gap) takes later slots: the slot of the call kept is the last taken.
                taken = [slot]

                def again(name=name):
                    taken.append(next_slot())
                    return make_call(name, taken[-1])

                ms = timer.time_call(call, arm=name, before=pre, again=again) / replays
                out[name] = ms
                if record is not None:
                    record[name].append(ms)
                if host is not None:
                    host[name].append(getattr(timer, "last_host_s", math.nan))
                    if spot and name in spot:
                        after_call(name, taken[-1])
            return t0, timer.now_s(), order, out

        # step 3: prime (JIT/autotune/lazy init; graph capture) — not counted in the warm-up budget
        if effective_mode == "graph":
            graphs = _capture_graphs(arms, names, n_slots, device)
        run_round(0, None)

        # step 4: warm up by time budget
        warm: dict[str, list[float]] = {n: [] for n in names}
        warmup_rounds, timed_out = 0, False

        def warm_up() -> tuple[float, float]:
            nonlocal warmup_rounds, timed_out
            w0 = timer.now_s()
            n = 0
            while n < WARMUP_MIN_ROUNDS or timer.now_s() - w0 < policy.warmup_ms / 1000.0 - TIME_EPS_S:
                if timer.now_s() >= deadline - TIME_EPS_S:
                    timed_out = True
                    break
                run_round(warmup_rounds, warm)
                warmup_rounds += 1
                n += 1
            return w0, timer.now_s()

        w0, w1 = warm_up()

        # step 5: the reference clock from the tail of warm-up. Extend the warm-up while it is
        # not clean (idle, throttled, missing), then while the clock is still falling
        # (sustained, not burst, clocks); an extension for one reason re-checks the other, so
        # the final reference always comes from the last window and is clean when one exists.
        ref = _clocks.Reference(None, False)
        extensions = 0
        if monitor is not None:
            clean_ext = settle_ext = 0
            while True:
                ref = _clocks.reference_clock(monitor, w0, w1)
                falling = _clocks.still_falling(monitor, w0, w1, CLOCK_SETTLE_TOLERANCE)
                if timed_out:
                    break
                if not ref.clean and clean_ext < WARMUP_MAX_EXTENSIONS:
                    clean_ext += 1
                elif ref.clean and falling and settle_ext < WARMUP_SETTLE_MAX_EXTENSIONS:
                    settle_ext += 1
                else:
                    break
                w0, w1 = warm_up()
            extensions = clean_ext + settle_ext
            if falling:
                clock_notes.append(f"SM clock still falling at the end of warm-up ({falling[0]:.0f} -> "
                                   f"{falling[1]:.0f} MHz): raise [timing] warmup_ms")
            if ref.note:
                clock_notes.append(ref.note)
        if effective_mode == "graph":
            replays = policy.graph_replays or _auto_replays(warm)
            if replays > 1:
                # Every start slot the measured rounds will reach (the counter steps by replays).
                c0 = slot_counter[0]
                starts = sorted({(c0 + i * replays) % n_slots for i in range(n_slots)})
                chains = _capture_chains(arms, names, n_slots, starts, replays, device)
                graphs = {}

        # step 6/7: interleaved rounds with adaptive stopping
        raw: list[tuple[float, float, tuple[str, ...], dict]] = []
        verdicts: list[tuple[float | None, bool, tuple[str, ...]]] = []

        def attribute(final: bool) -> None:
            # A round is final once a reading after its end exists (no later reading can
            # fall inside it); after the monitor stops, every round is.
            while len(verdicts) < len(raw):
                t0, t1 = raw[len(verdicts)][:2]
                if not final and monitor.last_t <= t1:
                    break
                verdicts.append(_clocks.round_verdict(monitor.during(t0, t1), ref.mhz, policy.throttle_threshold))

        samples: dict[str, list[float]] = {n: [] for n in names}
        host_s: dict[str, list[float]] = {n: [] for n in names}
        stop_reason = "timeout" if timed_out else None
        gaps0 = {k: dict(getattr(timer, k, {})) for k in ("host_gaps", "host_gaps_kept")}
        t_m0 = timer.now_s()
        while stop_reason is None:
            t0, t1, order, out = run_round(len(raw), None, host_s)
            raw.append((t0, t1, order, out))
            for n in names:
                samples[n].append(out[n])
            if monitor is not None:
                attribute(final=False)
            kept = [i for i, v in enumerate(verdicts) if not v[1]] + list(range(len(verdicts), len(raw)))
            now = timer.now_s()
            if (len(kept) >= policy.min_samples and now - t_m0 >= policy.min_time_ms / 1000.0 - TIME_EPS_S
                    and all(rel_noise([samples[n][i] for i in kept]) <= policy.noise_target for n in names)):
                stop_reason = "noise_target"
            elif len(raw) >= policy.max_samples:
                stop_reason = "max_samples"
            elif now >= deadline - TIME_EPS_S:
                stop_reason = "timeout"
    finally:
        if monitor is not None:
            monitor.stop()
            if own_monitor:
                monitor.source.close()
        graphs, chains, flush_buf, before = {}, {}, None, None
        ctx.close()

    # step 8: final attribution, drops, summary
    if monitor is not None:
        attribute(final=True)
        if monitor.error:
            clock_notes.append(f"clock polling stopped early: {monitor.error}")
    rounds = tuple(
        Round(i, t0, t1, order, out, *(verdicts[i] if monitor is not None else (None, False, ())))
        for i, (t0, t1, order, out) in enumerate(raw))
    arm_results = {n: ArmResult.build(n, [r.samples[n] for r in rounds if not r.dropped],
                                      [r.samples[n] for r in rounds if r.dropped]) for n in names}
    clock = None
    if monitor is not None:
        span = (rounds[0].t0, rounds[-1].t1) if rounds else (w0, w1)
        clock = _clocks.summarize(monitor, span[0], span[1], ref, [r.drop_reasons for r in rounds if r.dropped])
        if clock.poll_hz < _clocks.MIN_POLL_HZ:
            clock_notes.append(f"clock poll rate {clock.poll_hz:.0f} Hz < {_clocks.MIN_POLL_HZ:.0f} Hz: "
                               f"rounds are attributed to sparse readings")
    n_dropped = sum(r.dropped for r in rounds)
    throttled, throttle_note = False, None
    if rounds and n_dropped / len(rounds) > policy.max_drop_fraction:
        throttled = True
        throttle_note = (f"{n_dropped}/{len(rounds)} rounds dropped for SM clock < "
                         f"{policy.throttle_threshold} × {ref.mhz:.0f} MHz (max {policy.max_drop_fraction:.0%})")
    elif ref.mhz is not None and not ref.clean and _clocks.ABNORMAL_REASONS.intersection(ref.reasons):
        throttled = True
        throttle_note = f"the GPU stayed throttled through warm-up: {ref.note}"
    elif monitor is not None:
        # Fail closed: clocks were monitored but the drop rule could not be applied.
        unverified = _unverified_clocks(ref, monitor)
        if unverified:
            throttled, throttle_note = True, f"clocks unverified: {unverified}"
    if timed_out:
        timing_note = "; ".join(filter(None, [timing_note, "timed out during warm-up: no measured rounds"]))
    host_gaps = {}
    for n in names:
        counts = {key: getattr(timer, attr, {}).get(n, 0) - gaps0[attr].get(n, 0)
                  for key, attr in (("retried", "host_gaps"), ("kept", "host_gaps_kept"))}
        if any(counts.values()):
            host_gaps[n] = counts
    kept_gaps = {n: c["kept"] for n, c in host_gaps.items() if c["kept"]}
    if kept_gaps:
        timing_note = "; ".join(filter(None, [timing_note, "samples that may include host launch gaps (the "
                                              "host's enqueue outlasted the hold on every try, up to "
                                              f"{BLOCK_MAX_S * 1e3:.0f} ms): " +
                                              ", ".join(f"{n} {k}" for n, k in kept_gaps.items())]))
    kept_idx = [r.index for r in rounds if not r.dropped]
    host_us = {}
    for n in names:
        vals = [host_s[n][i] * 1e6 for i in kept_idx if math.isfinite(host_s[n][i])] if rounds else []
        host_us[n] = statistics.median(vals) if vals else None
    return Measurement(
        arms=arm_results, rounds=rounds, stop_reason=stop_reason, mode=policy.mode, effective_mode=effective_mode,
        n_slots=n_slots, graph_replays=replays, timer=timer.name, policy=policy, warmup_rounds=warmup_rounds,
        warmup_extensions=extensions, elapsed_s=timer.now_s() - t_begin, clock=clock,
        clock_note="; ".join(clock_notes) or None, timing_note=timing_note, throttled=throttled,
        throttle_note=throttle_note, host_gaps=host_gaps, host_us=host_us, spot_calls=spot_calls,
        spot_seed=spot_seed if spot else None)


# ------------------------------------------------------------------------------------------
# The empty window
# ------------------------------------------------------------------------------------------
# A kernel whose work runs where the timed window does not see it (another stream, a
# thread) reads as an empty window. What that reads is measured here, per device and mode,
# through the same timer path as the arms (hold, events, flush, graph replays): a no-op arm
# with short budgets. An arm is told apart from it when its median exceeds
# EMPTY_WINDOW_FACTOR times the empty window's median and its median's CI lies above the
# empty window's (a real call holds at least one kernel: several µs against ~1 µs).
EMPTY_WINDOW_FACTOR = 2.0
EMPTY_WINDOW_BUDGET = {"warmup_ms": 20.0, "min_samples": 20, "max_samples": 400, "min_time_ms": 20.0,
                       "noise_target": 0.05, "timeout_s": 10.0}
EMPTY_ARM = "empty"
_empty_cache: dict[tuple, "EmptyWindow"] = {}


@dataclass(frozen=True)
class EmptyWindow:
    """What a timed window holding nothing read, in one mode on one device (ms)."""

    mode: str
    effective_mode: str
    stats: Stats
    note: str | None = None

    def as_dict(self) -> dict:
        return _json_safe({"mode": self.mode, "effective_mode": self.effective_mode,
                           "stats": self.stats.as_dict(), "note": self.note, "factor": EMPTY_WINDOW_FACTOR})


def told_apart(arm: Stats, empty: Stats) -> bool:
    """Whether an arm's samples can be told apart from an empty window's (see above)."""
    if not (arm.n and empty.n) or math.isnan(empty.median):
        return True  # nothing to compare with: the rule cannot apply
    return arm.median > EMPTY_WINDOW_FACTOR * empty.median and arm.median_lo > empty.median_hi


def empty_window(policy: TimingPolicy, device: str, *, timer: Timer | None = None,
                 monitor: ClockMonitor | None = None) -> EmptyWindow:
    """Time a no-op arm under ``policy``'s mode on ``device`` (cached per process, device and
    mode unless a timer is given). In graph mode a no-op captures an empty graph; where the
    driver refuses that, a one-element write stands in (a floor above the empty one, noted)."""
    key = (device, policy.mode, policy.lead_calls, policy.graph_replays)
    if timer is None and key in _empty_cache:
        return _empty_cache[key]
    budget = TimingPolicy(**{**policy.as_dict(), **EMPTY_WINDOW_BUDGET})
    note = None
    try:
        m = measure({EMPTY_ARM: lambda slot: None}, n_slots=1, policy=budget, device=device, timer=timer,
                    monitor=monitor)
    except (UserError, RuntimeError) as exc:
        if policy.mode != "graph" or timer is not None:
            raise
        import torch

        cell = torch.zeros(1, device=device)
        m = measure({EMPTY_ARM: lambda slot: cell.fill_(0.0)}, n_slots=1, policy=budget, device=device,
                    monitor=monitor)
        note = f"an empty graph could not be replayed ({str(exc).splitlines()[0]}): a one-element write stood in"
    ew = EmptyWindow(policy.mode, m.effective_mode, m.arms[EMPTY_ARM].stats, note)
    if timer is None:
        _empty_cache[key] = ew
    return ew


__all__ = [
    "ARM_BASELINE", "ARM_CANDIDATE", "ARM_CONTROL", "ArmResult", "CudaEventTimer", "FLUSH_FLOOR_BYTES", "HostTimer",
    "L2_FLUSH_FACTOR", "MAX_ROTATION_SLOTS", "MODES", "Measurement", "ROTATION_FACTOR", "Round", "STOP_REASONS",
    "ScriptedTimer", "Timer", "TimingPolicy", "device_l2_bytes", "flush_bytes", "measure", "rotation_slots",
    "EmptyWindow", "empty_window", "told_apart",
]
