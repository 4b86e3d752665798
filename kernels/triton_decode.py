"""Split-KV (flash-decoding) attention in Triton, for workload "decode".

One query token per sequence, q (B, H, 1, D) against a KV cache k/v (B, Hkv, L, D).
Decode is memory-bound (each K/V byte is used for G·2 FLOPs), so the design goal is to
stream K and V once at full HBM bandwidth:

* **GQA in one program**: a program owns one (batch, kv head) and all G query heads that
  read it (a G×D query tile, padded to 16 rows for ``tl.dot``), so K/V are read once per
  kv head, not G times.
* **Split-KV**: B·Hkv programs alone cannot fill 132 SMs (B=16, Hkv=8 is 128 programs),
  so the L keys are cut into ``num_splits`` chunks, one program per (kv head, chunk).
  Each writes float32 partials (running max m, sum l, unnormalized acc) to scratch; a
  combine kernel merges them per query head: out = Σ 2^(m_s − M) acc_s / Σ 2^(m_s − M) l_s.
* The number of splits comes from B·Hkv and the SM count (``plan``): a small batch is cut
  into one wave of ~SMALL_PROGRAMS_PER_SM programs per SM; a large one aims for
  PROGRAMS_PER_SM per SM with the last wave of resident programs as full as possible.
  Chunks are whole tiles of ≥ MIN_KEYS_PER_SPLIT keys.

Numerics: QKᵀ and PV on tensor cores with fp32 accumulation, softmax in fp32 (exp2 with
log2(e) folded into the scale), P rounded to the input dtype for the PV dot (the usual
FlashAttention choice), partials and combine in fp32, one final rounding of out.

Measured figures (bandwidth against the copy ceiling per batch and length, the variants
that measured slower, per-program timelines) are in docs/measurement.md#decode-kernel-notes.

Runs on CUDA; on the CPU only under ``TRITON_INTERPRET=1`` (Triton's interpreter, set
before triton is first imported), where ``devices`` includes "cpu" — slow, for tests.
The Triton code lives in ``kernels/_triton_decode_impl.py`` (imported on first call, so
listing kernels never imports triton; it imports nothing from here); ``decode`` plans and
launches it, with the tuning overrides that explorations (research/) time.
"""

from __future__ import annotations

import functools
import os

from harness import kernel
from harness.errors import UserError
from ._decode_inputs import decode_dims

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_DEVICES = ("cuda", "cpu") if INTERPRET else ("cuda",)

HEAD_DIMS = (64, 128)
# Keys per tile: 16 KB of K (and of V) per tile for both head dims.
BLOCK_N_FOR_D = {64: 128, 128: 64}
# Query heads per kv head that fit one program's tile (the tile is padded to >= 16 rows).
MAX_GROUP = 64
# Programs we aim for per SM: two full waves of RESIDENT_PER_SM, so every SM keeps
# several K/V tiles in flight (HBM latency) and the tail of the last wave stays short.
PROGRAMS_PER_SM = 6
# Fewest keys a split should own: below this the pipeline barely fills and the partials
# (G·(D+2)·4 bytes per split) stop being negligible next to the K/V bytes.
MIN_KEYS_PER_SPLIT = 256
# Most splits: bounds the partials' scratch and the combine's max pass (a vector of
# MAX_SPLITS floats); the weighted sums go COMBINE_SPLIT_BLOCK splits at a time.
MAX_SPLITS = 512
# Programs per SM a small batch is cut for (B·Hkv ≤ this × SMs): one wave of about 2 per
# SM, all resident at once; more programs measured slower
# (docs/measurement.md#small-batches-the-split-plan-researchexplore_decode_splitspy).
SMALL_PROGRAMS_PER_SM = 2
# Splits merged per step of the combine: a 32 × D fp32 tile is 32 registers per thread at
# D=128 with 4 warps, and 32 splits cover every batch ≥ 16 plan in one step.
COMBINE_SPLIT_BLOCK = 32
# Up to this many splits the combine kernel merges in one pass (a ≤ 64 × D fp32 tile, 64 registers
# per thread): every load issued at once, one L2 round trip instead of two.
COMBINE_ONE_PASS_SPLITS = 64
# Merge the splits inside the split kernel (the last program of a kv head to finish
# merges, found by an arrival counter) instead of a second launch. Off: the last program's
# serial merge outlasts the second launch it saves (measured slower at every small batch:
# docs/measurement.md#design-notes-moved-from-code).
FUSE_COMBINE = False
# Launch split and combine with programmatic dependent launch (sm_90+, compiled Triton):
# each kernel's CTAs are scheduled while the kernel before it drains and wait on-chip
# (griddepcontrol.wait) instead of after a full launch gap (a gain at every shape measured:
# docs/measurement.md#programmatic-dependent-launch-9dee1b0).
LAUNCH_PDL = True
# Programs resident per SM, for the last-wave adjustment: the sm_90 build of the split
# kernel (D=128, BLOCK_N=64, 4 warps, 3 stages) uses 70 KB of shared memory (3 fit in
# 228 KB) and 102 registers/thread (5 fit), per Triton's AOT compile and cuobjdump.
RESIDENT_PER_SM = 3
# SM count used when no GPU is visible or under the interpreter (an H200 has 132).
DEFAULT_SM_COUNT = 132


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def sm_count(device=None) -> int:
    """SMs of ``device`` (a torch device), of the current CUDA device, or DEFAULT_SM_COUNT."""
    if INTERPRET:
        return DEFAULT_SM_COUNT
    import torch

    if device is not None and getattr(device, "type", None) != "cuda":
        return DEFAULT_SM_COUNT
    if not torch.cuda.is_available():
        return DEFAULT_SM_COUNT
    idx = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_properties(idx).multi_processor_count


