"""Whether a sweep measured anything the verdict can use, and if not, why — in one line.

A sweep whose every pair ended skipped, throttled, crashed-by-the-rig or rig-noisy ran to the
end but gave no number: `bench sweep` exits ``EXIT_NOTHING_USABLE`` with the line this module
writes (docs/contracts.md, exit codes). The line is computed from the rows' own records: each
pair's state and reason, and for host-timed rows the rounds whose call waited on a run queue
(``timing.n_waited`` of ``timing.n_rounds``, measured by the host timer's schedstat reads).
"""

from __future__ import annotations

from collections import Counter

from harness.ledger.payloads import Measurement
from harness.vocab.outcomes import RIG_NOISY_STATE, SKIPPED, THROTTLED, decided, state_of


def _timing(row) -> dict:
    t = row.timing
    return t if isinstance(t, dict) else {}


def waited_share(rows) -> float | None:
    """The share of the rows' timed rounds in which a call waited on a run queue (the host ran
    other work), over every row that recorded its rounds; None where none did."""
    waited = rounds = 0
    for r in rows:
        t = Measurement.from_row(r.timing)
        n = (t.n_rounds if t is not None else None) or 0
        if n:
            rounds += n
            waited += t.n_waited or 0
    return waited / rounds if rounds else None


def nothing_usable(rows, *, include_noisy: bool, max_waited: float, line: str) -> str | None:
    """None when some pair of ``rows`` (a sweep's current outcomes) is one the bar decides on
    (a result it counts, or a failure of the kernel); else why none is, in one line. ``max_waited``: the
    share of rounds dropped for a run queue past which the host is named the reason (the
    registration's ``[timing] max_drop_fraction``, the bar rig-noise uses)."""
    pairs = [r for r in rows if not r.is_baseline]
    if not pairs or any(decided(r, include_noisy=include_noisy) for r in pairs):
        return None
    n = len({r.config_key for r in rows})
    share = waited_share(rows)
    timing_cut = [r for r in pairs if r.kind in (SKIPPED, THROTTLED) and _timing(r)]
    lead = f"{n} of {n} config{'s' if n != 1 else ''}"
    if share is not None and share > max_waited and timing_cut:
        return (f"{lead} could not be timed: the host's run queue held other work in {share:.0%} of rounds "
                f"(rounds dropped above {max_waited:.0%} make a loaded host); run again on a quieter host, or "
                f"raise [timing] timeout_s")
    states = Counter(state_of(r) for r in pairs)
    counted = ", ".join(f"{k}: {v}" for k, v in states.most_common())
    top = states.most_common(1)[0][0]
    example = next((r.reason for r in pairs if state_of(r) == top and r.reason), None)
    hint = (f"; measure them again: bench sweep {line} --remeasure" if top in (SKIPPED, THROTTLED, RIG_NOISY_STATE)
            else "")
    return (f"{lead} gave no number the verdict can use ({counted})"
            + (f": {example.splitlines()[0]}" if example else "")
            + (f"; the host's run queue held other work in {share:.0%} of rounds" if share else "") + hint)


__all__ = ["nothing_usable", "waited_share"]
