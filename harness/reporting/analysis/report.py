"""`bench report LINE`: the report's data, from the ledger alone.

The report is built once as plain data (``report_data``: formatted strings, no objects);
``render/report.py`` renders it through two jinja2 templates with the plots. Deterministic:
the same ledger gives the same data.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.vocab import metrics as metric_table
from harness.vocab.metrics import INTERLEAVED, METRICS, PROTOCOL_TEXT, RATES, SUSTAINED
from harness.vocab.outcomes import PROFILE, RESULT
from harness.ledger.rows import RegisteredRow, VerdictRow
from harness.ledger.payloads import (Amdahl, Clock, Counters, Figures, Gate, Launch, Measurement, Metrics, OpShare,
                                     Policy, by_role, each)
from harness.ledger.line_payloads import Clause
from harness.jsonsafe import number
from harness.reporting.analysis import protocol, summary
from harness.reporting.analysis.lines import LineView, device_label
from harness.registration import bar as barlang
from harness.governance.nextrun import bar_between_run
from harness.governance.verdict import bar_rows, integration_bar_row
from harness.reporting.analysis.tidy import CONFIG_COLUMNS
from harness.vocab.outcomes import INTEGRATION, current_rows
from harness.registration.integration import ceiling_text
from harness.reporting.analysis.replication import replication_view
from harness.vocab.devices import instance_text

REASON_CHARS = 160  # a reason longer than this is cut in tables (the ledger keeps it whole)
# Known metrics: (name, column label, format). Other numeric metrics of result rows get a
# column of their own under their ledger name, so new metrics appear without code changes.
METRIC_COLUMNS = tuple((m.name, m.label, m.fmt) for m in METRICS if m.label)
SHOWN_ELSEWHERE = {m.name for m in METRICS if m.shown_elsewhere}
# The counter table (`profile` rows): one row per kernel launch, then the call's totals.
COUNTER_HEADER = ("kernel", "launch", "DRAM read MB", "DRAM write MB", "regs", "tensor %", "spill B", "µs",
                  "occupancy %")


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
    reason = str(row.reason or "")
    head = f"[{row.tag}]" if row.tag else reason.split(":")[0]
    who = f"{row.candidate}" + (" (baseline)" if row.role == "baseline" else "")
    return _cut(f"{who}: {head}")


@dataclass(frozen=True)
class _Primary:
    """The line's primary figure: its expression, value and registered prediction, and why a
    primary against a peer has no value (None: it has one, or no note)."""

    expr: str | None
    value: Any
    prediction: Any
    note: str | None


def _clauses(view: LineView, outcomes: dict) -> tuple[list[dict], dict | None]:
    """The verdict's clauses, or — with no verdict yet — the bar evaluated on the outcomes so far."""
    v = view.verdict
    reg = view.plan
    # A bar over the next-run interval reads it with the verdict's record, else the line's ledger.
    next_run = bar_between_run(reg.go, reg.primary, view.rows, outcomes,
                               v.next_run if v is not None else None)
    if v is not None:
        clauses = v.clauses or []
        primary = _Primary(v.primary, v.primary_value, v.prediction, v.primary_note)
    else:
        go = reg.go
        if not go:
            return [], None
        rows, _ = bar_rows(outcomes, include_noisy=bool(reg.include_noisy), next_run=next_run)
        rows += [integration_bar_row(r, include_noisy=bool(reg.include_noisy)) for r in _latest_steps(view)]
        outcome = barlang.evaluate(barlang.parse(go), rows)
        clauses = [{"text": c.text, "value": c.value, "op": c.op, "threshold": c.threshold, "passed": c.passed,
                    "n": c.n, **({"note": c.note} if c.note else {})} for c in outcome.clauses]
        agg = barlang.parse_aggregate(reg.primary) if reg.primary else None
        value = barlang.evaluate_aggregate(agg, rows) if agg is not None else None
        primary = _Primary(reg.primary, value, reg.prediction,
                           barlang.uncompared_note(agg, rows) if agg is not None and value is None else None)
    parsed = {c.text: c for c in barlang.parse(reg.go).clauses()} if reg.go else {}
    clauses = [Clause.from_row(c) for c in clauses]
    noisy = bool(reg.include_noisy)
    out = [{"text": " ".join(c.text.split()), "value": _f(c.value), "op": c.op,
            "threshold": _f(c.threshold, "g"), "n": c.n,
            "outcome": ("unknown (not compared)" if c.note else "unknown (no rows)") if c.value is None
            else ("pass" if c.passed else "fail"),
            "margin": summary.margin_text(c.value, c.op, c.threshold) or "—",
            "ci": summary.clause_ci(parsed[c.text].aggregate, outcomes, include_noisy=noisy)
            if c.text in parsed else "—",
            # The protocol, time and clock the value was computed from (the row deciding it, where one does);
            # where a peer was not compared, why.
            "source": c.note if c.note else
            protocol.source(parsed[c.text].aggregate, outcomes, include_noisy=noisy, value=c.value,
                            next_run=next_run)
            if c.text in parsed else "—"}
           for c in clauses]
    value, prediction = number(primary.value), number(primary.prediction)
    # Where the value was measured; where a peer primary compared nothing, why.
    source = primary.note or (protocol.source(barlang.parse_aggregate(primary.expr), outcomes, include_noisy=noisy,
                                              value=primary.value, next_run=next_run) if primary.expr else "—")
    return out, {"expr": primary.expr, "value": _f(primary.value), "prediction": _f(primary.prediction, "g"),
                 # Always present (None: no outcome yet), so the templates never read a missing key.
                 "error": _f(value - prediction, "+.4g") if value is not None and prediction is not None else None,
                 "source": source}


