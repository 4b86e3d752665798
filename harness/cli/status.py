"""`bench status`"""

from __future__ import annotations

from harness.cli import app


@app.command()
def status():
    """Every line: registered / swept n of m pairs / closed GO or NO-GO, its commit and device."""
    from harness.errors import UserError
    from harness.governance.gitguard import repo_root
    from harness.reporting.console import console
    from harness.reporting.status import status_table, statuses

    root = repo_root()
    rows = statuses(root)
    if not rows:
        raise UserError(f"no lines under {root / 'ledger'}: register one (bench register registrations/<line>.toml)")
    console().print(status_table(rows))
    shallow = [s.line for s in rows if s.note]
    if shallow:
        console().print(f"note: this clone is shallow: the history of {len(shallow)} of {len(rows)} lines before its "
                        f"oldest commit is not here and was not checked (bench ledger verify names what; "
                        f"git fetch --unshallow checks it)")
