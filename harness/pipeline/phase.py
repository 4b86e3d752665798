"""Which kernel a config is running, and in which phase: what a worker tells its driver,
and what each phase cost (the harness's own time, written in every row: ``cost``).

``run_config`` calls ``report(kernel, phase)`` as it moves between stages. In the driver
process (inline executor, tests) nothing listens and a report costs one function call; a
worker installs a sink that sends the report to its driver, so when the worker dies or
hangs the driver knows which (config, kernel) pair was running, and the watchdog restarts
its deadline. A sink may raise ``Fatal`` to stop the config at once (a CUDA context
poisoned by the kernel of the phase that just ended).
"""

from __future__ import annotations

import time
from typing import Callable

# Phases, in the order a config goes through them. ``setup`` (memory model, allocation)
# and ``check`` (the timed outputs against the reference) name no single kernel;
# ``timing`` names every timed arm at once; ``rates`` (a line whose bar judges absolute
# rates) times one candidate's calls back to back.
SETUP, GATE, TIMING, CHECK, RATES, RECHECK = "setup", "gate", "timing", "check", "rates", "recheck"
PHASES = (SETUP, GATE, TIMING, CHECK, RATES, RECHECK)

# Phases whose cost is kept per kernel (each kernel's gate, its sustained calls, its recheck).
PER_KERNEL = (GATE, RATES, RECHECK)

_sink: Callable[[tuple[str, ...], str], None] | None = None
_current: tuple[tuple[str, ...], str | None] = ((), None)
_account: "Account | None" = None


class Account:
    """Seconds spent in each phase of one config, from one phase report to the next (the
    clock is injectable: tests drive it by hand)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.started = self.mark = clock()
        self.at: tuple[tuple[str, ...], str] = ((), SETUP)
        self.spent: dict[str, float] = {}
        self.kernels: dict[str, dict[str, float]] = {}
        self.parts: dict[str, float] = {}  # named shares of the phases (the float64 references)

    def move(self, names: tuple[str, ...], phase: str) -> None:
        now = self.clock()
        (was_names, was), dt = self.at, now - self.mark
        self.spent[was] = self.spent.get(was, 0.0) + dt
        if was in PER_KERNEL and len(was_names) == 1:
            per = self.kernels.setdefault(was, {})
            per[was_names[0]] = per.get(was_names[0], 0.0) + dt
        self.at, self.mark = (names, phase), now

    def as_row(self) -> dict:
        """``{"seconds": {phase: s}, "per_kernel": {phase: {kernel: s}}, "total": s}`` so far."""
        self.move(*self.at)
        return {"seconds": dict(self.spent), "per_kernel": {k: dict(v) for k, v in self.kernels.items()},
                "of_which": dict(self.parts), "total": self.mark - self.started}


def begin(clock: Callable[[], float] = time.perf_counter) -> Account:
    """Start accounting one config's phases (``run_config`` does, in whichever process runs it)."""
    global _account
    _account = Account(clock)
    return _account


def note(part: str, seconds: float) -> None:
    """``seconds`` of the current phase went to ``part`` (e.g. the gate's float64 references)."""
    if _account is not None:
        _account.parts[part] = _account.parts.get(part, 0.0) + seconds


def end() -> dict | None:
    """The config's cost (``Account.as_row``), and stop accounting."""
    global _account
    acc, _account = _account, None
    return None if acc is None else acc.as_row()


class Fatal(BaseException):
    """The process can no longer measure (e.g. a poisoned CUDA context): end the config now.

    A BaseException, so no ``except Exception`` on the way up turns it into an outcome row.
    """


def report(kernels: str | tuple[str, ...] | None, phase: str) -> None:
    """The config now runs ``phase`` of ``kernels`` (one name, several for timing, None for none)."""
    global _current
    names = () if kernels is None else (kernels,) if isinstance(kernels, str) else tuple(kernels)
    if _account is not None:
        _account.move(names, phase)
    if _sink is not None:
        _sink(names, phase)
    _current = (names, phase)


def current() -> tuple[tuple[str, ...], str | None]:
    """The kernels and phase last reported in this process."""
    return _current


def install(sink: Callable[[tuple[str, ...], str], None] | None) -> None:
    """Route reports to ``sink`` (a worker does this once at start; None stops it)."""
    global _sink
    _sink = sink