def _gate(gate: dict | None) -> str:
    if not gate:
        return "—"
    gate = Gate.from_row(gate)
    worst = Figures.from_row(gate.worst_check.figures if gate.worst else None) or Figures()
    ratio = worst.tolerance_ratio
    checks = gate.n_checks if gate.has("n_checks") else 0
    failed = gate.n_failed if gate.has("n_failed") else 0
    return (f"{checks - failed}/{checks} checks, worst "
            f"{_f(worst.max_abs_err, '.2g')} abs ({_f(ratio, '.2f')} of tol)")


def _clock(timing: dict) -> str:
    """The interleaved rounds' mean SM clock, with how many rounds were dropped."""
    timing = Measurement.from_row(timing)
    clock = Clock.from_row(timing.clock or {})
    dropped = timing.n_dropped if timing.has("n_dropped") else 0
    if not isinstance(clock.mean_mhz, (int, float)):
        return "—" + (f" ({dropped} dropped)" if dropped else "")
    return f"{clock.mean_mhz:.0f} MHz" + (f", {dropped} dropped" if dropped else "")


def _extra_metrics(results: list[dict], judged: tuple = (), clocks: tuple = ()) -> tuple[list[tuple[str, str, str]],
                                                                                        list[tuple[str, str, str]]]:
    """(rate columns, other columns) as (name, label, format): the metric table's labelled
    metrics split by protocol (one shown elsewhere only where the bar judges it: ``judged``;
    one read through NVML only where a row has a value: none on the CPU), ``tflops_at(F)``
    for each SM clock F the bar states (``clocks``) beside the raw TFLOP/s, then any further
    numeric metric a row carries, under its name."""
    known = {m for m, _, _ in METRIC_COLUMNS} | SHOWN_ELSEWHERE
    extra = []
    for r in results:
        for k, v in (r.metrics or {}).items():
            if k not in known and isinstance(v, (int, float)) and not isinstance(v, bool) and k not in extra:
                extra.append(k)
    present = [c for c in METRIC_COLUMNS if any(c[0] in (r.metrics or {}) for r in results)
               and (c[0] not in SHOWN_ELSEWHERE or c[0] in judged)
               and (metric_table.BY_NAME[c[0]].needs != "nvml" or any(number((r.metrics or {}).get(c[0])) is not None
                                                                       for r in results))]
    rates = [c for c in present if metric_table.BY_NAME[c[0]].protocol == RATES]
    rates += [(f"tflops_at({f:g})", f"TFLOP/s at {f:g} MHz", ".4g") for f in clocks]
    return rates, [c for c in present if c not in rates] + [(k, k, ".4g") for k in sorted(extra)]


