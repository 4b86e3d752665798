"""`bench site`: one static site over every ledger — the data behind its pages.

asv users expect ``asv publish``'s site: an index, a history per benchmark, regressions
marked. Here the index is every line (``status.statuses``: state, verdict, amendments, commit,
device) with its headline figure; each line's page is its report (``analysis/report.py``); and
each amendment chain (a line, then the lines amending it: ``history.chains``) gets a page with
the headline figure per line in order, each compared with the line it amends.

The headline figure is the registration's ``primary`` aggregate: the verdict's value where the
line is closed, else the bar evaluated on the outcomes so far (as the report does). Its
interval is the same aggregate over each row's lower and upper bound (the reducers are
monotone, so it holds the figure): a speedup's bound is the row's bootstrap 95% CI; a rate's
(TFLOP/s, GB/s, their fractions, ms) is the order-statistic 95% CI of the median of the
samples the rate was computed from. The rule that marks a regression:

    a line's figure is a REGRESSION of the line it amends when it is worse (by the metric's
    direction) by more than ``REGRESSION_MIN`` of the earlier figure and the two intervals do
    not overlap; IMPROVED the other way round; otherwise WITHIN NOISE. Where an interval is not
    known, the threshold alone decides. Lines measured on another device are still marked, with
    that difference named beside the mark.

Only like is compared with like (issue 51): two primaries of different metrics, or of one rate
metric timed by different protocols (the interleaved rounds against the sustained phase), are
NOT COMPARABLE, both figures named. Where the rows of both lines hold the candidate's
interleaved medians, a rate is restated from them (``Headline.same``: the rate × the row's
``ms`` over its ``interleaved_ms``, the aggregate taken again) and the two lines are compared
on that same protocol instead, the step saying so (``Step.basis``).

Analysis only: frozen data, no printing (render/site.py renders it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.vocab import metrics as metric_table
from harness.vocab.outcomes import RESULT
from harness.jsonsafe import number
from harness.ledger.payloads import Metrics, Sustained
from harness.ledger.line_payloads import MeasuredAt, RegistrationSummary
from harness.measurement.timing.criteria import row_statistic
from harness.reporting.analysis.compare import MIN_EFFECT
from harness.reporting.analysis.status_view import LineStatus
from harness.registration.bar import PEERS_KEY
from harness.registration.schema_keys import DEFAULT_WORKLOAD
from harness.governance.peers import peer_samples
from harness.measurement.stats import median_ci, paired_ratio, speedup_ci
from harness.reporting.analysis.lines import arm_samples, device_label, line_paths, split_spec
from harness.registration import bar as barlang
from harness.governance.verdict import bar_row_map
from harness.governance.nextrun import bar_between_run
from harness.reporting.analysis.history import chains, index, line_history
from harness.reporting.analysis.report import report_data
from harness.reporting.analysis.status import checked_line, gone_status

# A later figure must be worse than the earlier by more than this fraction of it (as well as
# outside its interval) to be a regression: `bench compare`'s smallest change it names.
REGRESSION_MIN = MIN_EFFECT
REGRESSION, IMPROVED, WITHIN_NOISE, FIRST, NOT_COMPARED = "REGRESSION", "IMPROVED", "WITHIN NOISE", "FIRST", \
    "NOT COMPARED"
# Two primaries of another metric, or of another timing protocol with no same-protocol figure.
NOT_COMPARABLE = "NOT COMPARABLE"
# The marks of a step that compared two figures (the only steps a chain plot joins).
COMPARED = (REGRESSION, IMPROVED, WITHIN_NOISE)
# The protocol a rate can be restated in from any result row: every row has interleaved rounds.
SAME_BASIS = metric_table.INTERLEAVED
RULE = (f"A line's headline figure is marked {REGRESSION} against the line it amends when it is worse (by the "
        f"metric's direction) by more than {REGRESSION_MIN:.0%} and the two 95% intervals do not overlap; "
        f"{IMPROVED} the other way round; otherwise {WITHIN_NOISE}. Where an interval is not known, the "
        f"{REGRESSION_MIN:.0%} threshold alone decides. Figures of another metric or another timing protocol are "
        f"{NOT_COMPARABLE}; where both lines' rows hold the {SAME_BASIS} medians, the rate restated from them is "
        f"compared instead, and the step says so.")


@dataclass(frozen=True)
class Headline:
    """A line's primary figure, where and when it was measured."""

    line: str
    expr: str | None  # the registration's primary aggregate (None: it registers none)
    metric: str | None
    value: float | None  # None: no outcome it aggregates yet
    low: float | None  # the interval (None: not known for this metric or these rows)
    high: float | None
    decided: bool  # the verdict's value (True) or the bar on the outcomes so far
    commit: str | None  # the commit its rows were measured at (the newest of them)
    measured: str | None  # the time of the newest row it comes from (ISO 8601, UTC)
    device: str | None
    protocols: tuple[str, ...] = ()  # the timing protocols of the rows it comes from
    # The figure restated under SAME_BASIS (value, low, high) where every row it comes from
    # holds that protocol's medians (None: not a restatable rate, or a row lacks them).
    same: tuple[float, float | None, float | None] | None = None

    @property
    def higher_is_better(self) -> bool | None:
        m = metric_table.BY_NAME.get(self.metric or "")
        return m.higher_is_better if m is not None else None

    @property
    def unit(self) -> str:
        m = metric_table.BY_NAME.get(self.metric or "")
        return m.unit if m is not None else ""


