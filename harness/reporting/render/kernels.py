"""What `bench kernels` prints: the registered kernels and whether each runs here."""

from __future__ import annotations

from harness.errors import shown
from harness.reporting.render.console import console


def render_kernels(kernels: dict, device: str) -> None:
    from rich.table import Table

    t = Table(title=f"kernels (this machine: {device})")
    for col in ("name", "workloads", "dtypes", "devices", "usable here", "source"):
        t.add_column(col, overflow="fold")
    for name in sorted(kernels):
        k = kernels[name]
        why = k.unusable_reason(device)
        t.add_row(name, ",".join(k.workloads), ",".join(k.dtypes), ",".join(k.devices),
                  "[green]yes[/]" if why is None else f"[yellow]no[/]: {why}", shown(k.source))
    console().print(t)