def _figure(metrics: dict, name: str):
    """A config table's figure of a result row: its metric, or ``tflops_at(F)`` computed from it."""
    base, _, arg = name.partition("(")
    return metric_table.derived(base, metrics, float(arg.rstrip(")"))) if arg else metrics.get(name)


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
                f"the baseline's median over the candidate's, and the rates (TFLOP/s, GB/s, their fractions of the device's "
                f"measured matmul and copy ceilings — not datasheet peaks) are computed "
                f"from the {INTERLEAVED} median and clock beside them.")
    return (f"Columns by protocol. {INTERLEAVED.capitalize()} rounds ({PROTOCOL_TEXT[INTERLEAVED]}): speedup (the "
            f"baseline's median over the candidate's), interleaved ms, interleaved SM clock, control, host µs. "
            f"Rates (TFLOP/s, GB/s, their fractions of the "
            f"device's measured matmul and copy ceilings — not datasheet peaks): from the protocol named in \"rates from\", computed from the rate ms, "
            f"SM clock and power beside them — {SUSTAINED}: {PROTOCOL_TEXT[SUSTAINED]}; the baseline has no "
            f"{SUSTAINED} phase, its rates are its {INTERLEAVED} median's.")


def baseline_figure(row, name: str) -> float | None:
    """The baseline's figure ``name`` in a result row: its own cycles per call (its interleaved
    calls: ``timing.arm_clocks``), none of a rate at a stated clock, else ``baseline_rate``."""
    if name == "cycles":
        own = Measurement.from_row(row.timing or {}).arm_clock("baseline")
        return number(own.kcycles if own is not None else None)
    if "(" in name:
        return None
    return baseline_rate(row, name)


def baseline_rate(row, name: str) -> float | None:
    """The baseline's rate ``name`` in a result row: the candidate's, scaled by the candidate's
    rate time over the baseline's interleaved median (the baseline has no sustained phase)."""
    ms, value = number(Metrics.from_row(row.metrics).ms), number(row.metrics.get(name))
    base_ms = protocol.timed(row, INTERLEAVED, "baseline").median_ms
    if ms is None or value is None or not base_ms:
        return None
    return value * ms / base_ms


def _config_tables(outcomes: dict, results: list[dict], judged: tuple = (),
                   clocks: tuple = ()) -> tuple[list[str], list[dict]]:
    rate_cols, other_cols = _extra_metrics(results, judged, clocks)
    split = _split(results)
    rate_time = RATE_COLUMNS if split else ()
    header = ["candidate", *SPEEDUP_COLUMNS, *rate_time, *[label for _, label, _ in rate_cols], "control",
              *[label for _, label, _ in other_cols], "correctness gate"]
    by_config: dict[str, list[dict]] = {}
    for r in sorted(outcomes.values(), key=lambda r: (r.config_key, r.role != "baseline", r.candidate)):
        by_config.setdefault(r.config_key, []).append(r)
    tables = []

    order = {r.config_key: tuple(str(v) if not isinstance(v, (int, float)) else f"{v:020.6f}"
                                    for v in map((r.config or {}).get, CONFIG_COLUMNS))
             for r in outcomes.values()}
    for key, rows in sorted(by_config.items(), key=lambda kv: (order[kv[0]], kv[0])):
        body = []
        base = next((r for r in rows if r.kind == RESULT), None)
        if base is not None:  # the baseline's own line, from the first result's baseline arm (interleaved only)
            m = Metrics.from_row(base.metrics)
            mine = protocol.timed(base, INTERLEAVED, "baseline")
            rates = [_f(baseline_figure(base, name), spec) for name, _, spec in rate_cols]
            others = [_f(m.baseline_host_us, spec) if name == "host_us" else "—" for name, _, spec in other_cols]
            own = [INTERLEAVED, mine.spread(), mine.clock(), _f(mine.power_w, ".0f")] if split else []
            body.append({"cells": [f"{base.baseline} (baseline)", "1 (baseline)", mine.spread(),
                                   _clock(base.timing or {}), *own, *rates, _f(m.control, ".4f"),
                                   *others, _gate(by_role(base.gate or {}, "baseline"))], "span": False})
        for r in rows:
            if r.kind == RESULT:
                m, mt = r.metrics, Metrics.from_row(r.metrics)
                flags = [f for f in ("rig_noisy", "impossible") if getattr(r, f)]
                own = []
                if split:
                    rt = protocol.rates(r)
                    own = [rt.protocol, rt.spread(), rt.clock(), _f(rt.power_w, ".0f")]
                body.append({"cells": [r.candidate + (f" ({', '.join(flags)})" if flags else ""),
                                       f"{_f(mt.speedup, '.3f')}× [{_f(mt.speedup_ci_low, '.3f')}, "
                                       f"{_f(mt.speedup_ci_high, '.3f')}]",
                                       protocol.timed(r, INTERLEAVED).spread(), _clock(r.timing or {}),
                                       *own, *[_f(_figure(m, name), spec) for name, _, spec in rate_cols],
                                       _f(mt.control, ".4f"),
                                       *[_f(m.get(name), spec) for name, _, spec in other_cols],
                                       _gate(by_role(r.gate or {}, "candidate"))],
                             "span": False})
            else:
                who = r.candidate + (" (baseline)" if r.role == "baseline" else "")
                tag = f" [{r.tag}]" if r.tag else ""
                body.append({"cells": [who, f"**{r.kind}**{tag}: {_cut(r.reason or '')}"], "span": True})
        tables.append({"key": key, "rows": body})
    return header, tables


