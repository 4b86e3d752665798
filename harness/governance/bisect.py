"""`bench bisect`'s rule: what one commit's measurements say, three-valued.

A commit is measured (``commands/probe.py``, in its own worktree) one or more times; its
measurements are pooled round by round (each round's baseline and candidate samples stay a
pair) into one speedup (baseline median / candidate median) with its paired bootstrap 95% CI
(``measurement.stats``).

The ends first (``ends``). Regression: the bad end's CI lies wholly below the good end's and
its speedup is at least ``threshold`` (default ``DEFAULT_THRESHOLD``) below the good end's.
No regression: the bad end's CI lower bound is within ``threshold`` of the good end's speedup
(or above it: a faster bad end is no regression). Anything else is unclear: both ends are
measured again, pooled, up to the budget (``DEFAULT_BUDGET`` measurements per commit); ends
still unclear then are not distinguishable at that budget, which is no regression too.

Then each probed commit (``classify``): good when its CI reaches the good end's (overlaps it,
or lies above it) and lies wholly above the bad end's (consistent with the good end,
excluding the bad), bad when it reaches the bad end's and lies wholly below the good end's,
and unclear otherwise (it overlaps both, or lies between them): it is
measured again, its samples pooled, up to the budget. A commit still unclear then, or one
whose code cannot run the probe, is skipped (as `git bisect skip`): the search goes on around
it, and ends "unclear between A and B" if only skipped commits lie between the last good and
the first bad one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from harness.ledger.line_payloads import ProbeAnswer
from harness.measurement.stats import ratio, speedup_ci

# A regression smaller than this (relative drop of the speedup) is no regression.
DEFAULT_THRESHOLD = 0.05
# Measurements pooled at one commit before it is called unclear (and skipped).
DEFAULT_BUDGET = 3

GOOD, BAD, UNCLEAR, SKIP = "good", "bad", "unclear", "skip"
DECISIONS = (GOOD, BAD, UNCLEAR, SKIP)
REGRESSION, NO_REGRESSION = "regression", "no regression"
# How a bisect ends (commands/bisect.py, BisectResult.outcome): FIRST_BAD, NO_REGRESSION, UNCLEAR or INTERRUPTED.
FIRST_BAD, INTERRUPTED = "first bad", "interrupted"


@dataclass(frozen=True)
class Estimate:
    """A commit's pooled speedup: the point, its CI, the paired rounds and measurements behind it."""

    speedup: float
    lo: float
    hi: float
    n: int
    measurements: int

    @property
    def defined(self) -> bool:
        return all(math.isfinite(v) for v in (self.speedup, self.lo, self.hi))

    def shown(self) -> str:
        return f"{self.speedup:.3f} [{self.lo:.3f}, {self.hi:.3f}]"

    def as_dict(self) -> dict:
        return {"speedup": self.speedup, "ci": [self.lo, self.hi], "n": self.n, "measurements": self.measurements}


def pooled(measurements: list[ProbeAnswer]) -> Estimate:
    """One estimate from probe answers holding ``samples`` (ms per round of each arm): rounds
    concatenated, paired where every measurement's arms pair up."""
    arms = [m.arms for m in measurements]
    base = [x for a in arms for x in a.baseline]
    cand = [x for a in arms for x in a.candidate]
    if not base or not cand:
        return Estimate(math.nan, math.nan, math.nan, 0, len(measurements))
    paired = all(len(a.baseline) == len(a.candidate) for a in arms)
    lo, hi = speedup_ci(base, cand, paired=paired)
    return Estimate(ratio(base, cand), lo, hi, min(len(base), len(cand)), len(measurements))


def ends(good: Estimate, bad: Estimate, threshold: float = DEFAULT_THRESHOLD, *,
         last: bool = False) -> tuple[str, str]:
    """(REGRESSION | NO_REGRESSION | UNCLEAR, why) for the good and bad ends (module docstring);
    ``last``: their budget is spent, so ends that are not apart are no regression."""
    if not (good.defined and bad.defined):
        return UNCLEAR, "an end's speedup has no CI"
    floor = good.speedup * (1 - threshold)
    if bad.hi < good.lo and bad.speedup <= floor:
        return REGRESSION, (f"bad end {bad.shown()} below good end {good.shown()}, "
                            f"{1 - bad.speedup / good.speedup:.1%} slower")
    if bad.lo >= floor:
        return NO_REGRESSION, (f"bad end {bad.shown()} within {threshold:.0%} of good end {good.speedup:.3f} "
                               f"(its CI stays above {floor:.3f})")
    if last:
        return NO_REGRESSION, (f"bad end {bad.shown()} not {threshold:.0%} below good end {good.shown()} with "
                               f"CIs apart, after {min(good.measurements, bad.measurements)} measurement(s) each")
    return UNCLEAR, (f"bad end {bad.shown()} and good end {good.shown()} neither apart nor within "
                     f"{threshold:.0%} of each other")


def classify(p: Estimate, good: Estimate, bad: Estimate) -> tuple[str, str]:
    """(GOOD | BAD | UNCLEAR, why) for a probed commit's estimate against the ends."""
    if not p.defined:
        return UNCLEAR, "its speedup has no CI"
    if p.lo > bad.hi and p.hi >= good.lo:
        return GOOD, f"{p.shown()} reaches the good end's CI, above the bad end's"
    if p.hi < good.lo and p.lo <= bad.hi:
        return BAD, f"{p.shown()} reaches the bad end's CI, below the good end's"
    return UNCLEAR, f"{p.shown()} overlaps both ends' CIs, or lies between them"


def next_probe(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The index to probe between the last good ``lo`` and the first bad ``hi`` (exclusive):
    the one nearest their middle that is not skipped (the lower on a tie); None when none is left."""
    left = [i for i in range(lo + 1, hi) if i not in skipped]
    if not left:
        return None
    middle = (lo + hi) / 2
    return min(left, key=lambda i: (abs(i - middle), i))
