"""`bench verdict LINE`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line


@app.command()
def verdict(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
            no_commit: bool = typer.Option(False, "--no-commit",
                                           help="dry run: print the verdict, write and commit nothing (the line "
                                                "stays open)"),
            show: bool = typer.Option(False, "--show",
                                      help="read only: print a closed line's verdict as it was written (exit 0 GO, "
                                           "1 NO-GO); decides and writes nothing"),
            format: str = typer.Option("table", "--format", help="table | json (the verdict row, with whether it "
                                                                 "was written and the commit holding it)")):
    """Evaluate the bar on the committed ledger, write GO or NO-GO, commit it, close the line.
    A verdict row exists only committed: --no-commit is a dry run that writes nothing.
    --show prints a closed line's written verdict instead (read only). Exit 0 GO, 1 NO-GO, 2 refused.

    Example: bench verdict flash-h200-v2 --show   (a closed line's verdict; on an open line,
    --no-commit is a dry run and without it the verdict is written)
    """
    from harness.governance.line import host_env, open_line
    from harness.governance.verdict import GO
    from harness.commands.verdict import close
    from harness.reporting.render.verdict import render_verdict

    from harness.reporting.render.formats import check_format

    check_format(format, ("table", "json"))  # a verdict is one document, not a table of records
    if show:
        _show(line, no_commit, format)
    with open_line(line, action="a verdict", commit=not no_commit) as ln:
        v = close(ln, host_env(), dry_run=no_commit)
    if format == "json":
        from harness.reporting.render.verdict import emit_verdict

        emit_verdict(v)
    else:
        render_verdict(v)
    raise typer.Exit(0 if v.outcome == GO else 1)


def _show(line: str, no_commit: bool, format: str) -> None:
    """`bench verdict LINE --show`: the written verdict, read only; exit as the verdict did."""
    from pathlib import Path

    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.governance.verdict import GO
    from harness.reporting.analysis import lines
    from harness.reporting.analysis.closed import written_verdict
    from harness.reporting.render.verdict import emit_verdict, render_verdict

    if no_commit:
        raise UserError("--show prints the verdict already written and --no-commit is a dry run of a new one: "
                        "pass one of them")
    name = Path(line).stem if line.endswith(".toml") else line
    v = written_verdict(lines.load(repo_root(), name))
    if format == "json":
        emit_verdict(v)
    else:
        render_verdict(v)
    raise typer.Exit(0 if v.outcome == GO else 1)
