"""The local worker pool: one spawned worker process per slot (GPU), reused while healthy.

A worker opens only its own GPU (``CUDA_VISIBLE_DEVICES`` set before torch is imported),
reports its environment, then runs jobs: it sends a phase message whenever ``run_config``
moves to another kernel or stage, and the outcomes when the config ends. It never touches
the ledger. Its stdout/stderr go to a log file whose last lines the driver attaches to a
fault row. A worker ends itself when its driver is gone (``PR_SET_PDEATHSIG`` on Linux, and
a parent check elsewhere), so a ``kill -9`` of the driver leaves nothing holding a GPU.

After a kernel error on the GPU the worker checks the device at the next phase: a sticky
CUDA error (an illegal address poisons the context) ends the worker, blaming the kernel of
the phase that just ended, instead of failing every later kernel in that process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.execution.executor import STARTUP_TIMEOUT_S, Done, Executor, Job, Lost, Phase, SlotInfo
from harness.execution.jobs import isolate, run_isolated, slot_info, tail
from harness.provenance import code as codeprov

# How often a worker checks that its driver still exists (where PDEATHSIG is unavailable).
PARENT_POLL_S = 1.0
# Exit status of a worker that ended itself after a fatal error (the driver reads the cause
# from the message it sent first).
FATAL_EXIT = 3
# How long close() waits for a worker to leave on its own before killing it.
CLOSE_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


@dataclass
class _Worker:
    process: object
    conn: object
    log: Path
    job: int | None = None
    fatal: str | None = None
    dead: bool = False
    ready: bool = False  # it said "ready": past its start-up, waiting for jobs


class LocalPool(Executor):
    """``visible[i]``: the CUDA_VISIBLE_DEVICES entry of slot i (None on the CPU)."""

    def __init__(self, device: str, visible: list[str | None]):
        import multiprocessing

        if not visible:
            raise ValueError("a worker pool needs at least one slot")
        self.device = device
        self.visible = list(visible)
        self._mp = multiprocessing.get_context("spawn")
        self._logdir: Path | None = None  # made by launch(): nothing exists before the sweep begins
        self._workers: list[_Worker | None] = [None] * len(visible)
        self._launched = 0
        self.cores = core_shares(len(visible)) if device == "cpu" and len(visible) > 1 else [None] * len(visible)
        self.root: str | None = None  # the repository measured (prepare): workers check their code came from it

    def prepare(self, line) -> None:
        self.root = str(line.root)

    # -- lifecycle -----------------------------------------------------------------------
    def launch(self) -> None:
        # A spawned worker imports torch and starts CUDA (3.5 s on the H200's host) while the
        # driver checks the line's code and ledger (issue 32: ~1.4 s of each sweep's start).
        if self._logdir is not None:
            return
        self._logdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
        for slot in range(len(self.visible)):
            self._workers[slot] = self._launch(slot)

    def start(self) -> list[SlotInfo]:
        self.launch()
        return [self._await_ready(slot) for slot in range(len(self.visible))]

    def _launch(self, slot: int) -> _Worker:
        self._launched += 1
        log = self._logdir / f"worker{slot}-{self._launched}.log"
        parent, child = self._mp.Pipe(duplex=True)
        p = self._mp.Process(target=worker_main, args=(child, self.device, self.visible[slot], str(log), os.getpid(),
                                                       self.cores[slot], self.root), name=f"bench-worker-{slot}")
        p.start()
        child.close()
        return _Worker(p, parent, log)

    def _await_ready(self, slot: int) -> SlotInfo:
        from multiprocessing.connection import wait

        w = self._workers[slot]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        where = self._where(slot)
        while time.monotonic() < deadline:
            wait([w.conn, w.process.sentinel], timeout=1.0)
            if w.conn.poll():
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    msg = None
                if msg and msg[0] == "ready":
                    w.ready = True
                    return SlotInfo(msg[1], msg[2])
                if msg and msg[0] == "error":
                    raise UserError(f"the worker for {where} cannot start: {msg[1]}")
            if not w.process.is_alive():
                w.process.join()
                raise RuntimeError(f"the worker for {where} died while starting ({_exit_cause(w.process.exitcode)})"
                                   f"; its last output:\n{tail(w.log)}")
        self._kill(w)
        raise RuntimeError(f"the worker for {where} did not start within {STARTUP_TIMEOUT_S:g} s; its last output:\n"
                           f"{tail(w.log)}")

    def _where(self, slot: int) -> str:
        return f"GPU {self.visible[slot]}" if self.device == "cuda" else f"CPU worker {slot}"

    def replace(self, slot: int, cause: str | None = None):
        w = self._workers[slot]
        self._kill(w)
        lost = Lost(slot, w.job, cause, tail(w.log)) if cause else None
        self._workers[slot] = self._launch(slot)
        return lost, self._await_ready(slot)

    def close(self) -> None:
        for w in self._workers:
            if w is None:
                continue
            with contextlib.suppress(Exception):
                if w.process.is_alive() and w.job is None and w.ready:
                    w.conn.send(None)  # idle: let it leave on its own
                else:
                    w.process.kill()  # busy (the sweep is stopping at once) or still starting (a refusal): no grace
        for w in self._workers:
            if w is None:
                continue
            w.process.join(CLOSE_GRACE_S)
            self._kill(w)
            with contextlib.suppress(Exception):
                w.conn.close()
        if self._logdir is not None:
            shutil.rmtree(self._logdir, ignore_errors=True)

    @staticmethod
    def _kill(w: _Worker) -> None:
        if w.process.is_alive():
            w.process.kill()
        w.process.join()

    # -- jobs ----------------------------------------------------------------------------
    def submit(self, slot: int, job: Job) -> None:
        w = self._workers[slot]
        w.job, w.fatal = job.id, None
        try:
            w.conn.send(job)
        except (BrokenPipeError, OSError):
            w.dead = True  # poll reports it Lost

    def poll(self, timeout: float) -> list:
        from multiprocessing.connection import wait

        live = [(slot, w) for slot, w in enumerate(self._workers) if w is not None]
        if not any(w.dead for _, w in live):
            wait([w.conn for _, w in live] + [w.process.sentinel for _, w in live], timeout=timeout)
        events = []
        for slot, w in live:
            events.extend(self._drain(slot, w))
            if w.dead or not w.process.is_alive():
                events.extend(self._drain(slot, w))
                w.process.join()
                cause = w.fatal or _exit_cause(w.process.exitcode)
                events.append(Lost(slot, w.job, cause, tail(w.log)))
                self._workers[slot].dead = True
        return events

    def _drain(self, slot: int, w: _Worker) -> list:
        out = []
        while True:
            try:
                if not w.conn.poll():
                    break
                msg = w.conn.recv()
            except (EOFError, OSError):
                w.dead = True
                break
            tag = msg[0]
            if tag == "phase":
                out.append(Phase(slot, msg[1], tuple(msg[2]), msg[3]))
            elif tag == "done":
                w.job = None
                out.append(Done(slot, msg[1], msg[2]))
            elif tag == "fatal":
                w.fatal = w.fatal or msg[2]
            elif tag == "error":
                raise UserError(msg[1])
        return out


def _exit_cause(code: int | None) -> str:
    if code is None:
        return "worker vanished"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"worker exited with status {code}"


# -- the worker process ------------------------------------------------------------------
def core_shares(n: int) -> list[tuple[int, ...] | None]:
    """Per CPU worker, its own share of this process's cores: torch's threads of several
    workers on the same cores preempt one another, and a call that waited on a run queue is
    no sample (timing/timers.py), so two workers sharing two cores measured nothing. With
    fewer cores than workers the shares overlap (and such rounds are dropped as they wait)."""
    if not hasattr(os, "sched_getaffinity"):
        return [None] * n
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n:
        return [(cores[i % len(cores)],) for i in range(n)]
    per = len(cores) // n
    return [tuple(cores[i * per:(i + 1) * per]) for i in range(n)]


def worker_main(conn, device: str, visible: str | None, log: str, parent_pid: int,
                cores: tuple[int, ...] | None = None, root: str | None = None) -> None:
    """Entry point of a spawned worker: set up, say ready, then run jobs until told to stop.
    A worker's code must come from the driver's repository ``root`` and from source, as the
    driver's did: a spawned process imports anew, from its own sys.path."""
    _watch_parent(parent_pid)
    isolate(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    if cores is not None:
        # Before torch is imported: its intra-op threads, one per core of this worker's share.
        os.sched_setaffinity(0, cores)
        os.environ["OMP_NUM_THREADS"] = str(len(cores))
    if visible is not None:
        # Before torch is imported: this process sees one GPU, numbered as nvidia-smi does.
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        env, fp = slot_info(device, f"torch sees no GPU with CUDA_VISIBLE_DEVICES={visible}: pick GPUs that "
                                    f"nvidia-smi lists")
        require_worker_code(root)
    except UserError as exc:
        conn.send(("error", str(exc)))
        return
    conn.send(("ready", env, fp))
    _serve(conn, device, root)


def require_worker_code(root: str | None) -> None:
    """UserError unless this worker's harness/kernels modules (the config runner included) come
    from ``root`` (where it holds them; None: the driver named none) and ran from source, in a
    process that reads bytecode only from bench's private cache (inherited from the driver)."""
    import importlib

    importlib.import_module("harness.pipeline.run")  # what a config runs: checked before the first one
    if root is not None:
        codeprov.require_code_from(Path(root))
    else:
        codeprov.require_private_bytecode()
        codeprov.require_source_loaded()


def _serve(conn, device: str, root: str | None = None) -> None:
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the driver is gone
        if job is None:
            return
        tag, value = run_isolated(job, device, conn.send)
        if tag == "done":
            try:  # the kernels a config imported are checked before its result counts
                require_worker_code(root)
            except UserError as exc:
                tag, value = "error", str(exc)
        if tag == "fatal":
            conn.send(("fatal", job.id, value))
            os._exit(FATAL_EXIT)
        conn.send(("error", value) if tag == "error" else ("done", job.id, value))


def _watch_parent(parent_pid: int) -> None:
    """End this worker as soon as its driver is gone, however the driver ended."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the driver died before the line above took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()
