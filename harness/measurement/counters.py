"""Hardware counters from Nsight Compute: what a kernel call really read, wrote and ran on.

``ncu`` profiles a worker process (harness/execution/profile_worker.py) that wraps
exactly the kernel call in an NVTX range; ``--nvtx-include`` keeps the harness's own
work (input generation, poisoning, the float64 check) out of the counters. Its
``--csv --page raw --print-units base`` log has one header row of metric names, one row
of units, then one row per profiled kernel launch.

Per launch we keep the metrics of ``LAUNCH_METRICS``; per call they are reduced to the
``[verify]`` counters (``COUNTERS``):

* ``dram_read_bytes`` / ``dram_write_bytes`` / ``local_spill_bytes`` (local-memory loads
  plus stores through L1): summed over the call's launches;
* ``registers``: the most registers per thread of any launch;
* ``tensor_active``: tensor-pipe active fraction (0..1) of the SMs' active cycles, averaged
  over launches weighted by duration;
* ``duration_us``: summed launch durations (profiled: caches flushed, clocks as they are);
* ``launches``: kernel launches per call.

The reductio (``counter_impossible``): a correct kernel reads q, k and v; DRAM reads below
that, less what the L2 could have held, mean work was skipped (the llama-bench decode artifact:
its decode kernel read 7.9% of the cache).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
from dataclasses import dataclass

from harness.errors import UserError

# Our name -> ncu metric. Extending this list extends the launch table, nothing else.
LAUNCH_METRICS: dict[str, str] = {
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "registers": "launch__registers_per_thread",
    "local_load_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "local_store_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    # All tensor pipes together (HMMA and Hopper's warpgroup MMA); on the H200 ncu has no
    # separate GMMA metric and this equals the HMMA one.
    "tensor_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "duration_ns": "gpu__time_duration.sum",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "shared_mem_static_bytes": "launch__shared_mem_per_block_static",
    "shared_mem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
# The per-call counters ([verify] clause names; ``per_call`` reduces the launches to them) and
# what each can read at all, whatever the kernel (verify.possible judges clauses on these);
# tensor_active is a fraction of the SMs' active cycles.
COUNTER_RANGES: dict[str, tuple[float, float]] = {
    "dram_read_bytes": (0.0, math.inf), "dram_write_bytes": (0.0, math.inf),
    "registers": (0.0, math.inf), "local_spill_bytes": (0.0, math.inf),
    "tensor_active": (0.0, 1.0), "duration_us": (0.0, math.inf), "launches": (0.0, math.inf),
}
COUNTERS: tuple[str, ...] = tuple(COUNTER_RANGES)
# What ncu is asked to measure; the launch__* attributes come with every raw page.
MEASURED_METRICS = tuple(m for m in LAUNCH_METRICS.values() if not m.startswith("launch__"))
# The NVTX push/pop range the worker wraps each profiled call in (default domain); the
# trailing "/" makes ncu match a push/pop range rather than a start/end one.
NVTX_RANGE = "bench_kernel"
NVTX_COLUMN_PREFIX = "thread Domain:Push/Pop_Range"
# ncu is looked up on PATH; BENCH_NCU names the binary explicitly.
NCU_ENV = "BENCH_NCU"
# A reductio allowance: this many L2 sizes of q/k/v may have come from cache, not DRAM.
L2_ALLOWANCE = 1.0
# ncu's messages when it cannot read counters (permissions, unsupported device, in use).
COUNTER_ERRORS = ("ERR_NVGPUCTRPERM", "ERR_NVGPUCTRBUSY", "ERR_NVGPUCTRUNSUPPORTED",
                  "does not have permission to access NVIDIA GPU Performance Counters")

_UNIT_SCALE = {
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,  # durations kept in ns
    "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9,
}
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def ncu_path() -> str:
    """The ncu binary, or one line saying it is missing and how to point bench at it."""
    explicit = os.environ.get(NCU_ENV)
    if explicit:
        if shutil.which(explicit) is None:
            raise UserError(f"{NCU_ENV}={explicit} is not an executable ncu: fix the path or unset it")
        return explicit
    found = shutil.which("ncu")
    if found is None:
        raise UserError("Nsight Compute (ncu) not found on PATH: add the CUDA toolkit's bin directory to PATH "
                        f"or set {NCU_ENV} to the ncu binary — counters cannot be read without it")
    return found


def nvtx_range(kernel: str) -> str:
    """The NVTX range name the worker pushes around each profiled call of ``kernel``."""
    return f"{NVTX_RANGE}:{kernel}"


def ncu_args(log_file: str, kernel: str) -> list[str]:
    """ncu's options (the program follows): our metrics, NVTX filter, CSV raw page to a file.

    ``--clock-control none`` leaves the clocks as the driver sets them (ncu would otherwise
    lock them to base); ``--cache-control all`` flushes caches before each replay pass, so
    every launch's DRAM bytes are counted from a cold L2.
    """
    return ["--clock-control", "none", "--cache-control", "all", "--metrics", ",".join(MEASURED_METRICS),
            "--nvtx", "--nvtx-include", f"{nvtx_range(kernel)}/", "--csv", "--page", "raw", "--print-units", "base",
            "--log-file", log_file]


def counter_error(text: str) -> str | None:
    """ncu's own line saying it could not read counters, if ``text`` holds one."""
    for message in text.splitlines():
        if any(e in message for e in COUNTER_ERRORS):
            return message.strip()
    return None


