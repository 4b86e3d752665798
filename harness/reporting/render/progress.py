"""The sweep's progress: a rich bar on a terminal, one line per finished config elsewhere.

On a terminal the bar shows the configs done, the time elapsed, the ETA, the config running
with its phase (gate / timing / checks / writing) and how long it has run — redrawn every
second (``REFRESH_PER_SECOND``) by rich's own thread, so the heartbeat moves while one long
config runs — and the tally so far (results / rejected / skipped). The ETA is the model of
``reporting/analysis/eta.py``: fitted on the configs this sweep finished, before the first
one ends on this line's earlier configs on this device, else "estimating" (never a number
made up).

When stdout is not a terminal (a CI log, ``nohup`` overnight) a bar draws nothing until
the sweep ends; there each finished config prints one line instead, so a log shows what
was measured while the sweep runs, and a config that runs longer than ``LOG_HEARTBEAT_S``
prints a heartbeat line (its phase, how long it has run, the tally) every ``LOG_HEARTBEAT_S``.
"""

from __future__ import annotations

import threading
import time

from harness.pipeline import phase as phases
from harness.reporting.analysis import eta
from harness.reporting.render.console import console
from harness.reporting.render.sweep import config_progress
from harness.vocab.outcomes import CRASHED, INCORRECT, RESULT, SKIPPED, THROTTLED, UNSUPPORTED
from harness.workloads.keys import shorten

# What the progress calls each phase a config reports (pipeline/phase.py), and the driver's own.
WRITING = "writing"
PHASE_WORDS = {phases.SETUP: "setup", phases.GATE: "gate", phases.TIMING: "timing", phases.CHECK: "checks",
               phases.RATES: "timing", phases.RECHECK: "checks", WRITING: "writing"}
# The tally's three counts, by outcome kind.
TALLY = {RESULT: "results", INCORRECT: "rejected", CRASHED: "rejected", SKIPPED: "skipped", THROTTLED: "skipped",
         UNSUPPORTED: "skipped"}
REFRESH_PER_SECOND = 1  # the bar's redraws: the heartbeat's period on a terminal
BAR_WIDTH = 20  # columns of the bar itself: the phase, heartbeat and tally beside it fit 100 columns
LOG_HEARTBEAT_S = 60.0  # off a terminal: a line per minute while one config runs, not a line per redraw
ESTIMATING = "estimating"


