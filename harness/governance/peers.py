"""A candidate against another candidate of its line at one config: the bar's ``speedup vs "P"``.

Every candidate of a config is timed in the same interleaved rounds (each arm in turn, one
clock, rounds dropped for all arms alike), so each result row holds every arm's kept samples,
paired by round. Candidate A's speedup over P at that config is P's median over A's, from A's
row: exactly A's speedup over the baseline divided by P's, with the baseline's median
cancelling. It stands only where P's own row at that config is a correct result of the same
measurement (P's samples in both rows are the same). Where it does not, why not is kept: P
failed or was not measured there (the comparison was not made: a clause on it is unknown),
or P was measured again in another run (the verdict refuses: the two rows cannot be
compared, and a decided result is never re-measured at its commit).
"""

from __future__ import annotations

from harness.ledger.payloads import Measurement
from harness.measurement.stats import paired_ratio, ratio
from harness.measurement.timing.criteria import row_statistic
from harness.measurement.timing.results import arm_name
from harness.vocab.outcomes import FAILING_KINDS, RESULT, state_of

# Why a correct row has no speedup over a peer (``Uncompared.kind``).
PEER_FAILED = "peer_failed"  # P's outcome there is not a correct result (incorrect, crashed, impossible)
PEER_UNMEASURED = "peer_unmeasured"  # P has no result the bar counts there (skipped, throttled, rig-noisy)
OTHER_RUN = "other_run"  # P's correct result there comes from another measurement
NO_SAMPLES = "no_samples"  # the row keeps no samples of P (or of its own arm)


def _samples(row, kernel: str) -> list[float]:
    timing = Measurement.from_row(row.timing)
    arm = timing.arm(arm_name(kernel)) if timing is not None else None
    return [float(x) for x in (arm.samples_ms if arm is not None else None) or []]


def peer_samples(row, peer: str) -> tuple[list[float], list[float]]:
    """(P's kept samples, the row's candidate's kept samples) from ``row``'s interleaved rounds."""
    return _samples(row, peer), _samples(row, row.candidate)


def speedup_vs(row, peer: str) -> float | None:
    """The row's candidate's speedup over ``peer``: P's median over its own (>1: the candidate
    is faster), the speedup's own ratio of medians — under the statistic stop the speedup's own
    statistic, the median of the per-round ratios over the stop's rounds; None where the row
    has no samples of P."""
    p, c = peer_samples(row, peer)
    if not (p and c):
        return None
    stat = row_statistic(row.policy, row.timing)
    return ratio(p, c) if stat is None else paired_ratio(p[:stat[0]], c[:stat[0]])[0]


def same_measurement(row, peer_row) -> bool:
    """Whether ``peer_row``'s own samples are the ones ``row`` holds for its kernel: one
    interleaved measurement produced both rows."""
    mine = _samples(row, peer_row.candidate)
    return bool(mine) and mine == _samples(peer_row, peer_row.candidate)


def _why_not(row, peer_row, correct: bool) -> tuple[str, str]:
    """(kind, reason) a correct ``row`` has no speedup over the candidate of ``peer_row`` (its
    outcome at the same config), which counts as a correct result or not."""
    peer = peer_row.candidate
    if not correct:
        failed = peer_row.kind in FAILING_KINDS or (peer_row.kind == RESULT and peer_row.impossible)
        return ((PEER_FAILED if failed else PEER_UNMEASURED),
                f"{peer} is {state_of(peer_row)} at {row.config_key} (row {peer_row.seq})")
    if not same_measurement(row, peer_row):
        return OTHER_RUN, (f"{peer}'s result at {row.config_key} (row {peer_row.seq}) comes from another run than "
                           f"{row.candidate}'s (row {row.seq})")
    return NO_SAMPLES, f"row {row.seq} keeps no interleaved samples of {peer} and {row.candidate} to compare"


def peer_speedups(outcomes: dict, correct: set) -> tuple[dict, dict]:
    """Per outcome key in ``correct`` (the correct results the bar reads): its speedup over
    every candidate with an outcome at its config that is correct too and comes from the same
    measurement (itself included: 1), and for every other such candidate why there is none:
    ``({key: {peer: speedup}}, {key: {peer: (kind, reason)}})``."""
    by_config: dict[str, list] = {}
    for key, r in outcomes.items():
        by_config.setdefault(r.config_key, []).append((key, r))
    values: dict = {}
    why: dict = {}
    for rows in by_config.values():
        for key, r in rows:
            if key not in correct:
                continue
            vs, no = {}, {}
            for pkey, p in rows:
                if p.role == "baseline":
                    continue
                ok = pkey in correct
                v = speedup_vs(r, p.candidate) if ok and (p is r or same_measurement(r, p)) else None
                if v is not None:
                    vs[p.candidate] = v
                else:
                    no[p.candidate] = _why_not(r, p, ok)
            values[key], why[key] = vs, no
    return values, why
