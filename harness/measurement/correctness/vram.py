"""Device bytes the checks need at their peak, for the VRAM model (measurement/memory.py)."""

from __future__ import annotations

import math

from harness.measurement.correctness.figures import COMPARE_CHUNK_ELEMS_CUDA
from harness.measurement.reference import reference_bytes
from harness.workloads import Config


def compare_bytes(n_elems: int) -> int:
    """Peak bytes of compare()'s float64 temporaries (8 bounds its ~6 live) on an output of
    ``n_elems``: one block, which is the whole output when that is smaller than a block
    (a decode output of 4096 elements needs 256 KiB, not the full GPU block's 512 MiB)."""
    return 8 * 8 * min(n_elems, COMPARE_CHUNK_ELEMS_CUDA)


def gate_bytes(cfg: Config, n_kernels: int = 1) -> int:
    """Peak device bytes of gate_kernels() at ``cfg`` for ``n_kernels`` gated together, for the
    VRAM model: three sets of q, k, v (first calls, pristine copies, second calls), every
    kernel's first-call output (kept until the shared reference exists), the second call's
    output and its stream snapshot, one more output, a bool mask, the reference and
    compare()'s blocks. The kernel's own extra memory (KernelSpec.extra_bytes) comes on top."""
    qs, ks, _ = cfg.shapes()
    q = math.prod(qs) * cfg.elem_bytes
    kv = 2 * math.prod(ks) * cfg.elem_bytes
    bool_mask = math.prod(qs)  # one full-size bool temporary at a time (bit comparisons)
    return 3 * (q + kv) + (n_kernels + 3) * q + bool_mask + reference_bytes(cfg) + compare_bytes(math.prod(qs))
