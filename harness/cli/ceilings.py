"""`bench ceilings`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def ceilings(force: bool = typer.Option(False, "--force", help="re-measure even if this device has ceilings"),
             no_commit: bool = typer.Option(False, "--no-commit",
                                            help="leave the ceilings row uncommitted: no bench command uses or "
                                                 "commits a row no commit holds (commit it yourself, or drop it)")):
    """Measure this device's copy bandwidth and matmul TFLOP/s; store them as a ledger row,
    committed (ledger/_device_ceilings.jsonl alone) unless --no-commit. A stored row is used only
    once a commit holds it; refused while rows no commit holds stand in the file (unless --no-commit).

    Example: bench ceilings --no-commit
    """
    from harness.provenance.git import require_clean
    from harness.measurement.device import detect_device
    from harness.commands.ceilings import ceilings_command, is_committed, require_committable
    from harness.reporting.render.ceilings import render_ceilings
    from harness.reporting.render.sweep import render_device_wait

    # Ceilings feed every later reductio: stamp them with a commit that means something.
    root = require_clean().root
    if not no_commit:
        require_committable(root)  # refuse before measuring, not after
    row, measured, commit = ceilings_command(root, detect_device(), force=force,
                                             why=None if no_commit else "bench ceilings", on_wait=render_device_wait)
    render_ceilings(row, measured, commit=commit, committed=is_committed(root, row))
