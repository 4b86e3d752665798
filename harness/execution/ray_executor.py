"""The Ray executor: one Ray actor per GPU of a Ray cluster (``bench sweep --executor ray``).

Each actor is a worker as ``LocalPool``'s are (``jobs.run_isolated``): it holds one GPU
(``num_gpus=1``; on a CPU-only cluster ``num_cpus=1`` and device cpu), reports its env
stamp, then runs the jobs it is handed and streams each phase back through a Ray queue, so
``executor.schedule`` keeps the same watchdog. An actor that dies (segfault, SIGKILL, its
node lost) or reports a fatal error is a `Lost`, killed with ``ray.kill`` and replaced;
a hung one is killed by the watchdog. Actors never touch the ledger: outcomes come back
to the driver, which alone appends and commits.

Before it runs anything an actor proves it runs the driver's code: the SHA-256 of every
harness and kernel source file it loaded must equal the driver's (checked again after
each job, for modules imported late). A mismatch is refused, naming the file.

On a GPU cluster each actor locks its GPU on its own host (``devicelock``, keyed by UUID),
since the driver's host lock cannot exclude a sweep on another host. Ray is optional
(``pip install -e .[ray]``): it is imported only here, inside functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from harness import CODE_PACKAGES, pycache
from harness.errors import UserError
from harness.provenance.code import loaded_files, module_path, require_private_bytecode, require_source_loaded
from harness.execution.executor import STARTUP_TIMEOUT_S, Done, Executor, Job, Lost, Phase, SlotInfo
from harness.registry import get_kernel
from harness.execution.jobs import isolate, run_isolated, slot_info, tail
from harness.vocab.devices import device_key
from harness.execution.devicelock import describe_holder, device_lock, holder

INSTALL_HINT = 'pip install -e ".[ray]"'
# How long a replacement actor waits for the lock its killed predecessor held on the GPU
# (ray.kill returns before the process is gone).
LOCK_HANDOVER_S = 60.0
LOCK_RETRY_S = 1.0
# Environment the driver passes on to its actors (a Ray worker does not inherit the driver's).
PASSED_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "TRITON_INTERPRET")
# Files whose hashes prove the code: the two packages' Python sources and the CUDA sources
# compiled at run time.
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")
# How long close() lets a live actor remove its log before it is killed.
CLEANUP_TIMEOUT_S = 5.0


def require_ray():
    """The ray module, or the one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


# -- proving the code ----------------------------------------------------------------------
def _package_root(name: str) -> Path:
    import importlib

    # The package's folder, not its __file__'s: in a checkout bench_kernels (the kernels/ folder) has none.
    return Path(importlib.import_module(name).__path__[0]).resolve()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kernel_sources(kernels) -> dict[str, Path]:
    """The line's kernel source files (plugins included), by their module path."""
    out = {}
    for name in kernels:
        src = Path(get_kernel(name).source)
        if src.is_file():
            out[module_path(src)] = src
    return out


def source_hashes(kernels) -> dict[str, str]:
    """What the driver runs: every source file of its harness and kernels packages, and the
    line's kernel sources, by path relative to their import root (``harness/pipeline/run.py``)."""
    files = {}
    for pkg in CODE_PACKAGES:
        root = _package_root(pkg)
        for p in root.rglob("*"):
            if p.suffix in SOURCE_SUFFIXES and p.is_file() and "__pycache__" not in p.parts:
                files[p.relative_to(root.parent).as_posix()] = p
    files.update(_kernel_sources(kernels))
    return {k: _sha(p) for k, p in sorted(files.items())}


def loaded_sources(kernels) -> dict[str, Path]:
    """The source files this process loaded from the two packages (and the line's kernels,
    and the CUDA sources it may compile), by the same relative paths."""
    roots = [_package_root(pkg) for pkg in CODE_PACKAGES]
    files = {}
    for p in loaded_files().values():
        for root in roots:
            if p.is_relative_to(root):
                files[p.relative_to(root.parent).as_posix()] = p
    kroot = roots[1]
    for p in kroot.rglob("*"):
        if p.suffix in (".cu", ".cuh") and p.is_file():
            files[p.relative_to(kroot.parent).as_posix()] = p
    files.update(_kernel_sources(kernels))
    return files


def source_mismatch(expected: dict[str, str], loaded: dict[str, Path], checked: set) -> str | None:
    """The first loaded file whose hash is not the driver's, as a message; None if all match."""
    for key, path in sorted(loaded.items()):
        if key in checked:
            continue
        checked.add(key)
        want = expected.get(key)
        have = _sha(path)
        if have != want:
            here = f"sha256 {want[:12]} in the driver's checkout" if want else "absent from the driver's checkout"
            return (f"the Ray worker on {socket.gethostname()} loaded {key} (sha256 {have[:12]}), {here}: every "
                    f"host must run the driver's commit — check it out there and {INSTALL_HINT}")
    return None


