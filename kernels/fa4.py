"""FlashAttention-4 (the CuTe-DSL kernels of ``flash-attn-4``) as a peer candidate.

A peer is a kernel a user would pick instead of writing their own: measured in the same
run, through the same gate and timing, it shows how far a candidate is from the best
available. FlashAttention-4 is an optional extra (``pip install -e ".[peers]"``; on a
machine without a package registry, scripts/fa4_wheelhouse.sh). Where it is not installed,
or the GPU is older than sm_90 (its Hopper and Blackwell paths are the ones measured here),
the kernel reports why and a line that names it is refused with that reason.

Destination passing without a copy: FA4 takes (B, N, H, D) tensors with any 16-byte-aligned
strides and a contiguous last dimension, and an ``out`` of the same layout. The harness's
(B, H, N, D) tensors viewed with ``transpose(1, 2)`` are exactly that, so q, k, v and out go
in as views: no layout conversion, nothing copied, inside or outside the timed call.
``out=`` exists only on FA4's internal ``_flash_attn_fwd`` (the public ``flash_attn_func``
allocates its output), so the extra pins the version this was written against.
"""

from __future__ import annotations

from harness import kernel

_HALF = ("float16", "bfloat16")
# The release whose internal forward (``_flash_attn_fwd(..., out=)``) this module calls;
# pyproject's `peers` extra pins it.
FA4_VERSION = "4.0.0b36"
INSTALL = f'pip install -e ".[peers]": flash-attn-4 {FA4_VERSION}; offline, scripts/fa4_wheelhouse.sh'
# FA4's forward paths: sm_90 (Hopper) and sm_100/110 (Blackwell datacenter); its sm_80 and
# sm_120 paths exist but are not the FlashAttention-4 design this peer stands for.
MIN_CAPABILITY = (9, 0)
HEAD_DIM_MIN, HEAD_DIM_MAX, HEAD_DIM_ALIGN = 8, 128, 8  # within both architectures' ranges


def fa4_available(device: str) -> str | None:
    """Why FA4 cannot run on ``device`` here (an older GPU), or None."""
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (none is visible)"
    cap = torch.cuda.get_device_capability()
    if cap < MIN_CAPABILITY:
        return (f"needs an sm_{MIN_CAPABILITY[0]}{MIN_CAPABILITY[1]}+ GPU (FlashAttention-4's Hopper/Blackwell "
                f"kernels); this one is sm_{cap[0]}{cap[1]}")
    return None


def fa4_supports(cfg) -> str | None:
    d = cfg.head_dim
    if not (HEAD_DIM_MIN <= d <= HEAD_DIM_MAX and d % HEAD_DIM_ALIGN == 0):
        return (f"head_dim {d} not supported (fa4 here: {HEAD_DIM_MIN}-{HEAD_DIM_MAX}, a multiple of "
                f"{HEAD_DIM_ALIGN})")
    if cfg.kv_heads < 1 or cfg.heads % cfg.kv_heads:
        return f"heads {cfg.heads} is not a multiple of kv_heads {cfg.kv_heads}"
    if cfg.causal and cfg.q_len > cfg.seq_len:
        return "causal attention with more queries than keys"
    return None


def fa4_scratch_bytes(cfg) -> int:
    """An upper bound, not an exact count: FA4 keeps no log-sum-exp without gradients, and
    what it does allocate (its tile scheduler's semaphore and metadata) is a few KiB that
    depend on its internal choices; one float32 per query row covers them, so the VRAM model
    is never short."""
    return cfg.batch * cfg.heads * cfg.q_len * 4


@kernel("fa4", workloads=("attention", "decode"), dtypes=_HALF, devices=("cuda",),
        requires=("flash_attn.cute",), install=INSTALL, available=fa4_available,
        memory=fa4_scratch_bytes, supports=fa4_supports,
        numerics={"library": f"flash-attn-4 {FA4_VERSION} (CuTe DSL)",
                  "qk": "WGMMA/UMMA, float32 accumulate", "softmax": "online, float32, exp2",
                  "pv": "P rounded to the input dtype, float32 accumulate",
                  "layout": "(B, N, H, D) views of the harness's tensors (transpose(1, 2)); no copy"})
def fa4(q, k, v, out, *, causal, scale):
    """FlashAttention-4 forward (flash-attn-4, CuTe DSL), written straight into ``out``."""
    from flash_attn.cute.interface import _flash_attn_fwd

    _flash_attn_fwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale,
                    causal=bool(causal), out=out.transpose(1, 2))