def _mb(v):
    return None if v is None else v / 1e6


def _counter_tables(view: LineView) -> list[dict]:
    """The latest `profile` row per (config, kernel): a table per config, a row per launch,
    the call's totals, and the counter reductio's finding where it has one."""
    latest = {}
    for r in current_rows(view.rows):
        if r.kind == PROFILE and (not view.commit or str((r.commit or "")).startswith(view.commit)):
            latest[(r.config_key, r.candidate)] = r
    tables: dict[str, list] = {}
    for (key, kernel), r in sorted(latest.items()):
        rows = tables.setdefault(key, [])
        who = kernel + (" (baseline)" if r.role == "baseline" else "")
        if r.error:
            rows.append({"cells": [who, f"**no counters**: {_cut(r.error)}"], "span": True})
            continue
        for x in each(Launch, r.launches or []):
            spill = None if x.local_load_bytes is None else x.local_load_bytes + (x.local_store_bytes or 0)
            rows.append({"cells": [who, _cut(x.kernel)[:48], _f(_mb(x.dram_read_bytes)),
                                   _f(_mb(x.dram_write_bytes)), _f(x.registers, ".0f"),
                                   _f(x.tensor_pct, ".3g"), _f(spill),
                                   _f(None if x.duration_ns is None else x.duration_ns / 1e3),
                                   _f(x.occupancy_pct, ".3g")], "span": False})
        c = Counters.from_row(r.counters or {})
        tensor = c.tensor_active
        rows.append({"cells": [who, f"per call ({_f(c.launches, '.0f')} launches)",
                               _f(_mb(c.dram_read_bytes)), _f(_mb(c.dram_write_bytes)),
                               _f(c.registers, ".0f"), _f(None if tensor is None else 100 * tensor, ".3g"),
                               _f(c.local_spill_bytes), _f(c.duration_us), "—"], "span": False})
        if r.impossible:
            rows.append({"cells": [who, f"**impossible**: {_cut(r.impossible)}"], "span": True})
    return [{"key": k, "rows": v} for k, v in tables.items()]


def _verify(view: LineView) -> list[dict]:
    """The verdict's [verify] clauses (counter claims), as shown beside the bar."""
    v = view.verdict or VerdictRow()
    return [{"text": c.text, "n": c.n, "n_failed": c.n_failed,
             "outcome": {True: "pass", False: "fail", None: "unknown"}[c.passed]}
            for c in each(Clause, v.verify or [])]


def _latest_steps(view: LineView) -> list:
    """The latest current `integration` row per candidate, by candidate."""
    latest = {r.candidate: r for r in current_rows(view.rows) if r.kind == INTEGRATION}
    return [latest[c] for c in sorted(latest)]


