"""Planning a sweep: which (config, candidate) pairs still need an outcome at this commit.

A Task is plain data (picklable) so that the loop can later hand tasks to worker
processes; only the parent process appends to the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.governance.ledger import current_rows
from harness.governance.verdict import OUTCOME_KINDS
from harness.workloads import Config


@dataclass(frozen=True)
class Task:
    index: int
    config: Config
    candidates: tuple[str, ...]


def done_pairs(rows, commit: str) -> set[tuple[str, str]]:
    """(config_key, candidate) pairs that already have an outcome row at ``commit``."""
    return {(r["config_key"], r["candidate"]) for r in current_rows(rows)
            if r.get("kind") in OUTCOME_KINDS and r.get("commit") == commit}


def plan(reg, rows, commit: str) -> tuple[list[Task], int]:
    """Tasks still to run, and how many pairs were already done (resume)."""
    done = done_pairs(rows, commit)
    tasks, skipped = [], 0
    for i, cfg in enumerate(reg.configs):
        todo = tuple(c for c in reg.candidates if (cfg.key(), c) not in done)
        skipped += len(reg.candidates) - len(todo)
        if todo:
            tasks.append(Task(i, cfg, todo))
    return tasks, skipped


def stale_results(rows, commit: str) -> dict[tuple[str, str], list[int]]:
    """Outcome rows from older commits that a fresh outcome at ``commit`` will supersede."""
    stale: dict[tuple[str, str], list[int]] = {}
    for r in current_rows(rows):
        if r.get("kind") in OUTCOME_KINDS and r.get("commit") != commit:
            stale.setdefault((r["config_key"], r["candidate"]), []).append(r["seq"])
    return stale
