"""`bench ledger verify|show`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import HELP_OPTIONS, app

ledger_app = typer.Typer(no_args_is_help=True, context_settings=HELP_OPTIONS,
                         help="Inspect and verify the append-only ledgers.")
app.add_typer(ledger_app, name="ledger")


def _paths(line: Optional[str]) -> list[Path]:
    from harness.errors import UserError
    from harness.governance.gitguard import repo_root
    from harness.governance.ledger import ledger_path
    from harness.governance.registration import line_of

    root = repo_root()
    if line:
        name, _ = line_of(root, line)
        p = ledger_path(root, name)
        if not p.exists():
            raise UserError(f"no ledger for line '{name}' (ledger/{p.name}): register it first")
        return [p]
    paths = sorted((root / "ledger").glob("*.jsonl"))
    if not paths:
        raise UserError(f"no ledgers under {root / 'ledger'}: register a line first")
    return paths


@ledger_app.command("verify")
def verify(line: Optional[str] = typer.Argument(None, help="line id or registrations/NAME.toml (default: every ledger)")):
    """Re-check every hash chain; name the first bad row. Exit 1 if any chain is broken."""
    from harness.errors import plural
    from harness.governance.ledger import verify as do_verify
    from harness.reporting.console import console

    bad = 0
    for p in _paths(line):
        res = do_verify(p)
        if res.ok:
            console().print(f"[green]ok[/]   {p.name}: {plural(res.n_rows, 'row')}, chain intact")
        else:
            bad += 1
            console().print(f"[red]BAD[/]  {p.name}: {res.reason}")
    raise typer.Exit(1 if bad else 0)


@ledger_app.command("show")
def show(line: str = typer.Argument(..., help="line id or registrations/NAME.toml"),
         csv: bool = typer.Option(False, "--csv", help="write all rows as CSV to stdout"),
         json: bool = typer.Option(False, "--json", help="write all rows as JSON Lines to stdout"),
         kind: Optional[str] = typer.Option(None, help="only rows of this kind"),
         format: Optional[str] = typer.Option(None, "--format",
                                              help="tidy: one CSV row per (config, kernel) outcome, typed config "
                                                   "columns and one column per metric")):
    """Print a line's rows as a table (or export them)."""
    import sys

    from harness.errors import UserError
    from harness.governance.ledger import KINDS, canonical, dataframe, read_rows
    from harness.reporting.render import render_ledger

    # Contradictory flags are refused before anything is read.
    if csv and json:
        raise UserError("--csv and --json both given: pick one output format")
    if format is not None and format != "tidy":
        raise UserError(f"--format {format!r} is not a format: use --format tidy (or --csv / --json)")
    if format is not None and (csv or json):
        raise UserError("--format tidy is a CSV of its own: drop --csv / --json")
    if kind is not None and kind not in KINDS:
        raise UserError(f"--kind {kind!r} is not a row kind (kinds: {', '.join(KINDS)})")
    (path,) = _paths(line)
    if format is not None:
        df = dataframe(path, tidy=True)
        if kind:
            df = df[df["kind"] == kind]
        df.to_csv(sys.stdout, index=False)
        return
    if csv:
        df = dataframe(path)
        if kind:
            df = df[df["kind"] == kind]
        df.to_csv(sys.stdout, index=False)
        return
    rows = [r for r in read_rows(path) if kind is None or r["kind"] == kind]
    if json:
        for r in rows:
            sys.stdout.write(canonical(r) + "\n")
        return
    render_ledger(path.stem, rows)
