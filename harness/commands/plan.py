"""Planning a sweep: which (config, candidate) pairs still need an outcome here and now.

A pair is done when it has an outcome measured at this commit on this device (a GPU
sweep does not inherit a CPU sweep's rows, nor the reverse). Transient outcomes — a
throttled measurement, a config skipped for lack of memory — are retried; with
``remeasure`` (`bench sweep --remeasure`) so is every pair the verdict cannot use (a
rig-noisy result, any skip), and the new rows supersede the old. A replicate (`bench
replicate`) plans its own rows the same way (``replicate``: its ``replicate`` field), beside the
line's: neither counts the other's rows done nor supersedes them. A Task
(pipeline/context.py) is plain data, handed to worker processes; only the driver appends
to the ledger (commands/writer.py).
"""

from __future__ import annotations

from harness.vocab.outcomes import CRASHED, measured_on, outcome_key, stream_outcomes, transient, unusable
from harness.pipeline.context import Task


def plan(reg, rows, key: tuple, *, retry_crashed: bool = False, remeasure: bool = False,
         replicate: dict | None = None) -> tuple[list[Task], int]:
    """Tasks still to run at ``key`` (commit, device, gpu — no gpu for a line with
    ``mixed_devices``), and how many pairs were already done.

    A pair that crashed at ``key`` stays done (a kernel that took its worker down would do it
    again) unless ``retry_crashed``; one the verdict cannot use (rig-noisy, skipped) stays
    done unless ``remeasure``.
    """
    again = {outcome_key(r) for r in unusable_at(reg, rows, key, replicate)} if remeasure else set()
    done = {(r.config_key, r.candidate) for r in stream_outcomes(rows, replicate)
            if measured_on(r, reg.mixed_devices) == key and not transient(r)
            and not (retry_crashed and r.kind == CRASHED) and outcome_key(r) not in again}
    tasks, resumed = [], 0
    for cfg in reg.configs:
        todo = tuple(c for c in reg.candidates if (cfg.key(), c) not in done)
        resumed += len(reg.candidates) - len(todo)
        if todo:
            tasks.append(Task(cfg, todo))
    return tasks, resumed


def unusable_at(reg, rows, key: tuple, replicate: dict | None = None) -> list[dict]:
    """Current outcome rows measured at ``key`` that the verdict cannot use and a new
    measurement could settle (``outcomes.unusable``): what ``bench sweep --remeasure`` runs
    (``replicate``: of that replicate's rows)."""
    return [r for r in stream_outcomes(rows, replicate)
            if measured_on(r, reg.mixed_devices) == key and unusable(r, include_noisy=reg.include_noisy)]


def replaced_by(task: Task, rows, key: tuple, any_gpu: bool = False, replicate: dict | None = None) -> list[int]:
    """Current outcome rows of this config that the task's fresh rows supersede: those of
    the pairs it re-runs, measured elsewhere, and the config's baseline rows — of the same
    stream (the line's own sweep, or ``replicate``'s rows). A replicate supersedes only its
    rows measured at ``key``: its grid at another commit (the closing one, a later one) stands."""
    return sorted(r.seq for r in stream_outcomes(rows, replicate)
                  if r.config_key == task.config.key()
                  and (replicate is None or measured_on(r, any_gpu) == key)
                  and (r.candidate in task.candidates or r.role == "baseline" or measured_on(r, any_gpu) != key))
