"""`bench replicate LINE`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line


@app.command()
def replicate(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
              device: str = typer.Option("auto", help="auto | cuda | cpu"),
              gpus: str = typer.Option(None, "--gpus", help="the one GPU to replicate on (nvidia-smi numbering; "
                                                            "default: GPU 0)"),
              inline: bool = typer.Option(False, "--inline", help="run configs in this process (debugging): no "
                                                                  "isolation, no watchdog"),
              later: bool = typer.Option(False, "--later",
                                         help="replicate at this checkout's code commit, a descendant of the one the "
                                              "verdict was decided at; its rows are named as at a later commit"),
              other_stack: bool = typer.Option(False, "--other-stack",
                                               help="record a replicate on another software stack (torch, CUDA, "
                                                    "cuDNN, Triton, cupy, driver) than the verdict's: shown as such, "
                                                    "never pooled, never counted toward [replication]"),
              retry_crashed: bool = typer.Option(False, "--retry-crashed",
                                                 help="re-run pairs that crashed in this replicate"),
              remeasure: bool = typer.Option(False, "--remeasure",
                                             help="measure again the pairs of this replicate the verdict could not "
                                                  "use (rig-noisy, skipped, throttled)"),
              no_wait: bool = typer.Option(False, "--no-wait", help="refuse, instead of waiting, when another bench "
                                                                    "process is measuring on the device"),
              no_ceilings: bool = typer.Option(False, "--no-ceilings",
                                               help="do not measure/attach device ceilings (no reductio check)")):
    """Sweep a closed line again on another device instance (another card of the same model, or
    another host) at the commit its verdict was decided at (or, with --later, a later one). Its
    rows go beside the line's, committed, and never change the verdict; `bench status` and
    `bench report` show whether it agrees, clause by clause. A line registered with
    [replication] instances = N is replicated before its verdict, which waits for N instances.

    Exit 0 when it ran to the end, 2 when refused (one line, nothing written), 3 when its
    baseline failed the correctness gate, 130 / 143 after Ctrl-C / SIGTERM.

    Example: bench replicate flash-h200-v2 --gpus 1   (on the card beside the one that decided it; a GPU machine:
    elsewhere exit 2)
    """
    import os

    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # as `bench sweep` does
    from harness.cli import command_line, interrupted_by
    from harness.cli.sweep import EXIT_BASELINE_FAILED
    from harness.errors import UserError
    from harness.execution.select import make_executor
    from harness.governance.line import open_line
    from harness.vocab.outcomes import measured_on, outcome_key, stream_outcomes
    from harness.measurement.device import detect_device
    from harness.commands.replicate import replicate as do_replicate
    from harness.commands.sweep import SweepPlan
    from harness.reporting.render.progress import SweepProgress
    from harness.reporting.render.sweep import render_device_wait, render_interrupt_pending, render_sweep_summary

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cuda or cpu")
    if gpus is not None and not gpus.strip().isdigit():
        raise UserError(f"--gpus {gpus!r}: a replicate runs on one device instance — give one GPU index")
    with open_line(line, action="a replicate", commit=True, closed_ok=True) as ln:
        dev = detect_device() if device == "auto" else device
        if dev == "cuda" and detect_device() != "cuda":
            raise UserError("--device cuda but torch sees no GPU: use --device cpu or run on a GPU machine")
        executor = make_executor(dev, inline=inline, gpus=gpus)
        plan = SweepPlan(ln, dev, with_ceilings=not no_ceilings, retry_crashed=retry_crashed, remeasure=remeasure,
                         wait=not no_wait)
        summary = do_replicate(plan, later=later, other_stack=other_stack, executor=executor,
                               progress=SweepProgress(ln.reg.line), on_wait=render_device_wait,
                               on_interrupt=render_interrupt_pending)
        mine = {} if summary.replicate is None else {  # None: stopped before the device reported
            outcome_key(r): r for r in stream_outcomes(ln.ledger.rows(), summary.replicate)
            if measured_on(r, ln.reg.mixed_devices) == summary.measured_on}
    render_sweep_summary(summary.as_dict(), list(mine.values()), None, resume=command_line())
    if summary.signal is not None:
        interrupted_by(summary.signal)
    elif summary.baseline_failed is not None:
        raise typer.Exit(EXIT_BASELINE_FAILED)
