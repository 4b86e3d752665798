"""The sweep loop: plan the open pairs, run each config, append its rows as soon as it ends.

Each config's rows are appended (fsynced) and committed to git before the next config
starts, so an interrupted sweep loses at most the config in flight, re-running it resumes,
and what it reported as written cannot be rewritten unnoticed.
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field

from harness.errors import UserError, plural
from harness.governance.ledger import anchor, require_anchorable
from harness.governance.line import Line
from harness.governance.outcomes import INCORRECT, PROFILE, RESULT, SUPERSEDES, measured_on, state_of
from harness.sweep.plan import Task, plan, replaced_by, unusable_at
from harness.sweep.run import SweepContext

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

    def as_dict(self) -> dict:
        return {"line": self.line, "commit": self.commit, "counts": self.counts, "rejections": self.rejections,
                "resumed": self.resumed, "control": self.control, "notes": list(self.notes),
                "interrupted": self.interrupted, "left": self.left, "anchored": list(self.anchored),
                "committed": self.committed, "signal": self.signal, "at_once": self.at_once,
                "baseline_failed": self.baseline_failed}


def context(line: Line, device: str, ceilings: dict | None) -> SweepContext:
    return SweepContext(reg=line.reg, device=device, ceilings=ceilings, root=str(line.root))


def check_kernels_usable(line: Line, device: str) -> None:
    """Fail closed before anything runs: every kernel of the line runs here, from tracked code.

    A sweep without its baseline, or with a candidate quietly dropped, is never started; code
    in this repository that git does not have at HEAD (an ignored kernels/ file, say) would
    produce numbers no commit can reproduce, so it is refused by name before any import of it.
    """
    from harness.governance.line import require_tracked_code
    from harness.registry import get_kernel

    require_tracked_code(line.root)
    reg = line.reg
    for role, name in [("baseline", reg.baseline), *(("candidate", c) for c in reg.candidates)]:
        spec = get_kernel(name)
        why = spec.unusable_reason(device)
        if why:
            raise UserError(f"{role} '{name}' cannot run on this machine ({why}): sweep line "
                            f"'{reg.line}' where all its kernels run")


@dataclass
class _Written:
    """What this sweep appended, and the latest outcome it wrote per (config, candidate)."""

    appended: list = field(default_factory=list)
    latest: dict = field(default_factory=dict)


def gpu_slots(spec: str | None) -> list[str]:
    """``--gpus``: the CUDA_VISIBLE_DEVICES entry of each worker, from indices into what this
    process sees ("0,1", "all"; default one GPU)."""
    import os

    import torch

    seen = [v.strip() for v in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if v.strip()] \
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None else None
    count = torch.cuda.device_count()
    if spec is None or spec == "all":
        picked = list(range(count)) if spec == "all" else [0]
    else:
        try:
            picked = [int(v) for v in spec.split(",") if v.strip()]
        except ValueError:
            raise UserError(f"--gpus {spec!r}: give GPU indices like 0,1 or 'all'") from None
        if not picked or len(set(picked)) != len(picked):
            raise UserError(f"--gpus {spec!r}: give each GPU index once, like 0,1, or 'all'")
    bad = [i for i in picked if not 0 <= i < count]
    if bad or not picked:
        raise UserError(f"--gpus {spec}: this process sees {count} GPU(s) (indices 0..{count - 1}): pick among them")
    return [seen[i] if seen is not None else str(i) for i in picked]


def make_executor(device: str, *, inline: bool = False, gpus: str | None = None, workers: int = 1,
                  executor: str = "local", address: str | None = None):
    """The executor a sweep runs on: inline (debugging), one worker per GPU / CPU slot, or
    one Ray actor per GPU of a cluster (``executor="ray"``)."""
    if executor not in ("local", "ray"):
        raise UserError(f"--executor {executor!r}: use local or ray")
    if address is not None and executor != "ray":
        raise UserError("--address names a Ray cluster: add --executor ray (or drop --address)")
    if executor == "ray":
        if inline or gpus is not None:
            raise UserError("--executor ray runs one actor per GPU of the cluster: drop --inline/--gpus")
        if device == "cuda" and workers != 1:
            raise UserError("--workers is for CPU sweeps: on a Ray cluster every GPU gets one actor")
        if workers < 1:
            raise UserError(f"--workers {workers}: give at least 1")
        from harness.sweep.ray_executor import RayExecutor

        return RayExecutor(device, address=address, workers=workers)
    if inline:
        if gpus is not None or workers != 1:
            raise UserError("--inline runs in this process, on one device: drop --gpus/--workers "
                            "(pick the GPU with CUDA_VISIBLE_DEVICES)")
        from harness.sweep.inline import InlineExecutor

        return InlineExecutor(device)
    from harness.sweep.workers import LocalPool

    if device == "cuda":
        if workers != 1:
            raise UserError("--workers is for CPU sweeps: on GPUs use --gpus (one worker per GPU)")
        return LocalPool(device, gpu_slots(gpus))
    if gpus is not None:
        raise UserError(f"--gpus {gpus} but this sweep runs on the CPU: drop --gpus (or run on a GPU machine)")
    if workers < 1:
        raise UserError(f"--workers {workers}: give at least 1")
    return LocalPool(device, [None] * workers)


@dataclass
class _Run:
    """How far a sweep got: what its summary is made of, however it stopped."""

    envs: list = field(default_factory=list)
    tasks: list | None = None  # None until the open pairs are planned
    first_pass: list = field(default_factory=list)  # tasks whose rows the first pass wrote
    finished: bool = False
    remeasured: int = 0
    profiled: int = 0
    ceilings: dict | None = None
    reductio: str | None = None  # the note of the bar's check against this device's ceilings
    key: tuple = ()
    resumed: int = 0  # pairs already done at this commit on this device
    again: list = field(default_factory=list)  # --remeasure: the pairs here the verdict could not use
    baseline_failed: dict | None = None  # run.baseline_gate_failure of the config that stopped it


def sweep(line: Line, device: str, *, executor=None, with_ceilings: bool = True, commit: bool = True,
          retry_crashed: bool = False, remeasure: bool = False, wait: bool = True, progress=None, on_wait=None,
          on_interrupt=None) -> SweepSummary:
    """Run every open (config, candidate) pair of the line and append one outcome row each.

    Every refusal comes before the first write: kernels are checked, the executor's slots
    start and report their devices (one GPU model per sweep), each device is locked, then
    the device's ceilings are looked up (measured by a worker, stored only if this device
    has none yet) and the bar is checked against them (governance/reductio.py). Only this
    process appends; configs run wherever ``executor`` puts them (default: one worker
    process). With ``commit``, each config's rows are committed (``ledger.anchor``) as soon as
    they are written. ``remeasure`` also runs the pairs measured here that the verdict cannot
    use (``plan.unusable_at``); their new rows supersede the old.

    However it stops, it returns its summary: a Ctrl-C or SIGTERM (``Interrupts``; the
    summary names the signal) and a config whose baseline fails the correctness gate (no
    new config starts after it; ``baseline_failed`` says why) included.
    """
    check_kernels_usable(line, device)
    if line.reg.verify:
        from harness.sweep.profile import require_profiler

        require_profiler(device)  # [verify] needs counters: no ncu, no sweep (nothing written yet)
    if commit:
        require_anchorable(line.ledger)
        if with_ceilings:
            from harness.sweep.ceilings import require_committable

            require_committable(line.root)
    anchored: list[str | None] = []
    why_commit = f"sweep of {line.reg.line} at {line.commit[:12]}"
    executor = executor or make_executor(device)
    run, written = _Run(), _Written()
    with interrupts(on_interrupt) as guard:
        try:
            _sweep(line, device, executor, guard, run, written, anchored, why_commit, with_ceilings=with_ceilings,
                   commit=commit, retry_crashed=retry_crashed, remeasure=remeasure, wait=wait, progress=progress,
                   on_wait=on_wait)
        except StopNow:
            pass  # a second Ctrl-C or SIGTERM: workers killed, locks released on the way out; rows written stay
        guard.wrap_up()  # from here signals are only counted: what is left is short and writes nothing partial
        if commit:  # rows an interrupted earlier run wrote but did not commit, even when nothing ran now
            anchored.append(anchor(line.ledger, why_commit))
        return _summary(line, device, executor, run, written, anchored, guard, commit, remeasure)


def _sweep(line: Line, device: str, executor, guard: Interrupts, run: _Run, written: _Written, anchored: list,
           why_commit: str, *, with_ceilings: bool, commit: bool, retry_crashed: bool, remeasure: bool, wait: bool,
           progress, on_wait) -> None:
    """The sweep itself, filling ``run`` as it goes (``sweep`` summarizes whatever it reached)."""
    from harness.sweep.devicelock import device_key, device_lock
    from harness.sweep.executor import schedule
    from harness.sweep.run import baseline_gate_failure

    with contextlib.ExitStack() as stack:
        stack.callback(executor.close)
        executor.prepare(line)
        slots = executor.start()
        run.envs = envs = [s.env for s in slots]
        if not line.reg.mixed_devices:
            _one_model(envs)
        who = {"line": line.reg.line, "root": str(line.root)}
        for key in sorted({device_key(e) for e in envs} if not executor.locks_devices else ()):
            stack.enter_context(device_lock(key, who=who, wait=wait, on_wait=on_wait))
        # Ceilings are a GPU model's: a sweep over several models (mixed_devices) attaches none,
        # so no row carries a fraction of another device's peak.
        one_model = len({(e.get("device"), e.get("gpu")) for e in envs}) == 1
        ceilings = None
        if with_ceilings and one_model:
            # Committed before any row naming it is: a result's ceilings are part of its record,
            # and the tree is clean even when the sweep stops before its first config.
            ceilings, done = _ceilings(line, executor, slots[0], guard,
                                       f"ceilings for the {why_commit}" if commit else None)
            anchored.append(done)
        run.ceilings = ceilings
        if ceilings is not None:
            # The bar against this device's ceilings, before any config runs (a refusal writes
            # nothing of the line; the ceilings just measured stay, committed, for the next try).
            from harness.governance.reductio import before_sweep

            run.reductio = before_sweep(line.root, line.reg, ceilings)
        elif with_ceilings:
            run.reductio = "reductio not run: the GPUs are of several models, and no one model's ceilings hold for all"
        ctx = context(line, device, ceilings)
        run.key = key = measured_on(line.stamp(envs[0]).fields(), line.reg.mixed_devices)
        run.again = unusable_at(line.reg, line.rows, key) if remeasure else []
        tasks, run.resumed = plan(line.reg, line.rows, key, retry_crashed=retry_crashed, remeasure=remeasure)
        run.tasks = tasks
        if progress:
            progress.start(len(tasks))
            stack.callback(progress.stop)

        def on_config(why, done=None):
            def append(task, rows):
                start = len(written.appended)
                with guard.shielded():
                    append_config(line, task, rows, key, written, why)
                    if commit:
                        anchored.append(anchor(line.ledger, why_commit))
                if done is not None:
                    done.append(task)
                if progress:
                    progress.done(task.config.key(), written.appended[start:])
                bad = baseline_gate_failure(o for o, _ in rows)
                if bad is not None and run.baseline_failed is None:
                    run.baseline_failed = bad
                    guard.halt()  # the configs in flight finish and are written; no new one starts
            return append

        on_start = (lambda t: progress.advance_to(t.config.key())) if progress else None
        guard.patient = True  # configs run from here: a first Ctrl-C lets those in flight finish
        first_why = "re-measured (bench sweep --remeasure)" if run.again else "re-measured"
        run.finished = finished = schedule(executor, envs, tasks, ctx, on_config=on_config(first_why, run.first_pass),
                                           stopping=guard.stopping, on_start=on_start)
        # Rig-noisy pairs are measured again later in the sweep (the rig may have quietened),
        # up to NOISY_REMEASURES times; the fresh rows supersede the noisy ones. A line that
        # counts noisy results (include_noisy) has them decided already.
        for attempt in range(0 if line.reg.include_noisy or not finished else NOISY_REMEASURES):
            by_cfg: dict[str, Task] = {}
            for task in tasks:
                noisy = tuple(c for c in task.candidates
                              if getattr(written.latest.get((task.config.key(), c)), "kind", None) == RESULT
                              and written.latest[(task.config.key(), c)].payload["rig_noisy"])
                if noisy:
                    by_cfg[task.config.key()] = Task(task.config, noisy)
            if not by_cfg:
                break
            run.remeasured += len(by_cfg)
            why = f"rig-noisy, measured again ({attempt + 1} of {NOISY_REMEASURES})"
            run.finished = finished = schedule(executor, envs, list(by_cfg.values()), ctx, on_config=on_config(why),
                                               stopping=guard.stopping, on_start=on_start)
            if not finished:
                break
        if line.reg.verify and finished:
            # The [verify] pass, after timing and still under the device lock: counters of
            # every candidate result here that has none yet (a resumed sweep profiles what an
            # interrupted one did not reach). ncu runs in a child process; rows are written
            # by append_profile and committed one by one.
            from harness.sweep.profile import verify_pass

            for p in verify_pass(line, device, key, line.ledger.rows()):
                with guard.shielded():
                    append_profile(line, p, envs[0], written)
                    if commit:
                        anchored.append(anchor(line.ledger, why_commit))
                run.profiled += 1
                if guard.stopping():  # a Ctrl-C: a resumed sweep profiles the rest
                    run.finished = False
                    break


def _summary(line: Line, device: str, executor, run: _Run, written: _Written, anchored: list, guard: Interrupts,
             commit: bool, remeasure: bool) -> SweepSummary:
    counts: dict[str, int] = {}
    rejections: dict[str, int] = {}
    controls: list[tuple[float, bool]] = []
    tolerance = None
    for o in written.latest.values():
        counts[o.kind] = counts.get(o.kind, 0) + 1
        if o.kind == INCORRECT:
            rejections[o.payload["tag"]] = rejections.get(o.payload["tag"], 0) + 1
        if o.kind == RESULT:
            controls.append((o.payload["metrics"]["control"], o.payload["rig_noisy"]))
            tolerance = o.payload["policy"]["control_tolerance"]
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
        from harness.sweep.ceilings import CEILINGS_LEDGER, is_committed

        if not is_committed(line.root, run.ceilings):
            rel = f"ledger/{CEILINGS_LEDGER}.jsonl"
            notes.append(f"the ceilings row these rows name ({rel} row {run.ceilings['seq']}) is not committed "
                         f"(--no-commit): commit it with them (git commit -m 'bench: ledger rows' -- {rel} "
                         f"{line.ledger.rel})")
    if run.again:
        notes.append(f"--remeasure: {_pairs_by_state(run.again)} the verdict could not use, measured again at "
                     f"this commit (their new rows supersede the old)")
    elif remeasure:
        notes.append("--remeasure: no pair measured here is one the verdict cannot use")
    if run.remeasured:
        notes.append(f"{run.remeasured} rig-noisy config(s) measured again later in the sweep (up to "
                     f"{NOISY_REMEASURES} times each)")
    left_unusable = unusable_at(line.reg, line.ledger.rows(), run.key) if run.finished else []
    if left_unusable:
        notes.append(f"{_pairs_by_state(left_unusable)} here the verdict cannot use: run `bench sweep "
                     f"{line.reg.line} --remeasure` to measure {'it' if len(left_unusable) == 1 else 'them'} "
                     f"again at this commit")
    if device == "cpu":
        notes.append("ran on the CPU: clocks not monitored, timings are host perf_counter_ns")
    left = None if run.tasks is None else len(run.tasks) - len(run.first_pass)
    return SweepSummary(line.reg.line, line.commit, counts, rejections, run.resumed, control, tuple(notes),
                        interrupted=guard.signal is not None, left=left,
                        anchored=tuple(a for a in anchored if a), committed=commit, measured_on=run.key,
                        signal=guard.signal, at_once=guard.stopped_at_once, baseline_failed=run.baseline_failed)


def _pairs_by_state(rows: list[dict]) -> str:
    """'3 pairs (rig-noisy: 2, skipped: 1)'."""
    states: dict[str, int] = {}
    for r in rows:
        states[state_of(r)] = states.get(state_of(r), 0) + 1
    return f"{plural(len(rows), 'pair')} ({', '.join(f'{k}: {n}' for k, n in sorted(states.items()))})"


def append_config(line: Line, task: Task, rows, key: tuple, written: _Written, why: str) -> None:
    """Append one config's rows (and the `supersedes` row its re-run needs): the one place rows are written."""
    old = replaced_by(task, [*line.rows, *written.appended], key, line.reg.mixed_devices)
    if old:
        stamp = line.stamp(rows[0][1]).fields()
        written.appended.append(line.ledger.append(SUPERSEDES, {
            **stamp, "config_key": task.config.key(), "supersedes": old,
            "reason": f"{why} at commit {line.commit[:12]} on {key[1]}{' ' + key[2] if key[2] else ''}"}))
    for o, env in rows:
        written.appended.append(line.ledger.append(o.kind, {**line.stamp(env).fields(), **o.payload}))
        written.latest[(o.payload["config_key"], o.payload["candidate"])] = o


