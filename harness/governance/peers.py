"""A candidate against another candidate of its line at one config: the bar's ``speedup vs "P"``.

Every candidate of a config is timed in the same interleaved rounds (each arm in turn, one
clock, rounds dropped for all arms alike), so each result row holds every arm's kept samples,
paired by round. Candidate A's speedup over P at that config is P's median over A's, from A's
row: exactly A's speedup over the baseline divided by P's, with the baseline's median
cancelling. It stands only where P's own row at that config is a correct result of the same
measurement (P's samples in both rows are the same): a P caught by a check after timing, or
measured again in another run, gives A nothing to be compared with.
"""

from __future__ import annotations

from typing import Callable


def _samples(row, kernel: str) -> list[float]:
    from harness.measurement.timing.results import arm_name

    arms = (row.timing or {}).get("arms") if isinstance(row.timing, dict) else None
    arm = (arms or {}).get(arm_name(kernel)) or {}
    return [float(x) for x in arm.get("samples_ms") or []]


def peer_samples(row, peer: str) -> tuple[list[float], list[float]]:
    """(P's kept samples, the row's candidate's kept samples) from ``row``'s interleaved rounds."""
    return _samples(row, peer), _samples(row, row.candidate)


def speedup_vs(row, peer: str) -> float | None:
    """The row's candidate's speedup over ``peer``: P's median over its own (>1: the candidate
    is faster), the speedup's own ratio of medians; None where the row has no samples of P."""
    from harness.measurement.stats import ratio

    p, c = peer_samples(row, peer)
    return ratio(p, c) if p and c else None


def same_measurement(row, peer_row) -> bool:
    """Whether ``peer_row``'s own samples are the ones ``row`` holds for its kernel: one
    interleaved measurement produced both rows."""
    mine = _samples(row, peer_row.candidate)
    return bool(mine) and mine == _samples(peer_row, peer_row.candidate)


def peer_speedups(outcomes: dict, counted: Callable[[object], bool]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (config key, candidate) whose outcome is ``counted`` (a correct result the bar sees),
    its speedup over every candidate at the same config whose outcome is counted too and comes
    from the same measurement (itself included: 1)."""
    by_config: dict[str, list] = {}
    for (config_key, _), r in outcomes.items():
        if counted(r):
            by_config.setdefault(config_key, []).append(r)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for config_key, rows in by_config.items():
        for r in rows:
            vs = {}
            for p in rows:
                if p is r or same_measurement(r, p):
                    v = speedup_vs(r, p.candidate)
                    if v is not None:
                        vs[p.candidate] = v
            out[(config_key, r.candidate)] = vs
    return out
