"""`bench status`: every line's state, commit and device in one table, from the ledgers — with
its history (amended by, re-opened, re-measured) beside the state, and lines whose ledger
is gone from the work tree but in git shown as GONE, never dropped. ``--lineage``: each
amendment chain as a tree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.governance.devices import device_name


@dataclass(frozen=True)
class LineStatus:
    line: str
    state: str  # "registered", "swept n of m pairs", "closed GO", "closed NO-GO", "BROKEN: …", "GONE"
    commit: str | None  # where its outcomes were measured (the verdict's, else the latest outcome's)
    device: str | None
    n_done: int
    n_pairs: int | None
    outcome: str | None
    note: str | None = None  # what verify could not check (a shallow clone), shown beside the state
    history: tuple[str, ...] = ()  # short history (history.LineHistory.short): amended by, re-opened, …
    details: tuple = ()  # the full history (history.Note per event, LineHistory.notes)

    @property
    def shown(self) -> str:
        """The state with its history: 'closed GO — amended by flash-h200-v2'."""
        return self.state + (f" — {'; '.join(self.history)}" if self.history else "")


def view_status(view, note: str | None = None) -> LineStatus:
    """The state of a line from its rows (a ``lines.LineView``), without its history."""
    from harness.reporting.lines import device_label

    outcomes = view.outcomes()
    reg = view.registration
    pairs = {(k, c) for k, c in outcomes if c in (reg.get("candidates") or [])}
    n_pairs = view.n_pairs()
    verdict = view.verdict
    latest = max(outcomes.values(), key=lambda r: r["seq"], default=None)
    if verdict is not None:
        at = verdict.get("measured_at") or {}
        return LineStatus(view.line, f"closed {verdict['outcome']}", at.get("commit"), device_name(at),
                          len(pairs), n_pairs, verdict["outcome"], note)
    if latest is None:
        reg_row = view.registered or {}
        return LineStatus(view.line, "registered", reg_row.get("registration_commit"), None, 0, n_pairs, None,
                          note)
    of = f" of {n_pairs}" if n_pairs is not None else ""
    commits = {r.get("commit") for r in outcomes.values()}
    commit = latest.get("commit") if len(commits) == 1 else f"{len(commits)} commits, latest {latest.get('commit', '')[:12]}"
    return LineStatus(view.line, f"swept {len(pairs)}{of} pairs", commit, device_label(latest), len(pairs), n_pairs,
                      None, note)


def line_status(path: Path, idx=None) -> LineStatus:
    """A line's status from its ledger file, with its history where ``idx`` (history.index) is given."""
    from dataclasses import replace

    from harness.governance.ledger_verify import verify
    from harness.reporting.history import line_history
    from harness.reporting.lines import load_path

    res = verify(path)
    view = load_path(path) if res.ok else None
    hist = line_history(idx, Path(path).stem, view.rows if view else ()) if idx is not None else None
    short = tuple(hist.short()) if hist else ()
    details = tuple(hist.notes()) if hist else ()
    if view is None:
        return LineStatus(Path(path).stem, f"BROKEN: {res.reason}", None, None, 0, None, None, history=short,
                          details=details)
    note = "shallow clone: older history unchecked" if res.unchecked else None
    return replace(view_status(view, note), history=short, details=details)


def gone_status(idx, line: str) -> LineStatus:
    """A line whose ledger git holds but the work tree does not: GONE, with what it was."""
    from harness.reporting.history import line_history
    from harness.reporting.lines import LineView

    g = idx.gone[line]
    hist = line_history(idx, line)
    was = ()
    commit = device = outcome = None
    if g.rows:
        s = view_status(LineView(line, Path(g.rel), tuple(g.rows), None))
        was, commit, device, outcome = (f"was {s.state}",), s.commit, s.device, s.outcome
    elif g.problem:
        was = (g.problem,)
    return LineStatus(line, "GONE", commit, device, 0, None, outcome,
                      history=(*was, f"{g.rel} {g.why}", *hist.short()), details=tuple(hist.notes()))


def statuses(root: Path) -> list[LineStatus]:
    """Every line, present or GONE, by name."""
    from harness.reporting.history import index
    from harness.reporting.lines import line_paths

    idx = index(root)
    out = [line_status(p, idx) for p in line_paths(root)]
    out += [gone_status(idx, line) for line in idx.gone]
    return sorted(out, key=lambda s: s.line)


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


def status_table(rows: list[LineStatus]):
    from rich.table import Table

    t = Table(title=f"{len(rows)} lines")
    for col in ("line", "state", "commit", "device"):
        t.add_column(col, overflow="fold")
    for s in rows:
        t.add_row(s.line, _state_cell(s), _commit(s) or "—", s.device or "—")
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
            where = ", ".join(x for x in (_commit(s), s.device) if x)
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
