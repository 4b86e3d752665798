"""The report's first screen: per kernel, by how much, on which shapes, with what uncertainty;
each bar clause's margin and CI; and what qualifies the verdict. Data only (numbers, config
keys and formatted strings): render/report.py and render/plots.py show it.

Every CI here is a percentile bootstrap over the kept samples of the rows concerned
(``BOOTSTRAP_RESAMPLES`` resamples, seeded by ``BOOTSTRAP_SEED`` and each row's ledger seq, so
the same ledger gives the same bounds). One resample draws every row's samples again — the
interleaved arms paired by round, as the row's own speedup CI is; a rate from the samples of
the protocol it was computed from — recomputes each row's figure and aggregates the rows as
the statistic does (a kernel's geomean, a clause's min, max, median, mean or geomean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.vocab import metrics as metric_table
from harness.vocab.metrics import SUSTAINED
from harness.vocab.outcomes import RESULT
from harness.jsonsafe import number
from harness.ledger.payloads import Clock, ConfigFields, Measurement, Metrics, Numerics, Sustained
from harness.ledger.line_payloads import Coverage, RegistrationSummary
from harness.measurement.timing.criteria import row_statistic
from harness.reporting.analysis.lines import arm_samples, device_label
from harness.governance.peers import peer_samples
from harness.measurement.stats import median_replicates, paired_replicates, speedup_replicates
from harness.registration import bar as barlang
from harness.measurement.ceilings import DATASHEET_BANDWIDTH_KEY, DATASHEET_PEAKS, TF32_KEY
from harness.registration.bar import margin
from harness.reporting.analysis.protocol import deciding_rows, deciding_values, rates, speedup_text
from harness.governance.verdict import bar_row_map

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
# A rate measured at an SM clock below this fraction of the interleaved rounds' reference clock
# is named in a banner: an absolute TFLOP/s or GB/s is a figure of the clock it ran at.
CLOCK_BELOW_REFERENCE = 0.98
# The rates a headline can show: rate metric -> (its fraction of the measured ceiling, unit, ceiling).
HEADLINE_RATES = {"tflops": ("tflops_frac", "TFLOP/s", "matmul"), "gbps": ("gbps_frac", "GB/s", "copy"),
                  "kv_gbps": ("kv_gbps_frac", "KV GB/s", "copy")}
# Distribution panels (one per deciding config) at most: the deciding rows of min/max clauses first.
MAX_DISTRIBUTION_CONFIGS = 4

METHOD = (f"{CONFIDENCE:.0%} CIs are percentile bootstraps ({BOOTSTRAP_RESAMPLES} resamples, seed "
          f"{BOOTSTRAP_SEED} and each row's ledger seq): every resample redraws each row's kept samples "
          f"(interleaved arms paired by round; a rate from the samples of the protocol it came from), "
          f"recomputes the row's figure and aggregates the rows as the statistic does (the geomean "
          f"over the kernel's results; the clause's aggregate over its deciding rows).")


def _rng_seed(row) -> list[int]:
    return [BOOTSTRAP_SEED, int(row.seq or 0)]


def _inverse_time(metric: str) -> bool:
    """Rates and their fractions: work over the median time (a resampled median scales them)."""
    m = metric_table.BY_NAME.get(metric)
    return bool(m and m.rate and m.unit != "ms" and m.protocol == metric_table.RATES)


def rate_samples(row) -> list[float]:
    """The candidate's samples (ms) the row's rates were computed from (its rate protocol's)."""
    if metric_table.rate_protocol(row) == SUSTAINED:
        return [float(x) for x in Sustained.from_row(row.sustained or {}).samples_ms or [] if number(x) is not None]
    return arm_samples(row, "candidate")


def replicates(row, metric: str, peer: str | None = None):
    """Bootstrap replicates of ``metric`` of one result row (numpy array), None where the metric
    is not a time-derived figure or the row lacks the samples for one. ``peer``: the speedup
    over that candidate's arm of the same rounds (the bar's ``speedup vs "P"``)."""
    import numpy as np

    if peer is not None:  # the speedup's own bootstrap, the peer's arm in the baseline's place
        other, cand = peer_samples(row, peer)
        return _ratio_replicates(row, other, cand) if min(len(other), len(cand)) >= 2 else None
    value = number((row.metrics or {}).get(metric))
    if value is None or not math.isfinite(value):
        return None
    if metric == "speedup":
        base, cand = arm_samples(row, "baseline"), arm_samples(row, "candidate")
        if len(base) < 2 or len(cand) < 2:
            return None
        return _ratio_replicates(row, base, cand)
    if _inverse_time(metric):
        xs = rate_samples(row)
        if len(xs) < 2:
            return None
        return value * float(np.median(xs)) / median_replicates(xs, BOOTSTRAP_RESAMPLES, _rng_seed(row))
    return None


def _ratio_replicates(row, numerator: list[float], denominator: list[float]):
    """Replicates of the row's ratio numerator/denominator as its protocol defines the speedup:
    the ratio of medians, or under the statistic stop the median of the per-round ratios over
    the stop's rounds (``criteria.row_statistic``)."""
    stat = row_statistic(row.policy, row.timing)
    if stat is None:
        return speedup_replicates(numerator, denominator, BOOTSTRAP_RESAMPLES, _rng_seed(row))
    n = stat[0]
    return paired_replicates(numerator[:n], denominator[:n], BOOTSTRAP_RESAMPLES, _rng_seed(row))


def _aggregate(func: str, reps):
    import numpy as np

    if func == "geomean":
        return np.exp(np.mean(np.log(reps), axis=0))
    return {"min": np.min, "max": np.max, "median": np.median, "mean": np.mean}[func](reps, axis=0)


def bootstrap_ci(rows: list, metric: str, func: str, peer: str | None = None) -> tuple[float, float] | None:
    """The CI of ``func(metric [vs peer])`` over ``rows``; None when a row has no replicates or
    ``func`` is not a reducer of values (count, pass_rate: they count rows, nothing was sampled)."""
    import numpy as np

    if func not in ("geomean", "min", "max", "median", "mean") or not rows:
        return None
    reps = [replicates(r, metric, peer) for r in rows]
    if any(x is None for x in reps):
        return None
    stats = _aggregate(func, np.vstack(reps))
    alpha = (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def counted(results: list, *, include_noisy: bool) -> list:
    """The results the bar counts as measured: not impossible, not rig-noisy unless included."""
    return [r for r in results if not r.impossible and (include_noisy or not r.rig_noisy)]


def _candidates(view, results) -> list[str]:
    named = list(view.plan.candidates or [])
    return named + sorted({r.candidate for r in results} - set(named))


# ------------------------------------------------------------------ the headline rate


def bar_metrics(reg: dict) -> list[str]:
    """Metrics the bar's clauses and the primary aggregate over, in clause order."""
    plan = RegistrationSummary.from_row(reg)
    out = []
    if plan.go:
        out += [c.aggregate.metric for c in barlang.parse(plan.go).clauses()]
    if plan.primary:
        out.append(barlang.parse_aggregate(plan.primary).metric)
    return [m for m in dict.fromkeys(out) if m]


def _raw(metric: str) -> str:
    """The row metric a figure restates (tflops for tflops_at), else the metric itself."""
    spec = metric_table.BY_NAME.get(metric)
    return spec.of if spec is not None and spec.of else metric


def judged(reg: dict) -> tuple[str, ...]:
    """The metrics the bar judges, with the rate behind each judged fraction (kv_gbps for
    kv_gbps_frac) and each rate at a stated clock (tflops for tflops_at(F))."""
    named = bar_metrics(reg)
    return tuple(dict.fromkeys([*named, *map(_raw, named),
                                *(rate for rate, (frac, _, _) in HEADLINE_RATES.items() if frac in named)]))


def stated_clocks(reg: dict) -> tuple[float, ...]:
    """The SM clocks (MHz) the bar's clauses and primary state for a rate, ``tflops_at(F)``, in order."""
    plan = RegistrationSummary.from_row(reg)
    aggs = [c.aggregate for c in barlang.parse(plan.go).clauses()] if plan.go else []
    if plan.primary:
        aggs.append(barlang.parse_aggregate(plan.primary))
    return tuple(dict.fromkeys(a.at for a in aggs if a.at is not None))


def headline_rate(reg: dict, results: list) -> str | None:
    """The rate a kernel engineer reads first: the one the bar judges (or states at a clock),
    else the one nearer its measured ceiling (the bound resource: TFLOP/s for attention, GB/s for decode)."""
    for m in map(_raw, bar_metrics(reg)):
        for rate, (frac, _, _) in HEADLINE_RATES.items():
            if m in (rate, frac):
                return rate
    import statistics

    fracs = {}
    for rate, (frac, _, _) in HEADLINE_RATES.items():
        if rate == "kv_gbps":
            continue
        xs = [number(r.metrics.get(frac)) for r in results]
        xs = [x for x in xs if x is not None and math.isfinite(x)]
        if xs:
            fracs[rate] = statistics.median(xs)
    if fracs:
        return max(sorted(fracs), key=fracs.get)
    return next((rate for rate in ("tflops", "gbps") if any(number(r.metrics.get(rate)) for r in results)), None)


def datasheet_peak(row, rate: str) -> float | None:
    """The datasheet peak of ``rate`` on the row's GPU (labels only), None where unknown."""
    peaks = DATASHEET_PEAKS.get(device_label(row))
    if not peaks:
        return None
    if rate == "tflops":
        dtype = ConfigFields.from_row(row.config or {}).dtype
        if dtype == "float32" and Numerics.from_row(row.numerics or {}).allow_tf32:
            dtype = TF32_KEY
        return peaks.get(dtype)
    return peaks.get(DATASHEET_BANDWIDTH_KEY)


def measured_ceiling(row, rate: str) -> float | None:
    """The measured ceiling the row's fraction was taken of (rate / fraction), None without one."""
    value, frac = number(row.metrics.get(rate)), number(row.metrics.get(HEADLINE_RATES[rate][0]))
    if value is None or not frac or not math.isfinite(frac):
        return None
    return value / frac


# ------------------------------------------------------------------ per kernel


def _pct(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.1%}"


def kernel_rows(view, results: list, *, include_noisy: bool) -> list[dict]:
    """One row per candidate: geomean speedup [CI], its min and max with their config keys, the
    headline rate at its best with the fraction of the measured ceiling (and of the datasheet peak)."""
    reg = view.registration
    rate = headline_rate(reg, results)
    out = []
    for name in _candidates(view, results):
        mine = sorted((r for r in counted(results, include_noisy=include_noisy) if r.candidate == name),
                      key=lambda r: r.seq)
        speedups = [(number(Metrics.from_row(r.metrics).speedup), r) for r in mine]
        speedups = [(s, r) for s, r in speedups if s is not None and s > 0 and math.isfinite(s)]
        row = {"candidate": name, "n": len(speedups), "geomean": "—", "ci": "—", "min": "—", "min_key": "",
               "max": "—", "max_key": "", "rate": "—", "rate_key": "", "of_ceiling": "—", "of_datasheet": "—"}
        if speedups:
            g = math.exp(math.fsum(math.log(s) for s, _ in speedups) / len(speedups))
            ci = bootstrap_ci([r for _, r in speedups], "speedup", "geomean")
            lo, lo_row = min(speedups, key=lambda x: (x[0], x[1].seq))
            hi, hi_row = max(speedups, key=lambda x: (x[0], -x[1].seq))
            row.update(geomean=f"{g:.3f}×", ci="—" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]",
                       min=f"{lo:.3f}×", min_key=lo_row.config_key, max=f"{hi:.3f}×", max_key=hi_row.config_key)
        rated = [(number(r.metrics.get(rate)), r) for r in mine] if rate else []
        rated = [(v, r) for v, r in rated if v is not None and math.isfinite(v)]
        if rated:
            v, best = max(rated, key=lambda x: (x[0], -x[1].seq))
            ceiling, peak = measured_ceiling(best, rate), datasheet_peak(best, rate)
            row.update(rate=f"{v:.4g} {HEADLINE_RATES[rate][1]}", rate_key=best.config_key,
                       of_ceiling="—" if ceiling is None else
                       f"{_pct(v / ceiling)} of {ceiling:.4g} (measured {HEADLINE_RATES[rate][2]})",
                       of_datasheet="—" if peak is None else f"{_pct(v / peak)} of {peak:.4g} (datasheet)")
        out.append(row)
    return out


def rate_header(reg: dict, results: list) -> str:
    rate = headline_rate(reg, results)
    return f"best {HEADLINE_RATES[rate][1]}" if rate else "best rate"


# ------------------------------------------------------------------ the clauses


def margin_text(value, op: str, threshold: float) -> str:
    """``+13.6 (+2.7%)``: a clause's margin to its threshold (registration/bar.margin), as the
    verdict and the report print it; empty where there is none (==, no value)."""
    m = margin(number(value), op, threshold)
    if m is None:
        return ""
    d, rel = m
    return f"{d:+.4g}" + ("" if rel is None else f" ({rel:+.1%})")


def clause_ci(agg, outcomes: dict, *, include_noisy: bool) -> str:
    """A bar clause's CI over its deciding rows, formatted; "—" where nothing was sampled."""
    if agg.metric is None or agg.func in ("count", "pass_rate"):
        return "—"
    rows = deciding_rows(agg, outcomes, include_noisy=include_noisy)
    ci = bootstrap_ci(rows, agg.metric, agg.func, agg.peer)
    return "—" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]"


