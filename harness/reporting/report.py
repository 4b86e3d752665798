"""`bench report LINE`: a Markdown report and one self-contained HTML page, from the ledger alone.

The report is built once as plain data (``report_data``: formatted strings, no objects),
then rendered through two jinja2 templates; the plots (``plots.py``) are PNG files beside
the Markdown and base64 ``data:`` URIs inside the HTML, so the page needs nothing else.
Rendering is deterministic: the same ledger gives the same text, byte for byte.
"""

from __future__ import annotations

import base64
import math
from collections import Counter
from pathlib import Path

from harness.governance import metrics as metric_table
from harness.governance.metrics import INTERLEAVED, METRICS, PROTOCOL_TEXT, RATES, SUSTAINED
from harness.governance.outcomes import PROFILE, RESULT
from harness.jsonsafe import number
from harness.reporting import protocol
from harness.reporting.lines import LineView, device_label

REASON_CHARS = 160  # a reason longer than this is cut in tables (the ledger keeps it whole)
# Known metrics: (name, column label, format). Other numeric metrics of result rows get a
# column of their own under their ledger name, so new metrics appear without code changes.
METRIC_COLUMNS = tuple((m.name, m.label, m.fmt) for m in METRICS if m.label)
SHOWN_ELSEWHERE = {m.name for m in METRICS if m.shown_elsewhere}
# The counter table (`profile` rows): one row per kernel launch, then the call's totals.
COUNTER_HEADER = ("kernel", "launch", "DRAM read MB", "DRAM write MB", "regs", "tensor %", "spill B", "µs",
                  "occupancy %")
PLOTS = (("speedup", "Speedup by shape"), ("roofline", "Achieved rate against the ceilings"),
         ("control", "Control ratio"), ("clock", "SM clock over the sweep"))


def _f(v, spec: str = ".4g") -> str:
    """A row's value as text: "—" when absent, a non-finite number (a row spells it "NaN",
    "Infinity") as nan/inf — measured, not missing."""
    x = number(v)
    if x is not None:
        return format(x, spec) if math.isfinite(x) else str(x)
    return "—" if v is None or isinstance(v, bool) else str(v)


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


def _reason_group(row: dict) -> str:
    """Rows failing for the same cause share a group: kind, kernel and the reason's head."""
    reason = str(row.get("reason") or "")
    head = f"[{row['tag']}]" if row.get("tag") else reason.split(":")[0]
    who = f"{row['candidate']}" + (" (baseline)" if row.get("role") == "baseline" else "")
    return _cut(f"{who}: {head}")


def _clauses(view: LineView, outcomes: dict) -> tuple[list[dict], dict | None]:
    """The verdict's clauses, or — with no verdict yet — the bar evaluated on the outcomes so far."""
    from harness.governance import bar as barlang
    from harness.governance.verdict import bar_rows

    v = view.verdict
    reg = view.registration
    if v is not None:
        clauses = v.get("clauses") or []
        primary = {"expr": v.get("primary"), "value": v.get("primary_value"), "prediction": v.get("prediction")}
    else:
        go = reg.get("go")
        if not go:
            return [], None
        rows, _ = bar_rows(outcomes, include_noisy=bool(reg.get("include_noisy")))
        outcome = barlang.evaluate(barlang.parse(go), rows)
        clauses = [{"text": c.text, "value": c.value, "op": c.op, "threshold": c.threshold, "passed": c.passed,
                    "n": c.n} for c in outcome.clauses]
        value = barlang.evaluate_aggregate(barlang.parse_aggregate(reg["primary"]), rows) if reg.get("primary") else None
        primary = {"expr": reg.get("primary"), "value": value, "prediction": reg.get("prediction")}
    parsed = {c.text: c for c in barlang.parse(reg["go"]).clauses()} if reg.get("go") else {}
    noisy = bool(reg.get("include_noisy"))
    out = [{"text": " ".join(c["text"].split()), "value": _f(c.get("value")), "op": c["op"],
            "threshold": _f(c["threshold"], "g"), "n": c.get("n"),
            "outcome": "unknown (no rows)" if c.get("value") is None else ("pass" if c["passed"] else "fail"),
            # The protocol, time and clock the value was computed from (the row deciding it, where one does).
            "source": protocol.source(parsed[c["text"]].aggregate, outcomes, include_noisy=noisy,
                                      value=c.get("value")) if c["text"] in parsed else "—"}
           for c in clauses]
    value, prediction = number(primary["value"]), number(primary["prediction"])
    # Always present (None: no outcome yet), so the templates never read a missing key.
    primary["error"] = _f(value - prediction, "+.4g") if value is not None and prediction is not None else None
    primary["source"] = (protocol.source(barlang.parse_aggregate(primary["expr"]), outcomes, include_noisy=noisy,
                                         value=primary["value"]) if primary["expr"] else "—")
    primary = {**primary, "value": _f(primary["value"]), "prediction": _f(primary["prediction"], "g")}
    return out, primary


