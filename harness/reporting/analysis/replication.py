"""Whether a line's replicates agree with its verdict (issue 48, item 3), from the ledger alone.

Each replicate (`bench replicate`: rows beside the line's, registration/replication.py) is one
device instance's grid for one verdict at one commit. Its bar is evaluated on its own rows as
the verdict's was (``verdict.bar_rows``), clause by clause: the value, pass or fail, and whether
that agrees with the verdict's clause (both known and passing alike; unknown otherwise); and
the whole bar against the verdict's outcome. Before a verdict the reference is the bar on the
line's outcomes so far (provisional).

The spread of each clause is taken over the instances that measured the verdict's commit on its
stack with a complete grid — the line's own (its value in the verdict row: the instance's own
under ``[replication]``, else the verdict's) and each such replicate: the least and greatest
value, and (greatest − least) / |the verdict's value| (None when that is 0 or unknown). A
replicate at a later commit, on another stack, or incomplete is shown with its clauses but
left out of the spread (``in_spread``). Returns plain data; never prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.vocab.devices import instance, instance_text
from harness.jsonsafe import number
from harness.ledger.payloads import each
from harness.ledger.line_payloads import Clause, MeasuredAt, Replication
from harness.registration import bar as barlang
from harness.vocab.outcomes import OUTCOME_KINDS, current_rows, is_replicate
from harness.registration.replication import SAME_STACK, grids
from harness.governance.verdict import bar_rows


@dataclass(frozen=True)
class ClauseAgreement:
    text: str
    value: float | None
    passed: bool | None  # None: unknown (no value)
    agrees: bool | None  # None: this clause or the verdict's is unknown


@dataclass(frozen=True)
class ReplicateView:
    instance: dict
    of: int | None  # the verdict row replicated (None: written before the verdict)
    commit: str
    at: str  # "closing" | "later"
    stack: str  # "same" | "other"
    pairs: int
    n_pairs: int | None
    clauses: tuple[ClauseAgreement, ...]
    passed: bool | None  # its bar (None: its grid is incomplete)
    agrees: bool | None  # its bar against the verdict's outcome (None: incomplete, or no verdict)
    in_spread: bool

    @property
    def label(self) -> str:
        return instance_text(self.instance)

    @property
    def complete(self) -> bool:
        return self.n_pairs is not None and self.pairs >= self.n_pairs

    def as_dict(self) -> dict:
        return {"instance": self.instance, "label": self.label, "of": self.of, "commit": self.commit, "at": self.at,
                "stack": self.stack, "pairs": self.pairs, "n_pairs": self.n_pairs, "complete": self.complete,
                "passed": self.passed, "agrees": self.agrees, "in_spread": self.in_spread,
                "clauses": [c.__dict__ for c in self.clauses]}


@dataclass(frozen=True)
class Spread:
    text: str
    n: int  # instances with a value
    low: float | None
    high: float | None
    relative: float | None  # (high − low) / |the verdict's value|

    def as_dict(self) -> dict:
        return {"text": self.text, "n": self.n, "min": self.low, "max": self.high, "relative": self.relative}


@dataclass(frozen=True)
class ReplicationView:
    required: int | None  # [replication] instances (the line's own counted); None: not registered
    combine: str | None
    provisional: bool  # no verdict yet: agreement is against the bar on the outcomes so far
    outcome: str | None  # the verdict's (None: no verdict)
    commit: str | None  # the commit the verdict decided on (before it: the line's outcomes')
    original: dict  # the line's own instance
    reference: tuple  # (text, value, passed) per clause: what a replicate is compared with
    replicates: tuple[ReplicateView, ...]
    spread: tuple[Spread, ...]

    def short(self) -> str:
        """One phrase for `bench status`: how many replicates, how many agree, the widest spread."""
        reps = self.replicates
        parts = []
        if self.required and self.required > 1 and self.provisional:
            counted = sum(1 for r in reps if r.in_spread)
            parts.append(f"{counted} of {self.required - 1} replicate{'s' if self.required > 2 else ''} the verdict "
                         f"waits for")
        elif reps:
            parts.append(f"{len(reps)} replicate{'s' if len(reps) != 1 else ''}")
        done = [r for r in reps if r.agrees is not None]
        agree = sum(1 for r in done if r.agrees)
        if done:
            parts.append(f"{agree} agree{'s' if agree == 1 else ''}" + (f", {len(done) - agree} differ"
                                                                       if len(done) > agree else ""))
        other = sum(1 for r in reps if r.stack == "other")
        if other:
            parts.append(f"{other} on another stack")
        partial = sum(1 for r in reps if not r.complete)
        if partial:
            parts.append(f"{partial} incomplete")
        widest = max((s.relative for s in self.spread if s.relative is not None and s.n > 1), default=None)
        if widest is not None:
            parts.append(f"spread {widest:.1%}")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"required": self.required, "combine": self.combine, "provisional": self.provisional,
                "outcome": self.outcome, "commit": self.commit, "original": self.original,
                "reference": [{"text": t, "value": v, "passed": p} for t, v, p in self.reference],
                "replicates": [r.as_dict() for r in self.replicates],
                "spread": [s.as_dict() for s in self.spread], "short": self.short()}


def _truth(value, passed) -> bool | None:
    return None if value is None else bool(passed)


def replication_view(view) -> ReplicationView | None:
    """The agreement of a line's replicates (``view``: lines.LineView); None when it has none
    and its registration waits for none."""
    reg = view.plan
    spec = Replication.from_row(reg.replication) if reg.replication else None
    if view.commit:
        return None  # LINE@COMMIT: the rows of one commit, not the replication of a verdict
    has = any(r.kind in OUTCOME_KINDS and is_replicate(r) for r in current_rows(view.rows))
    if not has and not (spec and (spec.instances if spec.has("instances") else 1) > 1):
        return None
    go = reg.go
    if not go:
        return None
    # Only a line with replicates pays for the bar and the verdict's modules (`bench status` reads every line).
    bar = barlang.parse(go)
    noisy = bool(reg.include_noisy)
    outcomes = view.outcomes()
    candidates = set(reg.candidates or [])
    verdict = view.verdict
    own = [r for (_, c), r in outcomes.items() if c in candidates]
    if verdict is not None:
        reference = tuple((c.text, number(c.value), _truth(c.value, c.passed)) for c in each(Clause, verdict.clauses or []))
        per = Replication.from_row(verdict.replication or {}).instance_values
        mine = next((p for p in per if p.original), None)
        own_values = [number(c.value) for c in each(Clause, mine.clauses)] if mine else [v for _, v, _ in reference]
        reference_go = verdict.outcome == "GO"
        by_seq = {r.seq: r for r in view.rows}
        decided = [by_seq[s] for s in verdict.decided_on or () if s in by_seq]
        closing = MeasuredAt.from_row(verdict.measured_at or {}).commit
        original = instance((decided[0].env if decided else None) or {})
    else:
        rows, _ = bar_rows({k: r for k, r in outcomes.items() if k[1] in candidates}, include_noisy=noisy)
        now = barlang.evaluate(bar, rows)
        reference = tuple((c.text, c.value, _truth(c.value, c.passed)) for c in now.clauses)
        reference_go = now.passed
        own_values = [c.value for c in now.clauses]
        closing = own[0].commit if own else None
        original = instance((own[0].env if own else None) or {})
    n_pairs = view.n_pairs()
    reps = []
    for g in grids(view.rows):
        mine_rows = {k: r for k, r in g.rows.items() if k[1] in candidates}
        brows, _ = bar_rows(mine_rows, include_noisy=noisy)
        out = barlang.evaluate(bar, brows)
        complete = n_pairs is not None and len(mine_rows) >= n_pairs
        clauses = tuple(ClauseAgreement(c.text, c.value, _truth(c.value, c.passed),
                                        None if c.value is None or ref[2] is None else _truth(c.value, c.passed) == ref[2])
                        for c, ref in zip(out.clauses, reference))
        passed = out.passed if complete else None
        agrees = None if passed is None or not own else passed == reference_go
        reps.append(ReplicateView(g.instance, g.of, g.commit, g.at, g.stack, len(mine_rows), n_pairs, clauses,
                                  passed, agrees, complete and g.stack == SAME_STACK and g.commit == closing))
    spread = []
    for i, (text, ref_value, _) in enumerate(reference):
        values = [v for v in [own_values[i] if i < len(own_values) else None,
                              *(r.clauses[i].value for r in reps if r.in_spread and i < len(r.clauses))]
                  if v is not None and math.isfinite(v)]
        low, high = (min(values), max(values)) if values else (None, None)
        rel = (high - low) / abs(ref_value) if values and ref_value else None
        spread.append(Spread(text, len(values), low, high, rel))
    return ReplicationView(spec.instances if spec else None, spec.combine if spec else None,
                           verdict is None, verdict.outcome if verdict is not None else None, closing, original,
                           reference,
                           tuple(reps), tuple(spread))
