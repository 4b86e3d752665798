"""The report's figures, drawn with matplotlib (Agg) from ledger rows; each returns PNG bytes.

A figure with nothing to draw (no clock readings on a CPU, no ceilings) still renders,
saying why, so a report never has a broken image.
"""

from __future__ import annotations

import io
import math

from harness.ledger.payloads import Clock, Measurement, Metrics, Policy, Rounds, Sustained
from harness.reporting.analysis.summary import HEADLINE_RATES, datasheet_peak, measured_ceiling, rate_samples
from harness.reporting.analysis.panels import panels, size_label, size_of
from harness.reporting.analysis.report import baseline_rate
from harness.vocab.metrics import SUSTAINED, rate_protocol
from harness.reporting.analysis.lines import arm_samples
from harness.measurement.timing.results import arm_name

FIG_SIZE = (8.0, 3.6)  # inches
DPI = 100
# Kernels get fixed colours in name order so one kernel looks the same in every plot.
# Panels (speedup and rates against size): columns a row, inches per row and the figure's width.
PANEL_COLUMNS = 2
PANEL_HEIGHT = 2.9
PANEL_FIG_WIDTH = 10.0
PANEL_X_PAD = 1.35  # the size axis reaches this factor beyond the smallest and largest size
# A threshold dash spans this factor either side of its config's size (log2 axis: ~0.4 of a doubling).
THRESHOLD_HALF_WIDTH = 1.3
# Roofline: points whose intensities all lie within this factor are one intensity (decode), and
# kernels are then set this factor apart so that none hides another.
ROOFLINE_SAME_INTENSITY = 1.05
ROOFLINE_DODGE = 1.12
ROOFLINE_SIZE = (PANEL_FIG_WIDTH, 4.2)  # inches: shown the page's width
DISTRIBUTION_ROW_HEIGHT = 2.2
DISTRIBUTION_FENCE = 3.0  # a violin draws the samples within Tukey's far-out fences (3 IQR)
LEGEND_ROW_INCHES = 0.22
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def figure(size=FIG_SIZE):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, dpi=DPI)
    ax.grid(True, alpha=0.3)
    return fig, ax


def png(fig, layout: bool = True) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    if layout:
        fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _colors(results: list[dict]) -> dict[str, str]:
    names = sorted({r.candidate for r in results})
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _grid(n: int, *, width: float = PANEL_FIG_WIDTH, height: float = PANEL_HEIGHT, sharey: bool = False):
    """A figure of ``n`` panels, at most PANEL_COLUMNS a row; the axes in reading order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(PANEL_COLUMNS, max(n, 1))
    rows = -(-max(n, 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height * rows + 0.8), dpi=DPI, squeeze=False,
                             sharey=sharey)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:
        ax.grid(True, alpha=0.3)
    return fig, flat[:n]


def _size_axis(ax, rows) -> None:
    """A log2 axis of the rows' sizes (their workload's size axis), each labelled by its number
    (never sorted as text)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted({size_of(r) for r in rows})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if ticks:
        ax.set_xlim(ticks[0] / PANEL_X_PAD, ticks[-1] * PANEL_X_PAD)
    ax.set_xlabel(f"{size_label(rows)} (log2 axis)", fontsize=8)


def _figure_legend(fig, axes) -> None:
    """One legend under the panels: every labelled artist once."""
    seen = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)), fontsize=7,
                   frameon=False, bbox_to_anchor=(0.5, 0.0))


def _finish_panels(fig, axes, title: str):
    """The title above the panels, one legend under them, laid out: the figure."""
    fig.suptitle(title, fontsize=10)
    _figure_legend(fig, axes)
    n_labels = len({label for ax in axes for label in ax.get_legend_handles_labels()[1]})
    legend_in = LEGEND_ROW_INCHES * -(-n_labels // 4) + 0.1  # the legend's rows under the panels
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1 - 0.35 / fig.get_figheight()))
    return fig


def speedup_plot(results: list[dict], thresholds=()) -> bytes:
    """``speedup_figure`` as PNG bytes."""
    return png(speedup_figure(results, thresholds), layout=False)