@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch: ncu's ID, the kernel's name and our metrics (base units)."""

    id: int
    kernel: str
    metrics: dict  # LAUNCH_METRICS name -> float or None (ncu printed n/a or omitted it)
    grid: str | None
    block: str | None
    nvtx: str | None  # the push/pop range stack ncu saw at launch, where it printed one

    def as_dict(self) -> dict:
        return {"id": self.id, "kernel": self.kernel, "grid": self.grid, "block": self.block, "nvtx": self.nvtx,
                **self.metrics}


def _number(text: str) -> float | None:
    t = text.strip()
    if t in ("", "n/a", "N/A", "-"):
        return None
    if _THOUSANDS.match(t):
        t = t.replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def _scale(unit: str, metric: str) -> float:
    u = unit.strip().lower()
    if u in _UNIT_SCALE:
        return _UNIT_SCALE[u]
    if metric.endswith(("bytes_read.sum", "bytes_write.sum", "_ld.sum", "_st.sum", "duration.sum")):
        # A byte or time metric in a unit we cannot convert would be off by 1e3 silently.
        raise UserError(f"ncu printed {metric} in unit {unit!r}, which bench cannot convert: run with "
                        f"--print-units base (bench passes it; an old ncu may ignore it)")
    return 1.0


def has_table(text: str) -> bool:
    """Whether ncu's output holds a CSV table (a header row)."""
    return any(ln.startswith('"ID"') for ln in text.splitlines())


def parse_csv(text: str) -> list[Launch]:
    """Launches from ncu's ``--csv --page raw`` output (``==PROF==`` lines are skipped).

    Raises UserError when the output holds no header (ncu failed before profiling) or a
    requested metric is missing from it (a metric this ncu/GPU does not know).
    """
    out_rows = text.splitlines()
    start = next((i for i, ln in enumerate(out_rows) if ln.startswith('"ID"')), None)
    if start is None:
        err = counter_error(text)
        raise UserError(f"ncu could not read counters: {err}" if err else
                        "ncu wrote no CSV table: no kernel launch was profiled (see the ncu log above)")
    table = "\n".join(ln for ln in out_rows[start:] if not ln.startswith("=="))
    rows = list(csv.reader(io.StringIO(table)))
    header, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    missing = [m for m in LAUNCH_METRICS.values() if m not in col]
    if missing:
        raise UserError(f"ncu's table lacks metric(s) {', '.join(missing)}: this ncu or GPU does not provide them")
    nvtx_col = next((i for i, name in enumerate(header) if name.startswith(NVTX_COLUMN_PREFIX)), None)
    launches = []
    for row in data:
        if len(row) != len(header):
            raise UserError(f"ncu's table has a row of {len(row)} fields under a header of {len(header)}: the log is "
                            f"truncated or interleaved with other output")
        metrics = {}
        for ours, theirs in LAUNCH_METRICS.items():
            i = col[theirs]
            v = _number(row[i])
            metrics[ours] = None if v is None else v * _scale(units[i], theirs)
        launches.append(Launch(id=int(_number(row[col["ID"]]) or 0), kernel=row[col["Kernel Name"]], metrics=metrics,
                               grid=row[col["Grid Size"]] if "Grid Size" in col else None,
                               block=row[col["Block Size"]] if "Block Size" in col else None,
                               nvtx=row[nvtx_col].strip() if nvtx_col is not None else None))
    return launches


