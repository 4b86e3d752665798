"""`bench register registrations/NAME.toml`"""

from __future__ import annotations

import typer

from harness.cli import app


@app.command()
def register(registration: str = typer.Argument(..., help="registrations/NAME.toml (or the line id NAME)")):
    """Validate a committed registration and write its `registered` row (its bar is fixed from now on)."""
    from harness.governance.line import register as do_register
    from harness.reporting.console import console

    row = do_register(registration)
    console().print(f"registered line [bold]{row['line']}[/] — sha256 {row['registration_sha256'][:12]}, "
                    f"commit {row['registration_commit'][:12]}, {row['n_configs']} configs; "
                    f"bar: {row['registration']['go']}")
