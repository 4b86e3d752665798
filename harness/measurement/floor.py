"""The physical floor of one timed call: the reductio applied to every call, not to a median.

A correct kernel must move the bytes of q, k and v (read) and out (written), less what a
cache could hold between calls in the timing mode, and must do its FLOPs. Neither goes
faster than the device's measured ceilings (ceilings.py): a call shorter than

    floor_ms = max((min_bytes - held_bytes) / copy ceiling, flops / matmul ceiling)

by more than the margin did not do the work, whatever its output says. The clock cannot
excuse it, so every sample counts: kept and dropped rounds, and the sustained phase.

What a cache can hold between calls (``held_bytes``), per timing mode:

- ``cold``: nothing. The flush before each call fills the L2 with dirty lines of its
  buffer; the inputs are read from HBM and every line the call brings in evicts (writes
  back) a flush line, so HBM moves at least read + write bytes.
- ``hot`` and ``graph``: up to the whole L2. Rotation past 4x L2 makes reuse unlikely, but
  the replacement policy is not strict LRU (and graph mode may replay one input copy), and
  a floor must only reject the impossible.
- ``host`` (CPU, every mode): up to every data cache of the machine (sysfs), the CPU's
  caches being large and never flushed between calls.
- the sustained phase: do_bench's flush before each call on a GPU (judged as ``cold``);
  none on the CPU (``host``).

Functions return frozen data; nothing here prints.
"""

from __future__ import annotations

import functools
import glob
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from harness.errors import UserError
from harness.measurement.ceilings import IMPOSSIBLE_MARGIN, Ceilings
from harness.measurement.timing.policy import device_l2_bytes

# A call is impossible when it is shorter than floor / (1 + margin).
# GPU: the rate reductio's margin. The ceilings are sustained medians; one call on a boosted
# clock, or a read-mostly call against a read+write copy rate, beats them by a few percent
# to ~20% (datasheet peaks sit up to a quarter above the measured rates), never by 30%.
# CPU: the ceilings are a 5-call (matmul) / 7-call (copy) median on a shared machine: on this
# project's 2-core CI host, repeated `measure_ceilings("cpu")` read one dtype's matmul rate
# 9x and another's 80x apart between runs, and an honest bf16 SDPA call reached 1.04x the
# best measured rate. Judging against the fastest dtype's rate removes the single-dtype
# outliers; a factor of 10 sits above what is left. A kernel that skips its work is faster by
# orders of magnitude at any shape worth timing, which a factor of 10 still catches.
CPU_FLOOR_MARGIN = 9.0
FLOOR_MARGIN = {"cuda": IMPOSSIBLE_MARGIN, "cpu": CPU_FLOOR_MARGIN}
# When the OS does not say how large the CPU's caches are: larger than any CPU's last-level
# cache (the largest server parts carry ~1.1 GiB of L3 per socket), so an honest kernel is
# never called impossible for want of a number; the row says the size was assumed.
CPU_CACHE_DEFAULT_BYTES = 2 * 1024**3
CPU_CACHE_GLOB = "/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*"


@dataclass(frozen=True)
class Floor:
    """The shortest a correct call of one config can take in one timing mode (ms)."""

    mode: str                    # timing mode the held bytes are for: cold, hot, graph or host
    min_bytes: float             # every input read + every output written (Workload.min_bytes)
    held_bytes: float            # what the cache may have held of them between calls
    cache_bytes: int             # the cache's size (GPU L2, or the CPU's caches)
    cache_source: str            # where cache_bytes came from
    copy_gbps: float
    bytes_floor_ms: float
    flops: float
    matmul_tflops: float | None  # None: no matmul ceiling measured for the dtype
    flops_floor_ms: float
    margin: float

    @property
    def floor_ms(self) -> float:
        return max(self.bytes_floor_ms, self.flops_floor_ms)

    @property
    def limit_ms(self) -> float:
        """Calls shorter than this are impossible: floor_ms / (1 + margin)."""
        return self.floor_ms / (1.0 + self.margin)

    def arithmetic(self) -> str:
        """The floor's derivation in one line, for a row's ``impossible``."""
        b = (f"({self.min_bytes:.6g} B - {self.held_bytes:.6g} B held in a {self.cache_bytes:.6g} B cache, "
             f"mode {self.mode}) / {self.copy_gbps:.4g} GB/s = {self.bytes_floor_ms:.4g} ms")
        f = (f"{self.flops:.6g} FLOP / {self.matmul_tflops:.4g} TFLOP/s = {self.flops_floor_ms:.4g} ms"
             if self.matmul_tflops else "no matmul ceiling")
        return (f"floor {self.floor_ms:.4g} ms = max(bytes {b}; FLOPs {f}), impossible below "
                f"{self.limit_ms:.4g} ms (margin {self.margin:g})")

    def as_dict(self) -> dict:
        return {"mode": self.mode, "min_bytes": self.min_bytes, "held_bytes": self.held_bytes,
                "cache_bytes": self.cache_bytes, "cache_source": self.cache_source, "copy_gbps": self.copy_gbps,
                "bytes_floor_ms": self.bytes_floor_ms, "flops": self.flops, "matmul_tflops": self.matmul_tflops,
                "flops_floor_ms": self.flops_floor_ms, "floor_ms": self.floor_ms, "margin": self.margin,
                "limit_ms": self.limit_ms}


def held_bytes(mode: str, cache_bytes: int, min_bytes: float) -> float:
    """Bytes of a call's traffic a cache may have held since an earlier call (module docstring)."""
    if mode == "cold":
        return 0.0
    if mode in ("hot", "graph", "host"):
        return float(min(cache_bytes, min_bytes))
    raise UserError(f"physical floor: unknown timing mode {mode!r}")