def speedup_thresholds(go: str | None) -> list[tuple[str, float]]:
    """(clause text, threshold) of the bar's clauses over the speedup: the plot draws them."""
    from harness.governance import bar as barlang

    if not go:
        return []
    return [(" ".join(c.text.split()), c.threshold) for c in barlang.parse(go).clauses()
            if c.aggregate.metric == "speedup"]


def _gate(gate: dict | None) -> str:
    if not gate:
        return "—"
    worst = (gate.get("worst") or {}).get("figures") or {}
    ratio = worst.get("tolerance_ratio")
    return (f"{gate.get('n_checks', 0) - gate.get('n_failed', 0)}/{gate.get('n_checks', 0)} checks, worst "
            f"{_f(worst.get('max_abs_err'), '.2g')} abs ({_f(ratio, '.2f')} of tol)")


def _clock(timing: dict) -> str:
    """The interleaved rounds' mean SM clock, with how many rounds were dropped."""
    clock = timing.get("clock") or {}
    dropped = timing.get("n_dropped", 0)
    if not isinstance(clock.get("mean_mhz"), (int, float)):
        return "—" + (f" ({dropped} dropped)" if dropped else "")
    return f"{clock['mean_mhz']:.0f} MHz" + (f", {dropped} dropped" if dropped else "")