def append_profile(line: Line, payload: dict, env: dict, written: _Written) -> None:
    """Append one `profile` row (a harness/sweep/profile.py payload) measured on ``env``'s device."""
    written.appended.append(line.ledger.append(PROFILE, {**line.stamp(env).fields(), **payload}))


def _where(envs: list[dict], executor) -> str:
    """Where the configs ran, for the summary."""
    how = "inline, in this process (no isolation, no watchdog)" if not executor.can_kill else \
        f"{len(envs)} {executor.labels[len(envs) > 1]}"
    hosts = sorted({e.get("host") or "?" for e in envs})
    gpus = [f"GPU {e.get('gpu_index')} ({e.get('gpu')})" for e in envs if e.get("gpu")]
    return f"ran {how} on {', '.join(hosts)}" + (f": {', '.join(gpus)}" if gpus else "")


def _one_model(envs: list[dict]) -> None:
    """Resume and verdicts key rows by (commit, device, GPU model): one model per sweep."""
    models = {(e.get("device"), e.get("gpu")) for e in envs}
    if len(models) > 1:
        names = ", ".join(f"GPU {e.get('gpu_index')} {e.get('gpu')}" for e in envs)
        raise UserError(f"the GPUs picked are of different models ({names}): sweep one model at a time "
                        f"with --gpus, or register the line with [bar] mixed_devices = true")


