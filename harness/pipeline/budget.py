"""Stage 1, the budget: which candidates can run this config here, and whether they fit.

A kernel that cannot run on this device or this config is `unsupported`; when the memory
model predicts the config's peak above what the device has free, every runnable candidate
is `skipped` before anything is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab.outcomes import SKIPPED, UNSUPPORTED
from harness.pipeline import phase
from harness.pipeline.context import Outcome, SweepContext, Task
from harness.pipeline.rows import base_row
from harness.measurement import memory
from harness.registry import get_kernel


@dataclass(frozen=True)
class Budget:
    """The budget's answer: the rows it settled, and what the next stages run (``runnable``
    empty: nothing runs; ``pred``: the memory model's prediction, None when nothing was runnable)."""

    task: Task
    ctx: SweepContext
    base_spec: object
    runnable: tuple
    pred: object | None
    rows: tuple[Outcome, ...]


def budget(task: Task, ctx: SweepContext) -> Budget:
    cfg = task.config
    base_spec = get_kernel(ctx.reg.baseline)
    out: list[Outcome] = []
    runnable = []
    why_base = base_spec.config_reason(cfg)
    for name in task.candidates:
        spec = get_kernel(name)
        why = spec.unusable_reason(ctx.device) or spec.config_reason(cfg)
        if why is None and why_base is not None:
            why = f"baseline {ctx.reg.baseline} cannot run this config: {why_base}"
        if why:
            out.append(Outcome(UNSUPPORTED, {**base_row(cfg, name, ctx), "reason": why}))
        else:
            runnable.append(spec)
    if not runnable:
        return Budget(task, ctx, base_spec, (), None, tuple(out))

    phase.report(None, phase.SETUP)
    pred = memory.predict(cfg, [base_spec, *runnable], ctx.reg.timing, ctx.device, workload=ctx.workload)
    avail = memory.available_bytes(ctx.device)
    if pred.peak_bytes > avail:
        for spec in runnable:
            out.append(Outcome(SKIPPED, {
                **base_row(cfg, spec.name, ctx), "predicted_bytes": pred.peak_bytes, "available_bytes": avail,
                "memory_breakdown": pred.breakdown,
                "reason": f"predicted peak {pred.peak_bytes / 2**30:.2f} GiB > available {avail / 2**30:.2f} GiB "
                          f"(free memory less a {memory.MEMORY_MARGIN:.0%} margin)"}))
        return Budget(task, ctx, base_spec, (), pred, tuple(out))
    return Budget(task, ctx, base_spec, tuple(runnable), pred, tuple(out))
