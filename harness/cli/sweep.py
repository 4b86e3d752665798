"""`bench sweep LINE`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def sweep(line: str = typer.Argument(..., help="line id or registrations/NAME.toml"),
          device: str = typer.Option("auto", help="auto | cuda | cpu"),
          no_ceilings: bool = typer.Option(False, "--no-ceilings",
                                           help="do not measure/attach device ceilings (no reductio check)")):
    """Run the registered grid: memory check, correctness gate, timing, one ledger row per outcome."""
    import os

    # Before torch starts CUDA: N×N tensors of tens of GB, freed and re-allocated in other
    # sizes config after config, fragment the caching allocator (an H200 run at seq_len
    # 32k failed with 63 GiB reserved but unallocated); expandable segments avoid that.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from harness.errors import UserError
    from harness.governance import gitguard
    from harness.governance.line import open_line
    from harness.governance.verdict import latest_outcomes, measured_on
    from harness.measurement.device import detect_device, env_summary
    from harness.reporting.progress import SweepProgress
    from harness.reporting.render import render_sweep_summary
    from harness.sweep.loop import sweep as do_sweep

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cuda or cpu")
    with open_line(line, action="a sweep") as ln:
        dev = detect_device() if device == "auto" else device
        if dev == "cuda" and detect_device() != "cuda":
            raise UserError("--device cuda but torch sees no GPU: use --device cpu or run on a GPU machine")
        env = env_summary(dev)
        summary = do_sweep(ln, dev, env, with_ceilings=not no_ceilings, progress=SweepProgress(ln.reg.line))
        here = measured_on({"commit": ln.commit, "env": env})
        rows = [r for r in latest_outcomes(ln.ledger.rows()).values() if measured_on(r) == here]
        dirty = gitguard.has_uncommitted(ln.root, ln.ledger.path)
    render_sweep_summary(summary.as_dict(), rows, gitguard.relative(ln.root, ln.ledger.path) if dirty else None)
