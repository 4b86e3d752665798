"""What `bench route` writes and shows: the table as JSON, the dispatcher module, and a rich table."""

from __future__ import annotations

import json
from pathlib import Path

from harness.reporting.analysis.route import RouteTable
from harness.reporting.render.console import console
from harness.reporting.render.console import fit
from harness.reporting.render.console import table as new_table
from harness.workloads.keys import shorten
from harness.reporting.render.formats import emit, emit_markdown, markdown, note

DISPATCHER = '''"""Shape-aware dispatch table written by `bench route {lines}` from the ledgers alone.

Device: {device}. Geomean speedup over {baseline} on the routed grid: {geomean:.4g}x,
worst {worst:.4g}x. {fallback}
"""

BASELINE = {baseline!r}
FIELDS = {fields!r}
ROUTES = {{
{routes}
}}
SPEEDUPS = {{
{speedups}
}}


def choose({args}):
{body}'''
# What a shape not in the table gets, with a size axis to fall back along, and without one.
NEAREST_TEXT = '''A shape not in the table takes the route of the nearest measured {size}
with the same other fields (its kernel was measured there, not at the new shape); the
baseline only where no such shape was measured.'''
NEAREST_BODY = '''    """The kernel to run for this shape: the routed one; for an unseen {size}, the nearest
    measured one's (by ratio, the faster route on a tie); BASELINE where none was measured."""
    key = ({args})
    if key in ROUTES:
        return ROUTES[key]
    near = [k for k in ROUTES if k[:{i}] == key[:{i}] and k[{j}:] == key[{j}:]]
    if not near or {size} < 1:
        return BASELINE
    best = min(near, key=lambda k: (max(k[{i}], {size}) / min(k[{i}], {size}), -SPEEDUPS[k]))
    return ROUTES[best]
'''
EXACT_TEXT = '''A shape not in the table takes the baseline (the workload declares no numeric
size axis to fall back along).'''
EXACT_BODY = '''    """The kernel to run for this shape: the routed one; BASELINE where it was not measured."""
    return ROUTES.get(({args},), BASELINE)
'''


def dispatcher_source(table: RouteTable) -> str:
    fields = table.fields
    keys = [tuple(r.config.get(f) for f in fields) for r in table.routes]
    entries = "\n".join(f"    {k!r}: {r.kernel!r},  # {r.speedup:.3f}x" for k, r in zip(keys, table.routes))
    speedups = "\n".join(f"    {k!r}: {r.speedup!r}," for k, r in zip(keys, table.routes))
    args = ", ".join(fields)
    if table.size_axis in fields:
        i = fields.index(table.size_axis)
        fallback = NEAREST_TEXT.format(size=table.size_axis)
        body = NEAREST_BODY.format(size=table.size_axis, args=args, i=i, j=i + 1)
    else:
        fallback, body = EXACT_TEXT, EXACT_BODY.format(args=args)
    return DISPATCHER.format(lines=" ".join(table.lines), device=table.device, baseline=table.baseline,
                             geomean=table.geomean, worst=table.worst.speedup, fields=fields, routes=entries,
                             speedups=speedups, fallback=fallback, args=args, body=body)


def write(table: RouteTable, out: Path, stem: str = "route") -> tuple[Path, Path]:
    """``<out>/<stem>.json`` and ``<out>/<stem>.py`` (the dispatcher)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    js, py = out / f"{stem}.json", out / f"{stem}.py"
    js.write_text(json.dumps(table.as_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    py.write_text(dispatcher_source(table), encoding="utf-8")
    return js, py


def _title(table: RouteTable, shared: str) -> str:
    return (f"route over {', '.join(table.lines)} on {table.device} (baseline {table.baseline})"
            + (f"; every shape: {shared}" if shared else ""))


def _caption(table: RouteTable) -> str:
    w = table.worst
    return (f"geomean {table.geomean:.3f}× over {len(table.routes)} shapes; worst {w.speedup:.3f}× "
            f"({w.config_key} → {w.kernel})")


def route_table(table: RouteTable):
    """A rich Table of the routes with the geomean and the worst case in the caption."""
    keys, shared = shorten(r.config_key for r in table.routes)
    t = new_table(title=_title(table, shared), caption=_caption(table))
    for col in ("shape", "candidate", "speedup", "CI", "interleaved ms at clock", "passed over"):
        t.add_column(col, justify="right" if col in ("speedup", "CI") else "left", overflow="fold")
    for r in table.routes:
        style = "bold" if r.kernel != table.baseline else "dim"
        t.add_row(keys[r.config_key], f"[{style}]{r.kernel}[/]", f"{r.speedup:.3f}×",
                  "—" if r.line is None else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", r.times(), r.why)
    return t


def render_route(table: RouteTable, js: Path, py: Path, notes=()) -> None:
    """The routes, the caller's notes, and where the files went."""
    c = console()
    c.print(fit(route_table(table)))
    for text in notes:
        c.print(f"  note: {text}", markup=False)
    # Each path alone on its line, never wrapped by rich: a path longer than the terminal stays
    # whole (the terminal wraps it) rather than folded into pieces no one can paste.
    c.print(f"wrote the routes (import the .py: choose({', '.join(table.fields)})):", markup=False)
    for path in (js, py):
        c.print(f"  {path}", markup=False, soft_wrap=True)


def emit_route(table: RouteTable, fmt: str, js: Path, py: Path, notes=()) -> None:
    """The table as route.json's document, or one CSV record per shape; notes and where the
    files went on stderr."""
    doc = table.as_json()
    records = [{"config": r["config_key"], "candidate": r["candidate"], "speedup": r["speedup"],
                "ci_low": r["speedup_ci"][0], "ci_high": r["speedup_ci"][1], "line": r["line"],
                "interleaved_ms": r["interleaved"]["ms"], "baseline_ms": r["interleaved"]["baseline_ms"],
                "sm_mhz": r["interleaved"]["sm_mhz"], "why": r["why"]} for r in doc["routes"]]
    emit(fmt, records, doc)
    for n in notes:
        note(n)
    note(f"wrote {js} and {py}")


def route_markdown(table: RouteTable, notes=()) -> str:
    """`bench route --format md`: the routes as GitHub-flavoured Markdown (a pull-request
    comment), a routed candidate in bold, the baseline plain."""
    keys, shared = shorten(r.config_key for r in table.routes)
    rows = [[keys[r.config_key], f"**{r.kernel}**" if r.kernel != table.baseline else r.kernel, f"{r.speedup:.3f}×",
             "—" if r.line is None else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", r.times(), r.why]
            for r in table.routes]
    return markdown(_title(table, shared), ["shape", "candidate", "speedup", "CI", "interleaved ms at clock",
                                            "passed over"], rows, right=("speedup", "CI"), caption=_caption(table),
                    notes=notes)


def emit_route_markdown(table: RouteTable, js: Path, py: Path, notes=()) -> None:
    """The Markdown on stdout; where the files went on stderr (stdout stays the comment)."""
    emit_markdown(route_markdown(table, notes))
    note(f"wrote {js} and {py}")
