"""Measured ceilings of a device: copy bandwidth and dense matmul rate, and the reductio.

A result is only believable below what the machine can do. The ceilings are *measured*
(datasheet numbers are leads, not limits): a device-to-device copy of a buffer far larger
than L2, counting bytes read plus bytes written, and dense matmuls of random data (never
zeros: zeros run faster than real data) per dtype. ``impossible`` turns them into a
reductio: the llama-bench decode artifact's 9.6 TB/s "effective L2 rate" on a GPU whose fabric cannot do it was
computable before any kernel was written, and would have saved a session.

Every rate is the median of a fixed number of calls timed back to back through the timing
path's ``Timer`` (CUDA events on a GPU; host time on the CPU, on small sizes: fast, for tests
and for honest CPU rows, GFLOP/s-class numbers stored in the same units).

Ledger form: ``Ceilings.to_row()`` is a flat JSON dict (``device``, ``fingerprint``,
``copy_gbps``, ``matmul_tflops``{dtype: TFLOP/s}, ``method``); ``Ceilings.from_row`` reads
one back (extra ledger keys such as ``seq`` or ``hash`` are ignored). On a GPU with NVML,
``method["sm_mhz"]`` holds the mean SM clock of each matmul's timed calls: a matmul ceiling
is a rate at that clock, and its work per cycle (``per_mhz``) bounds a clock-normalised bar
(governance/reductio.py). Rows measured before it hold none.
"""

from __future__ import annotations

import functools
import math
import platform
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from harness.vocab.devices import Fingerprint
from harness.vocab.payload import Payload
from harness.errors import UserError
from harness.measurement.clocks import open_monitor, window_clocks
from harness.measurement.timing.timers import CudaEventTimer, HostTimer, Timer, median_ms
from harness.measurement.device import detect_device, driver_version
from harness.measurement.numerics import apply

# A result more than this fraction above a measured ceiling is impossible, not fast.
# Measured ceilings are achievable rates, not hardware peaks: the datasheet peaks sit up to
# a quarter above them, and a read-mostly kernel can beat a copy's read+write rate by a few
# percent. 30% sits above both, so only a number beyond the hardware's own peak is called
# impossible (figures: docs/measurement.md#device-ceilings). A measured ceiling more than this
# above its datasheet peak is impossible too (``implausible``): that peak is the hardware's limit
# at its top clock, which no correct measurement exceeds; the same margin keeps that check to the
# plainly impossible (the H200's measured ceilings sit at 0.76-0.89 of its datasheet peaks).
IMPOSSIBLE_MARGIN = 0.30

# Datasheet peaks by GPU name (a fingerprint's ``name``, exactly). A report draws them beside the
# measured ceilings, named as datasheet figures; results are judged against the measured ceilings
# (``impossible``), and the measured ceilings against these (``implausible``): no measurement of a
# device goes beyond its hardware's peak. NVIDIA H200 SXM datasheet: HBM3e 4.8 TB/s; dense
# tensor-core FP16/BF16 989 TFLOP/s (1979 is with 2:4 sparsity), TF32 494, FP32 (no tensor cores)
# 67. NVIDIA H100 SXM5 (80 GB HBM3) datasheet: 3.35 TB/s; the same tensor-core peaks (989 dense
# FP16/BF16, 494 TF32, 67 FP32). Keys as ``matmul_tflops``'s, plus DATASHEET_BANDWIDTH_KEY (the
# copy ceiling's bound: HBM traffic, read + write, as the copy counts it).
DATASHEET_BANDWIDTH_KEY = "memory_gbps"
DATASHEET_PEAKS = MappingProxyType({
    "NVIDIA H200": MappingProxyType({"memory_gbps": 4800.0, "float16": 989.0, "bfloat16": 989.0,
                                     "float32_tf32": 494.0, "float32": 67.0}),
    "NVIDIA H100 80GB HBM3": MappingProxyType({"memory_gbps": 3350.0, "float16": 989.0, "bfloat16": 989.0,
                                               "float32_tf32": 494.0, "float32": 67.0}),
})

