"""`bench status [--lineage]`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def status(lineage: bool = typer.Option(False, "--lineage",
                                        help="each amendment chain as a tree (a line, then the lines amending it), "
                                             "with what else happened to each line")):
    """Every line: registered / swept n of m pairs / closed GO or NO-GO, its commit and device, and its
    history (amended by, re-opened, re-measured; a deleted ledger is GONE)."""
    from harness.errors import UserError
    from harness.governance.gitguard import repo_root
    from harness.reporting.render.console import console
    from harness.reporting.analysis.history import chains, index
    from harness.reporting.status import lineage_trees, status_table, statuses

    root = repo_root()
    rows = statuses(root)
    if not rows:
        raise UserError(f"no lines under {root / 'ledger'}: register one (bench register registrations/<line>.toml)")
    c = console()
    if lineage:
        for tree in lineage_trees(rows, chains(index(root))):
            c.print(tree)
    else:
        c.print(status_table(rows))
    shallow = [s.line for s in rows if s.note]
    if shallow:
        c.print(f"note: this clone is shallow: the history of {len(shallow)} of {len(rows)} lines before its "
                f"oldest commit is not here and was not checked (bench ledger verify names what; "
                f"git fetch --unshallow checks it)")
