"""`bench new LINE --candidate K --prediction X`"""

from __future__ import annotations

from typing import List, Optional

import typer

from harness.cli import app


@app.command()
def new(line: str = typer.Argument(..., help="the line id (not a path): registrations/LINE.toml is written"),
        candidate: Optional[List[str]] = typer.Option(None, "--candidate",
                                                      help="a kernel to test (repeat for several; `bench kernels` "
                                                           "lists them; default: the first other than the baseline "
                                                           "registered for the workload that runs here)"),
        prediction: float = typer.Option(..., "--prediction", help="your prediction of the primary figure "
                                                                     "(default primary: geomean(speedup)), written "
                                                                     "before any number exists"),
        baseline: Optional[str] = typer.Option(None, "--baseline",
                                               help="the kernel every candidate is timed against (default: "
                                                    "cublas_stack for a GPU, torch_stack for a CPU)"),
        device: str = typer.Option("auto", "--device", help="auto | cpu | cuda: the device the line is for "
                                                            "(auto: this machine's); every kernel must run there"),
        workload: str = typer.Option("attention", "--workload", help="any installed workload (`bench kernels` "
                                                                       "groups kernels by workload): attention, "
                                                                       "decode, gemm_bias_gelu, rmsnorm, a plugin's"),
        axis: Optional[List[str]] = typer.Option(None, "--grid", help="AXIS=V1,V2: grid values of any axis of the "
                                                                      "workload (repeat for several axes; default: "
                                                                      "its example grid)"),
        batch: Optional[List[int]] = typer.Option(None, "--batch", help="grid values (repeat the flag)"),
        heads: Optional[List[int]] = typer.Option(None, "--heads"),
        kv_heads: Optional[List[int]] = typer.Option(None, "--kv-heads"),
        seq_len: Optional[List[int]] = typer.Option(None, "--seq-len"),
        head_dim: Optional[List[int]] = typer.Option(None, "--head-dim"),
        dtype: Optional[List[str]] = typer.Option(None, "--dtype", help="float16 | bfloat16 | float32"),
        causal: Optional[str] = typer.Option(None, "--causal", help="both | true | false (default: both for "
                                                                      "attention, false for decode)"),
        hypothesis: Optional[str] = typer.Option(None, "--hypothesis", help="what you expect and why (default: "
                                                                           "the default bar in words)"),
        go: Optional[str] = typer.Option(None, "--go", help="the GO bar (default: geomean(speedup) >= 1.05 and "
                                                            "pass_rate == 1.0); with it, --hypothesis is required"),
        primary: Optional[str] = typer.Option(None, "--primary", help="the figure the prediction is about")):
    """Write a commented registration from flags: kernels, grid, and working tolerance, timing and
    bar sections, checked as `bench register` checks them. Nothing is registered: review it,
    commit it, then `bench register`.

    Example: bench new my-line --candidate sdpa --seq-len 128 --seq-len 256 --prediction 1.2

    Example: bench new gemm-cpu --workload gemm_bias_gelu --grid m=64,256 --grid dtype=float32 --prediction 1.0
    """
    from harness.provenance.git import repo_root
    from harness.governance.scaffold import BarAsk, GridAsk, plan, write_new
    from harness.reporting.render.messages import render_written_registration

    grid = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_len": seq_len, "head_dim": head_dim,
            "dtype": dtype}
    new_line = plan(line, candidate or (), prediction, baseline=baseline,
                    grid=GridAsk(workload, grid, causal, tuple(axis or ())),
                    bar=BarAsk(hypothesis, go, primary), device=device)
    _, waived = write_new(repo_root(), new_line)
    render_written_registration(line, waived)
