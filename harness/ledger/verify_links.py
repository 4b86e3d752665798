"""`bench ledger verify`'s checks of rows that name other rows: a replicate's row names the
verdict it replicates and the commit it was measured at as `bench replicate` writes them, and
a ``supersedes`` row names only earlier rows a sweep may replace. Each check gives the first
bad row and why ((row, why)), or None; ledger/verify.py turns that into its refusal."""

from __future__ import annotations

from harness.ledger.line_payloads import RegistrationSummary, Replicate
from harness.registration.replication import AT_CLOSING, AT_LATER, OTHER_STACK, SAME_STACK
from harness.vocab.outcomes import (OUTCOME_KINDS, REGISTERED, SUPERSEDES, VERDICT, is_replicate, measured_on,
                                    remeasurable, state_of, stream)


def replicate_fault(rows: list) -> tuple[int, str] | None:
    """Every row a replicate wrote (``replicate``, registration/replication.py) names what it
    replicates as `bench replicate` does: a verdict row earlier in the ledger (``of``), or —
    written before the verdict (``of`` null) — no verdict yet; at the closing commit it names
    (``at`` "closing"), or at another one (``at`` "later"); a known stack mark."""
    verdict_at = None
    for n, row in enumerate(rows):
        if row.kind == VERDICT and verdict_at is None:
            verdict_at = n
        raw = getattr(row, "replicate", None)
        if raw is None:
            continue
        why = _replicate_fault(row, raw, verdict_at)
        if why:
            return n, f"{why} (restore the ledger from git)"
    return None


def _replicate_fault(row, raw, verdict_at: int | None) -> str | None:
    rep = Replicate.from_row(raw)
    if rep is None or not isinstance(rep.instance, dict):
        return f"holds replicate = {raw!r}, which names no device instance"
    if rep.of is None and verdict_at is not None:
        return f"is a replicate written before the verdict (of null) but follows the verdict at row {verdict_at}"
    if rep.of is not None and rep.of != verdict_at:
        return f"replicates verdict row {rep.of!r}, which is not the verdict before it"
    if rep.at not in (AT_CLOSING, AT_LATER) or rep.stack not in (SAME_STACK, OTHER_STACK):
        return f"holds replicate at = {rep.at!r}, stack = {rep.stack!r}: not a replicate bench writes"
    if (rep.at == AT_CLOSING) != (row.commit == rep.closing_commit):
        return (f"is a replicate marked at = {rep.at!r} measured at commit {str(row.commit)[:12]}, while "
                f"the commit it replicates is {str(rep.closing_commit)[:12]}")
    return None


def supersedes_fault(rows: list) -> tuple[int, str] | None:
    """Every ``supersedes`` row names earlier outcome rows of its own config that nothing
    superseded yet; one measured at the commit and device the superseding row was written at
    must be one a sweep measures again there (``outcomes.remeasurable``: rig-noisy, skipped,
    throttled, crashed, a baseline's row), unless a later row of its pair had already replaced
    it — a decided outcome is never re-rolled at the same commit."""
    reg = RegistrationSummary.from_row(rows[0].registration) if rows and rows[0].kind == REGISTERED else None
    include_noisy = bool(reg.include_noisy) if reg is not None else False
    taken: dict[int, int] = {}
    for n, row in enumerate(rows):
        if row.kind != SUPERSEDES:
            continue
        named = row.supersedes
        if not isinstance(named, list) or not named or not all(isinstance(s, int) and not isinstance(s, bool)
                                                               for s in named):
            return n, f"is a supersedes row naming no rows ({named!r}): it was not written by a sweep"
        for s in named:
            why = _superseded_fault(rows, n, s, taken, include_noisy)
            if why:
                return n, why
            taken[s] = n
    return None


def _superseded_fault(rows: list, n: int, s: int, taken: dict, include_noisy: bool) -> str | None:
    """Why row ``n`` may not supersede row ``s``; None where it may."""
    row = rows[n]
    old = rows[s] if 0 <= s < n else None
    if old is None or old.kind not in OUTCOME_KINDS:
        what = "a later row" if s >= n else f"a {old.kind} row" if old else "no row"
        return f"supersedes row {s}, which is {what}: a sweep supersedes only earlier outcome rows"
    if old.config_key != row.config_key:
        return (f"supersedes row {s} of config {old.config_key}, not its own config "
                f"{row.config_key}: a re-run config supersedes only its own rows")
    if s in taken:
        return f"supersedes row {s}, already superseded at row {taken[s]}"
    # A replicate's re-run supersedes only that replicate's rows, the line's own sweep only its own.
    mine = stream(row.replicate)
    if (stream(old.replicate) if is_replicate(old) else None) != mine:
        what = "a replicate's row" if is_replicate(old) else "a row of the line's own sweep"
        by = "a replicate's re-run" if mine is not None else "the line's own sweep"
        return (f"supersedes row {s}, {what}, from {by}: a replicate and the line's own rows never "
                f"replace each other (restore the ledger from git)")
    shadowed = any(r.kind in OUTCOME_KINDS and r.pair == old.pair
                   and (stream(r.replicate) if is_replicate(r) else None) == mine for r in rows[s + 1:n])
    if measured_on(old) == measured_on(row) and not shadowed and not remeasurable(old, include_noisy=include_noisy):
        return (f"supersedes row {s} ({old.candidate} @ {old.config_key}: "
                f"{state_of(old)}) at the commit and device it was measured at: a sweep measures "
                f"again only rig-noisy, skipped, throttled or crashed pairs there — a decided "
                f"outcome is never re-rolled (restore the ledger from git)")
    return None
