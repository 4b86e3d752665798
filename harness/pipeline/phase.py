"""Which kernel a config is running, and in which phase: what a worker tells its driver.

``run_config`` calls ``report(kernel, phase)`` as it moves between stages. In the driver
process (inline executor, tests) nothing listens and a report costs one function call; a
worker installs a sink that sends the report to its driver, so when the worker dies or
hangs the driver knows which (config, kernel) pair was running, and the watchdog restarts
its deadline. A sink may raise ``Fatal`` to stop the config at once (a CUDA context
poisoned by the kernel of the phase that just ended).
"""

from __future__ import annotations

from typing import Callable

# Phases, in the order a config goes through them. ``setup`` (memory model, allocation)
# and ``check`` (the timed outputs against the reference) name no single kernel;
# ``timing`` names every timed arm at once; ``rates`` (a line whose bar judges absolute
# rates) times one candidate's calls back to back.
SETUP, GATE, TIMING, CHECK, RATES, RECHECK = "setup", "gate", "timing", "check", "rates", "recheck"
PHASES = (SETUP, GATE, TIMING, CHECK, RATES, RECHECK)

_sink: Callable[[tuple[str, ...], str], None] | None = None
_current: tuple[tuple[str, ...], str | None] = ((), None)


class Fatal(BaseException):
    """The process can no longer measure (e.g. a poisoned CUDA context): end the config now.

    A BaseException, so no ``except Exception`` on the way up turns it into an outcome row.
    """


def report(kernels: str | tuple[str, ...] | None, phase: str) -> None:
    """The config now runs ``phase`` of ``kernels`` (one name, several for timing, None for none)."""
    global _current
    names = () if kernels is None else (kernels,) if isinstance(kernels, str) else tuple(kernels)
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