# --- CUDA measurement sizes -------------------------------------------------------------
# 2 GiB source: ~35x the H200's 60 MB L2, so the copy streams HBM, not cache.
CUDA_COPY_BYTES = 2 * 1024**3
CUDA_COPY_REPS = 20
# 8192^3: large enough that cuBLAS runs at its steady-state rate (~1 ms in bf16 on an H200).
CUDA_MATMUL_N = 8192
CUDA_MATMUL_REPS = 10
CUDA_WARMUP = 3

# --- CPU measurement sizes (host timing; a whole measurement stays well under a second) --
CPU_COPY_BYTES = 64 * 1024**2
CPU_COPY_REPS = 7
# A CPU's matmul rate depends on the size far more than a GPU's: on the 2-core host (AMD EPYC,
# AVX512-BF16) bf16 torch.mm read 4.3 GFLOP/s at 256, 34 at 512 and 135 at 1024, and an honest
# bf16 torch_stack call ran at 170 GFLOP/s through batched matmuls: a ceiling measured at one
# small size was no ceiling, and the floor refused that honest baseline (2026-12-07). So each
# dtype grows through CPU_MATMUL_SIZES while one call takes under CPU_MATMUL_GROW_MS (fp16/bf16
# in scalar code, on CPUs without native support, stop small), and its ceiling is the best
# rate read. A size's calls then last at most 8x that limit: seconds in all on any CPU.
CPU_MATMUL_SIZES = (256, 512, 1024)
CPU_MATMUL_GROW_MS = 25.0
CPU_MATMUL_REPS = 5
CPU_WARMUP = 1

# Keys of ``matmul_tflops``: the three dtypes, plus float32 with TF32 tensor cores (CUDA only).
TF32_KEY = "float32_tf32"
MATMUL_KEYS = ("float16", "bfloat16", "float32", TF32_KEY)

# The rates a ceiling bounds (each a result metric with a ``*_frac``, vocab/metrics.py), in
# their units; ``Ceilings.bound`` gives each one's ceiling.
RATE_UNITS = MappingProxyType({"tflops": "TFLOP/s", "gbps": "GB/s", "kv_gbps": "GB/s"})


@dataclass(frozen=True, kw_only=True)
class CeilingsMethod(Payload):
    """A ceilings row's ``method``: how the rates were measured (timer, sizes, repetitions) and,
    on a GPU, the mean SM clock of each matmul's timed calls (``sm_mhz``, per dtype)."""

    timer: Any = None
    copy_bytes: Any = None
    copy_reps: Any = None
    matmul_n: Any = None
    matmul_sizes: Any = None
    matmul_reps: Any = None
    threads: Any = None
    data: Any = None
    sm_mhz: Any = None

    @property
    def clocks(self) -> Mapping:
        """``sm_mhz`` where it is a table of clocks, else none."""
        return self.sm_mhz if isinstance(self.sm_mhz, Mapping) else {}


@dataclass(frozen=True, kw_only=True)
class CeilingsRecord(Payload):
    """The measured fields of a ceilings row (or of ``Ceilings.to_row``), which ``Ceilings.from_row``
    reads; the row's other fields (its place in the chain, its env) are kept, unread."""

    device: Any = None
    fingerprint: Any = None
    copy_gbps: Any = None
    matmul_tflops: Any = None
    method: Any = None


