"""Triton code of ``triton_decode``: the split and combine kernels, their launch constants
and the scratch they write (kernels/triton_decode.py has the design, plans the launch and
makes it; nothing here imports it back).

Imported only when the kernel is first called: importing triton is slow and, on the CPU,
must happen after TRITON_INTERPRET=1 is set.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
# The query tile is padded to this many rows: the smallest M of a tensor-core tl.dot.
MIN_DOT_ROWS = 16
# Launch defaults: no tile, warp, stage or programs-per-SM variant measured faster by more
# than 2% (docs/measurement.md#design-notes-moved-from-code). The interpreter has no pipeline.
NUM_WARPS = 4
NUM_STAGES = 3
COMBINE_WARPS = 4


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr):
    """tl.dot, or (interpreter + bf16 only) the same dot on exactly upcast fp32 operands.

    Triton's interpreter multiplies bf16 *bit patterns* in tl.dot (triton-lang/triton#11584,
    "not supported yet"); bf16 -> fp32 is exact and "ieee" keeps fp32 products exact, so
    the interpreter computes what the tensor cores do, up to accumulation order.
    """
    if UPCAST:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        r = tl.dot(a, b)
    return r


@triton.jit
def _globaltimer():
    """The GPU's global nanosecond timer (the same on every SM), for timelines."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _record(Rec, slot, t0):
    """Timeline row ``slot`` of this program: (start ns, end ns, SM)."""
    tl.store(Rec + slot * 3, t0)
    tl.store(Rec + slot * 3 + 1, _globaltimer())
    tl.store(Rec + slot * 3 + 2, _smid().to(tl.int64))


@triton.jit
def split_kernel(Q, K, V, M, L, ACC, Out, Count, Rec, qk_scale, seq_len, chunk, num_splits,
                  G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                  UPCAST: tl.constexpr, FUSED: tl.constexpr, S_PAD: tl.constexpr, S_BLOCK: tl.constexpr,
                  USE_PDL: tl.constexpr, REC: tl.constexpr):
    """One program: kv head ``bkv`` (all its G query heads), keys [split·chunk, +chunk).

    FUSED: the program that finishes last among its kv head's splits (an arrival counter
    per kv head) merges their partials into out, so a call is one launch instead of two.
    """
    if USE_PDL:
        # Launched early (programmatic dependent launch): wait until the kernel before
        # this one in the stream has finished and its writes are visible (it may have
        # written K/V, or still be reading the scratch), then let the combine launch, so
        # its CTAs are resident and waiting when this grid ends.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if REC:
        t0 = _globaltimer()
    bkv = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    g_mask = offs_g < G
    # q/out are (B, H, 1, D) with H = Hkv·G: the G heads of kv head bkv are rows bkv·G + g.
    head = bkv * G + offs_g
    q = tl.load(Q + head[:, None] * D + offs_d[None, :], mask=g_mask[:, None], other=0.0)

    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)
    # K/V are (B, Hkv, L, D): this kv head's rows start at bkv·L·D (64-bit: B·Hkv·L·D can pass 2^31).
    offs = (bkv * seq_len + start) * D + offs_n[:, None] * D + offs_d[None, :]
    k_ptrs = K + offs
    v_ptrs = V + offs

    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n_mask = (n0 + offs_n) < end
        k = tl.load(k_ptrs, mask=n_mask[:, None], other=0.0)
        s = _dot(q, tl.trans(k), UPCAST) * qk_scale                      # (G_PAD, BLOCK_N), log2 units
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))                        # finite: each tile has a live key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs, mask=n_mask[:, None], other=0.0)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, UPCAST)
        m_i = m_new
        k_ptrs += BLOCK_N * D
        v_ptrs += BLOCK_N * D

    part = head * num_splits + split
    tl.store(M + part, m_i, mask=g_mask)
    tl.store(L + part, l_i, mask=g_mask)
    tl.store(ACC + part[:, None] * D + offs_d[None, :], acc, mask=g_mask[:, None])
    if FUSED:
        # Every thread's partial stores come before the arrival (the barrier), and the
        # arrival is a gpu-scope release; the last arriver's acquire then orders its reads
        # of the other programs' partials after their stores (PTX causality order is
        # transitive through the CTA barrier). The reads bypass L1 (.cg): this SM's L1
        # may still hold the scratch of an earlier call.
        tl.debug_barrier()
        arrived = tl.atomic_add(Count + bkv, 1, sem="acq_rel", scope="gpu")
        if arrived == num_splits - 1:
            tl.atomic_xchg(Count + bkv, 0, sem="relaxed", scope="gpu")  # ready for the next call
            for g in tl.static_range(G):
                _merge_head(M, L, ACC, Out, bkv * G + g, num_splits, D, S_PAD, S_BLOCK)
    if REC:
        _record(Rec, bkv * num_splits + split, t0)


