"""The next run's speedup, from a ledger: runs, replicates, the between-run variance, coverage.

``measurement/nextrun.py`` has the model and the interval; this module reads it off ledger
rows (docs/measurement.md, "The next run's speedup"):

- a **run** is the result rows of one sweep on one card: rows sharing the code commit and the
  device instance (host and card: ``devices.instance_key``) and device model (``run_key``), each pair's latest
  outcome among them (``runs``);
- a **replicate** is a pair (config, candidate, baseline) with a result in two runs, both
  counted by the bar (neither rig-noisy nor impossible), the same kernel sources where both rows
  name them and the same timing mode: the same measurement made twice;
- ``between_run`` picks τ by the rule (replicates, else the rows' controls, never below the
  floor); ``bar_between_run`` does it for a line's bar, which reads ``speedup_next_low`` /
  ``speedup_next_high`` (metrics.NEXT_RUN_NAMES): computed where read, never stored in a row;
- ``coverage`` counts how many of a second run's speedups fall inside the first run's CIs and
  next-run intervals (research/ci_coverage.py, ``bench compare --next-run``).

Old rows are read as they are: nothing here changes a stored figure or its within-run CI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from harness.vocab.devices import instance_key, model
from harness.vocab.outcomes import RESULT, latest_outcomes
from harness.jsonsafe import number
from harness.ledger.payloads import KernelSource, Measurement, Metrics, by_role
from harness.measurement.nextrun import (MIN_REPLICATE_PAIRS, NEXT_RUN_LEVEL, NEXT_RUN_TAU_FLOOR, BetweenRun,
                                         control_tau2, log_sigma, replicate_tau2)
from harness.measurement.stats import DEFAULT_CONFIDENCE
from harness.measurement.timing.criteria import row_statistic
from harness.measurement.stats import paired_ratio, speedup_ci
from harness.registration import bar as barlang

# The bar's names for the next-run interval's ends (metrics.py declares them).
NEXT_LOW, NEXT_HIGH = "speedup_next_low", "speedup_next_high"
NEXT_RUN_NAMES = (NEXT_LOW, NEXT_HIGH)


def _arm(row, name: str) -> list[float]:
    arm = Measurement.from_row(row.timing or {}).arm(name)
    return [float(x) for x in (arm.samples_ms if arm is not None else None) or []]


def _speedup(row) -> float | None:
    return number(Metrics.from_row(row.metrics).speedup)


def ci_confidence(row) -> float:
    """The confidence of a result row's speedup CI: the statistic stop's look confidence
    (``criteria.row_statistic``), else the bootstrap's ``DEFAULT_CONFIDENCE``."""
    stat = row_statistic(row.policy, row.timing)
    return DEFAULT_CONFIDENCE if stat is None else stat[1]


def speedup_sigma(row) -> float | None:
    """The within-run standard error of the row's log speedup, read off its stored CI."""
    m = Metrics.from_row(row.metrics or {})
    return log_sigma(number(m.speedup_ci_low), number(m.speedup_ci_high), ci_confidence(row))


def control_figure(row) -> tuple[float | None, float | None]:
    """(control, σ of its log) of a result row: the stored control and the interval its own
    samples give by the speedup's method (the paired bootstrap, or the statistic stop's
    order-statistic interval over its rounds), read as σ. (None, None) without them."""
    c = number(Metrics.from_row(row.metrics or {}).control)
    base, ctrl = _arm(row, "baseline"), _arm(row, "control")
    if c is None or len(base) < 2 or len(ctrl) < 2:
        return None, None
    stat = row_statistic(row.policy, row.timing)
    if stat is None:
        lo, hi = speedup_ci(base, ctrl)
        conf = DEFAULT_CONFIDENCE
    else:
        n, conf = stat
        _, lo, hi = paired_ratio(base[:n], ctrl[:n], conf)
    return c, log_sigma(lo, hi, conf)


def counted(row) -> bool:
    """A result the bar counts whatever the registration: neither impossible nor rig-noisy."""
    return row.kind == RESULT and not row.impossible and not row.rig_noisy


def run_key(row) -> tuple:
    """(commit, device instance, device, GPU model): where one run of a line measured a row.
    The instance is ``devices.instance_key``'s (host and card), as replication tells them apart."""
    env = row.env or {}
    device, gpu = model(env)
    return row.commit, instance_key(env), device, gpu


@dataclass(frozen=True)
class Run:
    """One run of a line: its label (the ledger, commit and card) and the latest outcome per
    (config_key, candidate) among its rows (``results``: the results among them)."""

    label: str
    key: tuple
    outcomes: Mapping

    @property
    def results(self) -> dict:
        return {k: r for k, r in self.outcomes.items() if r.kind == RESULT}

    def counted(self) -> dict:
        """The results the bar counts (``counted``)."""
        return {k: r for k, r in self.results.items() if counted(r)}