def matmul_ceiling(ceilings: Ceilings, dtype: str) -> float | None:
    """The FLOP rate a ``dtype`` call is held to (``Ceilings.bound``): the dtype's on a GPU, the
    fastest dtype's on a CPU."""
    return ceilings.bound("tflops", dtype)[0]


def floor(cfg, ceilings: Ceilings, mode: str, cache_bytes: int, cache_source: str,
          margin: float | None = None, *, workload) -> Floor:
    """The floor of one call of ``cfg`` timed in ``mode`` on the device ``ceilings`` describe,
    from the work the workload declares (``Workload.min_bytes``, ``Workload.flops``)."""
    margin = FLOOR_MARGIN[ceilings.device] if margin is None else margin
    if not (margin >= 0 and math.isfinite(margin)):
        raise UserError(f"physical floor: margin must be a finite number >= 0, not {margin}")
    if cache_bytes < 0:
        raise UserError(f"physical floor: cache_bytes must be >= 0, not {cache_bytes}")
    nbytes, flops = workload.min_bytes(cfg), workload.flops(cfg)
    held = held_bytes(mode, cache_bytes, nbytes)
    mm = matmul_ceiling(ceilings, cfg.dtype)
    return Floor(mode=mode, min_bytes=nbytes, held_bytes=held, cache_bytes=int(cache_bytes),
                 cache_source=cache_source, copy_gbps=ceilings.copy_gbps,
                 bytes_floor_ms=max(0.0, nbytes - held) / (ceilings.copy_gbps * 1e9) * 1e3,
                 flops=flops, matmul_tflops=mm,
                 flops_floor_ms=flops / (mm * 1e12) * 1e3 if mm else 0.0, margin=margin)


@dataclass(frozen=True)
class CallJudgement:
    """The fastest call of one arm in one phase, against that phase's floor."""

    arm: str
    phase: str                   # "rounds" or "sustained"
    fastest_ms: float | None     # None: no call timed
    which: str                   # where the fastest call was: "kept", "dropped" or "sustained"
    floor: Floor

    @property
    def headroom(self) -> float | None:
        """fastest / floor: above 1 is physically possible as measured; below 1/(1+margin) is not."""
        if self.fastest_ms is None or self.floor.floor_ms <= 0:
            return None
        return self.fastest_ms / self.floor.floor_ms

    @property
    def impossible(self) -> bool:
        return self.fastest_ms is not None and self.fastest_ms < self.floor.limit_ms

    def reason(self) -> str | None:
        if not self.impossible:
            return None
        secs = max(self.fastest_ms, 1e-12) * 1e-3  # a zero-time call: a finite, absurd rate
        rates = [f"{self.floor.flops / secs / 1e12:.4g} TFLOP/s"]
        if self.floor.min_bytes > self.floor.held_bytes:
            rates.append(f"{(self.floor.min_bytes - self.floor.held_bytes) / secs / 1e9:.4g} GB/s past the cache")
        return (f"{self.arm}: a timed call ({self.phase}, {self.which}) took {self.fastest_ms:.4g} ms, below "
                f"the physical floor: {self.floor.arithmetic()}; that call ran {' and '.join(rates)} "
                f"(check for skipped work or cached results)")

    def as_dict(self) -> dict:
        return {"arm": self.arm, "phase": self.phase, "fastest_ms": self.fastest_ms, "which": self.which,
                "floor_ms": self.floor.floor_ms, "limit_ms": self.floor.limit_ms, "headroom": self.headroom,
                "impossible": self.impossible}


def judge(arm: str, phase: str, samples: Mapping[str, Sequence[float]], fl: Floor) -> CallJudgement:
    """The fastest of every sample of ``arm`` (``samples``: "kept"/"dropped"/... -> ms) against ``fl``.

    A non-finite or non-positive sample is the fastest possible: a call that took no time is
    as impossible as one that took too little."""
    best, which = None, "none"
    for label, xs in samples.items():
        for x in xs:
            x = float(x)
            v = x if (math.isfinite(x) and x > 0) else 0.0
            if best is None or v < best:
                best, which = v, label
    return CallJudgement(arm=arm, phase=phase, fastest_ms=best, which=which, floor=fl)


def cache_bytes(device: str) -> tuple[int, str]:
    """(bytes, where from) of the cache that may hold data between calls on ``device``."""
    if device == "cuda" or device.startswith("cuda:"):
        return device_l2_bytes(device), "L2 (torch device properties)"
    if device != "cpu":
        raise UserError(f"unknown device {device!r}: use 'cuda' or 'cpu'")
    return cpu_cache_bytes()


@functools.lru_cache(maxsize=None)
def cpu_cache_bytes(pattern: str = CPU_CACHE_GLOB) -> tuple[int, str]:
    """Every data and unified cache of the machine (each shared cache once), from sysfs; when
    unreadable, CPU_CACHE_DEFAULT_BYTES, and the source says it was assumed."""
    caches: dict[tuple[str, str, str], int] = {}
    for d in glob.glob(pattern):
        try:
            level, kind, size, shared = (_read(f"{d}/{n}") for n in ("level", "type", "size", "shared_cpu_list"))
        except OSError:
            continue
        if kind not in ("Data", "Unified"):
            continue
        n = _size_bytes(size)
        if n is not None:
            caches[(level, kind, shared)] = n
    if caches:
        return sum(caches.values()), f"sysfs: {len(caches)} data/unified caches"
    return CPU_CACHE_DEFAULT_BYTES, "unknown (no cache sizes in sysfs): assumed CPU_CACHE_DEFAULT_BYTES"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _size_bytes(text: str) -> int | None:
    """sysfs cache sizes: '48K', '2048K', '32M' (or plain bytes)."""
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    t = text.strip().upper()
    try:
        return int(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else int(t)
    except ValueError:
        return None
