"""Triton code of ``gemm_triton`` (kernels/triton_gemm.py): out = gelu(x · wᵀ + bias), the
bias and GELU applied to the float32 accumulator tile in registers after the K loop, so the
pre-activation never reaches memory: x and w are read (tile by tile, L2 serving the reuse)
and out written once.

Tiles are fixed (no autotuning): on a GPU BLOCK_M × BLOCK_N = 128 × 128 with BLOCK_K 64,
8 warps, 3 stages, programs grouped GROUP_M rows of tiles at a time so neighbouring programs
share w tiles in L2; under the interpreter a small tile (it computes every lane on the CPU).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# GPU tiles, warps and pipeline stages: the usual Hopper/Ampere half-precision GEMM tile.
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
NUM_WARPS, NUM_STAGES = 8, 3
# Programs per group along M: GROUP_M row-tiles sweep the same w column-tiles together.
GROUP_M = 8
# Interpreter tiles: small, so a CPU test runs in seconds; 16 is tl.dot's least dimension.
INTERPRET_BLOCKS = (32, 32, 16)
# sqrt(2/pi) and the cubic coefficient of the tanh approximation; 1/sqrt(2) of the exact form.
SQRT_2_OVER_PI = 0.7978845608028654
TANH_CUBIC = 0.044715
INV_SQRT2 = 0.7071067811865476


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _gelu(z, TANH: tl.constexpr):
    """GELU of a float32 tile. The tanh form as z·sigmoid(2u) (0.5·(1 + tanh u) = sigmoid(2u)):
    no e^{2u} ratio, so the tails go to z and -0 instead of inf/inf."""
    if TANH:
        u = SQRT_2_OVER_PI * (z + TANH_CUBIC * z * z * z)
        r = z * tl.sigmoid(2.0 * u)
    else:
        r = 0.5 * z * (1.0 + tl.math.erf(z * INV_SQRT2))
    return r


@triton.jit
def gemm_bias_gelu_kernel(X, W, Bias, Out, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, TANH: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) tile of out: a K loop of tl.dot into float32, then bias + GELU.

    x (M, K) and w (N, K) are row-major: the w tile is loaded (BLOCK_N, BLOCK_K) and
    transposed in registers. UPCAST (interpreter + bfloat16): the interpreter multiplies bf16
    bit patterns in tl.dot (triton-lang/triton#11584), so operands go up to float32 exactly.
    IEEE (float32 lines): full float32 products, not TF32.
    """
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = X + offs_m[:, None] * K + offs_k[None, :]
    w_ptrs = W + offs_n[:, None] * K + offs_k[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=(offs_n[:, None] < N) & k_ok[None, :], other=0.0)
        if UPCAST:
            acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), input_precision="ieee")
        elif IEEE:
            acc += tl.dot(a, tl.trans(b), input_precision="ieee")
        else:
            acc += tl.dot(a, tl.trans(b))
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    # The epilogue: bias per column and GELU on the float32 accumulator, one rounding.
    bias = tl.load(Bias + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    r = _gelu(acc + bias[None, :], TANH)
    out_ptrs = Out + offs_m[:, None] * N + offs_n[None, :]
    tl.store(out_ptrs, r.to(Out.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def gemm_bias_gelu(x, w, bias, out, gelu: str) -> None:
    """Launch the fused kernel on x (M, K), w (N, K), bias (N,) into out (M, N)."""
    if x.device.type == "cpu" and not _interpreting():
        raise RuntimeError("gemm_triton runs on a CPU only under TRITON_INTERPRET=1")
    m, k = x.shape
    n = w.shape[0]
    bm, bn, bk = INTERPRET_BLOCKS if _interpreting() else (BLOCK_M, BLOCK_N, BLOCK_K)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    gemm_bias_gelu_kernel[grid](
        x, w, bias, out, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, TANH=gelu == "tanh",
        UPCAST=_interpreting() and x.dtype == torch.bfloat16, IEEE=x.dtype == torch.float32,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