def _integration(view: LineView) -> list[dict]:
    """The latest `integration` row per candidate (commands/integration.py): the step's times,
    the measured gain beside the one the kernel's probe predicted, the probe → in-situ
    factor, the op's share and an Amdahl violation with the share the op must have had."""
    latest = {r.candidate: r for r in _latest_steps(view)}
    out = []
    for cand in sorted(latest):
        r = latest[cand]
        m = Metrics.from_row(r.metrics or {})
        used = OpShare.from_row(r.op_share_used or {})
        source = used.source if used.has("source") else None
        v = Amdahl.from_row(r.amdahl_violated) if r.amdahl_violated else None
        out.append({
            "candidate": cand, "seq": r.seq,
            "state": ("failed the float64 check" if not r.correct else
                      "throttled" if r.throttled else "rig-noisy" if r.rig_noisy else "measured"),
            "step_baseline_ms": _f(m.step_baseline_ms), "step_ms": _f(m.step_ms),
            "step_control": _f(m.step_control), "step_gain": _f(m.step_gain, "+.2%"),
            "predicted": _f(m.step_gain_predicted, "+.2%"), "probe_factor": _f(m.probe_factor, ".3g"),
            "op_share": f"{_f(used.value, '.1%')} ({source if used.has('source') else '—'})" + (
                f"; measured {_f(m.op_share, '.1%')}" if m.op_share is not None
                and str(source if used.has("source") else "").startswith("stated") else ""),
            "amdahl": None if not v else (
                f"amdahl_violated: gain {v.gain:+.2%} is above the ceiling of "
                f"{ceiling_text(v.op_share, source)}; the op must have taken at least "
                f"{v.inverted_share:.1%} of the step — the line decides nothing until an amendment explains it"),
        })
    return out


def _agreement(passed, agrees) -> str:
    """A replicate's clause (or bar) outcome beside whether it agrees with the verdict's."""
    said = {True: "pass", False: "fail", None: "unknown"}[passed]
    return said + {True: ", agrees", False: ", differs", None: ""}[agrees]


def _replication(view: LineView) -> dict | None:
    """The replicates beside the verdict (analysis/replication.py), as the report's table: the
    line's own instance first, then each replicate's clause values and whether each agrees;
    then each clause's spread across the instances that measured the verdict's commit and stack."""
    rep = replication_view(view)
    if rep is None:
        return None

    texts = [" ".join(str(t).split()) for t, _, _ in rep.reference]
    own = {"cells": [f"{instance_text(rep.original)} (the line's own)", "—", f"{str(rep.commit)[:12]} (closing)",
                     "same", "—",
                     *[f"{_f(v)} {({True: 'pass', False: 'fail', None: 'unknown'})[p]}" for _, v, p in rep.reference],
                     rep.outcome or "provisional", "—"]}
    rows = [own]
    for r in rep.replicates:
        of = "before the verdict" if r.of is None else f"row {r.of}"
        at = f"{r.commit[:12]} ({r.at})"
        stack = "another stack (never pooled)" if r.stack == "other" else "same"
        pairs = f"{r.pairs} of {r.n_pairs if r.n_pairs is not None else '?'}"
        rows.append({"cells": [r.label, of, at, stack, pairs,
                               *[f"{_f(c.value)} {_agreement(c.passed, c.agrees)}" for c in r.clauses],
                               "incomplete" if r.passed is None else _agreement(r.passed, r.agrees),
                               "—" if r.agrees is None else ("yes" if r.agrees else "no")]})
    rule = (f"[replication] instances = {rep.required}, combine = \"{rep.combine}\"" if rep.required else None)
    return {"short": rep.short(), "rule": rule, "provisional": rep.provisional,
            "header": ["instance", "of verdict", "commit", "stack", "pairs", *texts, "bar", "agrees"],
            "rows": rows,
            "spread": [{"text": " ".join(str(s.text).split()), "n": s.n,
                        "range": "—" if s.low is None else f"{_f(s.low)} – {_f(s.high)}",
                        "relative": "—" if s.relative is None else f"{s.relative:.2%}"} for s in rep.spread],
            "data": rep.as_dict()}