def _extra_metrics(results: list[dict]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(rate columns, other columns) as (name, label, format): the metric table's labelled
    metrics split by protocol, then any further numeric metric a row carries, under its name."""
    known = {m for m, _, _ in METRIC_COLUMNS} | SHOWN_ELSEWHERE
    extra = []
    for r in results:
        for k, v in (r.get("metrics") or {}).items():
            if k not in known and isinstance(v, (int, float)) and not isinstance(v, bool) and k not in extra:
                extra.append(k)
    present = [c for c in METRIC_COLUMNS if any(c[0] in (r.get("metrics") or {}) for r in results)]
    rates = [c for c in present if metric_table.BY_NAME[c[0]].protocol == RATES]
    return rates, [c for c in present if c not in rates] + [(k, k, ".4g") for k in sorted(extra)]


# The config tables' columns by protocol. The speedup's group is the interleaved rounds';
# the rate group (a line with a sustained phase) names each row's rate protocol, then the
# median, clock and power the rates beside them were computed from.
SPEEDUP_COLUMNS = ("speedup [95% CI]", "interleaved ms [p20–p80]", "interleaved SM clock")
RATE_COLUMNS = ("rates from", "rate ms [p20–p80]", "rate SM clock", "rate power W")


def _split(results: list[dict]) -> bool:
    """Whether any result's rates come from another protocol than its speedup (a sustained phase)."""
    return any(metric_table.rate_protocol(r) != INTERLEAVED for r in results)


def _legend(results: list[dict]) -> str:
    """The paragraph above the config tables naming each column's protocol."""
    if not _split(results):
        return (f"Every column comes from the {INTERLEAVED} rounds ({PROTOCOL_TEXT[INTERLEAVED]}): the speedup is "
                f"the baseline's median over the candidate's, and the rates (TFLOP/s, GB/s, of peak) are computed "
                f"from the {INTERLEAVED} median and clock beside them.")
    return (f"Columns by protocol. {INTERLEAVED.capitalize()} rounds ({PROTOCOL_TEXT[INTERLEAVED]}): speedup (the "
            f"baseline's median over the candidate's), interleaved ms, interleaved SM clock, control, host µs. "
            f"Rates (TFLOP/s, GB/s, of peak): from the protocol named in \"rates from\", computed from the rate ms, "
            f"SM clock and power beside them — {SUSTAINED}: {PROTOCOL_TEXT[SUSTAINED]}; the baseline has no "
            f"{SUSTAINED} phase, its rates are its {INTERLEAVED} median's.")


def _config_tables(outcomes: dict, results: list[dict]) -> tuple[list[str], list[dict]]:
    rate_cols, other_cols = _extra_metrics(results)
    split = _split(results)
    rate_time = RATE_COLUMNS if split else ()
    header = ["kernel", *SPEEDUP_COLUMNS, *rate_time, *[label for _, label, _ in rate_cols], "control",
              *[label for _, label, _ in other_cols], "correctness gate"]
    by_config: dict[str, list[dict]] = {}
    for r in sorted(outcomes.values(), key=lambda r: (r["config_key"], r.get("role") != "baseline", r["candidate"])):
        by_config.setdefault(r["config_key"], []).append(r)
    tables = []
    from harness.reporting.tidy import CONFIG_COLUMNS

    order = {r["config_key"]: tuple(str(v) if not isinstance(v, (int, float)) else f"{v:020.6f}"
                                    for v in map((r.get("config") or {}).get, CONFIG_COLUMNS))
             for r in outcomes.values()}
    for key, rows in sorted(by_config.items(), key=lambda kv: (order[kv[0]], kv[0])):
        body = []
        base = next((r for r in rows if r["kind"] == RESULT), None)
        if base is not None:  # the baseline's own line, from the first result's baseline arm (interleaved only)
            m = base["metrics"]
            mine = protocol.timed(base, INTERLEAVED, "baseline")
            ms = number(m.get("ms"))
            scale = ms / mine.median_ms if ms is not None and mine.median_ms else None
            rates = [_f(number(m.get(name)) * scale, spec) if scale and number(m.get(name)) is not None else "—"
                     for name, _, spec in rate_cols]
            others = [_f(m.get("baseline_host_us"), spec) if name == "host_us" else "—" for name, _, spec in other_cols]
            own = [INTERLEAVED, mine.spread(), mine.clock(), _f(mine.power_w, ".0f")] if split else []
            body.append({"cells": [f"{base['baseline']} (baseline)", "1 (baseline)", mine.spread(),
                                   _clock(base.get("timing") or {}), *own, *rates, _f(m.get("control"), ".4f"),
                                   *others, _gate((base.get("gate") or {}).get("baseline"))], "span": False})
        for r in rows:
            if r["kind"] == RESULT:
                m = r["metrics"]
                flags = [f for f in ("rig_noisy", "impossible") if r.get(f)]
                own = []
                if split:
                    rt = protocol.rates(r)
                    own = [rt.protocol, rt.spread(), rt.clock(), _f(rt.power_w, ".0f")]
                body.append({"cells": [r["candidate"] + (f" ({', '.join(flags)})" if flags else ""),
                                       f"{_f(m.get('speedup'), '.3f')}× [{_f(m.get('speedup_ci_low'), '.3f')}, "
                                       f"{_f(m.get('speedup_ci_high'), '.3f')}]",
                                       protocol.timed(r, INTERLEAVED).spread(), _clock(r.get("timing") or {}),
                                       *own, *[_f(m.get(name), spec) for name, _, spec in rate_cols],
                                       _f(m.get("control"), ".4f"),
                                       *[_f(m.get(name), spec) for name, _, spec in other_cols],
                                       _gate((r.get("gate") or {}).get("candidate"))],
                             "span": False})
            else:
                who = r["candidate"] + (" (baseline)" if r.get("role") == "baseline" else "")
                tag = f" [{r['tag']}]" if r.get("tag") else ""
                body.append({"cells": [who, f"**{r['kind']}**{tag}: {_cut(r.get('reason') or '')}"], "span": True})
        tables.append({"key": key, "rows": body})
    return header, tables


def _mb(v):
    return None if v is None else v / 1e6


def _counter_tables(view: LineView) -> list[dict]:
    """The latest `profile` row per (config, kernel): a table per config, a row per launch,
    the call's totals, and the counter reductio's finding where it has one."""
    from harness.governance.outcomes import current_rows

    latest = {}
    for r in current_rows(view.rows):
        if r.get("kind") == PROFILE and (not view.commit or str(r.get("commit", "")).startswith(view.commit)):
            latest[(r["config_key"], r["candidate"])] = r
    tables: dict[str, list] = {}
    for (key, kernel), r in sorted(latest.items()):
        rows = tables.setdefault(key, [])
        who = kernel + (" (baseline)" if r.get("role") == "baseline" else "")
        if r.get("error"):
            rows.append({"cells": [who, f"**no counters**: {_cut(r['error'])}"], "span": True})
            continue
        for x in r.get("launches") or []:
            spill = None if x.get("local_load_bytes") is None else x["local_load_bytes"] + (x.get("local_store_bytes") or 0)
            rows.append({"cells": [who, _cut(x["kernel"])[:48], _f(_mb(x.get("dram_read_bytes"))),
                                   _f(_mb(x.get("dram_write_bytes"))), _f(x.get("registers"), ".0f"),
                                   _f(x.get("tensor_pct"), ".3g"), _f(spill),
                                   _f(None if x.get("duration_ns") is None else x["duration_ns"] / 1e3),
                                   _f(x.get("occupancy_pct"), ".3g")], "span": False})
        c = r.get("counters") or {}
        tensor = c.get("tensor_active")
        rows.append({"cells": [who, f"per call ({_f(c.get('launches'), '.0f')} launches)",
                               _f(_mb(c.get("dram_read_bytes"))), _f(_mb(c.get("dram_write_bytes"))),
                               _f(c.get("registers"), ".0f"), _f(None if tensor is None else 100 * tensor, ".3g"),
                               _f(c.get("local_spill_bytes")), _f(c.get("duration_us")), "—"], "span": False})
        if r.get("impossible"):
            rows.append({"cells": [who, f"**impossible**: {_cut(r['impossible'])}"], "span": True})
    return [{"key": k, "rows": v} for k, v in tables.items()]


def _verify(view: LineView) -> list[dict]:
    """The verdict's [verify] clauses (counter claims), as shown beside the bar."""
    v = view.verdict or {}
    return [{"text": c["text"], "n": c.get("n"), "n_failed": c.get("n_failed"),
             "outcome": {True: "pass", False: "fail", None: "unknown"}[c.get("passed")]}
            for c in v.get("verify") or []]


def report_data(view: LineView, history=None) -> dict:
    """Everything the report shows, as formatted strings (deterministic for a given ledger);
    ``history`` (history.LineHistory): what amended, re-opened or re-measured the line, shown at the top."""
    reg = view.registration
    registered = view.registered or {}
    outcomes = view.outcomes()
    results = [r for r in outcomes.values() if r["kind"] == RESULT]
    verdict = view.verdict
    pairs = {(k, c) for k, c in outcomes if c in (reg.get("candidates") or [])}
    n_pairs = view.n_pairs()
    clauses, primary = _clauses(view, outcomes)
    counts = Counter(r["kind"] for r in outcomes.values())
    groups = Counter((r["kind"], _reason_group(r)) for r in outcomes.values() if r["kind"] != RESULT)
    flagged = Counter(f for r in results for f in ("rig_noisy", "impossible") if r.get(f))
    commits = sorted({r.get("commit") for r in outcomes.values() if r.get("commit")})
    devices = sorted({device_label(r) for r in outcomes.values()})
    header, tables = _config_tables(outcomes, results)
    control_tol = next(((r.get("policy") or {}).get("control_tolerance") for r in results), None)
    return {
        "line": view.line,
        "history": [{"text": n.text, "items": list(n.items)} for n in history.notes()] if history else [],
        "provisional": verdict is None,
        "hypothesis": " ".join(str(reg.get("hypothesis", "")).split()),
        "facts": [("workload", reg.get("workload", "—")), ("baseline", reg.get("baseline", "—")),
                  ("candidates", ", ".join(reg.get("candidates") or []) or "—"),
                  ("registered", f"commit {str(registered.get('registration_commit', '?'))[:12]}, registration "
                                 f"sha256 {str(registered.get('registration_sha256', '?'))[:12]}"),
                  ("measured at", ", ".join(c[:12] for c in commits) or "nothing measured yet"),
                  ("device", ", ".join(devices) or "—"),
                  ("pairs with an outcome", f"{len(pairs)} of {n_pairs if n_pairs is not None else '?'}"),
                  ("timing policy", ", ".join(f"{k}={v}" for k, v in sorted((reg.get("timing") or {}).items()))
                   or "defaults"),
                  # A bar registered beyond a device's measured ceilings says why (governance/reductio.py).
                  *([("beyond the measured ceilings (waived)", " ".join(str(reg["beyond_ceiling_ok"]).split()))]
                    if reg.get("beyond_ceiling_ok") else [])],
        "go": " ".join(str(reg.get("go", "")).split()),
        "verdict": None if verdict is None else {"outcome": verdict["outcome"], "seq": verdict["seq"],
                                                 "commit": str(verdict.get("commit", ""))[:12],
                                                 "excluded": ", ".join(f"{k}: {n}" for k, n in
                                                                       sorted((verdict.get("excluded") or {}).items()))},
        "clauses": clauses,
        "primary": primary,
        "counts": [(k, n) for k, n in sorted(counts.items())],
        "flagged": [(k, n) for k, n in sorted(flagged.items())],
        "reasons": [(kind, why, n) for (kind, why), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))],
        "header": header,
        "legend": _legend(results),
        "tables": tables,
        "counter_header": list(COUNTER_HEADER),
        "counters": _counter_tables(view),
        "verify": _verify(view),
        "control_tolerance": control_tol,
    }


