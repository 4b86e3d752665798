"""Can a bar decide? It is evaluated on what its aggregates can be over the registered grid.

A bar is fixed before any number exists, so a typo in it is fixed for the life of the line:
``pass_rate == 1.5`` never passes, ``count(speedup) >= 2`` on a one-pair grid neither, and
``A and B or C and D`` with an always-true ``D`` is GO whenever ``C`` is. This module finds
such bars from the bar alone, before the sweep.

Each clause compares one aggregate with a number. Over the registered (config, candidate)
pairs its filter selects, an aggregate ranges over what the metric's ``Bound`` at each pair
allows: a share of n pairs for ``pass_rate``, 0..n for ``count``, a time, ratio or rate
within the physical limits of the line's timing (a call lasts at least a timer tick and at
most until its watchdog) — and, where harness/governance/reductio.py narrows the bounds, no
more than a device's measured ceilings allow. A threshold beyond what a metric can
physically take makes its clause always true or always false. An aggregate is taken over
every pair its filter selects (a bar must not rely on a pair failing its gate to be met).
Clauses on the same aggregate (one metric, one reducer, the same pairs; any reducer of a
single pair is its value) are one variable; different aggregates are treated as independent. The bar is then evaluated in
every case — each variable in each cell its clauses' thresholds cut its range into — by the
verdict's own three-valued rule, and refused when it is

- NO-GO in every case (shown: every metric at its best),
- GO in every case (shown: every metric at its worst), or
- has a clause that can never change the outcome: one that is always true or always false
  over its range, or whose flip alone, from any case, leaves the outcome as it was.

Pure functions over a parsed bar; nothing here reads files or prints.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from harness.errors import plural
from harness.registration import bar as barlang
from harness.vocab.metrics import BY_NAME

# Cases evaluated at most: a bar of 16 independent two-sided clauses. Real bars have a
# handful; one beyond this is refused (split it) rather than passed unchecked.
MAX_CASES = 1 << 16
# Values listed when a discrete range (pass_rate, count) is shown; more are elided.
SHOWN_VALUES = 6
# Pairs named when an aggregate's bound comes from several of them.
SHOWN_PAIRS = 2


@dataclass(frozen=True)
class Bound:
    """What one metric can be at one (config, candidate): from ``lo`` to ``hi`` (each end
    included or not), why each finite end is there, or ``absent``: why it has no value.

    An end that is a physical *limit* (``lo_limit``, ``hi_limit``: how far a timed call can
    reach at all, far past what any kernel gives) bounds the range like any end — a clause
    whose threshold lies beyond it is always true or always false — but is no value to try
    or to show as a metric's best or worst."""

    lo: float = 0.0
    hi: float = math.inf
    lo_closed: bool = False
    hi_closed: bool = False
    why_lo: str | None = None
    why_hi: str | None = None
    absent: str | None = None
    lo_limit: bool = False
    hi_limit: bool = False

    def at_most(self, hi: float, why: str, *, limit: bool = False) -> "Bound":
        """This bound with ``hi`` (included) as its upper end where it is lower."""
        if hi < self.hi or (hi == self.hi and not self.hi_closed):
            return replace(self, hi=hi, hi_closed=True, why_hi=why, hi_limit=limit)
        return self

    def at_least(self, lo: float, why: str, *, limit: bool = False) -> "Bound":
        """This bound with ``lo`` (included) as its lower end where it is higher."""
        if lo > self.lo:
            return replace(self, lo=lo, lo_closed=True, why_lo=why, lo_limit=limit)
        return self


# (metric, config, candidate, peer, argument) -> Bound; ``peer``: the other candidate of a
# ``speedup vs "P"`` aggregate (a ratio of two of the line's calls), else None; ``argument``: the
# metric's argument (tflops_at(F)'s F), else None.
Bounds = Callable[[str, object, str, "str | None", "float | None"], Bound]


@dataclass(frozen=True)
class Finding:
    """Why a bar cannot decide: ``kind`` (never_go, always_go, constant, idle) and one sentence."""

    kind: str
    text: str


