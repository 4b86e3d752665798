"""`bench report LINE [--out DIR]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import app


@app.command()
def report(line: str = typer.Argument(..., help="line id (or LINE@COMMIT: only rows measured at that commit)"),
           out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: reports/<line>)")):
    """A Markdown report and one self-contained HTML page (plots embedded), from the ledger alone."""
    from harness.governance.gitguard import repo_root
    from harness.reporting import report as report_mod
    from harness.reporting.analysis import lines
    from harness.reporting.render.console import console

    root = repo_root()
    view = lines.load(root, line)
    target = out if out is not None else Path("reports") / view.line
    target = target if target.is_absolute() else Path.cwd() / target
    from harness.reporting.analysis.history import index, line_history

    data = report_mod.report_data(view, line_history(index(root), view.line, view.rows))
    paths = report_mod.write(view, target, data)
    c = console()
    for text in report_mod.summary(data):
        c.print(text, markup=False)
    c.print(f"wrote {paths['html']} (self-contained) and {paths['markdown']} with its plots", markup=False)