def figures(view: LineView) -> dict[str, bytes]:
    """name → PNG bytes for the report's four plots."""
    from harness.reporting import plots

    data_results = view.results()
    tol = next(((r.get("policy") or {}).get("control_tolerance") for r in data_results), None)
    return {"speedup": plots.speedup_plot(data_results, speedup_thresholds(view.registration.get("go"))),
            "roofline": plots.roofline_plot(data_results),
            "control": plots.control_plot(data_results, tol),
            "clock": plots.clock_plot(data_results)}


MARKDOWN = """\
# {{ d.line }}: {% if d.provisional %}provisional report (no verdict yet){% else %}{{ d.verdict.outcome }}{% endif %}

{% if d.provisional -%}
> **Provisional.** This line has no verdict row: the clause values below are the bar evaluated on the
> outcomes so far, not a decision. Finish the sweep and run `bench verdict {{ d.line }}`.

{% endif -%}
{% if d.history -%}
> **History.**
{% for h in d.history %}> - {{ h.text }}
{% for i in h["items"] %}>   - {{ i }}
{% endfor %}{% endfor %}
{% endif -%}
**Hypothesis.** {{ d.hypothesis }}

| | |
| --- | --- |
{% for k, v in d.facts -%}
| {{ k }} | {{ v }} |
{% endfor %}
## Bar and verdict

Bar (committed before any number): `{{ d.go }}`

| clause | value | measured (protocol, median, clock) | op | threshold | rows | outcome |
| --- | ---: | --- | :-: | ---: | ---: | --- |
{% for c in d.clauses -%}
| `{{ c.text }}` | {{ c.value }} | {{ c.source | md_cell }} | {{ c.op }} | {{ c.threshold }} | {{ c.n }} | {{ c.outcome }} |
{% endfor %}
{% if d.primary -%}
Primary `{{ d.primary.expr }}` = **{{ d.primary.value }}**{% if d.primary.source != "—" %} (measured: {{ d.primary.source }}){% endif %}, predicted {{ d.primary.prediction }}{% if d.primary.error %} (outcome − prediction = {{ d.primary.error }}){% endif %}.

{% endif -%}
{% if d.verify -%}
Counter clauses (`[verify]`, each must hold on every profiled result):

| clause | profiled results | not holding | outcome |
| --- | ---: | ---: | --- |
{% for c in d.verify -%}
| `{{ c.text }}` | {{ c.n }} | {{ c.n_failed }} | {{ c.outcome }} |
{% endfor %}
{% endif -%}
{% if d.verdict -%}
**Verdict: {{ d.verdict.outcome }}** (ledger row {{ d.verdict.seq }}, commit {{ d.verdict.commit }}){% if d.verdict.excluded %}; left out of the bar: {{ d.verdict.excluded }}{% endif %}.
{% else -%}
**No verdict yet.**
{% endif %}
## Outcomes

{% for k, n in d.counts %}{{ k }}: {{ n }}{% if not loop.last %} · {% endif %}{% endfor %}{% for k, n in d.flagged %} · results flagged {{ k }}: {{ n }}{% endfor %}

{% if d.reasons -%}
| outcome | kernel and reason | count |
| --- | --- | ---: |
{% for kind, why, n in d.reasons -%}
| {{ kind }} | {{ why | md_cell }} | {{ n }} |
{% endfor %}
{% endif -%}
## Results per config

{{ d.legend | wordwrap(100, break_long_words=False) }}

{% for t in d.tables -%}
### {{ t.key }}

| {{ d.header | join(" | ") }} |
|{% for h in d.header %} --- |{% endfor %}
{% for row in t.rows -%}
| {{ row.cells | map("md_cell") | join(" | ") }} |{% if row.span %}{% for _ in d.header[2:] %} — |{% endfor %}{% endif %}
{% endfor %}
{% endfor -%}
{% if d.counters -%}
## Hardware counters (Nsight Compute, one call)

{% for t in d.counters -%}
### {{ t.key }}

| {{ d.counter_header | join(" | ") }} |
|{% for h in d.counter_header %} --- |{% endfor %}
{% for row in t.rows -%}
| {{ row.cells | map("md_cell") | join(" | ") }} |{% if row.span %}{% for _ in d.counter_header[2:] %} — |{% endfor %}{% endif %}
{% endfor %}
{% endfor -%}
{% endif -%}
## Plots

{% for name, title in plots -%}
![{{ title }}]({{ name }}.png)

{% endfor -%}
"""

