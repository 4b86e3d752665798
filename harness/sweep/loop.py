"""The sweep loop: plan the open pairs, run each config, append its rows as soon as it ends.

Each config's rows are appended (fsynced) before the next config starts, so an
interrupted sweep loses at most the config in flight, and re-running it resumes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.governance.line import Line
from harness.governance.verdict import measured_on
from harness.sweep.plan import Task, plan, replaced_by
from harness.sweep.run import RATE_METRICS, SweepContext, crashed_outcomes, run_config

# Times a sweep measures its rig-noisy pairs again, after every other config has run.
NOISY_REMEASURES = 2


@dataclass(frozen=True)
class SweepSummary:
    line: str
    commit: str
    counts: dict
    rejections: dict
    resumed: int
    control: dict | None
    notes: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"line": self.line, "commit": self.commit, "counts": self.counts, "rejections": self.rejections,
                "resumed": self.resumed, "control": self.control, "notes": list(self.notes)}


def judges_rates(go: str) -> bool:
    """Whether a bar has a clause over an absolute rate (RATE_METRICS)."""
    from harness.governance import bar as barlang

    return any(c.aggregate.metric in RATE_METRICS for c in barlang.parse(go).clauses())


def context(line: Line, device: str, ceilings: dict | None) -> SweepContext:
    reg = line.reg
    return SweepContext(line=reg.line, device=device, baseline=reg.baseline, atol=reg.atol, rtol=reg.rtol,
                        seeds=reg.seeds, families=reg.families, min_pass_rate=reg.min_pass_rate,
                        timing=reg.timing, numerics=reg.numerics, ceilings=ceilings,
                        rate_bar=judges_rates(reg.go))


def check_kernels_usable(line: Line, device: str) -> None:
    """Fail closed before anything runs: every kernel of the line runs here, from tracked code.

    A sweep without its baseline, or with a candidate quietly dropped, is never started; a
    kernel whose source lies in this repository but is not tracked by git (an ignored
    file) would produce numbers no commit can reproduce.
    """
    from harness.governance import gitguard
    from kernels import get_kernel

    reg = line.reg
    for role, name in [("baseline", reg.baseline), *(("candidate", c) for c in reg.candidates)]:
        spec = get_kernel(name)
        why = spec.unusable_reason(device)
        if why:
            raise UserError(f"{role} '{name}' cannot run on this machine ({why}): sweep line "
                            f"'{reg.line}' where all its kernels run")
        src = Path(spec.source).resolve()
        if src.is_relative_to(line.root.resolve()) and not gitguard.is_tracked(line.root, src):
            raise UserError(f"{role} '{name}' comes from {gitguard.relative(line.root, src)}, which git does not "
                            f"track (ignored?): commit it so the ledger's commit stamp covers the code")


def sweep(line: Line, device: str, env: dict, *, with_ceilings: bool = True, progress=None) -> SweepSummary:
    """Run every open (config, candidate) pair of the line and append one outcome row each.

    Every refusal comes before the first write: kernels are checked, then the device's
    ceilings are looked up (measured and stored only if this device has none yet).
    """
    check_kernels_usable(line, device)
    ceilings = None
    if with_ceilings:
        from harness.sweep.ceilings import current_ceilings

        ceilings, _ = current_ceilings(line.root, device=device)
    ctx = context(line, device, ceilings)
    stamp = line.stamp(env).fields()
    key = measured_on(stamp)
    tasks, resumed = plan(line.reg, line.rows, key)
    counts: dict[str, int] = {}
    rejections: dict[str, int] = {}
    controls: list[tuple[float, bool]] = []
    tolerance = None
    remeasured = 0
    if progress:
        progress.start(len(tasks))
    appended: list[dict] = []

    def run_task(task: Task, why: str) -> list:
        if progress:
            progress.advance_to(task.config.key())
        try:
            outcomes = run_config(task.config, task.candidates, ctx)
        except UserError:
            raise
        except Exception as exc:  # a kernel that crashes the config is an outcome, not the end of the night
            outcomes = crashed_outcomes(task.config, task.candidates, ctx, exc)
        old = replaced_by(task, [*line.rows, *appended], key)
        start = len(appended)
        if old:
            appended.append(line.ledger.append("supersedes", {
                **stamp, "config_key": task.config.key(), "supersedes": old,
                "reason": f"{why} at commit {line.commit[:12]} on {key[1]}{' ' + key[2] if key[2] else ''}"}))
        for o in outcomes:
            appended.append(line.ledger.append(o.kind, {**stamp, **o.payload}))
        if progress:
            progress.done(task.config.key(), appended[start:])
        return outcomes

    latest: dict[tuple[str, str], object] = {}
    try:
        for task in tasks:
            for o in run_task(task, "re-measured"):
                latest[(o.payload["config_key"], o.payload["candidate"])] = o
        # Rig-noisy pairs are measured again later in the sweep (the rig may have quietened),
        # up to NOISY_REMEASURES times; the fresh rows supersede the noisy ones. A line that
        # counts noisy results (include_noisy) has them decided already.
        for attempt in range(0 if line.reg.include_noisy else NOISY_REMEASURES):
            by_cfg: dict[str, tuple] = {}
            for task in tasks:
                noisy = tuple(c for c in task.candidates
                              if getattr(latest.get((task.config.key(), c)), "kind", None) == "result"
                              and latest[(task.config.key(), c)].payload["rig_noisy"])
                if noisy:
                    by_cfg[task.config.key()] = Task(task.config, noisy)
            if not by_cfg:
                break
            remeasured += len(by_cfg)
            for task in by_cfg.values():
                for o in run_task(task, f"rig-noisy, measured again ({attempt + 1} of {NOISY_REMEASURES})"):
                    latest[(o.payload["config_key"], o.payload["candidate"])] = o
    finally:
        if progress:
            progress.stop()
    for o in latest.values():
        counts[o.kind] = counts.get(o.kind, 0) + 1
        if o.kind == "incorrect":
            rejections[o.payload["tag"]] = rejections.get(o.payload["tag"], 0) + 1
        if o.kind == "result":
            controls.append((o.payload["metrics"]["control"], o.payload["rig_noisy"]))
            tolerance = o.payload["policy"]["control_tolerance"]
    control = None
    if controls:
        vals = [c for c, _ in controls]
        control = {"n": len(vals), "median": statistics.median(vals), "min": min(vals), "max": max(vals),
                   "noisy": sum(n for _, n in controls), "tolerance": tolerance}
    notes = []
    if remeasured:
        notes.append(f"{remeasured} rig-noisy config(s) measured again later in the sweep (up to "
                     f"{NOISY_REMEASURES} times each)")
    if device == "cpu":
        notes.append("ran on the CPU: clocks not monitored, timings are host perf_counter_ns")
    return SweepSummary(line.reg.line, line.commit, counts, rejections, resumed, control, tuple(notes))
