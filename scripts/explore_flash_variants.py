"""Which FlashAttention-2 forward variant is fastest at B8 H16 N4096 D128 fp16 (non-causal), and is it correct?

One self-contained device run (H200, Triton 3.6): every variant is first compiled in parallel child
processes (filling Triton's on-disk cache; a compiler abort kills only its child), then checked against
a float64 reference (batch 0 heads 0/1 and the last head, all rows; whole output must be finite) and a
masked-tail shape (N=4000) where the variant supports one, then timed with triton.testing.do_bench
(warmup 100 ms, rep 500 ms, median; two passes in opposite orders). The top 3 are re-run in bfloat16.
``--budget-s`` bounds the whole run: variants that no longer fit are reported as skipped.

  PYTHONUNBUFFERED=1 python scripts/explore_flash_variants.py [--budget-s 225] [--workers 15]
  TRITON_INTERPRET=1 python3 scripts/explore_flash_variants.py --smoke-cpu      # CPU check, tiny shapes

Writes $OUT/flash-variants.md and $OUT/flash-variants.json when OUT is set.

Variants: ``shipped`` (kernels._triton_flash_impl.attention_forward, autotuned and explicit configs);
``tutorial`` (the forward of Triton's python/tutorials/06-fused-attention.py, copied from
facebookexperimental/triton@707a0d226548bb2f0c5e7fea23351c18c9e7f20b, an upstream-tracking fork whose
fp16 forward matches intel/intel-xpu-backend-for-triton@07fc52e7; the index held no triton-lang/triton
release/3.6.x copy; it has no _attn_fwd_persist), its own autotune list and warp_specialize off/on;
``copy``/``recip``/``maxnreg``/``head-major``/``persistent``: our kernel body copied below (non-causal,
H == H_kv) with one change each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
LOG2E = 1.4426950408889634
TOL = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-2}  # max abs error vs float64
SMS = 132  # set from the device in main()
_HOST_DESC_OK = _HOPPER = _BLACKWELL = False  # set in main(); smoke mimics the H200 paths


# ====================================================================== tutorial (copied forward)
# Adaptations: is_cuda()/capability checks read module flags (the interpreter has no CUDA driver);
# `dtype` also honours a BF16 constexpr (the tutorial hard-codes float16); DISALLOW_ACC_MB constexpr
# (default False = upstream; the fb fork passes disallow_acc_multi_buffer=True); the autotune
# decorator is applied in tut_tuner() to the configs that compiled; the host code (tut_forward) writes
# into `o`, is forward-only, non-causal, fp16/bf16 (its fp8 V-transpose branch and the PYTEST_VERSION
# single-config override are dropped); backward kernels and benchmarks are not copied.

@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q,  #
                    desc_k, desc_v,  #
                    offset_y, dtype: tl.constexpr, start_m, qk_scale,  #
                    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,  #
                    STAGE: tl.constexpr, offs_m: tl.constexpr, offs_n: tl.constexpr,  #
                    N_CTX: tl.constexpr, warp_specialize: tl.constexpr, IS_HOPPER: tl.constexpr,
                    DISALLOW_ACC_MB: tl.constexpr):
    # range of values handled by this stage
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    # causal = False
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    if dtype == tl.float8e5:
        offsetv_y = offset_y * HEAD_DIM + lo
    else:
        offsetv_y = offset_y + lo
    # loop over k, v and update accumulator
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize,
                            disallow_acc_multi_buffer=DISALLOW_ACC_MB):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # -- compute qk ----
        k = desc_k.load([offsetk_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        # -- compute correction factor
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        # -- update output accumulator --
        if not IS_HOPPER and warp_specialize and BLOCK_M == 128 and HEAD_DIM == 128:
            BM: tl.constexpr = acc.shape[0]
            BN: tl.constexpr = acc.shape[1]
            acc0, acc1 = acc.reshape([BM, 2, BN // 2]).permute(0, 2, 1).split()
            acc0 = acc0 * alpha[:, None]
            acc1 = acc1 * alpha[:, None]
            acc = tl.join(acc0, acc1).permute(0, 2, 1).reshape([BM, BN])
        else:
            acc = acc * alpha[:, None]
        # prepare p and v for the dot
        if dtype == tl.float8e5:
            v = desc_v.load([0, offsetv_y]).T
        else:
            v = desc_v.load([offsetv_y, 0])
        p = p.to(dtype)
        # note that this non transposed v for FP8 is only supported on Blackwell
        acc = tl.dot(p, v, acc)
        # update m_i and l_i
        # place this at the end of the loop to reduce register pressure
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
        offsetv_y += BLOCK_N
    return acc, l_i, m_i

def _host_descriptor_pre_hook(nargs):
    BLOCK_M = nargs["BLOCK_M"]
    BLOCK_N = nargs["BLOCK_N"]
    HEAD_DIM = nargs["HEAD_DIM"]
    if not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]
    if nargs["FP8_OUTPUT"]:
        nargs["desc_v"].block_shape = [HEAD_DIM, BLOCK_N]
    else:
        nargs["desc_v"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_k"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_o"].block_shape = [BLOCK_M, HEAD_DIM]

NUM_STAGES_OPTIONS = [2, 3, 4]
tut_configs = [
    triton.Config({'BLOCK_M': BM, 'BLOCK_N': BN}, num_stages=s, num_warps=w, pre_hook=_host_descriptor_pre_hook)
    for BM in [64, 128] for BN in [32, 64, 128] for s in NUM_STAGES_OPTIONS for w in [4, 8]
]

def keep(conf):
    BLOCK_M = conf.kwargs["BLOCK_M"]
    BLOCK_N = conf.kwargs["BLOCK_N"]
    return not (_HOPPER and BLOCK_M * BLOCK_N < 128 * 128 and conf.num_warps == 8)

def prune_invalid_configs(configs, named_args, **kwargs):
    N_CTX = kwargs["N_CTX"]
    # Filter out configs where BLOCK_M > N_CTX
    return [conf for conf in configs if conf.kwargs.get("BLOCK_M", 0) <= N_CTX]

@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)

@triton.jit
def _attn_fwd(sm_scale, M,  #
              Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,  #
              HEAD_DIM: tl.constexpr,  #
              BLOCK_M: tl.constexpr,  #
              BLOCK_N: tl.constexpr,  #
              FP8_OUTPUT: tl.constexpr,  #
              STAGE: tl.constexpr,  #
              warp_specialize: tl.constexpr,  #
              IS_HOPPER: tl.constexpr,  #
              BF16: tl.constexpr, DISALLOW_ACC_MB: tl.constexpr,  # adaptations
              ):
    dtype = tl.float8e5 if FP8_OUTPUT else (tl.bfloat16 if BF16 else tl.float16)
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H

    y_dim = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_M, HEAD_DIM])
    if FP8_OUTPUT:
        desc_v = _maybe_make_tensor_desc(desc_v, shape=[HEAD_DIM, y_dim], strides=[N_CTX, 1],
                                         block_shape=[HEAD_DIM, BLOCK_N])
    else:
        desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_N, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_M, HEAD_DIM])

    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    # initialize offsets
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    # initialize pointer to m and l
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # load scales
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1/log(2)
    # load q: it will stay in SRAM throughout
    q = desc_q.load([qo_offset_y, 0])
    # stage 1: off-band
    # For causal = True, STAGE = 3 and _attn_fwd_inner gets 1 as its STAGE
    # For causal = False, STAGE = 1, and _attn_fwd_inner gets 3 as its STAGE
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q,  #
                                        desc_k, desc_v,  #
                                        offset_y, dtype, start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        4 - STAGE, offs_m, offs_n, N_CTX,  #
                                        warp_specialize, IS_HOPPER, DISALLOW_ACC_MB)
    # stage 2: on-band
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q,  #
                                        desc_k, desc_v,  #
                                        offset_y, dtype, start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        2, offs_m, offs_n, N_CTX,  #
                                        warp_specialize, IS_HOPPER, DISALLOW_ACC_MB)
    # epilogue
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    tl.store(m_ptrs, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))

_TUT_TUNERS: dict = {}

def tut_tuner(name, cfg_dicts):
    """The tutorial's @triton.autotune over the given (compiled) subset of its configs."""
    if name not in _TUT_TUNERS:
        cs = [triton.Config({"BLOCK_M": c["bm"], "BLOCK_N": c["bn"]}, num_stages=c["s"], num_warps=c["w"],
                            pre_hook=_host_descriptor_pre_hook) for c in cfg_dicts]
        _TUT_TUNERS[name] = triton.autotune(configs=cs, key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT", "warp_specialize"],
                                            prune_configs_by={'early_config_prune': prune_invalid_configs})(_attn_fwd)
    return _TUT_TUNERS[name]

