"""`bench register registrations/NAME.toml`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def register(registration: str = typer.Argument(..., help="registrations/NAME.toml (or the line id NAME)"),
             reopen: bool = typer.Option(False, "--reopen",
                                         help="register again a line whose ledger was deleted (only if that "
                                              "ledger, read from git history, holds no verdict)")):
    """Validate a committed registration and write its `registered` row (its bar is fixed from now on).

    Example: bench register registrations/my-line.toml   (the file bench new wrote, reviewed and committed)
    """
    from harness.governance.line import register as do_register
    from harness.reporting.render.register import render_registered

    render_registered(do_register(registration, reopen=reopen))
