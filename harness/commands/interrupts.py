"""A command's signal policy while it measures and writes: the shield that keeps an append and
its commit whole, and the patience that lets configs in flight finish on a first Ctrl-C."""

from __future__ import annotations

import contextlib


class StopNow(KeyboardInterrupt):
    """Raised by the guard to stop a sweep at once (a KeyboardInterrupt, so every ``finally``
    on the way out runs: workers killed, locks released); ``sweep`` catches it and still
    returns its summary."""


class Interrupts:
    """A sweep's signal policy. Until its first config starts, a Ctrl-C or SIGTERM stops at
    once. From then on the first Ctrl-C starts no new config (the ones in flight finish and
    are written); a second, or a SIGTERM, stops at once — but never in the middle of writing
    and committing a config's rows (``shielded``): it waits for that to end. Once stopping at
    once, or wrapping up, further signals are only counted. ``halt`` stops as a first Ctrl-C
    does, for the sweep's own reason (a baseline failing the gate)."""

    def __init__(self, on_interrupt=None):
        self.on_interrupt = on_interrupt
        self.count = 0  # Ctrl-Cs received
        self.terminated = False  # a SIGTERM received
        self.halted = False
        self.patient = False  # configs are running: a first Ctrl-C lets those in flight finish
        self.stopped_at_once = False
        self._shield = 0
        self._deferred = False
        self._quiet = False

    def stopping(self) -> bool:
        return self.count > 0 or self.terminated or self.halted

    @property
    def signal(self) -> int | None:
        """The signal that stopped the sweep: SIGTERM if one came, else SIGINT if a Ctrl-C did."""
        import signal

        return signal.SIGTERM if self.terminated else signal.SIGINT if self.count else None

    def halt(self) -> None:
        self.halted = True

    def handle(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1 and self.patient and not self._quiet:
            if self.on_interrupt:
                self.on_interrupt()
            return
        self._stop_now()

    def terminate(self, signum, frame) -> None:
        self.terminated = True
        self._stop_now()

    def wrap_up(self) -> None:
        """From here on signals are counted (the summary names them), never raised."""
        self._quiet = True

    def _stop_now(self) -> None:
        if self._quiet:
            return
        if self._shield:
            self._deferred = True
            return
        self._quiet = self.stopped_at_once = True
        raise StopNow()

    @contextlib.contextmanager
    def shielded(self):
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if not self._shield and self._deferred:
            self._deferred = False
            self._stop_now()


@contextlib.contextmanager
def interrupts(on_interrupt):
    """The guard, installed for SIGINT and — where the caller handles SIGTERM in Python, as
    the CLI does — for SIGTERM; a signal the caller ignores, and SIGTERM's default action
    (the process dies), are left as they are. Off the main thread no handler can be set."""
    import signal
    import threading

    guard = Interrupts(on_interrupt)
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {}
    for sig, handler, takes in ((signal.SIGINT, guard.handle, lambda h: h is not signal.SIG_IGN),
                                (signal.SIGTERM, guard.terminate, callable)):
        if takes(signal.getsignal(sig)):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield guard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