def speedup_figure(results: list[dict], thresholds=()):
    """Speedup against a numeric size axis, one panel per (dtype, causal, head_dim, and any other
    field that varies), a line per kernel with its 95% CI band; each speedup clause of the bar
    drawn as a threshold only over the (config, kernel) points its filter selects.

    ``thresholds``: (label, threshold, {(config_key, candidate)}) per speedup clause."""
    rows = [r for r in results if size_of(r) is not None and isinstance(Metrics.from_row(r.metrics).speedup, (int, float))]
    if not rows:
        fig, ax = figure()
        empty(ax, "no result rows yet")
        fig.tight_layout()
        return fig
    colors = _colors(rows)
    groups = panels(rows)
    fig, axes = _grid(len(groups))
    for ax, (title, mine) in zip(axes, groups):
        for name, color in colors.items():
            pts = sorted((size_of(r), m.speedup, m.speedup_ci_low, m.speedup_ci_high)
                         for r in mine if r.candidate == name for m in (Metrics.from_row(r.metrics),))
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            lo = [p[2] if isinstance(p[2], (int, float)) and math.isfinite(p[2]) else p[1] for p in pts]
            hi = [p[3] if isinstance(p[3], (int, float)) and math.isfinite(p[3]) else p[1] for p in pts]
            ax.fill_between(xs, lo, hi, color=color, alpha=0.25, lw=0, label="95% CI (bootstrap, per config)")
            ax.plot(xs, ys, "-o", color=color, label=name, markersize=4, lw=1.4)
        ax.axhline(1.0, color="#333", lw=0.8, label="baseline (1×)")
        for label, value, pairs in thresholds:
            xs = sorted({size_of(r) for r in mine if (r.config_key, r.candidate) in pairs})
            for x in xs:  # a dash over each config the clause filters, nowhere else
                ax.hlines(value, x / THRESHOLD_HALF_WIDTH, x * THRESHOLD_HALF_WIDTH, color="#c00", lw=2.2,
                          ls=(0, (3, 1.5)), label=label, zorder=4)
        _size_axis(ax, mine)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("speedup over baseline (×)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    return _finish_panels(fig, axes, "Speedup against size (interleaved rounds), 95% bootstrap CI bands; "
                                     "red dashes: the bar's threshold where its clause applies")


def rates_plot(results: list[dict], rate: str | None, thresholds=()) -> bytes:
    """``rates_figure`` as PNG bytes."""
    return png(rates_figure(results, rate, thresholds), layout=False)


