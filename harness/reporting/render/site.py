"""`bench site`: the static site's pages, from ``analysis/site.py``'s data.

Layout under the output folder, every link relative (open it from disk or serve it anywhere):

    index.html                   every line: state, verdict, headline, amendments, commit, device
    lines/<line>/report.html     the line's report (render/report.py ``write``: the same files as
                                 `bench report`), with a link back to the index added at its top
    chains/<first line>.html     an amendment chain: the headline figure per line, regressions marked

Every page is self-contained (inline CSS, plots as ``data:`` URIs); nothing is fetched. The
output is deterministic: the same ledgers give the same bytes (no generation time is written).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

from harness.vocab import metrics as metric_table
from harness.reporting.analysis.site import (COMPARED, FIRST, IMPROVED, NOT_COMPARABLE, NOT_COMPARED, REGRESSION,
                                              RULE, Chain, Headline, Site, Step)
from harness.reporting.render.console import console
from harness.reporting.render.formats import emit
from harness.reporting.render.report import jinja_env as report_env, template as report_template, write as write_report
from harness.reporting.render.plots import FIG_SIZE, empty, figure, png
from harness.reporting.render.status import status_records

INDEX = "index.html"
LINES_DIR = "lines"
CHAINS_DIR = "chains"
MARK_COLORS = {REGRESSION: "#cf222e", IMPROVED: "#1a7f37", FIRST: "#1f77b4", NOT_COMPARED: "#8c959f",
               NOT_COMPARABLE: "#8c959f"}
CHAIN_PANEL_HEIGHT = 2.6  # inches per panel of the chain plot (one per metric and protocol)
WITHIN_COLOR = "#57606a"
# A speedup's interval is often within 0.1% of 1: four decimals keep its bounds apart.
SPEEDUP_FORMAT = ".4f"
BODY = re.compile(r"<body[^>]*>")


def line_page(line: str) -> str:
    return f"{LINES_DIR}/{line}/report.html"


def chain_page(root: str) -> str:
    return f"{CHAINS_DIR}/{root}.html"


def fmt_value(h: Headline, v: float | None) -> str:
    """A headline value in its metric's format (the report's), "—" when absent."""
    if v is None:
        return "—"
    spec = SPEEDUP_FORMAT if h.metric == "speedup" else (
        metric_table.BY_NAME[h.metric].fmt if h.metric in metric_table.BY_NAME else ".4g")
    return format(v, spec)


def figure_text(h: Headline | None) -> str:
    """``513.6 TFLOP/s [513.1, 514.1]``: the value, its unit and interval."""
    if h is None or h.value is None:
        return "—"
    unit = "" if h.unit in ("", "fraction") else (h.unit if h.unit == "×" else f" {h.unit}")
    interval = f" [{fmt_value(h, h.low)}, {fmt_value(h, h.high)}]" if h.low is not None else ""
    return f"{fmt_value(h, h.value)}{unit}{interval}"


def _axis(metric: str | None, protocols) -> tuple:
    """The axis a figure is drawn on: its metric and the protocols it was timed by."""
    return metric, tuple(protocols)


def chain_points(c: Chain) -> dict[tuple, list[tuple[int, Step, float, float | None, float | None, bool]]]:
    """The chain plot's points, one axis (panel) per (metric, protocols): each line's primary on
    its own axis, and where a step was compared on a same-protocol basis (``Step.basis``), both
    lines' restated figures on that basis's axis (``restated`` True where it is not the primary).
    Points of another metric or protocol never share an axis."""
    axes: dict[tuple, list] = {}
    where = {s.headline.line: i for i, s in enumerate(c.steps)}
    by_line = {s.headline.line: s for s in c.steps}
    for i, s in enumerate(c.steps):
        h = s.headline
        if h.value is not None:
            axes.setdefault(_axis(h.metric, h.protocols), []).append((i, s, h.value, h.low, h.high, False))
    for s in c.steps:
        if s.basis is None or s.parent not in by_line:
            continue
        key = _axis(s.headline.metric, (s.basis,))
        for line in (s.parent, s.headline.line):
            h = by_line[line].headline
            if h.same is None or any(p[1].headline.line == line for p in axes.get(key, ())):
                continue
            axes.setdefault(key, []).append((where[line], by_line[line], *h.same, True))
    return axes


def chain_joins(c: Chain, points: dict) -> list[tuple[tuple, str, str]]:
    """(axis, parent, line) for each compared step: joined on the axis it was compared on only."""
    out = []
    for s in c.steps:
        if s.mark not in COMPARED or s.parent is None:
            continue
        key = _axis(s.headline.metric, (s.basis,) if s.basis else s.headline.protocols)
        on = {p[1].headline.line for p in points.get(key, ())}
        if s.parent in on and s.headline.line in on:
            out.append((key, s.parent, s.headline.line))
    return out


def chain_plot(c: Chain) -> bytes:
    """The headline figure per line of a chain, in order, with its interval, one panel per
    metric and protocol; each point coloured by its mark against the line it amends, and joined
    to it only where the two were compared on that panel's terms."""

    points = chain_points(c)
    if not points:
        fig, ax = figure()
        empty(ax, "no line of this chain has a headline figure yet")
        return png(fig)
    import matplotlib.pyplot as plt

    keys = list(points)
    fig, axs = plt.subplots(len(keys), 1, figsize=(FIG_SIZE[0], CHAIN_PANEL_HEIGHT * len(keys) + 0.6),
                            dpi=100, squeeze=False)
    joins = chain_joins(c, points)
    for ax, key in zip(axs[:, 0], keys):
        ax.grid(True, alpha=0.3)
        metric, protocols = key
        at = {}
        for i, s, v, lo, hi, restated in points[key]:
            own = (s.basis is None and not restated) or (s.basis is not None and restated)
            color = MARK_COLORS.get(s.mark, WITHIN_COLOR) if own else MARK_COLORS[NOT_COMPARED]
            err = [[v - lo], [hi - v]] if lo is not None and hi is not None else None
            ax.errorbar([i], [v], yerr=err, fmt="o", color=color, capsize=4, markersize=7,
                        markerfacecolor="white" if restated else color)
            label = (s.mark if own and s.mark != FIRST else "") + (" (restated)" if restated else "")
            if not own:  # its step was compared on another axis (the same-protocol figures)
                label = "primary: not comparable"
            ax.annotate(label.strip(), (i, v), textcoords="offset points", xytext=(8, 6), fontsize=9, color=color)
            at[s.headline.line] = (i, v)
        for k, parent, line in joins:
            if k == key:
                (x0, y0), (x1, y1) = at[parent], at[line]
                ax.plot([x0, x1], [y0, y1], color="#8c959f", lw=1, zorder=0)
        ax.set_xticks(range(len(c.steps)))
        ax.set_xticklabels([f"{s.headline.line}\n{(s.headline.measured or '—')[:10]}" for s in c.steps], fontsize=9)
        ax.set_xlim(-0.5, len(c.steps) - 0.5)
        unit = metric_table.BY_NAME[metric].unit if metric in metric_table.BY_NAME else ""
        ax.set_ylabel((metric or "headline") + (f" ({unit})" if unit else ""))
        ax.set_title(f"{metric or 'headline'}, {' and '.join(protocols) or 'no protocol'}", fontsize=10)
    fig.suptitle(f"{c.root}: headline figure per line (one panel per metric and protocol)", fontsize=11)
    return png(fig)


