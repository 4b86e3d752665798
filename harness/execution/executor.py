"""Where configs run: the Executor seam, and the scheduler every executor shares.

An ``Executor`` owns a set of slots (one per GPU, or per CPU worker) and runs one ``Job``
per slot at a time: ``InlineExecutor`` (inline.py) in the driver process, for debugging;
``LocalPool`` (workers.py) in one spawned worker process per slot, the default;
``RayExecutor`` (ray_executor.py) in one Ray actor per GPU of a cluster. Each implements the
same five methods. Executors never touch the ledger.

``schedule`` is the policy, the same for every executor: hand configs to idle slots, keep a
per-(config, kernel) watchdog on the phase each slot reports, and when a worker dies, hangs
or poisons its device, blame the kernel that was running (one `crashed` row), start a fresh
worker and run the rest of that config without it. A config's rows reach the driver's
``on_config`` all at once, when every part of it is done: nothing partial is written.
"""

from __future__ import annotations

import collections
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

from harness.pipeline import phase as phases
from harness.pipeline.context import Outcome, SweepContext, Task
from harness.pipeline.rows import fault_outcome

# How long a fresh worker may take to import torch, open its device and say it is ready.
STARTUP_TIMEOUT_S = 300.0
# Longest wait in one poll, so deadlines and a Ctrl-C are noticed promptly.
POLL_S = 0.5


@dataclass(frozen=True)
class Job:
    """One unit of work for a slot: a config's pairs, the device's ceilings, or one kernel's
    gate at one config (``task.candidates[0]``; `bench profile` gates in a worker too)."""

    id: int
    kind: str  # "config" | "ceilings" | "gate"
    task: Task | None = None
    ctx: SweepContext | None = None


@dataclass(frozen=True)
class SlotInfo:
    """What a started slot reports: its env stamp (host; GPU index, UUID, name) and the
    device fingerprint its ceilings are stored under."""

    env: dict
    fingerprint: dict


@dataclass(frozen=True)
class Phase:
    """The slot's job entered ``phase`` of ``kernels`` (harness.pipeline.phase)."""

    slot: int
    job: int
    kernels: tuple[str, ...]
    phase: str


@dataclass(frozen=True)
class Done:
    """The slot finished ``job``: config outcomes, or a ceilings payload."""

    slot: int
    job: int
    result: object


@dataclass(frozen=True)
class Lost:
    """The slot's worker is gone (died, raised fatally, was killed): ``cause`` says why."""

    slot: int
    job: int | None
    cause: str
    output: str = ""


class Executor(ABC):
    """Slots that run jobs. ``can_kill``: a hung job can be stopped (not so in-process).
    ``locks_devices``: each slot locks its own device where it runs (on another host the
    driver's lock could not exclude anything), so the driver does not."""

    can_kill: bool = True
    locks_devices: bool = False
    labels: tuple[str, str] = ("worker process", "worker processes")  # one slot, several, for the summary

    def prepare(self, line) -> None:
        """Learn the line before ``start`` (its kernels, for a worker that checks its sources)."""

    def launch(self) -> None:
        """Begin starting the slots and return at once (``start`` then waits for them), so a
        slot's own start-up overlaps the driver's checks before the sweep; after ``prepare``.
        Where slots start in no time (in-process) or remotely, nothing."""

    @abstractmethod
    def start(self) -> list[SlotInfo]:
        """Start every slot (those ``launch`` began: wait for them); return what each one runs on."""

    @abstractmethod
    def submit(self, slot: int, job: Job) -> None:
        """Hand ``job`` to an idle slot (returns at once)."""

    @abstractmethod
    def poll(self, timeout: float) -> list:
        """Events (Phase, Done, Lost) that arrived within ``timeout`` seconds."""

    @abstractmethod
    def replace(self, slot: int, cause: str | None = None) -> tuple[Lost | None, SlotInfo]:
        """Kill the slot's worker (if ``cause``: a Lost carrying it and the worker's last
        output is returned) and start a fresh one; returns (lost, the new worker's SlotInfo)."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker; nothing may outlive this."""


@dataclass
class _Running:
    key: str
    task: Task
    job: int
    kernels: tuple[str, ...] = ()
    phase: str | None = None
    since: float = 0.0