def threshold_spans(reg: dict, outcomes: dict, *, include_noisy: bool, metric: str = "speedup") -> list[tuple]:
    """(legend label, threshold, {(config_key, candidate)}) per bar clause over ``metric``: a plot
    draws each threshold only over the points its clause's filter selects."""
    plan = RegistrationSummary.from_row(reg)
    if not plan.go:
        return []
    # A clause against a peer (``speedup vs "P"``) is a ratio of two candidates, not a point of the plot.
    clauses = [c for c in barlang.parse(plan.go).clauses() if c.aggregate.metric == metric and c.aggregate.peer is None]
    out = []
    for i, c in enumerate(clauses):
        rows = deciding_rows(c.aggregate, outcomes, include_noisy=include_noisy)
        tag = f" (clause {i + 1})" if len(clauses) > 1 else ""
        out.append((f"bar{tag}: {c.aggregate.func}({metric}) {c.op} {c.threshold:g}, over the configs it filters",
                    c.threshold, {(r.config_key, r.candidate) for r in rows}))
    return out


def rate_threshold_spans(reg: dict, outcomes: dict, rate: str | None, *, include_noisy: bool) -> list[tuple]:
    """``threshold_spans`` for the bar's clauses over ``rate`` and over its fraction of the measured
    ceiling, each with whether its threshold is such a fraction: (label, threshold, pairs, of_ceiling)."""
    if rate is None:
        return []
    frac = HEADLINE_RATES[rate][0]
    return ([(*t, False) for t in threshold_spans(reg, outcomes, include_noisy=include_noisy, metric=rate)]
            + [(f"{t[0]} (× each config's measured ceiling)", t[1], t[2], True)
               for t in threshold_spans(reg, outcomes, include_noisy=include_noisy, metric=frac)])


