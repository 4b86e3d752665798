"""Test doubles in virtual time: a scripted timer (durations, bit-reproducible time) and a
scripted clock source (SM clock, reasons, power as functions of that time)."""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from harness.measurement.clocks import ClockReading
from harness.measurement.timing.timers import CallCpu


class ScriptedTimer:
    """Virtual clock: scripted durations per arm, time advances by them (a ``Timer``).

    ``durations[arm]`` is a constant (ms), a sequence (indexed by the arm's call count,
    IndexError when exhausted) or ``f(call_index, t_s) -> ms``. Each call also advances the
    clock by ``overhead_ms``. Listeners (a virtual ``ClockMonitor``) are called with the new
    time after every advance. Time is kept in integer ns so runs are bit-reproducible.

    Host CPU accounting, scripted like ``durations`` (same spec forms, per arm): ``waits``
    (ms the call waited on a run queue) and ``cpu`` (ms of CPU time; default: the duration
    less the wait). Given either, each call records a ``CallCpu`` in ``last_cpu`` as
    ``HostTimer`` does (``wait_source`` "scripted"). ``ticks_ms``: the ticks its samples are
    checked against, as a host timer's are (default none: scripted samples are exact).
    """

    name = "scripted"
    virtual = True

    def __init__(self, durations: Mapping[str, float | Sequence[float] | Callable[[int, float], float]],
                 *, overhead_ms: float = 0.0, start_s: float = 0.0,
                 waits: Mapping[str, float | Sequence[float] | Callable[[int, float], float]] | None = None,
                 cpu: Mapping[str, float | Sequence[float] | Callable[[int, float], float]] | None = None,
                 ticks_ms: Sequence[float] = ()):
        self._durations = dict(durations)
        self._waits, self._cpu = dict(waits or {}), dict(cpu or {})
        self.ticks_ms = tuple(ticks_ms)
        self.wait_source = "scripted" if (waits or cpu) else None
        self.last_cpu: dict[str, CallCpu] | None = {} if (waits or cpu) else None
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
        return self._value(spec, k)

    def _value(self, spec, k: int) -> float:
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
        k = self._count.get(arm, 0)
        ms = self._duration(arm)
        if self.last_cpu is not None:
            wait = self._value(self._waits[arm], k) if arm in self._waits else 0.0
            cpu = self._value(self._cpu[arm], k) if arm in self._cpu else max(ms - wait, 0.0)
            self.last_cpu[arm] = CallCpu(ms, cpu, cpu, wait, "scripted")
        self.advance((round(ms * 1e6) + self._overhead_ns) / 1e9)
        return ms

    def time_loop(self, calls, *, arm="") -> list[float]:
        return [self.time_call(fn, arm=arm, before=before) for fn, before in calls]


class ScriptedClockSource:
    """Readings as a function of (virtual) time, for deterministic tests.

    ``sm`` maps t → MHz; ``reasons`` maps t → names (default: none). Temperature and power
    are optional functions too.
    """

    name = "scripted"

    def __init__(self, sm: Callable[[float], float], *, reasons: Callable[[float], Sequence[str]] | None = None,
                 mem: Callable[[float], float] | None = None, temp: Callable[[float], float] | None = None,
                 power: Callable[[float], float] | None = None, max_clock_mhz: float | None = None,
                 app_clock_mhz: float | None = None):
        self._sm, self._reasons, self._mem, self._temp, self._power = sm, reasons, mem, temp, power
        self._limits = (max_clock_mhz, app_clock_mhz)

    def read(self, t: float) -> ClockReading:
        return ClockReading(t=t, sm_mhz=float(self._sm(t)),
                            mem_mhz=float(self._mem(t)) if self._mem else None,
                            temp_c=float(self._temp(t)) if self._temp else None,
                            power_w=float(self._power(t)) if self._power else None,
                            reasons=tuple(self._reasons(t)) if self._reasons else ())

    def limits(self) -> tuple[float | None, float | None]:
        return self._limits

    def close(self) -> None:
        pass