@dataclass
class _ConfigState:
    task: Task  # as planned
    begun: bool = False
    pending: int = 0
    rows: list = field(default_factory=list)  # (Outcome, slot env)


@dataclass(frozen=True)
class ScheduleHooks:
    """What the scheduler tells its caller: ``on_config(task, [(outcome, env)])`` receives every
    config's rows once it is complete; ``on_start(task)`` hears a config begin and
    ``on_phase(config_key, phase)`` each phase a slot reports (the sweep's progress); after
    ``stopping()`` turns true, no new config starts and the ones in flight finish."""

    on_config: Callable[[Task, list[tuple[Outcome, dict]]], None]
    on_start: Callable[[Task], None] | None = None
    on_phase: Callable[[str, str], None] | None = None
    stopping: Callable[[], bool] = lambda: False


def schedule(executor: Executor, envs: list[dict], tasks: list[Task], ctx: SweepContext, hooks: ScheduleHooks, *,
             clock: Callable[[], float] = time.monotonic) -> bool:
    """Run ``tasks`` on the executor's slots (``hooks``: what the caller hears); returns False
    if stopped before all were done."""
    return _Schedule(executor, list(envs), tasks, ctx, hooks, clock).run()


class _Schedule:
    """One ``schedule`` call's state: the queue of config parts, the configs begun, the job on
    each slot."""

    def __init__(self, executor: Executor, envs: list[dict], tasks: list[Task], ctx: SweepContext,
                 hooks: ScheduleHooks, clock: Callable[[], float]):
        self.executor, self.envs, self.ctx, self.hooks, self.clock = executor, envs, ctx, hooks, clock
        self.queue = collections.deque((t.config.key(), t) for t in tasks)
        self.configs = {t.config.key(): _ConfigState(t) for t in tasks}
        self.running: dict[int, _Running] = {}
        self.next_job = 0
        self.retried: set[str] = set()  # configs whose job was lost once before it began (see _fault)

    def run(self) -> bool:
        policy = self.ctx.reg.timing
        while True:
            self._fill_slots()
            if not self.running:
                return not self.queue
            events = self.executor.poll(_next_wait(self.running, policy, self.clock, self.executor.can_kill))
            # Deadlines are judged as of this poll: a replace below can take a worker's start-up
            # time, during which the other slots' phase reports wait undrained in their pipes.
            polled = self.clock()
            for ev in events:
                self._event(ev)
            if self.executor.can_kill:
                self._watchdog(polled, policy)

    def finish_part(self, key, rows) -> None:
        st = self.configs[key]
        st.rows.extend(rows)
        st.pending -= 1
        if st.pending == 0 and not any(k == key for k, _ in self.queue):
            self.hooks.on_config(st.task, st.rows)
            del self.configs[key]

    def _next_part(self) -> int | None:
        for i, (key, _) in enumerate(self.queue):
            # Once stopping, only the remaining parts of configs already begun still run.
            if not self.hooks.stopping() or self.configs[key].begun:
                return i
        return None

    def _fill_slots(self) -> None:
        for slot in range(len(self.envs)):
            if slot in self.running:
                continue
            pick = self._next_part()
            if pick is None:
                return
            key, task = self.queue[pick]
            del self.queue[pick]
            st = self.configs[key]
            st.pending += 1
            if not st.begun:
                st.begun = True
                if self.hooks.on_start:
                    self.hooks.on_start(st.task)
            self.running[slot] = _Running(key, task, self.next_job, since=self.clock())
            self.executor.submit(slot, Job(self.next_job, "config", task, self.ctx))
            self.next_job += 1

    def _event(self, ev) -> None:
        run = self.running.get(ev.slot)
        if isinstance(ev, Lost) and (run is None or ev.job != run.job):
            self.envs[ev.slot] = self.executor.replace(ev.slot)[1].env  # an idle worker died: start another
            return
        if run is None or ev.job != run.job:
            return
        if isinstance(ev, Phase):
            run.kernels, run.phase, run.since = ev.kernels, ev.phase, self.clock()
            if self.hooks.on_phase:
                self.hooks.on_phase(run.key, ev.phase)
        elif isinstance(ev, Done):
            del self.running[ev.slot]
            self.finish_part(run.key, [(o, self.envs[ev.slot]) for o in ev.result])
        elif isinstance(ev, Lost):
            del self.running[ev.slot]
            _fault(run, ev, self.ctx, self.envs[ev.slot], self.queue, self.finish_part, self.retried)
            self.envs[ev.slot] = self.executor.replace(ev.slot)[1].env

    def _watchdog(self, polled: float, policy) -> None:
        for slot, run in list(self.running.items()):
            limit = phase_limit(run.phase, policy)
            if polled - run.since > limit:
                del self.running[slot]
                what = f"{run.phase} of {', '.join(run.kernels)}" if run.kernels else (run.phase or "start")
                lost, info = self.executor.replace(slot, f"watchdog after {limit:g} s in {what}")
                _fault(run, lost, self.ctx, self.envs[slot], self.queue, self.finish_part, self.retried)
                self.envs[slot] = info.env


