"""The chunked float64 reference against a naive float64 implementation."""

from __future__ import annotations

import math

import pytest
import torch

from harness.measurement.reference import REFERENCE_CHUNK_BYTES, plan_chunks, reference, reference_bytes
from harness.workloads import Config

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def naive(q, k, v, *, causal, scale):
    """Full-matrix float64 attention with explicit per-element bottom-right masking."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * scale
    nq, nk = s.shape[-2:]
    if causal:
        for i in range(nq):
            s[..., i, i + (nk - nq) + 1:] = float("-inf")
    return torch.softmax(s, dim=-1) @ v


def rand(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


CASES = [  # (B, H, Hkv, Nq, Nk, D)
    (2, 4, 2, 37, 37, 8),     # GQA prefill, odd length
    (1, 3, 3, 1, 50, 16),     # decode, MHA
    (2, 8, 2, 1, 19, 8),      # decode, GQA
    (1, 2, 1, 5, 9, 4),       # fewer queries than keys: bottom-right alignment matters
    (1, 1, 1, 1, 1, 4),       # one token
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_bytes", [1, 700, 130_000, REFERENCE_CHUNK_BYTES])  # 130 kB: 2 of 4 pairs per chunk
def test_matches_naive(case, causal, chunk_bytes):
    b, h, hkv, nq, nk, d = case
    q, k, v = rand((b, h, nq, d), 1), rand((b, hkv, nk, d), 2), rand((b, hkv, nk, d), 3)
    scale = d ** -0.5
    got = reference(q, k, v, causal=causal, scale=scale, chunk_bytes=chunk_bytes)
    assert got.dtype == torch.float64 and got.device == q.device and got.shape == q.shape
    torch.testing.assert_close(got, naive(q, k, v, causal=causal, scale=scale), rtol=1e-12, atol=1e-12)


def test_bottom_right_alignment_by_hand():
    # 2 queries, 3 keys, causal: query 0 sees keys 0..1, query 1 sees 0..2.
    q = torch.zeros(1, 1, 2, 1)
    k = torch.zeros(1, 1, 3, 1)
    v = torch.tensor([1.0, 2.0, 6.0]).view(1, 1, 3, 1)
    out = reference(q, k, v, causal=True, scale=1.0)
    assert out.flatten().tolist() == [1.5, 3.0]
    # Decode (one query) sees the whole cache, causal or not.
    d = reference(q[:, :, :1], k, v, causal=True, scale=1.0)
    assert d.flatten().tolist() == [3.0]


def test_reads_inputs_only_and_handles_half_types():
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = rand((1, 2, 9, 8), 4, dtype), rand((1, 1, 9, 8), 5, dtype), rand((1, 1, 9, 8), 6, dtype)
        copies = [t.clone() for t in (q, k, v)]
        got = reference(q, k, v, causal=True, scale=0.3, chunk_bytes=200)
        for a, b in zip(copies, (q, k, v)):
            assert torch.equal(a, b)
        torch.testing.assert_close(got, naive(q, k, v, causal=True, scale=0.3), rtol=1e-12, atol=1e-12)


def test_large_logits_are_stable():
    q = torch.full((1, 1, 3, 2), 300.0)
    k = torch.full((1, 1, 3, 2), 300.0)
    v = rand((1, 1, 3, 2), 7)
    got = reference(q, k, v, causal=True, scale=1.0)
    assert torch.isfinite(got).all()


def test_rejects_bad_shapes():
    with pytest.raises(ValueError):
        reference(torch.zeros(1, 3, 4, 8), torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), causal=False, scale=1.0)
    with pytest.raises(ValueError):
        reference(torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 4, 8), torch.zeros(1, 1, 4, 8), causal=True, scale=1.0)


def test_plan_respects_budget():
    for g, nq, nk, d in [(4, 32768, 32768, 128), (8, 1, 32768, 128), (1, 67, 67, 64), (2, 1, 1, 16)]:
        for n_pairs in (1, 64):
            pairs, heads, rows = plan_chunks(g, nq, nk, d, pairs=n_pairs)
            assert 1 <= pairs <= n_pairs and 1 <= heads <= g and 1 <= rows <= nq
            assert pairs == 1 or (heads, rows) == (g, nq)  # pairs batch only whole groups
            row = nk * 17 + 16 * d
            scratch = heads * rows * row + (2 * 8 * nk * d if pairs > 1 else 0)
            assert pairs * scratch <= max(REFERENCE_CHUNK_BYTES, row)


def test_reference_bytes_bounded_at_32k():
    cfg = Config("attention", 1, 32, 8, 32768, 128, "bfloat16", True)
    out64 = 8 * 32 * 32768 * 128
    kv64 = 2 * 8 * 32768 * 128
    got = reference_bytes(cfg)
    assert out64 + kv64 < got <= out64 + kv64 + REFERENCE_CHUNK_BYTES
    dec = Config("decode", 16, 32, 8, 32768, 128, "float16", False)
    assert reference_bytes(dec) <= 8 * 16 * 32 * 128 + kv64 + REFERENCE_CHUNK_BYTES
    # It grows with the output, never with Nq·Nk.
    small = reference_bytes(Config("attention", 1, 32, 8, 1024, 128, "bfloat16", True))
    assert small < got and math.isfinite(small)


@pytest.mark.gpu
@cuda
def test_cuda_matches_cpu():
    q, k, v = rand((2, 4, 300, 64), 8), rand((2, 2, 300, 64), 9), rand((2, 2, 300, 64), 10)
    cpu = reference(q, k, v, causal=True, scale=0.125)
    gpu = reference(q.cuda(), k.cuda(), v.cuda(), causal=True, scale=0.125, chunk_bytes=64 * 2**10)
    assert gpu.device.type == "cuda" and gpu.dtype == torch.float64
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@cuda
def test_cuda_peak_memory_within_reference_bytes():
    cfg = Config("attention", 1, 4, 2, 4096, 64, "float16", True)
    q = torch.randn(1, 4, 4096, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 2, 4096, 64, device="cuda", dtype=torch.float16)
    v = torch.randn_like(k)
    chunk = 16 * 2**20
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = reference(q, k, v, causal=True, scale=cfg.scale, chunk_bytes=chunk)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert out.shape == q.shape
    # Allocator rounding and the amax/sum row vectors: allow 10% over the model.
    assert peak <= 1.1 * reference_bytes(cfg, chunk_bytes=chunk), (peak, reference_bytes(cfg, chunk_bytes=chunk))
