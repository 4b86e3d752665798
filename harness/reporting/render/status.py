"""What `bench status` shows: every line's state as a rich table, or each amendment chain as a tree."""

from __future__ import annotations

from harness.reporting.analysis.status_view import LineStatus
from harness.reporting.render.console import console
from harness.reporting.render.console import fit, table, words_fit
from harness.reporting.render.formats import emit

SHALLOW_NOTE = ("note: this clone is shallow: the history of {n} of {total} lines before its oldest commit is not "
                "here and was not checked (bench ledger verify names what; git fetch --unshallow checks it)")


def _style(s: LineStatus) -> str:
    if s.state == "GONE":
        return "red"
    return {"GO": "green", "NO-GO": "red"}.get(s.outcome or "", "yellow" if s.state.startswith("BROKEN") else "")


def _state_cell(s: LineStatus) -> str:
    from rich.markup import escape

    style = _style(s)
    state = f"[{style}]{escape(s.state)}[/]" if style else escape(s.state)
    state += f" [dim]({escape(s.note)})[/]" if s.note else ""
    return state + (f" — {escape('; '.join(s.history))}" if s.history else "")


def _commit(s: LineStatus) -> str:
    return s.commit if s.commit is None or " " in s.commit else s.commit[:12]


def status_table(rows: list[LineStatus], replicates_column: bool = True):
    """The lines' table; ``replicates_column`` False: a line's replicates in its state cell
    (where the table's words would not fit the console with a column of their own)."""
    from rich.markup import escape

    t = table(title=f"{len(rows)} lines")
    column = replicates_column and any(s.replication for s in rows)  # only where a line has replicates
    # A line's name and commit never wrap; the rest wraps between words.
    for col in ("line", "state", "commit", "device", *(("replicates",) if column else ())):
        t.add_column(col, no_wrap=col in ("line", "commit"))
    for s in rows:
        state = _state_cell(s)
        if s.replication and not column:
            state += f"; replicates: {escape(s.replication)}"
        t.add_row(s.line, state, _commit(s) or "—", s.device or "—",
                  *((escape(s.replication or "—"),) if column else ()))
    return t


def lineage_trees(rows: list[LineStatus], chains: list[list[tuple[int, str]]]):
    """One rich Tree per amendment chain (history.chains): each line with its state, commit
    and device; under it, what else happened to it (re-opened, re-measured, GONE)."""
    from rich.markup import escape
    from rich.tree import Tree

    by = {s.line: s for s in rows}
    trees = []
    for chain in chains:
        stack: list = []
        root = None
        for depth, line in chain:
            s = by[line]
            style = _style(s)
            state = f"[{style}]{escape(s.state)}[/]" if style else escape(s.state)
            where = ", ".join(x for x in (_commit(s), s.device, s.replication) if x)
            label = f"[bold]{escape(line)}[/] — {state}" + (f" ({escape(where)})" if where else "")
            if depth:
                label = f"amended by {label}"
            node = Tree(label) if depth == 0 else stack[depth - 1].add(label)
            root = root or node
            for d in s.details:
                if not d.text.startswith(("amended by", "amends")):  # the tree itself shows those
                    leaf = node.add(f"[dim]{escape(d.text)}[/]")
                    for i in d.items:
                        leaf.add(f"[dim]{escape(i)}[/]")
            del stack[depth:]
            stack.append(node)
        trees.append(root)
    return trees


def render_status(rows: list[LineStatus], chains=None) -> None:
    """The table, or with ``chains`` (history.chains) one tree per chain; then the shallow-clone note."""
    c = console()
    if chains is not None:
        for tree in lineage_trees(rows, chains):
            c.print(tree)
    else:
        t = status_table(rows)
        c.print(fit(t if words_fit(t) else status_table(rows, replicates_column=False)))
    shallow = [s.line for s in rows if s.note]
    if shallow:
        c.print(SHALLOW_NOTE.format(n=len(shallow), total=len(rows)))


def status_records(rows: list[LineStatus]) -> list[dict]:
    """One flat record per line (what the table shows, unstyled)."""
    return [{"line": s.line, "state": s.state, "outcome": s.outcome, "n_done": s.n_done, "n_pairs": s.n_pairs,
             "commit": s.commit, "device": s.device, "history": list(s.history), "note": s.note,
             "replication": s.replication_data} for s in rows]


def emit_status(rows: list[LineStatus], fmt: str) -> None:
    emit(fmt, status_records(rows))
