"""GPU clock monitoring and the throttle policy.

A ``ClockMonitor`` polls a ``ClockSource`` (NVML on a GPU; tests/timers.py scripts one) and keeps
every reading with a timestamp in the *timer's* time base, so the timing loop can ask
"what was the SM clock during round k?". Two ways to drive it:

* real time: ``start(timer)`` spawns a daemon thread polling at ``hz`` (≥ 100 Hz) and
  stamps each reading with ``timer.now_s()``;
* virtual time: when the timer is virtual (the tests' ``ScriptedTimer``), the monitor
  registers as a listener and the timer calls ``poll_until(t)`` each time it advances its
  clock; readings are taken on the exact grid ``t_start + k / hz``. No thread, fully
  deterministic.

Throttle policy (why it looks like this): the reference is the SM clock *under load at the
end of warm-up* — never an idle reading (an H200 idles at 345 MHz and runs at 1980 MHz, so
an idle reference would pass every round) and never the absolute max clock (a power-capped
matmul legitimately settles below max boost; that is the steady state we want to measure).
A round whose minimum SM clock falls below ``threshold × reference`` is dropped, with the
NVML reasons seen at the low readings.

Nothing here prints; everything returned is frozen.
"""

from __future__ import annotations

import bisect
import math
import statistics
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable

from harness.measurement.clockguard import perf_counter

# Poll rate of the monitor; the protocol needs ≥ MIN_POLL_HZ to attribute clocks to rounds.
DEFAULT_POLL_HZ = 200.0
MIN_POLL_HZ = 100.0
# The reference clock is the max SM clock over the last REFERENCE_TAIL_FRACTION of warm-up.
REFERENCE_TAIL_FRACTION = 0.5
# still_falling judges a trend only from at least this many loaded readings per half-window.
SETTLE_MIN_READINGS = 3

# NVML clocks-event-reason bits (nvmlClocksEventReason*, same values as the deprecated
# nvmlClocksThrottleReason* names; stable in the NVML headers).
REASON_BITS: dict[int, str] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks_setting",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal_slowdown",
    0x0040: "hw_thermal_slowdown",
    0x0080: "hw_power_brake_slowdown",
    0x0100: "display_clock_setting",
    0x0200: "board_limit",
    0x0400: "reliability",
}
# Reasons that mean the clock is not the normal loaded clock. sw_power_cap is excluded on
# purpose: heavy kernels settle at the power cap and that *is* their steady state.
ABNORMAL_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})
IDLE_REASON = "gpu_idle"
# Reason recorded for a dropped round whose low readings carried no NVML reason.
NO_REASON = "no_reason_reported"


