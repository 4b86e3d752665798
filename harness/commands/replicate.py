"""`bench replicate LINE`: the line's grid swept again on another device instance, its rows
written beside the line's own (registration/replication.py says what a replicate is and what
refuses one).

The run is the sweep's (commands/sweep.py), with two differences: every row carries the
``replicate`` field, and it plans, writes and supersedes only this replicate's rows — so the
line's own rows, and the verdict decided on them, are never touched. Refusals that need no
device (a line not closed, the commit) come before any worker starts; those that need the
device's identity (its instance, model and stack) come as soon as the worker reports it, before
any lock, ceilings or row.
"""

from __future__ import annotations

import dataclasses

from harness.commands.sweep import SweepPlan, SweepSummary, sweep
from harness.registration import replication


def replicate(plan: SweepPlan, *, later: bool = False, other_stack: bool = False, executor=None, progress=None,
              on_wait=None, on_interrupt=None) -> SweepSummary:
    """Sweep ``plan``'s line on this device instance as a replicate of its verdict (of its line's
    rows, before a ``[replication]`` verdict); ``later``: at this checkout's code commit when it
    descends from the closing one; ``other_stack``: on another software stack, recorded as such.
    The plan's rows are always committed; its ``replicate`` is this replicate's check."""
    line = plan.line
    tgt = replication.target(line)
    at = replication.at_commit(line, tgt, later=later)

    def check(envs: list[dict]) -> dict:
        return replication.check_instance(line, tgt, envs, at, other_stack=other_stack)

    return sweep(dataclasses.replace(plan, commit=True, replicate=check), executor=executor, progress=progress,
                 on_wait=on_wait, on_interrupt=on_interrupt)
