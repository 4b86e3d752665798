"""`bench status`'s rows as an earlier `bench status` stored them: a line's state, commit and
device, read back beside its ledger's clean verification (analysis/verify_cache.py) while the
ledger, git and the code are as they were, with its history made fresh. This module is what
a status whose every line is stored needs, and nothing of the checks that make a row
(analysis/status.py: the replicates' view, the governance rules behind it), so such a
status loads none of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.reporting.analysis.history import Index, index, line_history
from harness.reporting.analysis.lines import line_paths
from harness.reporting.analysis.verify_cache import read_extra
from harness.vocab.outcomes import Remeasure


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
    # Its replicates against its verdict (analysis/replication.py): the short phrase, and the whole view.
    replication: str | None = None
    replication_data: dict | None = None

    @property
    def shown(self) -> str:
        """The state with its history: 'closed GO — amended by flash-h200-v2'."""
        return self.state + (f" — {'; '.join(self.history)}" if self.history else "")


# The name `bench status` stores a line's state under, beside its clean verification
# (analysis/verify_cache.py): what the line's rows alone give, by this code.
STATUS_EXTRA = "status"
# LineStatus fields that come from the rows alone (the history comes from every ledger and git).
ROW_FIELDS = ("line", "state", "commit", "device", "n_done", "n_pairs", "outcome", "note", "replication",
              "replication_data")


def from_cache(path: Path, idx: Index) -> LineStatus | None:
    """A line's status from what an earlier `bench status` stored for its ledger as it is now
    (None: nothing stored, anything changed, or unreadable); its history is made fresh."""
    got = read_extra(path, STATUS_EXTRA)
    try:
        fields = {k: got["fields"][k] for k in ROW_FIELDS}
        if fields["line"] != Path(path).stem:
            return None
        measured = (tuple(Remeasure.from_row(m) for m in got["remeasured"]), int(got["resweeps"]))
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    hist = line_history(idx, Path(path).stem, measured=measured)
    return LineStatus(**fields, history=tuple(hist.short()), details=tuple(hist.notes()))


def stored_statuses(root: Path) -> tuple[Index, list[LineStatus] | None]:
    """(the history index of ``root``, every line's status by name where each was stored for
    its ledger as it is now, else None: a line not stored, or a GONE one, is checked in full
    by ``analysis.status.statuses``, given the index)."""
    idx = index(root)
    if idx.gone:
        return idx, None
    out = []
    for path in line_paths(root):
        hit = from_cache(path, idx)
        if hit is None:
            return idx, None
        out.append(hit)
    return idx, sorted(out, key=lambda s: s.line)
