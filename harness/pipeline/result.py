"""Stage 6, the result row: a candidate's figures as the ledger's `result` row."""

from __future__ import annotations

from harness.vocab.outcomes import RESULT
from harness.pipeline.context import Outcome
from harness.pipeline.rates import Rated
from harness.pipeline.rows import base_row, memory_row
from harness.vocab.metrics import INTERLEAVED, SUSTAINED, result_metrics


def result_row(r: Rated) -> Outcome:
    """A `result` row; its ``metrics`` are the metric table's (vocab/metrics.py)."""
    c, s = r.checked, r.survivor
    t = c.timed
    b = t.gated.budget
    cfg, ctx, base_spec, spec, sus, empty, gates = (b.task.config, b.ctx, b.base_spec, s.spec, s.sus, c.empty,
                                                    t.gated.gates)
    payload = {
        **base_row(cfg, spec.name, ctx),
        "metrics": result_metrics(r.metrics),
        "timing": t.timing_row(),
        "policy": ctx.reg.timing.as_dict(),
        "empty_window": empty.as_dict() if empty is not None else None,
        "rate_protocol": SUSTAINED if sus is not None else INTERLEAVED,
        "sustained": sus.as_dict() if sus is not None else None,
        "rig_noisy": bool(r.noise),
        "rig_noise": r.noise,
        "impossible": r.impossible,
        "floor": r.floor,
        "memory": memory_row(b.pred, c.peak),
        "gate": {"candidate": gates[spec.name].to_row(), "baseline": gates[base_spec.name].to_row()},
        "numerics": t.numerics,
        "kernel_numerics": {"candidate": spec.numerics, "baseline": base_spec.numerics},
        "kernel_details": s.details,
    }
    return Outcome(RESULT, payload)
