"""The row vocabulary: every ledger row kind, which settle a (config, candidate) pair, which
the sweep measures again, and where a row was measured. The sweep, its plan, the verdict
and the reports all read these; none restates them.
"""

from __future__ import annotations

# Outcome kinds: what happened to one (config, candidate) pair at one sweep.
RESULT = "result"  # measured: metrics, raw samples, CI, control
INCORRECT = "incorrect"  # failed a correctness check (gate, timed output, recheck, empty window)
CRASHED = "crashed"  # raised, ran out of memory, or took its worker down
SKIPPED = "skipped"  # not measured: memory short, timing cut short, or its baseline failed
THROTTLED = "throttled"  # clocks dropped in too many rounds (or could not be verified)
UNSUPPORTED = "unsupported"  # the kernel cannot run this config or device
# The other row kinds.
REGISTERED = "registered"
VERDICT = "verdict"
SUPERSEDES = "supersedes"
CEILINGS = "ceilings"
PROFILE = "profile"

# Every row kind the ledger accepts (a row of another kind is refused at append time).
ROW_KINDS = (REGISTERED, RESULT, SKIPPED, INCORRECT, THROTTLED, CRASHED, VERDICT, SUPERSEDES, CEILINGS, UNSUPPORTED,
             PROFILE)
# Kinds that settle a (config, candidate): the sweep has decided what happened to it.
OUTCOME_KINDS = (RESULT, INCORRECT, SKIPPED, THROTTLED, CRASHED, UNSUPPORTED)
# Outcomes the bar counts as failed pairs.
FAILING_KINDS = (INCORRECT, CRASHED)
# Outcomes that measured nothing: the bar cannot see these pairs at all.
MISSING_KINDS = (SKIPPED, UNSUPPORTED, THROTTLED)


def transient(row: dict) -> bool:
    """An outcome worth measuring again: clocks throttled, memory short, timing cut short."""
    return row["kind"] == THROTTLED or (row["kind"] == SKIPPED and ("predicted_bytes" in row
                                                                    or row.get("undersampled", False)))


def outcome_key(row: dict) -> tuple[str, str]:
    return row["config_key"], row["candidate"]


def measured_on(row: dict, any_gpu: bool = False) -> tuple:
    """Where a row was measured: (commit, device, GPU name, code). Resume and the verdict key
    rows by it: one verdict, one such key; ``any_gpu`` (a line registered with ``[bar]
    mixed_devices``) leaves the GPU name out. ``code`` names the installed distributions the
    code packages came from where the repository does not hold them (None: it holds them)."""
    env = row.get("env") or {}
    code = ", ".join(f"{c.get('name')} {c.get('version')} ({str(c.get('sha256'))[:12]})"
                     for c in row.get("code") or ()) or None
    return row.get("commit"), env.get("device"), None if any_gpu else env.get("gpu"), code


def current_outcomes(rows) -> list[dict]:
    """The current (not superseded) outcome rows, in ledger order."""
    from harness.governance.ledger import current_rows

    return [r for r in current_rows(rows) if r.get("kind") in OUTCOME_KINDS]


def latest_outcomes(rows) -> dict[tuple[str, str], dict]:
    """The last current outcome row per (config, candidate)."""
    return {outcome_key(r): r for r in current_outcomes(rows)}
