"""`bench compare A B`, CI mode `bench compare [NEW] --against REF`, and `bench compare LINE --pivot`"""

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
            format: str = typer.Option("table", "--format", help="table | md (GitHub-flavoured Markdown, for a "
                                                                 "pull-request comment) | json | csv (CI mode still "
                                                                 "exits 1 on a regression)"),
            q: Optional[float] = typer.Option(None, "--q", metavar="Q",
                                              help="false-discovery rate of FASTER/SLOWER over the configs "
                                                   "(Benjamini-Hochberg; default 0.01)"),
            min_effect: Optional[float] = typer.Option(None, "--min-effect", metavar="FRACTION",
                                                       help="smallest change named FASTER/SLOWER, as a fraction "
                                                            "(default 0.02: 2%)"),
            pivot: bool = typer.Option(False, "--pivot", help="one LINE as a config x kernel table, the best kernel "
                                                             "of each config marked (result rows only)"),
            figure: str = typer.Option("speedup", "--figure", help="with --pivot: speedup (with its CI) | ms "
                                                                   "(each kernel's median)"),
            next_run: bool = typer.Option(False, "--next-run",
                                          help="also count B's speedups inside A's within-run CIs and next-run "
                                               "intervals (speedup_next_low/high; docs/measurement.md)")):
    """Config by config: ratio of medians, significance test on the raw samples, FASTER/SLOWER/SAME/UNCLEAR.
    A line amended by a newer one is compared as the newest (--exact: as named), unless both sides name
    lines of one chain; LINE@COMMIT is used as named.

    --pivot tabulates one line (as named): configs in numeric order against its kernels, the best of
    each config marked; --format md writes a pull-request comment.

    Example: bench compare flash-h200-v2 flash-h200-peers --exact;  in CI: bench compare --against flash-h200-v2 flash-h200-peers
    --exact --threshold 0.05;  one line: bench compare flash-h200-peers --pivot --format md
    """
    import math

    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis import compare as cmp_mod
    from harness.reporting.analysis import lines
    from harness.reporting.analysis.history import resolve
    from harness.reporting.analysis.pivot import SPEEDUP
    from harness.reporting.render.compare import render_ci_outcome, render_comparison

    from harness.reporting.render.formats import FORMATS, MARKDOWN, check_format

    check_format(format, (*FORMATS, MARKDOWN))
    specs = list(specs or [])
    if pivot:
        _pivot(specs, figure, format, against=against, threshold=threshold, q=q, min_effect=min_effect,
               next_run=next_run, allow_mixed=allow_mixed)
        return
    if figure != SPEEDUP:
        raise UserError(f"--figure {figure} applies to --pivot only: add --pivot (one line) or drop --figure")
    # The tests' settings, refused before any ledger is read when they would call nothing or everything.
    tests = {"q": cmp_mod.FDR_Q if q is None else q,
             "min_effect": cmp_mod.MIN_EFFECT if min_effect is None else min_effect}
    cmp_mod.check_thresholds(**tests)
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
        result = cmp_mod.against(root, used.specs[0], used.specs[1] if specs else None, allow_mixed=allow_mixed,
                                 **tests)
    else:
        if len(specs) != 2:
            raise UserError(f"bench compare needs two sides (A B, e.g. LINE@OLD LINE@NEW), got {len(specs)}; "
                            f"or use --against REF for CI mode")
        used = resolve(root, specs, exact=exact, one_side_each=True)
        result = cmp_mod.compare(lines.load(root, used.specs[0]), lines.load(root, used.specs[1]),
                                 allow_mixed=allow_mixed, **tests)
    bad = result.regressions(threshold) if against is not None else []
    cover = None
    if next_run:
        if format in ("csv", MARKDOWN):
            raise UserError(f"--next-run has no {format.upper()} form: use --format table or json")
        if against is not None:
            sides = cmp_mod.against_views(root, used.specs[0], used.specs[1] if specs else None)
        else:
            sides = (lines.load(root, used.specs[0]), lines.load(root, used.specs[1]))
        cover = cmp_mod.next_run(*sides)
    if format == MARKDOWN:
        from harness.reporting.render.compare import emit_comparison_markdown

        emit_comparison_markdown(result, threshold if against is not None else None, used.notes, next_run=cover)
        if bad:
            raise typer.Exit(1)
        return
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


def _pivot(specs: list[str], figure: str, format: str, **other) -> None:
    """`bench compare LINE --pivot`: refuses the options of a two-sided comparison, then tabulates."""
    from harness.errors import UserError
    from harness.provenance.git import repo_root
    from harness.reporting.analysis import lines
    from harness.reporting.analysis.pivot import check_figure, pivot
    from harness.reporting.render.pivot import emit_pivot, render_pivot

    check_figure(figure)
    given = [f"--{k.replace('_', '-')}" for k, v in other.items() if v not in (None, False)]
    if given:
        raise UserError(f"--pivot tabulates one line and tests nothing: drop {', '.join(given)} (or drop --pivot to "
                        f"compare two sides)")
    if len(specs) != 1:
        raise UserError(f"--pivot takes one line (LINE or LINE@COMMIT), got {len(specs)}: e.g. bench compare "
                        f"flash-h200-peers --pivot")
    table = pivot(lines.load(repo_root(), specs[0]), figure)
    if format == "table":
        render_pivot(table)
    else:
        emit_pivot(table, format)
