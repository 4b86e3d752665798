"""`bench kernels`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command("kernels")
def kernels_cmd(format: str = typer.Option("table", "--format", help="table | json | csv")):
    """List every registered kernel, grouped by workload: source, workloads, dtypes, and whether it runs here (and why not).

    Example: bench kernels
    """
    from harness.measurement.device import detect_device
    from harness.registry import load_kernels, load_workloads
    from harness.reporting.render.formats import check_format
    from harness.reporting.render.kernels import render_kernels

    check_format(format)
    render_kernels(load_kernels(), detect_device(), format, tuple(load_workloads()))
