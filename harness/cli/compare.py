"""`bench compare A B` and CI mode `bench compare [NEW] --against REF`"""

from __future__ import annotations

from typing import List, Optional

import typer

from harness.cli import app, complete_line


@app.command()
def compare(specs: List[str] = typer.Argument(None, autocompletion=complete_line, metavar="[A] [B]",
                                               help="two lines, or LINE@COMMIT twice (B is compared against A)"),
            against: Optional[str] = typer.Option(None, "--against", metavar="REF",
                                                  help="CI mode: compare [NEW] (default: REF's latest commit against "
                                                       "its previous one) and exit 1 on a significant regression"),
            threshold: float = typer.Option(None, "--threshold",
                                            help="CI mode: fail on a SLOWER config more than this fraction slower "
                                                 "(default 0.05)"),
            allow_mixed: bool = typer.Option(False, "--allow-mixed",
                                             help="compare rows from different devices, numeric flags or timing modes"),
            exact: bool = typer.Option(False, "--exact", help="use each line as named, not the newest line of its "
                                                              "amendment chain"),
            format: str = typer.Option("table", "--format", help="table | json | csv (CI mode still exits 1 on a "
                                                                 "regression)"),
            next_run: bool = typer.Option(False, "--next-run",
                                          help="also count B's speedups inside A's within-run CIs and next-run "
                                               "intervals (speedup_next_low/high; docs/measurement.md)")):
    """Config by config: ratio of medians, significance test on the raw samples, FASTER/SLOWER/SAME/UNCLEAR.
    A line amended by a newer one is compared as the newest (--exact: as named), unless both sides name
    lines of one chain; LINE@COMMIT is used as named.

    Example: bench compare flash-h200-v2 flash-h200-peers --exact;  in CI: bench compare --against flash-h200-v2 flash-h200-peers
    --exact --threshold 0.05
    """
    import math

    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis import compare as cmp_mod
    from harness.reporting.analysis import lines
    from harness.reporting.analysis.history import resolve
    from harness.reporting.render.compare import render_ci_outcome, render_comparison

    from harness.reporting.render.formats import check_format

    check_format(format)
    specs = list(specs or [])
    if threshold is None:
        threshold = cmp_mod.DEFAULT_THRESHOLD
    elif not math.isfinite(threshold) or threshold < 0:
        # NaN compares false with every slowdown: the CI gate would pass everything.
        raise UserError(f"--threshold {threshold}: give the slowdown that fails as a finite number >= 0, e.g. 0.05 "
                        f"for 5% slower")
    root = repo_root()
    if against is not None:
        if len(specs) > 1:
            raise UserError("--against takes at most one other line (the new side): bench compare [NEW] --against REF")
        used = resolve(root, [against, *specs], exact=exact, one_side_each=True)
        result = cmp_mod.against(root, used.specs[0], used.specs[1] if specs else None, allow_mixed=allow_mixed)
    else:
        if len(specs) != 2:
            raise UserError(f"bench compare needs two sides (A B, e.g. LINE@OLD LINE@NEW), got {len(specs)}; "
                            f"or use --against REF for CI mode")
        used = resolve(root, specs, exact=exact, one_side_each=True)
        result = cmp_mod.compare(lines.load(root, used.specs[0]), lines.load(root, used.specs[1]),
                                 allow_mixed=allow_mixed)
    bad = result.regressions(threshold) if against is not None else []
    cover = None
    if next_run:
        if format == "csv":
            raise UserError("--next-run has no CSV form (one record per config): use --format table or json")
        if against is not None:
            sides = cmp_mod.against_views(root, used.specs[0], used.specs[1] if specs else None)
        else:
            sides = (lines.load(root, used.specs[0]), lines.load(root, used.specs[1]))
        cover = cmp_mod.next_run(*sides)
    if format != "table":
        from harness.reporting.render.compare import emit_comparison

        emit_comparison(result, format, threshold if against is not None else None, used.notes, next_run=cover)
        if bad:
            raise typer.Exit(1)
        return
    render_comparison(result, threshold if against is not None else None, used.notes, next_run=cover)
    if against is not None:
        render_ci_outcome(result, threshold, bad)
        if bad:
            raise typer.Exit(1)
