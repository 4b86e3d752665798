"""What `bench warm` prints: each warmed (kernel, config) and the summary."""

from __future__ import annotations

from harness.reporting.render.console import console


def render_warmed(w) -> None:
    """One line per (kernel, config) as ``bench warm`` finishes it."""
    console().print(f"  {w.kernel} {w.config_key}: {w.seconds:.1f}s"
                    + (f"  [red]FAILED[/] {w.error}" if w.error else ""))


def render_warm_summary(summary) -> None:
    c = console()
    p = summary.plan
    for name, why in p.left_out:
        c.print(f"  {name}: {why}")
    if not p.tasks:
        c.print(f"nothing to warm: no kernel of line [bold]{p.line}[/] compiles ahead on {p.device} here")
        return
    failed = len(summary.failed)
    c.print(f"warmed {len(summary.warmed)} (kernel, config) pairs of line [bold]{p.line}[/] on {p.device} "
            f"in {summary.seconds:.0f}s" + (f", [red]{failed} failed[/] (the sweep's gate will say why)"
                                             if failed else ""))
