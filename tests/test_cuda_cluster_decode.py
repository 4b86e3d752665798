"""cuda_cluster_decode: cluster planning and shared-memory layout (CPU), numerics (GPU).

Every GPU check poisons ``out`` with NaN first and compares with a float64 reference by
‖out − ref‖ / ‖ref‖. Tolerance: 2 unit roundoffs of the input dtype (fp16 2·2⁻¹¹, bf16
2·2⁻⁸), as for triton_decode: the two roundings that dominate are P's to the input dtype
for the PV product and out's (≤ u/2 per element each); everything else is fp32.
"""

from __future__ import annotations

import re

import pytest

from harness.errors import UserError
from harness.workloads import Config
from bench_kernels.cuda_cluster_decode import (
    BLOCK_N,
    HEAD_DIMS,
    MAX_CLUSTER,
    MAX_GROUP,
    PIPELINE_BYTES,
    THREADS,
    pipeline_stages,
    plan,
    smem_bytes,
)
from bench_kernels.cuda_raw import KERNELS_DIR

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
TOL = {dt: 2 * u for dt, u in UNIT_ROUNDOFF.items()}
# The most dynamic shared memory one CTA may take on sm_90 (227 KB).
SM90_MAX_SMEM_PER_CTA = 227 * 1024


# A GPU whose GPCs hold these many one-CTA SMs (132 in all): a cluster's CTAs share a GPC.
GPCS = (18, 18, 18, 16, 16, 16, 16, 14)


def gpc_model(pairs):
    """co_resident(C) for plan(): do ``pairs`` clusters of C one-SM CTAs fit GPCS at once?"""
    return lambda c: sum(n // c for n in GPCS) >= pairs


@pytest.mark.parametrize("pairs", [1, 2, 3, 8, 16, 32, 64, 100, 128, 132, 256, 1000])
@pytest.mark.parametrize("seq_len", [1, 37, 64, 65, 8192, 32768, 100_003])
@pytest.mark.parametrize("sms", [1, 78, 132])
@pytest.mark.parametrize("fits", ["all", "gpcs"])
def test_plan_is_one_wave_of_the_largest_co_resident_cluster_and_covers_every_key(pairs, seq_len, sms, fits):
    co_resident = (lambda c: True) if fits == "all" else gpc_model(pairs)
    asked = []

    def spy(c):
        asked.append(c)
        return co_resident(c)

    c, chunk = plan(pairs, seq_len, sms, spy)
    assert 1 <= c <= MAX_CLUSTER
    assert c == 1 or (pairs * c <= sms and co_resident(c))  # one wave, all clusters resident
    # the largest such size: every larger one asked was refused (or is over the SM count)
    assert all(not co_resident(x) or pairs * x > sms for x in range(c + 1, MAX_CLUSTER + 1))
    assert all(x > c for x in asked[:-1])
    assert chunk % BLOCK_N == 0 and c * chunk >= seq_len  # whole tiles, every key owned
    assert chunk - BLOCK_N < seq_len / c  # and no more than one tile over an even share
    assert pipeline_stages(128) * 2 * BLOCK_N * 128 * 2 == PIPELINE_BYTES


def test_plan_for_the_registered_shapes():
    # 8 kv heads on 132 SMs. Clusters all fit: 16 CTAs per kv head at B 1 (128 SMs), 8 at
    # B 2, 4 at B 4, 1 from B 16. With GPCs of 14-18 SMs only 7 clusters of 16 fit at once
    # (a second wave), so B 1 takes 14; B 2 takes 7 (8 fit 15 times, not 16); B 4 takes 3
    # (4 fit 31 times, not 32).
    assert [plan(b * 8, 8192, 132, lambda c: True)[0] for b in (1, 2, 4, 16, 64)] == [16, 8, 4, 1, 1]
    assert [plan(b * 8, 8192, 132, gpc_model(b * 8))[0] for b in (1, 2, 4, 16)] == [14, 7, 3, 1]
    assert plan(8, 8192, 132, lambda c: True)[1] == 512


def test_plan_refuses_an_empty_cache():
    with pytest.raises(UserError, match="needs at least one key, not seq_len=0"):
        plan(8, 0, 132, lambda c: True)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("group", range(1, MAX_GROUP + 1))
def test_shared_memory_fits_one_cta_per_sm(head_dim, group):
    stages = pipeline_stages(head_dim)
    assert smem_bytes(head_dim, group, stages) <= SM90_MAX_SMEM_PER_CTA


def test_python_constants_match_the_cuda_source():
    src = open(f"{KERNELS_DIR}/decode_cluster.cu", encoding="utf-8").read()
    define = {m[1]: int(m[2]) for m in re.finditer(r"#define (CD_\w+) (\d+)", src)}
    assert define["CD_BLOCK_N"] == BLOCK_N
    assert (define["CD_NWARPS"] + 1) * 32 == THREADS
    assert '#include "cuda_common.cuh"' in src and "void __cluster_dims__(C, 1, 1)" in src


def test_registration_and_what_it_refuses():
    from harness import load_kernels

    spec = load_kernels()["cuda_cluster_decode"]
    assert spec.workloads == ("decode",) and spec.devices == ("cuda",) and spec.requires == ("cupy",)
    assert spec.dtypes == ("float16", "bfloat16")
    assert spec.extra_bytes(Config("decode", 1, 32, 8, 8192, 128, "float16", False)) == 0  # no scratch
    assert spec.config_reason(Config("decode", 1, 32, 8, 8192, 128, "float16", False)) is None
    assert "head_dim 64/128, not 96" in spec.config_reason(Config("decode", 1, 32, 8, 8192, 96, "float16", False))
    assert "group (heads / kv_heads) <= 16, not 32" in spec.config_reason(
        Config("decode", 1, 64, 2, 8192, 128, "float16", False))
    assert spec.config_reason(Config("decode", 1, 32, 8, 8192, 128, "float32", False)) is not None


def _need_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("cupy")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("thread-block clusters and cp.async.bulk need sm_90+")
    return torch


def _case(torch, batch, heads, kv_heads, seq_len, head_dim, dtype, seed):
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, 1, head_dim, generator=gen, device="cuda").to(dt)
    k = torch.randn(batch, kv_heads, seq_len, head_dim, generator=gen, device="cuda").to(dt)
    v = torch.randn(batch, kv_heads, seq_len, head_dim, generator=gen, device="cuda").to(dt)
    return q, k, v, _reference(q, k, v)


