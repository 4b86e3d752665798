"""`bench status`: every line's state, commit and device in one table, from the ledgers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LineStatus:
    line: str
    state: str  # "registered", "swept n of m pairs", "closed GO", "closed NO-GO", "BROKEN: …"
    commit: str | None  # where its outcomes were measured (the verdict's, else the latest outcome's)
    device: str | None
    n_done: int
    n_pairs: int | None
    outcome: str | None
    note: str | None = None  # what verify could not check (a shallow clone), shown beside the state


def line_status(path: Path) -> LineStatus:
    from harness.governance.ledger import verify
    from harness.reporting.lines import device_label, load_path

    res = verify(path)
    if not res.ok:
        return LineStatus(path.stem, f"BROKEN: {res.reason}", None, None, 0, None, None)
    note = "shallow clone: older history unchecked" if res.unchecked else None
    view = load_path(path)
    outcomes = view.outcomes()
    reg = view.registration
    pairs = {(k, c) for k, c in outcomes if c in (reg.get("candidates") or [])}
    n_pairs = view.n_pairs()
    verdict = view.verdict
    latest = max(outcomes.values(), key=lambda r: r["seq"], default=None)
    if verdict is not None:
        at = verdict.get("measured_at") or {}
        return LineStatus(view.line, f"closed {verdict['outcome']}", at.get("commit"), at.get("gpu") or at.get("device"),
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


def statuses(root: Path) -> list[LineStatus]:
    from harness.reporting.lines import line_paths

    return [line_status(p) for p in line_paths(root)]


def status_table(rows: list[LineStatus]):
    from rich.table import Table

    t = Table(title=f"{len(rows)} lines")
    for col in ("line", "state", "commit", "device"):
        t.add_column(col, overflow="fold")
    for s in rows:
        style = {"GO": "green", "NO-GO": "red"}.get(s.outcome or "", "yellow" if s.state.startswith("BROKEN") else "")
        state = f"[{style}]{s.state}[/]" if style else s.state
        state += f" [dim]({s.note})[/]" if s.note else ""
        commit = s.commit if s.commit is None or " " in s.commit else s.commit[:12]
        t.add_row(s.line, state, commit or "—", s.device or "—")
    return t