HTML = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ d.line }} — bench report</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 6px; } h2 { font-size: 18px; margin: 28px 0 10px; border-bottom: 1px solid #dde1e7; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 18px 0 6px; font-family: ui-monospace, monospace; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 600; color: #fff; margin-left: 8px; font-size: 15px; }
.GO { background: #1a7f37; } .NO-GO { background: #cf222e; } .PROVISIONAL { background: #9a6700; }
.note { background: #fff8c5; border: 1px solid #d4a72c; padding: 8px 12px; border-radius: 6px; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
.card { background: #fff; border: 1px solid #dde1e7; border-radius: 8px; padding: 12px 14px; }
table { border-collapse: collapse; background: #fff; font-size: 12.5px; width: 100%; }
th, td { border: 1px solid #dde1e7; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 12px ui-monospace, monospace; background: #eef1f5; padding: 1px 4px; border-radius: 4px; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; } .unknown { color: #9a6700; }
figure { margin: 0; } figure img { width: 100%; height: auto; display: block; } figcaption { font-size: 12px; color: #57606a; }
.facts td:first-child { width: 190px; color: #57606a; }
</style></head>
<body><main>
<h1>{{ d.line }}{% if d.provisional %}<span class="badge PROVISIONAL">provisional</span>{% else %}<span class="badge {{ d.verdict.outcome }}">{{ d.verdict.outcome }}</span>{% endif %}</h1>
{% if d.provisional %}<p class="note"><b>Provisional.</b> This line has no verdict row: the clause values below are the bar evaluated on the outcomes so far, not a decision. Finish the sweep and run <code>bench verdict {{ d.line }}</code>.</p>{% endif %}
{% if d.history %}<div class="note history"><b>History.</b><ul>{% for h in d.history %}<li>{{ h.text }}{% if h["items"] %}<ul>{% for i in h["items"] %}<li>{{ i }}</li>{% endfor %}</ul>{% endif %}</li>{% endfor %}</ul></div>{% endif %}
<div class="grid">
<div class="card"><b>Hypothesis.</b> {{ d.hypothesis }}
<table class="facts" style="margin-top:8px">{% for k, v in d.facts %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}</table></div>
<div class="card"><b>Bar</b> (committed before any number): <code>{{ d.go }}</code>
<table style="margin-top:8px"><tr><th>clause</th><th>value</th><th>measured (protocol, median, clock)</th><th>threshold</th><th>rows</th><th>outcome</th></tr>
{% for c in d.clauses %}<tr><td><code>{{ c.text }}</code></td><td class="num">{{ c.value }}</td><td>{{ c.source }}</td><td class="num">{{ c.op }} {{ c.threshold }}</td><td class="num">{{ c.n }}</td><td class="{{ c.outcome.split(' ')[0] }}">{{ c.outcome }}</td></tr>{% endfor %}
</table>
{% if d.verify %}<p>Counter clauses (<code>[verify]</code>):</p><table><tr><th>clause</th><th>profiled results</th><th>not holding</th><th>outcome</th></tr>
{% for c in d.verify %}<tr><td><code>{{ c.text }}</code></td><td class="num">{{ c.n }}</td><td class="num">{{ c.n_failed }}</td><td class="{{ c.outcome }}">{{ c.outcome }}</td></tr>{% endfor %}</table>{% endif %}
{% if d.primary %}<p>Primary <code>{{ d.primary.expr }}</code> = <b>{{ d.primary.value }}</b>{% if d.primary.source != "—" %} (measured: {{ d.primary.source }}){% endif %}, predicted {{ d.primary.prediction }}{% if d.primary.error %} (outcome − prediction = {{ d.primary.error }}){% endif %}.</p>{% endif %}
<p>{% if d.verdict %}<b>Verdict: {{ d.verdict.outcome }}</b> (ledger row {{ d.verdict.seq }}, commit <code>{{ d.verdict.commit }}</code>){% if d.verdict.excluded %}; left out of the bar: {{ d.verdict.excluded }}{% endif %}.{% else %}<b>No verdict yet.</b>{% endif %}</p>
<p>Outcomes: {% for k, n in d.counts %}{{ k }} {{ n }}{% if not loop.last %} · {% endif %}{% endfor %}{% for k, n in d.flagged %} · results flagged {{ k }}: {{ n }}{% endfor %}</p>
</div></div>
<h2>Plots</h2>
<div class="grid">{% for name, title in plots %}<figure class="card"><img alt="{{ title }}" data-plot="{{ name }}" src="data:image/png;base64,{{ images[name] }}"><figcaption>{{ title }}</figcaption></figure>{% endfor %}</div>
{% if d.reasons %}<h2>Outcomes other than results</h2>
<table><tr><th>outcome</th><th>kernel and reason</th><th>count</th></tr>
{% for kind, why, n in d.reasons %}<tr><td>{{ kind }}</td><td>{{ why }}</td><td class="num">{{ n }}</td></tr>{% endfor %}</table>{% endif %}
<h2>Results per config</h2>
<p class="legend">{{ d.legend }}</p>
{% for t in d.tables %}<h3>{{ t.key }}</h3>
<table><tr>{% for h in d.header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% if row.span %}<td>{{ row.cells[0] }}</td><td colspan="{{ d.header | length - 1 }}">{{ row.cells[1] | md_bold }}</td>{% else %}{% for cell in row.cells %}<td{% if not loop.first and not loop.last %} class="num"{% endif %}>{{ cell }}</td>{% endfor %}{% endif %}</tr>{% endfor %}
</table>{% endfor %}
{% if d.counters %}<h2>Hardware counters (Nsight Compute, one call)</h2>
{% for t in d.counters %}<h3>{{ t.key }}</h3>
<table><tr>{% for h in d.counter_header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% if row.span %}<td>{{ row.cells[0] }}</td><td colspan="{{ d.counter_header | length - 1 }}">{{ row.cells[1] | md_bold }}</td>{% else %}{% for cell in row.cells %}<td{% if not loop.first and loop.index > 2 %} class="num"{% endif %}>{{ cell }}</td>{% endfor %}{% endif %}</tr>{% endfor %}
</table>{% endfor %}{% endif %}
</main></body></html>
"""


def _env():
    import jinja2
    from markupsafe import Markup, escape

    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)

    def md_bold(text):  # the one Markdown construct table cells use: **kind**
        parts = str(escape(text)).split("**")
        return Markup("".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts)))

    env.filters["md_bold"] = md_bold
    env.filters["md_cell"] = lambda text: str(text).replace("|", "\\|")
    return env


def markdown(data: dict) -> str:
    return _env().from_string(MARKDOWN).render(d=data, plots=PLOTS)


def html(data: dict, images: dict[str, bytes]) -> str:
    import jinja2

    env = _env()
    env.autoescape = True
    encoded = {name: base64.b64encode(png).decode("ascii") for name, png in images.items()}
    return env.from_string(HTML).render(d=data, plots=PLOTS, images=encoded)


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
    paths["markdown"].write_text(markdown(data))
    paths["html"] = out / "report.html"
    paths["html"].write_text(html(data, images))
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
    return said
