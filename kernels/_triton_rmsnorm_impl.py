"""Triton code of ``rmsnorm_triton`` (kernels/triton_rmsnorm.py): one row per program.

A row is read in BLOCK-wide chunks twice (the sum of squares, then the normalisation; the
second read mostly hits L2 for rows up to a few MB): every element in float32, one rounding
of out. With a residual, the first pass writes residual_out = x + residual (rounded to the
dtype, as the next block reads it) and both passes normalise the float32 sum.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

# The widest chunk of a row one program holds (elements): a 16 KB float32 tile at 4 warps.
MAX_BLOCK = 4096
# Under the interpreter a narrow chunk, so tests cross chunk boundaries on small rows.
INTERPRET_BLOCK = 32
NUM_WARPS = 4


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def rmsnorm_kernel(X, R, Wt, Out, ROut, hidden, eps, BLOCK: tl.constexpr, RESIDUAL: tl.constexpr):
    """Row ``program_id`` of out (and residual_out)."""
    row = tl.program_id(0).to(tl.int64) * hidden
    offs = tl.arange(0, BLOCK)
    sq = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, hidden, BLOCK):
        ok = c + offs < hidden
        s = tl.load(X + row + c + offs, mask=ok, other=0.0).to(tl.float32)
        if RESIDUAL:
            s += tl.load(R + row + c + offs, mask=ok, other=0.0).to(tl.float32)
            tl.store(ROut + row + c + offs, s.to(ROut.dtype.element_ty), mask=ok)
        sq += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / hidden + eps)
    for c in range(0, hidden, BLOCK):
        ok = c + offs < hidden
        s = tl.load(X + row + c + offs, mask=ok, other=0.0).to(tl.float32)
        if RESIDUAL:
            s += tl.load(R + row + c + offs, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(Wt + c + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(Out + row + c + offs, (s * rstd * w).to(Out.dtype.element_ty), mask=ok)


def rmsnorm(x, weight, out, eps: float, residual=None, residual_out=None) -> None:
    """Launch one program per row of x (tokens, hidden)."""
    if x.device.type == "cpu" and not _interpreting():
        raise RuntimeError("rmsnorm_triton runs on a CPU only under TRITON_INTERPRET=1")
    tokens, hidden = x.shape
    block = INTERPRET_BLOCK if _interpreting() else min(MAX_BLOCK, triton.next_power_of_2(hidden))
    has_res = residual is not None
    rmsnorm_kernel[(tokens,)](x, residual if has_res else x, weight, out, residual_out if has_res else out,
                              hidden, eps, BLOCK=block, RESIDUAL=has_res, num_warps=NUM_WARPS)
