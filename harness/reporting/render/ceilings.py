"""What `bench ceilings` prints: a device's measured or stored ceilings."""

from __future__ import annotations

from harness.measurement.ceilings import CeilingsMethod
from harness.vocab.devices import ceilings_name
from harness.reporting.render.console import console
from harness.reporting.render.rows import fmt


def render_ceilings(row: dict, measured: bool, *, commit: str | None = None, committed: bool = True) -> None:
    """The ceilings row (``seq``, hash), its figures, and whether git holds it (``commit``: committed now)."""
    c = console()
    c.print(f"{'measured' if measured else 'stored'} ceilings for {ceilings_name(row)} "
            f"(ledger/_device_ceilings.jsonl row {row.seq}, {str(row.hash)[:12]}):")
    c.print(f"  copy bandwidth: {fmt(row.copy_gbps, '.4g')} GB/s (read + write)")
    method = CeilingsMethod.from_row(row.method)
    clocks = (method.sm_mhz if method is not None else None) or {}  # the SM clock each ran at (GPU rows since it was recorded)
    for dt, tf in sorted((row.matmul_tflops or {}).items()):
        at = f" at {fmt(clocks[dt], '.0f')} MHz" if isinstance(clocks, dict) and clocks.get(dt) is not None else ""
        c.print(f"  matmul {dt}: {fmt(tf, '.4g')} TFLOP/s{at}")
    if commit:
        c.print(f"  committed in {commit[:12]}")
    elif not committed:
        c.print("  [yellow]not committed[/] (--no-commit): no bench command uses or commits a ceilings row no "
                "commit holds — commit it yourself if you vouch for it (git add ledger/_device_ceilings.jsonl && "
                "git commit -m 'bench: ceilings' -- ledger/_device_ceilings.jsonl)")