@dataclass(frozen=True)
class Ceilings:
    """What one device measurably can do; rates in GB/s (1e9 B/s) and TFLOP/s (1e12/s)."""

    device: str                                  # "cuda" or "cpu"
    fingerprint: Mapping[str, object]            # device_fingerprint(): when it changes, re-measure
    copy_gbps: float                             # bytes read + bytes written per second
    matmul_tflops: Mapping[str, float]           # dtype (or TF32_KEY) -> dense matmul rate
    method: Mapping[str, object] = field(default_factory=dict)  # sizes, reps, timer

    def __post_init__(self):
        if self.device not in ("cuda", "cpu"):
            raise UserError(f"ceilings device must be 'cuda' or 'cpu', not {self.device!r}")
        if not (isinstance(self.copy_gbps, (int, float)) and self.copy_gbps > 0 and math.isfinite(self.copy_gbps)):
            raise UserError(f"ceilings copy_gbps must be a positive finite number, not {self.copy_gbps!r}")
        for k, v in dict(self.matmul_tflops).items():
            if k not in MATMUL_KEYS:
                raise UserError(f"ceilings matmul key {k!r} is not one of {', '.join(MATMUL_KEYS)}")
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise UserError(f"ceilings matmul_tflops[{k!r}] must be a positive finite number, not {v!r}")
        # Read-only views: the dataclass is frozen, its mappings are too.
        object.__setattr__(self, "fingerprint", MappingProxyType(dict(self.fingerprint)))
        object.__setattr__(self, "matmul_tflops", MappingProxyType({k: float(v) for k, v in dict(self.matmul_tflops).items()}))
        object.__setattr__(self, "method", MappingProxyType(dict(self.method)))
        object.__setattr__(self, "copy_gbps", float(self.copy_gbps))

    def tflops_ceiling(self, dtype: str) -> float | None:
        """The matmul ceiling a ``dtype`` result is judged against, or None if unmeasured.

        float32 is judged against the faster of plain fp32 and TF32: a float32 kernel may
        legitimately use TF32 tensor cores, and the reductio must only reject the impossible.
        """
        if dtype == "float32":
            vals = [self.matmul_tflops[k] for k in ("float32", TF32_KEY) if k in self.matmul_tflops]
            return max(vals) if vals else None
        return self.matmul_tflops.get(dtype)

    def bound(self, rate: str, dtype: str) -> tuple[float | None, str]:
        """The ceiling a ``dtype`` result's ``rate`` (a RATE_UNITS key) is held to, and what it
        is (None: unmeasured): byte rates the copy bandwidth; the FLOP rate the dtype's matmul
        ceiling (``tflops_ceiling``) on a GPU, and on a CPU the fastest dtype's, since CPU kernels
        upcast half types to float32 (or use AMX for bf16) and a short host measurement of one
        dtype can read far low. The reductio and the physical floor (floor.py) both hold rates here."""
        if rate not in RATE_UNITS:
            raise KeyError(f"no ceiling bounds rate {rate!r} (ceilings bound {', '.join(RATE_UNITS)})")
        if rate != "tflops":
            return self.copy_gbps, "copy bandwidth"
        if self.device == "cpu":
            fastest = max(self.matmul_tflops, key=self.matmul_tflops.get, default=None)
            return (None if fastest is None else self.matmul_tflops[fastest]), f"matmul rate (fastest: {fastest})"
        return self.tflops_ceiling(dtype), f"{dtype} matmul rate"

    def per_mhz(self, dtype: str) -> float | None:
        """The ``dtype`` matmul ceiling per MHz of the SM clock it was measured at (TFLOP/s per
        MHz: its work per cycle, which does not move with the clock), the larger of fp32 and
        TF32 for float32 as ``tflops_ceiling``; None where no clock was recorded (the CPU,
        rows measured before it)."""
        clocks = CeilingsMethod.from_row(self.method).clocks
        keys = ("float32", TF32_KEY) if dtype == "float32" else (dtype,)
        vals = [self.matmul_tflops[k] / float(clocks[k]) for k in keys if k in self.matmul_tflops
                and isinstance(clocks.get(k), (int, float)) and not isinstance(clocks.get(k), bool)
                and math.isfinite(clocks[k]) and clocks[k] > 0]
        return max(vals) if vals else None

    def fractions(self, rates: Mapping[str, float | None], dtype: str) -> dict:
        """A result's rates (sustained.rates) as fractions of these ceilings: TFLOP/s of the
        dtype's matmul rate, GB/s and K+V GB/s of the copy bandwidth (None where the rate or
        the ceiling is unknown). The sweep, the audit and the reductio all take them from here."""
        by = {"tflops": self.matmul_tflops.get(dtype), "gbps": self.copy_gbps, "kv_gbps": self.copy_gbps}
        return {f"{rate}_frac": rates.get(rate) / ceil if rates.get(rate) is not None and ceil else None
                for rate, ceil in by.items()}

    def matches(self, fingerprint: Mapping[str, object]) -> bool:
        """True when ``fingerprint`` (see device_fingerprint) is the one these were measured on."""
        return dict(self.fingerprint) == dict(fingerprint)

    def to_row(self) -> dict:
        """Flat JSON-ready dict for a ledger ``ceilings`` row."""
        return {
            "device": self.device,
            "fingerprint": dict(self.fingerprint),
            "copy_gbps": self.copy_gbps,
            "matmul_tflops": dict(self.matmul_tflops),
            "method": dict(self.method),
        }

    @classmethod
    def from_row(cls, row) -> "Ceilings":
        """Rebuild from ``to_row()`` output or a `ceilings` ledger row (ledger.rows.CeilingsRow)."""
        if not isinstance(row, Mapping):
            row = row.dump()
        held = CeilingsRecord.from_row(row)
        missing = [k for k in ("device", "fingerprint", "copy_gbps", "matmul_tflops") if not held.has(k)]
        if missing:
            raise UserError(f"not a ceilings row: missing {', '.join(missing)} "
                            f"(re-measure with `bench ceilings --force`)")
        try:
            copy = float(held.copy_gbps)
            mm = {str(k): float(v) for k, v in dict(held.matmul_tflops).items() if v is not None}
        except (TypeError, ValueError) as exc:
            raise UserError(f"ceilings row has a non-numeric rate ({exc}): re-measure with "
                            f"`bench ceilings --force`") from exc
        return cls(device=held.device, fingerprint=dict(held.fingerprint), copy_gbps=copy,
                   matmul_tflops=mm, method=dict(held.method or {}))