@dataclass(frozen=True)
class Deciding:
    """A config whose samples decide a clause: the clause, the row, why it decides, and the
    peers its clauses compare it with (their arms in the same rounds decide it too)."""

    clause: str
    row: object
    why: str
    peers: tuple[str, ...] = ()


def deciding_configs(reg: dict, outcomes: dict, *, include_noisy: bool) -> list[Deciding]:
    """The rows whose samples decide the bar's metric clauses: for min/max the row holding the
    value, for another aggregate its lowest and highest rows; at most MAX_DISTRIBUTION_CONFIGS,
    a row once."""
    plan = RegistrationSummary.from_row(reg)
    if not plan.go:
        return []
    picked: list[Deciding] = []
    for clause in barlang.parse(plan.go).clauses():
        agg = clause.aggregate
        if agg.metric is None or agg.func in ("count", "pass_rate"):
            continue
        values = deciding_values(agg, outcomes, include_noisy=include_noisy)
        if not values:
            continue
        ranked = [r for r, _ in sorted(values, key=lambda rv: (rv[1], rv[0].seq))]
        ends = {"min": [ranked[0]], "max": [ranked[-1]]}.get(agg.func, [ranked[0], ranked[-1]])
        for r in ends:
            why = agg.func if agg.func in ("min", "max") else ("lowest" if r is ranked[0] else "highest")
            why = f"{why} {agg.metric}" + (f" vs {agg.peer}" if agg.peer else "")
            same = next((i for i, d in enumerate(picked) if d.row.seq == r.seq), None)
            if same is None:
                picked.append(Deciding(" ".join(clause.text.split()), r, why, (agg.peer,) if agg.peer else ()))
            elif why not in picked[same].why:  # one row deciding two clauses: named once, for both
                peers = tuple(dict.fromkeys((*picked[same].peers, *((agg.peer,) if agg.peer else ()))))
                picked[same] = Deciding(picked[same].clause, r, f"{picked[same].why}; {why}", peers)
    return picked[:MAX_DISTRIBUTION_CONFIGS]