def clock_text(seconds: float | None) -> str:
    """h:mm:ss, as rich's time columns write it."""
    if seconds is None:
        return ESTIMATING
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class SweepProgress:
    def __init__(self, line: str, *, live: bool | None = None, clock=time.monotonic,
                 heartbeat_s: float = LOG_HEARTBEAT_S):
        """``live``: draw a bar (default: when the console is a terminal); ``clock`` and
        ``heartbeat_s``: injectable for tests."""
        self.line = line
        self._live = live
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._progress = None
        self._task = None
        self._total = 0
        self._done = 0
        self._started = None
        self._lock = threading.Lock()
        self._running: dict[str, list] = {}  # config key -> [started at, phase word]
        self._sizes: dict[str, float] = {}  # config key -> planned size (analysis/eta.py)
        self._prior: list[tuple[float, float]] = []
        self._seen: list[tuple[float, float]] = []  # (size, seconds) of configs this sweep finished
        self._finished: set[str] = set()
        self._short: dict[str, str] = {}
        self._slots = 1  # the most configs seen running at once
        self.tally = {"results": 0, "rejected": 0, "skipped": 0}
        self._beat: threading.Thread | None = None
        self._stopped = threading.Event()

    def start(self, total: int, tasks=(), rows=(), env: dict | None = None) -> None:
        """``tasks``: the planned ``Task``s (their sizes); ``rows`` and ``env``: the line's
        ledger rows and the device's env, for the ETA before the first config ends."""
        self._total, self._done = total, 0
        self._sizes = {t.config.key(): eta.task_size(t) for t in tasks}
        self._short = shorten(self._sizes)[0]  # the bar names a config by what sets it apart
        self._prior = eta.prior(rows, env) if self._sizes else []
        if total == 0:  # nothing to run: no bar counting to 0/0
            return
        live = console().is_terminal if self._live is None else self._live
        if not live:
            console().print(f"sweep of line {self.line}: {total} config{'s' if total != 1 else ''} to run")
            self._beat = threading.Thread(target=self._heartbeat, name="bench-progress", daemon=True)
            self._beat.start()
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("[bold]{task.fields[line]}"), BarColumn(bar_width=BAR_WIDTH),
                                  MofNCompleteColumn(),
                                  TimeElapsedColumn(), _column(lambda: f"ETA {self.eta_text()}"),
                                  _column(self.running_text), _column(self.tally_text), console=console(),
                                  transient=False, refresh_per_second=REFRESH_PER_SECOND)
        self._progress.start()
        self._task = self._progress.add_task("sweep", total=total, line=self.line)

    def advance_to(self, config_key: str) -> None:
        now = self._clock()
        with self._lock:
            self._started = now
            self._running[config_key] = [now, PHASE_WORDS[phases.SETUP]]
            self._slots = max(self._slots, len(self._running))
        self._refresh()

    def phase(self, config_key: str, phase: str) -> None:
        """The config entered ``phase`` (pipeline/phase.py's, or WRITING: its rows are appended)."""
        with self._lock:
            if config_key in self._running:
                self._running[config_key][1] = PHASE_WORDS.get(phase, phase)
        self._refresh()

    def writing(self, config_key: str) -> None:
        """The config's rows are being appended and committed (the driver's own phase)."""
        self.phase(config_key, WRITING)

    def done(self, config_key: str, rows=()) -> None:
        """A config ended; ``rows`` are the ledger rows it appended."""
        now = self._clock()
        with self._lock:
            self._done += 1
            began = self._running.pop(config_key, [None])[0]
            elapsed = None if began is None else now - began
            # A planned config's first end calibrates the model (a rig-noisy pair measured
            # again later times fewer kernels than its planned size says).
            if elapsed is not None and config_key in self._sizes and config_key not in self._finished:
                self._seen.append((self._sizes[config_key], elapsed))
            self._finished.add(config_key)
            for r in rows:
                if r.kind in TALLY and not getattr(r, "is_baseline", False):
                    self.tally[TALLY[r.kind]] += 1
        if self._progress is not None:
            self._progress.advance(self._task)
            return
        if self._started is not None and elapsed is None:
            elapsed = now - self._started
        # One unwrapped plain line per config: a log stays greppable.
        console().print(config_progress(self._done, self._total, config_key, rows, elapsed), markup=False,
                        soft_wrap=True)

    def stop(self) -> None:
        self._stopped.set()
        if self._beat is not None:
            self._beat.join()
        if self._progress is not None:
            with self._lock:
                self._running.clear()
            self._progress.stop()

    # What the bar and the heartbeat say.

    def eta_seconds(self) -> float | None:
        """Seconds left (``analysis/eta.py``), the planned configs not begun and those running,
        over the slots running configs at once; None while nothing is known to fit."""
        now = self._clock()
        with self._lock:
            fit = eta.fit(self._seen) or eta.fit(self._prior)
            running = [(self._sizes[k], now - began) for k, (began, _) in self._running.items()
                       if k in self._sizes and k not in self._finished]
            waiting = [s for k, s in self._sizes.items() if k not in self._running and k not in self._finished]
            slots = self._slots
        seconds = eta.remaining(fit, waiting, running)
        return None if seconds is None else seconds / slots

    def eta_text(self) -> str:
        return clock_text(self.eta_seconds())

    def running_text(self) -> str:
        """The configs running: each with its phase and how long it has run (the heartbeat)."""
        now = self._clock()
        with self._lock:
            items = list(self._running.items())
        return "; ".join(f"{self._short.get(k, k)} {word} {clock_text(now - began)}" for k, (began, word) in items)

    def tally_text(self) -> str:
        t = self.tally
        return f"results {t['results']} rejected {t['rejected']} skipped {t['skipped']}"

    def heartbeat_line(self) -> str | None:
        """Off a terminal: a line for each config running longer than the heartbeat (None: none)."""
        now = self._clock()
        with self._lock:
            long = [(k, began, word) for k, (began, word) in self._running.items() if now - began >= self._heartbeat_s]
        if not long:
            return None
        what = "; ".join(f"{k}: {word}, {clock_text(now - began)} on this config" for k, began, word in long)
        return f"  ... still running {what} ({self.tally_text()} so far)"

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self._heartbeat_s):
            text = self.heartbeat_line()
            if text is not None:
                console().print(text, markup=False, soft_wrap=True)

    def _refresh(self) -> None:
        if self._progress is not None:
            self._progress.refresh()


def _column(text):
    """A rich progress column whose text (``text()``) is asked for at each redraw."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Column(ProgressColumn):
        def render(self, task):
            return Text(text())

    return Column()
