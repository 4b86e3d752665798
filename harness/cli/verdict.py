"""`bench verdict LINE`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def verdict(line: str = typer.Argument(..., help="line id or registrations/NAME.toml"),
            no_commit: bool = typer.Option(False, "--no-commit",
                                           help="dry run: print the verdict, write and commit nothing (the line "
                                                "stays open)"),
            format: str = typer.Option("table", "--format", help="table | json (the verdict row, with whether it "
                                                                 "was written and the commit holding it)")):
    """Evaluate the bar on the committed ledger, write GO or NO-GO, commit it, close the line.
    A verdict row exists only committed: --no-commit is a dry run that writes nothing.
    Exit 0 GO, 1 NO-GO, 2 refused.

    Example: bench verdict flash-h200-v2 --no-commit   (a dry run; without it the verdict is written)
    """
    from harness.governance.line import host_env, open_line
    from harness.governance.verdict import GO
    from harness.commands.verdict import close
    from harness.reporting.render.verdict import render_verdict

    from harness.reporting.render.formats import check_format

    check_format(format, ("table", "json"))  # a verdict is one document, not a table of records
    with open_line(line, action="a verdict", commit=not no_commit) as ln:
        v = close(ln, host_env(), dry_run=no_commit)
    if format == "json":
        from harness.reporting.render.verdict import emit_verdict

        emit_verdict(v)
    else:
        render_verdict(v)
    raise typer.Exit(0 if v.outcome == GO else 1)