def impossible(rates: Mapping[str, float | None], ceilings: Ceilings, dtype: str,
               margin: float = IMPOSSIBLE_MARGIN, source: str = "") -> str | None:
    """Why a result is physically impossible on this device, or None if it is not.

    ``rates`` maps RATE_UNITS names to a result's rates (None: not measured): effective byte
    rates (e.g. K+V bytes over time for decode) against the copy bandwidth, the useful-FLOP rate
    against the matmul ceiling (``Ceilings.bound``). A result is impossible when a rate exceeds
    its ceiling by more than ``margin`` (a fraction: 0.30 = 30% above); the reason names the rate,
    the ceiling and ``source`` (where the ceilings came from: the ceilings row).
    """
    if margin < 0:
        raise UserError(f"impossible(): margin must be >= 0, not {margin}")
    limit = 1.0 + margin
    odd, over = [], {}
    for rate, value in rates.items():
        ceil, what = ceilings.bound(rate, dtype)  # KeyError: a rate no ceiling bounds
        unit = RATE_UNITS[rate]
        if value is None:
            continue
        if not math.isfinite(value):
            odd.append(f"{rate} {value} is not finite")
        elif ceil is not None and value > ceil * limit:
            over[rate] = f"{rate} {value:.4g} {unit} is {value / ceil:.2f}x the measured {what} {ceil:.4g} {unit}"
    if over:
        moved = any(rate != "tflops" for rate in over)
        work = " and ".join(w for w, hit in (("FLOPs", "tflops" in over), ("bytes", moved)) if hit)
        fix = (f"count the {work} again, check for cache-resident data or skipped work" if moved else
               f"count the {work} again or check for skipped work")
        where = f"the ceilings of {source}; " if source else ""
        odd.append("; ".join(over.values()) + f" ({where}more than {limit:.2f}x is impossible: {fix})")
    return "; ".join(odd) if odd else None


