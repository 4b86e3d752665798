"""Profiling one kernel at one config under Nsight Compute, in a child process.

``profile`` runs harness/execution/profile_worker.py under ``ncu`` (options from
counters.ncu_args), parses the CSV log and returns frozen data: every launch ncu saw
inside the worker's NVTX range, the per-call [verify] counters, the counter reductio and
the float64 check of what the profiled call wrote. It never touches the ledger.

ncu missing, or unable to read counters (ERR_NVGPUCTRPERM and kin), is a UserError (one
line, exit 2): counters that cannot be read are never a pass. A kernel that crashes in
the worker, or a call that launched nothing ncu could profile, comes back as a result
with ``error`` set and no counters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError
from harness.measurement import counters
from harness.workloads import Config
from harness import CODE_PACKAGES

# Profiled calls per (config, kernel): ncu replays each launch until every metric is
# collected, so one call gives complete counters; per-call values divide by this.
PROFILE_CALLS = 1
# One profile (ncu start, imports, warm-up, replays, the float64 check) may take this long.
PROFILE_TIMEOUT_S = 900
# Lines of the worker's stderr kept when it fails.
ERROR_TAIL_LINES = 8
# The NVTX range name of the workload's bare op (``profile_bare``): each profile is its own
# ncu run, so a kernel of the same name could not be mistaken for it.
BARE_RANGE = "bare_op"


@dataclass(frozen=True)
class ProfileResult:
    config: Config
    kernel: str                   # the name the NVTX range carries
    launches: tuple = ()          # counters.Launch, inside the range, in launch order
    per_call: dict = field(default_factory=dict)   # counters.per_call
    impossible: str | None = None  # counters.counter_impossible
    output_check: dict | None = None  # the float64 check of the profiled call's output
    error: str | None = None      # why there are no counters (crash, nothing launched)
    l2_bytes: int | None = None
    ncu_version: str | None = None
    outside_range: int = 0        # launches ncu reported outside the range (dropped)

    @property
    def correct(self) -> bool:
        return self.error is None and bool(self.output_check and self.output_check.get("passed"))


def ncu_version(ncu: str) -> str:
    res = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    said = [ln for ln in res.stdout.splitlines() if ln.strip()]
    return said[-1].strip() if said else "unknown"


def _pythonpath() -> str:
    """The worker imports the same harness and kernels packages as this process."""
    import importlib

    # A package's folder, not its __file__: bench_kernels in a checkout is the kernels/ folder, no __init__.py.
    roots = {str(Path(importlib.import_module(m).__path__[0]).resolve().parent) for m in CODE_PACKAGES}
    return os.pathsep.join([*sorted(roots), *filter(None, [os.environ.get("PYTHONPATH")])])


@dataclass(frozen=True)
class ProfileCase:
    """What the profiled call runs on and is held to: its inputs' seed, the tolerance its output
    is checked against (atol + rtol·|ref|), and the numeric state pinned around it."""

    seed: int
    atol: float
    rtol: float
    numerics: dict | None = None


@dataclass(frozen=True)
class NcuRun:
    """How ncu is run: its path (None: ``counters.ncu_path()``), its version as the row records
    it, the working directory, and how long it may take."""

    path: str | None = None
    version: str | None = None
    cwd: Path | None = None
    timeout_s: float = PROFILE_TIMEOUT_S


def profile_bare(cfg, case: ProfileCase, *, l2_bytes: int | None, run: NcuRun = NcuRun()) -> ProfileResult:
    """Counters of one call of ``cfg``'s workload's bare op (``Workload.bare_op``) on the inputs a
    kernel profiled with ``case`` gets, its outputs checked against ``bare_reference`` with
    ``case``'s tolerance. Its reads are not judged by the reductio: it is the yardstick, not a
    candidate (``impossible`` is None)."""
    return profile(cfg, None, case, l2_bytes=l2_bytes, name=BARE_RANGE, run=run, min_read_bytes=None, bare=True)


def profile(cfg: Config, kernel: str | None, case: ProfileCase, *, l2_bytes: int | None, name: str | None = None,
            min_read_bytes: float | None, run: NcuRun = NcuRun(), bare: bool = False) -> ProfileResult:
    """Counters of one call of ``kernel`` (a registered name or ``module:function``; with
    ``bare``, the workload's bare op instead) at ``cfg`` on ``case``'s inputs, under ncu as
    ``run`` says. ``min_read_bytes``: the fewest bytes its workload must read
    (``Workload.min_read_bytes``), the bound a DRAM read count below is impossible by; required
    for a kernel, None for the bare op (never judged by it)."""
    if not bare and min_read_bytes is None:
        raise ValueError("profile: a kernel's counters need its workload's min_read_bytes")
    seed, atol, rtol, numerics = case.seed, case.atol, case.rtol, case.numerics
    ncu, version, cwd, timeout_s = run.path or counters.ncu_path(), run.version, run.cwd, run.timeout_s
    if not name and not kernel:
        raise ValueError("profile needs a kernel, or a name for the range of the bare op")
    name = name or str(kernel).rsplit(":", 1)[-1]
    if "/" in name or "@" in name:
        raise UserError(f"kernel name {name!r} cannot name an NVTX range filter ('/' and '@' are ncu's separators)")
    with tempfile.TemporaryDirectory(prefix="bench-ncu-") as tmp:
        log, spec_path, result_path = (Path(tmp) / n for n in ("ncu.csv", "spec.json", "result.json"))
        spec_path.write_text(json.dumps({
            "config": cfg.as_dict(), "kernel": kernel, "name": name, "seed": seed, "atol": atol, "rtol": rtol,
            "numerics": numerics or {}, "calls": PROFILE_CALLS, "result": str(result_path), "bare": bare}))
        cmd = [ncu, *counters.ncu_args(str(log), name), sys.executable, "-m", "harness.execution.profile_worker",
               str(spec_path)]
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
        except subprocess.TimeoutExpired:
            return ProfileResult(cfg, name, error=f"ncu did not finish within {timeout_s:.0f} s", l2_bytes=l2_bytes,
                                 ncu_version=version)
        text = log.read_text(errors="replace") if log.exists() else ""
        perm = counters.counter_error("\n".join([text, res.stdout, res.stderr]))
        if perm:
            raise UserError(f"ncu cannot read the GPU's performance counters ({perm}): allow profiling for this "
                            f"user (NVreg_RestrictProfilingToAdminUsers=0) or run as an administrator")
        if res.returncode != 0 or not result_path.exists():
            tail = " | ".join((res.stderr or text).strip().splitlines()[-ERROR_TAIL_LINES:])
            return ProfileResult(cfg, name, error=f"the profiled worker failed (exit {res.returncode}): {tail}",
                                 l2_bytes=l2_bytes, ncu_version=version)
        output_check = json.loads(result_path.read_text())["output_check"]
    # No table at all: ncu profiled nothing (its log says "No kernels were profiled").
    launches = counters.parse_csv(text) if counters.has_table(text) else []
    inside = tuple(launch for launch in launches if counters.in_range(launch, name))
    per_call = counters.per_call(list(inside), PROFILE_CALLS)
    error = None if inside else (f"ncu profiled no kernel launch inside the NVTX range "
                                 f"{counters.nvtx_range(name)!r}: the call launched no kernel ncu can see")
    impossible = None if min_read_bytes is None else \
        counters.counter_impossible(per_call["dram_read_bytes"], min_read_bytes, l2_bytes)  # None: the bare op
    return ProfileResult(cfg, name, launches=inside, per_call=per_call, impossible=impossible,
                         output_check=output_check, error=error, l2_bytes=l2_bytes, ncu_version=version,
                         outside_range=len(launches) - len(inside))
