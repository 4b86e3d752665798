"""Fill Triton's on-disk kernel cache for a registered line, in parallel, before its sweep.

A sweep compiles each Triton kernel once per specialization (dtype, causal, head_dim, the
autotune key, integer divisibility), and an autotuner compiles every candidate config, all
serialized inside the sweep. ``warm`` calls each such kernel once per config of the line,
on that config's own shapes (so the specialization is the sweep's), one worker process per
call; the sweep then loads the cached binaries. Nothing is timed, checked or recorded: a
kernel that fails here is reported, and the sweep's gate reports it again with its reason.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from harness.errors import UserError
from harness.workloads import Config
from harness.registry import get_kernel, get_workload

# Kernels needing one of these modules compile on their first call into an on-disk cache.
# (cupy's NVRTC kernels compile too, but in well under a second each, and cupy caches them.)
COMPILING_MODULES = ("triton",)
# Seed of the one call per (kernel, config), drawn from the workload's timing family: any
# values compile the same.
WARM_SEED = 0


@dataclass(frozen=True)
class WarmTask:
    kernel: str
    config: Config  # or a plugin workload's GridPoint


@dataclass(frozen=True)
class WarmPlan:
    """What ``warm`` would compile for a line on a device, and why the other kernels are left out."""

    line: str
    device: str
    tasks: tuple[WarmTask, ...]
    left_out: tuple[tuple[str, str], ...]  # (kernel, why it compiles nothing here)


@dataclass(frozen=True)
class Warmed:
    kernel: str
    config_key: str
    seconds: float
    error: str | None  # "Type: first line" when the call failed


@dataclass(frozen=True)
class WarmSummary:
    plan: WarmPlan
    warmed: tuple[Warmed, ...]
    seconds: float

    @property
    def failed(self) -> tuple[Warmed, ...]:
        return tuple(w for w in self.warmed if w.error is not None)


def default_workers() -> int:
    """One core left to the parent (which only collects results)."""
    return max(1, (os.cpu_count() or 2) - 1)


def _left_out(spec, device: str) -> str | None:
    """Why ``spec`` compiles nothing ahead on ``device``, or None when warming it helps."""
    if not any(m in spec.requires for m in COMPILING_MODULES):
        return f"compiles nothing ahead (no {'/'.join(COMPILING_MODULES)} code)"
    why = spec.unusable_reason(device)
    if why is not None:
        return f"not usable here: {why}"
    if device != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return "runs in Triton's interpreter here, which compiles nothing"
    return None


def plan(reg, device: str) -> WarmPlan:
    """One task per (compiling kernel, config it supports), the gate's boundary configs included."""
    tasks, left_out = [], []
    for name in dict.fromkeys((reg.baseline, *reg.candidates)):
        spec = get_kernel(name)
        why = _left_out(spec, device)
        if why is not None:
            left_out.append((name, why))
            continue
        seen = set()
        for cfg in reg.configs:
            for c in (cfg, *get_workload(reg.workload).boundary_configs(cfg)):
                if c.key() not in seen and spec.config_reason(c) is None:
                    seen.add(c.key())
                    tasks.append(WarmTask(name, c))
    return WarmPlan(reg.line, device, tuple(tasks), tuple(left_out))


def warm_one(task: WarmTask, device: str) -> Warmed:
    """Call ``task.kernel`` once on ``task.config``'s shapes (in a worker process)."""
    t0 = time.perf_counter()
    try:
        import torch

        cfg = task.config
        wl = get_workload(cfg.workload)
        inputs = tuple(wl.make_inputs(cfg, WARM_SEED, wl.timing_family, device))
        outs = tuple(wl.allocate_outputs(cfg, device))
        wl.call(get_kernel(task.kernel).fn, inputs, outs, cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        error = None
    except Exception as exc:  # reported; the sweep's gate reports it again with its reason
        first = str(exc).splitlines()[0] if str(exc) else ""
        error = f"{type(exc).__name__}: {first}"
    return Warmed(task.kernel, task.config.key(), time.perf_counter() - t0, error)


def warm(p: WarmPlan, workers: int, on_done: Callable[[Warmed], None] | None = None) -> WarmSummary:
    """Run every task of ``p`` in ``workers`` spawned processes (CUDA does not survive a fork)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UserError(f"--workers {workers!r}: give at least 1 worker process")
    t0 = time.perf_counter()
    done = []
    if p.tasks:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(min(workers, len(p.tasks)), mp_context=mp.get_context("spawn")) as pool:
            for fut in as_completed([pool.submit(warm_one, t, p.device) for t in p.tasks]):
                w = fut.result()
                done.append(w)
                if on_done is not None:
                    on_done(w)
    return WarmSummary(p, tuple(done), time.perf_counter() - t0)
