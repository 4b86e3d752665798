"""`bench warm LINE [--workers N]`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line


@app.command()
def warm(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
         workers: int = typer.Option(None, help="worker processes (default: one per core but one)")):
    """Compile the line's Triton kernels for its configs in parallel, so its sweep loads cached binaries.

    Nothing is timed or recorded; on a machine where nothing compiles ahead it says so.
    

    Example: bench warm flash-h200-v2 --workers 8
    """
    from harness.provenance import git as gitguard
    from harness.registration import line_ids, schema as registration
    from harness.measurement.device import detect_device
    from harness.commands.warm import default_workers, plan, warm as do_warm
    from harness.reporting.render.warm import render_warmed, render_warm_summary

    reg = registration.load(line_ids.resolve(gitguard.repo_root(), line))
    summary = do_warm(plan(reg, detect_device()), default_workers() if workers is None else workers,
                      on_done=render_warmed)
    render_warm_summary(summary)
    if summary.failed:
        raise typer.Exit(1)