@dataclass(frozen=True)
class _Range:
    """What one aggregate can be: an interval, or a finite set of ``points``."""

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool
    points: tuple[float, ...] | None
    why: str
    absent: str | None = None
    lo_limit: bool = False  # the end is a physical limit (Bound): no value to try or show
    hi_limit: bool = False

    def contains(self, x: float) -> bool:
        if self.points is not None:
            return x in self.points
        return ((self.lo < x or (self.lo_closed and x == self.lo))
                and (x < self.hi or (self.hi_closed and x == self.hi)))

    def shown(self) -> str:
        if self.absent:
            return f"has no value ({self.absent})"
        if self.points is not None:
            pts = [_num(p) for p in self.points]
            listed = ", ".join(pts if len(pts) <= SHOWN_VALUES else [*pts[:3], "…", pts[-1]])
            return f"is one of {listed} ({self.why})"
        ends = f"{'[' if self.lo_closed else '('}{_num(self.lo)}, {_num(self.hi)}{']' if self.hi_closed else ')'}"
        return f"is in {ends}" + (f" ({self.why})" if self.why else "")


@dataclass
class _Var:
    """One aggregate of the bar, the clauses on it, and its cells (truths -> a value giving them)."""

    name: str
    range: _Range
    clauses: list  # bar.Comparison
    better_high: bool
    cells: dict  # tuple of clause truths -> a value giving them (None: no value)
    points: list  # every value tried, in order


def _num(x: float) -> str:
    return "∞" if x == math.inf else f"{x:.4g}"


def aggregate_text(clause) -> str:
    """The aggregate part of a clause's source text (``min(speedup where n >= 2) >= 1`` ->
    ``min(speedup where n >= 2)``): the clause's own operator is its last one."""
    return clause.text.rsplit(clause.op, 1)[0].strip()


def _reduce(func: str, values: list[float]) -> float:
    """A reducer over bounds, which may be 0 or infinite (the bar's geomean refuses those)."""
    if func == "geomean" and any(v <= 0 for v in values):
        return 0.0
    if func in ("geomean", "mean") and any(v == math.inf for v in values):
        return math.inf
    return barlang.reduce(func, values)


def _bound_why(func: str, pairs: list, bounds: list[Bound], end: str) -> str:
    """Where an aggregate's ``end`` (lo or hi) comes from: the pair that sets it for min and
    max, else the first pairs (a mean or median of per-pair limits)."""
    vals = [getattr(b, end) for b in bounds]
    whys = [(p, getattr(b, f"why_{end}")) for p, b in zip(pairs, bounds)]
    if func in ("min", "max"):
        target = (min if func == "min" else max)(vals)
        whys = [w for w, v in zip(whys, vals) if v == target][:1]
    named = [(p, w) for p, w in whys if w]
    shown = "; ".join(f"at {cfg.key()} {cand}: {w}" for (cfg, cand), w in named[:SHOWN_PAIRS])
    more = len(named) - SHOWN_PAIRS
    return shown + (f"; and {plural(more, 'more pair')}" if more > 0 else "")


def _peer_bound(candidate: str, peer: str, ratio: Bound) -> Bound:
    """What a speedup over a peer candidate can be: ``ratio``, what the bounds allow a ratio of
    two of the line's calls' medians (a device's baseline times do not bound it), exactly 1 for
    a candidate against itself."""
    if candidate == peer:
        why = f"{candidate} against itself"
        return Bound(1.0, 1.0, True, True, why, why)
    return ratio


def _limit_end(func: str, bounds: list[Bound], end: str) -> bool:
    """Whether an aggregate's ``end`` is a physical limit: the end of the pair that sets it
    for min and max, any pair's for a reducer of all their ends."""
    vals = [getattr(b, end) for b in bounds]
    flags = [getattr(b, f"{end}_limit") for b in bounds]
    if func in ("min", "max"):
        target = (min if func == "min" else max)(vals)
        return next(f for f, v in zip(flags, vals) if v == target)
    return any(flags)


