"""Statistics of timing samples: frozen summaries, the noise statistic, speedup intervals.

The noise statistic (``rel_noise``) is defined once, here, and the timing loop stops on it:

    rel_noise = (x_(n-k+1) - x_(k)) / (2 · median)

where x_(1) ≤ … ≤ x_(n) are the sorted samples and [x_(k), x_(n-k+1)] is the
distribution-free (binomial order-statistic) ``NOISE_CONFIDENCE`` confidence interval of the
median: k is the largest integer with P(Bin(n, ½) ≤ k-1) ≤ α/2. It is the relative
half-width of a 95% CI of the median, needs no normality assumption, costs one sort, and
is ``inf`` when n is too small for any such interval (n < 6 at 95%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

NOISE_CONFIDENCE = 0.95
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Bootstrap resamples evaluated per batch (bounds memory at n_samples × BOOTSTRAP_BATCH floats).
BOOTSTRAP_BATCH = 250


@lru_cache(maxsize=4096)
def _median_ci_rank(n: int, confidence: float) -> int:
    """k (1-based) of the order-statistic CI [x_(k), x_(n-k+1)] of the median; 0 if none exists.

    The smallest c with P(Bin(n, ½) ≤ c) ≥ α/2 (scipy's ``binom.ppf``), hence P(X ≤ c-1) < α/2:
    k = c. Summed in exact integers (C(n, i) against α/2 · 2ⁿ), which also keeps scipy.stats,
    seconds to import, out of every sweep process.
    """
    target = Fraction((1 - confidence) / 2) * 2**n
    term = cum = 1  # C(n, 0)
    c = 0
    while cum < target:
        c += 1
        term = term * (n - c + 1) // c
        cum += term
    return c


def median_ci(samples: Sequence[float], confidence: float = NOISE_CONFIDENCE) -> tuple[float, float]:
    """Distribution-free CI of the median; (nan, nan) when n is too small for ``confidence``."""
    import numpy as np

    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    k = _median_ci_rank(n, confidence) if n else 0
    if k < 1:
        return math.nan, math.nan
    return float(x[k - 1]), float(x[n - k])


def median_ci_min_n(confidence: float) -> int:
    """The fewest samples for which ``median_ci`` at ``confidence`` exists (6 at 95%)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    n = 1
    while _median_ci_rank(n, confidence) < 1:
        n += 1
    return n


def half_width(center: float, lo: float, hi: float) -> float:
    """The relative half-width (hi - lo) / (2 · center) of an interval; inf when it is undefined."""
    if math.isnan(lo) or math.isnan(hi) or not center > 0:
        return math.inf
    return (hi - lo) / (2 * center)


def rel_noise(samples: Sequence[float], confidence: float = NOISE_CONFIDENCE) -> float:
    """Relative half-width of the median's CI (see the module docstring); inf if undefined."""
    import numpy as np

    lo, hi = median_ci(samples, confidence)
    if math.isnan(lo):
        return math.inf
    return half_width(float(np.median(np.asarray(samples, dtype=float))), lo, hi)


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float],
                 confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(ratio, lo, hi): the median of the per-round ratios numerator_i / denominator_i of two
    arms timed in the same rounds, and its distribution-free CI (``median_ci`` of the log-ratios,
    exponentiated: exact whenever the rounds' ratios are independent with one median, whatever
    their distribution). A clock swing common to both calls of a round cancels in its ratio,
    where it widens each arm's own median. (nan, nan, nan) without samples; lo and hi nan when
    n is too small for ``confidence``."""
    import numpy as np

    x, y = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired_ratio needs the same rounds of both arms, got {x.size} and {y.size} samples")
    if x.size == 0:
        return math.nan, math.nan, math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(x / y)
    lo, hi = median_ci(d, confidence)
    return float(np.exp(np.median(d))), float(np.exp(lo)), float(np.exp(hi))


@dataclass(frozen=True)
class Stats:
    """Summary of one arm's kept samples (ms). Empty input gives n=0 and NaNs."""

    n: int
    median: float
    min: float
    max: float
    mean: float
    p20: float
    p80: float
    iqr: float
    rel_noise: float
    median_lo: float   # NOISE_CONFIDENCE CI of the median (order statistics)
    median_hi: float

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> "Stats":
        import numpy as np

        x = np.asarray(samples, dtype=float)
        if x.size == 0:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan, nan, math.inf, nan, nan)
        if not np.all(np.isfinite(x)):
            raise ValueError("timing samples must be finite")
        p20, p25, p50, p75, p80 = np.percentile(x, [20, 25, 50, 75, 80])
        lo, hi = median_ci(x)
        return cls(n=int(x.size), median=float(p50), min=float(x.min()), max=float(x.max()),
                   mean=float(x.mean()), p20=float(p20), p80=float(p80), iqr=float(p75 - p25),
                   rel_noise=rel_noise(x), median_lo=lo, median_hi=hi)

    def as_dict(self) -> dict:
        """Raw values (an empty arm's NaNs too: ``harness.jsonsafe`` spells them where JSON is written)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def ratio(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Speedup of candidate over baseline: baseline median / candidate median (>1 = faster)."""
    import numpy as np

    return float(np.median(np.asarray(baseline, dtype=float)) / np.median(np.asarray(candidate, dtype=float)))


