"""`bench site [LINE...] [--out DIR]`"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from harness.cli import app, complete_line


@app.command()
def site(lines: Optional[List[str]] = typer.Argument(None, autocompletion=complete_line, help="lines to publish, with every line of their "
                                                                "amendment chains (default: every line)"),
         out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: site/)"),
         format: str = typer.Option("files", "--format", help="files (the site's pages) | json (the index and the "
                                                              "chains as one document on stdout; nothing written)")):
    """One static site over every ledger: an index of the lines (state, verdict, headline figure,
    amendments, commit, device), each line's report, and a page per amendment chain with the
    headline figure per line, regressions marked. Self-contained: open index.html from disk.

    Example: bench site --out site   (then open site/index.html in a browser)
    """
    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis.site import site_data
    from harness.reporting.render.formats import check_format
    from harness.reporting.render.site import emit_site, render_site, write_site

    check_format(format, ("files", "json"))
    root = repo_root()
    if format == "json":
        if out is not None:
            raise UserError("--out names where pages are written, and --format json writes none: drop --out")
        emit_site(site_data(root, lines)[0])
        return
    target = out if out is not None else Path("site")
    target = target if target.is_absolute() else Path.cwd() / target
    blocked = next((p for p in (target, *target.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UserError(f"--out {target}: {blocked} is a file, not a directory: name a directory (it is created "
                        f"if missing)")
    data, reports = site_data(root, lines)
    render_site(data, write_site(data, reports, target))