# ------------------------------------------------------------------ against the peers


def peer_tables(reg: dict, outcomes: dict, *, include_noisy: bool) -> list[dict]:
    """Per peer the bar's clauses compare with (``speedup vs "P"``): every correct row any such
    clause selects, config by config, with the candidate's speedup over P, its 95% CI and the
    two medians of the same rounds — or, where it could not be compared, why. A clause reports
    one reduction of these; the table shows where the candidate stands at each shape."""
    plan = RegistrationSummary.from_row(reg)
    if not plan.go:
        return []
    aggs = [c.aggregate for c in barlang.parse(plan.go).clauses() if c.aggregate.peer is not None]
    if not aggs:
        return []
    rows, _ = bar_row_map(outcomes, include_noisy=include_noisy)
    tables = []
    for peer in dict.fromkeys(a.peer for a in aggs):
        lines = []
        for key, row in rows.items():
            if not row.get("correct") or not any(a.peer == peer and barlang.matching(a, [row]) for a in aggs):
                continue
            r = outcomes[key]
            value = (row.get(barlang.PEERS_KEY) or {}).get(peer)
            if value is None:
                lines.append({"key": r.config_key, "candidate": r.candidate, "value": "—", "ci": "—",
                              "medians": "—", "note": barlang.uncompared_reason(row, peer)})
                continue
            ci = bootstrap_ci([r], "speedup", "min", peer)  # over one row: that row's CI
            lines.append({"key": r.config_key, "candidate": r.candidate, "value": f"{value:.4g}",
                          "ci": "—" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]",
                          "medians": speedup_text(r, named=False, peer=peer), "note": ""})
        tables.append({"peer": peer, "rows": lines, "noted": any(x["note"] for x in lines)})
    return tables


