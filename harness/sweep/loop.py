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
    # Stopped by a Ctrl-C before every config ran: how many configs were left.
    interrupted: bool = False
    left: int = 0
    anchored: tuple[str, ...] = ()  # commits holding this sweep's rows, one per config
    committed: bool = True  # False under --no-commit: the rows are not committed
    measured_on: tuple = ()  # the (commit, device, GPU) key its rows were measured on

    def as_dict(self) -> dict:
        return {"line": self.line, "commit": self.commit, "counts": self.counts, "rejections": self.rejections,
                "resumed": self.resumed, "control": self.control, "notes": list(self.notes),
                "interrupted": self.interrupted, "left": self.left, "anchored": list(self.anchored),
                "committed": self.committed}


def context(line: Line, device: str, ceilings: dict | None) -> SweepContext:
    return SweepContext(reg=line.reg, device=device, ceilings=ceilings, root=str(line.root))


def check_kernels_usable(line: Line, device: str) -> None:
    """Fail closed before anything runs: every kernel of the line runs here, from tracked code.

    A sweep without its baseline, or with a candidate quietly dropped, is never started; code
    in this repository that git does not have at HEAD (an ignored kernels/ file, say) would
    produce numbers no commit can reproduce, so it is refused by name before any import of it.
    """
    from harness.governance.line import require_tracked_code
    from kernels import get_kernel

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


def sweep(line: Line, device: str, *, executor=None, with_ceilings: bool = True, commit: bool = True,
          retry_crashed: bool = False, remeasure: bool = False, wait: bool = True, progress=None, on_wait=None,
          on_interrupt=None) -> SweepSummary:
    """Run every open (config, candidate) pair of the line and append one outcome row each.

    Every refusal comes before the first write: kernels are checked, the executor's slots
    start and report their devices (one GPU model per sweep), each device is locked, then
    the device's ceilings are looked up (measured by a worker, stored only if this device
    has none yet). Only this process appends; configs run wherever ``executor`` puts them
    (default: one worker process). With ``commit``, each config's rows are committed
    (``ledger.anchor``) as soon as they are written. ``remeasure`` also runs the pairs measured
    here that the verdict cannot use (``plan.unusable_at``); their new rows supersede the old.
    """
    from harness.sweep.devicelock import device_key, device_lock
    from harness.sweep.executor import schedule

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
    with contextlib.ExitStack() as stack:
        stack.callback(executor.close)
        executor.prepare(line)
        slots = executor.start()
        envs = [s.env for s in slots]
        if not line.reg.mixed_devices:
            _one_model(envs)
        who = {"line": line.reg.line, "root": str(line.root)}
        for key in sorted({device_key(e) for e in envs} if not executor.locks_devices else ()):
            stack.enter_context(device_lock(key, who=who, wait=wait, on_wait=on_wait))
        # Ceilings are a GPU model's: a sweep over several models (mixed_devices) attaches none,
        # so no row carries a fraction of another device's peak.
        one_model = len({(e.get("device"), e.get("gpu")) for e in envs}) == 1
        ceilings = _ceilings(line, executor, slots[0]) if with_ceilings and one_model else None
        if ceilings is not None and commit:
            # Committed before any row naming it is: a result's ceilings are part of its record,
            # and the tree is clean even when the sweep stops before its first config.
            from harness.sweep.ceilings import commit_ceilings

            anchored.append(commit_ceilings(line.root, f"ceilings for the {why_commit}"))
        ctx = context(line, device, ceilings)
        key = measured_on(line.stamp(envs[0]).fields(), line.reg.mixed_devices)
        again = unusable_at(line.reg, line.rows, key) if remeasure else []
        tasks, resumed = plan(line.reg, line.rows, key, retry_crashed=retry_crashed, remeasure=remeasure)
        written = _Written()
        guard = stack.enter_context(_interrupts(on_interrupt))
        if progress:
            progress.start(len(tasks))
            stack.callback(progress.stop)
        first_pass: list = []

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
            return append

        on_start = (lambda t: progress.advance_to(t.config.key())) if progress else None
        first_why = "re-measured (bench sweep --remeasure)" if again else "re-measured"
        finished = schedule(executor, envs, tasks, ctx, on_config=on_config(first_why, first_pass),
                            stopping=guard.stopping, on_start=on_start)
        # Rig-noisy pairs are measured again later in the sweep (the rig may have quietened),
        # up to NOISY_REMEASURES times; the fresh rows supersede the noisy ones. A line that
        # counts noisy results (include_noisy) has them decided already.
        remeasured = 0
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
            remeasured += len(by_cfg)
            why = f"rig-noisy, measured again ({attempt + 1} of {NOISY_REMEASURES})"
            finished = schedule(executor, envs, list(by_cfg.values()), ctx, on_config=on_config(why),
                                stopping=guard.stopping, on_start=on_start)
            if not finished:
                break
        profiled = 0
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
                profiled += 1
                if guard.stopping():  # a Ctrl-C: a resumed sweep profiles the rest
                    finished = False
                    break
    if commit:  # rows an interrupted earlier run wrote but did not commit, even when nothing ran now
        anchored.append(anchor(line.ledger, why_commit))
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
    if profiled:
        counts["profile"] = profiled
    control = None
    if controls:
        vals = [c for c, _ in controls]
        control = {"n": len(vals), "median": statistics.median(vals), "min": min(vals), "max": max(vals),
                   "noisy": sum(n for _, n in controls), "tolerance": tolerance}
    notes = [_where(envs, executor)]
    if ceilings is not None and not commit:
        from harness.sweep.ceilings import CEILINGS_LEDGER, is_committed

        if not is_committed(line.root, ceilings):
            rel = f"ledger/{CEILINGS_LEDGER}.jsonl"
            notes.append(f"the ceilings row these rows name ({rel} row {ceilings['seq']}) is not committed "
                         f"(--no-commit): commit it with them (git commit -m 'bench: ledger rows' -- {rel} "
                         f"{line.ledger.rel})")
    if again:
        notes.append(f"--remeasure: {_pairs_by_state(again)} the verdict could not use, measured again at this "
                     f"commit (their new rows supersede the old)")
    elif remeasure:
        notes.append("--remeasure: no pair measured here is one the verdict cannot use")
    if remeasured:
        notes.append(f"{remeasured} rig-noisy config(s) measured again later in the sweep (up to "
                     f"{NOISY_REMEASURES} times each)")
    left_unusable = unusable_at(line.reg, line.ledger.rows(), key) if finished else []
    if left_unusable:
        notes.append(f"{_pairs_by_state(left_unusable)} here the verdict cannot use: run `bench sweep "
                     f"{line.reg.line} --remeasure` to measure {'it' if len(left_unusable) == 1 else 'them'} "
                     f"again at this commit")
    if device == "cpu":
        notes.append("ran on the CPU: clocks not monitored, timings are host perf_counter_ns")
    return SweepSummary(line.reg.line, line.commit, counts, rejections, resumed, control, tuple(notes),
                        interrupted=not finished, left=len(tasks) - len(first_pass),
                        anchored=tuple(a for a in anchored if a), committed=commit, measured_on=key)


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


