"""`bench status [--lineage]`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def status(lineage: bool = typer.Option(False, "--lineage",
                                        help="each amendment chain as a tree (a line, then the lines amending it), "
                                             "with what else happened to each line"),
           format: str = typer.Option("table", "--format", help="table | json | csv")):
    """Every line: registered / swept n of m pairs / closed GO or NO-GO, its commit and device, and its
    history (amended by, re-opened, re-measured; a deleted ledger is GONE).

    Example: bench status --lineage
    """
    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis.history import chains
    from harness.reporting.analysis.status_view import stored_statuses
    from harness.reporting.render.status import render_status

    from harness.reporting.render.formats import check_format

    check_format(format)
    root = repo_root()
    idx, rows = stored_statuses(root)
    if rows is None:  # a line not stored as its ledger is now, or GONE: checked in full (and stored)
        from harness.reporting.analysis.status import statuses

        rows = statuses(root, idx)
    if not rows:
        raise UserError(f"no lines under {root / 'ledger'}: register one (bench register registrations/<line>.toml)")
    if format != "table":
        from harness.reporting.render.status import emit_status

        emit_status(rows, format)
        return
    render_status(rows, chains(idx) if lineage else None)