# ------------------------------------------------------------------ banners


def _clock_banner(results: list) -> str | None:
    low = []
    for r in results:
        clock = Clock.from_row(Measurement.from_row(r.timing or {}).clock or {})
        ref = number(clock.reference_mhz)
        mhz = rates(r).sm_mhz
        if ref and mhz is not None and mhz < ref * CLOCK_BELOW_REFERENCE:
            low.append((mhz / ref, mhz, ref, r))
    if not low:
        return None
    worst = min(low, key=lambda x: (x[0], x[3].seq))
    protos = sorted({metric_table.rate_protocol(r) for *_, r in low})
    refs = sorted({ref for _, _, ref, _ in low})
    ref_text = f"{refs[0]:.0f}" if len(refs) == 1 else f"{refs[0]:.0f}–{refs[-1]:.0f}"
    return (f"{len(low)} of {len(results)} results' TFLOP/s and GB/s "
            f"were measured ({' and '.join(protos)}) at {min(x[1] for x in low):.0f}–{max(x[1] for x in low):.0f} "
            f"MHz, under the reference {ref_text} "
            f"MHz (lowest {worst[0]:.2f}× at {worst[3].candidate} @ {worst[3].config_key}); they are the rates at "
            f"those clocks. Speedups come from the interleaved rounds, each arm under one clock.")


