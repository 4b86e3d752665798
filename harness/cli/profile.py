"""`bench profile LINE [CONFIG…]`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line


@app.command()
def profile(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
            configs: list[str] = typer.Argument(None, help="config keys; default: smallest and largest of each dtype"),
            no_wait: bool = typer.Option(False, "--no-wait", help="refuse, instead of waiting, when another bench "
                                                                  "process is measuring on the device"),
            no_commit: bool = typer.Option(False, "--no-commit",
                                           help="leave the rows uncommitted (the verdict refuses until they are)")):
    """Hardware counters (Nsight Compute) of the line's kernels, after the gate; appends `profile`
    rows, committed to git after each config.

    Example: bench profile flash-h200-v3   (on a GPU machine with ncu; elsewhere exit 2)
    """
    from harness.governance.line import open_line
    from harness.measurement.device import detect_device
    from harness.commands.profile import profile_line, require_profiler, select_configs
    from harness.commands.sweep import check_kernels_usable
    from harness.reporting.render.profile import render_profile
    from harness.reporting.render.sweep import render_device_wait

    with open_line(line, action="a profile", commit=not no_commit) as ln:
        chosen = select_configs(ln.reg, list(configs or []))
        dev = detect_device()
        require_profiler(dev)
        check_kernels_usable(ln, dev)
        written, _ = profile_line(ln, chosen, dev, commit=not no_commit, wait=not no_wait,
                                  on_wait=render_device_wait)
    render_profile(ln.reg.line, written)
