"""`bench report LINE [--out DIR]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import app, complete_line


@app.command()
def report(line: str = typer.Argument(..., autocompletion=complete_line, help="line id (or LINE@COMMIT: only rows measured at that commit)"),
           out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: reports/<line>)"),
           format: str = typer.Option("files", "--format", help="files (report.md with its plots, and report.html) "
                                                                "| json (the report's data as one document on "
                                                                "stdout; nothing written)")):
    """A Markdown report and one self-contained HTML page (plots embedded), from the ledger alone.

    Example: bench report flash-h200-v2 --out reports/flash-h200-v2
    """
    from harness.reporting.render.formats import check_format

    check_format(format, ("files", "json"))
    from harness.provenance.git import repo_root
    from harness.reporting.analysis import lines
    from harness.reporting.analysis.history import index, line_history
    from harness.reporting.analysis.report import report_data
    from harness.reporting.render.report import render_report, write

    root = repo_root()
    view = lines.load(root, line)
    target = out if out is not None else Path("reports") / view.line
    target = target if target.is_absolute() else Path.cwd() / target
    data = report_data(view, line_history(index(root), view.line, view.rows))
    if format == "json":
        from harness.reporting.render.formats import emit

        emit("json", [], data)
        return
    render_report(data, write(view, target, data))