def _reference(q, k, v):
    import torch

    g = q.shape[1] // k.shape[1]
    ref = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for i in range(q.shape[0]):  # per sequence: a float64 copy of a 32k cache is large
        kk = k[i:i + 1].double().repeat_interleave(g, dim=1)
        vv = v[i:i + 1].double().repeat_interleave(g, dim=1)
        ref[i:i + 1] = torch.softmax((q[i:i + 1].double() @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5, -1) @ vv
    return ref


def _rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_len,head_dim", [
    # clusters of 16 (one kv head per 16 SMs), 8, 4, 2 and 1 on a 132-SM H200; empty CTAs
    # (1 key over 16 CTAs), partial last tiles (a warp's 16 keys partly or wholly past the
    # end), group 1-16 (16 uses both halves of the A tile), head_dim 64 and 128.
    (1, 32, 8, 1, 128), (1, 32, 8, 37, 128), (1, 32, 8, 8192, 128), (1, 32, 8, 32768, 128),
    (2, 32, 8, 4097, 128), (2, 16, 8, 8191, 64), (4, 32, 8, 8192, 128), (8, 24, 8, 1000, 64),
    (16, 32, 8, 8192, 128), (3, 8, 8, 300, 128), (1, 4, 1, 33000, 128), (40, 8, 4, 129, 64),
    (1, 32, 2, 5000, 128), (2, 40, 8, 777, 128), (1, 64, 8, 2049, 64)])
def test_gpu_matches_float64_reference(dtype, batch, heads, kv_heads, seq_len, head_dim):
    torch = _need_gpu()
    from harness import load_kernels

    spec = load_kernels()["cuda_cluster_decode"]
    q, k, v, ref = _case(torch, batch, heads, kv_heads, seq_len, head_dim, dtype, seed=seq_len + batch)
    out = torch.full_like(q, float("nan"))
    for _ in range(2):
        out.fill_(float("nan"))
        spec.fn(q, k, v, out, causal=False, scale=head_dim ** -0.5)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        assert _rel(out, ref) < TOL[dtype]


@pytest.mark.gpu
def test_gpu_a_peaked_softmax_and_large_scores():
    # One key of each kv head dominates (scores ~±60 in log2 units): the online max and the
    # cluster merge must keep the weights finite wherever that key falls.
    torch = _need_gpu()
    from harness import load_kernels

    spec = load_kernels()["cuda_cluster_decode"]
    q, k, v, _ = _case(torch, 1, 32, 8, 8192, 128, "float16", seed=3)
    k[:, :, 5000] = (q.view(1, 8, 4, 128).mean(2) * 8).clamp(-60, 60).to(k.dtype)
    k[:, 3, 7] = 20.0
    ref = _reference(q, k, v)
    out = torch.full_like(q, float("nan"))
    spec.fn(q, k, v, out, causal=False, scale=128 ** -0.5)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    assert _rel(out, ref) < TOL["float16"]


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_and_a_side_stream():
    torch = _need_gpu()
    from harness import load_kernels

    spec = load_kernels()["cuda_cluster_decode"]
    q, k, v, ref = _case(torch, 2, 32, 8, 5000, 128, "bfloat16", seed=11)
    out = torch.full_like(q, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            spec.fn(q, k, v, out, causal=False, scale=128 ** -0.5)
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        assert _rel(out, ref) < TOL["bfloat16"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode, batch, seq_len", [("hot", 1, 8192), ("graph", 4, 8192)])
def test_gpu_sweep_row_and_the_vram_model_holds(mode, batch, seq_len, vram_checked_row):
    _need_gpu()
    vram_checked_row(Config("decode", batch, 32, 8, seq_len, 128, "float16", False), "cuda_cluster_decode",
                     baseline="torch_stack", mode=mode)


@pytest.mark.gpu
@pytest.mark.parametrize("pairs", [8, 16, 32, 64])
def test_gpu_the_plan_is_one_wave_on_this_gpu(pairs):
    # The driver's co-residency answer, not the SM count, picks C: every cluster of the
    # shipped plan is resident at once, and the next size up would not be (or is over the SMs).
    torch = _need_gpu()
    from bench_kernels.cuda_cluster_decode import (
        MAX_CLUSTER,
        _co_resident,
        _kernel,
        _kernel_name,
        max_active_clusters,
        pipeline_stages,
    )

    stages = pipeline_stages(128)
    smem = smem_bytes(128, 4, stages)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    c, _ = plan(pairs, 8192, sms, _co_resident(0, pairs, 128, 4, "float16"))
    if c > 1:
        assert max_active_clusters(_kernel(_kernel_name(1, 128, 4, c, stages), 0, c, smem), c, smem, 0) >= pairs
    up = c + 1
    if up <= MAX_CLUSTER and pairs * up <= sms:
        assert max_active_clusters(_kernel(_kernel_name(1, 128, 4, up, stages), 0, up, smem), up, smem, 0) < pairs
