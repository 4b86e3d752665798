"""What `bench ledger verify|show|repair` prints: each ledger's check, its rows as a table or
an export (CSV, JSON Lines) on stdout, and what a repair removed."""

from __future__ import annotations

import sys
from typing import Sequence
from pathlib import Path

from harness.ledger.rows import Row
from harness.errors import plural
from harness.ledger.store import rows_text
from harness.reporting.analysis.history import MAX_LISTED
from harness.reporting.render.console import console
from harness.reporting.render.formats import emit
from harness.reporting.analysis.tidy import replicate_text
from harness.reporting.render.rows import outcome_reason
from harness.workloads.keys import shorten
from harness.reporting.render.console import fit, table


def render_verified(name: str, res) -> None:
    """One ledger's verification (ledger.verify.verify): ok with what was checked, or BAD per problem."""
    from rich.markup import escape

    c = console()
    if not res.ok:
        for text in res.lines():  # one line each, whatever the width: a row's fields can hold [ ]
            c.print(f"[red]BAD[/]  {name}: {escape(text)}", soft_wrap=True)
        return
    n = res.n_results
    sums = f", {plural(n, 'result row')} add{'s' if n == 1 else ''} up" if n else ""
    note = f"; [yellow]{escape(res.unchecked)}[/]" if res.unchecked else ""
    note += "".join(f"; [yellow]{escape(text)}[/]" for text in res.unaudited)
    again = (f"; {plural(len(res.remeasured), 'pair')} re-measured at the same commit, the newest "
             f"measurement standing" if res.remeasured else "")
    if res.uncommitted:
        first, last = res.uncommitted
        it = "it" if first == last else "them"
        note += (f"; [yellow]{rows_text(first, last)} not committed[/]: a chain can be re-hashed, so only a "
                 f"commit vouches for who wrote {it}")
    c.print(f"[green]ok[/]   {name}: {plural(res.n_rows, 'row')}, chain intact{sums}{again}{note}")
    for m in res.remeasured[:MAX_LISTED]:
        c.print(f"       re-measured {escape(m.describe())}")  # wrapped at spaces: keys stay whole
    if len(res.remeasured) > MAX_LISTED:
        c.print(f"       and {len(res.remeasured) - MAX_LISTED} more (bench ledger show {Path(name).stem})")


def verified_record(name: str, res) -> dict:
    """One ledger's verification as data (`bench ledger verify --format json`): what
    ``render_verified`` says, every figure a number, every problem its own entry; ``line`` is
    None for a ledger of device data (``_device_ceilings``, ``_bisect``), which is no line."""
    uncommitted = None
    if res.ok and res.uncommitted:
        uncommitted = {"first": res.uncommitted[0], "last": res.uncommitted[1]}
    stem = Path(name).stem
    return {"ledger": name, "line": None if stem.startswith("_") else stem, "ok": res.ok, "rows": res.n_rows,
            "results_recomputed": res.n_results, "bad_row": res.bad_row, "problems": res.lines(), "torn": res.torn,
            "unsound": [{"line": n + 1, "seq": seq,
                         "disagreements": [{"field": d.field, "stored": d.stored, "recomputed": d.recomputed,
                                            "source": d.source} for d in found]}
                        for n, seq, found in res.unsound],
            "unchecked": res.unchecked, "rates_unaudited": list(res.unaudited), "uncommitted": uncommitted,
            "remeasured": [m.as_row() for m in res.remeasured] if res.ok else []}


def emit_verified(results: Sequence[tuple[str, object]], gone: list[tuple[str, str]], strict: bool) -> None:
    """`bench ledger verify --format json`: one document on stdout — ``ok`` (the exit code's
    answer), one record per ledger (``verified_record``) and the ledgers gone from the work tree."""
    ledgers = [verified_record(name, res) for name, res in results]
    emit("json", [], {"ok": all(r["ok"] for r in ledgers) and not gone, "strict": strict, "ledgers": ledgers,
                      "gone": [{"ledger": rel, "why": why} for rel, why in gone]})


def render_gone(rel: str, why: str) -> None:
    """A ledger git knows of that is gone from the work tree."""
    console().print(f"[red]GONE[/] {Path(rel).name}: {why}")


def render_warning(text: str) -> None:
    """A warning on stderr, so that an export on stdout stays clean."""
    print(f"bench: warning: {text}", file=sys.stderr)


def write_csv(df) -> None:
    """A data frame as CSV on stdout."""
    df.to_csv(sys.stdout, index=False)


def write_jsonl(lines) -> None:
    """Rows, already canonical JSON text, one a line on stdout."""
    for text in lines:
        sys.stdout.write(text + "\n")


def render_ledger(line: str, rows: list[Row], history=(), superseded: dict | None = None) -> None:
    """The rows as a table, a superseded row marked with the row that superseded it, after the
    line's ``history`` notes (history.LineHistory.notes)."""
    from rich.markup import escape

    c = console()
    for note in history:  # wrapped between words at the console's width
        head, *items = note.lines()
        c.print(f"[yellow]history[/]: {escape(head)}")
        for i in items:
            c.print(f"  {escape(i)}")

    superseded = superseded or {}
    configs = [k for k in (getattr(r, "config_key", None) for r in rows) if k]
    keys, shared = shorten(configs)
    t = table(title=f"ledger/{line}.jsonl — {plural(len(rows), 'row')}" + (f" (every config: {shared})" if shared else ""),
              show_lines=False)
    # Row times are in --format json / csv; the table keeps what tells rows apart, and only the
    # outcome's text wraps.
    for col in ("seq", "kind", "commit", "candidate", "config", "outcome"):
        t.add_column(col, no_wrap=col != "outcome", overflow="fold" if col == "outcome" else "ellipsis")
    for r in rows:
        gone = f"[dim](superseded by row {superseded[r.seq]})[/] " if r.seq in superseded else ""
        rep = replicate_text(getattr(r, "replicate", None))
        gone += f"[cyan]replicate {escape(rep)}[/]: " if rep else ""  # beside the line's rows, never one of them
        t.add_row(str(r.seq), r.kind, r.commit[:8], getattr(r, "candidate", None) or "",
                  keys.get(getattr(r, "config_key", None) or "", ""), gone + escape(outcome_reason(r)))
    c.print(fit(t))


def render_repaired(fixed) -> None:
    """What `bench ledger repair` removed (ledger.store.Ledger.repair) and what stays."""
    kept = f"rows 0-{fixed.row - 1} are intact" if fixed.row else "no complete row was in it"
    if fixed.foreign_lines:
        where = f"after row {fixed.row - 1}, the last that chains" if fixed.row else "where row 0 would be"
        console().print(f"repaired {fixed.path}: removed {plural(fixed.foreign_lines, 'line')} bench did not write "
                        f"({fixed.removed_bytes} bytes from offset {fixed.offset}, {where}); {kept}", soft_wrap=True)
        return
    console().print(f"repaired {fixed.path}: removed an incomplete final line ({fixed.removed_bytes} bytes, "
                    f"what would have been row {fixed.row}); {kept}")