def _range(agg, pairs: list, bounds: Bounds) -> _Range:
    """What ``agg`` can be over the registered pairs it selects (``pairs``)."""
    n = len(pairs)
    if agg.func == "pass_rate":
        return _Range(0.0, 1.0, True, True, tuple(k / n for k in range(n + 1)),
                      f"a share of {plural(n, 'registered pair')}")
    if agg.metric is None:  # bare count: coverage
        return _Range(0.0, n, True, True, tuple(float(k) for k in range(n + 1)),
                      f"counts at most {plural(n, 'registered pair')}")
    each = [_peer_bound(cand, agg.peer, bounds(agg.metric, cfg, cand, agg.peer, agg.at)) if agg.peer is not None
            else bounds(agg.metric, cfg, cand, None, agg.at) for cfg, cand in pairs]
    known = [(p, b) for p, b in zip(pairs, each) if b.absent is None]
    if agg.func == "count":
        k = len(known)
        why = f"counts at most {plural(k, 'registered pair')} with a {agg.metric}"
        return _Range(0.0, k, True, True, tuple(float(i) for i in range(k + 1)), why)
    if not known:
        return _Range(0.0, 0.0, False, False, None, "", absent=each[0].absent)
    kp, kb = [p for p, _ in known], [b for _, b in known]
    lo = _reduce(agg.func, [b.lo for b in kb])
    hi = _reduce(agg.func, [b.hi for b in kb])
    # min and max take their end from one pair, whose reason names the figure; any other
    # reducer's end is the reduction of the pairs' ends.
    named = agg.func in ("min", "max")
    parts = []
    if lo > 0 and any(b.why_lo for b in kb):
        parts.append(("" if named else f"at least {_num(lo)}, its pairs' ends: ") + _bound_why(agg.func, kp, kb, "lo"))
    if hi < math.inf and any(b.why_hi for b in kb):
        parts.append(("" if named else f"at most {_num(hi)}, its pairs' ends: ") + _bound_why(agg.func, kp, kb, "hi"))
    return _Range(lo, hi, all(b.lo_closed for b in kb), all(b.hi_closed for b in kb), None, "; ".join(parts),
                  lo_limit=_limit_end(agg.func, kb, "lo"), hi_limit=_limit_end(agg.func, kb, "hi"))


def _points(rng: _Range, thresholds: list[float]) -> list[float]:
    """Values of ``rng`` that meet every cell its thresholds cut it into (one or more each).
    A threshold beyond the range cuts nothing; a limit end (``_Range.hi_limit``) is no value
    tried: its cell gets one near the last threshold, as an unbounded one does."""
    if rng.points is not None:
        pts = list(rng.points)
        out = {pts[0], pts[-1]}
        for t in thresholds:
            i = bisect.bisect_left(pts, t)
            out.update(pts[j] for j in (i - 1, i, i + 1) if 0 <= j < len(pts))
        return sorted(out)
    ends = ({rng.lo} if not rng.lo_limit else set()) | ({rng.hi} if rng.hi < math.inf and not rng.hi_limit else set())
    cuts = sorted(ends | {t for t in thresholds if rng.lo <= t <= rng.hi})
    out = [c for c in cuts if rng.contains(c)]
    out += [(a + b) / 2 for a, b in zip(cuts, cuts[1:]) if a < b]
    if rng.hi == math.inf or rng.hi_limit:  # a value past every threshold
        top = cuts[-1] if cuts else rng.lo
        past = top + max(1.0, abs(top))
        out.append(past if past < rng.hi else (top + rng.hi) / 2)
    if not rng.lo_closed or rng.lo_limit:  # and one nearer the lower end than any other
        out.append(rng.lo + (min(out) - rng.lo) / 2)
    return sorted(set(out))


def _variables(bar, pairs: Sequence[tuple], bounds: Bounds) -> list[_Var]:
    rows = [{**cfg.as_dict(), "candidate": cand, "_pair": i} for i, (cfg, cand) in enumerate(pairs)]
    by_key: dict = {}
    for clause in bar.clauses():
        agg = clause.aggregate
        chosen = tuple(r["_pair"] for r in barlang.matching(agg, rows))
        single = agg.func not in ("count", "pass_rate") and len(chosen) == 1
        key = ("value" if single else agg.func, agg.metric, agg.at, agg.peer, chosen)
        if key not in by_key:
            sel = [pairs[i] for i in chosen]
            higher = True if agg.metric is None else BY_NAME[agg.metric].higher_is_better
            by_key[key] = _Var(aggregate_text(clause), _range(agg, sel, bounds), [], higher is not False, {}, [])
        by_key[key].clauses.append(clause)
    out = list(by_key.values())
    for var in out:
        if var.range.absent:
            var.cells[tuple(None for _ in var.clauses)] = None
            continue
        var.points = _points(var.range, [c.threshold for c in var.clauses])
        for x in var.points:
            var.cells.setdefault(tuple(barlang.compare(c.op, x, c.threshold) for c in var.clauses), x)
    return out