def implausible(ceilings: Ceilings, margin: float = IMPOSSIBLE_MARGIN) -> str | None:
    """Why ``ceilings`` cannot be what their device measured, or None: a copy or matmul ceiling
    above the device's datasheet peak (DATASHEET_PEAKS) by more than ``margin`` — a measurement
    no hardware of that name can produce (a lying timer, or an edited row). Devices without a
    datasheet entry (every CPU) are not judged here; their ceilings face the rates the sweep
    measures (``impossible``, for every arm)."""
    name = Fingerprint.of(ceilings.fingerprint).name
    peaks = DATASHEET_PEAKS.get(str(name)) if ceilings.device == "cuda" else None
    if not peaks:
        return None
    limit = 1.0 + margin
    measured = [("copy bandwidth", ceilings.copy_gbps, peaks.get(DATASHEET_BANDWIDTH_KEY), "GB/s"),
                *((f"{k} matmul rate", v, peaks.get(k), "TFLOP/s") for k, v in sorted(ceilings.matmul_tflops.items()))]
    reasons = [f"its {what} {value:.4g} {unit} is {value / peak:.2f}x the {name} datasheet's {peak:.4g} {unit}"
               for what, value, peak, unit in measured if peak is not None and value > peak * limit]
    if not reasons:
        return None
    return "; ".join(reasons) + f" (more than {limit:.2f}x a datasheet peak is impossible)"


def device_fingerprint(device: str | None = None) -> dict:
    """What identifies a measuring setup: when any of it changes, measure the ceilings again.

    name (GPU or CPU model), driver, CUDA runtime of torch and torch version.
    """
    import torch

    if device is None:
        device = detect_device()
    if device == "cuda":
        return {"device": "cuda", "name": torch.cuda.get_device_name(torch.cuda.current_device()),
                "driver": driver_version(), "cuda": torch.version.cuda, "torch": torch.__version__}
    if device != "cpu":
        raise UserError(f"unknown device {device!r}: use 'cuda' or 'cpu'")
    return {"device": "cpu", "name": _cpu_name(), "driver": None, "cuda": None, "torch": torch.__version__}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for entry in f:
                if entry.lower().startswith("model name"):
                    return entry.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_ceilings(device: str, *, timer: Timer | None = None) -> Ceilings:
    """Measure copy bandwidth and matmul rates on ``device`` ('cuda' or 'cpu'), each the median
    of a fixed number of calls timed by ``timer`` (CUDA events on a GPU, host time on the CPU,
    as ``measure`` times; tests inject a virtual one)."""
    if device == "cuda":
        return _measure_cuda(timer)
    if device == "cpu":
        return _measure_cpu(timer)
    raise UserError(f"unknown device {device!r}: use 'cuda' or 'cpu'")


# What ``method["timer"]`` says for each timer (the words ceilings rows have always held).
TIMER_WORDS = {"cuda_event": "cuda events, median", "host": "perf_counter, median"}


def _timer_words(timer: Timer) -> str:
    return TIMER_WORDS.get(timer.name, f"{timer.name}, median")