def _empty(view: LineView, outcomes: dict) -> dict | None:
    """What a report of a line with no outcome says instead of its tables and plots: that nothing
    is measured yet, and the commands that measure it and decide it (None: something is)."""
    if outcomes:
        return None
    at = f" at commit {view.commit}" if view.commit else ""
    return {"text": f"Line {view.line} is registered; nothing is measured yet{at}, so there is nothing to plot.",
            "run": [f"bench sweep {view.line}", f"bench report {view.line}", f"bench verdict {view.line}"]}


def report_data(view: LineView, history=None) -> dict:
    """Everything the report shows, as formatted strings (deterministic for a given ledger);
    ``history`` (history.LineHistory): what amended, re-opened or re-measured the line, shown at the top."""
    reg, plan = view.registration, view.plan
    registered = view.registered or RegisteredRow()
    outcomes = view.outcomes()
    results = [r for r in outcomes.values() if r.kind == RESULT]
    verdict = view.verdict
    pairs = {(k, c) for k, c in outcomes if c in (plan.candidates or [])}
    n_pairs = view.n_pairs()
    clauses, primary = _clauses(view, outcomes)
    counts = Counter(r.kind for r in outcomes.values())
    groups = Counter((r.kind, _reason_group(r)) for r in outcomes.values() if r.kind != RESULT)
    flagged = Counter(f for r in results for f in ("rig_noisy", "impossible") if getattr(r, f))
    commits = sorted({r.commit for r in outcomes.values() if r.commit})
    devices = sorted({device_label(r) for r in outcomes.values()})
    noisy = bool(plan.include_noisy)
    header, tables = _config_tables(outcomes, results, summary.judged(reg), summary.stated_clocks(reg))
    control_tol = next((Policy.from_row(r.policy or {}).control_tolerance for r in results), None)
    return {
        "line": view.line,
        "history": [{"text": n.text, "items": list(n.items)} for n in history.notes()] if history else [],
        "provisional": verdict is None,
        "hypothesis": " ".join(str(plan.hypothesis if plan.has("hypothesis") else "").split()),
        "facts": [("workload", plan.workload if plan.has("workload") else "—"),
                  ("baseline", plan.baseline if plan.has("baseline") else "—"),
                  ("candidates", ", ".join(plan.candidates or []) or "—"),
                  ("registered", f"commit {str(registered.registration_commit or '?')[:12]}, registration "
                                 f"sha256 {str(registered.registration_sha256 or '?')[:12]}"),
                  ("measured at", ", ".join(c[:12] for c in commits) or "nothing measured yet"),
                  ("device", ", ".join(devices) or "—"),
                  ("pairs with an outcome", f"{len(pairs)} of {n_pairs if n_pairs is not None else '?'}"),
                  ("timing policy", ", ".join(f"{k}={v}" for k, v in sorted((plan.timing or {}).items()))
                   or "defaults"),
                  # A bar registered beyond a device's measured ceilings says why (governance/reductio.py).
                  *([("beyond the measured ceilings (waived)", " ".join(str(plan.beyond_ceiling_ok).split()))]
                    if plan.beyond_ceiling_ok else [])],
        "baseline": plan.baseline if plan.has("baseline") else "—",
        "go": " ".join(str(plan.go if plan.has("go") else "").split()),
        "verdict": None if verdict is None else {"outcome": verdict.outcome, "seq": verdict.seq,
                                                 "commit": str((verdict.commit or ""))[:12],
                                                 "excluded": ", ".join(f"{k}: {n}" for k, n in
                                                                       sorted((verdict.excluded or {}).items()))},
        "clauses": clauses,
        # Where each candidate stands against each peer the bar names, shape by shape.
        "peers": summary.peer_tables(reg, outcomes, include_noisy=noisy),
        # The first screen: per kernel, by how much, where, with what uncertainty; what qualifies it.
        "kernels": summary.kernel_rows(view, results, include_noisy=noisy),
        "rate_header": summary.rate_header(reg, results),
        "banners": summary.banners(view, outcomes, results, include_noisy=noisy),
        "method": summary.METHOD,
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
        "integration": _integration(view),
        "control_tolerance": control_tol,
        # Replicates beside the verdict (`bench replicate`): each instance's clauses, agreement, spread.
        "replication": _replication(view),
        # A line with no outcome yet: what to run instead of a page of empty frames (None: measured).
        "empty": _empty(view, outcomes),
    }