def tut_forward(q, k, v, o, sm_scale, warp_specialize, cfg=None, tuner=None, nomb=False):
    """_attention.forward of the tutorial (forward only, causal=False, output into o)."""
    HEAD_DIM_K = q.shape[-1]
    stage = 1
    extra_kern_args = {}
    M = torch.empty((q.shape[0], q.shape[1], q.shape[2]), device=q.device, dtype=torch.float32)
    # Use device_descriptor for Hopper + warpspec.
    if _HOST_DESC_OK and not (_HOPPER and warp_specialize):
        y_dim = q.shape[0] * q.shape[1] * q.shape[2]
        dummy_block = [1, 1]
        desc_q = TensorDescriptor(q, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
        desc_v = TensorDescriptor(v, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
        desc_k = TensorDescriptor(k, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
        desc_o = TensorDescriptor(o, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
    else:
        desc_q, desc_v, desc_k, desc_o = q, v, k, o
    dev = q.device
    triton.set_allocator(lambda size, align, _: torch.empty(size, dtype=torch.int8, device=dev))

    def grid(META):
        return (triton.cdiv(q.shape[2], META["BLOCK_M"]), q.shape[0] * q.shape[1], 1)

    if _BLACKWELL and warp_specialize:
        extra_kern_args["maxnreg"] = 168 if HEAD_DIM_K == 128 and q.dtype == torch.float16 else 80
    args = (sm_scale, M, q.shape[0], q.shape[1], desc_q, desc_k, desc_v, desc_o)
    kw = dict(N_CTX=q.shape[2], HEAD_DIM=HEAD_DIM_K, FP8_OUTPUT=False, STAGE=stage, warp_specialize=warp_specialize,
              IS_HOPPER=_HOPPER, BF16=q.dtype == torch.bfloat16, DISALLOW_ACC_MB=nomb, **extra_kern_args)
    if cfg is None:
        return tuner[grid](*args, **kw)
    meta = {"BLOCK_M": cfg["bm"], "BLOCK_N": cfg["bn"]}
    _host_descriptor_pre_hook({"desc_q": desc_q, "desc_k": desc_k, "desc_v": desc_v, "desc_o": desc_o, **kw, **meta})
    return _attn_fwd[grid](*args, **kw, **meta, num_warps=cfg["w"], num_stages=cfg["s"])

# ====================================================================== our kernel, copied (non-causal)

@triton.jit
def _rows(base, row0, n_rows, offs_r, offs_d, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    ptrs = base + (row0 + offs_r)[:, None] * HEAD_DIM + offs_d[None, :]
    if MASKED:
        return tl.load(ptrs, mask=((row0 + offs_r) < n_rows)[:, None], other=0.0)
    else:
        return tl.load(ptrs)

@triton.jit
def _var_inner(acc, l_i, m_i, q, k_base, v_base, desc_k, desc_v, row0, lo, hi, qk_scale, offs_n, offs_d, N_CTX,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, DESC_LOADS: tl.constexpr):
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if DESC_LOADS:
            k = desc_k.load([row0 + start_n, 0])
        else:
            k = _rows(k_base, start_n, N_CTX, offs_n, offs_d, HEAD_DIM, MASK)
        qk = tl.dot(q, k.T)
        if MASK:  # keys >= N get -inf
            qk = tl.where(((start_n + offs_n) < N_CTX)[None, :], qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        if DESC_LOADS:
            v = desc_v.load([row0 + start_n, 0])
        else:
            v = _rows(v_base, start_n, N_CTX, offs_n, offs_d, HEAD_DIM, MASK)
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i + l_ij
        m_i = m_ij
    return acc, l_i, m_i

@triton.jit
def _var_tile(Q, K, V, O, desc_q, desc_k, desc_v, desc_o, qk_scale, N_CTX, start_m, off_hz,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DESC: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, RECIP: tl.constexpr):
    row0 = off_hz * N_CTX
    off = row0.to(tl.int64) * HEAD_DIM
    offs_r = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if EVEN_M:
        if DESC:
            q = desc_q.load([row0 + start_m * BLOCK_M, 0])
        else:
            q = _rows(Q + off, start_m * BLOCK_M, N_CTX, offs_r, offs_d, HEAD_DIM, False)
    else:
        q = _rows(Q + off, start_m * BLOCK_M, N_CTX, offs_r, offs_d, HEAD_DIM, True)
    if EVEN_N:
        acc, l_i, m_i = _var_inner(acc, l_i, m_i, q, K + off, V + off, desc_k, desc_v, row0, 0, N_CTX, qk_scale,
                                   offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_N, False, DESC)
    else:
        hi = (N_CTX // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _var_inner(acc, l_i, m_i, q, K + off, V + off, desc_k, desc_v, row0, 0, hi, qk_scale,
                                   offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_N, False, DESC)
        acc, l_i, m_i = _var_inner(acc, l_i, m_i, q, K + off, V + off, desc_k, desc_v, row0, hi, N_CTX, qk_scale,
                                   offs_n, offs_d, N_CTX, HEAD_DIM, BLOCK_N, True, False)
    if RECIP:  # one reciprocal per row, then multiplies
        out = acc * (1.0 / l_i)[:, None]
    else:
        out = acc / l_i[:, None]
    out = out.to(O.dtype.element_ty)
    rows = start_m * BLOCK_M + offs_r
    o_ptrs = O + off + rows[:, None] * HEAD_DIM + offs_d[None, :]
    if EVEN_M:
        if DESC:
            desc_o.store([row0 + start_m * BLOCK_M, 0], out)
        else:
            tl.store(o_ptrs, out)
    else:
        tl.store(o_ptrs, out, mask=(rows < N_CTX)[:, None])

@triton.jit
def _var_fwd(Q, K, V, O, desc_q, desc_k, desc_v, desc_o, qk_scale, BH, N_CTX,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DESC: tl.constexpr,
             EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, RECIP: tl.constexpr, ORDER: tl.constexpr,
             PERSIST: tl.constexpr, FLATTEN: tl.constexpr):
    """ORDER 0: grid (m-block, head) as shipped; 1: (head, m-block). PERSIST: grid-stride loop over
    (m-block fastest, head) tiles; FLATTEN: tl.range(..., flatten=True) on that loop."""
    if PERSIST:
        n_m = tl.cdiv(N_CTX, BLOCK_M)
        for tile in tl.range(tl.program_id(0), n_m * BH, tl.num_programs(0), flatten=FLATTEN):
            _var_tile(Q, K, V, O, desc_q, desc_k, desc_v, desc_o, qk_scale, N_CTX, tile % n_m, tile // n_m,
                      HEAD_DIM, BLOCK_M, BLOCK_N, DESC, EVEN_M, EVEN_N, RECIP)
    else:
        if ORDER == 0:
            start_m = tl.program_id(0)
            off_hz = tl.program_id(1)
        else:
            off_hz = tl.program_id(0)
            start_m = tl.program_id(1)
        _var_tile(Q, K, V, O, desc_q, desc_k, desc_v, desc_o, qk_scale, N_CTX, start_m, off_hz,
                  HEAD_DIM, BLOCK_M, BLOCK_N, DESC, EVEN_M, EVEN_N, RECIP)

def var_forward(q, k, v, o, scale, cfg, opts):
    b, h, n, d = q.shape
    bm, bn = cfg["bm"], cfg["bn"]
    desc = int(opts.get("desc", 1))
    if desc:
        rows = b * h * n
        dq, dk, dv, do = (TensorDescriptor(t, shape=[rows, d], strides=[d, 1], block_shape=[blk, d])
                          for t, blk in ((q, bm), (k, bn), (v, bn), (o, bm)))
    else:
        dq, dk, dv, do = q, k, v, o
    n_m = triton.cdiv(n, bm)
    if opts.get("persist"):
        grid = (min(n_m * b * h, SMS * opts["persist"]),)
    else:
        grid = (b * h, n_m) if opts.get("order") else (n_m, b * h)
    c = triton.Config({}, num_warps=cfg["w"], num_stages=cfg["s"], maxnreg=cfg.get("maxnreg"))
    opt = dict(num_warps=c.num_warps, num_stages=c.num_stages)
    if c.maxnreg:  # the launch option triton.Config(maxnreg=...) sets
        opt["maxnreg"] = c.maxnreg
    return _var_fwd[grid](q, k, v, o, dq, dk, dv, do, scale * LOG2E, b * h, n, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn,
                          DESC=desc, EVEN_M=n % bm == 0, EVEN_N=n % bn == 0, RECIP=int(opts.get("recip", 0)),
                          ORDER=int(opts.get("order", 0)), PERSIST=int(bool(opts.get("persist"))),
                          FLATTEN=bool(opts.get("flatten", 0)), **opt)

# ====================================================================== variants

def _c(bm, bn, w, s, maxnreg=None):
    return {"bm": bm, "bn": bn, "w": w, "s": s, "maxnreg": maxnreg}

def build_variants(d, smoke):
    from kernels import _triton_flash_impl as I

    V = []

    def add(name, kind, cfg, tail, **opts):
        V.append(dict(name=name, kind=kind, cfg=cfg, tail=tail, opts=opts, ok_tune=opts.get("tune", [])))

    b64 = _c(128, 64, 4, 2)
    ship = [] if smoke else [_c(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                             for c in I.HOPPER_CONFIGS[(d, False)]]
    add("shipped/autotune", "shipped", None, True, tune=ship)  # smoke: the interpreter config
    for c in ship or [b64]:
        add("shipped", "shipped", c, True)
    # the tutorial's autotune list (smoke: its pytest config; the autotuner benchmarks on CUDA only)
    tut = [b64] if smoke else [_c(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                               for c in tut_configs if keep(c)]
    for ws in (False, True):
        add("tutorial/autotune", "tut", None, False, ws=ws, tune=tut)
        add("tutorial", "tut", b64, False, ws=ws)
    add("tutorial disallow_acc_mb", "tut", b64, False, ws=True, nomb=True)
    for c in (b64, _c(128, 128, 8, 2)):
        add("copy", "var", c, True)
        for r in (128, 168, 232):
            add("copy+maxnreg", "var", {**c, "maxnreg": r}, True)
    add("recip epilogue", "var", b64, True, recip=1)
    add("head-major grid", "var", b64, True, order=1)
    for k in (1, 2):
        for fl in (1, 0):
            add(f"persistent {k}xSMs" + (" flatten" if fl else " loop"), "var", b64, True, persist=k, flatten=fl)
    return V

def cfg_str(spec, cfg=None):
    c = cfg or spec["cfg"]
    o = spec["opts"]
    s = "autotune" if c is None else f"BM{c['bm']} BN{c['bn']} w{c['w']} s{c['s']}" + (
        f" maxnreg{c['maxnreg']}" if c.get("maxnreg") else "")
    if spec["kind"] == "tut":
        s += f" ws={'on' if o['ws'] else 'off'}"
    elif spec["kind"] == "shipped":
        s += " host_tma"
    return s

def _key(kind, cfg, opts, dtype, shape):
    opts = {k: v for k, v in opts.items() if k != "tune"}
    return json.dumps([kind, cfg, opts, dtype, shape], sort_keys=True)

def tasks_of(spec, dtype, shape):
    cfgs = spec["opts"].get("tune") if spec["cfg"] is None else [spec["cfg"]]
    return [_key(spec["kind"], c, spec["opts"], dtype, shape) for c in cfgs]

def launch(spec, q, k, v, o, scale, cfg="spec"):
    kind, opts = spec["kind"], spec["opts"]
    cfg = spec["cfg"] if cfg == "spec" else cfg
    if kind == "shipped":
        from kernels import _triton_flash_impl as I

        conf = None if cfg is None else I.make_config(cfg["bm"], cfg["bn"], cfg["w"], cfg["s"], I.DESC_HOST)
        return I.attention_forward(q, k, v, o, causal=False, scale=scale, config=conf)
    if kind == "tut":
        tuner = None
        if cfg is None:
            tuner = tut_tuner(f"ws={opts['ws']}/{len(spec['ok_tune'])}", spec["ok_tune"])
        return tut_forward(q, k, v, o, scale, opts["ws"], cfg, tuner, opts.get("nomb", False))
    return var_forward(q, k, v, o, scale, cfg, opts)

# ====================================================================== compile in child processes

def _compile_one(key, d, dev):
    """Child body: launch one variant on a tiny input with the integer specialization of the timed
    shapes (B, N, B·H·N multiples of 16 or not alike; H = 16), so the cached binary is reused."""
    kind, cfg, opts, dtype, shape = json.loads(key)
    b, n = (2, 256) if shape == "even" else (1, 160)  # like B8/N4096 and B1/N4000 (N % 128 = N % 64 = 32)
    q, k, v = (torch.randn(b, 16, n, d, device=dev, dtype=getattr(torch, dtype)) for _ in range(3))
    launch(dict(kind=kind, cfg=cfg, opts=opts), q, k, v, torch.empty_like(q), d ** -0.5)
    if dev == "cuda":
        torch.cuda.synchronize()

def precompile(keys, d, workers, deadline):
    """{key: None (ok) | error line}. Tasks not started before the deadline are skipped."""
    from concurrent.futures import ThreadPoolExecutor

    def one(key):
        left = deadline - time.time()
        if left < 3:
            return key, "skipped: compile budget spent"
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--compile-one", key, "--d", str(d)],
                               capture_output=True, text=True, timeout=left + 20)
        except subprocess.TimeoutExpired:
            return key, "compile timed out (budget)"
        except Exception as exc:  # noqa: BLE001 - one line per task, never abort the run
            return key, _one_line(exc)
        if p.returncode:
            lines = [ln for ln in (p.stderr or "").strip().splitlines() if ln.strip()]
            return key, f"rc={p.returncode}: " + (lines[-1][:240] if lines else "")
        return key, None

    t0 = time.time()
    res = {}
    with ThreadPoolExecutor(max_workers=workers) as ex:
        for key, err in ex.map(one, list(dict.fromkeys(keys))):
            res[key] = err
            if err and not err.startswith("skipped"):
                print(f"  compile FAILED {key}: {err}", flush=True)
    bad = sum(1 for e in res.values() if e)
    print(f"precompiled {len(res)} tasks in {time.time() - t0:.1f}s ({bad} failed or skipped)", flush=True)
    return res

# ====================================================================== checks and timing

def make_inputs(b, h, n, d, dtype, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    return [torch.randn(b, h, n, d, device=dev, dtype=getattr(torch, dtype), generator=g) for _ in range(3)]

def reference(q, k, v, scale, heads):
    out = {}
    for b, h in heads:
        s = (q[b, h].double() @ k[b, h].double().T) * scale
        out[(b, h)] = torch.softmax(s, dim=-1) @ v[b, h].double()
    return out

def check(spec, q, k, v, ref, cfg="spec"):
    """(max abs err over the reference heads, whole output finite, launch handle)."""
    o = torch.full_like(q, float("nan"))
    handle = launch(spec, q, k, v, o, q.shape[-1] ** -0.5, cfg)
    if q.is_cuda:
        torch.cuda.synchronize()
    err = max((o[b, h].double() - r).abs().max().item() for (b, h), r in ref.items())
    return err, bool(torch.isfinite(o).all()), handle

def _one_line(exc):
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"

def compiled(spec, dtype, shape, status, smoke, cfg="spec"):
    """None when the binaries this run needs compiled in a child, else the first error."""
    if smoke:
        return None
    keys = tasks_of(spec, dtype, shape) if cfg == "spec" else [_key(spec["kind"], cfg, spec["opts"], dtype, shape)]
    errs = [status.get(kk, "not compiled") for kk in keys]
    if spec["cfg"] is None and cfg == "spec" and spec["kind"] == "tut":  # tune over the configs that compiled
        spec["ok_tune"] = [c for c, e in zip(spec["opts"]["tune"], errs) if e is None]
        return None if spec["ok_tune"] else errs[0]
    return next((e for e in errs if e), None)  # shipped/autotune cannot drop a config: all must compile

def record_best(spec, row, q):
    if spec["kind"] == "tut":
        tuner = _TUT_TUNERS.get(f"ws={spec['opts']['ws']}/{len(spec['ok_tune'])}")
    else:
        from kernels import _triton_flash_impl as I

        tuner = I._TUNERS.get(I.default_configs(q, False)[0])
    best = getattr(tuner, "best_config", None)
    if best is not None:
        spec["best"] = _c(best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.num_warps, best.num_stages)
        row["config"] += " -> " + cfg_str(spec, spec["best"])

def tail_check(spec, dtype, tail_inp, status, args, row):
    if not spec["tail"]:
        return "unsupported"
    why = compiled(spec, dtype, "tail", status, args.smoke_cpu)
    if why:
        return f"not run: {why[:60]}"
    try:
        e, fin, _ = check(spec, *tail_inp)
    except Exception as exc:
        print(f"  {spec['name']} tail: {_one_line(exc)}", flush=True)
        return "error: " + _one_line(exc)[:80]
    if not (fin and e <= TOL[dtype]):
        row["ok"] = False
        row["note"] = (row["note"] + f" WRONG at N={tail_inp[0].shape[2]}").strip()
    return f"ok {e:.1e}" if fin and e <= TOL[dtype] else f"FAIL {e:.1e}" + ("" if fin else " non-finite")

def run_variant(spec, dtype, inp, tail_inp, status, args, time_left, cfg="spec"):
    """Correctness (reference heads, finiteness, tail shape), then one timing pass if correct."""
    q, k, v, ref = inp
    b, h, n, d = q.shape
    tuned = spec["cfg"] is None and cfg == "spec"
    row = dict(variant=spec["name"], config=cfg_str(spec, None if cfg == "spec" else cfg), dtype=dtype,
               shape=f"B{b} H{h} N{n} D{d}", ms=None, tflops=None, err=None, ok=False, tail="-", regs="-",
               note="", passes=[])
    if time_left() < 3 + (0.3 * len(spec["ok_tune"]) if tuned else 0):
        row["note"] = "skipped: --budget-s spent"
        return row
    why = compiled(spec, dtype, "even", status, args.smoke_cpu, cfg)
    if why:
        row["note"] = why
        return row
    if tuned and spec["kind"] == "tut":
        row["config"] += f" ({len(spec['ok_tune'])}/{len(spec['opts']['tune'])} configs)"
    try:
        err, finite, handle = check(spec, q, k, v, ref, cfg)
        row.update(err=err, ok=finite and err <= TOL[dtype])
        if getattr(handle, "n_regs", None) is not None:
            row["regs"] = f"{handle.n_regs}/{handle.n_spills}"
        if tuned:
            record_best(spec, row, q)
    except Exception as exc:
        print(f"  {spec['name']} [{row['config']}]: {_one_line(exc)}", flush=True)
        row["note"] = _one_line(exc)
        return row
    if not finite:
        row["note"] = "WRONG: non-finite output (unwritten tiles?)"
    elif not row["ok"]:
        row["note"] = f"WRONG: max abs err {err:.1e} > {TOL[dtype]}"
    if tail_inp is not None:
        row["tail"] = tail_check(spec, dtype, tail_inp, status, args, row)
    if row["ok"]:
        time_pass(spec, row, q, k, v, args, cfg)
    return row

def time_pass(spec, row, q, k, v, args, cfg="spec"):
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    fn = lambda: launch(spec, q, k, v, o, d ** -0.5, cfg)  # noqa: E731
    try:
        if args.smoke_cpu:  # wall clock of one interpreted call
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
        else:
            ms = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
    except Exception as exc:
        print(f"  {spec['name']} timing: {_one_line(exc)}", flush=True)
        row["note"] = "timing: " + _one_line(exc)
        return
    row["passes"].append(ms)
    row["ms"] = sum(row["passes"]) / len(row["passes"])
    row["tflops"] = 4 * b * h * n * n * d / (row["ms"] * 1e-3) / 1e12

# ====================================================================== report

COLS = [("variant", "variant", "{}"), ("config", "config", "{}"), ("shape", "shape", "{}"), ("ms", "ms", "{:.3f}"),
        ("tflops", "TFLOP/s", "{:.1f}"), ("err", "max err", "{:.1e}"), ("ok", "ok", "{}"),
        ("tail", "tail N%BM!=0", "{}"), ("regs", "regs/spills", "{}"), ("note", "note", "{}")]

def table(rows):
    rows = sorted(rows, key=lambda r: -(r["tflops"] or -1))
    lines = ["| " + " | ".join(hd for _, hd, _ in COLS) + " |", "|" + "---|" * len(COLS)]
    for r in rows:
        lines.append("| " + " | ".join(f.format(r[k]) if r.get(k) is not None else "-" for k, _, f in COLS) + " |")
    return "\n".join(lines)

def _print_row(r):
    print(f"  {r['dtype'].replace('float', 'fp').replace('bfloat', 'bf')} {r['variant']:26s} {r['config'][:60]:60s} "
          + (f"{r['ms']:8.3f} ms {r['tflops']:6.1f} TF" if r["ms"] else " " * 22)
          + (f"  err {r['err']:.1e}" if r["err"] is not None else "") + f"  tail {r['tail']}  {r['note']}", flush=True)

def explore_shape(b, h, n, d, tail_n, dev, args, time_left, status):
    """float16 pass(es) over every variant, then bfloat16 for the top 3: (fp16 rows, bf16 rows)."""
    specs = build_variants(d, args.smoke_cpu)
    if args.only:
        specs = [s for s in specs if any(w in s["name"] for w in args.only.split(","))]
    if not args.smoke_cpu:  # explicit variants first, then tails, then the rest of the autotune lists
        keys = [kk for s in specs if s["cfg"] is not None for kk in tasks_of(s, "float16", "even")]
        keys += [kk for s in specs if s["tail"] for kk in tasks_of(s, "float16", "tail")]
        keys += [kk for s in specs if s["cfg"] is None for kk in tasks_of(s, "float16", "even")]
        status.update(precompile(keys, d, args.workers, time.time() + max(30.0, time_left() - 40 - 3.5 * len(specs))))
    print(f"\n== B{b} H{h} N{n} D{d} non-causal (tail check B1 N{tail_n}); {time_left():.0f}s left", flush=True)
    q, k, v = make_inputs(b, h, n, d, "float16", dev)
    heads = sorted({(0, 0), (0, min(1, h - 1)), (b - 1, h - 1)})
    tq, tk, tv = make_inputs(1, h, tail_n, d, "float16", dev, seed=1)
    tail_inp = (tq, tk, tv, reference(tq, tk, tv, d ** -0.5, [(0, 0), (0, h - 1)]))
    inp = (q, k, v, reference(q, k, v, d ** -0.5, heads))
    rows = []
    for spec in specs:  # 25 s kept for the bf16 phase
        rows.append(run_variant(spec, "float16", inp, tail_inp, status, args, lambda: time_left() - 25))
        _print_row(rows[-1])
    timed = [(s, r) for s, r in zip(specs, rows) if r["ms"]]
    if not args.smoke_cpu and time_left() - 25 > 1.3 * len(timed):  # second pass, reverse order (GPU heat)
        for s, r in timed[::-1]:
            time_pass(s, r, q, k, v, args)
    # bf16 for the top 3 (autotuned variants at the config the fp16 autotuner chose)
    picks = [(s, s.get("best") if s["cfg"] is None else s["cfg"])
             for s, _ in sorted(timed, key=lambda sr: -sr[1]["tflops"])[:3]]
    picks = [(s, c) for s, c in picks if c is not None]
    q = k = v = inp = tail_inp = None
    bdt = "float16" if args.smoke_cpu else "bfloat16"  # interpreter bf16 dots are broken (EMU_BF16)
    if picks and not args.smoke_cpu:
        if time_left() < 20:
            print("bf16 phase skipped: --budget-s spent", flush=True)
            return rows, []
        keys = [_key(s["kind"], c, s["opts"], bdt, "even") for s, c in picks]
        status.update(precompile(keys, d, args.workers, time.time() + min(60.0, time_left() - 12)))
    brows = []
    if picks:
        q, k, v = make_inputs(b, h, n, d, bdt, dev, seed=2)
        binp = (q, k, v, reference(q, k, v, d ** -0.5, heads))
        for s, c in picks:
            brows.append(run_variant(s, bdt, binp, None, status, args, time_left, cfg=c))
            _print_row(brows[-1])
    return rows, brows

def main(argv=None):
    global SMS, _HOST_DESC_OK, _HOPPER, _BLACKWELL
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget-s", type=float, default=225.0, help="wall-clock budget for the whole run")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--b", type=int, default=8)
    p.add_argument("--h", type=int, default=16)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--tail-n", type=int, default=4000)
    p.add_argument("--only", default="", help="comma list of substrings of variant names to run")
    p.add_argument("--smoke-cpu", action="store_true", help="TRITON_INTERPRET=1 check on tiny CPU shapes")
    p.add_argument("--compile-one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    t_start = time.time()
    cuda = torch.cuda.is_available()
    dev, cap = ("cuda", torch.cuda.get_device_capability()) if cuda else ("cpu", (9, 0))  # CPU: the H200's paths
    SMS = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 1  # 1: loop over every tile
    _HOST_DESC_OK, _HOPPER, _BLACKWELL = TensorDescriptor is not None and cap[0] >= 9, cap[0] == 9, cap[0] == 10
    if args.compile_one:
        _compile_one(args.compile_one, args.d, dev)
        return
    if args.smoke_cpu:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("--smoke-cpu needs TRITON_INTERPRET=1")
        dev, SMS, shapes = "cpu", 1, [(1, 2, 128, 64, 100), (1, 2, 128, 128, 100)]
    elif not cuda:
        raise SystemExit("needs a CUDA device (or --smoke-cpu under TRITON_INTERPRET=1)")
    else:
        shapes = [(args.b, args.h, args.n, args.d, args.tail_n)]
    print(f"torch {torch.__version__} triton {triton.__version__} "
          + (f"{torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]} SMs {SMS}" if dev == "cuda"
             else "cpu interpreter smoke run"), flush=True)
    status, rows, brows = {}, [], []
    for shape in shapes:
        r, br = explore_shape(*shape, dev, args, lambda: args.budget_s - (time.time() - t_start), status)
        rows, brows = rows + r, brows + br
    md = (f"# FlashAttention forward variants ({'interpreter smoke: ms = one call' if args.smoke_cpu else 'device'})"
          f"\n\nTFLOP/s = 4·B·H·N²·D / t (do_bench median, mean over passes); ok = finite output and max abs err "
          f"<= {TOL['float16']} (fp16) / {TOL['bfloat16']} (bf16) vs float64 on the reference heads, and the "
          f"tail shape passes where supported.\n\n## float16\n\n{table(rows)}\n")
    if brows:
        md += f"\n## {brows[0]['dtype']}: the float16 top 3\n\n{table(brows)}\n"
    print("\n" + md)
    bad = [f"{r['variant']} [{r['config']}]" for r in rows + brows if r["err"] is not None and not r["ok"]]
    print(f"correctness: {sum(r['ok'] for r in rows + brows)} ok, {len(bad)} wrong" + (f": {bad}" if bad else "")
          + f"; wall {time.time() - t_start:.0f}s")
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "flash-variants.md"), "w") as f:
            f.write(md)
        with open(os.path.join(out_dir, "flash-variants.json"), "w") as f:
            json.dump(dict(triton=triton.__version__, torch=torch.__version__, smoke=args.smoke_cpu, float16=rows,
                           second_dtype=brows, compile_failures={kk: e for kk, e in status.items() if e}), f, indent=1)
    if args.smoke_cpu and bad:
        raise SystemExit(1)

if __name__ == "__main__":
    main()