def banners(view, outcomes: dict, results: list, *, include_noisy: bool) -> list[dict]:
    """Everything that qualifies the verdict, as {"kind", "title", "text"}: rig-noisy and impossible
    results, pairs without a result, coverage below 1, rates at a clock below the reference.
    (Amendments and re-measures are the history's notes, shown with these.)"""
    from collections import Counter

    out = []
    noisy = [r for r in results if r.rig_noisy]
    if noisy:
        out.append({"kind": "rig-noisy", "title": "Rig-noisy results", "text": (
            f"{len(noisy)} rig-noisy result{'s' if len(noisy) != 1 else ''} (the control arm outside its "
            f"tolerance): {'counted by the bar (include_noisy)' if include_noisy else 'left out of the bar'}.")})
    impossible = [r for r in results if r.impossible]
    if impossible:
        out.append({"kind": "impossible", "title": "Impossible results", "text": (
            f"{len(impossible)} result{'s' if len(impossible) != 1 else ''} faster than the device's measured "
            f"ceilings (impossible): counted as failed pairs.")})
    other = Counter(r.kind for r in outcomes.values() if r.kind != RESULT)
    if other:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(other.items()))
        out.append({"kind": "skipped", "title": "Pairs without a result", "text": (
            f"{sum(other.values())} (config, kernel) pairs have no result ({kinds}); their reasons are listed "
            f"below the plots.")})
    v = view.verdict
    held = (v.coverage if v is not None else None) or {}
    cov = Coverage.from_row(held)
    if held and cov.pairs and (cov.decided if cov.has("decided") else 0) < cov.pairs:
        floor = cov.min_coverage if cov.has("min_coverage") else "—"
        out.append({"kind": "coverage", "title": "Coverage below 1", "text": (
            f"The verdict decided on {cov.decided} of {cov.pairs} registered pairs "
            f"({cov.decided / cov.pairs:.0%}; min_coverage {floor}).")})
    elif v is None and view.n_pairs():
        pairs = {(k, c) for k, c in outcomes if c in (view.plan.candidates or [])}
        if len(pairs) < view.n_pairs():
            out.append({"kind": "coverage", "title": "Coverage below 1", "text": (
                f"{len(pairs)} of {view.n_pairs()} registered pairs have an outcome so far.")})
    clock = _clock_banner(results)
    if clock:
        out.append({"kind": "clock", "title": "Absolute rates at a clock below the reference", "text": clock})
    return out


__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CLOCK_BELOW_REFERENCE", "CONFIDENCE", "METHOD",
           "banners", "bootstrap_ci", "clause_ci", "counted", "deciding_configs", "headline_rate", "kernel_rows",
           "peer_tables", "replicates"]