# -- the actor -----------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerBrief:
    """What every slot's worker is started with: the device, the source hashes its kernels'
    code must match (``expected``, of ``kernels``), the environment it sets, how long it may
    wait for its device lock (None: the executor does not lock devices), who holds the lock,
    and the driver's bytecode cache."""

    device: str
    expected: dict
    kernels: tuple
    env: dict
    lock_wait_s: float | None
    who: dict
    cache: str


class RayWorker:
    """One slot's worker, as a Ray actor (wrapped with ``ray.remote`` by the executor)."""

    def __init__(self, slot: int, queue, brief: WorkerBrief):
        self.slot, self.device, self.queue, self.cache = slot, brief.device, queue, brief.cache
        self.expected, self.kernels = brief.expected, brief.kernels
        self.lock_wait_s, self.who = brief.lock_wait_s, brief.who
        self.checked: set = set()
        self.locks = contextlib.ExitStack()
        for k, v in brief.env.items():
            os.environ[k] = v
        import tempfile

        fd, self.log = tempfile.mkstemp(prefix="bench-ray-worker-", suffix=".log")
        isolate(fd)

    def ready(self) -> tuple:
        """("ready", env, fingerprint, host, log) or ("error", message)."""
        import importlib

        try:  # started with the driver's bytecode cache (its runtime_env), before harness was imported
            require_private_bytecode(self.cache)
        except UserError as exc:
            return "error", f"the Ray worker on {socket.gethostname()}: {exc}"
        try:
            env, fp = slot_info(self.device, f"the Ray worker on {socket.gethostname()} sees no GPU: start its "
                                             f"node with GPUs")
            importlib.import_module("harness.pipeline.run")  # what a config runs: its sources are checked now
            require_source_loaded()  # and it ran from them, not from bytecode
            bad = source_mismatch(self.expected, loaded_sources(self.kernels), self.checked)
            if bad:
                return "error", bad
            if self.lock_wait_s is not None:
                why = self._lock(device_key(env))
                if why:
                    return "error", why
        except UserError as exc:
            return "error", str(exc)
        return "ready", env, fp, socket.gethostname(), self.log

    def _lock(self, key: str) -> str | None:
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                self.locks.enter_context(device_lock(key, who=self.who, wait=False))
                return None
            except UserError:
                if time.monotonic() >= deadline:
                    return (f"GPU {key} on {socket.gethostname()} is in use by another bench process"
                            f"{describe_holder(holder(key))}: a Ray sweep does not queue for a device — run it "
                            f"when that one has ended")
                time.sleep(LOCK_RETRY_S)

    def run(self, job: Job) -> tuple:
        tag, value = run_isolated(job, self.device, lambda msg: self.queue.put((self.slot, *msg)))
        if tag == "done":
            bad = source_mismatch(self.expected, loaded_sources(self.kernels), self.checked)
            if bad:
                return "error", bad
        return tag, value

    def cleanup(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.log)


