"""The GO/NO-GO bar: a small expression language, parsed without ``eval``.

A registration's ``[bar] go = "..."`` is fixed before any number exists, so it must be
checked completely at register time (names, types, syntax) and then evaluated
mechanically over the ledger's per-config rows. A hand-written tokenizer (tokens.py) and
recursive-descent parser (bar_syntax.py, with the grammar) accept only the grammar; nothing
in the text can reach Python (no ``eval``, ``exec``, ``compile`` or ``ast``). This module is
the language's face: ``parse`` / ``parse_aggregate`` and the evaluation.

Aggregates (AGG) and what they take:

* ``geomean min max median mean`` need a METRIC; they reduce the metric over rows that
  match the filter, passed the correctness gate (``correct``) and measured the metric.
* ``count(METRIC ...)`` counts those same rows; ``count`` / ``count(where ...)`` with no
  metric counts every filter-matching row, correct or not (sweep coverage).
* ``pass_rate`` / ``pass_rate(where ...)`` takes no metric: the fraction of
  filter-matching rows that are ``correct``.
* ``speedup vs "P"`` in any of them reduces, per selected correct row, its candidate's speedup
  over candidate P at the same config in the same interleaved rounds (governance/peers.py). A
  correct row whose P has no correct result of that measurement makes the aggregate None,
  ``count`` included, with a note naming why (the registered comparison was not made there:
  unknown, never a pass); P's result from another run makes the verdict refuse.
Semantics: an aggregate over zero rows is ``None`` (``count`` is 0: an empty count is
still a count) and any comparison with ``None`` is false, so a bar over a slice the
sweep never produced fails closed. Every comparison is a *clause*, reported on its own
with the value that decided it; ``and``/``or``/``not`` combine clause results, all
clauses are evaluated (no short-circuit) so the verdict can show each one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from harness.registration.bar_syntax import (And, Aggregate, Bar, Comparison, FieldTest, Node, Not, Or, parse,
                                           parse_aggregate, workload_fields)
from harness.vocab.metrics import STEP_NAMES, derived
from harness.registration.tokens import COMPARE, BarError

# The key marking a bar row as an integration row (verdict.bar_rows): only step metrics read it.
INTEGRATION_FLAG = "integration"
# The key of a bar row's speedups against its peers at the same config ({peer: speedup vs peer};
# verdict.bar_rows fills it from governance/peers.py).
PEERS_KEY = "vs"
# The key of why a correct bar row has no speedup over a peer ({peer: (kind, reason)}; peers.py).
UNCOMPARED_KEY = "vs_uncompared"

# The language's public entry points, defined in bar_syntax.py and tokens.py.
__all__ = ["Aggregate", "Bar", "BarError", "BarOutcome", "ClauseOutcome", "Comparison", "combine", "compare",
           "evaluate", "evaluate_aggregate", "field_tests", "margin", "matches_nothing", "matching", "parse",
           "parse_aggregate", "workload_fields", "reduce", "row_value", "uncompared_note", "uncompared_reason", "uncompared_rows", "PEERS_KEY", "UNCOMPARED_KEY"]


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class ClauseOutcome:
    """One clause's result: ``value op threshold`` over ``n`` rows (value None: no rows).
    ``note``: why there is no value where it is not the want of rows (a peer not compared)."""

    text: str
    value: float | None
    op: str
    threshold: float
    passed: bool
    n: int
    note: str | None = None


@dataclass(frozen=True)
class BarOutcome:
    passed: bool
    clauses: tuple[ClauseOutcome, ...]


def _geomean(values: list[float]) -> float:
    bad = [v for v in values if not v > 0]
    if bad:
        # Speedups and throughputs are positive by construction; a zero is a harness bug.
        raise ValueError(f"geomean of non-positive values {bad[:3]}")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


_REDUCERS: dict[str, Callable[[list[float]], float]] = {
    "geomean": _geomean,
    "min": min,
    "max": max,
    "median": statistics.median,
    "mean": statistics.fmean,
}


def _matches(node: Node, row: dict) -> bool:
    if isinstance(node, And):
        return all(_matches(n, row) for n in node.operands)
    if isinstance(node, Or):
        return any(_matches(n, row) for n in node.operands)
    if isinstance(node, Not):
        return not _matches(node.operand, row)
    if not isinstance(node, FieldTest):
        raise TypeError(f"not a filter node: {node!r}")
    if node.field not in row:
        raise KeyError(f"row has no field '{node.field}': {sorted(row)}")
    actual = row[node.field]
    if node.op == "in":
        return actual in node.value
    if node.op == "not in":
        return actual not in node.value
    return COMPARE[node.op](actual, node.value)


def field_tests(node) -> list[FieldTest]:
    """Every filter test in a bar, an aggregate or a node (to check literals against a grid)."""
    if isinstance(node, Bar):
        return field_tests(node.root)
    if isinstance(node, FieldTest):
        return [node]
    if isinstance(node, Comparison):
        return field_tests(node.aggregate)
    if isinstance(node, Aggregate):
        return field_tests(node.where) if node.where is not None else []
    if isinstance(node, Not):
        return field_tests(node.operand)
    if isinstance(node, (And, Or)):
        return [t for n in node.operands for t in field_tests(n)]
    raise TypeError(f"not a bar node: {node!r}")


def matches_nothing(agg: Aggregate, rows: list[dict]) -> bool:
    """Whether ``agg`` filters out every row: over a line's registered (config, candidate)
    rows, such an aggregate is over nothing whatever the sweep measures (None; a count is
    always 0), so a clause on it can never be decided."""
    return agg.where is not None and not matching(agg, rows)


def matching(agg: Aggregate, rows: list[dict]) -> list[dict]:
    """The rows ``agg`` aggregates over before the correctness rule: those its filter selects."""
    return [r for r in rows if agg.where is None or _matches(agg.where, r)]


def reduce(func: str, values: list[float]) -> float:
    """Reducer ``func`` (geomean, min, max, median or mean) over a non-empty list of values."""
    return float(_REDUCERS[func](values))


def compare(op: str, value: float, threshold: float) -> bool:
    """``value op threshold`` with one of the bar's comparison operators."""
    return COMPARE[op](value, threshold)