def _case_text(variables: list[_Var], values: Sequence) -> str:
    return ", ".join(f"{v.name} = {'no value' if x is None else _num(x)}" for v, x in zip(variables, values))


def _extreme(var: _Var, best: bool) -> float | None:
    """The best (or worst) value ``var`` can take (None: it has no value)."""
    if var.range.absent:
        return None
    return (max if best == var.better_high else min)(var.points)


def decide(bar, pairs: Sequence[tuple], bounds: Bounds, where: str = "") -> Finding | None:
    """Why ``bar`` cannot decide over ``pairs`` (the registered (config, candidate) pairs) when
    each metric is within ``bounds``, or None. ``where`` qualifies the sentences (" on <device>")."""
    variables = _variables(bar, pairs, bounds)
    index = {c.index: (vi, ci) for vi, v in enumerate(variables) for ci, c in enumerate(v.clauses)}
    clauses = bar.clauses()
    n_cases = math.prod(len(v.cells) for v in variables)
    if n_cases > MAX_CASES:
        return Finding("too_many", f"the bar has {n_cases} cases to check{where} (more than {MAX_CASES}): "
                                   f"split it into fewer independent clauses")

    def truths(case: tuple) -> list:
        return [case[index[c.index][0]][index[c.index][1]] for c in clauses]

    def outcome(t: list) -> bool:
        return barlang.combine(bar, t) is True

    def word(go: bool) -> str:
        return "GO" if go else "NO-GO"

    def constant(c) -> str | None:
        vi, ci = index[c.index]
        seen = {cell[ci] for cell in variables[vi].cells}
        if len(seen) > 1:
            return None
        (only,) = seen
        what = "has no value" if only is None else f"is always {'true' if only else 'false'}"
        return f"`{' '.join(c.text.split())}` {what}: {variables[vi].name} {variables[vi].range.shown()}"

    cases = list(itertools.product(*(list(v.cells) for v in variables)))
    results = [outcome(truths(case)) for case in cases]
    consts = [s for s in (constant(c) for c in clauses) if s]
    because = f" — {consts[0]}" if consts else ""
    if not any(results):
        best = [_extreme(v, True) for v in variables]
        return Finding("never_go", f"the bar can never be GO{where}: even with every metric at its best "
                                   f"({_case_text(variables, best)}) it is NO-GO{because}")
    if all(results):
        worst = [_extreme(v, False) for v in variables]
        return Finding("always_go", f"the bar is GO whatever the sweep measures{where}: even with every metric "
                                    f"at its worst ({_case_text(variables, worst)}) it is GO{because}")
    if consts:
        return Finding("constant", f"a clause can never change the outcome{where}: {consts[0]}")
    # The example shown for an idle clause: a GO case (there is one: the bar is not NO-GO in all).
    case, go = next((case, go) for case, go in zip(cases, results) if go)
    for c in clauses:
        at = c.index
        for other, other_go in zip(cases, results):
            t = truths(other)
            if outcome([*t[:at], not t[at], *t[at + 1:]]) != other_go:
                break
        else:
            was = truths(case)[at]
            example = _case_text(variables, [v.cells[x] for v, x in zip(variables, case)])
            return Finding("idle", f"clause `{' '.join(c.text.split())}` can never change the outcome{where}: "
                                   f"flipped alone it leaves the bar as it was in every case (e.g. {example}: "
                                   f"{word(go)} with it {str(was).lower()}, {word(go)} with it {str(not was).lower()}) "
                                   f"— drop it, or fix the and/or")
    return None
