"""`bench ceilings`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def ceilings(force: bool = typer.Option(False, "--force", help="re-measure even if this device has ceilings")):
    """Measure this device's copy bandwidth and matmul TFLOP/s; store them as a ledger row."""
    from harness.governance.gitguard import repo_root
    from harness.reporting.render import render_ceilings
    from harness.sweep.ceilings import current_ceilings

    row, measured = current_ceilings(repo_root(), force=force)
    render_ceilings(row, measured)
