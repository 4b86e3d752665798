"""The next run's speedup: a prediction interval beside the within-run CI (issue 48, item 5).

A result row's speedup CI (the paired bootstrap, or the statistic stop's order-statistic
interval) describes the noise inside one run: it covers the speedup *this* run would read with
endless rounds. Another run — another card of the same model, another sweep — reads each pair
offset by an effect of its own (the card's balance of compute and memory clocks, its thermal
state, the software's state on that host), which no round of the first run sees. On the H200,
re-sweeps of flash-h200-v2 put 7–12 of 36 speedups inside the shipped run's 95% CIs.

The model, per pair (config, candidate), on the log scale: run j reads
``y_j = μ + b_j + e_j`` with ``b_j`` the run's effect (variance τ², the **between-run
variance**) and ``e_j`` its within-run estimation error (σ_j, read off the row's own CI:
``log_sigma``). The next run's reading differs from this one's by ``b_2 − b_1 + e_2 − e_1``,
of variance ``2τ² + σ_1² + σ_2²``; with σ_2 taken as σ_1 (the next run under the same
protocol), the **next-run interval** at level L is

    speedup · exp(± z_{(1+L)/2} · √(2 · (σ² + τ²)))

(``next_run_bounds``). It is a prediction interval for the next run's point speedup, the
quantity the coverage measurement counts; even with τ = 0 it is √2 wider than a CI of the same
σ, because the next run's reading has an error of its own.

τ² comes from the ledger (governance/nextrun.py picks the source; docs/measurement.md, "The
next run's speedup", has the rule): replicates of the same pair in other runs
(``replicate_tau2``), else the rows' own A/A arm, the control (``control_tau2``), and never less
than ``NEXT_RUN_TAU_FLOOR``. Everything here is arithmetic on figures already in the rows; no
resampling and no import beyond the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, ClassVar, Iterable, Mapping

from harness.vocab.payload import Payload

# The level of the next-run interval: the share of next runs' speedups it is meant to hold.
NEXT_RUN_LEVEL = 0.95
# The least between-run standard deviation of a log speedup (0.005: a next run reads a pair
# about ±0.5% off, one standard deviation). Provenance: four re-sweeps of flash-h200-v2 on
# other H200s (2026-12-04 at 1880528, twice; 2026-12-07 at 90e2b27 and c3711f2;
# docs/benchmarks-log.md) put new/shipped speedups at 0.982–1.001, 0.986–1.011, 0.985–1.010
# (36 pairs each) and 0.990–1.008 (33). Only the ranges were recorded: read as normal samples
# (mean at the range's middle, sd = range / its expected value for n draws, 4.24 for 36),
# their pooled mean square is (0.69%)², of which the two runs' own CIs (the shipped rows'
# σ, rms 0.16%) explain 2 × (0.16%)²; the rest, split over two runs, gives τ = 0.47%, rounded
# up to 0.5%. A measured replicate estimate (two runs of one line on two instances:
# research/ci_coverage.py) is what should replace it.
NEXT_RUN_TAU_FLOOR = 0.005
# The fewest replicate pairs (a pair measured in two runs) that estimate τ² on their own;
# with fewer the rows' controls (or the floor) do. Eight squared differences put the
# estimate's relative standard error near 1/√(8/2) = 50% for τ; fewer say little.
MIN_REPLICATE_PAIRS = 8
# The fewest configs (one control each per run) that estimate τ² from the control arm.
MIN_CONTROL_CONFIGS = 4

# Where a τ came from (``BetweenRun.source``).
REPLICATES, CONTROL, FLOOR = "replicates", "control", "floor"
SOURCES = (REPLICATES, CONTROL, FLOOR)


def z_of(confidence: float) -> float:
    """The two-sided standard normal quantile of ``confidence`` (1.96 at 0.95)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    return NormalDist().inv_cdf((1 + confidence) / 2)


