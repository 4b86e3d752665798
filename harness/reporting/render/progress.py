"""The sweep's progress: a rich bar on a terminal, one line per finished config elsewhere.

When stdout is not a terminal (a CI log, ``nohup`` overnight) a bar draws nothing until
the sweep ends; there each finished config prints one line instead, so a log shows what
was measured while the sweep runs.
"""

from __future__ import annotations

import time
from harness.reporting.render.console import console
from harness.reporting.render.sweep import config_progress


class SweepProgress:
    def __init__(self, line: str, *, live: bool | None = None):
        """``live``: draw a bar (default: when the console is a terminal)."""
        self.line = line
        self._live = live
        self._progress = None
        self._task = None
        self._total = 0
        self._done = 0
        self._started = None

    def start(self, total: int) -> None:
        self._total, self._done = total, 0
        if total == 0:  # nothing to run: no bar counting to 0/0
            return
        live = console().is_terminal if self._live is None else self._live
        if not live:
            console().print(f"sweep of line {self.line}: {total} config{'s' if total != 1 else ''} to run")
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn

        self._progress = Progress(TextColumn("[bold]{task.fields[line]}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                  TextColumn("{task.fields[config]}"), console=console(), transient=False)
        self._progress.start()
        self._task = self._progress.add_task("sweep", total=total, line=self.line, config="")

    def advance_to(self, config_key: str) -> None:
        self._started = time.monotonic()
        if self._progress is not None:
            self._progress.update(self._task, config=config_key)

    def done(self, config_key: str, rows=()) -> None:
        """A config ended; ``rows`` are the ledger rows it appended."""
        self._done += 1
        if self._progress is not None:
            self._progress.advance(self._task)
            return
        elapsed = None if self._started is None else time.monotonic() - self._started
        # One unwrapped plain line per config: a log stays greppable.
        console().print(config_progress(self._done, self._total, config_key, rows, elapsed), markup=False,
                        soft_wrap=True)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, config="")
            self._progress.stop()
