"""`bench new LINE --candidate K --prediction X`"""

from __future__ import annotations

from typing import List, Optional

import typer

from harness.cli import app


@app.command()
def new(line: str = typer.Argument(..., help="the line id: registrations/LINE.toml is written"),
        candidate: List[str] = typer.Option(..., "--candidate", help="a kernel to test (repeat for several; "
                                                                       "`bench kernels` lists them)"),
        prediction: float = typer.Option(..., "--prediction", help="your prediction of the primary figure "
                                                                     "(default primary: geomean(speedup)), written "
                                                                     "before any number exists"),
        baseline: str = typer.Option("cublas_stack", "--baseline",
                                     help="the kernel every candidate is timed against (torch_stack runs on a CPU)"),
        workload: str = typer.Option("attention", "--workload", help="attention | decode"),
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

    Example: bench new my-flash --candidate triton_flash --seq-len 1024 --seq-len 4096 --prediction 1.5
    """
    from harness.errors import UserError
    from harness.governance.gitguard import repo_root
    from harness.governance.scaffold import DEFAULT_GO, DEFAULT_GRID, DEFAULT_PRIMARY, NewLine, write_new
    from harness.reporting.render.messages import render_written_registration
    from harness.workloads import WORKLOADS

    if workload not in WORKLOADS:
        raise UserError(f"--workload {workload!r}: use {' or '.join(WORKLOADS)}")
    if go is not None and hypothesis is None:
        raise UserError("--go without --hypothesis: say in words what the bar tests and why you expect it")
    grid = dict(DEFAULT_GRID[workload])
    given = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_len": seq_len, "head_dim": head_dim,
             "dtype": dtype}
    grid.update({k: list(v) for k, v in given.items() if v})
    if causal is not None:
        choices = {"both": [False, True], "true": [True], "false": [False]}
        if causal not in choices:
            raise UserError(f"--causal {causal!r}: use both, true or false")
        grid["causal"] = choices[causal]
    cands = tuple(dict.fromkeys(candidate))
    if hypothesis is None:
        who = cands[0] if len(cands) == 1 else ", ".join(cands)
        hypothesis = (f"{who} {'is' if len(cands) == 1 else 'are each'} at least 5% faster than {baseline} on "
                      f"the geometric mean of the speedups over this grid, with every config passing the float64 gate.")
    path, waived = write_new(repo_root(), NewLine(line, cands, baseline, workload, grid, hypothesis, prediction,
                                          go or DEFAULT_GO, primary or DEFAULT_PRIMARY))
    render_written_registration(line, waived)
