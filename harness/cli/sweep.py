"""`bench sweep LINE`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line

# A sweep stopped because its baseline fails the correctness gate (0: every config run; 2:
# refused before any work; 130 / 143: Ctrl-C / SIGTERM, every one ending with the resume line).
EXIT_BASELINE_FAILED = 3
# A sweep that ran to the end but measured nothing the verdict can use: every pair skipped,
# throttled, rig-noisy (unless the line counts those) or unsupported. Its first line on stderr
# says why, from the rows' own records (reporting/analysis/usable.py).
EXIT_NOTHING_USABLE = 4


@app.command()
def sweep(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
          device: str = typer.Option("auto", help="auto | cuda | cpu"),
          gpus: str = typer.Option(None, "--gpus", help="GPUs to shard the configs over, one worker each: "
                                                        "0,1,… (nvidia-smi numbering) or all (default: GPU 0)"),
          workers: int = typer.Option(1, "--workers", help="CPU sweeps: worker processes (they share the CPU: "
                                                           "for testing the pool, not for numbers)"),
          executor: str = typer.Option("local", "--executor", help="local (worker processes on this host) | "
                                                                   "ray (one actor per GPU of a Ray cluster: "
                                                                   "docs/cluster.md)"),
          address: str = typer.Option(None, "--address", help="--executor ray: the cluster's address "
                                                               "(default: start Ray on this host)"),
          inline: bool = typer.Option(False, "--inline", help="run configs in this process (debugging): no "
                                                              "isolation, no watchdog"),
          retry_crashed: bool = typer.Option(False, "--retry-crashed",
                                             help="re-run pairs that crashed at this commit on this device"),
          remeasure: bool = typer.Option(False, "--remeasure",
                                         help="measure again, at this commit on this device, the pairs the verdict "
                                              "cannot use (rig-noisy results, skipped or throttled pairs); the new "
                                              "rows supersede the old"),
          no_wait: bool = typer.Option(False, "--no-wait", help="refuse, instead of waiting, when another bench "
                                                                "process is measuring on a device"),
          no_ceilings: bool = typer.Option(False, "--no-ceilings",
                                           help="do not measure/attach device ceilings (no reductio check)"),
          no_commit: bool = typer.Option(False, "--no-commit",
                                         help="leave the rows uncommitted (the verdict refuses until they are)")):
    """Run the registered grid: memory check, correctness gate, timing, one ledger row per outcome,
    committed to git after each config.

    Exit 0 when it ran to the end, 2 when refused, 3 when stopped because the baseline fails
    the correctness gate, 4 when it ran to the end but measured nothing the verdict can use
    (one line on stderr says why: a busy host, throttled clocks, …), 130 after Ctrl-C and 143
    after SIGTERM (each with the summary and the command that resumes).

    Example: bench sweep example   (after Ctrl-C, the same command resumes)
    """
    import os

    # Before torch starts CUDA (workers inherit it): N×N tensors of tens of GB, freed and
    # re-allocated in other sizes config after config, fragment the caching allocator (an
    # H200 run at seq_len 32k failed with 63 GiB reserved but unallocated); expandable
    # segments avoid that.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from harness.cli import command_line, interrupted_by
    from harness.errors import UserError
    from harness.provenance import git as gitguard
    from harness.governance.line import open_line
    from harness.vocab.outcomes import latest_outcomes, measured_on
    from harness.measurement.device import detect_device
    from harness.execution.select import make_executor
    from harness.commands.sweep import SweepPlan, sweep as do_sweep
    from harness.reporting.render.progress import SweepProgress
    from harness.reporting.render.sweep import render_device_wait, render_interrupt_pending, render_sweep_summary

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cuda or cpu")
    with open_line(line, action="a sweep", commit=not no_commit) as ln:
        dev = detect_device() if device == "auto" else device
        if dev == "cuda" and executor != "ray" and detect_device() != "cuda":  # a Ray driver needs no GPU
            raise UserError("--device cuda but torch sees no GPU: use --device cpu or run on a GPU machine")
        executor = make_executor(dev, inline=inline, gpus=gpus, workers=workers, executor=executor,
                                 address=address)
        plan = SweepPlan(ln, dev, with_ceilings=not no_ceilings, commit=not no_commit, retry_crashed=retry_crashed,
                         remeasure=remeasure, wait=not no_wait)
        summary = do_sweep(plan, executor=executor, progress=SweepProgress(ln.reg.line), on_wait=render_device_wait,
                           on_interrupt=render_interrupt_pending)
        rows = [r for r in latest_outcomes(ln.ledger.rows()).values() if measured_on(r, ln.reg.mixed_devices) == summary.measured_on]
        dirty = gitguard.has_uncommitted(ln.root, ln.ledger.path)
    render_sweep_summary(summary.as_dict(), rows, gitguard.relative(ln.root, ln.ledger.path) if dirty else None,
                         resume=command_line())
    if summary.signal is not None:  # the sweep handled it and summarized: end as the signal would
        interrupted_by(summary.signal)
    elif summary.baseline_failed is not None:
        raise typer.Exit(EXIT_BASELINE_FAILED)
    else:
        from harness.reporting.analysis.usable import nothing_usable
        from harness.reporting.render.messages import render_nothing_usable

        none = nothing_usable(rows, include_noisy=ln.reg.include_noisy,
                              max_waited=ln.reg.timing.max_drop_fraction, line=ln.reg.line)
        if none is not None:
            render_nothing_usable(none)
            raise typer.Exit(EXIT_NOTHING_USABLE)