def _env():
    env = report_env()
    env.autoescape = True
    return env


def _template(name: str) -> str:
    return report_template(name)


def _paged(site: Site) -> set[str]:
    return {e.status.line for e in site.entries if e.page}


def index_html(site: Site) -> str:
    return _env().from_string(_template("site_index.html.j2")).render(
        site=site, paged=_paged(site), style=_template("site.css.j2"), figure=figure_text, line_page=line_page, chain_page=chain_page)


def chain_html(site: Site, c: Chain, png: bytes) -> str:
    return _env().from_string(_template("site_chain.html.j2")).render(
        c=c, paged=_paged(site), style=_template("site.css.j2"), figure=figure_text, line_page=line_page, rule=RULE,
        image=base64.b64encode(png).decode("ascii"))


def _nav(line: str, chain: str | None) -> str:
    """The link bar a line page gets at its top: back to the index, to its chain."""
    from markupsafe import escape

    up = "../../"
    links = [f'<a href="{up}{INDEX}">← every line</a>']
    if chain:
        links.append(f'<a href="{up}{escape(chain_page(chain))}">amendment chain of {escape(chain)}</a>')
    # Styled inline: the report's own stylesheet does not know it.
    return ('<nav class="site-nav" style="font:13px system-ui,sans-serif;padding:8px 28px;background:#1d2330">'
            + " · ".join(x.replace("<a ", '<a style="color:#fff" ') for x in links) + "</nav>")