def runs(rows: Iterable, name: str = "") -> list[Run]:
    """The runs among a ledger's ``rows``, in the order they began. ``name`` (a ledger's)
    prefixes each label."""
    groups: dict[tuple, list] = {}
    for r in rows:
        if getattr(r, "config_key", None) is not None:  # outcomes and supersedes rows
            groups.setdefault(run_key(r), []).append(r)
    out = []
    for key, rs in groups.items():
        outcomes = latest_outcomes(rs)
        if not any(r.kind == RESULT for r in outcomes.values()):
            continue
        commit, (host, card) = key[0], key[1]
        label = f"{name + '@' if name else ''}{(commit or '?')[:8]} on {str(card or host or '?')[:18]}"
        out.append(Run(label, key, outcomes))
    return out


def _same_measurement(a, b) -> bool:
    """Two rows of one pair are replicates: the same baseline, the kernel sources the same where
    both rows name them, the same timing mode."""
    if a.baseline != b.baseline:
        return False
    sa, sb = a.kernel_sources or {}, b.kernel_sources or {}
    for role in set(sa) & set(sb):
        ha, hb = (KernelSource.from_row(by_role(s, role) or {}).sha256 for s in (sa, sb))
        if ha and hb and ha != hb:
            return False
    ma, mb = (Measurement.from_row(r.timing or {}) for r in (a, b))
    return (ma.effective_mode or ma.mode) == (mb.effective_mode or mb.mode)


def replicate_pairs(run_list: list[Run], *, strict: bool = True) -> list[tuple]:
    """(row in one run, row in another) for each pair the two runs both counted, over every two
    runs of ``run_list``; ``strict``: only the same measurement (``_same_measurement``)."""
    out = []
    for i, a in enumerate(run_list):
        ra = a.counted()
        for b in run_list[i + 1:]:
            rb = b.counted()
            for k in ra.keys() & rb.keys():
                if not strict or _same_measurement(ra[k], rb[k]):
                    out.append((ra[k], rb[k]))
    return out


def replicate_estimate(run_list: list[Run], *, strict: bool = True) -> tuple[float | None, int]:
    """(τ², replicate pairs) from ``run_list`` (``measurement.nextrun.replicate_tau2``)."""
    figures = [(_speedup(a), speedup_sigma(a), _speedup(b), speedup_sigma(b))
               for a, b in replicate_pairs(run_list, strict=strict)]
    return replicate_tau2(figures)


def control_estimate(rows: Iterable) -> tuple[float | None, int]:
    """(τ², controls) from the A/A arm of counted result ``rows``: one control per config per
    run (every candidate row of a config's measurement carries the same one)."""
    seen, figures = set(), []
    for r in rows:
        key = (run_key(r), r.config_key)
        if not counted(r) or key in seen:
            continue
        seen.add(key)
        figures.append(control_figure(r))
    return control_tau2(figures)


def between_run(own: Iterable, others: list[Run] = (), *, floor: float = NEXT_RUN_TAU_FLOOR,
                level: float = NEXT_RUN_LEVEL, strict: bool = True) -> BetweenRun:
    """τ for the next-run intervals of result rows ``own`` (one run's): the replicates among the
    runs ``others`` (which may hold ``own``'s run), else ``own``'s controls, never below
    ``floor`` (``BetweenRun.choose``)."""
    own = list(own)
    reps = replicate_estimate(list(others), strict=strict) if len(others) > 1 else (None, 0)
    ctrl = control_estimate(own) if reps[1] < MIN_REPLICATE_PAIRS else (None, 0)  # the bootstrap only if needed
    return BetweenRun.choose(reps, ctrl, floor=floor, level=level)


def next_bounds(row, between: BetweenRun) -> tuple[float | None, float | None]:
    """(speedup_next_low, speedup_next_high) of a result row under ``between``."""
    return between.bounds(number(Metrics.from_row(row.metrics or {}).speedup), speedup_sigma(row))


# -- the bar ---------------------------------------------------------------------------------------


def names_next_run(go: str | None, primary: str | None = None) -> bool:
    """Whether a bar (its ``go`` text and ``primary``) names a next-run metric."""
    aggs = [c.aggregate for c in barlang.parse(go).clauses()] if go else []
    if primary:
        aggs.append(barlang.parse_aggregate(primary))
    return any(a.metric in NEXT_RUN_NAMES for a in aggs)