# -- the driver's side ---------------------------------------------------------------------
class RayExecutor(Executor):
    """Slots on a Ray cluster: one actor per GPU (``device == "cuda"``) or ``workers`` CPU
    actors. ``address``: a running cluster (``ray start``); None starts one on this host."""

    labels = ("Ray actor", "Ray actors")

    def __init__(self, device: str, *, address: str | None = None, workers: int = 1):
        self.ray = require_ray()
        self.device, self.address, self.workers = device, address, workers
        self.locks_devices = device == "cuda"
        self.kernels: tuple[str, ...] = ()
        self.who: dict = {}
        self._actors: list = []
        self._info: list[tuple[str, str] | None] = []  # (host, log) per slot
        self._running: dict[int, tuple[int, object]] = {}  # slot -> (job id, ObjectRef)
        self._logs: set[str] = set()
        self._queue = None
        self._expected: dict = {}
        self._env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        # A Ray worker is no child of the driver: it gets bench's bytecode cache from its
        # runtime_env, which Ray sets before the worker's Python starts (os.environ in the
        # actor would come after harness was imported).
        self._pycache = pycache.private_cache()

    def prepare(self, line) -> None:
        reg = line.reg
        if reg.verify:
            raise UserError(f"line '{reg.line}' has [verify], whose counters are profiled by ncu in the driver's "
                            f"process, not on the cluster: sweep it with the local executor on a GPU host")
        self.kernels = (reg.baseline, *reg.candidates)
        self.who = {"line": reg.line, "root": str(line.root), "host": socket.gethostname()}

    def _connect(self) -> int:
        import logging

        ray = self.ray
        if not ray.is_initialized():
            kw = {"address": self.address} if self.address else {"include_dashboard": False}
            try:
                ray.init(**kw, log_to_driver=False, logging_level=logging.ERROR)
            except ConnectionError as exc:
                raise UserError(f"--address {self.address}: no Ray cluster answers there ({exc}): start one with "
                                f"`ray start --head` (docs/cluster.md)") from None
        res = ray.cluster_resources()
        if self.device == "cuda":
            n = int(res.get("GPU", 0))
            if n < 1:
                raise UserError("the Ray cluster has no GPU: start its nodes on GPU hosts (docs/cluster.md), or "
                                "sweep with --device cpu")
            return n
        if self.workers > int(res.get("CPU", 0)):
            raise UserError(f"--workers {self.workers} but the Ray cluster has {int(res.get('CPU', 0))} CPUs: "
                            f"ask for at most that many")
        return self.workers

    def start(self) -> list[SlotInfo]:
        from ray.util.queue import Queue

        n = self._connect()
        self._expected = source_hashes(self.kernels)
        self._queue = Queue(actor_options={"num_cpus": 0})
        self._actors = [None] * n
        self._info = [None] * n
        for slot in range(n):
            self._actors[slot] = self._launch(slot, 0.0)
        return [self._await_ready(slot) for slot in range(n)]

    def _launch(self, slot: int, lock_wait_s: float):
        ray = self.ray
        opts = {"num_gpus": 1} if self.device == "cuda" else {"num_cpus": 1}
        cls = ray.remote(max_restarts=0, max_task_retries=0, runtime_env={"env_vars": {
            pycache.PREFIX_ENV: self._pycache}}, **opts)(RayWorker)
        return cls.remote(slot, self._queue, WorkerBrief(self.device, self._expected, self.kernels, self._env,
                                                         lock_wait_s if self.locks_devices else None, self.who,
                                                         self._pycache))

    def _await_ready(self, slot: int) -> SlotInfo:
        ray = self.ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            msg = ray.get(self._actors[slot].ready.remote(), timeout=STARTUP_TIMEOUT_S)
        except GetTimeoutError:
            ray.kill(self._actors[slot], no_restart=True)
            raise RuntimeError(f"Ray worker {slot} did not start within {STARTUP_TIMEOUT_S:g} s (is a "
                               f"{'GPU' if self.device == 'cuda' else 'CPU'} free for it in the cluster?)") from None
        except RayActorError as exc:
            raise RuntimeError(f"Ray worker {slot} died while starting: {_died(exc)}") from None
        if msg[0] == "error":
            raise UserError(msg[1])
        _, env, fp, host, log = msg
        self._info[slot] = (host, log)
        if host == socket.gethostname():
            self._logs.add(log)
        return SlotInfo(env, fp)

    def submit(self, slot: int, job: Job) -> None:
        self._running[slot] = (job.id, self._actors[slot].run.remote(job))

    def poll(self, timeout: float) -> list:
        ray = self.ray
        from ray.exceptions import RayActorError, RayError

        refs = {ref: slot for slot, (_, ref) in self._running.items()}
        events = self._phases()
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0 if events else timeout)
            if ready:
                ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        else:
            ready = []
            time.sleep(0 if events else timeout)
        events += self._phases()  # a job's phases are queued before its result is
        for ref in ready:
            slot = refs[ref]
            job, _ = self._running.pop(slot)
            try:
                tag, value = ray.get(ref)
            except RayActorError as exc:
                events.append(Lost(slot, job, _died(exc), self._tail(slot)))
                continue
            except RayError as exc:
                events.append(Lost(slot, job, f"{type(exc).__name__}: {exc}".splitlines()[0], self._tail(slot)))
                continue
            if tag == "done":
                events.append(Done(slot, job, value))
            elif tag == "fatal":
                events.append(Lost(slot, job, value, self._tail(slot)))
            else:
                raise UserError(value)
        return events

    def _phases(self) -> list:
        q = self._queue
        items = q.get_nowait_batch(q.qsize()) if q is not None and q.qsize() else []
        return [Phase(slot, job, tuple(kernels), ph) for slot, _, job, kernels, ph in items]

    def _tail(self, slot: int) -> str:
        host, log = self._info[slot] or (None, None)
        if host is None:
            return ""
        if host != socket.gethostname():
            return f"(the worker's output is in {log} on {host})"
        return tail(Path(log))

    def replace(self, slot: int, cause: str | None = None):
        job = self._running.pop(slot, (None, None))[0]
        lost = Lost(slot, job, cause, self._tail(slot)) if cause else None
        with contextlib.suppress(Exception):
            self.ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = self._launch(slot, LOCK_HANDOVER_S)
        return lost, self._await_ready(slot)

    def close(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            return
        live = [a for a in self._actors if a is not None]
        with contextlib.suppress(Exception):
            ray.wait([a.cleanup.remote() for a in live], num_returns=len(live), timeout=CLEANUP_TIMEOUT_S)
        for a in live:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
        if self._queue is not None:
            with contextlib.suppress(Exception):
                self._queue.shutdown()
        for log in self._logs:
            with contextlib.suppress(OSError):
                os.unlink(log)
        ray.shutdown()


def _died(exc) -> str:
    """Why Ray says an actor is gone, in one line."""
    text = str(exc)
    for marker in ("Worker exit detail:", "The actor is dead because"):
        if marker in text:
            detail = text.split(marker, 1)[1].strip().split(". ")[0]
            return f"the Ray actor died: {detail}"
    return f"the Ray actor died: {text.splitlines()[0] if text else type(exc).__name__}"
