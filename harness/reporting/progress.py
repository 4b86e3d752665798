"""The sweep's rich progress bar (ETA from configs done so far)."""

from __future__ import annotations


class SweepProgress:
    def __init__(self, line: str):
        self.line = line
        self._progress = None
        self._task = None

    def start(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn

        from harness.reporting.console import console

        self._progress = Progress(TextColumn("[bold]{task.fields[line]}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                  TextColumn("{task.fields[config]}"), console=console(), transient=False)
        self._progress.start()
        self._task = self._progress.add_task("sweep", total=total, line=self.line, config="")

    def advance_to(self, config_key: str) -> None:
        self._progress.update(self._task, config=config_key)

    def done(self, config_key: str) -> None:
        self._progress.advance(self._task)

    def stop(self) -> None:
        self._progress.update(self._task, config="")
        self._progress.stop()
