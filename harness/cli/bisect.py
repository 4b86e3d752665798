"""`bench bisect LINE CONFIG --good REV --bad REV`"""

from __future__ import annotations

import typer

from harness.cli import app, complete_line


@app.command()
def bisect(line: str = typer.Argument(..., autocompletion=complete_line, help="line id or registrations/NAME.toml"),
           config: str = typer.Argument(..., help="a config key, full or as tables show it (\"n256 float32 causal\")"),
           good: str = typer.Option(..., "--good", help="a commit where the candidate was fast"),
           bad: str = typer.Option(..., "--bad", help="a later commit where it is slower"),
           candidate: str = typer.Option(None, "--candidate", help="the candidate (default: the line's only one)"),
           device: str = typer.Option("auto", help="auto | cuda | cpu"),
           budget: int = typer.Option(None, "--budget", help="measurements pooled at one commit while it is unclear "
                                                             "(default 3)"),
           threshold: float = typer.Option(None, "--threshold", help="the relative slowdown that counts as a "
                                                                     "regression (default 0.05)"),
           no_commit: bool = typer.Option(False, "--no-commit", help="leave the probe rows uncommitted"),
           format: str = typer.Option("table", "--format", help="table | json (how it ended and every commit "
                                                                "measured, one document on stdout; each probe's "
                                                                "line goes to stderr)")):
    """Find the first commit at which the candidate's speedup over the baseline at CONFIG dropped.

    Each probed commit runs in a worktree of its own, with its own code: the float64 gate, then
    the interleaved timing against the baseline (no number without the gate). The ends are
    measured first: a regression is a bad end whose CI lies below the good end's and at least
    --threshold slower; a bad end whose CI stays within --threshold of the good end, or that is
    not apart from it after --budget measurements, is no regression. Then each commit is good
    when its CI reaches the good end's (overlaps it or lies above) and lies above the bad end's,
    bad when it reaches the bad end's and lies below the good end's, and unclear otherwise:
    measured again, pooled, up to --budget measurements, then skipped (as is a commit whose code
    cannot run the probe). Every commit measured is a `probe` row of ledger/_bisect.jsonl,
    committed after each.

    Exit 0 with the first bad commit (and the speedups of the last good and first bad) or "no
    regression"; 1 when "unclear between A and B"; 2 when refused.

    Example: bench bisect example "kv4 n256 float32 full" --good v1.0 --bad HEAD   (v1.0: your release tag)
    """
    from harness.governance import bisect as rule
    from harness.commands.bisect import BisectPlan, bisect as do_bisect
    from harness.reporting.render.bisect import emit_bisect, render_bisect, render_probe, render_probe_note
    from harness.reporting.render.formats import check_format

    check_format(format, ("table", "json"))
    if device not in ("auto", "cpu", "cuda"):
        from harness.errors import UserError

        raise UserError(f"--device {device!r}: use auto, cuda or cpu")
    plan = BisectPlan(line, config, good, bad, candidate=candidate,
                      budget=rule.DEFAULT_BUDGET if budget is None else budget,
                      threshold=rule.DEFAULT_THRESHOLD if threshold is None else threshold)
    res = do_bisect(plan, device=device, commit=not no_commit,
                    on_probe=render_probe if format == "table" else render_probe_note)
    if format == "json":
        emit_bisect(res)
    else:
        render_bisect(res)
    if res.signal is not None:  # stopped by Ctrl-C or SIGTERM: end as the signal would, with the line that re-runs it
        from harness.cli import interrupted_by

        interrupted_by(res.signal)
        return
    raise typer.Exit(res.exit_code)
