"""`bench compare`: two lines, or one line at two commits, config by config.

Per matched (config, kernel), on each run's interleaved rounds (the candidate's kept samples,
at the rounds' mean SM clock, both shown — the protocol a speedup comes from): the ratio of medians (speedup of B over A: median A /
median B, > 1 means B is faster), a bootstrap CI of that ratio resampling each run's raw
samples independently (two runs share no rounds), and a two-sided Mann-Whitney U test on
the raw samples, its p-values adjusted across the comparison's configs by Benjamini-Hochberg
(a comparison of 36 configs makes 36 tests: the adjustment keeps the expected share of false
FASTER/SLOWER calls among them at ``FDR_Q``). The change per config:

- SAME: the ratio's CI lies inside ±``SAME_BAND`` (any difference is too small to matter);
- FASTER / SLOWER: the adjusted p is below ``FDR_Q``, the CI lies wholly above / below 1, and
  the ratio itself is at least ``MIN_EFFECT`` from 1 (a significant 1.001× is not FASTER);
  both are the defaults of `bench compare --q` and `--min-effect`;
- UNCLEAR: anything else (too few samples, too much spread, or a change too small to name).

Rows measured on different devices, under different numeric flags or a different timing
mode are refused unless ``allow_mixed``: their difference would not be the kernel's. A flag
one side never recorded (None: a row older than the field) is no difference; the comparison
names it (``Comparison.unrecorded``: "not recorded in X").

``next_run`` (`bench compare --next-run`, issue 48) asks another question of the same two
sides: how many of B's speedups (over the baseline) fall inside A's within-run CIs and inside
A's next-run intervals (governance/nextrun.py; A's between-run variance taken without B's run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.errors import UserError
from harness.vocab.outcomes import RESULT
from harness.vocab.devices import device_of
from harness.reporting.analysis.lines import LineView, arm_samples
from harness.ledger.payloads import Measurement
from harness.measurement.stats import mann_whitney_u, ratio, speedup_ci
from harness.measurement.numerics import CAPTURE_ONLY
from harness.vocab.metrics import INTERLEAVED
from harness.reporting.analysis.protocol import timed
from harness.reporting.analysis import lines
from harness.governance import nextrun

# False-discovery rate of FASTER/SLOWER across one comparison's configs (Benjamini-Hochberg);
# with one config it is the test's own significance level, as before the adjustment.
FDR_Q = 0.01
SAME_BAND = 0.02  # a ratio CI inside [1/(1+band), 1+band] is SAME
MIN_EFFECT = SAME_BAND  # FASTER needs a ratio >= 1 + this, SLOWER <= 1 / (1 + this)
# What `bench compare --min-effect` accepts: a change of 100% (2× faster or slower) is the
# largest minimum that still leaves a ratio to call; above it nearly nothing could be named.
MAX_MIN_EFFECT = 1.0
DEFAULT_THRESHOLD = 0.05  # CI mode: a SLOWER config more than 5% slower fails the job
MIN_SAMPLES = 5  # fewer raw samples in either run: UNCLEAR, no test
FASTER, SLOWER, SAME, UNCLEAR = "FASTER", "SLOWER", "SAME", "UNCLEAR"


@dataclass(frozen=True)
class PairComparison:
    config_key: str
    kernel_a: str
    kernel_b: str
    median_a_ms: float
    median_b_ms: float
    n_a: int
    n_b: int
    speedup: float  # median A / median B: > 1 means B is faster
    ci_low: float
    ci_high: float
    p_value: float  # the Mann-Whitney U test's own
    change: str  # FASTER, SLOWER, SAME or UNCLEAR (decided on p_adjusted)
    # The interleaved rounds' mean SM clock of each side (None: not read, e.g. the CPU): the
    # medians above were measured at it.
    clock_a_mhz: float | None = None
    clock_b_mhz: float | None = None
    p_adjusted: float = math.nan  # Benjamini-Hochberg over the comparison's configs

    @property
    def slowdown(self) -> float:
        """How much longer B takes than A (0.05 = 5% slower); negative when B is faster."""
        return 1 / self.speedup - 1 if self.speedup > 0 else math.inf


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    pairs: tuple[PairComparison, ...]
    only_a: tuple[str, ...]  # "config_key kernel" measured in A only
    only_b: tuple[str, ...]
    mixed: tuple[str, ...] = field(default=())  # setting differences let through by allow_mixed
    # Settings one side never recorded ("numerics num_threads: not recorded in A"): not a
    # difference, named so the reader knows the match could not be checked there.
    unrecorded: tuple[str, ...] = field(default=())
    q: float = FDR_Q  # the false-discovery rate the changes were called at (`--q`)
    min_effect: float = MIN_EFFECT  # the smallest change named FASTER/SLOWER (`--min-effect`)

    def counts(self) -> dict[str, int]:
        out = {FASTER: 0, SLOWER: 0, SAME: 0, UNCLEAR: 0}
        for p in self.pairs:
            out[p.change] += 1
        return out

    def significance(self) -> dict[str, int]:
        """Configs tested, significant at ``q`` on their own p, and after the adjustment."""
        tested = [p for p in self.pairs if not math.isnan(p.p_value)]
        return {"tests": len(tested), "raw": sum(p.p_value < self.q for p in tested),
                "adjusted": sum(p.p_adjusted < self.q for p in tested)}

    def regressions(self, threshold: float) -> list[PairComparison]:
        """SLOWER configs whose slowdown exceeds ``threshold`` (the CI mode's failures)."""
        return [p for p in self.pairs if p.change == SLOWER and p.slowdown > threshold]


def classify(speedup: float, ci_low: float, ci_high: float, p_value: float, *, q: float = FDR_Q,
             band: float = SAME_BAND, min_effect: float = MIN_EFFECT) -> str:
    """The change of one config from its ratio, CI and (adjusted) p-value."""
    if any(math.isnan(x) for x in (speedup, ci_low, ci_high, p_value)):
        return UNCLEAR
    if ci_low >= 1 / (1 + band) and ci_high <= 1 + band:
        return SAME
    if p_value < q and ci_low > 1 and speedup >= 1 + min_effect:
        return FASTER
    if p_value < q and ci_high < 1 and speedup <= 1 / (1 + min_effect):
        return SLOWER
    return UNCLEAR


def bh_adjust(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (NaN stays NaN and is not counted as a test)."""
    idx = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)), key=lambda i: p_values[i])
    m = len(idx)
    out = [math.nan] * len(p_values)
    running = 1.0
    for rank in range(m, 0, -1):  # from the largest p down: the running minimum keeps them monotone
        i = idx[rank - 1]
        running = min(running, p_values[i] * (m / rank))  # m / rank == 1 exactly for the largest p
        out[i] = running
    return out


def compare_samples(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """(speedup of b over a, CI low, CI high, Mann-Whitney p) from raw samples (ms)."""
    import numpy as np

    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        sp = ratio(a, b) if a and b else math.nan
        return sp, math.nan, math.nan, math.nan
    sp = ratio(a, b)
    lo, hi = speedup_ci(a, b, paired=False)
    if np.ptp(np.concatenate([a, b])) == 0:
        p = 1.0
    else:
        p = mann_whitney_u(a, b, "two-sided")[1]
    return sp, lo, hi, p


def _settings(row: dict) -> dict:
    """What must match for two rows' times to differ only by the kernel."""
    timing = Measurement.from_row(row.timing or {})
    device, gpu = device_of(row)

    # Capture-only state (CPU affinity, inter-op threads) differs between workers and hosts
    # by design; it is checked within a sweep, not matched across rows.
    numerics = {k: v for k, v in (row.numerics or {}).items() if k not in CAPTURE_ONLY}
    return {"device": device, "gpu": gpu, "numerics": numerics,
            "timing mode": timing.effective_mode or timing.mode}


# Settings whose None means "never recorded" (rows older than the field). A device's None is
# itself a setting (gpu None: the CPU), so it stays a difference.
UNRECORDED_OK = ("timing mode",)


def _differences(ra: dict, rb: dict, label_a: str = "A", label_b: str = "B") -> tuple[list[str], list[str]]:
    """The settings two rows differ in, and the ones one side never recorded (None or absent:
    an older row written before bench captured it). A field one side lacks is no difference —
    nothing says the two differ — so it is named ("not recorded in X"), never refused."""
    sa, sb = _settings(ra), _settings(rb)
    out, unrecorded = [], []
    for k in sa:
        if sa[k] == sb[k]:
            continue
        if isinstance(sa[k], dict) or isinstance(sb[k], dict):
            da, db = sa[k] or {}, sb[k] or {}
            keys = sorted(x for x in set(da) | set(db) if da.get(x) != db.get(x))
            real = [x for x in keys if da.get(x) is not None and db.get(x) is not None]
            unrecorded += [f"{k} {x}: not recorded in {label_a if da.get(x) is None else label_b}"
                           for x in keys if x not in real]
            if real:
                shown = ", ".join(f"{x}: {da.get(x)} vs {db.get(x)}" for x in real[:3])
                out.append(f"{k} ({shown})")
        elif k in UNRECORDED_OK and (sa[k] is None or sb[k] is None):
            unrecorded.append(f"{k}: not recorded in {label_a if sa[k] is None else label_b}")
        else:
            out.append(f"{k} ({sa[k]} vs {sb[k]})")
    return out, unrecorded


def _label(view: LineView) -> str:
    return f"{view.line}@{view.commit}" if view.commit else view.line


def _matched(a: LineView, b: LineView) -> tuple[list[tuple[dict, dict]], list[str], list[str]]:
    ra = {k: r for k, r in a.outcomes().items() if r.kind == RESULT}
    rb = {k: r for k, r in b.outcomes().items() if r.kind == RESULT}
    kernels_a = {k for _, k in ra}
    kernels_b = {k for _, k in rb}
    if not ra or not rb:
        empty = _label(a) if not ra else _label(b)
        raise UserError(f"{empty} has no result rows to compare: sweep it first (bench sweep {empty.split('@')[0]})")
    if kernels_a & kernels_b:
        keys_a, keys_b = set(ra), set(rb)
        pairs = [(ra[k], rb[k]) for k in sorted(keys_a & keys_b)]
        only_a = sorted(f"{c} {k}" for c, k in keys_a - keys_b)
        only_b = sorted(f"{c} {k}" for c, k in keys_b - keys_a)
    elif len(kernels_a) == 1 and len(kernels_b) == 1:  # one kernel against another, shape by shape
        ca = {c: r for (c, _), r in ra.items()}
        cb = {c: r for (c, _), r in rb.items()}
        pairs = [(ca[c], cb[c]) for c in sorted(set(ca) & set(cb))]
        only_a = sorted(set(ca) - set(cb))
        only_b = sorted(set(cb) - set(ca))
    else:
        raise UserError(f"{_label(a)} ({', '.join(sorted(kernels_a))}) and {_label(b)} ({', '.join(sorted(kernels_b))}) "
                        f"share no kernel and each has several: compare lines that measure the same kernels, or one "
                        f"kernel each")
    if not pairs:
        raise UserError(f"{_label(a)} and {_label(b)} share no measured config: nothing to compare")
    return pairs, only_a, only_b


def check_thresholds(q: float, min_effect: float) -> None:
    """Refuse a false-discovery rate or minimum effect that would call nothing or everything
    (one line naming the fix, before anything is read)."""
    if not (math.isfinite(q) and 0 < q < 1):
        raise UserError(f"--q {q}: give the false-discovery rate as a number between 0 and 1 (exclusive), e.g. "
                        f"{FDR_Q:g} (the default) or 0.05")
    if not (math.isfinite(min_effect) and 0 <= min_effect <= MAX_MIN_EFFECT):
        raise UserError(f"--min-effect {min_effect}: give the smallest change worth naming as a fraction from 0 to "
                        f"{MAX_MIN_EFFECT:g}, e.g. {MIN_EFFECT:g} (the default) for 2%")


def compare(a: LineView, b: LineView, *, allow_mixed: bool = False, q: float = FDR_Q,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Config by config, B against A (see the module docstring); ``q`` and ``min_effect``
    replace ``FDR_Q`` and ``MIN_EFFECT`` (checked by ``check_thresholds``)."""
    check_thresholds(q, min_effect)
    pairs, only_a, only_b = _matched(a, b)
    mixed, unrecorded = [], {}
    for ra, rb in pairs:
        diff, missing = _differences(ra, rb, _label(a), _label(b))
        for m in missing:
            unrecorded.setdefault(m, ra.config_key)
        if diff and not allow_mixed:
            raise UserError(f"{_label(a)} and {_label(b)} were measured under different settings at {ra.config_key}: "
                            f"{'; '.join(diff)} — their difference would not be the kernel's; pass --allow-mixed to "
                            f"compare anyway")
        mixed += [f"{ra.config_key}: {d}" for d in diff]
    import numpy as np

    tests = []
    for ra, rb in pairs:
        sa, sb = arm_samples(ra, "candidate"), arm_samples(rb, "candidate")
        tests.append((ra, rb, sa, sb, *compare_samples(sa, sb)))
    adjusted = bh_adjust([t[-1] for t in tests])
    out = []
    for (ra, rb, sa, sb, sp, lo, hi, p), pa in zip(tests, adjusted):
        out.append(PairComparison(ra.config_key, ra.candidate, rb.candidate, float(np.median(sa)),
                                  float(np.median(sb)), len(sa), len(sb), sp, lo, hi, p,
                                  classify(sp, lo, hi, pa, q=q, min_effect=min_effect),
                                  timed(ra, INTERLEAVED).sm_mhz, timed(rb, INTERLEAVED).sm_mhz, pa))
    return Comparison(_label(a), _label(b), tuple(out), tuple(only_a), tuple(only_b), tuple(mixed),
                      tuple(unrecorded), q, min_effect)


def against(root, ref: str, new: str | None, *, allow_mixed: bool = False, q: float = FDR_Q,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """CI mode's comparison: ``new`` against ``ref``; without ``new``, the line ``ref`` at its
    latest measured commit against the commit measured before it (``against_views``)."""
    return compare(*against_views(root, ref, new), allow_mixed=allow_mixed, q=q, min_effect=min_effect)


def against_views(root, ref: str, new: str | None) -> tuple[LineView, LineView]:
    """CI mode's pair of views (``against``)."""
    if new is not None:
        return lines.load(root, ref), lines.load(root, new)
    line, commit = lines.split_spec(ref)
    if commit:
        raise UserError(f"--against {ref} without a second line: name the line alone (it is compared at its last "
                        f"two measured commits) or give the new side as LINE@COMMIT")
    view = lines.load(root, line)
    commits = view.commits()
    if len(commits) < 2:
        raise UserError(f"line '{line}' has results at {len(commits)} commit(s): CI mode needs the line measured at "
                        f"two commits (sweep it again at the new commit) or a second line to compare")
    return lines.load(root, f"{line}@{commits[-2]}"), lines.load(root, f"{line}@{commits[-1]}")


def next_run(a: LineView, b: LineView):
    """``governance.nextrun.Coverage`` of B's speedups by A's intervals: A's current outcomes as
    one run, its next-run intervals' τ from the replicates among A's ledger's runs other than B's,
    else A's controls, never below the floor."""
    def run_of(view: LineView):
        outcomes = view.outcomes()
        first = next((r for r in outcomes.values() if r.kind == RESULT), None)
        if first is None:
            raise UserError(f"{_label(view)} has no result rows to compare: sweep it first")
        return nextrun.Run(_label(view), nextrun.run_key(first), outcomes)

    first, second = run_of(a), run_of(b)
    others = [r for r in nextrun.runs(a.rows, a.line) if r.key != second.key]
    between = nextrun.between_run(first.results.values(), others)
    return nextrun.coverage(first, second, between)

