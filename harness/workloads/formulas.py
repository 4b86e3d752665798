"""FLOP and byte formulas, in one place: reports, ceilings and the reductio all use these."""

from __future__ import annotations

from . import Config


def flops(cfg: Config) -> float:
    """Useful FLOPs of the forward pass: 2·(QKᵀ) + 2·(PV) multiply-adds.

    4·B·H·Nq·Nk·D, halved when causal (only the lower triangle is useful work).
    Softmax exponentials are not counted, as in FlashAttention's accounting.
    """
    f = 4.0 * cfg.batch * cfg.heads * cfg.q_len * cfg.seq_len * cfg.head_dim
    if cfg.causal and cfg.workload == "attention":
        f /= 2.0
    return f


def min_read_bytes(cfg: Config) -> float:
    """Fewest bytes any correct implementation must read: q, k and v, once each.

    Causal masking does not lower it: the last query row attends to every key.
    """
    qs, ks, _ = cfg.shapes()
    q = qs[0] * qs[1] * qs[2] * qs[3]
    kv = 2 * ks[0] * ks[1] * ks[2] * ks[3]
    return float((q + kv) * cfg.elem_bytes)


def min_bytes(cfg: Config) -> float:
    """Fewest bytes any implementation must move: read q, k, v once, write out once."""
    qs, _, _ = cfg.shapes()
    return min_read_bytes(cfg) + float(qs[0] * qs[1] * qs[2] * qs[3] * cfg.elem_bytes)


def kv_bytes(cfg: Config) -> float:
    """K+V cache bytes: the decode metric's numerator (effective KV bandwidth)."""
    _, ks, _ = cfg.shapes()
    return float(2 * ks[0] * ks[1] * ks[2] * ks[3] * cfg.elem_bytes)