@dataclass(frozen=True)
class Step:
    """One line of a chain, compared with the line it amends."""

    depth: int  # 0: the chain's first line
    headline: Headline
    parent: str | None  # the line it amends (None for the first)
    mark: str  # FIRST, REGRESSION, IMPROVED, WITHIN NOISE or NOT COMPARED
    change: float | None  # relative change of the figure from the parent's, > 0 is better
    why: str  # the mark's reason, as a sentence
    caveats: tuple[str, ...] = ()  # what differs besides the kernel (device, protocol)
    basis: str | None = None  # the protocol both figures were restated in (None: the primaries as they are)


@dataclass(frozen=True)
class Chain:
    """An amendment chain (a tree when a line is amended twice), depth-first."""

    root: str
    steps: tuple[Step, ...]

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(s.headline.line for s in self.steps)

    @property
    def text(self) -> str:
        """``a → b → c`` for a sequence; a tree names each amending line's parent."""
        steps = self.steps
        if all(s.parent == p.headline.line for p, s in zip(steps, steps[1:])):
            return " → ".join(self.lines)
        return ", ".join([self.root] + [f"{s.headline.line} (amends {s.parent})" for s in steps[1:]])

    @property
    def regressions(self) -> int:
        return sum(s.mark == REGRESSION for s in self.steps)


@dataclass(frozen=True)
class Entry:
    """One row of the index."""

    status: LineStatus
    headline: Headline | None  # None: no readable ledger (GONE, BROKEN)
    amends: str | None
    amended_by: tuple[str, ...]
    chain: str | None  # the root of its chain page (None: no line amends it or is amended by it)
    page: bool  # whether it has a page (its ledger is here and verifies)
    workload: str | None = None  # what its kernels compute (None: no readable ledger)


@dataclass(frozen=True)
class Site:
    entries: tuple[Entry, ...]
    chains: tuple[Chain, ...]
    rule: str = RULE

    def by_workload(self) -> list[tuple[str | None, list[Entry]]]:
        """The entries grouped by workload (names in order, lines without a readable ledger last),
        each group in line order: the index's sections."""
        names = sorted({e.workload for e in self.entries}, key=lambda w: (w is None, w or ""))
        return [(w, [e for e in self.entries if e.workload == w]) for w in names]


def _with_value(row: dict, agg, value: float) -> dict:
    """``row`` with the figure ``agg`` reads set to ``value`` (its metric, or its peer's entry)."""
    if agg.peer is not None:
        return {**row, PEERS_KEY: {**(row.get(PEERS_KEY) or {}), agg.peer: value}}
    return {**row, agg.metric: value}


def _bounds(row, metric: str, peer: str | None = None) -> tuple[float, float] | None:
    """The row's 95% interval of ``metric`` (None: not known for it); ``peer``: of its speedup
    over that candidate (the speedup's own kind of CI: the paired bootstrap, or under the
    statistic stop the stop's interval)."""
    if peer is not None:
        other, cand = peer_samples(row, peer)
        if len(other) < 2 or len(cand) < 2:
            return None
        stat = row_statistic(row.policy, row.timing)  # the statistic stop's: its interval, as the speedup's
        lo, hi = speedup_ci(other, cand) if stat is None else paired_ratio(other[:stat[0]], cand[:stat[0]], stat[1])[1:]
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
    m = row.metrics or {}
    value = number(m.get(metric))
    if value is None:
        return None
    if metric == "speedup":
        held = Metrics.from_row(m)
        lo, hi = number(held.speedup_ci_low), number(held.speedup_ci_high)
        return (lo, hi) if lo is not None and hi is not None else None
    spec = metric_table.BY_NAME.get(metric)
    if spec is None or not spec.rate:
        return None
    # A rate is work over the median time of its protocol's samples: it scales with that median.
    proto = metric_table.rate_protocol(row)
    samples = (arm_samples(row, "candidate") if proto == metric_table.INTERLEAVED
               else [float(x) for x in Sustained.from_row(row.sustained or {}).samples_ms or []])
    if not samples:
        return None
    med = statistics.median(samples)
    lo_ms, hi_ms = median_ci(samples)
    if not (med > 0 and lo_ms > 0 and hi_ms > 0):  # NaN: too few samples for a 95% CI
        return None
    if spec.higher_is_better is False:  # ms itself
        return value * lo_ms / med, value * hi_ms / med
    return value * med / hi_ms, value * med / lo_ms


