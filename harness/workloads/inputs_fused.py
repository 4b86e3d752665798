"""The input generator's draw in one pass on a GPU (Triton): the same standard normals as
``inputs._normals``, element for element, written straight into the tensor in its dtype.

The torch path runs some twenty elementwise kernels per 4 Mi-element chunk over int64 and
float64 temporaries; a config draws its inputs thirty-odd times (the gate's cases, the
timing's refreshed contents, the checks' regenerated ones, the rechecks): on the H200 about a
second per flash-h200-v2 config (issue 32). One pass keeps everything in registers.

Exactness: the same operations in the same order, each rounded on its own (launched with
``enable_fp_fusion=False``: no product is contracted into an FMA that torch's separate
kernels would not make): splitmix64 in unsigned 64-bit arithmetic (wrapping, logical
shifts, as the torch path's masked arithmetic shifts), Box-Muller in float64 through
libdevice's ``log`` and ``cos`` (what torch's CUDA kernels call) and an IEEE square root, the
float32 rounding, the family's scale and shift in float32, the rounding to the dtype. The
float64 constants come from memory: a Python float argument arrives as float32.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Elements per program: enough per thread to hide the float64 math's latency.
BLOCK = 1024


@triton.jit(do_not_specialize=["n"])
def _draw(out_ptr, n, key_ptr, consts_ptr, affine_ptr, AFFINE: tl.constexpr, BLOCK: tl.constexpr):
    half = tl.load(consts_ptr + 0)       # 0.5
    two_m32 = tl.load(consts_ptr + 1)    # 2^-32
    minus_two = tl.load(consts_ptr + 2)  # -2.0
    turn = tl.load(consts_ptr + 3)       # 2π·2^-32, rounded once (as the torch path's Python float)
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    # Element i's counter is i + 1 (torch.arange(start + 1, ...) over the chunks), times
    # splitmix64's increment, plus the stream's key; then its finalizer: all modulo 2^64. The
    # key and the three multipliers come from memory as int64 (a literal past 2^63 is not one).
    key = tl.load(key_ptr + 0).to(tl.uint64, bitcast=True)
    golden = tl.load(key_ptr + 1).to(tl.uint64, bitcast=True)
    mix1 = tl.load(key_ptr + 2).to(tl.uint64, bitcast=True)
    mix2 = tl.load(key_ptr + 3).to(tl.uint64, bitcast=True)
    z = (offs + 1).to(tl.uint64, bitcast=True) * golden + key
    z = (z ^ (z >> 30)) * mix1
    z = (z ^ (z >> 27)) * mix2
    z = z ^ (z >> 31)
    u1 = (z >> 32).to(tl.float64)
    u1 = (u1 + half) * two_m32
    r = tl.sqrt(tl.log(u1) * minus_two)  # float64: PTX has only the IEEE sqrt.rn.f64
    theta = (z & 0xFFFFFFFF).to(tl.float64)
    x = (tl.cos(theta * turn) * r).to(tl.float32)
    if AFFINE:
        x = x * tl.load(affine_ptr + 1)  # std, then mean: two float32 roundings
        x = x + tl.load(affine_ptr + 0)
    if out_ptr.dtype.element_ty == tl.float32:
        tl.store(out_ptr + offs, x, mask=live)
    else:  # float16 / bfloat16: round to nearest even, as torch's cast (named: the interpreter would truncate)
        tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=live)


def fill_normal_(t, key: int, mean_std: tuple[float, float] | None, consts, multipliers) -> None:
    """Write stream ``key``'s normals into contiguous ``t`` (mean_std: float32 shift and
    scale); ``consts``: the float64 constants tensor on t's device (``inputs._constants``);
    ``multipliers``: splitmix64's increment and two multipliers as signed int64."""
    import torch

    flat = t.view(-1)
    n = flat.numel()
    if n == 0:
        return
    affine = torch.tensor(mean_std if mean_std is not None else (0.0, 1.0), dtype=torch.float32, device=t.device)
    keys = torch.tensor([key - (1 << 64) if key >= 1 << 63 else key, *multipliers], dtype=torch.int64, device=t.device)
    _draw[(triton.cdiv(n, BLOCK),)](flat, n, keys, consts, affine, AFFINE=mean_std is not None, BLOCK=BLOCK,
                                    enable_fp_fusion=False)
