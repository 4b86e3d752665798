"""`bench probe REGISTRATION CONFIG_KEY --candidate NAME` (plumbing, hidden from the help)"""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli import app


@app.command(hidden=True)
def probe(registration: Path = typer.Argument(..., help="a registration file (any path: it is only read)"),
          config: str = typer.Argument(..., help="a full config key of its grid"),
          candidate: str = typer.Option(..., "--candidate", help="the candidate timed against the baseline"),
          device: str = typer.Option("auto", help="auto | cuda | cpu")):
    """Plumbing for `bench bisect`: measure one config at this checkout (float64 gate, then the
    interleaved timing against the baseline) and print one JSON object — speedup, CI, the raw
    paired samples, the gate's outcome, the commit. Writes nothing. Exit 0 with the object
    (a gate failure included: its ``outcome`` says so), 2 when refused.

    Example: bench probe registrations/example.toml attention/b2/h4/kv4/n256/d64/float32/full --candidate sdpa
    """
    from harness.errors import UserError
    from harness.commands.probe import probe as do_probe
    from harness.reporting.render.bisect import emit_probe

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cuda or cpu")
    emit_probe(do_probe(registration.resolve(), config, candidate, device))