def restatable(metric: str | None) -> bool:
    """Whether ``metric``'s figure can be restated under SAME_BASIS from a row's own medians: a
    rate (or ``ms``) that scales with the candidate's median time and takes no parameter."""
    spec = metric_table.BY_NAME.get(metric or "")
    return spec is not None and spec.rate and spec.param is None and spec.protocol == metric_table.RATES \
        and spec.name != "cycles"


def _restated(row, metric: str) -> tuple[float, float | None, float | None] | None:
    """Result ``row``'s ``metric`` restated under SAME_BASIS (value, low, high: its 95% interval
    from those samples where known); None where the row lacks that protocol's median."""

    m = row.metrics or {}
    value = number(m.get(metric))
    if value is None:
        return None
    if metric_table.rate_protocol(row) == SAME_BASIS:
        b = _bounds(row, metric)
        return (value, *b) if b is not None else (value, None, None)
    held = Metrics.from_row(m)
    ms, base_ms = number(held.ms), number(held.interleaved_ms)
    if ms is None or base_ms is None or not (ms > 0 and base_ms > 0):
        return None
    lower_better = metric_table.BY_NAME[metric].higher_is_better is False
    same = value * base_ms / ms if lower_better else value * ms / base_ms
    samples = arm_samples(row, "candidate")
    if len(samples) < 2:
        return same, None, None
    med = statistics.median(samples)
    lo_ms, hi_ms = median_ci(samples)
    if not (med > 0 and lo_ms > 0 and hi_ms > 0):
        return same, None, None
    if lower_better:
        return same, same * lo_ms / med, same * hi_ms / med
    return same, same * med / hi_ms, same * med / lo_ms


def headline(view) -> Headline:
    """``view``'s (lines.LineView) primary figure, with its interval, commit, time and device."""
    reg = view.plan
    verdict = view.verdict
    expr = (verdict.primary if verdict is not None and verdict.primary else reg.primary) or None
    outcomes = view.outcomes()
    if verdict is not None and verdict.decided_on:
        decided = set(verdict.decided_on)
        outcomes = {(r.config_key, r.candidate): r for r in view.rows if r.seq in decided}
    noisy = bool(reg.include_noisy)
    if not expr:
        return Headline(view.line, None, None, None, None, None, verdict is not None, None, None, None)
    agg = barlang.parse_aggregate(expr)
    value = number(verdict.primary_value) if verdict is not None else None
    # The bar's rows (as the verdict sees them), and the same rows at each one's lower and
    # upper bound of the metric.
    plain, lows, highs, used, known = [], [], [], [], True
    same_rows, same_lows, same_highs = [], [], []
    same_ok = agg.peer is None and restatable(agg.metric)

    next_run = bar_between_run(None, expr, view.rows, outcomes, verdict.next_run if verdict is not None else None)
    rows, _ = bar_row_map(outcomes, include_noisy=noisy, next_run=next_run)
    for key, row in rows.items():
        r = outcomes[key]
        plain.append(row)
        lows.append(row)
        highs.append(row)
        same_rows.append(row)
        same_lows.append(row)
        same_highs.append(row)
        if r.kind != RESULT or not row.get("correct") or agg.metric is None or barlang.row_value(agg, row) is None \
                or not barlang.matching(agg, [row]):
            continue
        used.append(r)
        restated = _restated(r, agg.metric) if same_ok else None
        if restated is None:
            same_ok = False
        else:
            v, lo, hi = restated
            same_rows[-1] = _with_value(row, agg, v)
            same_lows[-1] = _with_value(row, agg, v if lo is None else lo)
            same_highs[-1] = _with_value(row, agg, v if hi is None else hi)
            if lo is None:
                same_lows[-1] = same_highs[-1] = None
        b = _bounds(r, agg.metric, agg.peer)
        if b is None:
            known = False
            continue
        lows[-1], highs[-1] = _with_value(row, agg, b[0]), _with_value(row, agg, b[1])
    if verdict is None:
        value = barlang.evaluate_aggregate(agg, plain)
    low = high = None
    if value is not None and used and known and agg.func in ("min", "max", "median", "mean", "geomean"):
        a, b = barlang.evaluate_aggregate(agg, lows), barlang.evaluate_aggregate(agg, highs)
        if a is not None and b is not None:  # the verdict's own value inside, whatever rows it saw
            low, high = min(a, b, value), max(a, b, value)
    newest = max(used, key=lambda r: (str(r.time or ""), r.seq), default=None)
    held = (verdict.measured_at or {}) if verdict is not None else {}
    at = MeasuredAt.from_row(held)
    commit = at.commit or (newest.commit if newest is not None else None)
    device = (at.gpu or at.device) if held else (device_label(newest) if newest is not None else None)
    protocols = tuple(sorted({metric_table.protocol(agg.metric, r) for r in used
                              if agg.metric in metric_table.BY_NAME}))
    same = None
    if same_ok and used:
        sv = barlang.evaluate_aggregate(agg, same_rows)
        if sv is not None:
            slo = shi = None
            if None not in same_lows and agg.func in ("min", "max", "median", "mean", "geomean"):
                a, b = barlang.evaluate_aggregate(agg, same_lows), barlang.evaluate_aggregate(agg, same_highs)
                if a is not None and b is not None:
                    slo, shi = min(a, b, sv), max(a, b, sv)
            same = (sv, slo, shi)
    return Headline(view.line, " ".join(expr.split()), agg.metric, value, low, high, verdict is not None, commit,
                    str(newest.time) if newest is not None and newest.time else None, device, protocols, same)