def _random(shape, dtype, device):
    """Random normal data: never zeros, which run faster than real data and hide bugs."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _measure_cuda(timer: Timer | None) -> Ceilings:
    import torch

    if not torch.cuda.is_available():
        raise UserError("measure_ceilings('cuda'): torch sees no CUDA device")
    dev = torch.device("cuda", torch.cuda.current_device())
    timer = timer or CudaEventTimer(dev)
    n_elem = CUDA_COPY_BYTES // 4
    src = _random((n_elem,), torch.float32, dev)
    dst = torch.empty_like(src)
    ms = median_ms(timer, functools.partial(dst.copy_, src), reps=CUDA_COPY_REPS, warmup=CUDA_WARMUP, arm="copy")
    copy_gbps = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
    del src, dst

    n = CUDA_MATMUL_N
    tflops, spans = {}, {}

    # The SM clock each matmul ran at (NVML; none without it): the ceiling per cycle bounds a
    # clock-normalised bar whatever clock the card holds when the bar is checked.
    monitor, _ = open_monitor(str(dev))
    if monitor is not None:
        monitor.start(timer)
    try:
        for key, dtype, tf32 in (("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False),
                                 ("float32", torch.float32, False), (TF32_KEY, torch.float32, True)):
            # numerics.apply restores the caller's exact state (a bare allow_tf32 setter would
            # rewrite a 'medium' float32_matmul_precision to 'high').
            with apply({"allow_tf32": tf32}):
                a, b = _random((n, n), dtype, dev), _random((n, n), dtype, dev)
                c = torch.empty((n, n), dtype=dtype, device=dev)
                t0 = timer.now_s()
                ms = median_ms(timer, functools.partial(torch.mm, a, b, out=c), reps=CUDA_MATMUL_REPS,
                               warmup=CUDA_WARMUP, arm=f"matmul {key}")
                t1 = timer.now_s()
                tflops[key] = 2.0 * n**3 / (ms * 1e-3) / 1e12
                spans[key] = (t0, t1)
                del a, b, c
    finally:
        if monitor is not None:
            monitor.stop()
            monitor.source.close()
    clocks = {key: window_clocks(monitor.during(*span))[0] for key, span in spans.items()} if monitor else {}
    clocks = {k: v for k, v in clocks.items() if v is not None}
    torch.cuda.empty_cache()
    return Ceilings(device="cuda", fingerprint=device_fingerprint("cuda"), copy_gbps=copy_gbps,
                    matmul_tflops=tflops,
                    method={"timer": _timer_words(timer), "copy_bytes": CUDA_COPY_BYTES,
                            "copy_reps": CUDA_COPY_REPS, "matmul_n": n, "matmul_reps": CUDA_MATMUL_REPS,
                            "data": "randn", **({"sm_mhz": clocks} if clocks else {})})


def _measure_cpu(timer: Timer | None) -> Ceilings:
    import torch

    timer = timer or HostTimer()
    src = _random((CPU_COPY_BYTES // 4,), torch.float32, "cpu")
    dst = torch.empty_like(src)
    ms = median_ms(timer, functools.partial(dst.copy_, src), reps=CPU_COPY_REPS, warmup=CPU_WARMUP, arm="copy")
    copy_gbps = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
    del src, dst
    tflops, best_n, sizes = {}, {}, {}
    for key, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        for n in CPU_MATMUL_SIZES:
            a, b = _random((n, n), dtype, "cpu"), _random((n, n), dtype, "cpu")
            c = torch.empty((n, n), dtype=dtype)
            ms = median_ms(timer, functools.partial(torch.mm, a, b, out=c), reps=CPU_MATMUL_REPS, warmup=CPU_WARMUP,
                           arm=f"matmul {key} n{n}")
            rate = 2.0 * n**3 / (ms * 1e-3) / 1e12
            sizes.setdefault(key, []).append(n)
            if rate > tflops.get(key, 0.0):
                tflops[key], best_n[key] = rate, n
            del a, b, c
            if ms >= CPU_MATMUL_GROW_MS:
                break
    return Ceilings(device="cpu", fingerprint=device_fingerprint("cpu"), copy_gbps=copy_gbps,
                    matmul_tflops=tflops,
                    method={"timer": _timer_words(timer), "copy_bytes": CPU_COPY_BYTES,
                            "copy_reps": CPU_COPY_REPS, "matmul_n": best_n, "matmul_sizes": sizes,
                            "matmul_reps": CPU_MATMUL_REPS, "threads": torch.get_num_threads(),
                            "data": "randn"})