def phase_limit(phase: str | None, policy) -> float:
    """The watchdog's deadline for a phase: timing stops itself at timeout_s; watchdog_s on top."""
    return policy.watchdog_s + (policy.timeout_s if phase == phases.TIMING else 0.0)


def _next_wait(running, policy, clock, can_kill) -> float:
    if not can_kill:
        return POLL_S
    now = clock()
    left = min(phase_limit(r.phase, policy) - (now - r.since) for r in running.values())
    return max(0.0, min(POLL_S, left))


def _fault(run: _Running, lost: Lost, ctx: SweepContext, env: dict, queue, finish_part, retried: set) -> None:
    """Blame the pair that was running when the worker was lost; queue the rest of its config.

    A job lost before it reported any phase was lost by a worker that had not begun it (one
    that died idle, which a Ray actor does unnoticed until it is sent work): it runs again
    once, blaming no one; lost so again, it is blamed as follows. A phase naming one
    candidate blames it. The baseline failing takes every candidate of
    the config with it (there is nothing to compare against). A phase naming several
    kernels (timing) or none (setup, check) cannot tell: the config's candidates are re-run
    one per job, so a second loss names its kernel.
    """
    if run.phase is None and run.key not in retried:
        retried.add(run.key)
        queue.appendleft((run.key, run.task))
        finish_part(run.key, [])
        return
    cfg, cands = run.task.config, run.task.candidates
    where = f"{run.phase or 'start'} of {', '.join(run.kernels)}" if run.kernels else (run.phase or "start")
    fault = {"phase": run.phase, "kernels": list(run.kernels), "cause": lost.cause, "output": lost.output}
    single = [k for k in run.kernels if k in cands] if len(run.kernels) == 1 else []
    if single:
        blamed = single[0]
        rest = tuple(c for c in cands if c != blamed)
        rows = [(fault_outcome(cfg, blamed, ctx, f"worker lost in {where}: {lost.cause}", fault), env)]
        if rest:
            queue.appendleft((run.key, Task(cfg, rest)))
        finish_part(run.key, rows)
    elif run.kernels == (ctx.reg.baseline,):
        finish_part(run.key, [(fault_outcome(cfg, c, ctx, f"baseline {ctx.reg.baseline} took its worker down in "
                                                          f"{where}: {lost.cause}", fault), env) for c in cands])
    elif len(cands) > 1:
        for c in reversed(cands):
            queue.appendleft((run.key, Task(cfg, (c,))))
        finish_part(run.key, [])
    else:
        finish_part(run.key, [(fault_outcome(cfg, cands[0], ctx, f"worker lost in {where}: {lost.cause}", fault),
                               env)])


def call(executor: Executor, slot: int, job: Job, *, timeout_s: float, clock: Callable[[], float] = time.monotonic):
    """Run one job on one slot and return its result (ceilings); a lost worker is an error."""
    executor.submit(slot, job)
    start = clock()
    while True:
        for ev in executor.poll(POLL_S):
            if ev.slot != slot:
                continue
            if isinstance(ev, Done):
                return ev.result
            if isinstance(ev, Lost):
                raise RuntimeError(f"worker {slot} was lost running {job.kind}: {ev.cause}\n{ev.output}")
        if executor.can_kill and clock() - start > timeout_s:
            lost, _ = executor.replace(slot, f"watchdog after {timeout_s:g} s")
            raise RuntimeError(f"worker {slot} hung running {job.kind}: {lost.cause}\n{lost.output}")
