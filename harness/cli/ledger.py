"""`bench ledger verify|show|repair`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import HELP_OPTIONS, app, complete_line

ledger_app = typer.Typer(no_args_is_help=True, context_settings=HELP_OPTIONS,
                         help="Inspect and verify the append-only ledgers.")
app.add_typer(ledger_app, name="ledger")


def _paths(line: Optional[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """The ledgers to look at, and ledgers git knows of that are gone from the work tree."""
    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.ledger.store import missing_ledgers
    from harness.ledger.format import ledger_path
    from harness.registration.line_ids import line_of

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
def verify(line: Optional[str] = typer.Argument(None, autocompletion=complete_line, help="line id or registrations/NAME.toml (default: every ledger)"),
           strict: bool = typer.Option(False, "--strict",
                                       help="an error (exit 2) where a shallow clone lacks history a check needs"),
           json: bool = typer.Option(False, "--json", help="the result as one JSON document on stdout (= --format "
                                                           "json)"),
           format: Optional[str] = typer.Option(None, "--format", help="table | json (one document: ok, each "
                                                                       "ledger's record, the ledgers gone)")):
    """Re-check every hash chain and its committed history, and recompute each result row's
    statistics and metrics from its raw samples; name the first bad row (every result row
    whose figures disagree, with the field, stored and recomputed), and ledgers deleted from
    the work tree or from git; name the rows no commit holds (a chain can be re-hashed: only a
    commit vouches for who wrote a row). Exit 1 if anything is wrong. In a shallow clone (CI checkouts)
    what needs the missing history is named on the ledger's line, and skipped.

    Example: bench ledger verify   (every ledger; or: bench ledger verify flash-h200-v2)
    """
    from harness.errors import UserError, plural
    from harness.ledger.verify import verify as do_verify
    from harness.reporting.render.formats import check_format
    from harness.reporting.render.ledger import emit_verified, render_gone, render_verified

    if format is not None:
        check_format(format, ("table", "json"))
        if json and format != "json":
            raise UserError(f"--format {format} and --json both given: pick one output format")
    as_json = json or format == "json"
    paths, gone = _paths(line)
    bad = len(gone)
    unchecked, results = [], []
    for p in paths:
        res = do_verify(p)
        if as_json:
            results.append((p.name, res))  # one document at the end: stdout holds nothing else
        else:
            render_verified(p.name, res)
        bad += 0 if res.ok else 1
        unchecked += [p.name] if res.ok and res.unchecked else []
    if not as_json:
        for rel, why in gone:
            render_gone(rel, why)
    refused = bool(not bad and strict and unchecked)
    if as_json and not refused:
        emit_verified(results, gone, strict)
    if refused:
        raise UserError(f"--strict: {plural(len(unchecked), 'ledger')} could not be checked against history this "
                        f"shallow clone lacks ({', '.join(unchecked)}): fetch it (git fetch --unshallow) and run "
                        f"bench ledger verify --strict again")
    raise typer.Exit(1 if bad else 0)


@ledger_app.command("show")
def show(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
         csv: bool = typer.Option(False, "--csv", help="write all rows as CSV to stdout"),
         json: bool = typer.Option(False, "--json", help="write all rows as JSON Lines to stdout"),
         kind: Optional[str] = typer.Option(None, help="only rows of this kind"),
         format: Optional[str] = typer.Option(None, "--format",
                                              help="table | json (JSON Lines, the rows as stored; = --json) | csv "
                                                   "(one flat row per ledger row; = --csv) | tidy (one CSV row per "
                                                   "(config, candidate) outcome, typed config columns, one column "
                                                   "per metric)")):
    """Print a line's rows as a table (or export them). A ledger that fails verification is
    still shown as far as it reads, with a warning on stderr, and exits 1.

    Example: bench ledger show flash-h200-v2
    """
    from harness.errors import UserError
    from harness.ledger.store import KINDS, frame
    from harness.ledger.format import canonical, read_rows
    from harness.ledger.verify import verify as do_verify, verify_refusal
    from harness.reporting.analysis.tidy import tidy_frame
    from harness.reporting.render.ledger import render_ledger, render_warning, write_csv, write_jsonl

    # Contradictory flags are refused before anything is read.
    if csv and json:
        raise UserError("--csv and --json both given: pick one output format")
    from harness.reporting.render.formats import FORMATS, check_format

    if format is not None:
        check_format(format, (*FORMATS, "tidy"))
    if format is not None and (csv or json):
        raise UserError(f"--format {format} and --csv / --json both given: pick one output format")
    csv, json = csv or format == "csv", json or format == "json"
    format = "tidy" if format == "tidy" else None
    if kind is not None and kind not in KINDS:
        raise UserError(f"--kind {kind!r} is not a row kind (kinds: {', '.join(KINDS)})")
    path = _one(line)
    res = do_verify(path)
    if not res.ok:
        render_warning(verify_refusal(f"ledger/{path.name}", res, "trusting these rows"))
    # A ledger that fails verification is shown up to its first row that cannot be read.
    everything = read_rows(path, as_far_as_it_reads=not res.ok)
    if format is not None:
        df = tidy_frame(everything)
        if kind:
            df = df[df["kind"] == kind]
        write_csv(df)
    elif csv:
        df = frame(everything)
        if kind:
            df = df[df["kind"] == kind]
        write_csv(df)
    else:
        rows = [r for r in everything if kind is None or r.kind == kind]
        if json:
            write_jsonl(canonical(r.dump()) for r in rows)
        else:
            from harness.provenance.git import repo_root
            from harness.vocab.outcomes import superseded_by
            from harness.reporting.analysis.history import index, line_history

            hist = line_history(index(repo_root()), path.stem, everything if res.ok else ())
            render_ledger(path.stem, rows, hist.notes(), superseded_by(everything))
    raise typer.Exit(0 if res.ok else 1)


@ledger_app.command("repair")
def repair(line: str = typer.Argument(..., autocompletion=complete_line, help="line id")):
    """Remove, at the end of the ledger, what bench did not write — an incomplete final line (a
    write that never finished), or lines after the chain that claim no row of it (a kernel's
    writes, which a sweep names when it finds them) — and nothing else: never a committed row
    or a row bench wrote. Says what it removed. Exit 0 after a repair, 2 when the ledger
    verifies (nothing to repair).

    Example: bench ledger repair flash-h200-v2   (an intact ledger: exit 2, nothing to repair)
    """
    from harness.provenance.git import repo_root
    from harness.ledger.store import Ledger
    from harness.governance.line import line_lock
    from harness.reporting.render.ledger import render_repaired

    path = _one(line)
    root = repo_root()
    with line_lock(root, path.stem):
        fixed = Ledger(root, path.stem).repair()
    render_repaired(fixed)