def figure(h: Headline, value: float | None, protocol: str | None = None) -> str:
    """``flash-h200 (interleaved): 561.0 TFLOP/s``: a line's figure in its metric's format."""
    spec = metric_table.BY_NAME.get(h.metric or "")
    fmt = ".4f" if h.metric == "speedup" else (spec.fmt if spec is not None else ".4g")
    shown = "—" if value is None else format(value, "#.4g" if fmt == ".4g" else fmt)  # 561.0, not 561
    unit = "" if h.unit in ("", "fraction") else (h.unit if h.unit == "×" else f" {h.unit}")
    how = protocol or (" and ".join(h.protocols) if h.protocols else None)
    return f"{h.line}{f' ({how})' if how else ''}: {shown}{unit}"


def _judge(earlier_line: str, change: float, intervals: bool, apart: bool) -> tuple[str, str]:
    """(mark, why) of a relative change (> 0 better) by the module's rule."""
    pct = f"{abs(change):.1%}"
    if change < -REGRESSION_MIN and apart:
        return REGRESSION, f"{pct} worse than {earlier_line}" + (
            ", outside both intervals" if intervals else " (no interval: the threshold alone)")
    if change > REGRESSION_MIN and apart:
        return IMPROVED, f"{pct} better than {earlier_line}" + (
            ", outside both intervals" if intervals else " (no interval: the threshold alone)")
    return WITHIN_NOISE, (f"{pct} {'worse' if change < 0 else 'better'} than {earlier_line}: "
                          + (f"within {REGRESSION_MIN:.0%}" if abs(change) <= REGRESSION_MIN else
                             "the intervals overlap"))


