"""What `bench compare LINE --pivot` shows: a config × kernel table, the best kernel of each
config marked ``*`` before its figure (bold on a terminal; bold alone in Markdown) and those
its CI cannot tell apart from it ``~`` (``(tie)`` in Markdown)."""

from __future__ import annotations

import math

from harness.reporting.analysis.pivot import MS, SPEEDUP, Cell, Pivot
from harness.reporting.render.console import console, table
from harness.reporting.render.formats import emit, emit_markdown, markdown, note
from harness.workloads.keys import shorten

BEST, TIED = "*", "~"
# In Markdown the best cell is bold; a tie is spelled out (a lone ~ can strike text through on GitHub).
MD_TIED = "(tie) "


def _num(x: float | None, spec: str) -> str:
    return "—" if x is None or not math.isfinite(x) else format(x, spec)


def cell_text(c: Cell | None, figure: str, marks: tuple[str, str] = (BEST, TIED)) -> str:
    """One cell, unstyled: the figure (a speedup with its CI), then its mark (``marks``: the
    best's and a tie's)."""
    if c is None:
        return "—"
    if figure == MS:
        text = _num(c.value, ".4g")
    elif c.ci_low is None:
        text = f"{_num(c.value, '.3f')}×"
    else:
        text = f"{_num(c.value, '.3f')}× [{_num(c.ci_low, '.3f')}–{_num(c.ci_high, '.3f')}]"
    # The mark leads the figure, as one word with it: a narrow column never wraps it off alone.
    mark = marks[0] if c.best else marks[1] if c.tied else ""
    return f"{mark}{text}"


def _title(p: Pivot) -> tuple[dict[str, str], str]:
    keys, shared = shorten(p.configs)
    what = (f"speedup over the baseline {p.baseline} (bootstrap 95% CI)" if p.figure == SPEEDUP
            else f"median ms (baseline {p.baseline})")
    return keys, f"{p.line}: {what}, per config and kernel" + (f" (every config: {shared})" if shared else "")


def caption(p: Pivot, marks: tuple[str, str] = (f"{BEST}:", f"{TIED}:")) -> str:
    """What the figures are and how the best was chosen (``marks``: how the best and a tie are shown)."""
    wins = ", ".join(f"{k} {n}" for k, n in p.wins().items() if n)
    best, tied = marks
    rule = (f"{best} the highest speedup whose CI lies above 1 (else the baseline {p.baseline}); {tied} its CI "
            f"overlaps the best's" if p.figure == SPEEDUP else
            f"{best} the lowest median (interleaved rounds; the baseline's pooled over its rows)")
    return f"result rows only (each passed the gate), the interleaved rounds; {rule}; best at: {wins or 'none'}"


def pivot_table(p: Pivot):
    keys, title = _title(p)
    t = table(title=title, caption=caption(p))
    texts = {(c, k): cell_text(p.cells.get((c, k)), p.figure) for c in p.configs for k in p.kernels}
    # A narrow terminal wraps the config between its fields and a cell between its figure and
    # its CI, never inside either: each column is at least its longest word wide.
    t.add_column("config", min_width=max(len(w) for c in p.configs for w in keys[c].split()))
    for k in p.kernels:
        # The baseline's column is headed "baseline" (the title names it): its speedups are 1.
        t.add_column("baseline" if k == p.baseline else k, justify="right",
                     min_width=max(len(x) for c in p.configs for x in _words(texts[(c, k)])))
    for c in p.configs:
        cells = []
        for k in p.kernels:
            cell, text = p.cells.get((c, k)), texts[(c, k)]
            cells.append(f"[bold]{text}[/]" if cell is not None and cell.best else text)
        t.add_row(keys[c], *cells)
    return t


def _words(text: str) -> list[str]:
    """A cell's unbreakable parts: its figure (with its mark), and its CI."""
    head, _, rest = text.partition(" ")
    return [head, rest] if rest else [head]


def render_pivot(p: Pivot, notes=()) -> None:
    c = console()
    c.print(pivot_table(p))
    for n in notes:
        c.print(f"  note: {n}", markup=False)


def pivot_markdown(p: Pivot, notes=()) -> str:
    """The pivot as GitHub-flavoured Markdown, the best cell of each config in bold."""
    keys, title = _title(p)
    rows = []
    for c in p.configs:
        row = [keys[c]]
        for k in p.kernels:
            cell = p.cells.get((c, k))
            text = cell_text(cell, p.figure, ("", MD_TIED))
            row.append(f"**{text}**" if cell is not None and cell.best else text)
        rows.append(row)
    cols = ["config", *[k + (" (baseline)" if k == p.baseline else "") for k in p.kernels]]
    return markdown(title, cols, rows, right=tuple(cols[1:]), caption=caption(p, ("bold:", f"{MD_TIED.strip()}:")),
                    notes=notes)


def emit_pivot(p: Pivot, fmt: str, notes=()) -> None:
    """``--format md|json|csv``: Markdown; the pivot as one JSON document; one CSV record per
    (config, kernel) cell. Notes: in the Markdown, else on stderr."""
    if fmt == "md":
        emit_markdown(pivot_markdown(p, notes))
        return
    records = [{"config": c, "kernel": k, "figure": p.figure, "value": cell.value, "ci_low": cell.ci_low,
                "ci_high": cell.ci_high, "best": cell.best, "tied": cell.tied}
               for c in p.configs for k in p.kernels if (cell := p.cells.get((c, k))) is not None]
    emit(fmt, records, p.as_json())
    for n in notes:
        note(n)