def margin(value: float | None, op: str, threshold: float) -> tuple[float, float | None] | None:
    """How far ``value`` lies from ``threshold`` on the passing side (+) or not (−): (absolute,
    relative to the threshold; None for a zero threshold). None for ``==``/``!=`` and where
    there is no finite value: a margin exists only for an ordering."""
    if value is None or op not in (">=", ">", "<=", "<") or not math.isfinite(value):
        return None
    d = value - threshold if op in (">=", ">") else threshold - value
    return d, (d / abs(threshold) if threshold else None)


def combine(bar: Bar, truths: list[bool | None]) -> bool | None:
    """The bar's truth from its clauses' truths (in clause order; None: unknown), by the
    three-valued rule ``evaluate`` uses: what-if cases are judged exactly as a verdict is."""
    return _combine(bar.root, truths)


def evaluate_aggregate(agg: Aggregate, rows: list[dict]) -> float | None:
    """The aggregate's value over ``rows`` (None when no row qualifies), for reporting."""
    return _aggregate(agg, rows)[0]


def row_value(agg: Aggregate, row: dict) -> float | None:
    """The figure ``agg`` reduces at one bar row: its metric (a parameterised one computed with
    the argument the bar states: metrics.derived), or with a peer (``speedup vs "P"``) the
    row's entry under PEERS_KEY (verdict.bar_row_map: None where P has no correct result of the
    same measurement at the row's config; UNCOMPARED_KEY says why)."""
    if agg.peer is not None:
        v = (row.get(PEERS_KEY) or {}).get(agg.peer)
    elif agg.at is not None:  # tflops_at(F): computed from the row's figures (metrics.derived)
        v = derived(agg.metric, row, agg.at)
    else:
        v = row.get(agg.metric)
    return None if v is None else float(v)


def _selected(agg: Aggregate, rows: list[dict]) -> list[dict]:
    """The rows ``agg`` aggregates over: its filter's, among the integration rows for a step
    metric and the kernel rows for any other."""
    step = agg.metric in STEP_NAMES
    return matching(agg, [r for r in rows if bool(r.get(INTEGRATION_FLAG)) == step])