def speedup_ci(baseline: Sequence[float], candidate: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
               n_resamples: int = DEFAULT_RESAMPLES, random_state: int = DEFAULT_SEED,
               paired: bool | None = None) -> tuple[float, float]:
    """Bootstrap CI of ``ratio(baseline, candidate)``.

    Paired by round when the lengths match (the arms ran interleaved, so sample i of each
    arm shares round i's drift), independent otherwise; ``paired=False`` forces independent
    resampling (samples from two separate runs share no rounds). Percentile method: BCa's jackknife
    acceleration is unreliable for a median. Deterministic for a given ``random_state``.
    Returns (nan, nan) with fewer than 2 samples in an arm.
    """
    import numpy as np

    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if b.size < 2 or c.size < 2:
        return math.nan, math.nan
    if np.ptp(b) == 0 and np.ptp(c) == 0:  # no spread: the interval is the point
        r = float(b[0] / c[0])
        return r, r
    # The resampling of scipy.stats.bootstrap(method="percentile"), in numpy: importing
    # scipy.stats costs seconds in every sweep process.
    alpha = (1 - confidence) / 2
    stats = speedup_replicates(b, c, n_resamples, random_state, paired)
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def speedup_replicates(baseline: Sequence[float], candidate: Sequence[float], n_resamples: int = DEFAULT_RESAMPLES,
                       random_state=DEFAULT_SEED, paired: bool | None = None):
    """The bootstrap replicates of ``ratio(baseline, candidate)`` that ``speedup_ci`` takes its
    percentiles of (same pairing rule, same draws for the same ``random_state``): a report
    aggregates them across rows for the CI of a geomean or a bar clause."""
    import numpy as np

    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(random_state)
    pair = b.size == c.size and (paired is None or paired)
    stats = []
    for start in range(0, n_resamples, BOOTSTRAP_BATCH):
        m = min(BOOTSTRAP_BATCH, n_resamples - start)
        ib = rng.integers(0, b.size, size=(m, b.size))
        ic = ib if pair else rng.integers(0, c.size, size=(m, c.size))
        stats.append(np.median(b[ib], axis=-1) / np.median(c[ic], axis=-1))
    return np.concatenate(stats)


