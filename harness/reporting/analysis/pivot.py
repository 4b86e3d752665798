"""`bench compare LINE --pivot`: one line as a config × kernel table, the best kernel of each
config marked (torch.utils.benchmark's Compare).

Only result rows are read (each passed the float64 gate and every check after timing): the
line's current outcomes (``LineView.outcomes``, the rows the verdict would see). Rows are the
configs in numeric order, seq_len first (the axis a line's grid is read along: n4096 before
n32768, whatever the batch), then the other fields (``ORDER``); columns the baseline, then each
candidate in the registration's order.

Two figures, each from the interleaved rounds (the protocol a speedup comes from):

- ``speedup`` (default): the candidate's speedup over the baseline with its bootstrap 95% CI;
  the baseline's column holds 1. The best of a config is the candidate with the highest
  speedup whose CI lies wholly above 1; where none does, the baseline.
- ``ms``: each kernel's median time; the baseline's is the median of its arm pooled over the
  candidates' rows of that config (each row times it beside one candidate). The best of a
  config is the kernel with the lowest median.

A kernel whose speedup CI overlaps the best's at a config is marked tied: the rows cannot
tell them apart there (speedup figure only: medians carry no interval).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.errors import UserError
from harness.ledger.payloads import Metrics
from harness.reporting.analysis.lines import LineView, arm_samples
from harness.reporting.analysis.panels import SIZE_FIELD, size_field
from harness.vocab.outcomes import RESULT

SPEEDUP, MS = "speedup", "ms"
FIGURES = (SPEEDUP, MS)


@dataclass(frozen=True)
class Cell:
    value: float  # the speedup (×) or the median (ms)
    ci_low: float | None = None  # the speedup's CI (None for ms, and for the baseline)
    ci_high: float | None = None
    best: bool = False
    tied: bool = False  # its CI overlaps the best's: not told apart at this config


@dataclass(frozen=True)
class Pivot:
    line: str
    figure: str  # SPEEDUP or MS
    baseline: str
    kernels: tuple[str, ...]  # columns: the baseline first, then the candidates in registration order
    configs: tuple[str, ...]  # rows: config keys in numeric order
    cells: dict  # (config_key, kernel) -> Cell; a pair without a result row has none

    def best(self, config_key: str) -> str | None:
        return next((k for k in self.kernels if (c := self.cells.get((config_key, k))) and c.best), None)

    def wins(self) -> dict[str, int]:
        """Configs each kernel is best at (the table's caption)."""
        out = {k: 0 for k in self.kernels}
        for c in self.configs:
            b = self.best(c)
            if b is not None:
                out[b] += 1
        return out

    def as_json(self) -> dict:
        return {"line": self.line, "figure": self.figure, "baseline": self.baseline, "kernels": list(self.kernels),
                "wins": self.wins(),
                "rows": [{"config": c, "best": self.best(c),
                          "cells": {k: _cell_json(self.cells.get((c, k))) for k in self.kernels}}
                         for c in self.configs]}


def _cell_json(c: Cell | None):
    if c is None:
        return None
    return {"value": c.value, "ci_low": c.ci_low, "ci_high": c.ci_high, "best": c.best, "tied": c.tied}


_NUMBER = re.compile(r"(\d+(?:\.\d+)?)")
# The config fields rows are sorted by, in this order (workloads.Config's, seq_len first).
ORDER = ("workload", "seq_len", "batch", "heads", "kv_heads", "head_dim", "dtype", "causal")


def numeric_order(config_key: str) -> tuple:
    """A sort key reading the numbers inside each '/'-separated field as numbers
    (attention/n4096 before attention/n32768), text compared as text."""
    out = []
    for field in config_key.split("/"):
        out.append(tuple((0, float(part), "") if i % 2 else (1, 0.0, part)
                         for i, part in enumerate(_NUMBER.split(field)) if part))
    return tuple(out)


def config_order(row) -> tuple:
    """A result row's place among the pivot's rows: its config's ``ORDER`` fields (another
    workload's: its size axis first, then its other fields; numbers as numbers), then its key
    read numerically (a field ``ORDER`` does not name)."""
    config = row.config or {}
    size = size_field(config)
    order = ORDER if size == SIZE_FIELD else ("workload", *((size,) if size else ()),
                                              *(f for f in config if f not in ("workload", size)))
    fields = tuple((0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))
                   for v in (config.get(f) for f in order))
    return fields, numeric_order(row.config_key)


def check_figure(figure: str) -> str:
    if figure not in FIGURES:
        raise UserError(f"--figure {figure!r}: use {' or '.join(FIGURES)}")
    return figure


def pivot(view: LineView, figure: str = SPEEDUP) -> Pivot:
    """The pivot of ``view``'s current result rows (see the module docstring)."""
    import numpy as np

    check_figure(figure)
    results = [r for r in view.outcomes().values() if r.kind == RESULT]
    if not results:
        raise UserError(f"line '{view.line}' has no result rows to tabulate: sweep it first (bench sweep {view.line})")
    reg = view.plan
    baseline = reg.baseline or results[0].baseline
    order = [c for c in (reg.candidates or []) if c != baseline]
    order += sorted({r.candidate for r in results} - set(order) - {baseline})
    kernels = tuple([baseline, *[c for c in order if any(r.candidate == c for r in results)]])
    place = {r.config_key: config_order(r) for r in results}
    configs = tuple(sorted(place, key=place.get))
    cells: dict = {}
    for key in configs:
        rows = [r for r in results if r.config_key == key]
        raw: dict[str, Cell] = {}
        if figure == SPEEDUP:
            raw[baseline] = Cell(1.0)
            for r in rows:
                m = Metrics.from_row(r.metrics or {})
                raw[r.candidate] = Cell(_num(m.speedup), _num(m.speedup_ci_low), _num(m.speedup_ci_high))
        else:
            base = [x for r in rows for x in arm_samples(r, "baseline")]
            if base:
                raw[baseline] = Cell(float(np.median(base)))
            for r in rows:
                own = arm_samples(r, "candidate")
                if own:
                    raw[r.candidate] = Cell(float(np.median(own)))
        cells.update({(key, k): c for k, c in _mark(raw, baseline, figure).items()})
    return Pivot(view.line, figure, baseline, kernels, configs, cells)


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _mark(raw: dict[str, Cell], baseline: str, figure: str) -> dict[str, Cell]:
    """``raw`` with the best kernel (and, for speedups, those tied with it) marked."""
    if figure == MS:
        timed = {k: c for k, c in raw.items() if math.isfinite(c.value)}
        best = min(timed, key=lambda k: timed[k].value) if timed else None
        return {k: Cell(c.value, best=k == best) for k, c in raw.items()}
    above = {k: c for k, c in raw.items() if k != baseline and c.ci_low is not None and c.ci_low > 1
             and math.isfinite(c.value)}
    best = max(above, key=lambda k: above[k].value) if above else baseline
    lo = raw[best].ci_low if best != baseline else None
    out = {}
    for k, c in raw.items():
        tied = (k != best and k != baseline and lo is not None and c.ci_high is not None and c.ci_high >= lo)
        out[k] = Cell(c.value, c.ci_low, c.ci_high, best=k == best, tied=tied)
    return out


__all__ = ["FIGURES", "MS", "SPEEDUP", "Cell", "Pivot", "check_figure", "numeric_order", "pivot"]
