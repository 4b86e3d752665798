"""`bench report LINE`: the report's data rendered as Markdown and one self-contained HTML page.

``report_data`` (``analysis/report.py``) is rendered through two jinja2 templates
(``templates/report.md.j2``, ``templates/report.html.j2``); the plots (``plots.py``) are PNG
files beside the Markdown and base64 ``data:`` URIs inside the HTML, so the page needs
nothing else. Rendering is deterministic: the same ledger gives the same text, byte for byte.
"""

from __future__ import annotations

import base64
import functools
from importlib import resources
from pathlib import Path

from harness.ledger.payloads import Policy
from harness.reporting.analysis.lines import LineView
from harness.reporting.analysis.report import report_data
from harness.reporting.render.console import console
from harness.reporting.render import plots
from harness.workloads.keys import shorten

PLOTS = (("speedup", "Speedup against size, per dtype and masking, with CI bands and the bar's thresholds"),
         ("rates", "Achieved rate against size, under the measured ceiling and the datasheet peak"),
         ("roofline", "Roofline: achieved rate against arithmetic intensity"),
         ("distribution", "Samples of the configs deciding the bar: candidate, baseline, control"),
         ("control", "Control ratio"), ("clock", "SM clock over the sweep"))


@functools.lru_cache(maxsize=None)
def template(name: str) -> str:
    """A template's text, shipped as package data beside this module."""
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def figures(view: LineView) -> dict[str, bytes]:
    """name → PNG bytes for the report's plots (PLOTS, in order)."""
    from harness.reporting.analysis import summary

    reg = view.registration
    noisy = bool(view.plan.include_noisy)
    outcomes = view.outcomes()
    if not outcomes:  # nothing measured: no frames to draw (the report says what to run)
        return {}
    data_results = view.results()
    tol = next((Policy.from_row(r.policy or {}).control_tolerance for r in data_results), None)
    deciding = summary.deciding_configs(reg, outcomes, include_noisy=noisy)
    rate = summary.headline_rate(reg, data_results)
    return {"speedup": plots.speedup_plot(data_results, summary.threshold_spans(reg, outcomes, include_noisy=noisy)),
            "rates": plots.rates_plot(data_results, rate, summary.rate_threshold_spans(reg, outcomes, rate,
                                                                                       include_noisy=noisy)),
            "roofline": plots.roofline_plot(data_results),
            "distribution": plots.distribution_plot(deciding, _short([r.config_key for r in data_results])),
            "control": plots.control_plot(data_results, tol),
            "clock": plots.clock_plot(data_results)}


def _short(keys) -> dict[str, str]:
    """Config keys by the fields that tell them apart (workloads/keys.shorten), for cells and axes."""
    short, _ = shorten(sorted(set(keys)), " ")
    return short


def jinja_env():
    import jinja2
    from markupsafe import Markup, escape

    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)

    def md_bold(text):  # the one Markdown construct table cells use: **kind**
        parts = str(escape(text)).split("**")
        return Markup("".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts)))

    env.filters["md_bold"] = md_bold
    env.filters["md_cell"] = lambda text: str(text).replace("|", "\\|")
    return env


# Plots shown the page's full width (panels of small multiples); the others two a row.
WIDE_PLOTS = ("speedup", "rates", "roofline", "distribution")


def _shapes(env, data: dict) -> str:
    """Register the ``shape`` filter (a config key by the fields that tell the line's configs
    apart) and return the fields every config shares ("" when none)."""
    keys = [t["key"] for t in data.get("tables", [])]
    keys += [k[f] for k in data.get("kernels", []) for f in ("min_key", "max_key", "rate_key") if k.get(f)]
    keys += [r["key"] for t in data.get("peers", []) for r in t["rows"]]
    short, shared = shorten(keys, " ")
    env.filters["shape"] = lambda key: short.get(key, key)
    return shared


def markdown(data: dict) -> str:
    env = jinja_env()
    if data.get("empty"):
        return env.from_string(template("empty.md.j2")).render(d=data)
    shared = _shapes(env, data)
    return env.from_string(template("report.md.j2")).render(d=data, plots=PLOTS, shared=shared)


def html(data: dict, images: dict[str, bytes]) -> str:
    env = jinja_env()
    env.autoescape = True
    if data.get("empty"):
        return env.from_string(template("empty.html.j2")).render(d=data)
    shared = _shapes(env, data)
    encoded = {name: base64.b64encode(png).decode("ascii") for name, png in images.items()}
    return env.from_string(template("report.html.j2")).render(d=data, plots=PLOTS, images=encoded, shared=shared,
                                                               wide=WIDE_PLOTS)


def write(view: LineView, out: Path, data: dict | None = None) -> dict[str, Path]:
    """Write ``report.md`` (with its PNGs) and the self-contained ``report.html`` under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = data if data is not None else report_data(view)
    images = figures(view)
    paths = {}
    for name, png in images.items():
        p = out / f"{name}.png"
        p.write_bytes(png)
        paths[name] = p
    paths["markdown"] = out / "report.md"
    paths["markdown"].write_text(markdown(data), encoding="utf-8")
    paths["html"] = out / "report.html"
    paths["html"].write_text(html(data, images), encoding="utf-8")
    return paths


def summary(data: dict) -> list[str]:
    """What the CLI prints beside the paths: the verdict (or provisional) and each clause."""
    head = (f"{data['line']}: provisional (no verdict yet)" if data["provisional"]
            else f"{data['line']}: {data['verdict']['outcome']} (ledger row {data['verdict']['seq']})")
    said = [head]
    for h in data.get("history", []):
        said += [f"  history: {h['text']}", *(f"    {i}" for i in h["items"])]
    for c in data["clauses"]:
        said.append(f"  {c['outcome']:<8} {c['text']}  → {c['value']} ({c['op']} {c['threshold']}, {c['n']} rows)"
                    + ("" if c["source"] == "—" else f"; measured: {c['source']}"))
    if data.get("empty"):
        said.append(f"  nothing measured yet: run {data['empty']['run'][0]}")
    rep = data.get("replication")
    if rep:
        said.append(f"  replication: {rep['short'] or 'no replicate yet'}")
    return said


def render_report(data: dict, paths: dict[str, Path]) -> None:
    """The summary, then where the report went."""
    c = console()
    for text in summary(data):
        c.print(text, markup=False)
    plots = " (nothing measured yet: no plots)" if data.get("empty") else " with its plots"
    c.print(f"wrote {paths['html']} (self-contained) and {paths['markdown']}{plots}", markup=False)
