"""A closed line's verdict as it was written: read from its `verdict` row, never decided again
(`bench verdict LINE --show`). The view carries what ``render.verdict.render_verdict`` reads of
a fresh ``governance.verdict.Verdict``, so a written verdict prints as it did when written."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from harness.errors import UserError
from harness.ledger.rows import VerdictRow

# The clause fields a verdict row may lack (rows written before the field existed).
CLAUSE_DEFAULTS = {"note": None, "value": None, "n": 0, "op": "", "threshold": None, "passed": False, "text": ""}


@dataclass(frozen=True)
class WrittenVerdict:
    """A verdict row, shaped as the verdict command's own result (``dry_run`` False, nothing
    decided again); ``anchored``: None (the row says where it was decided: ``row.commit``)."""

    outcome: str
    bar: SimpleNamespace
    primary: str
    primary_value: float | None
    prediction: float
    n_rows: int
    excluded: dict
    row: VerdictRow
    anchored: str | None = None
    verify: tuple = field(default=())
    dry_run: bool = False


def _ns(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_ns(v) for v in value]
    return value


def written_verdict(view) -> WrittenVerdict:
    """The verdict row of ``view`` (a ``lines.LineView``), or a refusal naming what to run while
    the line is still open."""
    row = view.verdict
    if row is None:
        raise UserError(f"line '{view.line}' has no verdict yet (it is open): `bench verdict {view.line} --no-commit` "
                        f"prints what it would be without writing it; `bench verdict {view.line}` writes it")
    clauses = [SimpleNamespace(**{**CLAUSE_DEFAULTS, **c}) for c in (row.clauses or [])]
    verify = tuple(SimpleNamespace(**{"checks": [], "passed": None, "text": "", **{k: _ns(v) for k, v in c.items()}})
                   for c in (row.verify or []))
    return WrittenVerdict(outcome=row.outcome, bar=SimpleNamespace(clauses=clauses), primary=row.primary or "primary",
                          primary_value=row.primary_value, prediction=row.prediction, n_rows=row.n_rows or 0,
                          excluded=row.excluded or {}, row=row, verify=verify)


__all__ = ["WrittenVerdict", "written_verdict"]