def log_sigma(lo: float | None, hi: float | None, confidence: float) -> float | None:
    """The within-run standard error of a log ratio read off its interval [lo, hi] at
    ``confidence``: (ln hi − ln lo) / (2 z). None where the interval is missing, not positive
    or not finite (too few rounds for one)."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or not 0 < lo <= hi:
        return None
    return (math.log(hi) - math.log(lo)) / (2 * z_of(confidence))


def next_run_bounds(speedup: float | None, sigma: float | None, tau: float,
                    level: float = NEXT_RUN_LEVEL) -> tuple[float | None, float | None]:
    """(low, high) of the next run's speedup at ``level`` (module docstring); (None, None)
    without a finite positive speedup or a within-run sigma."""
    if speedup is None or sigma is None or not math.isfinite(speedup) or not speedup > 0 or not math.isfinite(tau):
        return None, None
    w = z_of(level) * math.sqrt(2 * (sigma * sigma + tau * tau))
    return speedup * math.exp(-w), speedup * math.exp(w)


def replicate_tau2(pairs: Iterable[tuple[float, float, float, float]]) -> tuple[float | None, int]:
    """(τ², n) from replicates: each (speedup 1, σ 1, speedup 2, σ 2) of one pair in two runs.
    The method of moments: E[d²] = σ_1² + σ_2² + 2τ² for d = ln s_1 − ln s_2, so
    τ² = max(0, Σ (d² − σ_1² − σ_2²) / (2n)). (None, 0) without a usable pair."""
    total, n = 0.0, 0
    for s1, g1, s2, g2 in pairs:
        if not all(v is not None and math.isfinite(v) for v in (s1, g1, s2, g2)) or not (s1 > 0 and s2 > 0):
            continue
        d = math.log(s1) - math.log(s2)
        total += d * d - g1 * g1 - g2 * g2
        n += 1
    return (max(0.0, total / (2 * n)) if n else None), n


def control_tau2(controls: Iterable[tuple[float, float]]) -> tuple[float | None, int]:
    """(τ², n) from A/A ratios whose true value is 1: each (control, its σ), one per config and
    run. The control's offset from 1 is one draw of a run's effect on a ratio of two arms, so
    E[(ln c)²] = σ² + τ² and τ² = max(0, mean((ln c)² − σ²)). (None, 0) without a usable one."""
    total, n = 0.0, 0
    for c, g in controls:
        if c is None or g is None or not (math.isfinite(c) and math.isfinite(g)) or not c > 0:
            continue
        total += math.log(c) ** 2 - g * g
        n += 1
    return (max(0.0, total / n) if n else None), n


@dataclass(frozen=True, kw_only=True)
class NextRunRecord(Payload):
    """A verdict row's ``next_run`` as written (``BetweenRun.as_dict``); ``BetweenRun.from_dict``
    reads it through this."""

    REQUIRED: ClassVar[tuple] = ("tau", "source", "level", "floor")  # what a record cannot be read without

    tau: Any = None
    source: Any = None
    basis: Any = None
    n: Any = None
    estimate: Any = None
    level: Any = None
    floor: Any = None


@dataclass(frozen=True)
class BetweenRun:
    """The between-run standard deviation ``tau`` (log scale) a line's next-run intervals use.
    ``source``: what set it — REPLICATES or CONTROL (the data's estimate), or FLOOR (the data's
    estimate was below ``floor``, or there was not enough data for one); ``basis``: the data that
    gave ``estimate`` (REPLICATES, CONTROL, or None: not enough of either), from ``n`` replicate
    pairs or controls; ``level``: the intervals' level."""

    tau: float
    source: str
    basis: str | None = None
    n: int = 0
    estimate: float | None = None
    level: float = NEXT_RUN_LEVEL
    floor: float = NEXT_RUN_TAU_FLOOR

    def __post_init__(self):
        if self.source not in SOURCES or self.basis not in (None, REPLICATES, CONTROL):
            raise ValueError(f"between-run source must be one of {', '.join(SOURCES)} (basis {REPLICATES} or "
                             f"{CONTROL}), got {self.source!r} ({self.basis!r})")
        if not (math.isfinite(self.tau) and self.tau >= 0 and 0 < self.level < 1):
            raise ValueError(f"between-run tau must be finite and >= 0, level in (0, 1): {self.tau!r}, {self.level!r}")

    @classmethod
    def choose(cls, replicates: tuple[float | None, int], controls: tuple[float | None, int], *,
               floor: float = NEXT_RUN_TAU_FLOOR, level: float = NEXT_RUN_LEVEL) -> "BetweenRun":
        """The rule: τ² from the replicates with at least ``MIN_REPLICATE_PAIRS`` pairs, else
        from the controls with at least ``MIN_CONTROL_CONFIGS``; τ never below ``floor``."""
        (rt2, rn), (ct2, cn) = replicates, controls
        if rt2 is not None and rn >= MIN_REPLICATE_PAIRS:
            basis, n, est = REPLICATES, rn, math.sqrt(rt2)
        elif ct2 is not None and cn >= MIN_CONTROL_CONFIGS:
            basis, n, est = CONTROL, cn, math.sqrt(ct2)
        else:
            basis, n, est = None, 0, None
        if est is None or est < floor:
            return cls(floor, FLOOR, basis, n, est, level, floor)
        return cls(est, basis, basis, n, est, level, floor)

    def bounds(self, speedup: float | None, sigma: float | None) -> tuple[float | None, float | None]:
        return next_run_bounds(speedup, sigma, self.tau, self.level)

    def describe(self) -> str:
        """One line: τ, what set it, and the data's own estimate."""
        what = {REPLICATES: "replicate pairs (the same pair in another run)",
                CONTROL: "controls (the rows' A/A arm)"}
        data = ("too few replicates or controls to estimate it" if self.basis is None else
                f"{self.estimate:.2%} from {self.n} {what[self.basis]}")
        if self.source == FLOOR:
            return f"τ {self.tau:.2%}: the floor (NEXT_RUN_TAU_FLOOR; the data: {data})"
        return f"τ {self.tau:.2%} from {self.n} {what[self.basis]}"

    def as_dict(self) -> dict:
        return {"tau": self.tau, "source": self.source, "basis": self.basis, "n": self.n, "estimate": self.estimate,
                "level": self.level, "floor": self.floor}

    @classmethod
    def from_dict(cls, d: Mapping) -> "BetweenRun":
        """Back from ``as_dict`` (the record a verdict row keeps); ValueError when it is not one."""
        r = NextRunRecord.from_row(d)
        missing = [k for k in NextRunRecord.REQUIRED if r is None or not r.has(k)]
        if missing:
            raise ValueError(f"not a between-run record: {d!r} (no {', '.join(missing)})")
        try:
            return cls(float(r.tau), str(r.source), r.basis, int(r.n if r.has("n") else 0),
                       None if r.estimate is None else float(r.estimate), float(r.level), float(r.floor))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a between-run record: {d!r} ({exc})") from exc


__all__ = ["BetweenRun", "CONTROL", "FLOOR", "MIN_CONTROL_CONFIGS", "MIN_REPLICATE_PAIRS", "NEXT_RUN_LEVEL",
           "NEXT_RUN_TAU_FLOOR", "REPLICATES", "SOURCES", "control_tau2", "log_sigma", "next_run_bounds",
           "replicate_tau2", "z_of"]
