"""The empty window: what a timed window holding nothing reads, and whether an arm is told apart from it.

A kernel whose work runs where the timed window does not see it (another stream, a
thread) reads as an empty window. What that reads is measured here, per device and mode,
through the same timer path as the arms (hold, events, flush, graph replays): a no-op arm
with short budgets. An arm is told apart from it when its median exceeds
EMPTY_WINDOW_FACTOR times the empty window's median and its median's CI lies above the
empty window's (a real call holds at least one kernel, several times an empty window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import UserError
from harness.jsonsafe import jsonable
from harness.measurement.clocks import ClockMonitor
from harness.measurement.stats import Stats
from harness.measurement.timing.measure import measure
from harness.measurement.timing.policy import TimingPolicy
from harness.measurement.timing.timers import Timer

EMPTY_WINDOW_FACTOR = 2.0
# One arm, no pair: its own median's noise stops it, whatever stop the line registers.
EMPTY_WINDOW_BUDGET = {"warmup_ms": 20.0, "min_samples": 20, "max_samples": 400, "min_time_ms": 20.0,
                       "noise_target": 0.05, "timeout_s": 10.0, "stop": "noise", "precision": None, "alpha": None}
EMPTY_ARM = "empty"
_empty_cache: dict[tuple, "EmptyWindow"] = {}


@dataclass(frozen=True)
class EmptyWindow:
    """What a timed window holding nothing read, in one mode on one device (ms)."""

    mode: str
    effective_mode: str
    stats: Stats
    note: str | None = None

    def as_dict(self) -> dict:
        return jsonable({"mode": self.mode, "effective_mode": self.effective_mode,
                         "stats": self.stats.as_dict(), "note": self.note, "factor": EMPTY_WINDOW_FACTOR})


def told_apart(arm: Stats, empty: Stats) -> bool:
    """Whether an arm's samples can be told apart from an empty window's (module docstring)."""
    if not (arm.n and empty.n) or math.isnan(empty.median):
        return True  # nothing to compare with: the rule cannot apply
    return arm.median > EMPTY_WINDOW_FACTOR * empty.median and arm.median_lo > empty.median_hi


def empty_window(policy: TimingPolicy, device: str, *, timer: Timer | None = None,
                 monitor: ClockMonitor | None = None) -> EmptyWindow:
    """Time a no-op arm under ``policy``'s mode on ``device`` (cached per process, device and
    mode unless a timer is given). In graph mode a no-op captures an empty graph; where the
    driver refuses that, a one-element write stands in (a floor above the empty one, noted)."""
    key = (device, policy.mode, policy.lead_calls, policy.graph_replays)
    if timer is None and key in _empty_cache:
        return _empty_cache[key]
    budget = TimingPolicy(**{**policy.as_dict(), **EMPTY_WINDOW_BUDGET})
    note = None
    try:
        m = measure({EMPTY_ARM: lambda slot: None}, n_slots=1, policy=budget, device=device, timer=timer,
                    monitor=monitor)
    except (UserError, RuntimeError) as exc:
        if policy.mode != "graph" or timer is not None:
            raise
        import torch

        cell = torch.zeros(1, device=device)
        m = measure({EMPTY_ARM: lambda slot: cell.fill_(0.0)}, n_slots=1, policy=budget, device=device,
                    monitor=monitor)
        note = f"an empty graph could not be replayed ({str(exc).splitlines()[0]}): a one-element write stood in"
    ew = EmptyWindow(policy.mode, m.effective_mode, m.arms[EMPTY_ARM].stats, note)
    if timer is None:
        _empty_cache[key] = ew
    return ew
