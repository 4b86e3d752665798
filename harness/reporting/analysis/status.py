"""`bench status`: every line's state, commit and device in one table, from the ledgers — with
its history (amended by, re-opened, re-measured) beside the state, and lines whose ledger
is gone from the work tree but in git shown as GONE, never dropped. ``--lineage``: each
amendment chain as a tree. A line's row, once checked here, is stored for the next status
(analysis/status_view.py reads it back without this module)."""

from __future__ import annotations

from pathlib import Path

from harness.vocab.devices import device_name
from harness.reporting.analysis.replication import replication_view
from harness.reporting.analysis.lines import LineView, device_label, line_paths
from harness.ledger.format import read_rows
from harness.ledger.line_payloads import MeasuredAt
from harness.reporting.analysis.history import Index, index, line_history
from harness.vocab.outcomes import remeasures, resweeps
from harness.reporting.analysis.verify_cache import cached_verify, write_extra
from harness.reporting.analysis.status_view import ROW_FIELDS, STATUS_EXTRA, LineStatus, from_cache


def view_status(view, note: str | None = None) -> LineStatus:
    """The state of a line from its rows (a ``lines.LineView``), without its history; with its
    replicates' agreement (``replication``) where it has any."""
    from dataclasses import replace

    s = _view_status(view, note)
    rep = replication_view(view)
    return s if rep is None else replace(s, replication=rep.short() or None, replication_data=rep.as_dict())


def _view_status(view, note: str | None = None) -> LineStatus:
    outcomes = view.outcomes()
    pairs = {(k, c) for k, c in outcomes if c in (view.plan.candidates or [])}
    n_pairs = view.n_pairs()
    verdict = view.verdict
    latest = max(outcomes.values(), key=lambda r: r.seq, default=None)
    if verdict is not None:
        at = verdict.measured_at or {}
        return LineStatus(view.line, f"closed {verdict.outcome}", MeasuredAt.from_row(at).commit, device_name(at),
                          len(pairs), n_pairs, verdict.outcome, note)
    if latest is None:
        reg_row = view.registered
        return LineStatus(view.line, "registered", reg_row.registration_commit if reg_row else None, None, 0, n_pairs, None,
                          note)
    of = f" of {n_pairs}" if n_pairs is not None else ""
    commits = {r.commit for r in outcomes.values()}
    commit = latest.commit if len(commits) == 1 else f"{len(commits)} commits, latest {(latest.commit or '')[:12]}"
    return LineStatus(view.line, f"swept {len(pairs)}{of} pairs", commit, device_label(latest), len(pairs), n_pairs,
                      None, note)


def line_status(path: Path, idx=None) -> LineStatus:
    """A line's status from its ledger file, with its history where ``idx`` (history.index) is given."""
    return checked_line(path, idx)[0]


def checked_line(path: Path, idx=None):
    """(status, lines.LineView or None where the chain fails verification): the ledger is
    verified once, or its clean result read from the verification cache (analysis/verify_cache.py)
    where nothing it was checked against changed (the view is what ``lines.load_path`` would give)."""
    from dataclasses import replace

    res = cached_verify(path)  # verified in full unless nothing it was checked against changed
    view = LineView(Path(path).stem, Path(path), tuple(read_rows(path)), None) if res.ok else None
    hist = line_history(idx, Path(path).stem, view.rows if view else ()) if idx is not None else None
    short = tuple(hist.short()) if hist else ()
    details = tuple(hist.notes()) if hist else ()
    if view is None:
        return LineStatus(Path(path).stem, f"BROKEN: {res.reason}", None, None, 0, None, None, history=short,
                          details=details), None
    note = "shallow clone: older history unchecked" if res.unchecked else None
    return replace(view_status(view, note), history=short, details=details), view


def gone_status(idx, line: str) -> LineStatus:
    """A line whose ledger git holds but the work tree does not: GONE, with what it was."""
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


def _store(path: Path, status: LineStatus, view) -> None:

    write_extra(path, STATUS_EXTRA, {"fields": {k: getattr(status, k) for k in ROW_FIELDS},
                                     "remeasured": [m.as_row() for m in remeasures(view.rows)],
                                     "resweeps": resweeps(view.rows)})


def cached_status(path: Path, idx) -> LineStatus:
    """``line_status(path, idx)``, its row-derived part from the cache where the ledger, git and
    the code are as they were when it was stored (analysis/verify_cache.py); else checked in full
    and stored for the next `bench status`."""
    hit = from_cache(path, idx)
    if hit is not None:
        return hit
    status, view = checked_line(path, idx)
    if view is not None:
        _store(path, status, view)
    return status


def statuses(root: Path, idx: Index | None = None) -> list[LineStatus]:
    """Every line, present or GONE, by name (``idx``: ``history.index(root)`` where already made)."""
    idx = index(root) if idx is None else idx
    out = [cached_status(p, idx) for p in line_paths(root)]
    out += [gone_status(idx, line) for line in idx.gone]
    return sorted(out, key=lambda s: s.line)
