"""`bench ceilings`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def ceilings(force: bool = typer.Option(False, "--force", help="re-measure even if this device has ceilings")):
    """Measure this device's copy bandwidth and matmul TFLOP/s; store them as a ledger row."""
    from harness.governance.gitguard import require_clean
    from harness.reporting.render import render_ceilings
    from harness.sweep.ceilings import current_ceilings

    # Ceilings feed every later reductio: stamp them with a commit that means something.
    row, measured = current_ceilings(require_clean().root, force=force)
    render_ceilings(row, measured)
