"""`bench ledger verify|show|repair`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import HELP_OPTIONS, app

ledger_app = typer.Typer(no_args_is_help=True, context_settings=HELP_OPTIONS,
                         help="Inspect and verify the append-only ledgers.")
app.add_typer(ledger_app, name="ledger")


def _paths(line: Optional[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """The ledgers to look at, and ledgers git knows of that are gone from the work tree."""
    from harness.errors import UserError
    from harness.governance.gitguard import repo_root
    from harness.governance.ledger import missing_ledgers
    from harness.governance.ledger_format import ledger_path
    from harness.governance.line_ids import line_of

    root = repo_root()
    missing = missing_ledgers(root)
    if line:
        name, _ = line_of(root, line)
        p = ledger_path(root, name)
        gone = [m for m in missing if m[0] == f"ledger/{p.name}"]
        if not p.exists() and not gone:
            raise UserError(f"no ledger for line '{name}' (ledger/{p.name}): register it first")
        return ([p] if p.exists() else []), gone
    paths = sorted((root / "ledger").glob("*.jsonl"))
    if not paths and not missing:
        raise UserError(f"no ledgers under {root / 'ledger'}: register a line first")
    return paths, missing


def _one(line: str) -> Path:
    from harness.errors import UserError

    paths, gone = _paths(line)
    if gone:
        raise UserError(f"line '{Path(gone[0][0]).stem}' is GONE: {gone[0][0]} is {gone[0][1]}")
    return paths[0]


@ledger_app.command("verify")
def verify(line: Optional[str] = typer.Argument(None, help="line id or registrations/NAME.toml (default: every ledger)"),
           strict: bool = typer.Option(False, "--strict",
                                       help="an error (exit 2) where a shallow clone lacks history a check needs")):
    """Re-check every hash chain and its committed history, and recompute each result row's
    statistics and metrics from its raw samples; name the first bad row (every result row
    whose figures disagree, with the field, stored and recomputed), and ledgers deleted from
    the work tree or from git. Exit 1 if anything is wrong. In a shallow clone (CI checkouts)
    what needs the missing history is named on the ledger's line, and skipped."""
    from harness.errors import UserError, plural
    from harness.governance.ledger_verify import verify as do_verify
    from rich.markup import escape

    from harness.reporting.console import console
    from harness.reporting.history import MAX_LISTED

    paths, gone = _paths(line)
    bad = len(gone)
    unchecked = []
    for p in paths:
        res = do_verify(p)
        if res.ok:
            n = res.n_results
            sums = f", {plural(n, 'result row')} add{'s' if n == 1 else ''} up" if n else ""
            note = f"; [yellow]{escape(res.unchecked)}[/]" if res.unchecked else ""
            again = (f"; {plural(len(res.remeasured), 'pair')} re-measured at the same commit, the newest "
                     f"measurement standing" if res.remeasured else "")
            console().print(f"[green]ok[/]   {p.name}: {plural(res.n_rows, 'row')}, chain intact{sums}{again}{note}")
            for m in res.remeasured[:MAX_LISTED]:
                console().print(f"       re-measured {escape(m.describe())}", soft_wrap=True)
            if len(res.remeasured) > MAX_LISTED:
                console().print(f"       and {len(res.remeasured) - MAX_LISTED} more (bench ledger show {p.stem})")
            unchecked += [p.name] if res.unchecked else []
        else:
            bad += 1
            for text in res.lines():  # one line each, whatever the width: a row's fields can hold [ ]
                console().print(f"[red]BAD[/]  {p.name}: {escape(text)}", soft_wrap=True)
    for rel, why in gone:
        console().print(f"[red]GONE[/] {Path(rel).name}: {why}")
    if not bad and strict and unchecked:
        raise UserError(f"--strict: {plural(len(unchecked), 'ledger')} could not be checked against history this "
                        f"shallow clone lacks ({', '.join(unchecked)}): fetch it (git fetch --unshallow) and run "
                        f"bench ledger verify --strict again")
    raise typer.Exit(1 if bad else 0)


@ledger_app.command("show")
def show(line: str = typer.Argument(..., help="line id or registrations/NAME.toml"),
         csv: bool = typer.Option(False, "--csv", help="write all rows as CSV to stdout"),
         json: bool = typer.Option(False, "--json", help="write all rows as JSON Lines to stdout"),
         kind: Optional[str] = typer.Option(None, help="only rows of this kind"),
         format: Optional[str] = typer.Option(None, "--format",
                                              help="tidy: one CSV row per (config, kernel) outcome, typed config "
                                                   "columns and one column per metric")):
    """Print a line's rows as a table (or export them). A ledger that fails verification is
    still shown as far as it reads, with a warning on stderr, and exits 1."""
    import sys

    from harness.errors import UserError
    from harness.governance.ledger import KINDS, dataframe
    from harness.governance.ledger_format import canonical, read_rows
    from harness.governance.ledger_verify import verify as do_verify, verify_refusal
    from harness.reporting.render import render_ledger
    from harness.reporting.tidy import tidy as tidy_view

    # Contradictory flags are refused before anything is read.
    if csv and json:
        raise UserError("--csv and --json both given: pick one output format")
    if format is not None and format != "tidy":
        raise UserError(f"--format {format!r} is not a format: use --format tidy (or --csv / --json)")
    if format is not None and (csv or json):
        raise UserError("--format tidy is a CSV of its own: drop --csv / --json")
    if kind is not None and kind not in KINDS:
        raise UserError(f"--kind {kind!r} is not a row kind (kinds: {', '.join(KINDS)})")
    path = _one(line)
    res = do_verify(path)
    if not res.ok:
        print(f"bench: warning: {verify_refusal(f'ledger/{path.name}', res, 'trusting these rows')}", file=sys.stderr)
    if format is not None:
        df = tidy_view(path)
        if kind:
            df = df[df["kind"] == kind]
        df.to_csv(sys.stdout, index=False)
    elif csv:
        df = dataframe(path)
        if kind:
            df = df[df["kind"] == kind]
        df.to_csv(sys.stdout, index=False)
    else:
        rows = [r for r in read_rows(path) if kind is None or r["kind"] == kind]
        if json:
            for r in rows:
                sys.stdout.write(canonical(r) + "\n")
        else:
            from harness.governance.gitguard import repo_root
            from harness.governance.outcomes import superseded_by
            from harness.reporting.history import index, line_history

            everything = read_rows(path)
            hist = line_history(index(repo_root()), path.stem, everything if res.ok else ())
            render_ledger(path.stem, rows, hist.notes(), superseded_by(everything))
    raise typer.Exit(0 if res.ok else 1)


@ledger_app.command("repair")
def repair(line: str = typer.Argument(..., help="line id")):
    """Remove an incomplete final line (a write that never finished) and nothing else."""
    from harness.governance.gitguard import repo_root
    from harness.governance.ledger import Ledger
    from harness.governance.line import line_lock
    from harness.reporting.console import console

    path = _one(line)
    root = repo_root()
    with line_lock(root, path.stem):
        fixed = Ledger(root, path.stem).repair()
    kept = f"rows 0-{fixed.row - 1} are intact" if fixed.row else "no complete row was in it"
    console().print(f"repaired {fixed.path}: removed an incomplete final line ({fixed.removed_bytes} bytes, "
                    f"what would have been row {fixed.row}); {kept}")
