"""What `bench verdict` prints: each clause, the coverage, the primary and the outcome."""

from __future__ import annotations

from harness.errors import plural
from harness.ledger.payloads import OpShare, each
from harness.ledger.line_payloads import Coverage, Failure, IntegrationStep, MeasuredAt
from harness.vocab.outcomes import Remeasure
from harness.reporting.analysis.history import MAX_LISTED
from harness.reporting.analysis.summary import margin_text
from harness.reporting.render.console import console
from harness.reporting.render.rows import fmt
from harness.reporting.render.formats import emit


def margin(cl) -> str:
    """How far a clause's value lies from its threshold, on the passing side (+) or not (−):
    "513.6 ≥ 500" reads "margin +13.6 (+2.7%)". Empty for == and where there is no value."""
    text = margin_text(cl.value, cl.op, cl.threshold)
    return f", margin {text}" if text else ""


def integration_lines(steps: list[dict]) -> list[str]:
    """Per candidate of an [integration] line: the measured step gain beside the one the
    kernel's probe predicted, the probe → in-situ factor and the op's share of the step."""
    out = []
    for s in each(IntegrationStep, steps):
        state = "" if s.correct else " (failed the float64 check: no number)"
        noisy = " [rig-noisy]" if s.rig_noisy else ""
        used = OpShare.from_row(s.op_share_used or {})
        out.append(f"  integration {s.candidate}{state}{noisy}: step gain {fmt(s.step_gain, '+.2%')} measured, "
                   f"{fmt(s.step_gain_predicted, '+.2%')} predicted from the kernel's probe speedup "
                   f"(probe/in-situ factor {fmt(s.probe_factor, '.3g')}); op share {fmt(used.value, '.1%')} "
                   f"({used.source if used.has('source') else 'unknown'})")
    return out


def render_verdict(v) -> None:
    c = console()
    for cl in v.bar.clauses:
        mark = "[green]pass[/]" if cl.passed else "[red]fail[/]"
        c.print(f"  {mark}  {cl.text}   → {fmt(cl.value, '.4g')} over {plural(cl.n, 'row')}{margin(cl)}")
        if cl.note:
            c.print(f"        {cl.note}", markup=False)
    for cl in v.verify:
        mark = {True: "[green]pass[/]", False: "[red]fail[/]", None: "[yellow]unknown[/]"}[cl.passed]
        bad = [x for x in cl.checks if x.holds is not True]
        shown = "; ".join(f"{x.candidate} @ {x.config_key}: {fmt(x.left, '.4g')} vs {fmt(x.right, '.4g')}"
                          for x in bad[:3])
        c.print(f"  {mark}  verify: {cl.text}   over {plural(len(cl.checks), 'profiled result')}"
                + (f" — {len(bad)} not holding, e.g. {shown}" if bad else ""))
    if v.excluded:
        c.print(f"  excluded from the bar: {', '.join(f'{k}: {n}' for k, n in sorted(v.excluded.items()))}")
    failed = each(Failure, v.row.failures)
    if failed:
        c.print(f"  decided on failures: every pair the bar decides on failed its kernel "
                f"({plural(len(failed), 'pair')}) — the hypothesis failed, NO-GO whatever the clauses read:")
        for f in failed[:MAX_LISTED]:
            c.print(f"    {f.candidate} @ {f.config_key}: {f.state}{' [' + f.tag + ']' if f.tag else ''} "
                    f"(row {f.seq}): {f.reason}", markup=False, soft_wrap=True)
        if len(failed) > MAX_LISTED:
            c.print(f"    and {len(failed) - MAX_LISTED} more (bench ledger show {v.row.line})")
    again = v.row.remeasured or []
    if again:
        c.print(f"  re-measured at the same commit, decided on the newest measurement ({plural(len(again), 'pair')}):")
        for m in again[:MAX_LISTED]:
            c.print(f"    {Remeasure.from_row(m).describe()}", markup=False)
        if len(again) > MAX_LISTED:
            c.print(f"    and {len(again) - MAX_LISTED} more (bench ledger show {v.row.line})")
    for line in integration_lines(v.row.integration or []):
        c.print(line, markup=False)
    if v.row.coverage:
        cov = Coverage.from_row(v.row.coverage)
        c.print(f"  coverage: decided on {cov.decided} of {cov.pairs} registered pairs"
                + (f" (min_coverage {cov.min_coverage:g})" if cov.min_coverage is not None else ""))
    c.print(f"  {v.primary} = {fmt(v.primary_value, '.4g')}, predicted {v.prediction:g}"
            + ("" if v.primary_value is None else f" (outcome − prediction = {v.primary_value - v.prediction:+.4g})"))
    if v.row.primary_note:
        c.print(f"        {v.row.primary_note}", markup=False)
    color = "green" if v.outcome == "GO" else "red"
    if v.dry_run:
        c.print(f"[bold {color}]{v.outcome}[/] — dry run: nothing written, line {v.row.line} stays open "
                f"(`bench verdict {v.row.line}` writes this verdict and commits it)")
        return
    decided_at = MeasuredAt.from_row(v.row.measured_at or {}).commit if not v.anchored else None
    c.print(f"[bold {color}]{v.outcome}[/] — line {v.row.line} closed at ledger row {v.row.seq}"
            + (f", committed as {v.anchored[:12]}" if v.anchored else "")
            + (f" (decided on rows measured at {decided_at[:12]}, written {v.row.time})" if decided_at else ""))


def emit_verdict(v) -> None:
    """The verdict as one JSON document: the row (as written, or as it would be), whether it was
    written, and the commit holding it."""
    emit("json", [], {"outcome": v.outcome, "dry_run": v.dry_run, "written": not v.dry_run,
                      "commit": v.anchored, "row": v.row.dump()})
