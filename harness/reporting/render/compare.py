"""What `bench compare` shows: the comparison as a rich table, its notes, and CI mode's outcome."""

from __future__ import annotations

import math

from harness.reporting.analysis.compare import FASTER, SAME, SAME_BAND, SLOWER, UNCLEAR, Comparison
from harness.reporting.render.console import console
from harness.reporting.render.console import fit, table
from harness.workloads.keys import shorten
from harness.reporting.render.formats import emit, emit_markdown, markdown, note

# The console width below which a clock shares its time's column and the CI its speedup's.
COMPARE_MERGE_BELOW = 120
CHANGE_STYLE = {FASTER: "green", SLOWER: "red", SAME: "cyan", UNCLEAR: "yellow"}


def _f(x: float, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _mhz(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}"


def _pct(x: float) -> str:
    """A fraction as a percentage without false precision (0.02 → 2%, 0.005 → 0.5%)."""
    return f"{x * 100:.3g}%"


def _caption(cmp: Comparison, clocks: str = " (A MHz, B MHz)") -> str:
    sig = cmp.significance()
    return (f"A ms, B ms: the candidate's median in each run's interleaved rounds, at that run's mean SM clock"
            f"{clocks}; "
            f"speedup = median A / median B (> 1: B faster); CI: bootstrap 95%; p adj.: Mann-Whitney U, "
            f"Benjamini-Hochberg-adjusted over {sig['tests']} configs (significant at q = {cmp.q:g}: {sig['raw']} "
            f"before the adjustment, {sig['adjusted']} after); SAME inside ±{SAME_BAND:.0%}, FASTER/SLOWER at adjusted "
            f"p < {cmp.q:g} and a change of at least {_pct(cmp.min_effect)}")


def comparison_table(cmp: Comparison, threshold: float | None = None):
    """A rich Table: one row per config, B against A; regressions beyond ``threshold`` marked."""
    counts = ", ".join(f"{k} {n}" for k, n in cmp.counts().items())
    keys, shared = shorten(p.config_key for p in cmp.pairs)
    # Clocks equal on both sides of every pair take one column; one clock everywhere, none (caption).
    one = {_mhz(x) for p in cmp.pairs for x in (p.clock_a_mhz, p.clock_b_mhz)}
    same = all(_mhz(p.clock_a_mhz) == _mhz(p.clock_b_mhz) for p in cmp.pairs)
    mhz = () if len(one) == 1 else ("MHz",) if same else ("A MHz", "B MHz")
    clocks = (" (A MHz, B MHz)" if len(mhz) == 2 else " (MHz, equal on both sides of each config)" if mhz else
              " (not recorded)" if one == {"—"} else f": {one.pop()} MHz on both sides of every config")
    t = table(title=f"{cmp.b} against {cmp.a} — {counts}" + (f" (every config: {shared})" if shared else ""),
              caption=_caption(cmp, clocks))
    # Each column: its header and the figures it shows. Narrower than COMPARE_MERGE_BELOW, a clock
    # shares its time's cell and the CI its speedup's, each wrapping between its figures.
    a_ms, b_ms = ("A ms", *(("A MHz",) if len(mhz) == 2 else ())), ("B ms", *(m for m in mhz if m != "A MHz"))
    ratio = ("speedup", "CI")
    if console().width < COMPARE_MERGE_BELOW:
        figures = [a_ms, b_ms, ratio]
    else:
        figures = [(f,) for f in (*a_ms, *b_ms, *ratio)]
    cols = [("config",), ("candidate",), *figures, ("p adj.",), ("change",)]
    for col in cols:
        # A key is short and never wraps; a candidate pair wraps at its arrow, merged figures between them.
        t.add_column(", ".join(col), justify="left" if col[0] in ("config", "candidate", "change") else "right",
                     no_wrap=len(col) == 1 and col[0] != "candidate")
    failing = {id(p) for p in cmp.regressions(threshold)} if threshold is not None else set()
    for p in cmp.pairs:
        kernel = p.kernel_a if p.kernel_a == p.kernel_b else f"{p.kernel_a} → {p.kernel_b}"
        style = CHANGE_STYLE[p.change]
        mark = f" (beyond {threshold:.0%})" if id(p) in failing else ""
        cells = {"config": keys[p.config_key], "candidate": kernel, "A ms": _f(p.median_a_ms, ".4g"),
                 "B ms": _f(p.median_b_ms, ".4g"), "A MHz": _mhz(p.clock_a_mhz), "B MHz": _mhz(p.clock_b_mhz),
                 "MHz": _mhz(p.clock_b_mhz), "speedup": _f(p.speedup, ".3f") + "×",
                 "CI": f"{_f(p.ci_low, '.3f')}–{_f(p.ci_high, '.3f')}", "p adj.": _f(p.p_adjusted, ".2g"),
                 "change": f"[{style}]{p.change}[/]{mark}"}
        t.add_row(*(" ".join(cells[f] for f in col) for col in cols))
    return t


def comparison_notes(cmp: Comparison) -> list[str]:
    notes = []
    if cmp.only_a:
        notes.append(f"only in {cmp.a} (not compared): {', '.join(cmp.only_a[:5])}"
                     + (f" and {len(cmp.only_a) - 5} more" if len(cmp.only_a) > 5 else ""))
    if cmp.only_b:
        notes.append(f"only in {cmp.b} (not compared): {', '.join(cmp.only_b[:5])}"
                     + (f" and {len(cmp.only_b) - 5} more" if len(cmp.only_b) > 5 else ""))
    if cmp.mixed:
        notes.append(f"compared across different settings (--allow-mixed): {'; '.join(cmp.mixed[:3])}"
                     + (f" and {len(cmp.mixed) - 3} more" if len(cmp.mixed) > 3 else ""))
    if cmp.unrecorded:
        notes.append(f"not checked, one side never recorded it: {'; '.join(cmp.unrecorded)}")
    return notes


def render_comparison(cmp: Comparison, threshold: float | None, notes=(), next_run=None) -> None:
    """The table (regressions beyond ``threshold`` marked, CI mode), then the comparison's and the
    caller's notes, then with ``next_run`` (a ``nextrun.Coverage``) its lines."""
    c = console()
    c.print(fit(comparison_table(cmp, threshold)))
    for text in [*comparison_notes(cmp), *notes]:
        c.print(f"  note: {text}", markup=False)
    for text in next_run_lines(next_run) if next_run is not None else ():
        c.print(text, markup=False)


def next_run_lines(cov) -> list[str]:
    """`bench compare --next-run`: B's speedups against A's within-run CIs and next-run intervals."""
    if not cov.n:
        return [f"next run: {cov.first} and {cov.second} share no pair both counted"]
    keys, _ = shorten(p.config_key for p in cov.pairs)
    out = [f"next run: {cov.second}'s speedups inside {cov.first}'s within-run CIs {cov.in_ci}/{cov.n} "
           f"({cov.in_ci / cov.n:.0%}, nominal {'/'.join(f'{x:.4g}' for x in cov.ci_levels)}), inside its next-run "
           f"intervals {cov.in_next}/{cov.n} ({cov.in_next / cov.n:.0%}, nominal {cov.between.level:g}); "
           f"{cov.between.describe()}"
           + ("" if cov.implied_tau is None else f"; these two runs imply τ {cov.implied_tau:.2%}")]
    for p in cov.pairs:
        if not p.in_next:
            out.append(f"  outside the next-run interval: {keys[p.config_key]} {p.candidate}: "
                       f"{_f(p.speedup, '.4f')} [{_f(p.next_low, '.4f')}, {_f(p.next_high, '.4f')}] → "
                       f"{_f(p.second, '.4f')}")
    out += [f"  note: {n}" for n in cov.notes]
    return out


def next_run_record(cov) -> dict:
    """``next_run_lines`` as data (`--format json`)."""
    return {"first": cov.first, "second": cov.second, "n": cov.n, "in_ci": cov.in_ci, "ci_levels": list(cov.ci_levels),
            "in_next": cov.in_next, "between": cov.between.as_dict(), "implied_tau": cov.implied_tau,
            "shift": cov.shift, "notes": list(cov.notes),
            "pairs": [{**p._asdict(), "in_ci": p.in_ci, "in_next": p.in_next} for p in cov.pairs]}


MD_COLUMNS = ["config", "candidate", "A ms", "A MHz", "B ms", "B MHz", "speedup", "CI", "p adj.", "change"]


def comparison_markdown(cmp: Comparison, threshold: float | None, notes=(), next_run=None) -> str:
    """`bench compare --format md`: the table as a pull-request comment (GitHub-flavoured
    Markdown), its caption and notes, ``next_run``'s lines, and in CI mode the outcome line."""
    counts = ", ".join(f"{k} {n}" for k, n in cmp.counts().items())
    keys, shared = shorten(p.config_key for p in cmp.pairs)
    failing = {id(p) for p in cmp.regressions(threshold)} if threshold is not None else set()
    rows = []
    for p in cmp.pairs:
        kernel = p.kernel_a if p.kernel_a == p.kernel_b else f"{p.kernel_a} → {p.kernel_b}"
        change = f"**{p.change}**" if p.change in (FASTER, SLOWER) else p.change
        rows.append([keys[p.config_key], kernel, _f(p.median_a_ms, ".4g"), _mhz(p.clock_a_mhz),
                     _f(p.median_b_ms, ".4g"), _mhz(p.clock_b_mhz), _f(p.speedup, ".3f") + "×",
                     f"[{_f(p.ci_low, '.3f')}, {_f(p.ci_high, '.3f')}]", _f(p.p_adjusted, ".2g"),
                     change + (f" (beyond {threshold:.0%})" if id(p) in failing else "")])
    after = [t.strip() for t in next_run_lines(next_run)] if next_run is not None else []
    if threshold is not None:
        after.append(ci_outcome_text(cmp, threshold, cmp.regressions(threshold)))
    title = f"{cmp.b} against {cmp.a} — {counts}" + (f" (every config: {shared})" if shared else "")
    return markdown(title, MD_COLUMNS, rows, right=("A ms", "A MHz", "B ms", "B MHz", "speedup", "CI", "p adj."),
                    caption=_caption(cmp), notes=[*comparison_notes(cmp), *notes], after=after)


def emit_comparison_markdown(cmp: Comparison, threshold: float | None, notes=(), next_run=None) -> None:
    emit_markdown(comparison_markdown(cmp, threshold, notes, next_run))


def ci_outcome_text(cmp: Comparison, threshold: float, bad) -> str:
    """CI mode's last line, unstyled: FAIL naming the worst regression, or ok."""
    if bad:
        return (f"FAIL: {len(bad)} config(s) significantly slower than {cmp.a} by more than {threshold:.0%} "
                f"(worst {max(p.slowdown for p in bad):.1%} slower)")
    return f"ok: no config significantly slower than {cmp.a} by more than {threshold:.0%}"


def render_ci_outcome(cmp: Comparison, threshold: float, bad) -> None:
    """CI mode's last line: FAIL naming the worst regression, or ok."""
    if bad:
        console().print(f"[red]FAIL[/]: {len(bad)} config(s) significantly slower than {cmp.a} by more than "
                        f"{threshold:.0%} (worst {max(p.slowdown for p in bad):.1%} slower)")
    else:
        console().print(f"[green]ok[/]: no config significantly slower than {cmp.a} by more than {threshold:.0%}")


def comparison_records(cmp: Comparison, threshold: float | None = None) -> list[dict]:
    """One flat record per compared config: what the table shows, unstyled."""
    failing = {id(p) for p in cmp.regressions(threshold)} if threshold is not None else set()
    return [{"config": p.config_key, "candidate_a": p.kernel_a, "candidate_b": p.kernel_b,
             "median_a_ms": p.median_a_ms, "median_b_ms": p.median_b_ms, "clock_a_mhz": p.clock_a_mhz,
             "clock_b_mhz": p.clock_b_mhz, "n_a": p.n_a, "n_b": p.n_b, "speedup": p.speedup, "ci_low": p.ci_low,
             "ci_high": p.ci_high, "p_value": p.p_value, "p_adjusted": p.p_adjusted, "change": p.change,
             "regression": id(p) in failing} for p in cmp.pairs]


def emit_comparison(cmp: Comparison, fmt: str, threshold: float | None, notes=(), next_run=None) -> None:
    """The comparison as JSON (with its counts, the adjustment's, the CI mode's outcome, and with
    ``next_run`` its coverage record) or CSV; notes on stderr."""
    records = comparison_records(cmp, threshold)
    document = {"a": cmp.a, "b": cmp.b, "counts": cmp.counts(), "significance": cmp.significance(),
                "fdr_q": cmp.q, "same_band": SAME_BAND, "min_effect": cmp.min_effect, "threshold": threshold,
                "regressions": sum(r["regression"] for r in records), "pairs": records, "only_a": list(cmp.only_a),
                "only_b": list(cmp.only_b), "mixed": list(cmp.mixed),
                "unrecorded": list(cmp.unrecorded),
                **({"next_run": next_run_record(next_run)} if next_run is not None else {})}
    emit(fmt, records, document)
    for n in [*comparison_notes(cmp), *notes]:
        note(n)
