"""`bench sweep`: plan the open pairs, run each config, append its rows as soon as it ends.

Each config's rows are appended (fsynced) and committed to git before the next config
starts, so an interrupted sweep loses at most the config in flight, re-running it resumes,
and what it reported as written cannot be rewritten unnoticed.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from harness.errors import UserError, plural
from harness.ledger.payloads import Cost, Env, Metrics, Policy
from harness.ledger.store import require_anchorable
from harness.governance.line import Line
from harness.vocab.outcomes import INCORRECT, RESULT, measured_at, state_of
from harness.governance.reductio import require_sm_clock
from harness.pipeline.context import SweepContext, Task
from harness.commands.interrupts import Interrupts, StopNow, interrupts
from harness.commands.plan import plan as plan_pairs, unusable_at
from harness.commands.writer import Writer
from harness.governance.line import require_tracked_code
from harness.registry import get_kernel
from harness.execution.select import make_executor
from harness.commands.profile import require_profiler, verify_pass
from harness.commands.ceilings import CEILINGS_LEDGER, is_committed, require_committable, stored_or_measured
from harness.execution.devicelock import device_lock
from harness.execution.executor import Job, ScheduleHooks, call, schedule
from harness.vocab.devices import device_key, model
from harness.pipeline.rows import baseline_gate_failure
from harness.governance.reductio import before_sweep
from harness.vocab.outcomes import INTEGRATION, measured_on
from harness.commands import integration

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
    # Stopped by a signal (``signal``: SIGINT or SIGTERM), and how many of the planned configs
    # were not run (None: stopped before they were planned).
    interrupted: bool = False
    left: int | None = 0
    anchored: tuple[str, ...] = ()  # commits holding this sweep's rows, one per config
    committed: bool = True  # False under --no-commit: the rows are not committed
    measured_on: tuple = ()  # the (commit, device, GPU) key its rows were measured on
    signal: int | None = None
    at_once: bool = False  # stopped at once (second Ctrl-C, SIGTERM): configs in flight were dropped
    baseline_failed: dict | None = None  # the config whose baseline failed the gate, which stopped it
    cost: dict | None = None  # the harness's own time: ``sweep_cost``
    replicate: dict | None = None  # a replicate's run (`bench replicate`): the field its rows carry

    def as_dict(self) -> dict:
        return {"line": self.line, "commit": self.commit, "counts": self.counts, "rejections": self.rejections,
                "resumed": self.resumed, "control": self.control, "notes": list(self.notes),
                "interrupted": self.interrupted, "left": self.left, "anchored": list(self.anchored),
                "committed": self.committed, "signal": self.signal, "at_once": self.at_once,
                "baseline_failed": self.baseline_failed, "cost": self.cost,
                **({"replicate": self.replicate} if self.replicate is not None else {})}


def sweep_cost(costs: list[dict], write_s: float, profile_s: float, wall_s: float) -> dict:
    """Where a sweep's time went: the configs' phases summed (``cost`` of each config run,
    pipeline/phase.py), appending and committing rows, the [verify] profiles, and the wall
    time from the sweep's start (after its refusals) to its summary."""
    phases: dict[str, float] = {}
    parts: dict[str, float] = {}
    typed = [Cost.from_row(c) for c in costs]
    for c in typed:
        for k, v in (c.seconds or {}).items():
            phases[k] = phases.get(k, 0.0) + v
        for k, v in (c.of_which or {}).items():
            parts[k] = parts.get(k, 0.0) + v
    n = len(costs)
    in_configs = sum(c.total if c.has("total") else 0.0 for c in typed)
    return {"configs": n, "phases": phases, "of_which": parts, "in_configs": in_configs,
            "append_commit": write_s, "profile": profile_s, "wall": wall_s}


def context(line: Line, device: str, ceilings: dict | None) -> SweepContext:
    return SweepContext(reg=line.reg, device=device, ceilings=ceilings, root=str(line.root))


def check_kernels_usable(line: Line, device: str) -> None:
    """Fail closed before anything runs: every kernel of the line runs here, from tracked code.

    A sweep without its baseline, or with a candidate quietly dropped, is never started; code
    in this repository that git does not have at HEAD (an ignored kernels/ file, say) would
    produce numbers no commit can reproduce, so it is refused by name before any import of it.
    """
    require_tracked_code(line.root)
    reg = line.reg
    for role, name in [("baseline", reg.baseline), *(("candidate", c) for c in reg.candidates)]:
        spec = get_kernel(name)
        why = spec.unusable_reason(device)
        if why:
            raise UserError(f"{role} '{name}' cannot run on this machine ({why}): sweep line "
                            f"'{reg.line}' where all its kernels run")


