"""Read-only views of a line's ledger for reports, comparisons, routing and status.

Everything a report shows comes from the ledger rows alone (shape-aware attention kept superseded rows beside
their corrections): the registration
is in the `registered` row, every outcome row carries its config, metrics and raw samples.
A view is refused — never silently used — when the chain fails ``verify``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.registration import line_ids
from harness.vocab.devices import device_of
from harness.vocab.outcomes import REGISTERED, RESULT, VERDICT, is_replicate
from harness.ledger.rows import RegisteredRow, VerdictRow
from harness.ledger.line_payloads import RegistrationSummary
from harness.ledger.payloads import Measurement
from harness.vocab.outcomes import latest_outcomes
from harness.ledger.format import ledger_path, read_rows
from harness.ledger.store import missing_ledgers
from harness.ledger.verify import verify_refusal
from harness.reporting.analysis.verify_cache import cached_verify



@dataclass(frozen=True)
class LineView:
    line: str
    path: Path
    rows: tuple  # every row, in ledger order
    commit: str | None  # the commit prefix asked for (LINE@commit), None for all

    @property
    def registered(self) -> RegisteredRow | None:
        return next((r for r in self.rows if r.kind == REGISTERED), None)

    @property
    def registration(self) -> dict:
        """The registration the line's `registered` row holds ({}: none)."""
        reg = self.registered
        return (reg.registration if reg is not None else None) or {}

    @property
    def plan(self) -> RegistrationSummary:
        """The registration the line's `registered` row holds, as typed fields (ledger/payloads.py)."""
        return RegistrationSummary.from_row(self.registration)

    @property
    def verdict(self) -> VerdictRow | None:
        return next((r for r in self.rows if r.kind == VERDICT), None)

    def outcomes(self) -> dict[tuple[str, str], dict]:
        """The latest current outcome per (config_key, kernel), at the asked commit if any."""
        rows = self.rows
        if self.commit:
            # Rows (supersedes rows included) written at that commit: a later commit's re-sweep
            # supersedes them, but they are still what was measured at this one.
            rows = [r for r in rows if str((r.commit or "")).startswith(self.commit)]
        return latest_outcomes(rows)

    def results(self) -> list[dict]:
        return [r for r in self.outcomes().values() if r.kind == RESULT]

    def n_pairs(self) -> int | None:
        """Registered (config, candidate) pairs: configs × candidates; None without a registration."""
        reg = self.registered
        if reg is None or not isinstance(reg.n_configs, int):
            return None
        return reg.n_configs * len(self.plan.candidates or [])

    def commits(self) -> list[str]:
        """Commits any result of this line's own sweeps was measured at (superseded or not),
        oldest first (a replicate's rows are beside the line's: reporting/analysis/replication.py)."""
        seen: list[str] = []
        for r in self.rows:
            if r.kind == RESULT and not is_replicate(r) and r.commit not in seen:
                seen.append(r.commit)
        return seen


def split_spec(spec: str) -> tuple[str, str | None]:
    """``LINE`` or ``LINE@commit`` (a commit prefix) → (line id, commit or None). A line id
    only (``line_ids.check``), never a path: these commands read ``ledger/<id>.jsonl`` and
    nothing else."""
    line, _, commit = spec.partition("@")
    if not line:
        raise UserError(f"'{spec}' names no line: use LINE or LINE@COMMIT")
    if "@" in spec and not commit:
        raise UserError(f"'{spec}' has an empty commit after '@': use LINE@COMMIT (a commit hash or its prefix)")
    return line_ids.check(line), commit or None


def ledger_dir(root: Path) -> Path:
    return Path(root) / "ledger"


def line_paths(root: Path) -> list[Path]:
    """Every line's ledger (files starting with '_' hold device data, not lines)."""
    return sorted(p for p in ledger_dir(root).glob("*.jsonl") if not p.name.startswith("_"))


def load(root: Path, spec: str) -> LineView:
    """The line named by ``spec`` (LINE or LINE@commit), its chain verified first."""
    line, commit = split_spec(spec)
    path = ledger_path(root, line)
    if not path.exists():
        gone = [why for rel, why in missing_ledgers(root) if rel == f"ledger/{path.name}"]
        if gone:
            raise UserError(f"line '{line}' is GONE: ledger/{path.name} is {gone[0]}")
        raise UserError(f"no ledger for line '{line}' ({path}): register it first (bench register registrations/{line}.toml)")
    return load_path(path, commit=commit)


def load_path(path: Path, *, commit: str | None = None) -> LineView:
    res = cached_verify(path)  # analysis/verify_cache.py: a full verify unless nothing it checked changed
    if not res.ok:
        raise UserError(verify_refusal(Path(path).name, res, "reporting on it"))
    rows = tuple(read_rows(path))
    view = LineView(line=Path(path).stem, path=Path(path), rows=rows, commit=commit)
    if commit and not any(str((r.commit or "")).startswith(commit) for r in rows
                          if r.kind == RESULT and not is_replicate(r)):
        have = ", ".join(c[:12] for c in view.commits() if c) or "none"
        raise UserError(f"line '{view.line}' has no result measured at commit '{commit}' (measured at: {have})")
    return view


def arm_samples(row: dict, arm: str) -> list[float]:
    """Raw kept samples (ms) of one arm of a result row: 'candidate', 'baseline' or 'control'."""
    held = Measurement.from_row(row.timing or {}).arm(f"candidate:{row.candidate}" if arm == "candidate" else arm)
    return [float(x) for x in (held.samples_ms if held is not None else None) or []]


def device_label(row: dict) -> str:
    device, gpu = device_of(row)
    return gpu or device or "?"


__all__ = ["LineView", "arm_samples", "device_label", "ledger_dir", "line_paths", "load", "load_path", "split_spec"]