def _ceilings(line: Line, executor, slot) -> dict:
    """This device's stored ceilings, or ones measured now by the first slot's worker."""
    from harness.governance.ledger import Ledger
    from harness.sweep.ceilings import CEILINGS_LEDGER, append_ceilings, stored_ceilings
    from harness.sweep.executor import Job, call

    row = stored_ceilings(line.root, slot.fingerprint)
    if row is None:
        Ledger(line.root, CEILINGS_LEDGER).require_writable()  # refuse before the worker measures, not after
        measured = call(executor, 0, Job(-1, "ceilings"), timeout_s=line.reg.timing.watchdog_s)
        row = append_ceilings(line.root, slot.fingerprint, slot.env, measured)
    return row


class _Interrupts:
    """Ctrl-C policy: the first stops new configs (the ones in flight finish and are
    written); a second stops at once, but never in the middle of writing a config's rows.
    SIGTERM stops at once, through its own handler, also never in that middle."""

    def __init__(self, on_interrupt, on_terminate=None):
        self.on_interrupt = on_interrupt
        self.on_terminate = on_terminate  # the SIGTERM handler this one defers
        self.count = 0
        self._shield = 0
        self._deferred = False
        self._deferred_term: tuple | None = None

    def stopping(self) -> bool:
        return self.count > 0

    def handle(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1:
            if self.on_interrupt:
                self.on_interrupt()
            return
        if self._shield:
            self._deferred = True
            return
        raise KeyboardInterrupt

    def terminate(self, signum, frame) -> None:
        if self._shield:
            self._deferred_term = (signum, frame)
            return
        self.on_terminate(signum, frame)

    @contextlib.contextmanager
    def shielded(self):
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if self._shield:
            return
        if self._deferred_term is not None:
            self.on_terminate(*self._deferred_term)
        if self._deferred:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupts(on_interrupt):
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield _Interrupts(on_interrupt)
        return
    # A SIGTERM handler that raises (the CLI's) waits for the config being written; the
    # default action and an ignored SIGTERM are left as they are.
    term = signal.getsignal(signal.SIGTERM)
    guard = _Interrupts(on_interrupt, term if callable(term) else None)
    previous = signal.signal(signal.SIGINT, guard.handle)
    if guard.on_terminate is not None:
        signal.signal(signal.SIGTERM, guard.terminate)
    try:
        yield guard
    finally:
        signal.signal(signal.SIGINT, previous)
        if guard.on_terminate is not None:
            signal.signal(signal.SIGTERM, term)