def rates_figure(results: list[dict], rate: str | None, thresholds=()):
    """The headline rate (TFLOP/s or GB/s) against size, per panel, a line per kernel and the
    baseline, under the device's measured ceiling and — labelled as such — its datasheet peak;
    the bar's clauses over the rate (or its fraction of the ceiling, drawn as that fraction of
    each config's ceiling) only over the configs they filter.

    ``thresholds``: (label, threshold, {(config_key, candidate)}, of_ceiling) per clause."""
    rows = [r for r in results if rate and size_of(r) is not None and isinstance(r.metrics.get(rate), (int, float))]
    if not rows:
        fig, ax = figure()
        empty(ax, "no rates in the result rows")
        fig.tight_layout()
        return fig
    frac, unit, ceiling_name = HEADLINE_RATES[rate]
    colors = _colors(rows)
    groups = panels(rows)
    fig, axes = _grid(len(groups))
    for ax, (title, mine) in zip(axes, groups):
        for name, color in colors.items():
            pts = sorted((size_of(r), r.metrics[rate]) for r in mine if r.candidate == name)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color=color, label=name, markersize=4)
        base = {}
        for r in sorted(mine, key=lambda r: r.seq):
            v = baseline_rate(r, rate)
            if v is not None:
                base.setdefault(size_of(r), v)
        if base:
            xs = sorted(base)
            ax.plot(xs, [base[x] for x in xs], "--s", color="#777", markersize=3, lw=1,
                    label=f"{mine[0].baseline} (baseline)")
        ceilings = sorted({round(c, 6) for c in (measured_ceiling(r, rate) for r in mine) if c})
        for c in ceilings:
            ax.axhline(c, color="#222", lw=1.2, label=f"measured {ceiling_name} ceiling")
            ax.text(1.01, c, f"{c:.4g} measured", va="center", ha="left", fontsize=7, color="#222",
                    transform=ax.get_yaxis_transform(), clip_on=False)  # right of the panel: no data there
        peaks = sorted({p for p in (datasheet_peak(r, rate) for r in mine) if p})
        for p in peaks:
            ax.axhline(p, color="#888", lw=1, ls=":", label="datasheet peak (not measured)")
            ax.text(1.01, p, f"{p:.4g} datasheet", va="center", ha="left", fontsize=7, color="#666",
                    transform=ax.get_yaxis_transform(), clip_on=False)
        for label, value, pairs, of_ceiling in thresholds:
            for r in sorted(mine, key=lambda r: r.seq):
                y = value * (measured_ceiling(r, rate) or math.nan) if of_ceiling else value
                if (r.config_key, r.candidate) in pairs and math.isfinite(y):
                    x = size_of(r)
                    ax.hlines(y, x / THRESHOLD_HALF_WIDTH, x * THRESHOLD_HALF_WIDTH, color="#c00", lw=2.2,
                              ls=(0, (3, 1.5)), label=label, zorder=4)
        top = max([r.metrics[rate] for r in mine] + ceilings + peaks + list(base.values()))
        ax.set_ylim(0, top * 1.12)
        _size_axis(ax, mine)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(f"achieved {unit}", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    return _finish_panels(fig, axes, f"Achieved {unit} against size, under the measured {ceiling_name} ceiling "
                                     f"(and the datasheet peak, dotted)")


# A rate's marker says the protocol it was measured under (vocab/metrics.py PROTOCOLS).
PROTOCOL_MARKERS = {"interleaved": "o", "sustained": "D"}


def roofline_plot(results: list[dict]) -> bytes:
    """``roofline_figure`` as PNG bytes."""
    return png(roofline_figure(results), layout=False)


def roofline_figure(results: list[dict]):
    """Achieved TFLOP/s against arithmetic intensity, under the device's measured copy and matmul
    roofs (and the datasheet's, dotted); each point's marker names the protocol its rate was
    measured under. Kernels at one intensity (decode: every config has the same FLOP per byte)
    are set side by side, a small step apart, so the points do not hide each other."""
    import numpy as np

    fig, ax = figure(ROOFLINE_SIZE)
    pts = []
    for r in results:
        m = Metrics.from_row(r.metrics)
        tf, gb = m.tflops, m.gbps
        tff, gbf = m.tflops_frac, m.gbps_frac
        if all(isinstance(v, (int, float)) and v > 0 for v in (tf, gb)):
            pts.append((r, tf, gb, tff if isinstance(tff, (int, float)) and tff > 0 else None,
                        gbf if isinstance(gbf, (int, float)) and gbf > 0 else None))
    if not pts:
        empty(ax, "no rates in the result rows")
        fig.tight_layout()
        return fig
    colors = _colors([p[0] for p in pts])
    names = list(colors)
    ais = [tf * 1e12 / (gb * 1e9) for _, tf, gb, _, _ in pts]
    dodge = (max(ais) / min(ais)) < ROOFLINE_SAME_INTENSITY
    seen = set()
    for (r, tf, gb, _, _), ai in zip(pts, ais):
        name = r.candidate
        x = ai * ROOFLINE_DODGE ** (names.index(name) - (len(names) - 1) / 2) if dodge else ai
        ax.scatter([x], [tf], color=colors[name], s=24, marker=PROTOCOL_MARKERS[rate_protocol(r)],
                   label=None if name in seen else name, zorder=3)
        seen.add(name)
    used = sorted({rate_protocol(r) for r, *_ in pts})
    for proto in used:  # the marker legend: which protocol each rate comes from
        ax.scatter([], [], color="#777", s=24, marker=PROTOCOL_MARKERS[proto], label=f"{proto} rate")
    roofs = sorted({(round(tf / tff, 6), round(gb / gbf, 6)) for _, tf, gb, tff, gbf in pts if tff and gbf})
    sheet = sorted({(datasheet_peak(r, "tflops"), datasheet_peak(r, "gbps")) for r, *_ in pts
                    if datasheet_peak(r, "tflops") and datasheet_peak(r, "gbps")})
    ridges = [t * 1e12 / (g * 1e9) for t, g in roofs + sheet]
    lo_x, hi_x = min(ais + ridges) / 4, max(ais + ridges) * 4
    x = np.logspace(np.log10(lo_x), np.log10(hi_x), 200)
    for j, (peak_tf, peak_gb) in enumerate(roofs):
        ax.plot(x, np.minimum(peak_tf, peak_gb * 1e9 * x / 1e12), color="#333", lw=1.2,
                ls=("-", "--", "-.")[j % 3], label=f"measured roof: {peak_tf:.4g} TFLOP/s, {peak_gb:.4g} GB/s copy")
    for peak_tf, peak_gb in sheet:
        ax.plot(x, np.minimum(peak_tf, peak_gb * 1e9 * x / 1e12), color="#999", lw=1, ls=":",
                label=f"datasheet roof: {peak_tf:.4g} TFLOP/s, {peak_gb:.4g} GB/s")
    if not roofs:
        ax.text(0.02, 0.95, "no measured device ceilings in these rows", transform=ax.transAxes, fontsize=8,
                va="top", color="#555")
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    tops = [t for t, _ in roofs + sheet] + [tf for _, tf, *_ in pts]
    ax.set_ylim(min(tf for _, tf, *_ in pts) / 4, max(tops) * 2)
    ax.xaxis.set_minor_formatter(NullFormatter())  # decades only; intensity spans several
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved, minimum bytes; log axis)")
    ax.set_ylabel(f"achieved TFLOP/s ({' and '.join(used)})")
    ax.set_title("Roofline: achieved rate against the device's roofs"
                 + (" (one intensity: kernels set side by side)" if dodge else ""), fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _trimmed(xs: list[float]) -> list[float]:
    """The samples within Tukey's far-out fences (DISTRIBUTION_FENCE interquartile ranges beyond
    the quartiles): one warm-up outlier would otherwise flatten a violin into a line. The median
    in the title is of every sample, and the title counts those not drawn."""
    import numpy as np

    if len(xs) < 4:
        return list(xs)
    q1, q3 = np.quantile(xs, [0.25, 0.75])
    lo, hi = q1 - DISTRIBUTION_FENCE * (q3 - q1), q3 + DISTRIBUTION_FENCE * (q3 - q1)
    return [x for x in xs if lo <= x <= hi]


def distribution_plot(deciding: list, short: dict[str, str] | None = None) -> bytes:
    """The kept samples of the configs that decide the bar's metric clauses: per config, the
    candidate's interleaved rounds beside the baseline's and the control's (and its sustained
    calls where its rates came from them), each arm a violin with its median marked."""
    if not deciding:
        fig, ax = figure()
        empty(ax, "no clause over a measured metric: no deciding samples to show")
        return png(fig)

    sustained = any(rate_protocol(d.row) == SUSTAINED for d in deciding)
    # A clause against a peer is decided by the peer's arm in the same rounds: one column per
    # peer position (a row whose clauses name fewer peers leaves the rest empty).
    n_peers = max(len(d.peers) for d in deciding)
    arms = ["candidate", *(f"peer{i}" for i in range(n_peers)), *(["sustained"] if sustained else []),
            "baseline", "control"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(deciding), len(arms), figsize=(PANEL_FIG_WIDTH, DISTRIBUTION_ROW_HEIGHT * len(deciding)
                                                                + 0.6), dpi=DPI, squeeze=False)
    colors = _colors([d.row for d in deciding])
    short = short or {}
    for i, d in enumerate(deciding):
        r = d.row
        for j, arm in enumerate(arms):
            ax = axes[i][j]
            ax.grid(True, alpha=0.3, axis="y")
            if arm == "sustained":
                xs = rate_samples(r) if rate_protocol(r) == SUSTAINED else []
                label = f"{r.candidate}, sustained"
            elif arm.startswith("peer"):
                i_peer = int(arm.removeprefix("peer"))
                peer = d.peers[i_peer] if i_peer < len(d.peers) else None
                xs = arm_samples(r, arm_name(peer)) if peer else []
                label = f"{peer} (peer), interleaved" if peer else "no peer in its clauses"
            else:
                xs = arm_samples(r, arm)
                label = {"candidate": f"{r.candidate}, interleaved", "baseline": f"{r.baseline} (baseline)",
                         "control": "control (baseline again)"}[arm]
            drawn = _trimmed(xs)
            if len(drawn) < 2 or max(drawn) == min(drawn):
                ax.text(0.5, 0.5, "no samples" if not xs else f"{len(xs)} sample(s)", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8, color="#555")
                ax.set_xticks([])
            else:
                color = (colors[r.candidate] if arm in ("candidate", "sustained") else
                         colors.get(peer, "#888") if arm.startswith("peer") else "#888")
                parts = ax.violinplot([drawn], showmedians=True, showextrema=True)
                for body in parts["bodies"]:
                    body.set_facecolor(color)
                    body.set_alpha(0.5)
                for key in ("cmedians", "cmins", "cmaxes", "cbars"):
                    parts[key].set_color(color if key == "cmedians" else "#555")
                ax.set_xticks([])
            import statistics

            med = statistics.median(xs) if xs else None
            cut = len(xs) - len(drawn)
            ax.set_title(label + (f"\nmedian {med:.4g} ms, n={len(xs)}" if med is not None else "")
                         + (f"\n{cut} beyond {DISTRIBUTION_FENCE:g} IQR not drawn"
                            if cut else ""), fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
            if j == 0:
                ax.set_ylabel(f"{short.get(r.config_key, r.config_key)}\n({d.why}) — ms", fontsize=7)
    fig.suptitle("Samples of the configs deciding the bar's clauses (kept interleaved rounds; sustained calls)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return png(fig, layout=False)


def control_plot(results: list[dict], tolerance: float | None) -> bytes:
    """Distribution of the control ratio (baseline against itself) over the configs."""
    fig, ax = figure()
    values = sorted({(r.config_key, Metrics.from_row(r.metrics).control) for r in results
                     if isinstance(Metrics.from_row(r.metrics).control, (int, float))})
    ratios = [v for _, v in values]
    if not ratios:
        empty(ax, "no control ratios in the result rows")
        return png(fig)
    lo, hi = min(ratios + [1 - (tolerance or 0)]), max(ratios + [1 + (tolerance or 0)])
    pad = (hi - lo) * 0.1 or 0.01
    ax.hist(ratios, bins=min(30, max(5, len(ratios))), range=(lo - pad, hi + pad), color="#1f77b4", alpha=0.8)
    ax.axvline(1.0, color="#333", lw=1)
    if tolerance:
        ax.axvspan(1 - tolerance, 1 + tolerance, color="#2ca02c", alpha=0.12, label=f"tolerance ±{tolerance:.1%}")
        ax.legend(fontsize=7)
    ax.set_xlabel("control ratio (baseline median / its second copy's median)")
    ax.set_ylabel("configs")
    ax.set_title(f"Control ratio over {len(ratios)} configs (1 = the rig agrees with itself)", fontsize=10)
    return png(fig)


def clock_plot(results: list[dict]) -> bytes:
    """Per-round minimum SM clock of the interleaved rounds over the sweep, in ledger order,
    dropped rounds marked; and each sustained phase's mean clock (the clock its rates were
    measured at), spread over its config's rounds."""
    fig, ax = figure()
    seen, kept_x, kept_y, drop_x, drop_y, bounds, notes = {}, [], [], [], [], [], set()
    sustained: dict[tuple, list[float]] = {}
    threshold = None
    i = 0
    for r in sorted(results, key=lambda r: r.seq):
        timing = Measurement.from_row(r.timing or {})
        rounds = Rounds.from_row(timing.rounds or {})
        group = (r.config_key, tuple(rounds.t0 or ()))
        sus = Sustained.from_row(r.sustained or {})
        if rate_protocol(r) == SUSTAINED and isinstance(sus.sm_mhz, (int, float)):
            sustained.setdefault(group, []).append(sus.sm_mhz)
        if group in seen:  # the candidates of one config share its rounds
            continue
        seen[group] = (i, len(rounds.min_sm_mhz or []))
        if timing.clock_note:
            notes.add(timing.clock_note)
        mhz = rounds.min_sm_mhz or []
        dropped = set(rounds.dropped or [])
        bounds.append(i)
        for j, v in enumerate(mhz):
            if isinstance(v, (int, float)):
                (drop_x if j in dropped else kept_x).append(i + j)
                (drop_y if j in dropped else kept_y).append(v)
        i += len(mhz)
        clock = Clock.from_row(timing.clock or {})
        ref, thr = clock.reference_mhz, Policy.from_row(r.policy or {}).throttle_threshold
        if isinstance(ref, (int, float)) and isinstance(thr, (int, float)):
            threshold = ref * thr
    sus_x, sus_y = [], []
    for group, clocks in sustained.items():
        start, n = seen[group]
        for k, mhz in enumerate(clocks):
            sus_x.append(start + max(n - 1, 0) * (k + 1) / (len(clocks) + 1))
            sus_y.append(mhz)
    if not kept_y and not drop_y and not sus_y:
        empty(ax, "no SM clock readings in these rows" + (f": {'; '.join(sorted(notes))}" if notes else ""))
        return png(fig)
    ax.plot(kept_x, kept_y, ".", color="#1f77b4", markersize=3, label="kept interleaved round (min)")
    if sus_x:
        ax.plot(sus_x, sus_y, "D", color="#ff7f0e", markersize=5, label="sustained phase, mean (its rates' clock)")
    if drop_x:
        ax.plot(drop_x, drop_y, "x", color="#d62728", markersize=6, label=f"dropped round ({len(drop_x)})")
    if threshold:
        ax.axhline(threshold, color="#d62728", lw=1, ls="--", label="drop threshold (interleaved rounds)")
    for b in bounds[1:]:
        ax.axvline(b - 0.5, color="#bbb", lw=0.5)
    ax.set_xlabel("timed round, in sweep order (grey lines: next config)")
    ax.set_ylabel("SM clock (MHz)")
    ax.set_title("SM clock over the sweep: interleaved rounds" + (" and sustained phases" if sus_x else ""),
                 fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    return png(fig)
