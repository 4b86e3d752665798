"""Statistics: the frozen summary, the noise statistic, the speedup interval."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from harness.jsonsafe import jsonable
from harness.measurement.stats import Stats, _median_ci_rank, median_ci, ratio, rel_noise, speedup_ci


def test_stats_from_samples():
    x = list(range(1, 101))
    s = Stats.from_samples(x[::-1])
    assert (s.n, s.median, s.min, s.max, s.mean) == (100, 50.5, 1.0, 100.0, 50.5)
    assert s.p20 == pytest.approx(np.percentile(x, 20)) and s.p80 == pytest.approx(np.percentile(x, 80))
    assert s.iqr == pytest.approx(49.5)
    assert (s.median_lo, s.median_hi) == (40.0, 61.0)      # textbook 95% order statistics for n = 100
    assert s.rel_noise == pytest.approx((61 - 40) / (2 * 50.5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n = 3


def test_median_ci_rank_matches_the_binomial_definition():
    assert _median_ci_rank(5, 0.95) == 0        # [x1, x5] covers only 93.75%: no 95% interval
    assert _median_ci_rank(6, 0.95) == 1        # [x1, x6] covers 96.9%
    assert _median_ci_rank(100, 0.95) == 40
    from scipy.stats import binom

    for n in (6, 17, 50, 333):
        k = _median_ci_rank(n, 0.95)
        assert binom.cdf(k - 1, n, 0.5) <= 0.025 < binom.cdf(k, n, 0.5)


def test_rel_noise_edge_cases():
    assert rel_noise([1.0] * 5) == math.inf
    assert rel_noise([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == pytest.approx((6 - 1) / (2 * 3.5))
    assert rel_noise([2.0] * 50) == 0.0
    assert math.isnan(median_ci([1.0, 2.0])[0])


def test_rel_noise_shrinks_like_one_over_sqrt_n():
    rng = np.random.default_rng(0)
    small, big = rng.normal(1, 0.01, 100), rng.normal(1, 0.01, 1600)
    assert rel_noise(big) < rel_noise(small) / 2.5


def test_empty_stats_are_nan_and_json_safe():
    s = Stats.from_samples([])
    assert s.n == 0 and math.isnan(s.median) and s.rel_noise == math.inf
    d = s.as_dict()  # raw values; the one encoder spells them for JSON
    assert math.isnan(d["median"]) and d["rel_noise"] == math.inf
    assert jsonable(d)["median"] == "NaN" and jsonable(d)["rel_noise"] == "Infinity"


def test_non_finite_samples_are_rejected():
    with pytest.raises(ValueError):
        Stats.from_samples([1.0, float("nan")])


def test_ratio_is_baseline_over_candidate():
    assert ratio([2.0, 2.0, 2.0], [1.0, 1.0, 1.0]) == 2.0


def test_speedup_ci_is_deterministic_and_covers_the_ratio():
    rng = np.random.default_rng(1)
    b, c = 1.3 * rng.lognormal(0, 0.05, 200), rng.lognormal(0, 0.05, 200)
    lo, hi = speedup_ci(b, c)
    assert (lo, hi) == speedup_ci(b, c)
    assert lo < ratio(b, c) < hi and lo < 1.3 < hi
    assert speedup_ci(b, c, random_state=7) != (lo, hi)


def test_pairing_by_round_cancels_shared_drift():
    rng = np.random.default_rng(2)
    drift = np.linspace(1.0, 1.5, 200)                    # both arms slow down together
    b = 1.2 * drift * rng.lognormal(0, 0.005, 200)
    c = drift * rng.lognormal(0, 0.005, 200)
    plo, phi = speedup_ci(b, c)                           # equal lengths: paired
    ilo, ihi = speedup_ci(b, c[:-1])                      # unequal: independent
    assert phi - plo < (ihi - ilo) / 3
    assert plo < 1.2 < phi


def test_median_ci_rank_is_scipys_binomial_quantile():
    from scipy.stats import binom

    for conf in (0.9, 0.95, 0.99):
        for n in range(1, 400):
            assert _median_ci_rank(n, conf) == int(binom.ppf((1 - conf) / 2, n, 0.5)), (n, conf)


@pytest.mark.parametrize("paired", [True, False])
def test_speedup_ci_agrees_with_scipys_percentile_bootstrap(paired):
    """Same resampling as scipy.stats.bootstrap(method="percentile"), other draws: the
    endpoints agree to a small share of the interval's width."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(3)
    for n, spread in ((12, 0.02), (60, 0.05), (300, 0.01)):
        b, c = 1.4 * rng.lognormal(0, spread, n), rng.lognormal(0, spread, n)
        lo, hi = speedup_ci(b, c, paired=paired)
        ref = bootstrap((b, c), lambda x, y, axis=-1: np.median(x, axis=axis) / np.median(y, axis=axis),
                        paired=paired, vectorized=True, n_resamples=20000, method="percentile",
                        rng=np.random.default_rng(0)).confidence_interval
        width = ref.high - ref.low
        assert abs(lo - ref.low) < 0.15 * width and abs(hi - ref.high) < 0.15 * width, (n, lo, hi, ref)


def test_speedup_ci_degenerate_inputs():
    assert speedup_ci([2.0] * 10, [1.0] * 10) == (2.0, 2.0)
    assert all(math.isnan(v) for v in speedup_ci([1.0], [1.0, 2.0]))


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_mann_whitney_u_is_scipys(alternative):
    """The exact null (small samples, no ties) and the tie-corrected normal approximation:
    scipy.stats.mannwhitneyu's method="auto", without importing scipy.stats in a sweep."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    from harness.measurement.stats import mann_whitney_u

    rng = np.random.default_rng(7)
    for trial in range(300):
        a = rng.normal(size=int(rng.integers(1, 14))) + rng.normal() * 0.5
        b = rng.normal(size=int(rng.integers(1, 25)))
        if trial % 3 == 0:  # ties
            a, b = np.round(a, 1), np.round(b, 1)
        ref = mannwhitneyu(a, b, alternative=alternative)
        u, p = mann_whitney_u(a, b, alternative)
        assert u == pytest.approx(float(ref.statistic)) and p == pytest.approx(float(ref.pvalue), rel=1e-9)
    assert mann_whitney_u([1.0] * 4, [1.0] * 6, alternative)[1] == 1.0  # all tied: no evidence
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0], alternative)
