"""Counter profiles of a line's kernels: `bench profile` and the sweep's [verify] pass.

``profile_rows`` gates each kernel on the float64 reference (as the sweep does), then
profiles it under ncu (harness/measurement/profile.py) and yields `profile` row
payloads; it never writes the ledger. ``verify_pass`` finds the candidate results a
[verify] line still lacks counters for at this commit on this device, so an interrupted
sweep resumes its profiles too.

A `profile` row: ``config``, ``config_key``, ``candidate`` (the kernel), ``role``
(candidate or baseline), ``gate`` (the gate's summary, or the seq of the sweep row whose
gate it passed), ``launches`` (one dict per kernel launch: ncu id, kernel name, grid,
block, NVTX range and counters.LAUNCH_METRICS), ``counters`` (the per-call [verify]
metrics), ``formulas`` (min_bytes, min_read_bytes, kv_bytes, flops), ``l2_bytes``,
``impossible`` (the counter reductio's reason or null), ``output_check`` (the float64
check of the profiled call), ``correct``, ``error`` (why there are no counters) and
``ncu`` (version, metrics, calls, launches dropped outside the range); where the line's
[verify] clauses name ``bare_<counter>``, also ``bare``: the workload's bare op profiled at
the same config on the same inputs (``bare_payload``: op, launches, counters, output_check,
correct, error, outside_range). Rows without it have no ``bare`` field.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from harness.errors import UserError
from harness.vocab.outcomes import current_rows, is_replicate
from harness.vocab.outcomes import PROFILE, RESULT, measured_on
from harness.measurement import counters
from harness.workloads import Config
from harness.measurement.timing.policy import device_l2_bytes
from harness.measurement.profile import NcuRun, ProfileCase, ncu_version, profile, profile_bare
from harness.measurement import memory
from harness.registry import get_kernel, get_workload
from harness.registration import verify
from harness.execution.devicelock import device_lock
from harness.vocab.devices import device_key
from harness.ledger.payloads import GateAnswer, OutputCheck
from harness.ledger.store import require_anchorable
from harness.measurement.device import env_summary
from harness.commands.interrupts import StopNow, interrupts
from harness.commands.writer import Writer
from harness.execution.executor import Job, call
from harness.execution.select import make_executor
from harness.pipeline.context import SweepContext, Task
from harness.workloads.seeds import PROFILE_SEED_OFFSET


def formula_values(cfg) -> dict:
    """The [verify] formulas of a config (harness/registration/verify.py FORMULAS), as its
    workload declares them (``kv_bytes`` only where it declares one: `bench register` refuses
    a clause naming it elsewhere)."""
    wl = get_workload(cfg.workload)
    kv = wl.kv_bytes(cfg)
    return {"min_bytes": wl.min_bytes(cfg), "min_read_bytes": wl.min_read_bytes(cfg),
            **({} if kv is None else {"kv_bytes": kv}), "flops": wl.flops(cfg)}


def default_configs(reg) -> list[Config]:
    """The smallest and the largest config of each dtype (by bytes, then FLOPs)."""
    chosen = []
    wl = get_workload(reg.workload)
    for dt in reg.dtypes:
        cfgs = sorted((c for c in reg.configs if c.dtype == dt), key=lambda c: (wl.min_bytes(c), wl.flops(c)))
        for c in (cfgs[0], cfgs[-1]):
            if c not in chosen:
                chosen.append(c)
    return chosen


def select_configs(reg, keys: list[str]) -> list[Config]:
    """Configs named by their keys (as `bench ledger show` prints them); none: the defaults."""
    if not keys:
        return default_configs(reg)
    by_key = {c.key(): c for c in reg.configs}
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        raise UserError(f"config {unknown[0]!r} is not in line '{reg.line}'s grid (e.g. {reg.configs[0].key()}): "
                        f"name configs by their keys, or give none for the smallest and largest of each dtype")
    return [by_key[k] for k in dict.fromkeys(keys)]


def payload(result, role: str, gate, bare: dict | None = None) -> dict:
    """A `profile` row's payload from a ProfileResult (see the module docstring); ``bare``
    (``bare_payload``) where the line's [verify] clauses name the bare op's counters."""
    cfg = result.config
    row = {"config": cfg.as_dict(), "config_key": cfg.key(), "candidate": result.kernel, "role": role,
           "gate": gate, "launches": [launch.as_dict() for launch in result.launches],
           "counters": result.per_call or None, "formulas": formula_values(cfg), "l2_bytes": result.l2_bytes,
           "impossible": result.impossible, "output_check": result.output_check, "correct": result.correct,
           "error": result.error,
           "ncu": {"version": result.ncu_version, "metrics": list(counters.LAUNCH_METRICS.values()),
                   "calls": 1, "outside_range": result.outside_range}}
    return row if bare is None else {**row, "bare": bare}


def bare_payload(result) -> dict:
    """A `profile` row's ``bare``: the workload's bare op profiled at the row's config
    (``profile_bare``). An op whose output failed its float64 check, or that gave no counters,
    has ``counters`` None and ``error`` saying why: its clauses are unknown at the row."""
    check = OutputCheck.from_row(result.output_check or {})
    error = result.error or (None if check.passed else check.reason or "the bare op's output failed")
    return {"op": get_workload(result.config.workload).bare_name,
            "launches": [launch.as_dict() for launch in result.launches],
            "counters": None if error else (result.per_call or None), "output_check": result.output_check,
            "correct": error is None, "error": error, "outside_range": result.outside_range}


def _l2_bytes() -> int:
    return device_l2_bytes("cuda")


def require_profiler(device: str) -> tuple[str, str]:
    """(ncu path, version) where counters can be read; one line naming the fix otherwise."""
    if device != "cuda":
        raise UserError(f"hardware counters need an NVIDIA GPU (device {device}): run on a GPU machine with ncu")
    path = counters.ncu_path()
    return path, ncu_version(path)


def profile_rows(line, configs: list[Config], device: str, *, gate_first: bool = True,
                 gated: dict | None = None, gate=None) -> Iterator[dict]:
    """Payloads of `profile` rows for the line's kernels (baseline and candidates) at ``configs``,
    one at a time (the caller appends each before the next profile starts).

    ``gated`` maps (config_key, kernel) to the seq of the sweep row whose gate it passed;
    those pairs are not gated again. ``gate(cfg, kernel)`` runs the others' gate and returns
    ``pipeline.gate.gate_job``'s answer (`bench profile` runs it in a worker, under the
    watchdog). A kernel that fails the gate gets a row with the gate's reason and no
    counters: nothing is profiled that is not correct.
    """
    reg = line.reg
    ncu, version = require_profiler(device)
    l2 = _l2_bytes()
    gated = gated or {}
    with_bare = bool(verify.bare_names(reg.verify_clauses))
    kernels = [(reg.baseline, "baseline"), *((c, "candidate") for c in reg.candidates)] if gate_first else \
        [(c, "candidate") for c in reg.candidates]
    for cfg in configs:
        bare = None  # the bare op's, profiled once per config, before its first kernel's row
        for name, role in kernels:
            if (cfg.key(), name) not in gated and not gate_first:
                continue
            spec = get_kernel(name)
            why = spec.unusable_reason(device) or spec.config_reason(cfg)
            if why:
                continue  # the sweep records unsupported pairs; a profile has nothing to add
            if (cfg.key(), name) in gated:
                gate_info = {"passed": True, "sweep_row": gated[(cfg.key(), name)]}
            else:
                if gate is None:
                    raise ValueError(f"{name} @ {cfg.key()} has no sweep row whose gate it passed, and no gate to run")
                g = GateAnswer.from_row(gate(cfg, name))
                gate_info = g.gate
                if not g.passed:
                    yield {"config": cfg.as_dict(), "config_key": cfg.key(), "candidate": name, "role": role,
                           "gate": gate_info, "launches": [], "counters": None, "formulas": formula_values(cfg),
                           "l2_bytes": l2, "impossible": None, "output_check": None, "correct": False,
                           "error": f"failed the correctness gate [{g.tag}]: {g.reason}"}
                    continue
            memory.release(device)
            case = ProfileCase(reg.seeds[0] + PROFILE_SEED_OFFSET, **reg.tolerance(cfg.dtype),
                               numerics=reg.numerics.as_dict())
            run = NcuRun(ncu, version, cwd=line.root)
            res = profile(cfg, name, case, l2_bytes=l2, run=run,
                          min_read_bytes=get_workload(cfg.workload).min_read_bytes(cfg))
            if with_bare and bare is None:
                memory.release(device)
                bare = bare_payload(profile_bare(cfg, case, l2_bytes=l2, run=run))
            yield payload(res, role, gate_info, bare if with_bare else None)


def profile_line(line, configs: list[Config], device: str, *, commit: bool = True, wait: bool = True,
                 on_wait=None) -> tuple[list[dict], tuple[str, ...]]:
    """`bench profile`: the `profile` rows of ``configs``, appended config by config while
    the device is locked, each config's rows committed (``ledger.anchor``) unless ``commit``
    is False. Returns (rows written, commits holding them).

    Each kernel's gate runs in a worker process under the line's watchdog, as a sweep's
    does: a kernel that hangs or takes its process down gets a row saying so, not the
    command. A signal never splits a row from its commit: it waits for the write to end,
    then reaches the handler the caller had (the CLI's), as it would have at once."""
    import signal

    require_profiler(device)
    if commit:
        require_anchorable(line.ledger)
    env = env_summary(device)
    stopped = None
    with interrupts(None) as guard:
        writer = Writer(line, guard, commit=commit, why=f"profile of {line.reg.line} at {line.commit[:12]}")
        try:
            with device_lock(device_key(env), who={"line": line.reg.line, "root": str(line.root)}, wait=wait,
                             on_wait=on_wait), gate_worker(line, device) as gate:
                for cfg in configs:
                    for p in profile_rows(line, [cfg], device, gate=gate):
                        writer.profile(p, env, commit=False)
                    writer.commit()
        except StopNow:
            stopped = guard.signal
    if stopped is not None:
        signal.raise_signal(stopped)
    return writer.appended, writer.commits


@contextlib.contextmanager
def gate_worker(line, device: str):
    """``gate(cfg, kernel)`` run by one worker process under the watchdog (``[timing]
    watchdog_s``); a worker lost or killed is the gate's failure, and is replaced."""
    executor = make_executor(device)
    ctx = SweepContext(reg=line.reg, device=device, ceilings=None, root=str(line.root))
    try:
        executor.prepare(line)
        executor.start()
        jobs = iter(range(1_000_000))

        def gate(cfg: Config, name: str) -> dict:
            try:
                return call(executor, 0, Job(next(jobs), "gate", Task(cfg, (name,)), ctx),
                            timeout_s=line.reg.timing.watchdog_s)
            except RuntimeError as exc:  # the worker hung or died: the kernel's doing, as in a sweep
                return {"gate": None, "passed": False, "tag": "lost_worker", "reason": str(exc).splitlines()[0]}

        yield gate
    finally:
        executor.close()


def profiled(rows, key: tuple) -> set[tuple[str, str]]:
    """(config_key, kernel) pairs with counters measured at ``key`` (commit, device, gpu)."""
    return {(r.config_key, r.candidate) for r in current_rows(rows)
            if r.kind == PROFILE and r.counters and measured_on(r) == key}


def pending_verify(rows, key: tuple) -> dict:
    """Candidate results at ``key`` without counters at ``key``: (config_key, kernel) -> result seq."""
    done = profiled(rows, key)
    todo = {}
    for r in current_rows(rows):
        if (r.kind == RESULT and measured_on(r) == key and not is_replicate(r)
                and (r.config_key, r.candidate) not in done):
            todo[(r.config_key, r.candidate)] = r.seq
    return todo


def verify_pass(line, device: str, key: tuple, rows) -> Iterator[dict]:
    """Profile every candidate result of a [verify] line (``rows``: its ledger now) that has
    no counters yet here."""
    todo = pending_verify(rows, key)
    if not todo:
        return iter(())
    configs = [c for c in line.reg.configs if any(ck == c.key() for ck, _ in todo)]
    return profile_rows(line, configs, device, gate_first=False, gated=todo)