def write_site(site: Site, reports: dict, out: Path) -> dict[str, Path]:
    """Every page under ``out``: the index, each line's report, each chain. Returns name → path
    (``index``, ``line:<line>``, ``chain:<root>``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chain_of = {e.status.line: e.chain for e in site.entries}
    paths: dict[str, Path] = {}
    for line, (view, data) in reports.items():
        written = write_report(view, out / LINES_DIR / line, data)
        page = written["html"]
        text, n = BODY.subn(lambda m: m.group(0) + _nav(line, chain_of.get(line)), page.read_text(encoding="utf-8"),
                            count=1)
        if n:
            page.write_text(text, encoding="utf-8")
        paths[f"line:{line}"] = page
    for c in site.chains:
        p = out / chain_page(c.root)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(chain_html(site, c, chain_plot(c)), encoding="utf-8")
        paths[f"chain:{c.root}"] = p
    paths["index"] = out / INDEX
    paths["index"].write_text(index_html(site), encoding="utf-8")
    return paths


def _headline_record(h: Headline | None) -> dict | None:
    if h is None:
        return None
    return {"expr": h.expr, "metric": h.metric, "unit": h.unit, "value": h.value, "low": h.low, "high": h.high,
            "decided": h.decided, "commit": h.commit, "measured": h.measured, "device": h.device,
            "protocols": list(h.protocols),
            "same_basis": None if h.same is None else {"value": h.same[0], "low": h.same[1], "high": h.same[2]}}


def site_document(site: Site) -> dict:
    """`bench site --format json`: the index and the chain pages as data — each line's state
    (as `bench status --format json` gives it), headline figure and chain, and each chain's
    steps with their marks. A line's own page is `bench report LINE --format json`."""
    states = status_records([e.status for e in site.entries])
    lines = [{**state, "headline": _headline_record(e.headline), "amends": e.amends,
              "amended_by": list(e.amended_by), "chain": e.chain, "page": e.page}
             for state, e in zip(states, site.entries)]
    chains = [{"root": c.root, "text": c.text, "lines": list(c.lines), "regressions": c.regressions,
               "steps": [{"line": s.headline.line, "depth": s.depth, "parent": s.parent, "mark": s.mark,
                          "change": s.change, "why": s.why, "caveats": list(s.caveats), "basis": s.basis,
                          "headline": _headline_record(s.headline)} for s in c.steps]}
              for c in site.chains]
    return {"rule": site.rule, "lines": lines, "chains": chains}


def emit_site(site: Site) -> None:
    """``site_document`` on stdout; nothing written."""
    emit("json", [], site_document(site))


def render_site(site: Site, paths: dict[str, Path]) -> None:
    """One line per chain with a regression, then where the site went."""
    c = console()
    for ch in site.chains:
        for s in ch.steps:
            if s.mark == REGRESSION:
                c.print(f"regression: {s.headline.line} against {s.parent}: {s.why}"
                        + (f" ({'; '.join(s.caveats)})" if s.caveats else ""), markup=False)
    pages = sum(k.startswith("line:") for k in paths)
    c.print(f"wrote {paths['index']}: {len(site.entries)} lines, {pages} line pages, "
            f"{len(site.chains)} chain page{'s' if len(site.chains) != 1 else ''}", markup=False)