def _ceilings(line: Line, executor, slot, guard: Interrupts, why: str | None) -> tuple[dict, str | None]:
    """This device's stored ceilings, or ones measured now by the first slot's worker; with
    ``why``, committed (the row and its commit are written together, never half)."""
    from harness.governance.ledger import Ledger
    from harness.sweep.ceilings import CEILINGS_LEDGER, append_ceilings, commit_ceilings, stored_ceilings
    from harness.sweep.executor import Job, call

    row = stored_ceilings(line.root, slot.fingerprint)
    measured = None
    if row is None:
        Ledger(line.root, CEILINGS_LEDGER).require_writable()  # refuse before the worker measures, not after
        measured = call(executor, 0, Job(-1, "ceilings"), timeout_s=line.reg.timing.watchdog_s)
    with guard.shielded():
        if measured is not None:
            row = append_ceilings(line.root, slot.fingerprint, slot.env, measured)
        return row, commit_ceilings(line.root, why) if why else None


class StopNow(KeyboardInterrupt):
    """Raised by the guard to stop a sweep at once (a KeyboardInterrupt, so every ``finally``
    on the way out runs: workers killed, locks released); ``sweep`` catches it and still
    returns its summary."""


class Interrupts:
    """A sweep's signal policy. Until its first config starts, a Ctrl-C or SIGTERM stops at
    once. From then on the first Ctrl-C starts no new config (the ones in flight finish and
    are written); a second, or a SIGTERM, stops at once — but never in the middle of writing
    and committing a config's rows (``shielded``): it waits for that to end. Once stopping at
    once, or wrapping up, further signals are only counted. ``halt`` stops as a first Ctrl-C
    does, for the sweep's own reason (a baseline failing the gate)."""

    def __init__(self, on_interrupt=None):
        self.on_interrupt = on_interrupt
        self.count = 0  # Ctrl-Cs received
        self.terminated = False  # a SIGTERM received
        self.halted = False
        self.patient = False  # configs are running: a first Ctrl-C lets those in flight finish
        self.stopped_at_once = False
        self._shield = 0
        self._deferred = False
        self._quiet = False

    def stopping(self) -> bool:
        return self.count > 0 or self.terminated or self.halted

    @property
    def signal(self) -> int | None:
        """The signal that stopped the sweep: SIGTERM if one came, else SIGINT if a Ctrl-C did."""
        import signal

        return signal.SIGTERM if self.terminated else signal.SIGINT if self.count else None

    def halt(self) -> None:
        self.halted = True

    def handle(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1 and self.patient and not self._quiet:
            if self.on_interrupt:
                self.on_interrupt()
            return
        self._stop_now()

    def terminate(self, signum, frame) -> None:
        self.terminated = True
        self._stop_now()

    def wrap_up(self) -> None:
        """From here on signals are counted (the summary names them), never raised."""
        self._quiet = True

    def _stop_now(self) -> None:
        if self._quiet:
            return
        if self._shield:
            self._deferred = True
            return
        self._quiet = self.stopped_at_once = True
        raise StopNow()

    @contextlib.contextmanager
    def shielded(self):
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if not self._shield and self._deferred:
            self._deferred = False
            self._stop_now()


@contextlib.contextmanager
def interrupts(on_interrupt):
    """The guard, installed for SIGINT and — where the caller handles SIGTERM in Python, as
    the CLI does — for SIGTERM; a signal the caller ignores, and SIGTERM's default action
    (the process dies), are left as they are. Off the main thread no handler can be set."""
    import signal
    import threading

    guard = Interrupts(on_interrupt)
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {}
    for sig, handler, takes in ((signal.SIGINT, guard.handle, lambda h: h is not signal.SIG_IGN),
                                (signal.SIGTERM, guard.terminate, callable)):
        if takes(signal.getsignal(sig)):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield guard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
