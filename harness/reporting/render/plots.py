"""The report's figures, drawn with matplotlib (Agg) from ledger rows; each returns PNG bytes.

A figure with nothing to draw (no clock readings on a CPU, no ceilings) still renders,
saying why, so a report never has a broken image.
"""

from __future__ import annotations

import io

FIG_SIZE = (8.0, 3.6)  # inches
DPI = 100
# Kernels get fixed colours in name order so one kernel looks the same in every plot.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=FIG_SIZE, dpi=DPI)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _colors(results: list[dict]) -> dict[str, str]:
    names = sorted({r.candidate for r in results})
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _axis_keys(keys: list[str]) -> list[str]:
    """Config keys without the parts every one of them shares (those say nothing on an axis)."""
    from harness.reporting.render.rows import shorten

    short, _ = shorten(keys, "/")
    return [short[k] for k in keys]


def speedup_plot(results: list[dict], thresholds: list[tuple[str, float]]) -> bytes:
    """Speedup over the baseline per shape, 95% CI bars, the bar's speedup thresholds drawn."""
    fig, ax = _figure()
    if not results:
        _empty(ax, "no result rows yet")
        return _png(fig)
    keys = sorted({r.config_key for r in results})
    colors = _colors(results)
    n = len(colors)
    width = 0.7 / max(n, 1)
    for i, (name, color) in enumerate(colors.items()):
        xs, ys, lo, hi = [], [], [], []
        for r in results:
            if r.candidate != name:
                continue
            m = r.metrics
            x = keys.index(r.config_key) + (i - (n - 1) / 2) * width
            xs.append(x)
            ys.append(m["speedup"])
            lo.append(max(m["speedup"] - m.get("speedup_ci_low", m["speedup"]), 0))
            hi.append(max(m.get("speedup_ci_high", m["speedup"]) - m["speedup"], 0))
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=color, label=name, capsize=3, markersize=5)
    ax.axhline(1.0, color="#333", lw=1, ls="-", label="baseline (1×)")
    for text, value in thresholds:
        ax.axhline(value, color="#c00", lw=1.2, ls="--", label=f"bar: {text}" if len(text) < 60 else f"bar ≥ {value:g}")
    ax.set_xticks(range(len(keys)), _axis_keys(keys), rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("speedup over baseline (×)")
    ax.set_title("Speedup by shape (interleaved rounds, 95% bootstrap CI)", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


# A rate's marker says the protocol it was measured under (governance/metrics.py PROTOCOLS).
PROTOCOL_MARKERS = {"interleaved": "o", "sustained": "D"}


def roofline_plot(results: list[dict]) -> bytes:
    """Achieved TFLOP/s against arithmetic intensity, under the device's copy and matmul ceilings;
    each point's marker names the protocol its rate was measured under."""
    import numpy as np

    from harness.governance.metrics import rate_protocol

    fig, ax = _figure()
    pts = []
    for r in results:
        m = r.metrics
        tf, gb = m.get("tflops"), m.get("gbps")
        tff, gbf = m.get("tflops_frac"), m.get("gbps_frac")
        if all(isinstance(v, (int, float)) and v > 0 for v in (tf, gb)):
            pts.append((r, tf, gb, tff if isinstance(tff, (int, float)) and tff > 0 else None,
                        gbf if isinstance(gbf, (int, float)) and gbf > 0 else None))
    if not pts:
        _empty(ax, "no rates in the result rows")
        return _png(fig)
    colors = _colors([p[0] for p in pts])
    seen = set()
    for r, tf, gb, _, _ in pts:
        ai = tf * 1e12 / (gb * 1e9)
        name = r.candidate
        ax.scatter([ai], [tf], color=colors[name], s=24, marker=PROTOCOL_MARKERS[rate_protocol(r)],
                   label=None if name in seen else name, zorder=3)
        seen.add(name)
    used = sorted({rate_protocol(r) for r, *_ in pts})
    for proto in used:  # the marker legend: which protocol each rate comes from
        ax.scatter([], [], color="#777", s=24, marker=PROTOCOL_MARKERS[proto], label=f"{proto} rate")
    roofs = sorted({(round(tf / tff, 6), round(gb / gbf, 6)) for _, tf, gb, tff, gbf in pts if tff and gbf})
    ais = [tf * 1e12 / (gb * 1e9) for _, tf, gb, _, _ in pts]
    x = np.logspace(np.log10(min(ais) / 4), np.log10(max(ais) * 4), 200)
    for j, (peak_tf, peak_gb) in enumerate(roofs):
        ax.plot(x, np.minimum(peak_tf, peak_gb * 1e9 * x / 1e12), color="#555", lw=1.2, ls=("-", "--", ":", "-.")[j % 4],
                label=f"ceiling {peak_tf:.4g} TFLOP/s, {peak_gb:.4g} GB/s")
    if not roofs:
        ax.text(0.02, 0.95, "no measured device ceilings in these rows", transform=ax.transAxes, fontsize=8,
                va="top", color="#555")
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # decades only; intensity spans several
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved, minimum bytes)")
    ax.set_ylabel(f"achieved TFLOP/s ({' and '.join(used)})")
    ax.set_title(f"Achieved rate against the device ceilings (roofline; rates: {', '.join(used)})", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def control_plot(results: list[dict], tolerance: float | None) -> bytes:
    """Distribution of the control ratio (baseline against itself) over the configs."""
    fig, ax = _figure()
    values = sorted({(r.config_key, r.metrics.get("control")) for r in results
                     if isinstance(r.metrics.get("control"), (int, float))})
    ratios = [v for _, v in values]
    if not ratios:
        _empty(ax, "no control ratios in the result rows")
        return _png(fig)
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
    return _png(fig)


def clock_plot(results: list[dict]) -> bytes:
    """Per-round minimum SM clock of the interleaved rounds over the sweep, in ledger order,
    dropped rounds marked; and each sustained phase's mean clock (the clock its rates were
    measured at), spread over its config's rounds."""
    from harness.governance.metrics import SUSTAINED, rate_protocol

    fig, ax = _figure()
    seen, kept_x, kept_y, drop_x, drop_y, bounds, notes = {}, [], [], [], [], [], set()
    sustained: dict[tuple, list[float]] = {}
    threshold = None
    i = 0
    for r in sorted(results, key=lambda r: r.seq):
        timing = r.timing or {}
        rounds = timing.get("rounds") or {}
        group = (r.config_key, tuple(rounds.get("t0") or ()))
        sus = r.sustained or {}
        if rate_protocol(r) == SUSTAINED and isinstance(sus.get("sm_mhz"), (int, float)):
            sustained.setdefault(group, []).append(sus["sm_mhz"])
        if group in seen:  # the candidates of one config share its rounds
            continue
        seen[group] = (i, len(rounds.get("min_sm_mhz") or []))
        if timing.get("clock_note"):
            notes.add(timing["clock_note"])
        mhz = rounds.get("min_sm_mhz") or []
        dropped = set(rounds.get("dropped") or [])
        bounds.append(i)
        for j, v in enumerate(mhz):
            if isinstance(v, (int, float)):
                (drop_x if j in dropped else kept_x).append(i + j)
                (drop_y if j in dropped else kept_y).append(v)
        i += len(mhz)
        clock = timing.get("clock") or {}
        ref, thr = clock.get("reference_mhz"), (r.policy or {}).get("throttle_threshold")
        if isinstance(ref, (int, float)) and isinstance(thr, (int, float)):
            threshold = ref * thr
    sus_x, sus_y = [], []
    for group, clocks in sustained.items():
        start, n = seen[group]
        for k, mhz in enumerate(clocks):
            sus_x.append(start + max(n - 1, 0) * (k + 1) / (len(clocks) + 1))
            sus_y.append(mhz)
    if not kept_y and not drop_y and not sus_y:
        _empty(ax, "no SM clock readings in these rows" + (f": {'; '.join(sorted(notes))}" if notes else ""))
        return _png(fig)
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
    return _png(fig)
