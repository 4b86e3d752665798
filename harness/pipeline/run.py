"""Running one config of a sweep, one call per stage: budget → gate → time → after-timing
checks → rates → result row (one module each, a frozen answer each).

``run_config`` is a function of plain data (the config, its candidates and a SweepContext)
that returns row payloads; it never writes the ledger, so it can move into a worker process.
The order of stages is the policy: nothing is timed that has not passed the float64 gate on
the same inputs, and nothing is reported that fails the checks after timing.
"""

from __future__ import annotations

from harness.vocab.outcomes import CRASHED
from harness.pipeline import phase
from harness.pipeline.budget import Budget, budget
from harness.pipeline.checks import check_after_timing
from harness.pipeline.context import Outcome, SweepContext, Task
from harness.pipeline.gate import gate_all
from harness.pipeline.rates import rates
from harness.pipeline.result import result_row
from harness.pipeline.rows import base_row
from harness.pipeline.timed import time_arms
from harness.workloads import Config
from harness.measurement import memory
from harness.measurement.numerics import apply


def run_config(cfg: Config, candidates: tuple[str, ...], ctx: SweepContext) -> list[Outcome]:
    """All outcome rows for one config (one per candidate, plus a baseline `incorrect` row if
    any), each holding what the config's phases cost (``cost``: seconds per phase, the gate,
    sustained calls and recheck per kernel, the float64 references' share of the gates)."""
    phase.begin()
    try:
        rows = _run(cfg, candidates, ctx)
    finally:
        cost = phase.end()
    return [Outcome(o.kind, {**o.payload, "cost": cost}) for o in rows]


def _run(cfg: Config, candidates: tuple[str, ...], ctx: SweepContext) -> list[Outcome]:
    # Whatever earlier configs left (tensors in reference cycles, cached blocks) is freed before
    # this one's budget reads the memory available and its peak count starts: one collection
    # per config, here.
    memory.release(ctx.device)
    b = budget(Task(cfg, tuple(candidates)), ctx)
    if not b.runnable:
        return list(b.rows)
    held = memory.reset_peak(ctx.device)
    try:
        return [*b.rows, *_measure(b, held)]
    except Exception as exc:
        if not memory.is_oom(exc):
            raise
        memory.release(ctx.device)
        return [*b.rows, *(Outcome(CRASHED, {
            **base_row(cfg, spec.name, ctx), "predicted_bytes": b.pred.peak_bytes,
            "reason": f"out of device memory although predicted {b.pred.peak_bytes / 2**30:.2f} GiB fits: "
                      f"{str(exc).splitlines()[0]} (the memory model is wrong for this config)"})
            for spec in b.runnable)]


def _measure(b: Budget, held: int) -> list[Outcome]:
    """The stages after the budget, under the line's numeric state pinned for the whole config."""
    g = gate_all(b)
    if not g.timed:
        return list(g.rows)
    out = list(g.rows)
    with apply(g.state) as pinned:
        checked = check_after_timing(time_arms(g, held, pinned.as_dict()))
        for v in checked.verdicts:
            if isinstance(v, Outcome):
                out.append(v)
                continue
            rated = rates(checked, v)
            out.append(rated if isinstance(rated, Outcome) else result_row(rated))
    return out
