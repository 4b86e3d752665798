"""The sweep's ETA: how long the configs left will take, from their planned sizes.

The model (docs/measurement.md, "The sweep's progress and ETA"): a config's wall time is
``a + b · size``, where ``size`` is its useful FLOPs (``Workload.flops``) times the
kernels it times (the baseline and each open candidate): the harness's fixed cost per config
(setup, the float64 gate's reference, the rounds' floor) is ``a``, the part that grows with
the work is ``b``. The two are fitted by least squares on the configs whose time is known,
both held ≥ 0; with one known config, or all of one size, nothing tells ``a`` from ``b`` and
the time is taken as proportional to size (``a`` = 0).

What is known: the configs this sweep has finished, and before the first one ends, the
configs of this line measured earlier on this device model (each row's ``cost.total``, the
time its config took). With neither, there is no estimate (the progress says "estimating"):
no number is made up from a device's peak rates, which bound a kernel's calls but not the
harness's time around them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from harness.ledger.payloads import ConfigFields, Cost
from harness.vocab.devices import device_of, model
from harness.vocab.outcomes import OUTCOME_KINDS
from harness.errors import UserError
from harness.registry import get_workload


def config_size(config, kernels: int) -> float:
    """A config's planned size: its useful FLOPs (its workload's) times the kernels it times."""
    return get_workload(config.workload).flops(config) * max(kernels, 1)


def task_size(task) -> float:
    """A planned task's size (``pipeline.context.Task``: the baseline and its open candidates)."""
    return config_size(task.config, 1 + len(task.candidates))


def prior(rows, env: dict | None) -> list[tuple[float, float]]:
    """(size, seconds) of each config of ``rows`` (a line's ledger) measured on ``env``'s device
    model: one point per config measurement (its rows share one ``cost``), sized by the
    kernels it timed (its rows, and the baseline)."""
    if env is None:
        return []
    here = model(env)
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.kind not in OUTCOME_KINDS or device_of(r) != here:
            continue
        cost = Cost.from_row(r.cost)
        total = cost.total if cost is not None else None
        if not isinstance(total, (int, float)) or not math.isfinite(total) or total <= 0 or not r.config:
            continue
        groups.setdefault((r.config_key, r.commit, float(total)), []).append(r)
    out = []
    for (_, _, total), group in groups.items():
        try:
            cfg = get_workload(ConfigFields.from_row(group[0].config).workload).from_row(group[0].config)
        except (TypeError, UserError):  # a config written by another bench, or of a workload not installed
            continue
        candidates = {r.candidate for r in group if not r.is_baseline}
        out.append((config_size(cfg, 1 + len(candidates)), total))
    return out


@dataclass(frozen=True)
class Fit:
    """Seconds of a config of ``size``: ``fixed + per_size · size`` (``fit``)."""

    fixed: float
    per_size: float
    points: int  # the known configs it was fitted on

    def seconds(self, size: float) -> float:
        return self.fixed + self.per_size * size


def fit(points: list[tuple[float, float]]) -> Fit | None:
    """The least-squares ``a + b · size`` through ``points`` (size, seconds), a and b ≥ 0;
    proportional where the sizes cannot separate them; None without a point."""
    pts = [(s, t) for s, t in points if s > 0 and t >= 0 and math.isfinite(s) and math.isfinite(t)]
    if not pts:
        return None
    n = len(pts)
    mean_s = sum(s for s, _ in pts) / n
    mean_t = sum(t for _, t in pts) / n
    var = sum((s - mean_s) ** 2 for s, _ in pts)
    if var > 0:
        b = sum((s - mean_s) * (t - mean_t) for s, t in pts) / var
        a = mean_t - b * mean_s
        if b >= 0 and a >= 0:
            return Fit(a, b, n)
        if b < 0:  # time does not grow with size here: the fixed cost alone
            return Fit(mean_t, 0.0, n)
    # One size (or a negative intercept): proportional, through the origin.
    return Fit(0.0, sum(t for _, t in pts) / sum(s for s, _ in pts), n)


def remaining(model_fit: Fit | None, sizes: list[float],
              running: Sequence[tuple[float, float]] = ()) -> float | None:
    """Seconds left: each config not begun at its fitted time (``sizes``), and each running one
    (size, seconds it has run) at what is left of its fitted time (never below 0); None
    without a fit."""
    if model_fit is None:
        return None
    left = sum(model_fit.seconds(s) for s in sizes)
    left += sum(max(model_fit.seconds(s) - ran, 0.0) for s, ran in running)
    return left


__all__ = ["Fit", "config_size", "fit", "prior", "remaining", "task_size"]