def bar_between_run(go: str | None, primary: str | None, rows: Iterable, outcomes: Mapping,
                    recorded: Mapping | None = None) -> BetweenRun | None:
    """The τ a line's bar reads its next-run metrics with; None when the bar names none.
    ``recorded``: a verdict row's ``next_run`` record (what the verdict decided with), used as
    it is; else the replicates among the runs of the line's ``rows`` and the controls of the
    pairs' ``outcomes``."""
    if not names_next_run(go, primary):
        return None
    if recorded:
        return BetweenRun.from_dict(recorded)
    own = [r for r in outcomes.values() if r.kind == RESULT]
    return between_run(own, runs(rows))


# -- coverage --------------------------------------------------------------------------------------


class Covered(NamedTuple):
    """One pair in two runs: the first run's speedup, CI and next-run interval, the second's speedup."""

    config_key: str
    candidate: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    next_low: float | None
    next_high: float | None
    second: float | None

    @property
    def in_ci(self) -> bool:
        return None not in (self.ci_low, self.ci_high, self.second) and self.ci_low <= self.second <= self.ci_high

    @property
    def in_next(self) -> bool:
        return None not in (self.next_low, self.next_high, self.second) and self.next_low <= self.second <= self.next_high


@dataclass(frozen=True)
class Coverage:
    """How many of run ``second``'s speedups fall inside run ``first``'s intervals, over the
    ``n`` pairs both runs counted: its within-run CIs (``in_ci``, nominal ``ci_levels``, the
    rows' confidences) and its next-run intervals (``in_next``, nominal ``between.level``,
    ``between``: the τ they used). ``implied_tau``: the τ these two runs' replicates imply
    (``replicate_tau2`` over them alone); ``shift``: the geometric mean of second / first;
    ``notes``: what differs between the runs' rows; ``pairs``: each pair's figures (``Covered``)."""

    first: str
    second: str
    n: int
    in_ci: int
    in_next: int
    ci_levels: tuple[float, ...]
    between: BetweenRun
    implied_tau: float | None
    shift: float | None
    notes: tuple[str, ...] = ()
    pairs: tuple[Covered, ...] = ()

    @property
    def ci_fraction(self) -> float | None:
        return self.in_ci / self.n if self.n else None

    @property
    def next_fraction(self) -> float | None:
        return self.in_next / self.n if self.n else None


def coverage(first: Run, second: Run, between: BetweenRun) -> Coverage:
    """``Coverage`` of ``second`` by ``first``'s intervals, ``first``'s next-run intervals under
    ``between`` (which must not have been estimated from ``second``: research/ci_coverage.py
    leaves it out)."""
    a, b = first.counted(), second.counted()
    keys = sorted(a.keys() & b.keys())
    covered, logs, levels, differ = [], [], set(), 0
    for k in keys:
        ra, rb = a[k], b[k]
        s1, s2 = _speedup(ra), _speedup(rb)
        covered.append(Covered(k[0], k[1], s1, number(Metrics.from_row(ra.metrics).speedup_ci_low),
                               number(Metrics.from_row(ra.metrics).speedup_ci_high), *next_bounds(ra, between), s2))
        levels.add(ci_confidence(ra))
        if s1 is not None and s2 is not None and s1 > 0 and s2 > 0:
            logs.append(math.log(s2 / s1))
        differ += not _same_measurement(ra, rb)
    implied, _ = replicate_tau2((_speedup(a[k]), speedup_sigma(a[k]),
                                 _speedup(b[k]), speedup_sigma(b[k])) for k in keys)
    notes = []
    if differ:
        notes.append(f"{differ} of {len(keys)} pairs differ in kernel sources, baseline or timing mode: not the same "
                     f"measurement made twice")
    if first.key[2:] != second.key[2:]:
        notes.append(f"devices differ: {first.key[3] or first.key[2]} and {second.key[3] or second.key[2]}")
    left = len(first.results) - len(a), len(second.results) - len(b)
    if any(left):
        notes.append(f"left out as the bar leaves them (rig-noisy or impossible): {left[0]} and {left[1]} results")
    return Coverage(first.label, second.label, len(keys), sum(c.in_ci for c in covered),
                    sum(c.in_next for c in covered), tuple(sorted(levels)), between,
                    None if implied is None else math.sqrt(implied),
                    math.exp(sum(logs) / len(logs)) if logs else None, tuple(notes), tuple(covered))


__all__ = ["Coverage", "Covered", "NEXT_HIGH", "NEXT_LOW", "NEXT_RUN_NAMES", "Run", "bar_between_run", "between_run",
           "ci_confidence", "control_estimate", "control_figure", "counted", "coverage", "names_next_run",
           "next_bounds", "replicate_estimate", "replicate_pairs", "run_key", "runs", "speedup_sigma"]
