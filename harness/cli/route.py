"""`bench route LINES… [--out DIR]`"""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from harness.cli import app, complete_line


@app.command()
def route(lines: List[str] = typer.Argument(..., autocompletion=complete_line, help="lines (LINE or LINE@COMMIT) measured against one baseline"),
          out: Path = typer.Option(Path("routes"), "--out", help="directory for route.json and route.py"),
          name: str = typer.Option("route", "--name", help="file stem of the JSON table and the dispatcher module"),
          exact: bool = typer.Option(False, "--exact", help="use each line as named, not the newest line of its "
                                                            "amendment chain"),
          format: str = typer.Option("table", "--format", help="table | md (GitHub-flavoured Markdown, for a "
                                                               "pull-request comment) | json | csv (the files are "
                                                               "written either way)")):
    """Per shape, the fastest kernel that passed every check with speedup CI above 1, else the baseline.
    A line amended by a newer one is routed from the newest (--exact: as named); LINE@COMMIT is used as named.

    Example: bench route flash-h200-v2 decode-h200 --exact --out routes
    """
    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis import lines as lines_mod
    from harness.reporting.analysis import route as route_mod
    from harness.reporting.analysis.history import resolve
    from harness.reporting.render.route import render_route, write

    from harness.reporting.render.formats import FORMATS, MARKDOWN, check_format

    check_format(format, (*FORMATS, MARKDOWN))
    if not name.isidentifier():
        raise UserError(f"--name {name!r} is not an importable module name: use letters, digits and _")
    root = repo_root()
    used = resolve(root, list(lines), exact=exact)
    table = route_mod.build([lines_mod.load(root, spec) for spec in used.specs])
    js, py = write(table, out if out.is_absolute() else Path.cwd() / out, name)
    if format == MARKDOWN:
        from harness.reporting.render.route import emit_route_markdown

        emit_route_markdown(table, js, py, used.notes)
        return
    if format != "table":
        from harness.reporting.render.route import emit_route

        emit_route(table, format, js, py, used.notes)
        return
    render_route(table, js, py, used.notes)
