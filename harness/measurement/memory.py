"""The VRAM model: predict a config's peak before running it, skip what cannot fit.

Each kernel declares its own workspace (``KernelSpec.memory``: e.g. the stack's N×N
score and probability tensors in their real dtypes); this module adds what the harness
itself holds — inputs, outputs of every arm, rotation copies or the L2 flush buffer,
the gate's pristine copies and the chunked float64 reference — phase by phase, and
takes the largest phase. The sizes come from the workload's memory declaration
(``Workload.input_bytes``, ``output_bytes``, ``reference_bytes``, ``generation_bytes``). Result rows record the measured peak beside the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from harness.measurement.timing.policy import GRAPH_MAX_ROTATION_SLOTS, device_l2_bytes, flush_bytes, rotation_slots
from harness.measurement.correctness.checks import REFERENCE_MEMO_SIZE
from harness.measurement.correctness.figures import use_fused
from harness.measurement.correctness.vram import gate_bytes, judge_bytes

# Free memory held back from what a config may use: allocator fragmentation, the CUDA
# context and library workspaces (cuBLAS, cuDNN) that allocate outside torch's counter.
MEMORY_MARGIN = 0.05
F64 = 8
# torch allocates its cuBLAS workspace (32 MiB on Hopper) and a cuBLASLt workspace through
# the caching allocator on the first GEMM; they stay allocated, so every CUDA config's peak
# includes them. 34 MiB is what the H200 run showed (torch 2.11: measured − predicted on
# every small config of the example grid, 2026-11-29).
LIBRARY_WORKSPACE_BYTES = 34 * 2**20


@dataclass(frozen=True)
class KnownDevice:
    """A device a registration's grid must fit: its memory as torch reports it
    (``total_memory``) and its L2 (rotation slots and the flush buffer depend on it)."""

    name: str
    device: str  # "cuda" or "cpu"
    memory_bytes: int
    l2_bytes: int


# What `bench register` checks every grid point against: a point that no device here can
# hold (predicted peak above its memory less MEMORY_MARGIN) would be skipped on every
# machine, so it is refused before it is registered. GPU figures are those a bench run
# recorded in its rows' env (gpu_memory_bytes, l2_bytes); add a device the same way. The
# host entry bounds CPU-only lines: no host past it is considered.
KNOWN_DEVICES = (
    KnownDevice("NVIDIA H200", "cuda", 150_109_880_320, 62_914_560),
    KnownDevice("a 4 TiB host", "cpu", 4 * 2**40, 0),
)


@dataclass(frozen=True)
class MemoryPrediction:
    peak_bytes: int
    phase: str  # which phase decides the peak: "gate" or "timing"
    breakdown: dict


def timing_slots(cfg, policy, device: str, l2_bytes: int | None = None, *, workload) -> int:
    """How many input copies the timing rotates through: enough that the bytes each call
    touches (``workload.min_bytes``) exceed the L2 several times in hot mode, and in graph mode
    when that takes at most GRAPH_MAX_ROTATION_SLOTS copies; else one.
    The sweep allocates exactly this many, and the model predicts exactly this many."""
    if policy.mode not in ("hot", "graph") or device != "cuda":
        return 1
    l2 = device_l2_bytes(device) if l2_bytes is None else l2_bytes
    n = rotation_slots(int(workload.min_bytes(cfg)), l2)
    if policy.mode == "graph" and n > GRAPH_MAX_ROTATION_SLOTS:
        return 1
    return n


def predict(cfg, specs, policy, device: str, *, workload, l2_bytes: int | None = None) -> MemoryPrediction:
    """Predicted peak bytes allocated through torch while this config runs.

    ``specs[0]`` is the baseline; the rest are candidates. The control arm is the
    baseline again with its own output buffers.
    """
    fused = use_fused(device)  # compare()'s one-pass table: no float64 blocks
    out = workload.output_bytes(cfg)
    inputs = workload.input_bytes(cfg)
    ref_out = sum(math.prod(t.shape_of(cfg)) for t in workload.outputs(cfg)) * F64
    extras = [s.extra_bytes(cfg) for s in specs]
    firsts = [s.first_call_bytes(cfg) for s in specs]

    # Gate, while a kernel runs: three input sets (first calls, pristine copies, second
    # calls), every kernel's first-call output (the kernels are gated together, case by case,
    # and judged once the shared reference exists), the running call's output and its
    # snapshot, and the float64 reference output, + that kernel's workspace, with what its
    # first call of a shape adds (an autotuner's buffers: the gate calls each shape first).
    # While the reference runs no kernel workspace is alive: correctness.vram.gate_bytes
    # covers that phase (reference chunks, compare blocks).
    gate = max(3 * inputs + (len(specs) + 2) * out + ref_out + max(e + f for e, f in zip(extras, firsts)),
               gate_bytes(cfg, workload, len(specs), fused))

    n_arms = len(specs) + 1  # candidates + baseline + control
    cuda = device == "cuda"
    l2 = (device_l2_bytes(device) if cuda else 0) if l2_bytes is None else l2_bytes
    n_slots = timing_slots(cfg, policy, device, l2, workload=workload)
    timed_inputs = n_slots * inputs
    timed_outs = n_slots * n_arms * out
    flush = flush_bytes(l2) if (policy.mode == "cold" and cuda) else 0
    # A captured graph keeps each capture's workspace alive in its private pool.
    if policy.mode == "graph" and cuda:
        workspace = n_slots * (sum(extras) + extras[0])
    else:
        workspace = max(extras)
    # One copy per arm of the output of a randomly chosen timed call (checked after timing).
    spot = n_arms * out
    # The content refresh (timing/refresh.py): per arm, a copy of one call's output on new
    # content of each kind (in place, fresh buffers), kept for the checks after timing; and,
    # between calls, the generator's scratch and, but in graph mode (in place only), a new
    # input set drawn beside the slots (fresh buffers replace a slot's only once drawn; a
    # sham's is dropped).
    graph_pool = policy.mode == "graph" and cuda
    refresh_copies = (1 if graph_pool else 2) * n_arms * out  # kinds: in place, and fresh buffers but in graph mode
    refresh_draw = workload.generation_bytes(cfg, device) + (0 if graph_pool else inputs)
    # A kernel's workspace lives only during its call, the draw only between calls; a captured
    # graph's pool lives throughout.
    between = workspace + refresh_draw if graph_pool else max(workspace, refresh_draw)
    timing = timed_inputs + timed_outs + spot + refresh_copies + flush + between
    # The checks after timing hold the timed buffers (and a captured graph's pool). Checking
    # a timed output may regenerate the earlier content it was computed from (one more input
    # set) beside the spot and refresh copies; the recheck adds pristine input copies, two
    # output snapshots and a candidate's workspace during its call. Each keeps up to
    # REFERENCE_MEMO_SIZE references for the arms judged on the same inputs, and judges one
    # output at a time (judge_bytes: the reference, or compare's or checksum's blocks).
    held = timed_inputs + timed_outs + (n_slots * (sum(extras) + extras[0]) if graph_pool else 0)
    kept = (REFERENCE_MEMO_SIZE - 1) * ref_out
    judge = judge_bytes(cfg, workload, fused)
    checks = held + spot + refresh_copies + inputs + kept + judge
    recheck = held + inputs + 2 * out + kept + max(max(extras[1:] or [0]), judge)
    lib = LIBRARY_WORKSPACE_BYTES if cuda else 0
    # Inputs are drawn on the device (Workload.make_inputs): the gate draws into fresh buffers,
    # the recheck redraws into the timed ones while every arm's outputs are alive.
    generation = timed_inputs + timed_outs + workload.generation_bytes(cfg, device)
    phases = {"gate": gate + lib, "timing": timing + lib, "checks": max(checks, recheck) + lib,
              "generation": generation + lib}
    phase = max(phases, key=phases.get)
    breakdown = {"inputs_per_slot": inputs, "out": out, "n_slots": n_slots, "n_arms": n_arms,
                 "flush": flush, "spot_copies": spot, "refresh_copies": refresh_copies,
                 "refresh_draw": refresh_draw, "reference": judge, "kernel_workspace": dict(zip(
                     [s.name for s in specs], extras)), "first_call_workspace": dict(zip(
                     [s.name for s in specs], firsts)), "gate_phase": gate, "timing_phase": timing,
                 "checks_phase": checks, "recheck_phase": recheck, "generation_phase": generation, "library_workspace": lib}
    return MemoryPrediction(int(phases[phase]), phase, breakdown)


def unholdable(cfg, specs, policy, devices=KNOWN_DEVICES, *, workload) -> str | None:
    """Why no device in ``devices`` on which every kernel of ``specs`` runs can hold ``cfg``
    (which device comes closest, and by how much it falls short), or None if one can — or
    if no known device runs them all (nothing to say)."""
    best = None
    for d in devices:
        if not all(d.device in s.devices for s in specs):
            continue
        pred = predict(cfg, specs, policy, d.device, workload=workload, l2_bytes=d.l2_bytes)
        usable = int(d.memory_bytes * (1 - MEMORY_MARGIN))
        if pred.peak_bytes <= usable:
            return None
        if best is None or pred.peak_bytes - usable < best[0]:
            best = (pred.peak_bytes - usable, d, pred, usable)
    if best is None:
        return None
    short, d, pred, usable = best
    gib = 2**30
    return (f"needs a predicted {pred.peak_bytes / gib:.1f} GiB ({pred.phase} phase), {short / gib:.1f} GiB more "
            f"than the largest known device that runs its kernels holds ({d.name}: {usable / gib:.1f} GiB usable "
            f"after the {MEMORY_MARGIN:.0%} margin)")


def available_bytes(device: str) -> int:
    """Memory a config may use: free device memory (plus torch's idle cache) less the margin."""
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        idle_cache = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return int((free + idle_cache) * (1 - MEMORY_MARGIN))
    avail = _meminfo_available()
    return int(avail * (1 - MEMORY_MARGIN))


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for entry in fh:
                if entry.startswith("MemAvailable:"):
                    return int(entry.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def reset_peak(device: str) -> int:
    """Start a config's peak count; returns the bytes already allocated (0 on the CPU).

    Call it after ``release`` (garbage from earlier configs, buffers in reference cycles and
    captured graphs' closures, is gone then). torch's cuBLAS workspaces are released here, so
    each config allocates its own (LIBRARY_WORKSPACE_BYTES in the model). What is still allocated after
    that belongs to the caller, not to this config, and ``peak_bytes`` subtracts it: the
    model predicts the config's own peak (on the H200 a left-over 0.4-0.6 GB otherwise read
    as a -22% model error; a held workspace read as -12% on the example grid).
    """
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:  # absent: the held workspace is subtracted, the model over-predicts
            clear()
        torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.memory_allocated())
    return 0


def peak_bytes(device: str, held: int = 0) -> int | None:
    """This config's measured peak: the peak since ``reset_peak`` less the ``held`` bytes it
    returned (None on the CPU, where torch keeps no counter)."""
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated()) - held
    return None


def release(device: str) -> None:
    """Free what earlier work left: garbage in reference cycles, then, on a GPU, the
    allocator's cached blocks. A config calls it once, first (pipeline/run.py), before its
    budget reads the memory available and ``reset_peak`` starts its count (a full collection
    of a process holding torch and Triton takes ~0.1 s on the H200's host: once, not twice,
    per config; issue 32)."""
    import gc

    gc.collect()
    if not gc.get_freeze_count():
        # What the process holds before its first config (torch, Triton, CuPy and the rest:
        # 213k objects on a CPU host) is moved out of the collector's sight once: each later
        # collection, here and the interpreter's own, then walks only what the configs made
        # (0.06 s a collection before on that host, 0.14 s on the H200's under cProfile; µs
        # after). Frozen objects are still freed by reference count.
        gc.freeze()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()
