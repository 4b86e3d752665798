"""compare()'s block table in one pass on a GPU (Triton): the same thirteen figures per block
as the torch path in figures.py, read from the output and the float64 reference once; and
checksum()'s two sums (checks.py) in one read of the tensor's bits.

The torch path costs some forty elementwise kernels over float64 temporaries per block: on
the H200 13 ms per compare of a seq_len 4096 output (batch 8, 16 heads), most of it
launches and float64 traffic, and a config's checks compare every kernel's output several
times (issue 32: 1.75 s per config of flash-h200-v2). One pass reads 10 bytes per element.

Exactness: everything a check decides on is computed with the torch path's float64
operations in its order, each rounded on its own (launched with ``enable_fp_fusion=False``:
the tolerance bound is never contracted into an FMA that torch's two kernels would not
make), so the failing count, the worst element and every maximum are the same numbers; only
the two sums behind the relative Frobenius norm add in another order (last bits).
"""

from __future__ import annotations

import triton
import triton.language as tl

from harness.measurement.correctness.poison import POISON_BITS, as_bits, dtype_name

# The figures one program writes per block (the columns of figures.TABLE_COLS' table).
_COLS = 13


@triton.jit(do_not_specialize=["n"])  # n == 1 would otherwise be a constant
def _block_figures(bits_ptr, ref_ptr, table_ptr, bars_ptr, n,
                   POISON: tl.constexpr, VALUE: tl.constexpr, BLOCK: tl.constexpr):
    # The bars come as float64 from memory: a Python float argument would arrive as float32.
    atol = tl.load(bars_ptr + 0)
    rtol = tl.load(bars_ptr + 1)
    rel_floor = tl.load(bars_ptr + 2)
    tiny = tl.load(bars_ptr + 3)
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    live = offs < n
    bits = tl.load(bits_ptr + offs, mask=live, other=0)
    o = bits.to(VALUE, bitcast=True).to(tl.float64)
    r = tl.load(ref_ptr + offs, mask=live, other=0.0)
    finite = (o - o) == 0.0  # false for inf and NaN alike, as torch.isfinite
    unw = (bits == POISON) & live
    nonfin = (~finite) & (~unw) & live
    err = tl.where(finite & live, tl.abs(o - r), 0.0)
    bound = tl.abs(r) * rtol + atol  # two roundings: launched with fp fusion off
    fail = ((~finite) | (err > bound)) & live
    ratio = err / tl.maximum(bound, tiny)  # NaN where err and bound are both inf
    ratio = tl.where(live, ratio, -1.0)
    # torch's max and argmax put NaN above everything (the first NaN); tl.max drops it.
    nan_ratio = ratio != ratio
    first_nan = tl.min(tl.where(nan_ratio, offs, n), 0)
    ratio = tl.where(nan_ratio, -1.0, ratio)
    j = start + tl.argmax(ratio, 0, tie_break_left=True)
    top = tl.max(ratio, 0)
    has_nan = first_nan < n
    j = tl.where(has_nan, first_nan, j)
    top = tl.where(has_nan, float("nan"), top)
    rel = err / tl.maximum(tl.abs(r), rel_floor)
    row = table_ptr + pid.to(tl.int64) * 13  # _COLS
    ref_finite = tl.where(live, ((r - r) == 0.0).to(tl.int32), 1)
    tl.store(row + 0, tl.min(ref_finite, 0).to(tl.float64))
    tl.store(row + 1, tl.sum(unw.to(tl.int32), 0).to(tl.float64))
    tl.store(row + 2, tl.sum(nonfin.to(tl.int32), 0).to(tl.float64))
    tl.store(row + 3, tl.sum(fail.to(tl.int32), 0).to(tl.float64))
    tl.store(row + 4, tl.max(err, 0))
    tl.store(row + 5, tl.max(rel, 0))
    tl.store(row + 6, top)
    tl.store(row + 7, j.to(tl.float64))
    tl.store(row + 8, tl.min(tl.where(unw, offs, n), 0).to(tl.float64))
    tl.store(row + 9, tl.max(tl.where(unw, offs, -1), 0).to(tl.float64))
    tl.store(row + 10, tl.min(tl.where(nonfin, offs, n), 0).to(tl.float64))
    tl.store(row + 11, tl.sum(err * err, 0))
    tl.store(row + 12, tl.sum(r * r, 0))


def block_table(o_flat, r_flat, table, *, atol: float, rtol: float, rel_floor: float, block: int, warps: int):
    """Fill ``table`` (float64 on the device, one row of 13 per ``block`` elements: its rows
    make the grid), columns as figures._block_rows' (absolute indices, sentinels n and -1)."""
    import torch

    n = o_flat.numel()
    if table.shape[1:] != (_COLS,) or table.dtype != torch.float64 or table.shape[0] * block < n:
        raise ValueError(f"the block table must be float64 with {_COLS} columns and a row per {block} of {n} "
                         f"elements, got {tuple(table.shape)} {table.dtype}")
    name = dtype_name(o_flat.dtype)
    poison = POISON_BITS[name]
    width = 8 * o_flat.element_size()
    if poison >= 1 << (width - 1):  # the integer view is signed
        poison -= 1 << width
    bars = torch.tensor([float(atol), float(rtol), float(rel_floor), torch.finfo(torch.float64).tiny],
                        dtype=torch.float64, device=o_flat.device)
    _block_figures[(table.shape[0],)](as_bits(o_flat.contiguous()), r_flat.contiguous(), table, bars, n,
                                      POISON=poison, VALUE=getattr(tl, name), BLOCK=block, num_warps=warps,
                                      enable_fp_fusion=False)
    return table


@triton.jit(do_not_specialize=["n"])
def _checksum_blocks(bits_ptr, parts_ptr, n, WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
    # checks.checksum's sums over one block, in int64 (wrapping modulo 2^64, as torch's): the
    # bits sign-extended, each times its position's weight i·WEIGHT + 1, and the plain sum.
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    b = tl.load(bits_ptr + offs, mask=live, other=0).to(tl.int64)
    w = offs * WEIGHT + 1
    tl.store(parts_ptr + pid.to(tl.int64) * 2, tl.sum(b * w, 0))
    tl.store(parts_ptr + pid.to(tl.int64) * 2 + 1, tl.sum(b, 0))


def checksum_sums(bits, weight: int, block: int, warps: int):
    """(weighted sum, sum) of a flat integer tensor's values as int64 device scalars, ``block``
    elements per program (``warps`` warps), the blocks' parts added by torch (integer sums
    modulo 2^64: the torch path's values)."""
    import torch

    n = bits.numel()
    blocks = max(1, triton.cdiv(n, block))
    parts = torch.zeros(blocks, 2, dtype=torch.int64, device=bits.device)
    if n:
        _checksum_blocks[(blocks,)](bits, parts, n, WEIGHT=weight, BLOCK=block, num_warps=warps)
    return parts.sum(0)