def reason_names(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clocks-event-reasons mask (unknown bits by hex)."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(REASON_BITS)
    for i in range(64):
        if unknown & (1 << i):
            names.append(f"unknown_0x{1 << i:x}")
    return tuple(names)


class ClockUnavailable(Exception):
    """The clock source cannot be opened here (no NVML, no GPU, no permission)."""


@dataclass(frozen=True)
class ClockReading:
    """One poll: timestamp in the timer's base (s), clocks (MHz), temperature, power, reasons."""

    t: float
    sm_mhz: float
    mem_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    reasons: tuple[str, ...] = ()


@runtime_checkable
class ClockSource(Protocol):
    """Where readings come from. ``read(t)`` returns the reading stamped ``t``."""

    name: str

    def read(self, t: float) -> ClockReading: ...

    def limits(self) -> tuple[float | None, float | None]:
        """(max SM clock, application SM clock) in MHz, None where unknown."""
        ...

    def close(self) -> None: ...


class NvmlClockSource:
    """SM/memory clocks, temperature, power and clock-event reasons of one GPU via pynvml.

    ``device_index`` is the NVML index; pass ``uuid`` (torch's ``get_device_properties().uuid``)
    to find the same GPU NVML-side when CUDA_VISIBLE_DEVICES renumbers devices.
    Optional getters (temperature, power, reasons) are probed once: an unsupported one reads
    as None instead of raising in the poll loop.
    """

    name = "nvml"

    def __init__(self, device_index: int = 0, uuid: str | None = None):
        try:
            import pynvml
        except ImportError as exc:
            raise ClockUnavailable(f"pynvml not importable ({exc}): pip install nvidia-ml-py") from exc
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise ClockUnavailable(str(exc)) from exc
        try:
            self._h = None
            if uuid:
                u = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
                try:
                    self._h = pynvml.nvmlDeviceGetHandleByUUID(u)
                except pynvml.NVMLError:
                    self._h = None
            if self._h is None:
                self._h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            # The SM clock is the one thing we cannot do without.
            pynvml.nvmlDeviceGetClockInfo(self._h, pynvml.NVML_CLOCK_SM)
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise ClockUnavailable(f"device {device_index}: {exc}") from exc
        h = self._h
        self._mem = self._probe(lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))
        # nvmlDeviceGetTemperature is deprecated from CUDA 13 (removed in 14): try V first.
        self._temp = (self._probe(lambda: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU))
                      or self._probe(lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
        self._power = self._probe(lambda: pynvml.nvmlDeviceGetPowerUsage(h))  # milliwatts
        # ...ClocksEventReasons replaces ...ClocksThrottleReasons (older drivers/bindings lack it).
        self._reasons = (self._probe(lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
                         or self._probe(lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)))

    def _probe(self, fn: Callable[[], float]) -> Callable[[], float] | None:
        try:
            fn()
        except (self._nv.NVMLError, AttributeError):
            return None
        return fn

    def read(self, t: float) -> ClockReading:
        nv = self._nv
        sm = nv.nvmlDeviceGetClockInfo(self._h, nv.NVML_CLOCK_SM)
        mem = self._mem() if self._mem else None
        temp = self._temp() if self._temp else None
        power = self._power() / 1000.0 if self._power else None
        reasons = reason_names(self._reasons()) if self._reasons else ()
        return ClockReading(t=t, sm_mhz=float(sm), mem_mhz=None if mem is None else float(mem),
                            temp_c=None if temp is None else float(temp), power_w=power, reasons=reasons)

    def limits(self) -> tuple[float | None, float | None]:
        nv = self._nv
        out: list[float | None] = []
        for getter in (nv.nvmlDeviceGetMaxClockInfo, nv.nvmlDeviceGetApplicationsClock):
            try:
                out.append(float(getter(self._h, nv.NVML_CLOCK_SM)))
            except (nv.NVMLError, AttributeError):
                out.append(None)  # application clocks are deprecated (CUDA 13) and may be gone
        return out[0], out[1]

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass


class ClockMonitor:
    """Polls a source at ``hz`` and keeps time-sorted readings (see the module docstring)."""

    def __init__(self, source: ClockSource, hz: float = DEFAULT_POLL_HZ):
        if not hz > 0:
            raise ValueError(f"poll rate must be > 0 Hz, got {hz}")
        self.source = source
        self.hz = float(hz)
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._readings: list[ClockReading] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._now: Callable[[], float] = perf_counter  # the harness's own (clockguard), until start(timer)
        self._virtual = False
        self._k = 0  # virtual mode: index of the next grid reading
        self._active = False
        self._error: str | None = None
        self.t_start: float | None = None
        self.t_stop: float | None = None
        self.limits: tuple[float | None, float | None] = (None, None)  # source limits, read at stop()

    # -- driving ---------------------------------------------------------------------------
    def start(self, timer=None) -> None:
        """Start polling in ``timer``'s time base (virtual timers drive us synchronously)."""
        if timer is not None:
            self._now = timer.now_s
        with self._lock:  # a reused monitor starts a fresh series
            self._times, self._readings = [], []
        self._k, self._error, self.t_stop = 0, None, None
        self._virtual = self._active = False
        self.t_start = self._now()
        if timer is not None and getattr(timer, "virtual", False):
            self._virtual = self._active = True
            timer.add_listener(self.poll_until)
            self.poll_until(self.t_start)
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="bench-clock-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = 1.0 / self.hz
        next_t = self._now()
        while not self._stop.is_set():
            self.poll_now()
            next_t += period
            delay = next_t - self._now()
            if delay < 0:  # fell behind (GIL, slow NVML): don't burst to catch up
                next_t = self._now()
                delay = 0.0
            self._stop.wait(delay)

    def poll_now(self) -> None:
        """Take one reading now, stamped at the midpoint of the query (real-time mode)."""
        t0 = self._now()
        try:
            r = self.source.read(t0)
        except Exception as exc:  # noqa: BLE001 - a failing source must not kill the thread silently
            self._error = f"{type(exc).__name__}: {exc}"
            self._stop.set()
            return
        t = (t0 + self._now()) / 2
        self._append(ClockReading(t, r.sm_mhz, r.mem_mhz, r.temp_c, r.power_w, r.reasons))

    def poll_until(self, t: float) -> None:
        """Virtual mode: take every grid reading t_start + k/hz up to and including ``t``."""
        if not self._active:
            return  # stopped (or never started): a timer that still calls us is ignored
        while self.t_start + self._k / self.hz <= t + 1e-12:
            self._append(self.source.read(self.t_start + self._k / self.hz))
            self._k += 1

    def _append(self, r: ClockReading) -> None:
        with self._lock:
            if self._times and r.t < self._times[-1]:
                return  # keep the series sorted; a late stamp from a racing poll is dropped
            self._times.append(r.t)
            self._readings.append(r)

    def stop(self) -> None:
        """Stop polling; take one last reading after the end so the last round is bracketed.

        Also reads the source's (max, application) clocks so a closed source is never queried.
        """
        if self._virtual:
            self.poll_until(self._now() + 1.0 / self.hz)
            self._active = False
        elif self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None
            if self._error is None:
                self.poll_now()
        self.t_stop = self._now()
        self.limits = self.source.limits()

    # -- queries ---------------------------------------------------------------------------
    @property
    def error(self) -> str | None:
        """Why polling stopped early, if it did."""
        return self._error

    @property
    def last_t(self) -> float:
        with self._lock:
            return self._times[-1] if self._times else -math.inf

    def readings(self) -> tuple[ClockReading, ...]:
        with self._lock:
            return tuple(self._readings)

    def between(self, t0: float, t1: float) -> list[ClockReading]:
        """Readings with t0 ≤ t ≤ t1."""
        with self._lock:
            i, j = bisect.bisect_left(self._times, t0), bisect.bisect_right(self._times, t1)
            return self._readings[i:j]

    def during(self, t0: float, t1: float) -> list[ClockReading]:
        """Readings attributable to [t0, t1]: those inside it or, if none, the two bracketing it.

        A short round (shorter than a poll period) has no reading inside; the clock during
        it is then bounded only by the last reading before and the first after, and taking
        both is the conservative choice.
        """
        with self._lock:
            i, j = bisect.bisect_left(self._times, t0), bisect.bisect_right(self._times, t1)
            if j > i:
                return self._readings[i:j]
            return self._readings[max(i - 1, 0):i] + self._readings[j:j + 1]

    def achieved_hz(self, t0: float | None = None, t1: float | None = None) -> float:
        """Readings per second over [t0, t1] (default: the whole run)."""
        rs = self.readings() if t0 is None else self.between(t0, t1 if t1 is not None else math.inf)
        if len(rs) < 2 or rs[-1].t <= rs[0].t:
            return 0.0
        return (len(rs) - 1) / (rs[-1].t - rs[0].t)


@dataclass(frozen=True)
class Reference:
    """The reference SM clock and how it was found."""

    mhz: float | None
    clean: bool          # taken from loaded readings without an abnormal throttle reason
    reasons: tuple[str, ...] = ()  # reasons seen at the readings it was taken from
    note: str | None = None


def reference_clock(monitor: ClockMonitor, t0: float, t1: float,
                    tail_fraction: float = REFERENCE_TAIL_FRACTION) -> Reference:
    """Max SM clock over the last ``tail_fraction`` of the window [t0, t1] (end of warm-up).

    Only readings under load (no ``gpu_idle``) and without an abnormal reason qualify; when
    none do, ``clean`` is False and the caller may extend the warm-up. The fallbacks still
    never pick an idle reading while a loaded one exists.
    """
    tail = monitor.between(t1 - tail_fraction * (t1 - t0), t1)
    if not tail:
        return Reference(None, False, note="no clock reading in the last part of warm-up")
    loaded = [r for r in tail if IDLE_REASON not in r.reasons]
    clean = [r for r in loaded if not ABNORMAL_REASONS.intersection(r.reasons)]
    if clean:
        best = max(clean, key=lambda r: r.sm_mhz)
        return Reference(best.sm_mhz, True, best.reasons)
    pool, why = (loaded, "under an abnormal throttle") if loaded else (tail, "while the GPU reported idle")
    best = max(pool, key=lambda r: r.sm_mhz)
    seen = sorted({n for r in pool for n in r.reasons})
    return Reference(best.sm_mhz, False, tuple(seen),
                     note=f"reference clock {best.sm_mhz:.0f} MHz taken {why} ({', '.join(seen)})")


def still_falling(monitor: ClockMonitor, t0: float, t1: float, tolerance: float) -> tuple[float, float] | None:
    """(first-half, second-half) mean SM clock under load over [t0, t1] when the second is
    more than ``tolerance`` below the first — the GPU has not reached its sustained clock
    yet (power limiter or heat still pulling it down) — else None."""
    loaded = [r for r in monitor.between(t0, t1) if IDLE_REASON not in r.reasons]
    mid = (t0 + t1) / 2
    first = [r.sm_mhz for r in loaded if r.t < mid]
    second = [r.sm_mhz for r in loaded if r.t >= mid]
    if min(len(first), len(second)) < SETTLE_MIN_READINGS:
        return None  # too short a window to tell a trend from one noisy reading
    a, b = sum(first) / len(first), sum(second) / len(second)
    return (a, b) if b < (1.0 - tolerance) * a else None


def round_drop(readings: Sequence[ClockReading], reference_mhz: float | None,
               threshold: float) -> tuple[float | None, bool, tuple[str, ...]]:
    """(min SM clock, dropped, drop reasons) of one round from its attributed readings."""
    if not readings:
        return None, False, ()
    low = min(r.sm_mhz for r in readings)
    if reference_mhz is None or low >= threshold * reference_mhz:
        return low, False, ()
    limit = threshold * reference_mhz
    names = sorted({n for r in readings if r.sm_mhz < limit for n in r.reasons})
    return low, True, tuple(names) or (NO_REASON,)


@dataclass(frozen=True)
class ClockSummary:
    """What the clocks did during the measured rounds."""

    source: str
    reference_mhz: float | None
    reference_clean: bool
    min_mhz: float | None
    mean_mhz: float | None
    max_mhz: float | None
    max_clock_mhz: float | None     # NVML max SM clock
    app_clock_mhz: float | None     # NVML application SM clock (None where deprecated/absent)
    poll_hz: float
    n_readings: int
    dropped_rounds: int
    drop_reasons: dict[str, int] = field(default_factory=dict)  # dropped rounds per reason
    mem_min_mhz: float | None = None
    mem_max_mhz: float | None = None
    temp_min_c: float | None = None
    temp_max_c: float | None = None
    power_min_w: float | None = None
    power_max_w: float | None = None
    power_mean_w: float | None = None

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["drop_reasons"] = dict(self.drop_reasons)
        return d


def _span(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    vs = [v for v in values if v is not None]
    return (min(vs), max(vs)) if vs else (None, None)


def summarize(monitor: ClockMonitor, t0: float, t1: float, reference: Reference,
              dropped_reasons: Sequence[Sequence[str]]) -> ClockSummary:
    """Summary of readings in [t0, t1] (the measured rounds) plus the drop bookkeeping."""
    rs = monitor.between(t0, t1)
    sm = [r.sm_mhz for r in rs]
    counts: dict[str, int] = {}
    for names in dropped_reasons:
        for n in names:
            counts[n] = counts.get(n, 0) + 1
    max_clock, app_clock = monitor.limits
    mem, temp, power = _span([r.mem_mhz for r in rs]), _span([r.temp_c for r in rs]), _span([r.power_w for r in rs])
    return ClockSummary(
        source=monitor.source.name, reference_mhz=reference.mhz, reference_clean=reference.clean,
        min_mhz=min(sm) if sm else None, mean_mhz=sum(sm) / len(sm) if sm else None,
        max_mhz=max(sm) if sm else None, max_clock_mhz=max_clock, app_clock_mhz=app_clock,
        poll_hz=monitor.achieved_hz(), n_readings=len(monitor.readings()),
        dropped_rounds=len(dropped_reasons), drop_reasons=dict(sorted(counts.items())),
        mem_min_mhz=mem[0], mem_max_mhz=mem[1], temp_min_c=temp[0], temp_max_c=temp[1],
        power_min_w=power[0], power_max_w=power[1], power_mean_w=_mean([r.power_w for r in rs]))


def _mean(values: Sequence[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def window_clocks(readings: Sequence[ClockReading]) -> tuple[float | None, float | None]:
    """(mean SM clock, mean memory clock) of the readings attributed to one timed window (a
    round: ``ClockMonitor.during``; a batch of back-to-back calls); None where there are none,
    or NVML gives no memory clock."""
    return _mean([r.sm_mhz for r in readings]), _mean([r.mem_mhz for r in readings])


def kcycles(calls: Sequence[tuple[float, float | None]]) -> float | None:
    """Thousands of SM cycles per call: the median over ``calls`` of (call time in ms × the SM
    clock in MHz attributed to its window; ms × MHz = 10³ cycles). Calls without a clock are
    left out; None when none has one (the CPU: there is no SM clock to count by).

    Why: a compute-bound call takes a fixed number of cycles, so its time moves with the clock
    the card's power limit lets it hold — three H200s read one kernel at 499.9–519.1 TFLOP/s
    and 3787–3802 kcycles per call (docs/measurement.md#cycles-per-call)."""
    counted = [ms * mhz for ms, mhz in calls if mhz is not None and math.isfinite(ms) and math.isfinite(mhz)]
    return statistics.median(counted) if counted else None


def open_monitor(device: str, hz: float = DEFAULT_POLL_HZ) -> tuple[ClockMonitor | None, str | None]:
    """A monitor for ``device`` or (None, why not). CPU has no clocks to monitor; a GPU
    without NVML gets a note the caller must surface (it is a warning, not a pass)."""
    if not device.startswith("cuda"):
        return None, f"{device.upper()}: no GPU clocks to monitor"
    index, uuid = 0, None
    try:
        import torch

        if torch.cuda.is_available():
            dev = torch.device(device)
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "") or None
    except (ImportError, RuntimeError, AssertionError):
        pass
    try:
        return ClockMonitor(NvmlClockSource(index, uuid=uuid), hz=hz), None
    except ClockUnavailable as exc:
        return None, f"NVML unavailable: {exc} — clocks not monitored, throttled rounds cannot be dropped"


__all__ = [
    "ABNORMAL_REASONS", "ClockMonitor", "ClockReading", "ClockSource", "ClockSummary", "ClockUnavailable",
    "DEFAULT_POLL_HZ", "MIN_POLL_HZ", "NvmlClockSource", "REASON_BITS", "REFERENCE_TAIL_FRACTION", "Reference",
    "kcycles", "open_monitor", "reason_names", "reference_clock", "round_drop", "summarize", "window_clocks",
]