def compare_step(earlier: Headline, later: Headline) -> tuple[str, float | None, str, tuple[str, ...], str | None]:
    """(mark, relative change (> 0 better), why, caveats, basis) of ``later`` against the line it
    amends; ``basis``: the protocol both figures were restated in to compare them (None: the
    primaries as they are, or no comparison)."""
    caveats = []
    if earlier.device and later.device and earlier.device != later.device:
        caveats.append(f"measured on {later.device}, {earlier.line} on {earlier.device}")
    caveats = tuple(caveats)
    if later.expr is None or earlier.expr is None:
        return NOT_COMPARED, None, "no primary figure registered", caveats, None
    if later.value is not None and earlier.value is not None and later.metric != earlier.metric:
        return NOT_COMPARABLE, None, (f"not comparable: metric changed ({figure(earlier, earlier.value)}; "
                                      f"{figure(later, later.value)})"), caveats, None
    if later.expr != earlier.expr:
        return NOT_COMPARED, None, f"its primary differs from {earlier.line}'s: not the same figure", caveats, None
    if later.value is None or earlier.value is None:
        return (NOT_COMPARED, None, "no value yet" if later.value is None else f"{earlier.line} has no value",
                caveats, None)
    better = later.higher_is_better
    if better is None:
        return NOT_COMPARED, None, f"{later.metric} has no better direction", caveats, None
    e, l, basis, prefix = (earlier.value, earlier.low, earlier.high), (later.value, later.low, later.high), None, ""
    if earlier.protocols and later.protocols and earlier.protocols != later.protocols:
        changed = (f"protocol changed ({figure(earlier, earlier.value)}; {figure(later, later.value)})")
        if earlier.same is None or later.same is None:
            return NOT_COMPARABLE, None, f"not comparable: {changed}", caveats, None
        e, l, basis = earlier.same, later.same, SAME_BASIS
        prefix = (f"same protocol ({SAME_BASIS} medians of both lines): {figure(earlier, e[0], basis)} against "
                  f"{figure(later, l[0], basis)} — ")
        caveats += (f"the primaries are not comparable: {changed}",)
    if e[0] == 0:
        return NOT_COMPARED, None, f"{earlier.line}'s figure is 0: no relative change", caveats, basis
    sign = 1 if better else -1
    change = sign * (l[0] - e[0]) / abs(e[0])
    intervals = None not in (*e, *l)
    apart = not intervals or l[2] < e[1] or l[1] > e[2]
    mark, why = _judge(earlier.line, change, intervals, apart)
    return mark, change, prefix + why, caveats, basis


def chain(tree: list[tuple[int, str]], heads: dict[str, Headline], amends: dict[str, str | None]) -> Chain:
    """A chain's steps from ``history.chains``' tree, each compared with the line it amends."""
    steps = []
    for depth, line in tree:
        h = heads.get(line) or Headline(line, None, None, None, None, None, False, None, None, None)
        parent = amends.get(line) if depth else None
        if parent is None or parent not in heads:
            why = "the chain's first line" if not depth else f"{parent}'s ledger is not here"
            steps.append(Step(depth, h, parent, FIRST if not depth else NOT_COMPARED, None, why))
            continue
        mark, change, why, caveats, basis = compare_step(heads[parent], h)
        steps.append(Step(depth, h, parent, mark, change, why, caveats, basis))
    return Chain(tree[0][1], tuple(steps))


def _workload(view) -> str | None:
    """The workload a line's registration names (none named: attention), None without a view."""
    if view is None:
        return None
    return RegistrationSummary.from_row(view.registration).workload or DEFAULT_WORKLOAD


def site_data(root: Path, only: list[str] | None = None) -> tuple[Site, dict]:
    """The site's data, and each line page's (line → (lines.LineView, report_data with its
    history)): the report, as `bench report` builds it.

    ``only``: the named lines and every line of their amendment chains (a chain is always
    whole); a name with no ledger here is refused before anything is read further.
    """
    root = Path(root)
    idx = index(root)
    known = set(idx.lines())
    if not known:
        raise UserError(f"no lines under {root / 'ledger'}: register one (bench register registrations/<line>.toml)")
    trees = chains(idx)
    wanted = None
    if only:
        pinned = [s for s in only if "@" in s]
        if pinned:
            raise UserError(f"bench site takes line names, not LINE@COMMIT ({', '.join(pinned)}): a line's page is "
                            f"its whole ledger (bench report {pinned[0]} reports one commit's rows)")
        names = [split_spec(s)[0] for s in only]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UserError(f"no line named {', '.join(repr(n) for n in unknown)} (lines: {', '.join(sorted(known))}): "
                            f"name lines from `bench status`, or none for every line")
        wanted = {line for tree in trees if any(line in names for _, line in tree) for _, line in tree}
    found, views = [], {}
    for path in line_paths(root):
        if wanted is None or path.stem in wanted:
            status, view = checked_line(path, idx)  # a ledger failing verification: BROKEN, no page
            found.append(status)
            if view is not None:
                views[path.stem] = view
    found += [gone_status(idx, line) for line in idx.gone if wanted is None or line in wanted]
    heads = {line: headline(v) for line, v in views.items()}
    amends = {line: idx.amends(line) for line in known}
    chain_list = tuple(chain(tree, heads, amends) for tree in trees if len(tree) > 1
                       and (wanted is None or tree[0][1] in wanted))
    root_of = {line: c.root for c in chain_list for line in c.lines}
    entries = tuple(Entry(s, heads.get(s.line), amends.get(s.line), idx.amended_by(s.line), root_of.get(s.line),
                          s.line in views, _workload(views.get(s.line))) for s in sorted(found, key=lambda s: s.line))
    reports = {line: (v, report_data(v, line_history(idx, line, v.rows))) for line, v in sorted(views.items())}
    return Site(entries, chain_list), reports
