"""What `bench kernels` prints: the registered kernels and whether each runs here."""

from __future__ import annotations

from harness.errors import shown
from harness.reporting.render.console import console
from harness.reporting.render.formats import emit
from harness.reporting.render.console import table


def kernel_records(kernels: dict, device: str) -> list[dict]:
    """One flat record per kernel: what the table shows, unstyled."""
    out = []
    for name in sorted(kernels):
        k = kernels[name]
        why = k.unusable_reason(device)
        out.append({"name": name, "workloads": list(k.workloads), "dtypes": list(k.dtypes), "devices": list(k.devices),
                    "usable_here": why is None, "why_not": why, "source": shown(k.source)})
    return out


def render_kernels(kernels: dict, device: str, fmt: str = "table") -> None:
    if fmt != "table":
        records = kernel_records(kernels, device)
        emit(fmt, records, {"device": device, "kernels": records})
        return

    t = table(title=f"kernels (this machine: {device})")
    for col in ("name", "workloads", "dtypes", "devices", "usable here", "source"):
        t.add_column(col, overflow="fold")
    for name in sorted(kernels):
        k = kernels[name]
        why = k.unusable_reason(device)
        t.add_row(name, ",".join(k.workloads), ",".join(k.dtypes), ",".join(k.devices),
                  "[green]yes[/]" if why is None else f"[yellow]no[/]: {why}", shown(k.source))
    console().print(t)
