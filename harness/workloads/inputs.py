"""Input families for the correctness gate: deterministic, adversarial q, k, v.

Random standard-normal inputs let a hollow kernel pass: softmax averages errors away and
small outputs hide inside an absolute tolerance (seed 000: a kernel with no softmax at all
"produced finite plausible-looking floats"). Each family below defeats one shortcut.

Inputs are generated on the CPU in float32 from a ``torch.Generator`` seeded by
(seed, family, config) and only then cast and moved, so the CPU and every GPU see
bit-identical inputs, and a fresh generator per call makes each seed reproducible alone.
"""

from __future__ import annotations

import dataclasses
import hashlib

from harness.errors import UserError
from harness.workloads import Config

FAMILIES: dict[str, str] = {
    "normal": "q, k, v standard normal",
    "outliers": "seed 004's injections: ±57 in q every 911 rows, ±138 in v every 1543 rows "
                "(strides shrink on short tensors so at least OUTLIER_MIN_HITS land)",
    "large_logits": "one-hot attention with logits ≈ LARGE_LOGIT: exp without max-subtraction "
                    "overflows in every dtype",
    "distinct": "q, k, v with different means and scales: swapped or reused operands, and a "
                "missing softmax normalization, show",
}
# Every family by default: each one is the only family that catches some hollow kernel.
DEFAULT_FAMILIES: tuple[str, ...] = ("normal", "outliers", "large_logits", "distinct")

# Seed 004's magnitudes and strides (a decode kernel that read 7.9% of the KV cache passed
# plain random data). q's value is seed 004's at head_dim 128 and scales with √(D/128), so
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


def _generate(cfg: Config, seed: int, family: str):
    """q, k, v as CPU float32 tensors for (cfg, seed, family)."""
    import torch

    _check_family(family)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(input_seed(cfg, seed, family))
    qs, ks, _ = cfg.shapes()
    q = torch.randn(qs, generator=gen, dtype=torch.float32)
    k = torch.randn(ks, generator=gen, dtype=torch.float32)
    v = torch.randn(ks, generator=gen, dtype=torch.float32)
    d = cfg.head_dim

    if family == "outliers":
        q_val = OUTLIER_Q * (d / OUTLIER_HEAD_DIM) ** 0.5
        for t, val, every in ((q, q_val, OUTLIER_Q_EVERY), (v, OUTLIER_V, OUTLIER_V_EVERY)):
            flat = t.view(-1, d)
            rows = torch.tensor(outlier_rows(flat.shape[0], every), dtype=torch.long)
            cols = torch.randint(0, d, (rows.numel(),), generator=gen)
            signs = torch.randint(0, 2, (rows.numel(),), generator=gen).float() * 2 - 1
            flat[rows, cols] = signs * val
    elif family == "large_logits":
        # Column c of every kv head has one target key t_c (spread over the sequence, t_0 = 0
        # so the first causal query has one); query row i is beta·e_c for a column whose target
        # it can see, so its top logit is LARGE_LOGIT and every other is at most half of it.
        nk, nq = cfg.seq_len, cfg.q_len
        k.clamp_(-LARGE_K_CLAMP, LARGE_K_CLAMP)
        targets = (torch.arange(d) * nk) // d
        k[:, :, targets, torch.arange(d)] = LARGE_K_TARGET
        beta = LARGE_LOGIT / (LARGE_K_TARGET * cfg.scale)
        off = nk - nq
        # Columns whose target row i can see: targets are increasing, so a prefix 0..n_i-1.
        visible = targets[None, :] <= (torch.arange(nq)[:, None] + off) if cfg.causal else \
            torch.ones(nq, d, dtype=torch.bool)
        n_vis = visible.sum(1)  # >= 1: t_0 = 0 <= i + off
        u = torch.rand(cfg.batch, cfg.heads, nq, generator=gen)
        cols = torch.minimum((u * n_vis).long(), n_vis - 1)
        q.zero_()
        q.scatter_(3, cols.unsqueeze(-1), beta)
    elif family == "distinct":
        for t, name in ((q, "q"), (k, "k"), (v, "v")):
            mean, std = DISTINCT[name]
            t.mul_(std).add_(mean)
    return q, k, v


def make_inputs(cfg: Config, seed: int, family: str = "normal", device: str = "cpu"):
    """Fresh (q, k, v) of ``cfg``'s shapes and dtype on ``device``, identical on every device."""
    import torch

    dtype = getattr(torch, cfg.dtype)
    return tuple(t.to(dtype).to(device).contiguous() for t in _generate(cfg, seed, family))


def fill_inputs_(q, k, v, cfg: Config, seed: int, family: str = "normal") -> None:
    """Write make_inputs' values into existing buffers (same data_ptr): the in-place recheck."""
    qs, ks, _ = cfg.shapes()
    for name, t, shape in (("q", q, qs), ("k", k, ks), ("v", v, ks)):
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, config {cfg.key()} needs {shape}")
    for dst, src in zip((q, k, v), _generate(cfg, seed, family)):
        dst.copy_(src.to(dst.dtype))


def boundary_configs(cfg: Config) -> list[Config]:
    """Small extra configs at boundary sequence lengths, other fields as ``cfg``."""
    return [dataclasses.replace(cfg, seq_len=n) for n in BOUNDARY_SEQ_LENS if n != cfg.seq_len]
