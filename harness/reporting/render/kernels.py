"""What `bench kernels` prints: the registered kernels and whether each runs here."""

from __future__ import annotations

from harness.errors import shown
from harness.reporting.render.console import console
from harness.reporting.render.formats import emit
from harness.reporting.render.console import fit, table

# The console width from which a kernel's source has a column of its own.
SOURCE_COLUMN_MIN = 120


def by_workload(kernels: dict, workloads=()) -> list[tuple[str, str]]:
    """(workload, kernel name) in the order `bench kernels` groups them: each kernel under its
    first workload, the workloads in ``workloads``' order (the installed ones) then any other
    a kernel names, the kernels of one workload by name."""
    order = list(dict.fromkeys([*workloads, *(k.workloads[0] for k in kernels.values() if k.workloads)]))
    group = {name: (k.workloads[0] if k.workloads else "") for name, k in kernels.items()}
    rank = {w: i for i, w in enumerate(order)}
    return sorted(((group[n], n) for n in kernels), key=lambda wn: (rank.get(wn[0], len(rank)), wn[1]))


def kernel_records(kernels: dict, device: str, workloads=()) -> list[dict]:
    """One flat record per kernel, grouped by workload (``by_workload``): what the table shows, unstyled."""
    out = []
    for wl, name in by_workload(kernels, workloads):
        k = kernels[name]
        why = k.unusable_reason(device)
        out.append({"workload": wl, "name": name, "workloads": list(k.workloads), "dtypes": list(k.dtypes),
                    "devices": list(k.devices), "usable_here": why is None, "why_not": why,
                    "source": shown(k.source)})
    return out


def render_kernels(kernels: dict, device: str, fmt: str = "table", workloads=()) -> None:
    """The kernels, a section per workload (``workloads``: the installed ones, in order)."""
    if fmt != "table":
        records = kernel_records(kernels, device, workloads)
        emit(fmt, records, {"device": device, "kernels": records})
        return

    from rich.markup import escape

    # Names and sources never wrap; lists wrap between their items, the reason between words.
    # Narrower than SOURCE_COLUMN_MIN, each source goes under its kernel's name.
    apart = console().width >= SOURCE_COLUMN_MIN
    t = table(title=f"kernels (this machine: {device})")
    cols = ("name" if apart else "name, source", "workloads", "dtypes", "devices", "usable here",
            *(("source",) if apart else ()))
    for col in cols:
        t.add_column(col, no_wrap=col in ("name", "name, source", "source"))
    groups = by_workload(kernels, workloads)
    for i, (wl, name) in enumerate(groups):
        if i == 0 or groups[i - 1][0] != wl:  # a heading row per workload: no column of its own
            t.add_row(f"[bold]{escape(wl)}[/]", *([""] * (len(cols) - 1)))
        k = kernels[name]
        why = k.unusable_reason(device)
        source = escape(shown(k.source))
        t.add_row(escape(name) if apart else f"{escape(name)}\n[dim]{source}[/]", ", ".join(k.workloads),
                  ", ".join(k.dtypes), ", ".join(k.devices),
                  "[green]yes[/]" if why is None else f"[yellow]no[/]: {escape(why)}", *((source,) if apart else ()),
                  end_section=i + 1 == len(groups) or groups[i + 1][0] != wl)
    console().print(fit(t))
