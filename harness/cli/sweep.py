"""`bench sweep LINE`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def sweep(line: str = typer.Argument(..., help="line id or registrations/NAME.toml"),
          device: str = typer.Option("auto", help="auto | cuda | cpu"),
          no_ceilings: bool = typer.Option(False, "--no-ceilings",
                                           help="do not measure/attach device ceilings (no reductio check)"),
          no_commit: bool = typer.Option(False, "--no-commit",
                                         help="leave the rows uncommitted (the verdict refuses until they are)")):
    """Run the registered grid: memory check, correctness gate, timing, one ledger row per outcome,
    committed to git after each config."""
    import os

    # Before torch starts CUDA: N×N tensors of tens of GB, freed and re-allocated in other
    # sizes config after config, fragment the caching allocator (an H200 run at seq_len
    # 32k failed with 63 GiB reserved but unallocated); expandable segments avoid that.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from harness.errors import UserError
    from harness.governance.line import open_line
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
        summary = do_sweep(ln, dev, env_summary(dev), with_ceilings=not no_ceilings, commit=not no_commit,
                           progress=SweepProgress(ln.reg.line))
    render_sweep_summary(summary.as_dict())
