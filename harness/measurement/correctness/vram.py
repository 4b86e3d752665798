"""Device bytes the checks need at their peak, for the VRAM model (measurement/memory.py)."""

from __future__ import annotations

import math

from harness.measurement.correctness.figures import CHECKSUM_BLOCK, COMPARE_CHUNK_ELEMS_CUDA, table_bytes


def compare_bytes(n_elems: int, fused: bool = False) -> int:
    """Peak bytes of compare()'s temporaries on an output of ``n_elems``. The torch path's
    float64 ones (8 bounds its ~6 live): one block, which is the whole output when that is
    smaller than a block (a decode output of 4096 elements needs 256 KiB, not the full GPU
    block's 512 MiB); the one-pass table's (``fused``: a GPU with Triton) are its rows."""
    if fused:
        return table_bytes(n_elems)
    return 8 * 8 * min(n_elems, COMPARE_CHUNK_ELEMS_CUDA)


def checksum_bytes(n_elems: int, fused: bool = False) -> int:
    """Peak bytes of checksum()'s int64 temporaries on a tensor of ``n_elems``: one block's
    bits widened to int64, its position weights and their product (the reference memo
    checksums each input it is asked about; the gate checksums each output); the one pass's
    (``fused``) are its blocks' two sums."""
    if fused:
        return 2 * 8 * -(-n_elems // CHECKSUM_BLOCK)
    return 3 * 8 * min(n_elems, COMPARE_CHUNK_ELEMS_CUDA)


def judge_bytes(cfg, workload, fused: bool = False) -> int:
    """Peak bytes of judging a call's outputs once its inputs and the outputs are alive: the
    float64 reference while it is computed (reference_bytes, its outputs included), then every
    output's float64 reference beside compare()'s blocks (one output compared at a time,
    bounded here by all of them), or the checksum of the largest input or of the outputs;
    these never coexist (the reference's scratch is freed before compare runs). From the
    workload's memory declaration: ``reference_bytes``, its outputs' and inputs' elements."""
    n_out = _elems(workload.outputs(cfg), cfg)
    ref_out = 8 * n_out
    return max(workload.reference_bytes(cfg), ref_out + compare_bytes(n_out, fused),
               ref_out + checksum_bytes(max(n_out, workload.input_elems(cfg)), fused))


def _elems(tensors, cfg) -> int:
    return sum(math.prod(t.shape_of(cfg)) for t in tensors)


def gate_bytes(cfg, workload, n_kernels: int = 1, fused: bool = False) -> int:
    """Peak device bytes of gate_kernels() at ``cfg`` for ``n_kernels`` gated together, for the
    VRAM model: three sets of inputs (first calls, pristine copies, second calls), every
    kernel's first-call output (kept until the shared reference exists), the second call's
    output and its stream snapshot, one more output, a bool mask, and judging an output
    (``judge_bytes``; ``fused``: compare() takes the one-pass table). The kernel's own extra
    memory (KernelSpec.extra_bytes) comes on top."""
    out = workload.output_bytes(cfg)
    bool_mask = _elems(workload.outputs(cfg), cfg)  # one full-size bool temporary at a time (bit comparisons)
    return 3 * workload.input_bytes(cfg) + (n_kernels + 3) * out + bool_mask + judge_bytes(cfg, workload, fused)
