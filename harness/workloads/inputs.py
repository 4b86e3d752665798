"""Input families for the correctness gate: deterministic, adversarial q, k, v.

Random standard-normal inputs let a hollow kernel pass: softmax averages errors away and
small outputs hide inside an absolute tolerance (the fused-attention campaign: a kernel with no softmax at all
"produced finite plausible-looking floats"). Each family below defeats one shortcut.

Inputs are generated where they are used, from a counter-based generator (``_normals``):
element i of a tensor is a pure function of (seed, family, config, tensor, i), computed in
integer arithmetic and float64, then rounded to float32 and to the dtype. So the CPU and
every GPU see the same inputs, each seed is reproducible alone, and a 32k-token decode
cache (billions of elements) is drawn on the GPU in a fraction of a second instead of
half a minute of CPU randn per check. The families' few extra draws (outlier positions,
one-hot columns) come from a seeded CPU ``torch.Generator``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os

from harness.errors import UserError
from harness.optional import importable
from harness.workloads import Config, dtype_name

FAMILIES: dict[str, str] = {
    "normal": "q, k, v standard normal",
    "outliers": "the llama-bench decode artifact's injections: ±57 in q every 911 rows, ±138 in v every 1543 rows "
                "(strides shrink on short tensors so at least OUTLIER_MIN_HITS land)",
    "large_logits": "one-hot attention with logits ≈ LARGE_LOGIT: exp without max-subtraction "
                    "overflows in every dtype",
    "distinct": "q, k, v with different means and scales: swapped or reused operands, and a "
                "missing softmax normalization, show",
}
# Every family by default: each one is the only family that catches some hollow kernel.
DEFAULT_FAMILIES: tuple[str, ...] = ("normal", "outliers", "large_logits", "distinct")

# The llama-bench decode artifact's magnitudes and strides (a decode kernel that read 7.9% of
# the KV cache passed plain random data). q's value is the artifact's at head_dim 128 and scales with √(D/128), so
# its effect on a logit (57·k·D^-½ ≈ 5 per unit of k) is the same at every head_dim.
OUTLIER_Q, OUTLIER_Q_EVERY, OUTLIER_HEAD_DIM = 57.0, 911, 128
OUTLIER_V, OUTLIER_V_EVERY = 138.0, 1543
# On tensors shorter than a stride the seed's rule injects nothing (a 40-head decode query
# has 40 rows, never 911): the stride shrinks to ⌈rows / OUTLIER_MIN_HITS⌉ instead.
OUTLIER_MIN_HITS = 4

# Top logit of the large_logits family, after scaling. Past float32's exp overflow (88.7),
# so every dtype overflows without max-subtraction; the runner-up logit is at most half of
# it, so the softmax stays one-hot even when a kernel rounds S to bfloat16 (ULP 2 at 300).
LARGE_LOGIT = 300.0
# Keys outside their column's target are clamped to ±LARGE_K_CLAMP, the target holds
# LARGE_K_TARGET: the margin between them is what keeps the attention one-hot.
LARGE_K_CLAMP, LARGE_K_TARGET = 4.0, 8.0

# distinct: (mean, std) per operand. A q mean shifts logits per key (a k mean would not:
# it adds a per-query constant that softmax removes); v's mean survives normalization, so
# a kernel that forgets to divide by the row sum is off by the whole sum.
DISTINCT = {"q": (0.5, 1.0), "k": (-0.25, 1.5), "v": (1.0, 2.0)}

# Boundary shapes the gate also checks, at the config's other fields: one token, and
# primes just past the usual 64- and 128-wide tiles (a partial last tile, and a grid sized
# with floor instead of ceil, both show).
BOUNDARY_SEQ_LENS = (1, 67, 131)


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise UserError(f"unknown input family '{family}' (known: {', '.join(FAMILIES)})")


def input_seed(cfg: Config, seed: int, family: str) -> int:
    """The generator seed for (seed, family, config): stable across processes and machines.

    The dtype is left out, so one shape gets the same float32 values in every dtype (each
    dtype sees them rounded): cross-dtype comparisons judge the kernel, not the draw.
    """
    shape = (cfg.workload, cfg.batch, cfg.heads, cfg.kv_heads, cfg.seq_len, cfg.head_dim, cfg.causal)
    text = f"{int(seed)}|{family}|{shape}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def outlier_rows(rows: int, every: int) -> list[int]:
    """Flat row indices that receive an outlier: every ``every`` rows, shrunk for short tensors.

    Counted back from the last row, so the tail (the partial last tile, the KV rows a
    truncated loop skips) always carries one.
    """
    stride = max(1, min(every, -(-rows // OUTLIER_MIN_HITS)))
    return list(range(rows - 1, -1, -stride))


# The counter-based generator: splitmix64 (Steele, Lea, Flood 2014) over the element
# index, Box-Muller on the hash's two 32-bit halves in float64. Integer steps are exact
# everywhere (int64 arithmetic wraps modulo 2^64 in torch on the CPU and on CUDA); log/cos
# are float64 library calls whose rare last-bit differences between devices vanish in the
# rounding to float32 (tests compare CPU and GPU draws bit for bit on the device).
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)   # splitmix64's increment, as a signed int64
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_MASK32 = 0xFFFFFFFF
# Box-Muller's float64 constants, one spelling for both paths (inputs_fused reads them from
# _constants): u1 = (hi + ½)·2^-32, r = √(−2·ln u1), θ = lo·(2π·2^-32).
_HALF, _TWO_M32, _MINUS_TWO = 0.5, 2.0 ** -32, -2.0
_TURN = 2.0 * math.pi * 2.0 ** -32
# Elements per generation step: bounds the temporaries (GEN_BYTES_PER_ELEM each) to
# ~150 MiB whatever the tensor size, while keeping a 2-billion-element KV cache to ~500
# steps of a few elementwise kernels each.
GEN_CHUNK = 1 << 22
# Peak live bytes per element inside _normals: three 8-byte arrays at once (the int64
# state with its high half as int64 and float64, then the state, r and theta); the
# splitmix steps hold two, the float32 draw and its cast 12. Summing every array (38)
# over-predicted decode configs by ~60 MB per 4 Mi-element chunk (docs/measurement.md#vram-model).
GEN_BYTES_PER_ELEM = 3 * 8


def generation_bytes(cfg: Config, device: str = "cpu") -> int:
    """Peak device scratch of generating ``cfg``'s inputs on ``device`` (the VRAM model adds
    it): none where the one-pass draw writes straight into the tensors."""
    if use_fused_draw(device, cfg.dtype):
        return 0
    qs, ks, _ = cfg.shapes()
    return GEN_BYTES_PER_ELEM * min(GEN_CHUNK, max(math.prod(qs), math.prod(ks)))


def _srl_(z, s: int):
    """Logical right shift of an int64 tensor, as a new tensor (torch's >> is arithmetic)."""
    return (z >> s).bitwise_and_((1 << (64 - s)) - 1)


def _splitmix64_(z):
    """splitmix64's finalizer, in place on an int64 tensor (one temporary at a time)."""
    for shift, mul in ((30, _MIX1), (27, _MIX2), (31, None)):
        t = _srl_(z, shift)
        z.bitwise_xor_(t)
        del t
        if mul is not None:
            z.mul_(mul)
    return z


def _stream_key(base: int, name: str) -> int:
    """A 63-bit key per (input seed, tensor): q, k and v never share a stream."""
    return int.from_bytes(hashlib.sha256(f"{base}|{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _normals(key: int, start: int, count: int, device):
    """Standard normals for element indices [start, start + count) of stream ``key``, float32.

    In place wherever possible, so at most GEN_BYTES_PER_ELEM bytes per element are live.
    """
    import torch

    z = torch.arange(start + 1, start + count + 1, dtype=torch.int64, device=device)
    _splitmix64_(z.mul_(_GOLDEN).add_(key))
    t = _srl_(z, 32)
    u1 = t.to(torch.float64)                        # high 32 bits
    del t
    u1.add_(_HALF).mul_(_TWO_M32)                   # (0, 1): log never sees 0
    r = u1.log_().mul_(_MINUS_TWO).sqrt_()
    t = z.bitwise_and_(_MASK32)                     # low 32 bits, in z's storage
    theta = t.to(torch.float64)
    del t, z
    # (z·2^-32)·2π and z·(2π·2^-32) round to the same float64: the power of two is exact.
    theta.mul_(_TURN).cos_().mul_(r)
    del r
    return theta.to(torch.float32)


# The dtypes the one-pass draw writes (the inputs' dtypes; any other takes the torch path).
FUSED_DRAW_DTYPES = ("float16", "bfloat16", "float32")


def use_fused_draw(device, dtype) -> bool:
    """Whether inputs of ``dtype`` (a torch dtype or its name) on ``device`` are drawn in one
    Triton pass (inputs_fused.py): a GPU with Triton, unless Triton runs in its interpreter."""
    return (getattr(device, "type", str(device).split(":")[0]) == "cuda" and dtype_name(dtype) in FUSED_DRAW_DTYPES
            and os.environ.get("TRITON_INTERPRET") != "1" and importable("harness.workloads.inputs_fused"))


_CONSTANTS: dict = {}


def _constants(device):
    """The draw's float64 constants on ``device``, made once (inputs_fused reads them from memory)."""
    import torch

    key = str(device)
    if key not in _CONSTANTS:
        _CONSTANTS[key] = torch.tensor([_HALF, _TWO_M32, _MINUS_TWO, _TURN], dtype=torch.float64, device=device)
    return _CONSTANTS[key]


def _fill_normal_(t, key: int, mean_std: tuple[float, float] | None = None) -> None:
    """Write the stream's normals into ``t`` (contiguous, any float dtype) chunk by chunk, or in
    one Triton pass on a GPU (``use_fused_draw``: the same values).

    ``mean_std`` is applied in float32 before the cast, as two roundings (x·std, then
    + mean): the values do not depend on the dtype or the chunking.
    """
    if use_fused_draw(t.device, t.dtype):
        from harness.workloads import inputs_fused

        inputs_fused.fill_normal_(t, key, mean_std, _constants(t.device), (_GOLDEN, _MIX1, _MIX2))
    else:
        _fill_normal_torch_(t, key, mean_std)


def _fill_normal_torch_(t, key: int, mean_std: tuple[float, float] | None = None) -> None:
    """``_fill_normal_`` in torch operations, GEN_CHUNK elements at a time (any device)."""
    flat = t.view(-1)
    n = flat.numel()
    for s in range(0, n, GEN_CHUNK):
        e = min(n, s + GEN_CHUNK)
        x = _normals(key, s, e - s, t.device)
        if mean_std is not None:
            x.mul_(mean_std[1]).add_(mean_std[0])
        flat[s:e] = x
        del x


def _fill(q, k, v, cfg: Config, seed: int, family: str) -> None:
    """Write (cfg, seed, family)'s inputs into contiguous q, k, v (any float dtype, any device)."""
    import torch

    _check_family(family)
    base = input_seed(cfg, seed, family)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(base)
    dev = q.device
    for name, t in (("q", q), ("k", k), ("v", v)):
        _fill_normal_(t, _stream_key(base, name), DISTINCT[name] if family == "distinct" else None)
    d = cfg.head_dim

    def as_dtype(x, t):
        # Values are formed in float32 (as the draw), then rounded once to t's dtype.
        return x.to(torch.float32).to(t.dtype).to(dev)

    if family == "outliers":
        q_val = OUTLIER_Q * (d / OUTLIER_HEAD_DIM) ** 0.5
        for t, val, every in ((q, q_val, OUTLIER_Q_EVERY), (v, OUTLIER_V, OUTLIER_V_EVERY)):
            flat = t.view(-1, d)
            rows = torch.tensor(outlier_rows(flat.shape[0], every), dtype=torch.long)
            cols = torch.randint(0, d, (rows.numel(),), generator=gen)
            signs = torch.randint(0, 2, (rows.numel(),), generator=gen).float() * 2 - 1
            flat[rows.to(dev), cols.to(dev)] = as_dtype(signs * val, t)
    elif family == "large_logits":
        # Column c of every kv head has one target key t_c (spread over the sequence, t_0 = 0
        # so the first causal query has one); query row i is beta·e_c for a column whose target
        # it can see, so its top logit is LARGE_LOGIT and every other is at most half of it.
        # (±LARGE_K_CLAMP and LARGE_K_TARGET are exact in every dtype: clamping after the
        # cast equals clamping before it.)
        nk, nq = cfg.seq_len, cfg.q_len
        k.clamp_(-LARGE_K_CLAMP, LARGE_K_CLAMP)
        targets = (torch.arange(d) * nk) // d
        k[:, :, targets.to(dev), torch.arange(d, device=dev)] = LARGE_K_TARGET
        beta = LARGE_LOGIT / (LARGE_K_TARGET * cfg.scale)
        off = nk - nq
        # Columns whose target row i can see: targets are increasing, so a prefix 0..n_i-1.
        visible = targets[None, :] <= (torch.arange(nq)[:, None] + off) if cfg.causal else \
            torch.ones(nq, d, dtype=torch.bool)
        n_vis = visible.sum(1)  # >= 1: t_0 = 0 <= i + off
        u = torch.rand(cfg.batch, cfg.heads, nq, generator=gen)
        cols = torch.minimum((u * n_vis).long(), n_vis - 1)
        q.zero_()
        q.scatter_(3, cols.unsqueeze(-1).to(dev), as_dtype(torch.tensor(beta), q).expand(*cols.shape, 1))


def make_inputs(cfg: Config, seed: int, family: str = "normal", device: str = "cpu"):
    """Fresh (q, k, v) of ``cfg``'s shapes and dtype on ``device``, identical on every device."""
    import torch

    _check_family(family)
    dtype = getattr(torch, cfg.dtype)
    qs, ks, _ = cfg.shapes()
    q, k, v = (torch.empty(s, dtype=dtype, device=device) for s in (qs, ks, ks))
    _fill(q, k, v, cfg, seed, family)
    return q, k, v


def fill_inputs_(q, k, v, cfg: Config, seed: int, family: str = "normal") -> None:
    """Write make_inputs' values into existing buffers (same data_ptr): the in-place recheck."""
    qs, ks, _ = cfg.shapes()
    for name, t, shape in (("q", q, qs), ("k", k, ks), ("v", v, ks)):
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, config {cfg.key()} needs {shape}")
        if not t.is_contiguous():
            raise ValueError(f"{name} is not contiguous: fill_inputs_ writes the flat buffer")
    _fill(q, k, v, cfg, seed, family)


def boundary_configs(cfg: Config) -> list[Config]:
    """Small extra configs at boundary sequence lengths, other fields as ``cfg``."""
    return [dataclasses.replace(cfg, seq_len=n) for n in BOUNDARY_SEQ_LENS if n != cfg.seq_len]
