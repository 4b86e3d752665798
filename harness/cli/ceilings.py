"""`bench ceilings`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def ceilings(force: bool = typer.Option(False, "--force", help="re-measure even if this device has ceilings"),
             no_commit: bool = typer.Option(False, "--no-commit",
                                            help="leave the ceilings row uncommitted (a sweep's rows naming it "
                                                 "do not verify once committed without it)")):
    """Measure this device's copy bandwidth and matmul TFLOP/s; store them as a ledger row,
    committed (ledger/_device_ceilings.jsonl alone) unless --no-commit."""
    from harness.governance.gitguard import require_clean
    from harness.measurement.device import detect_device, env_summary
    from harness.execution.devicelock import device_lock
    from harness.governance.devices import device_key
    from harness.record.ceilings import commit_ceilings, current_ceilings, is_committed, require_committable
    from harness.reporting.render.ceilings import render_ceilings
    from harness.reporting.render.sweep import render_device_wait

    # Ceilings feed every later reductio: stamp them with a commit that means something.
    root = require_clean().root
    if not no_commit:
        require_committable(root)  # refuse before measuring, not after
    device = detect_device()
    # Measuring: no sweep may time this device meanwhile (nor this measure it).
    with device_lock(device_key(env_summary(device)), who={"line": "(bench ceilings)", "root": str(root)},
                     wait=True, on_wait=render_device_wait):
        row, measured = current_ceilings(root, device=device, force=force)
    commit = None if no_commit else commit_ceilings(root, "bench ceilings")
    render_ceilings(row, measured, commit=commit, committed=is_committed(root, row))
