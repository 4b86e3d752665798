"""`bench kernels`"""

from __future__ import annotations

from harness.cli import app


@app.command("kernels")
def kernels_cmd():
    """List every registered kernel: source, workloads, dtypes, and whether it runs here (and why not).

    Example: bench kernels
    """
    from harness.measurement.device import detect_device
    from harness.registry import load_kernels
    from harness.reporting.render.kernels import render_kernels

    render_kernels(load_kernels(), detect_device())