def cut(seq_len: int, splits: int, block_n: int) -> tuple[int, int]:
    """(splits launched, chunk) for about ``splits`` chunks of whole tiles of block_n keys:
    rounding each chunk up to tiles can leave fewer splits than asked, never an empty one."""
    tiles = _cdiv(seq_len, block_n)
    chunk = _cdiv(tiles, max(1, min(splits, tiles))) * block_n
    return _cdiv(seq_len, chunk), chunk


def plan(batch: int, kv_heads: int, seq_len: int, head_dim: int, sms: int,
         programs_per_sm: int = PROGRAMS_PER_SM, block_n: int | None = None) -> tuple[int, int, int]:
    """(num_splits, chunk, block_n): how the L keys are cut; chunk is a multiple of block_n.

    Few (batch, kv head) pairs (≤ SMALL_PROGRAMS_PER_SM per SM): cut each into as many
    splits as keep the grid at SMALL_PROGRAMS_PER_SM programs per SM, one wave, all
    resident. Many pairs: aim for ``programs_per_sm`` per SM and take, among want..2·want
    splits, the one whose last wave of RESIDENT_PER_SM per SM is fullest (fewest on ties).
    Splits are counted after rounding chunks to whole tiles, as launched. Deterministic in
    its arguments, so ``scratch_bytes`` predicts exactly what ``decode`` allocates.
    """
    if seq_len < 1:
        raise UserError(f"triton_decode needs at least one key, not seq_len={seq_len}")
    block_n = block_n or BLOCK_N_FOR_D[head_dim]
    pairs = batch * kv_heads
    max_splits = max(1, min(MAX_SPLITS, _cdiv(seq_len, MIN_KEYS_PER_SPLIT)))

    def launched(splits: int) -> int:
        return cut(seq_len, splits, block_n)[0]

    if pairs <= SMALL_PROGRAMS_PER_SM * sms:
        best = launched(min(max(1, SMALL_PROGRAMS_PER_SM * sms // pairs), max_splits))
    else:
        want = min(max(1, _cdiv(programs_per_sm * sms, pairs)), max_splits)
        capacity = RESIDENT_PER_SM * sms
        best, best_eff = launched(want), -1.0
        for s in sorted({launched(s) for s in range(want, min(2 * want, max_splits) + 1)}):
            waves = pairs * s / capacity
            eff = waves / _cdiv(pairs * s, capacity)
            if eff > best_eff + 1e-9:
                best, best_eff = s, eff
    return (*cut(seq_len, best, block_n), block_n)


def scratch_bytes(cfg) -> int:
    """float32 partials: m and l (B·H·splits each) and acc (B·H·splits·D); an int32 arrival
    counter per (batch, kv head)."""
    if cfg.head_dim not in HEAD_DIMS:
        return 0
    splits, _, _ = plan(cfg.batch, cfg.kv_heads, cfg.seq_len, cfg.head_dim, sm_count())
    return cfg.batch * cfg.heads * splits * (cfg.head_dim + 2) * 4 + cfg.batch * cfg.kv_heads * 4


def _supports(cfg):
    if cfg.head_dim not in HEAD_DIMS:
        return f"triton_decode supports head_dim {'/'.join(map(str, HEAD_DIMS))}, not {cfg.head_dim}"
    if cfg.group > MAX_GROUP:
        return f"triton_decode keeps a kv head's query heads in one tile: group <= {MAX_GROUP}, not {cfg.group}"
    return None


@kernel("triton_decode", workloads=("decode",), dtypes=("float16", "bfloat16"), devices=_DEVICES,
        requires=("triton",), memory=scratch_bytes, supports=_supports,
        numerics={"dots": "tl.dot, fp32 accumulation", "softmax": "fp32 online (exp2), split-KV partials in fp32",
                  "P": "rounded to input dtype for the PV dot", "combine": "fp32, one rounding of out"})
def triton_decode(q, k, v, out, *, causal, scale):
    """Split-KV flash-decoding in Triton: GQA heads share one K/V read, fp32 combine."""
    # Decode is never masked: the one query is the newest token and sees the whole cache.
    del causal
    decode(q, k, v, out, scale)


@functools.lru_cache(maxsize=None)
def pdl_available(device) -> bool:
    """Programmatic dependent launch: compiled Triton with gdc_* on an sm_90+ GPU (asked
    once per device: decode's host time is on every call's path)."""
    import torch
    import triton.language as tl

    return (not INTERPRET and device.type == "cuda" and hasattr(tl.extra.cuda, "gdc_wait")
            and torch.cuda.get_device_capability(device)[0] >= 9)


def decode(q, k, v, out, scale: float, *, num_splits=None, block_n=None, num_warps=None, num_stages=None,
           programs_per_sm=PROGRAMS_PER_SM, fused=None, pdl=None, combine_block=None, timeline=None) -> int:
    """The kernel's launch, with tuning overrides for tests and explorations; returns the splits launched.

    Each override defaults to the shipped choice: ``num_splits`` (forced, rounded to whole
    tiles), ``block_n``, ``num_warps``, ``num_stages``, ``programs_per_sm``, ``fused`` (merge
    in the split kernel), ``pdl`` (programmatic dependent launch), ``combine_block``, and
    ``timeline`` (an int64 CUDA tensor of ≥ (split programs + combine programs) × 3 elements
    that receives each program's start ns, end ns and SM, split programs first).
    """
    import torch
    import triton

    from ._triton_decode_impl import (COMBINE_WARPS, LOG2E, MIN_DOT_ROWS, NUM_STAGES, NUM_WARPS,
                                      combine_kernel, scratch, split_kernel)

    b, h, hkv, seq_len, d = decode_dims("triton_decode", q, k, v, out, head_dims=HEAD_DIMS, max_group=MAX_GROUP,
                                        dtypes=("float16", "bfloat16"))
    g = h // hkv

    splits, chunk, block_n = plan(b, hkv, seq_len, d, sm_count(q.device), programs_per_sm, block_n)
    if num_splits is not None:  # forced split count (tests, explorations): plan()'s rounding
        splits, chunk = cut(seq_len, num_splits, block_n)
    if num_warps is None:
        num_warps = NUM_WARPS
    if num_stages is None:
        num_stages = 1 if INTERPRET else NUM_STAGES
    if fused is None:
        fused = FUSE_COMBINE
    if pdl is None:
        pdl = LAUNCH_PDL and pdl_available(q.device)
    elif pdl and not pdl_available(q.device):
        raise UserError("triton_decode: programmatic dependent launch needs compiled Triton with "
                        "tl.extra.cuda.gdc_wait on an sm_90+ GPU; call with pdl=None or False")
    launch = {"launch_pdl": True} if pdl else {}

    m, l_, acc, arrivals = scratch(q.device, b * hkv, b * h, splits, d)
    s_pad = max(2, triton.next_power_of_2(splits))
    if combine_block is None:
        combine_block = s_pad if s_pad <= COMBINE_ONE_PASS_SPLITS else COMBINE_SPLIT_BLOCK
    elif combine_block < 2 or combine_block & (combine_block - 1):
        raise UserError(f"triton_decode: combine_block must be a power of 2 >= 2, not {combine_block}")
    rec = timeline is not None
    if rec and INTERPRET:
        raise UserError("triton_decode: a timeline reads %globaltimer, which needs compiled Triton on a GPU")
    if rec and (timeline.dtype != torch.int64 or timeline.device != q.device or not timeline.is_contiguous()):
        raise UserError(f"triton_decode: timeline must be a contiguous int64 tensor on {q.device}, "
                        f"not {timeline.dtype} on {timeline.device}")
    if rec and timeline.numel() < 3 * (b * hkv * splits + (0 if fused else b * h)):
        raise UserError(f"triton_decode: timeline has {timeline.numel()} elements, fewer than 3 per program")
    split_kernel[(b * hkv, splits)](
        q, k, v, m, l_, acc, out, arrivals, timeline if rec else arrivals, scale * LOG2E, seq_len, chunk, splits,
        G=g, G_PAD=max(MIN_DOT_ROWS, triton.next_power_of_2(g)), D=d, BLOCK_N=block_n,
        UPCAST=INTERPRET and q.dtype == torch.bfloat16, FUSED=fused, S_PAD=s_pad, S_BLOCK=COMBINE_SPLIT_BLOCK,
        USE_PDL=pdl, REC=rec, num_warps=num_warps, num_stages=num_stages, **launch)
    if not fused:
        combine_kernel[(b * h,)](m, l_, acc, out, timeline if rec else arrivals, splits, b * hkv * splits, D=d,
                                 S_PAD=s_pad, S_BLOCK=combine_block, USE_PDL=pdl, REC=rec,
                                 num_warps=COMBINE_WARPS, **launch)
    return splits