def _uncompared(agg: Aggregate, selected: list[dict]) -> list[dict]:
    """The correct rows among ``selected`` that a peer aggregate has no value at (none for others)."""
    if agg.peer is None:
        return []
    return [r for r in selected if bool(r["correct"]) and row_value(agg, r) is None]


def uncompared_rows(agg: Aggregate, rows: list[dict]) -> list[dict]:
    """The correct rows ``agg`` selects that it could not compare with its peer (each with
    why under UNCOMPARED_KEY); empty for an aggregate without a peer."""
    return _uncompared(agg, _selected(agg, rows))


def _aggregate(agg: Aggregate, rows: list[dict]) -> tuple[float | None, int]:
    """(value, rows aggregated); value is None when there is nothing to aggregate, or when a
    peer aggregate has a correct row it could not compare (the registered comparison was not
    made there: unknown, never a pass — ``count`` too), then with the number of correct rows."""
    selected = _selected(agg, rows)
    if agg.func == "pass_rate":
        n = len(selected)
        return (sum(bool(r["correct"]) for r in selected) / n if n else None), n
    if agg.metric is None:  # bare count: coverage, correct or not
        return float(len(selected)), len(selected)
    correct = [r for r in selected if bool(r["correct"])]
    if _uncompared(agg, selected):
        return None, len(correct)
    values = [v for v in (row_value(agg, r) for r in correct) if v is not None]
    if agg.func == "count":
        return float(len(values)), len(values)
    if not values:
        return None, 0
    return float(_REDUCERS[agg.func](values)), len(values)


def uncompared_reason(row: dict, peer: str) -> str:
    """Why bar row ``row`` has no speedup over ``peer`` (peers.py's reason; the peer has no
    outcome at all at its config where none is kept)."""
    return (row.get(UNCOMPARED_KEY) or {}).get(peer, (None, f"{peer} has no outcome there"))[1]


def uncompared_note(agg: Aggregate, rows: list[dict]) -> str | None:
    """Why a peer aggregate has no value though it has correct rows: at which of them the peer
    has no correct result of the same measurement, and why (None where it compared them all,
    and for any other aggregate)."""
    alone = uncompared_rows(agg, rows)
    if not alone:
        return None
    reasons = list(dict.fromkeys(uncompared_reason(r, agg.peer) for r in alone))
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return (f"{len(alone)} of its correct rows could not be compared with {agg.peer} ({shown}): the comparison the "
            f"bar registered was not made there, so the clause is unknown — no GO; a line that should decide "
            f"without those configs filters them out of the clause")


def _combine(node: Node, results: list[bool | None]) -> bool | None:
    """Kleene three-valued logic: None (no data) stays unknown through not/and/or."""
    if isinstance(node, Comparison):
        return results[node.index]
    if isinstance(node, And):
        vals = [_combine(n, results) for n in node.operands]
        return False if False in vals else (None if None in vals else True)
    if isinstance(node, Or):
        vals = [_combine(n, results) for n in node.operands]
        return True if True in vals else (None if None in vals else False)
    if isinstance(node, Not):
        val = _combine(node.operand, results)
        return None if val is None else not val
    raise TypeError(f"not a bar node: {node!r}")


def evaluate(bar: Bar, rows: list[dict]) -> BarOutcome:
    """Evaluate every clause over ``rows`` (one dict per config x candidate), then combine.

    A clause whose aggregate is None (no rows) is unknown, not false: ``not`` of an
    unknown is still unknown, and an unknown bar is no GO — it fails closed on data the
    sweep did not produce, however the clause is negated.
    """
    outcomes, truth = [], []
    for clause in bar.clauses():
        value, n = _aggregate(clause.aggregate, rows)
        known = None if value is None else COMPARE[clause.op](value, clause.threshold)
        truth.append(known)
        note = uncompared_note(clause.aggregate, rows) if value is None else None
        outcomes.append(ClauseOutcome(clause.text, value, clause.op, clause.threshold, bool(known), n, note))
    return BarOutcome(_combine(bar.root, truth) is True, tuple(outcomes))