@dataclass
class _Run:
    """How far a sweep got: what its summary is made of, however it stopped."""

    envs: list = field(default_factory=list)
    tasks: list | None = None  # None until the open pairs are planned
    first_pass: list = field(default_factory=list)  # tasks whose rows the first pass wrote
    finished: bool = False
    remeasured: int = 0
    profiled: int = 0
    profile_s: float = 0.0  # seconds of the [verify] pass
    started: float = field(default_factory=time.perf_counter)
    ceilings: dict | None = None
    reductio: str | None = None  # the note of the bar's check against this device's ceilings
    key: tuple = ()
    resumed: int = 0  # pairs already done at this commit on this device
    again: list = field(default_factory=list)  # --remeasure: the pairs here the verdict could not use
    baseline_failed: dict | None = None  # run.baseline_gate_failure of the config that stopped it
    integration: int = 0  # `integration` rows written (the line's model step, commands/integration.py)
    integration_s: float = 0.0


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep is asked to do, decided once from its options and the line; ``sweep`` and
    everything below it read it (nothing re-derives an option).

    ``with_ceilings``: look up (or measure) the device's ceilings and check the bar against
    them; ``commit``: commit each config's rows as soon as they are written; ``retry_crashed``:
    run again the pairs a crash left; ``remeasure``: also run the pairs measured here that the
    verdict cannot use (``plan.unusable_at``), their new rows superseding the old; ``wait``: wait
    for a device lock another process holds. ``replicate`` (`bench replicate`,
    commands/replicate.py): called with the workers' envs once they have started, before any
    device lock or ceilings, it refuses or returns the ``replicate`` field every row of this
    run carries; the run then plans, writes and supersedes only that replicate's rows, beside
    the line's, and has no [verify] or [integration] pass (a replicate re-times the kernel grid).
    """

    line: Line
    device: str
    with_ceilings: bool = True
    commit: bool = True
    retry_crashed: bool = False
    remeasure: bool = False
    wait: bool = True
    replicate: Callable[[list[dict]], dict] | None = None

    @property
    def why(self) -> str:
        """What its commits say they hold."""
        return f"{'sweep' if self.replicate is None else 'replicate'} of {self.line.reg.line} at {self.line.commit[:12]}"


def sweep(plan: SweepPlan, *, executor=None, progress=None, on_wait=None, on_interrupt=None) -> SweepSummary:
    """Run every open (config, candidate) pair of the plan's line and append one outcome row each.

    Every refusal comes before the first write: kernels are checked, the executor's slots
    start and report their devices (one GPU model per sweep), each device is locked, then
    the device's ceilings are looked up (measured by a worker, stored only if this device
    has none yet) and the bar is checked against them (governance/reductio.py). Only this
    process appends; configs run wherever ``executor`` puts them (default: one worker
    process). ``progress``, ``on_wait`` (a device lock held elsewhere) and ``on_interrupt``
    (a first Ctrl-C) are the CLI's displays.

    However it stops, it returns its summary: a Ctrl-C or SIGTERM (``Interrupts``; the
    summary names the signal) and a config whose baseline fails the correctness gate (no
    new config starts after it; ``baseline_failed`` says why) included.
    """
    line, device = plan.line, plan.device
    if executor is None:
        executor = make_executor(device)
    executor.prepare(line)
    executor.launch()  # its slots start while the checks below run; a refusal stops them
    try:
        check_kernels_usable(line, device)
        require_sm_clock(line.reg, device)  # a bar of cycles or tflops_at(F): none on the CPU
        if line.reg.verify:
            require_profiler(device)  # [verify] needs counters: no ncu, no sweep (nothing written yet)
        if plan.commit:
            require_anchorable(line.ledger)
            if plan.with_ceilings:
                require_committable(line.root)
    except BaseException:
        executor.close()
        raise
    run = _Run()
    with interrupts(on_interrupt) as guard:
        writer = Writer(line, guard, commit=plan.commit, why=plan.why)
        try:
            _sweep(plan, executor, guard, run, writer, progress, on_wait)
        except StopNow:
            pass  # a second Ctrl-C or SIGTERM: workers killed, locks released on the way out; rows written stay
        guard.wrap_up()  # from here signals are only counted: what is left is short and writes nothing partial
        writer.commit()  # rows an interrupted earlier run wrote but did not commit, even when nothing ran now
        return _summary(plan, executor, run, writer, guard)


def _sweep(plan: SweepPlan, executor, guard: Interrupts, run: _Run, writer: Writer, progress, on_wait) -> None:
    """The sweep itself, filling ``run`` as it goes (``sweep`` summarizes whatever it reached)."""
    line = plan.line
    with contextlib.ExitStack() as stack:
        stack.callback(executor.close)
        slots = executor.start()  # prepared and launched by ``sweep``
        run.envs = envs = [s.env for s in slots]
        if not line.reg.mixed_devices:
            _one_model(envs)
        if plan.replicate is not None:
            writer.replicate = plan.replicate(envs)  # refuses before anything is locked or written
        who = {"line": line.reg.line, "root": str(line.root)}
        for key in sorted({device_key(e) for e in envs} if not executor.locks_devices else ()):
            stack.enter_context(device_lock(key, who=who, wait=plan.wait, on_wait=on_wait))
        ctx = _with_ceilings(plan, executor, slots, guard, run, writer)
        stamp = line.stamp(envs[0])
        run.key = key = measured_at(stamp.commit, stamp.env, stamp.code, line.reg.mixed_devices)
        run.again = unusable_at(line.reg, line.rows, key, writer.replicate) if plan.remeasure else []
        tasks, run.resumed = plan_pairs(line.reg, line.rows, key, retry_crashed=plan.retry_crashed,
                                        remeasure=plan.remeasure, replicate=writer.replicate)
        run.tasks = tasks
        if progress:
            progress.start(len(tasks), tasks, line.rows, envs[0])  # sizes and earlier configs: the ETA
            stack.callback(progress.stop)
        _run_configs(line, executor, ctx, guard, run, writer, progress)
        if line.reg.verify and run.finished and writer.replicate is None:
            _verify(plan, guard, run, writer)
        if line.reg.integration is not None and run.finished and not guard.stopping() and writer.replicate is None:
            _integration(line, plan.device, key, writer, run, envs[0])


def _with_ceilings(plan: SweepPlan, executor, slots, guard: Interrupts, run: _Run, writer: Writer) -> SweepContext:
    """The configs' context: with the device's ceilings (stored, or measured now by the first
    slot's worker and committed before any row naming them is), the bar checked against them."""
    line = plan.line
    # Ceilings are a GPU model's: a sweep over several models (mixed_devices) attaches none,
    # so no row carries a fraction of another device's peak.
    one_model = len({model(s.env) for s in slots}) == 1
    ceilings = None
    if plan.with_ceilings and one_model:
        # Committed before any row naming it is: a result's ceilings are part of its record,
        # and the tree is clean even when the sweep stops before its first config.
        ceilings, done = _ceilings(line, executor, slots[0], guard,
                                   f"ceilings for the {writer.why}" if writer.commit_rows else None)
        writer.anchored.append(done)
    run.ceilings = ceilings
    if ceilings is not None:
        # The bar against this device's ceilings, before any config runs (a refusal writes
        # nothing of the line; the ceilings just measured stay, committed, for the next try).
        run.reductio = before_sweep(line.root, line.reg, ceilings)
    elif plan.with_ceilings:
        run.reductio = "reductio not run: the GPUs are of several models, and no one model's ceilings hold for all"
    return context(line, plan.device, ceilings)


def _run_configs(line: Line, executor, ctx: SweepContext, guard: Interrupts, run: _Run, writer: Writer,
                 progress) -> None:
    """Every planned config, then the rig-noisy pairs again (sets ``run.finished``)."""
    envs, tasks, key = run.envs, run.tasks, run.key

    def on_config(why, done=None):
        def append(task, rows):
            if progress:
                progress.writing(task.config.key())
            appended = writer.config(task, rows, key, why)
            if done is not None:
                done.append(task)
            if progress:
                progress.done(task.config.key(), appended)
            bad = baseline_gate_failure(o for o, _ in rows)
            if bad is not None and run.baseline_failed is None:
                run.baseline_failed = bad
                guard.halt()  # the configs in flight finish and are written; no new one starts
        return append

    on_start = (lambda t: progress.advance_to(t.config.key())) if progress else None
    on_phase = progress.phase if progress else None
    guard.patient = True  # configs run from here: a first Ctrl-C lets those in flight finish
    first_why = "re-measured (bench sweep --remeasure)" if run.again else "re-measured"
    def hooks(on_done) -> ScheduleHooks:
        return ScheduleHooks(on_done, on_start=on_start, on_phase=on_phase, stopping=guard.stopping)

    run.finished = finished = schedule(executor, envs, tasks, ctx, hooks(on_config(first_why, run.first_pass)))
    # Rig-noisy pairs are measured again later in the sweep (the rig may have quietened),
    # up to NOISY_REMEASURES times; the fresh rows supersede the noisy ones. A line that
    # counts noisy results (include_noisy) has them decided already.
    for attempt in range(0 if line.reg.include_noisy or not finished else NOISY_REMEASURES):
        by_cfg: dict[str, Task] = {}
        for task in tasks:
            noisy = tuple(c for c in task.candidates
                          if getattr(writer.latest.get((task.config.key(), c)), "kind", None) == RESULT
                          and writer.latest[(task.config.key(), c)].row.rig_noisy)
            if noisy:
                by_cfg[task.config.key()] = Task(task.config, noisy)
        if not by_cfg:
            break
        run.remeasured += len(by_cfg)
        why = f"rig-noisy, measured again ({attempt + 1} of {NOISY_REMEASURES})"
        run.finished = finished = schedule(executor, envs, list(by_cfg.values()), ctx, hooks(on_config(why)))
        if not finished:
            break


def _verify(plan: SweepPlan, guard: Interrupts, run: _Run, writer: Writer) -> None:
    """The [verify] pass, after timing and still under the device lock: counters of every
    candidate result here that has none yet (a resumed sweep profiles what an interrupted one
    did not reach). ncu runs in a child process; rows are written by the writer and committed
    one by one."""
    t0 = time.perf_counter()
    for p in verify_pass(plan.line, plan.device, run.key, plan.line.ledger.rows()):
        writer.profile(p, run.envs[0])
        run.profiled += 1
        if guard.stopping():  # a Ctrl-C: a resumed sweep profiles the rest
            run.finished = False
            break
    run.profile_s = time.perf_counter() - t0


def _integration(line: Line, device: str, key: tuple, writer: Writer, run: _Run, env: dict) -> None:
    """The model step (commands/integration.py), in this process under the device lock, once
    per measured-at key: a resumed sweep whose step was timed here does not time it again."""
    rows = [*line.rows, *writer.appended]
    if any(r.kind == INTEGRATION and measured_on(r, line.reg.mixed_devices) == key for r in rows):
        return
    t0 = time.perf_counter()
    run.integration = len(writer.integration(integration.run(line.reg, device, rows), env))
    run.integration_s = time.perf_counter() - t0


def _summary(plan: SweepPlan, executor, run: _Run, writer: Writer, guard: Interrupts) -> SweepSummary:
    line, device, remeasure = plan.line, plan.device, plan.remeasure
    commit = writer.commit_rows
    counts: dict[str, int] = {}
    rejections: dict[str, int] = {}
    controls: list[tuple[float, bool]] = []
    tolerance = None
    for r in (o.row for o in writer.latest.values()):
        counts[r.kind] = counts.get(r.kind, 0) + 1
        if r.kind == INCORRECT:
            rejections[r.tag] = rejections.get(r.tag, 0) + 1
        if r.kind == RESULT:
            controls.append((Metrics.from_row(r.metrics).control, r.rig_noisy))
            tolerance = Policy.from_row(r.policy).control_tolerance
    if run.profiled:
        counts["profile"] = run.profiled
    control = None
    if controls:
        vals = [c for c, _ in controls]
        control = {"n": len(vals), "median": statistics.median(vals), "min": min(vals), "max": max(vals),
                   "noisy": sum(n for _, n in controls), "tolerance": tolerance}
    notes = [_where(run.envs, executor)] if run.envs else []
    notes += [run.reductio] if run.reductio else []
    if run.ceilings is not None and not commit:
        if not is_committed(line.root, run.ceilings):
            rel = f"ledger/{CEILINGS_LEDGER}.jsonl"
            notes.append(f"the ceilings row these rows name ({rel} row {run.ceilings.seq}) is not committed "
                         f"(--no-commit): commit it with them (git add {rel} {line.ledger.rel} && git commit -m "
                         f"'bench: ledger rows' -- {rel} {line.ledger.rel})")
    if run.again:
        notes.append(f"--remeasure: {_pairs_by_state(run.again)} the verdict could not use, measured again at "
                     f"this commit (their new rows supersede the old)")
    elif remeasure:
        notes.append("--remeasure: no pair measured here is one the verdict cannot use")
    if run.integration:
        notes.append(f"integration: the model step timed with the baseline, {plural(run.integration, 'candidate')} "
                     f"and the control ({run.integration_s:.1f} s); `bench verdict` sets its gains beside the bar")
    if run.remeasured:
        notes.append(f"{run.remeasured} rig-noisy config(s) measured again later in the sweep (up to "
                     f"{NOISY_REMEASURES} times each)")
    left_unusable = unusable_at(line.reg, line.ledger.rows(), run.key, writer.replicate) if run.finished else []
    if left_unusable:
        command = "sweep" if writer.replicate is None else "replicate"
        notes.append(f"{_pairs_by_state(left_unusable)} here the verdict cannot use: run `bench {command} "
                     f"{line.reg.line} --remeasure` to measure {'it' if len(left_unusable) == 1 else 'them'} "
                     f"again at this commit")
    if device == "cpu":
        notes.append("ran on the CPU: clocks not monitored, timings are host perf_counter_ns")
    left = None if run.tasks is None else len(run.tasks) - len(run.first_pass)
    return SweepSummary(line.reg.line, line.commit, counts, rejections, run.resumed, control, tuple(notes),
                        interrupted=guard.signal is not None, left=left,
                        anchored=writer.commits, committed=commit, measured_on=run.key,
                        signal=guard.signal, at_once=guard.stopped_at_once, baseline_failed=run.baseline_failed,
                        cost=sweep_cost(writer.costs, writer.write_s, run.profile_s, time.perf_counter() - run.started),
                        replicate=writer.replicate)


def _pairs_by_state(rows: list[dict]) -> str:
    """'3 pairs (rig-noisy: 2, skipped: 1)'."""
    states: dict[str, int] = {}
    for r in rows:
        states[state_of(r)] = states.get(state_of(r), 0) + 1
    return f"{plural(len(rows), 'pair')} ({', '.join(f'{k}: {n}' for k, n in sorted(states.items()))})"


def _where(envs: list[dict], executor) -> str:
    """Where the configs ran, for the summary."""
    how = "inline, in this process (no isolation, no watchdog)" if not executor.can_kill else \
        f"{len(envs)} {executor.labels[len(envs) > 1]}"
    typed = [Env.from_row(e) for e in envs]
    hosts = sorted({e.host or "?" for e in typed})
    gpus = [f"GPU {e.gpu_index} ({e.gpu})" for e in typed if e.gpu]
    return f"ran {how} on {', '.join(hosts)}" + (f": {', '.join(gpus)}" if gpus else "")


def _one_model(envs: list[dict]) -> None:
    """Resume and verdicts key rows by (commit, device, GPU model): one model per sweep."""
    typed = [Env.from_row(e) for e in envs]
    models = {(e.device, e.gpu) for e in typed}
    if len(models) > 1:
        names = ", ".join(f"GPU {e.gpu_index} {e.gpu}" for e in typed)
        raise UserError(f"the GPUs picked are of different models ({names}): sweep one model at a time "
                        f"with --gpus, or register the line with [bar] mixed_devices = true")


def _ceilings(line: Line, executor, slot, guard: Interrupts, why: str | None) -> tuple[dict, str | None]:
    """This device's stored ceilings, or ones measured now by the first slot's worker; with
    ``why``, committed (the row and its commit are written together, never half)."""
    row, _, made = stored_or_measured(line.root, slot.fingerprint, slot.env,
                                      lambda: call(executor, 0, Job(-1, "ceilings"), timeout_s=line.reg.timing.watchdog_s),
                                      why=why, guard=guard)
    return row, made


