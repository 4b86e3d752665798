"""Triton FlashAttention-2 forward: the @triton.jit code and its launcher.

Imported lazily by ``kernels/triton_flash.py`` on the first call, so that ``import bench_kernels``
never pays for (or depends on) triton. The structure follows Triton's tutorial
``06-fused-attention.py`` (forward pass): one program per (BLOCK_M query rows, batch·head),
Q resident on chip, K/V streamed in BLOCK_N tiles, online softmax with m_i/l_i carried
across tiles in float32, exp2 with the log2(e)-prescaled scale, one reciprocal per row in
the epilogue, S/P never written to memory.

Three load paths share one kernel body (``DESC`` constexpr):

* ``DESC_POINTER`` (0): plain masked pointer loads. Portable: the interpreter (CPU) and any
  GPU; float32 always takes it (tf32 dots).
* ``DESC_HOST`` (1): host-built tensor descriptors (TMA on Hopper) over the flattened
  (rows, D) views, as in the tutorial.
* ``DESC_DEVICE`` (2): the same descriptors built in-kernel (``tl.make_tensor_descriptor``,
  needs ``triton.set_allocator``); the tutorial's choice for Hopper + warp specialization.
  Kept for explicit configs and comparison only: it measured slower than host
  descriptors, and with ``WARP_SPECIALIZE`` two configs gave wrong results under one Triton
  version (docs/measurement.md#design-notes-moved-from-code), so no shipped config uses either.

The descriptor paths are used only on sm_90 for float16/bfloat16 (HOPPER_CONFIGS). Their views are flattened
over batch·heads, so a tile that crosses the end of a head would read the next head's rows:
tiles that can cross (the last query block when N % BLOCK_M != 0, key tiles at the
sequence end when N % BLOCK_N != 0) fall back to masked pointer loads/stores, so every
path reads only this head's rows and never stores a query row >= N.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

try:  # Triton >= 3.4 (the device has 3.6, the local interpreter 3.9)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton: pointer path only
    TensorDescriptor = None

LOG2E = 1.4426950408889634  # softmax via exp2: exp(x·scale) = exp2(x·scale·log2 e)

DESC_POINTER, DESC_HOST, DESC_DEVICE = 0, 1, 2

HEAD_DIMS = (32, 64, 128)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# --------------------------------------------------------------------------- kernel


@triton.jit
def _load_rows(base, row0, n_rows, offs_r, offs_d, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    """Rows row0 + offs_r of a row-major (n_rows, HEAD_DIM) matrix; rows >= n_rows read 0."""
    rows = row0 + offs_r
    ptrs = base + rows[:, None] * HEAD_DIM + offs_d[None, :]
    if MASKED:
        return tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _bf16_rtne(x):
    """float32 -> nearest-even bfloat16 value, kept in float32 (interpreter bf16 emulation)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0, lo, hi, qk_scale,
                    offs_m, offs_n, offs_d, N_CTX,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                    DESC_LOADS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EMU_BF16: tl.constexpr):
    """Key tiles [lo, hi) into (acc, l_i, m_i). MASK: 0 none, 1 causal (diagonal), 2 keys >= N.

    Masked keys get -inf before the row max, so they contribute exp2(-inf) = 0. Every row
    sees at least one unmasked key in its first tile (key 0 or its diagonal), so m_i is
    finite after the first tile and exp2(m_i - m_ij) never sees -inf - -inf.
    """
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if DESC_LOADS:
            k = desc_k.load([kv_row0 + start_n, 0])
        else:
            k = _load_rows(k_base, start_n, N_CTX, offs_n, offs_d, HEAD_DIM, MASK != 0)
        if EMU_BF16:
            k = k.to(tl.float32)
        qk = tl.dot(q, k.T)
        if MASK == 0:
            # Scale folded into the max and the subtraction (one FMA per element).
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        else:
            cols = start_n + offs_n
            if MASK == 1:
                keep = offs_m[:, None] >= cols[None, :]
            else:
                keep = (cols < N_CTX)[None, :]
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        if DESC_LOADS:
            v = desc_v.load([kv_row0 + start_n, 0])
        else:
            v = _load_rows(v_base, start_n, N_CTX, offs_n, offs_d, HEAD_DIM, MASK != 0)
        # P is rounded to the input dtype for the tensor-core PV product (fp32: tf32 dot).
        if EMU_BF16:
            p = _bf16_rtne(p)
            v = v.to(tl.float32)
        else:
            p = p.to(v.dtype)
        acc = tl.dot(p, v, acc)
        # The row sum and m_i are committed last: shorter live ranges (tutorial's register note).
        l_i = l_i + l_ij
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, O, desc_q, desc_k, desc_v, desc_o, qk_scale,
              H, GROUP, N_CTX, N_KEY, Q_ROWS, KV_ROWS,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, DESC: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EMU_BF16: tl.constexpr):
    """One (BLOCK_M, HEAD_DIM) output tile. N_KEY only keys the autotuner (unused here).

    EMU_BF16 (interpreter + bfloat16 only): Triton 3.9's interpreter multiplies bfloat16 dot
    operands as raw uint16 bits and truncates float32 -> bfloat16 casts, so dot operands are
    widened to float32 (bf16·bf16 products are exact in float32) and roundings to bfloat16
    are done nearest-even by hand: the values a GPU's bf16 tensor-core dot (fp32 accumulate)
    and RTNE casts give.
    """
    # Causal: off-band tiles stop at start_m·BLOCK_M, so that must be a multiple of BLOCK_N.
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    pid_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    if CAUSAL:
        # Heaviest (last) query blocks of each head first: shorter tail of the last wave.
        start_m = tl.num_programs(0) - 1 - pid_m
    else:
        start_m = pid_m
    off_z = off_hz // H
    off_h = off_hz % H
    off_kv = off_z * (H // GROUP) + off_h // GROUP  # query head h reads kv head h // GROUP
    q_row0 = off_hz * N_CTX  # first row of this head in the flattened (B·H·N, D) view
    kv_row0 = off_kv * N_CTX
    q_base = Q + q_row0.to(tl.int64) * HEAD_DIM
    o_base = O + q_row0.to(tl.int64) * HEAD_DIM
    k_base = K + kv_row0.to(tl.int64) * HEAD_DIM
    v_base = V + kv_row0.to(tl.int64) * HEAD_DIM

    if DESC == 2:
        desc_q = tl.make_tensor_descriptor(Q, shape=[Q_ROWS, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        desc_k = tl.make_tensor_descriptor(K, shape=[KV_ROWS, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(V, shape=[KV_ROWS, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        desc_o = tl.make_tensor_descriptor(O, shape=[Q_ROWS, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Q stays on chip for the whole key loop.
    if DESC != 0:
        if EVEN_M:
            q = desc_q.load([q_row0 + start_m * BLOCK_M, 0])
        else:
            q = _load_rows(q_base, start_m * BLOCK_M, N_CTX, offs_r, offs_d, HEAD_DIM, True)
    else:
        q = _load_rows(q_base, start_m * BLOCK_M, N_CTX, offs_r, offs_d, HEAD_DIM, not EVEN_M)
    if EMU_BF16:
        q = q.to(tl.float32)

    if CAUSAL:
        # Stage 1: tiles strictly left of the diagonal block, no masking (all keys < N).
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                        0, start_m * BLOCK_M, qk_scale, offs_m, offs_n, offs_d, N_CTX,
                                        HEAD_DIM, BLOCK_N, 0, DESC != 0, False, EMU_BF16)
        # Stage 2: the diagonal block, causal mask (bottom-right == top-left since Nq == Nk).
        # A key >= N is above the diagonal of every stored row, so the causal mask covers it;
        # when N % BLOCK_N != 0 the last tile reads through masked pointer loads.
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
        if EVEN_N:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                            start_m * BLOCK_M, hi, qk_scale, offs_m, offs_n, offs_d,
                                            N_CTX, HEAD_DIM, BLOCK_N, 1, DESC != 0, False, EMU_BF16)
        else:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                            start_m * BLOCK_M, hi, qk_scale, offs_m, offs_n, offs_d,
                                            N_CTX, HEAD_DIM, BLOCK_N, 1, False, False, EMU_BF16)
    else:
        if EVEN_N:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                            0, N_CTX, qk_scale, offs_m, offs_n, offs_d, N_CTX,
                                            HEAD_DIM, BLOCK_N, 0, DESC != 0, WARP_SPECIALIZE, EMU_BF16)
        else:
            # No warp specialization here: a loop after a warp-specialized loop trips an
            # assertion in Triton's NVGPUWarpSpecialization pass (seen with 3.9, sm_90).
            hi_full = (N_CTX // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                            0, hi_full, qk_scale, offs_m, offs_n, offs_d, N_CTX,
                                            HEAD_DIM, BLOCK_N, 0, DESC != 0, False, EMU_BF16)
            # The partial last key tile: keys >= N get -inf.
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, kv_row0,
                                            hi_full, N_CTX, qk_scale, offs_m, offs_n, offs_d, N_CTX,
                                            HEAD_DIM, BLOCK_N, 2, False, False, EMU_BF16)

    # Epilogue: the online softmax's normalization, as one reciprocal per row and a multiply
    # per element (BLOCK_M divisions instead of BLOCK_M·HEAD_DIM; the extra fp32 rounding
    # is ~1e-7).
    out = acc * (1.0 / l_i)[:, None]
    if EMU_BF16:
        out = _bf16_rtne(out)
    out = out.to(O.dtype.element_ty)
    if DESC != 0:
        if EVEN_M:
            desc_o.store([q_row0 + start_m * BLOCK_M, 0], out)
        else:
            rows = start_m * BLOCK_M + offs_r
            tl.store(o_base + rows[:, None] * HEAD_DIM + offs_d[None, :], out, mask=(rows < N_CTX)[:, None])
    else:
        rows = start_m * BLOCK_M + offs_r
        if EVEN_M:
            tl.store(o_base + rows[:, None] * HEAD_DIM + offs_d[None, :], out)
        else:
            tl.store(o_base + rows[:, None] * HEAD_DIM + offs_d[None, :], out, mask=(rows < N_CTX)[:, None])


_attn_fwd_heur = triton.heuristics({
    "EVEN_M": lambda a: a["N_CTX"] % a["BLOCK_M"] == 0,
    "EVEN_N": lambda a: a["N_CTX"] % a["BLOCK_N"] == 0,
})(_attn_fwd)


# --------------------------------------------------------------------------- configs


def _set_block_shapes(nargs):
    """Autotune pre-hook: give host descriptors this config's block shapes (as the tutorial)."""
    if TensorDescriptor is None or not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [bm, d]
    nargs["desc_o"].block_shape = [bm, d]
    nargs["desc_k"].block_shape = [bn, d]
    nargs["desc_v"].block_shape = [bn, d]


def make_config(bm, bn, warps, stages, desc=DESC_POINTER, ws=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "DESC": desc, "WARP_SPECIALIZE": ws},
                         num_warps=warps, num_stages=stages, pre_hook=_set_block_shapes)


# Hopper (sm_90) fp16/bf16, per (head_dim, causal): host TMA descriptors. Chosen by three
# tile sweeps (docs/measurement.md#design-notes-moved-from-code, "Design notes moved from code") from the tutorial's
# space (BLOCK_M 64..256, BLOCK_N 32..128, 4/8 warps, 2..4 stages, host vs in-kernel
# descriptors, warp specialization, lazy rescaling), then kept to
# the configs the autotuner picked in the final benchmark plus the runner-up: a short list
# keeps first-call tuning (compiling every candidate) cheap. BM128/BN64/4 warps/2 stages at
# head_dim 128 uses 98 KB of shared memory and ≤ 255 registers: two CTAs per SM.
# All compile without register spills when N is a multiple of both blocks.
_H = DESC_HOST
HOPPER_CONFIGS = {
    (64, False): [make_config(128, 128, 4, 3, _H), make_config(64, 64, 4, 3, _H)],
    (64, True): [make_config(64, 64, 4, 3, _H), make_config(128, 128, 4, 3, _H)],
    (128, False): [make_config(128, 64, 4, 2, _H), make_config(256, 64, 8, 3, _H)],
    (128, True): [make_config(128, 64, 4, 2, _H), make_config(128, 128, 8, 3, _H)],
}
# Any other GPU (and sm_90 for head_dim 32): pointer loads, cp.async pipelining. Chosen to
# compile without register spills for sm_80/sm_90 at head_dim 64/128 (ptxas via cuobjdump
# -res-usage): 128x64 tiles need 8 warps, 4 warps only with a 64-row query block.
POINTER_CONFIGS = [make_config(128, 64, 8, 3), make_config(64, 64, 4, 3), make_config(64, 32, 4, 2)]
# float32 tiles are twice the bytes (tf32 dots): small tiles, 2 stages, to fit registers
# and shared memory.
FP32_CONFIGS = [make_config(32, 32, 4, 2), make_config(64, 32, 4, 2), make_config(64, 64, 8, 2)]
# Interpreter: one small config so tests cross several query blocks, key tiles and
# diagonal sub-blocks (BLOCK_M/BLOCK_N = 2) on small N.
INTERPRET_CONFIG = make_config(32, 16, 4, 1)


def _prune(configs, named_args, **kwargs):
    """Drop configs whose query block exceeds the (power-of-two padded) sequence."""
    n_key = {**named_args, **kwargs}["N_KEY"]
    keep = [c for c in configs if c.kwargs["BLOCK_M"] <= n_key]
    return keep or [min(configs, key=lambda c: c.kwargs["BLOCK_M"])]


_KEY = ["N_KEY", "HEAD_DIM", "CAUSAL"]  # + tensor dtypes (the autotuner appends them)
_TUNERS: dict = {}


def _tuner(name, configs):
    if name not in _TUNERS:
        _TUNERS[name] = triton.autotune(configs=configs, key=_KEY,
                                        prune_configs_by={"early_config_prune": _prune})(_attn_fwd_heur)
    return _TUNERS[name]


# --------------------------------------------------------------------------- launcher


def _alloc(size: int, alignment: int, stream):
    """Global scratch for in-kernel tensor descriptors (DESC_DEVICE)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def hopper_ok(device) -> bool:
    """sm_90 and a Triton with tensor descriptors: the TMA paths may be used."""
    return (device.type == "cuda" and TensorDescriptor is not None and hasattr(tl, "make_tensor_descriptor")
            and torch.cuda.get_device_capability(device)[0] == 9)


def default_configs(q, causal):
    """(tuner name, config list) the automatic dispatch uses for these inputs."""
    d = q.shape[-1]
    if q.dtype == torch.float32:
        return "fp32", FP32_CONFIGS
    if hopper_ok(q.device) and (d, bool(causal)) in HOPPER_CONFIGS:
        return f"hopper_d{d}_{'causal' if causal else 'full'}", HOPPER_CONFIGS[(d, bool(causal))]
    return "pointer", POINTER_CONFIGS


def validate(q, k, v, out):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or out.dim() != 4:
        raise ValueError("triton_flash: q, k, v, out must be 4-D (B, H, N, D)")
    b, h, n, d = q.shape
    if out.shape != q.shape or k.shape != v.shape:
        raise ValueError(f"triton_flash: shape mismatch q{tuple(q.shape)} k{tuple(k.shape)} "
                         f"v{tuple(v.shape)} out{tuple(out.shape)}")
    if k.shape[0] != b or k.shape[2] != n or k.shape[3] != d:
        raise ValueError(f"triton_flash: needs Nq == Nk and matching batch/head_dim, got q{tuple(q.shape)} "
                         f"k{tuple(k.shape)}")
    hkv = k.shape[1]
    if hkv < 1 or h % hkv:
        raise ValueError(f"triton_flash: heads {h} is not a multiple of kv_heads {hkv}")
    if d not in HEAD_DIMS:
        raise ValueError(f"triton_flash: head_dim {d} not supported (supports {HEAD_DIMS})")
    if len({t.dtype for t in (q, k, v, out)}) != 1 or q.dtype not in (torch.float16, torch.bfloat16,
                                                                       torch.float32):
        raise ValueError("triton_flash: q, k, v, out must share one dtype of float16/bfloat16/float32")
    if not all(t.is_contiguous() for t in (q, k, v, out)):
        raise ValueError("triton_flash: q, k, v, out must be contiguous")
    if len({t.device for t in (q, k, v, out)}) != 1:
        raise ValueError("triton_flash: q, k, v, out must be on one device")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError("triton_flash: on the CPU it runs only under TRITON_INTERPRET=1")
    if b * h * n >= 2**31:
        raise ValueError("triton_flash: B·H·N must be < 2^31 (int32 descriptor row coordinates)")


def attention_forward(q, k, v, out, *, causal: bool, scale: float, config=None) -> None:
    """out = softmax(q kᵀ · scale [causal]) v, written in place.

    ``config``: a ``make_config(...)`` to launch without autotuning (tests); None picks the autotuned list for this device/dtype/head_dim.
    """
    validate(q, k, v, out)
    b, h, n, d = q.shape
    hkv = k.shape[1]
    if config is None and _interpreting():
        config = INTERPRET_CONFIG
    if config is not None:
        desc = config.kwargs["DESC"]
        uses_desc = desc != DESC_POINTER
    else:
        name, configs = default_configs(q, causal)
        uses_desc = any(c.kwargs["DESC"] != DESC_POINTER for c in configs)
    uses_device_desc = (config.kwargs["DESC"] == DESC_DEVICE if config is not None
                        else any(c.kwargs["DESC"] == DESC_DEVICE for c in configs))
    if uses_desc and TensorDescriptor is None:
        raise ValueError("triton_flash: this triton has no tensor descriptors (needs >= 3.4)")
    if uses_desc:
        rows_q, rows_kv = b * h * n, b * hkv * n
        dummy = [16, d]  # replaced per config by _set_block_shapes
        dq = TensorDescriptor(q, shape=[rows_q, d], strides=[d, 1], block_shape=dummy)
        dk = TensorDescriptor(k, shape=[rows_kv, d], strides=[d, 1], block_shape=dummy)
        dv = TensorDescriptor(v, shape=[rows_kv, d], strides=[d, 1], block_shape=dummy)
        do = TensorDescriptor(out, shape=[rows_q, d], strides=[d, 1], block_shape=dummy)
        if uses_device_desc and q.device.type == "cuda":
            # In-kernel descriptors: 128 bytes of global scratch per descriptor and program.
            triton.set_allocator(_alloc)
    else:
        dq, dk, dv, do = q, k, v, out
    args = (q, k, v, out, dq, dk, dv, do, float(scale) * LOG2E, h, h // hkv, n,
            min(triton.next_power_of_2(n), 4096), b * h * n, b * hkv * n)
    meta = dict(HEAD_DIM=d, CAUSAL=bool(causal), EMU_BF16=_interpreting() and q.dtype == torch.bfloat16)

    def grid(m):
        return (triton.cdiv(n, m["BLOCK_M"]), b * h)

    if config is not None:
        kw = dict(config.kwargs)
        _set_block_shapes({"desc_q": dq, "desc_k": dk, "desc_v": dv, "desc_o": do, "HEAD_DIM": d, **kw})
        _attn_fwd_heur[grid](*args, **meta, **kw, num_warps=config.num_warps, num_stages=config.num_stages)
    else:
        _tuner(name, configs)[grid](*args, **meta)