@triton.jit
def _merge_head(M, L, ACC, Out, row, num_splits, D: tl.constexpr, S_PAD: tl.constexpr, S_BLOCK: tl.constexpr):
    """Merge query head ``row``'s splits (m, l, acc) into out.

    S_BLOCK ≥ S_PAD: one pass, every load issued before the first use (one L2 round trip).
    Else the max over all splits first (a vector of S_PAD floats), then the weighted sums
    over blocks of S_BLOCK splits, so the register tile stays S_BLOCK × D however many splits.
    """
    offs_d = tl.arange(0, D)
    if S_BLOCK >= S_PAD:
        offs = tl.arange(0, S_PAD)
        s_mask = offs < num_splits
        base = row * num_splits + offs
        m = tl.load(M + base, mask=s_mask, other=float("-inf"), cache_modifier=".cg")
        l_ = tl.load(L + base, mask=s_mask, other=0.0, cache_modifier=".cg")
        acc = tl.load(ACC + base[:, None] * D + offs_d[None, :], mask=s_mask[:, None], other=0.0,
                      cache_modifier=".cg")
        w = tl.where(s_mask, tl.exp2(m - tl.max(m, 0)), 0.0)   # an empty split (m = -inf) weighs 0
        o = tl.sum(acc * w[:, None], 0) / tl.sum(w * l_, 0)
    else:
        offs_all = tl.arange(0, S_PAD)
        m_all = tl.load(M + row * num_splits + offs_all, mask=offs_all < num_splits, other=float("-inf"),
                        cache_modifier=".cg")
        m_max = tl.max(m_all, 0)
        offs_b = tl.arange(0, S_BLOCK)
        den = tl.zeros([S_BLOCK], tl.float32)
        num = tl.zeros([S_BLOCK, D], tl.float32)
        for s0 in range(0, num_splits, S_BLOCK):
            s_mask = (s0 + offs_b) < num_splits
            base = row * num_splits + s0 + offs_b
            m = tl.load(M + base, mask=s_mask, other=float("-inf"), cache_modifier=".cg")
            l_ = tl.load(L + base, mask=s_mask, other=0.0, cache_modifier=".cg")
            w = tl.where(s_mask, tl.exp2(m - m_max), 0.0)
            den += w * l_
            acc = tl.load(ACC + base[:, None] * D + offs_d[None, :], mask=s_mask[:, None], other=0.0,
                          cache_modifier=".cg")
            num += acc * w[:, None]
        o = tl.sum(num, 0) / tl.sum(den, 0)
    tl.store(Out + row * D + offs_d, o.to(Out.dtype.element_ty))


@triton.jit
def combine_kernel(M, L, ACC, Out, Rec, num_splits, rec_first, D: tl.constexpr, S_PAD: tl.constexpr,
                    S_BLOCK: tl.constexpr, USE_PDL: tl.constexpr, REC: tl.constexpr):
    """One program per query head (the unfused path's second launch)."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # the split grid has finished: every partial is visible
        tl.extra.cuda.gdc_launch_dependents()
    if REC:
        t0 = _globaltimer()
    row = tl.program_id(0).to(tl.int64)
    _merge_head(M, L, ACC, Out, row, num_splits, D, S_PAD, S_BLOCK)
    if REC:
        _record(Rec, rec_first + row, t0)


# The partials' scratch of the last shape, per device: (key, (m, l, acc, arrivals)). Decode
# runs once per token, so a serving loop reuses one buffer instead of four allocations per
# call (keeping it also made a fault of a timed sweep go away whose cause is not pinned
# down: docs/measurement.md#design-notes-moved-from-code). Calls on one device must share a stream (the harness and
# serving loops do).
_SCRATCH: dict = {}


def scratch(device, pairs: int, rows: int, splits: int, d: int):
    """(m, l, acc, arrivals): float32 partials and the fused path's int32 counter per kv head.

    The counters start at zero and the last arriver of each call puts its back to zero.
    """
    key = (pairs, rows, splits, d)
    # A call captured into a CUDA graph gets its own buffers from the graph's pool, never
    # the cached ones: a later call of another shape evicts (frees) those while the graph
    # still writes them on every replay (an illegal address once arms of several split
    # counts were captured in turn). And what a capture allocates must not outlive its
    # graph in this cache.
    keep = not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    hit = _SCRATCH.get(device)
    if keep and hit is not None and hit[0] == key:
        return hit[1]
    if keep:
        _SCRATCH.pop(device, None)  # the old shape's buffers go back before the new ones are taken
    buffers = tuple(torch.empty(shape, dtype=torch.float32, device=device)
                    for shape in ((rows, splits), (rows, splits), (rows, splits, d)))
    buffers += (torch.zeros(pairs, dtype=torch.int32, device=device),)
    if keep:
        _SCRATCH[device] = (key, buffers)
    return buffers
