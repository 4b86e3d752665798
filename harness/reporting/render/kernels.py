"""What `bench kernels` prints: the registered kernels and whether each runs here."""

from __future__ import annotations

from harness.errors import shown
from harness.reporting.render.console import console
from harness.reporting.render.formats import emit
from harness.reporting.render.console import fit, table

# The console width from which a kernel's source has a column of its own.
SOURCE_COLUMN_MIN = 120


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

    from rich.markup import escape

    # Names and sources never wrap; lists wrap between their items, the reason between words.
    # Narrower than SOURCE_COLUMN_MIN, each source goes under its kernel's name.
    apart = console().width >= SOURCE_COLUMN_MIN
    t = table(title=f"kernels (this machine: {device})")
    for col in ("name" if apart else "name, source", "workloads", "dtypes", "devices", "usable here",
                *(("source",) if apart else ())):
        t.add_column(col, no_wrap=col in ("name", "name, source", "source"))
    for name in sorted(kernels):
        k = kernels[name]
        why = k.unusable_reason(device)
        source = escape(shown(k.source))
        t.add_row(escape(name) if apart else f"{escape(name)}\n[dim]{source}[/]", ", ".join(k.workloads),
                  ", ".join(k.dtypes), ", ".join(k.devices),
                  "[green]yes[/]" if why is None else f"[yellow]no[/]: {escape(why)}", *((source,) if apart else ()))
    console().print(fit(t))