def in_range(launch: Launch, kernel: str) -> bool:
    """Whether ncu saw ``launch`` inside the worker's NVTX range for ``kernel``."""
    return launch.nvtx is not None and f":{nvtx_range(kernel)}:" in launch.nvtx


def _sum(launches, key) -> float | None:
    vals = [launch.metrics.get(key) for launch in launches]
    return None if not vals or any(v is None for v in vals) else float(sum(vals))


def per_call(launches: list[Launch], calls: int) -> dict:
    """The [verify] counters of one call, from the launches of ``calls`` profiled calls."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if not launches:
        return {**dict.fromkeys(COUNTERS), "launches": 0.0}
    dram_r, dram_w = _sum(launches, "dram_read_bytes"), _sum(launches, "dram_write_bytes")
    ld, st = _sum(launches, "local_load_bytes"), _sum(launches, "local_store_bytes")
    dur = _sum(launches, "duration_ns")
    regs = [launch.metrics.get("registers") for launch in launches]
    tensor = [(launch.metrics.get("tensor_pct"), launch.metrics.get("duration_ns")) for launch in launches]
    if any(t is None or d is None for t, d in tensor) or not dur:
        tensor_active = None
    else:
        tensor_active = sum(t * d for t, d in tensor) / dur / 100.0
    return {
        "dram_read_bytes": None if dram_r is None else dram_r / calls,
        "dram_write_bytes": None if dram_w is None else dram_w / calls,
        "registers": None if any(r is None for r in regs) else max(regs),
        "local_spill_bytes": None if ld is None or st is None else (ld + st) / calls,
        "tensor_active": tensor_active,
        "duration_us": None if dur is None else dur / calls / 1e3,
        "launches": len(launches) / calls,
    }


def counter_impossible(dram_read_bytes: float | None, min_read_bytes: float, l2_bytes: int | None,
                       allowance: float = L2_ALLOWANCE) -> str | None:
    """Why a call's DRAM reads are too few for any correct kernel, or None.

    Any correct kernel reads q, k and v; at most ``allowance`` × L2 of them could have been
    served from cache. Fewer DRAM bytes than that mean the kernel never read part of its
    inputs. Without a known L2 size nothing is claimed.
    """
    if dram_read_bytes is None or l2_bytes is None:
        return None
    floor = min_read_bytes - allowance * l2_bytes
    if dram_read_bytes >= floor:
        return None
    return (f"DRAM reads {dram_read_bytes / 1e6:.4g} MB per call, below the {min_read_bytes / 1e6:.4g} MB of q, k and v "
            f"any correct kernel reads less {allowance:g} × L2 ({l2_bytes / 1e6:.4g} MB) it could have cached: "
            f"part of the inputs was never read")


def counter_table(rows):
    """Profile rows of a ledger as a tidy pandas DataFrame: one row per kernel launch.

    Columns: seq, commit, config_key, the config fields, candidate, role, launch (index in
    the call), kernel, grid, block, the LAUNCH_METRICS columns, and the per-call
    ``impossible`` reason. Reports show it beside the timings.
    """
    import pandas as pd

    out = []
    for r in rows:
        if r.kind != "profile":
            continue
        for i, launch in enumerate(r.launches or []):
            out.append({"seq": r.seq, "commit": r.commit, "config_key": r.config_key,
                        **r.config, "candidate": r.candidate, "role": r.role, "launch": i,
                        **launch, "impossible": r.impossible})
    return pd.DataFrame(out)