def paired_replicates(numerator: Sequence[float], denominator: Sequence[float], n_resamples: int = DEFAULT_RESAMPLES,
                      random_state=DEFAULT_SEED):
    """Bootstrap replicates of ``paired_ratio``'s ratio (rounds resampled, pairs kept): a report
    aggregates them across rows as it does ``speedup_replicates``."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(np.asarray(numerator, dtype=float) / np.asarray(denominator, dtype=float))
    return np.exp(median_replicates(d, n_resamples, random_state))


def median_replicates(samples: Sequence[float], n_resamples: int = DEFAULT_RESAMPLES, random_state=DEFAULT_SEED):
    """Bootstrap replicates of one arm's median (a rate's CI: the rate is work over the median)."""
    import numpy as np

    x = np.asarray(samples, dtype=float)
    rng = np.random.default_rng(random_state)
    out = []
    for start in range(0, n_resamples, BOOTSTRAP_BATCH):
        m = min(BOOTSTRAP_BATCH, n_resamples - start)
        out.append(np.median(x[rng.integers(0, x.size, size=(m, x.size))], axis=-1))
    return np.concatenate(out)


# -- samples that sit on a quantum (a timer's or the scheduler's tick), not on the call's time ----------
# Scheduler ticks a host-timed sample can sit on: CONFIG_HZ 1000, 250 and 100. A call that
# waits for the CPU resumes on a tick, so its wall time reads whole ticks (on the 2-core
# host, HZ=250: waited calls of 0.12–0.7 ms read 4.3, 8.00, 16.0 ms; issue 25's rows 16.00,
# 24.05, 32.02, 48.00 ms).
QUANTUM_TICKS_MS = (1.0, 4.0, 10.0)
# "On" a tick: within this fraction of the tick of a multiple of it (80 µs at 4 ms). Measured
# waited calls (0.12 and 0.63 ms calls, 2 busy processes on 2 cores): 55–70% of them within
# it, all issue 25's medians (24.05 ms is 1.25% of a tick off). A continuous sample lands
# there by chance 2 × 2% = 4% of the time.
QUANTUM_TOLERANCE = 0.02
# Multiples from 2 up: a call honestly about one tick long is not read as one tick.
QUANTUM_MIN_MULTIPLE = 2
# Quantised when at least half the samples sit on it: then the median (the number a speedup
# is made of) does too. Continuous samples reach it by chance with P(Bin(n, 4%) ≥ n/2),
# < 1e-4 from n = 8 on.
QUANTUM_MIN_SHARE = 0.5
# Fewer samples say nothing about a grid (and the noise rule needs more anyway).
QUANTUM_MIN_SAMPLES = 8
# A timer quantum (a coarse clock): samples taking at most this fraction of distinct values.
# Timed at ns resolution, a real call's samples are all distinct; n/4 values or fewer means
# the clock, not the call, set them.
QUANTUM_MAX_DISTINCT_FRACTION = 0.25


@dataclass(frozen=True)
class Quantum:
    """Samples that sit on a quantum: ``tick_ms`` (None: one value only), the share of the
    samples on multiples of it, the number of distinct values among ``n``, and the rule that
    saw it ("tick": multiples of a scheduler tick; "distinct": few distinct values)."""

    tick_ms: float | None
    share: float
    distinct: int
    n: int
    rule: str

    def describe(self) -> str:
        if self.rule == "tick":
            return (f"{self.share:.0%} of {self.n} samples on multiples of a {self.tick_ms:g} ms tick "
                    f"(± {QUANTUM_TOLERANCE:.0%}): a scheduler quantum, not the call's time")
        tick = f", spaced by {self.tick_ms:.6g} ms" if self.tick_ms else ""
        return f"{self.n} samples take only {self.distinct} distinct values{tick}: a timer quantum"

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def quantum(samples: Sequence[float], ticks_ms: Sequence[float] = QUANTUM_TICKS_MS) -> Quantum | None:
    """The quantum ``samples`` (ms) sit on, or None when they are continuous.

    Two rules (constants above): at least ``QUANTUM_MIN_SHARE`` of the samples within
    ``QUANTUM_TOLERANCE`` × tick of a multiple (≥ ``QUANTUM_MIN_MULTIPLE``) of one of
    ``ticks_ms`` (the largest such tick is named: 16 and 24 ms are 4 ms ticks, not just 1 ms
    ones); or at most ``QUANTUM_MAX_DISTINCT_FRACTION`` × n distinct values (a coarse timer;
    the tick is the smallest gap between them). It cannot tell a call that honestly takes a
    whole number of ticks with under ± 2% jitter from a quantum: such a row is flagged too.
    """
    import numpy as np

    x = np.asarray(samples, dtype=float)
    n = int(x.size)
    if n < QUANTUM_MIN_SAMPLES or not np.all(np.isfinite(x)):
        return None
    values = np.unique(x)
    found = None
    for tick in sorted(float(t) for t in ticks_ms):
        if not tick > 0:
            raise ValueError(f"ticks must be positive, got {tick!r}")
        k = np.rint(x / tick)
        on = (k >= QUANTUM_MIN_MULTIPLE) & (np.abs(x - k * tick) <= QUANTUM_TOLERANCE * tick)
        share = float(on.mean())
        if share >= QUANTUM_MIN_SHARE:
            found = Quantum(tick, share, int(values.size), n, "tick")
    if found is not None:
        return found
    if values.size <= QUANTUM_MAX_DISTINCT_FRACTION * n:
        gap = float(np.diff(values).min()) if values.size > 1 else None
        return Quantum(gap, 1.0, int(values.size), n, "distinct")
    return None


# Mann-Whitney U: an exact null distribution when either sample has at most this many values
# and nothing ties, the normal approximation (tie and continuity corrected) otherwise:
# scipy.stats.mannwhitneyu's method="auto", whose p-values these match (tests/test_stats.py).
MWU_EXACT_MAX_N = 8
MWU_ALTERNATIVES = ("two-sided", "greater", "less")


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided") -> tuple[float, float]:
    """(U of ``x``, p-value) of the Mann-Whitney U test; "greater": ``x`` tends to be larger.

    Here, not scipy.stats, so no sweep process pays scipy.stats' import (seconds): the sweep
    judges memory of inputs with it (timing/refresh.py) and `bench compare` its changes.
    """
    import numpy as np

    if alternative not in MWU_ALTERNATIVES:
        raise ValueError(f"alternative must be one of {MWU_ALTERNATIVES}, got {alternative!r}")
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("mann_whitney_u: samples must not contain NaN")
    n1, n2 = a.size, b.size
    xy = np.concatenate([a, b])
    uniq, inv, counts = np.unique(xy, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)  # average ranks: ties share the mean of their positions
    ranks = (upper - (counts - 1) / 2.0)[inv]
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u2 = n1 * n2 - u1
    u, factor = {"greater": (u1, 1), "less": (u2, 1), "two-sided": (max(u1, u2), 2)}[alternative]
    ties = bool((counts > 1).any())
    if (n1 > MWU_EXACT_MAX_N and n2 > MWU_EXACT_MAX_N) or ties:
        n = n1 + n2
        tie_term = float(np.sum(counts.astype(float) ** 3 - counts))
        s = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))))
        z = (u - n1 * n2 / 2.0 - 0.5) / s if s > 0 else (math.inf if u - n1 * n2 / 2.0 - 0.5 > 0 else -math.inf)
        p = 0.5 * math.erfc(z / math.sqrt(2.0))
    else:
        p = _mwu_exact_sf(n1, n2, int(round(u)))
    return u1, min(max(p * factor, 0.0), 1.0)


@lru_cache(maxsize=64)
def _mwu_null_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) orderings give U = 0, 1, ..., n1·n2: the coefficients of
    the Gaussian binomial [n1+n2 choose m]_q (m = min(n1, n2)), in exact integers."""
    m, n = min(n1, n2), max(n1, n2)
    c = [1]
    for i in range(1, m + 1):  # [n+i choose i]_q = [n+i-1 choose i-1]_q · (1 - q^(n+i)) / (1 - q^i)
        c = c + [0] * n
        for j in range(len(c) - 1, n + i - 1, -1):
            c[j] -= c[j - n - i]
        for j in range(i, len(c)):
            c[j] += c[j - i]
    return tuple(c)


def _mwu_exact_sf(n1: int, n2: int, u: int) -> float:
    """P(U ≥ u) under the null (no ties)."""
    c = _mwu_null_counts(n1, n2)
    return float(Fraction(sum(c[max(u, 0):]), sum(c)))


__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES", "DEFAULT_SEED", "MWU_ALTERNATIVES", "MWU_EXACT_MAX_N",
           "NOISE_CONFIDENCE", "QUANTUM_MAX_DISTINCT_FRACTION", "QUANTUM_MIN_MULTIPLE", "QUANTUM_MIN_SAMPLES",
           "QUANTUM_MIN_SHARE", "QUANTUM_TICKS_MS", "QUANTUM_TOLERANCE", "Quantum", "Stats", "mann_whitney_u",
           "half_width", "median_ci", "median_ci_min_n", "paired_ratio", "quantum", "ratio", "rel_noise", "speedup_ci"]
