"""cublas_stack (direct cuBLAS + CUDA softmax) and the raw-CUDA plumbing of kernels/cuda_raw.py.

CPU: registration, memory model, block sizing, and that an NVRTC compile failure becomes a
UserError naming the .cu file with the compiler log (with a stand-in cupy module).
GPU (``-m gpu``, needs CUDA + cupy): agreement with a float64 reference and with
torch_stack on a grid of dtypes, causal/full, GQA, odd lengths and decode.

Tolerances, as ‖out − ref‖ / ‖ref‖: the stack rounds S, P and out to the input dtype once
each (≤ 1 unit roundoff u each, measured ≈ 1u in total on random data), so 4u for fp16
(u = 2⁻¹¹) and bf16 (u = 2⁻⁸), vs float64 and vs torch_stack (which rounds S twice). fp32
has no stored-value rounding; 1e-5 sits 50× below TF32's 2⁻¹¹, so it also proves that no
TF32 was used.
"""

from __future__ import annotations

import os
import sys
import types
import zlib

import pytest

from harness.errors import UserError
from harness.workloads import Config

TOL = {"float16": 4 * 2.0**-11, "bfloat16": 4 * 2.0**-8, "float32": 1e-5}


def test_registration_and_memory_model():
    from bench_kernels.cublas_stack import CUBLAS_WORKSPACE_BYTES
    from harness import load_kernels

    ks = load_kernels()
    spec = ks["cublas_stack"]
    assert spec.workloads == ("attention", "decode")
    assert spec.dtypes == ("float16", "bfloat16", "float32")
    assert spec.devices == ("cuda",) and spec.requires == ("cupy",)
    assert "CUBLAS_COMPUTE_32F" in spec.numerics["gemm"]
    att = Config("attention", 2, 8, 2, 1000, 64, "bfloat16", True)
    assert spec.extra_bytes(att) == 2 * 8 * 1000 * 1000 * 2 + CUBLAS_WORKSPACE_BYTES
    dec = Config("decode", 16, 32, 8, 8192, 128, "float32", False)
    assert spec.extra_bytes(dec) == 16 * 32 * 1 * 8192 * 4 + CUBLAS_WORKSPACE_BYTES

    naive = ks["cuda_naive_decode"]
    assert naive.workloads == ("decode",) and naive.devices == ("cuda",)
    assert naive.extra_bytes(dec) == 16 * 32 * 8192 * 4
    assert naive.config_reason(Config("decode", 1, 8, 8, 64, 512, "float16", False)) is not None


def test_softmax_block_size():
    from bench_kernels.cublas_stack import SOFTMAX_MAX_THREADS, softmax_threads

    for nk in (1, 37, 255, 256, 257, 4096, 32768, 10**6):
        t = softmax_threads(nk)
        assert t % 32 == 0 and 32 <= t <= SOFTMAX_MAX_THREADS and t & (t - 1) == 0


def test_cu_files_exist_and_name_their_kernels():
    from bench_kernels.cuda_raw import KERNELS_DIR

    for fname, kname in (("softmax_rows.cu", "softmax_rows"), ("decode_naive.cu", "naive_decode")):
        src = open(os.path.join(KERNELS_DIR, fname), encoding="utf-8").read()
        assert f"void {kname}" in src and '#include "cuda_common.cuh"' in src


def _fake_cupy(log: str):
    """A stand-in cupy whose NVRTC compile fails with ``log``."""

    class CompileException(Exception):
        def get_message(self):
            return log

    class Device:
        def __init__(self, index):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class RawModule:
        def __init__(self, code, options, name_expressions):
            self.code = code

        def get_function(self, name):
            raise CompileException(log)

    cupy = types.ModuleType("cupy")
    cupy.RawModule = RawModule
    cupy.cuda = types.SimpleNamespace(Device=Device, compiler=types.SimpleNamespace(CompileException=CompileException))
    return cupy


def test_compile_failure_is_a_user_error_with_the_log(tmp_path, monkeypatch):
    from bench_kernels import cuda_raw

    bad = tmp_path / "broken.cu"
    bad.write_text("__global__ void k() { this is not C++ }\n")
    log = 'broken.cu(1): error: identifier "this" is undefined'
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    with pytest.raises(UserError) as info:
        cuda_raw.load_cu(str(bad), ("k",))
    msg = str(info.value)
    assert str(bad) in msg and log in msg and "failed to compile" in msg


def test_missing_cu_file_is_a_user_error(monkeypatch):
    from bench_kernels import cuda_raw

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(""))
    with pytest.raises(UserError, match="cannot be read"):
        cuda_raw.load_cu("no_such_kernel.cu", ("k",))


# ------------------------------------------------------------------------------- GPU ---

def _need_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("cupy")
    return torch


def _reference(q, k, v, scale, causal):
    import torch

    g = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(g, dim=1)
    vv = v.double().repeat_interleave(g, dim=1)
    s = (q.double() @ kk.transpose(-1, -2)) * scale
    nq, nk = q.shape[2], k.shape[2]
    if causal:
        mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).triu_(nk - nq + 1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ vv


def _inputs(cfg, torch, seed):
    dt = getattr(torch, cfg.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qs, ks, _ = cfg.shapes()
    q = torch.randn(qs, generator=gen, device="cuda").to(dt)
    k = torch.randn(ks, generator=gen, device="cuda").to(dt)
    v = torch.randn(ks, generator=gen, device="cuda").to(dt)
    return q, k, v


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


GRID = [  # workload, batch, heads, kv_heads, seq_len, head_dim
    ("attention", 2, 4, 4, 64, 64), ("attention", 2, 8, 2, 97, 64), ("attention", 1, 4, 1, 257, 128),
    ("attention", 1, 2, 2, 1, 64), ("decode", 3, 8, 2, 1000, 128), ("decode", 2, 32, 8, 4097, 128),
    ("decode", 1, 4, 4, 1, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", GRID, ids=lambda s: "-".join(map(str, s)))
def test_cublas_stack_matches_reference_and_torch_stack(dtype, causal, shape):
    torch = _need_gpu()
    from harness import load_kernels

    ks = load_kernels()
    cfg = Config(shape[0], *shape[1:], dtype, causal)
    q, k, v = _inputs(cfg, torch, seed=zlib.crc32(cfg.key().encode()))
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # torch_stack in full fp32, as cublas_stack
    try:
        out = torch.full_like(q, float("nan"))
        ks["cublas_stack"].fn(q, k, v, out, causal=causal, scale=cfg.scale)
        ts = torch.full_like(q, float("nan"))
        ks["torch_stack"].fn(q, k, v, ts, causal=causal, scale=cfg.scale)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "unwritten or non-finite output"
    ref = _reference(q, k, v, cfg.scale, causal and cfg.workload == "attention")
    assert _rel(out, ref) < TOL[dtype]
    assert _rel(out, ts) < TOL[dtype]


@pytest.mark.gpu
def test_cublas_stack_runs_on_torch_current_stream():
    torch = _need_gpu()
    from harness import load_kernels

    spec = load_kernels()["cublas_stack"]
    cfg = Config("attention", 4, 8, 2, 1024, 128, "float16", True)
    q, k, v = _inputs(cfg, torch, seed=7)
    side = torch.cuda.Stream()
    out = torch.full_like(q, float("nan"))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        spec.fn(q, k, v, out, causal=True, scale=cfg.scale)
        # Same stream: this copy must see the finished output without any sync.
        copy = out.clone()
    torch.cuda.synchronize()
    assert torch.isfinite(copy).all()
    assert _rel(copy, _reference(q, k, v, cfg.scale, True)) < TOL["float16"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape", [(2, 8, 2, 1, 64), (3, 8, 2, 37, 128), (2, 32, 8, 4097, 128), (1, 4, 1, 300, 256)])
def test_cuda_naive_decode_matches_reference(dtype, shape):
    torch = _need_gpu()
    from harness import load_kernels

    spec = load_kernels()["cuda_naive_decode"]
    cfg = Config("decode", *shape, dtype, False)
    q, k, v = _inputs(cfg, torch, seed=shape[3])
    out = torch.full_like(q, float("nan"))
    spec.fn(q, k, v, out, causal=False, scale=cfg.scale)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    # float32 throughout and one rounding of out: 2u (half) or 1e-5 (fp32).
    tol = 1e-5 if dtype == "float32" else TOL[dtype] / 2
    assert _rel(out, _reference(q, k, v, cfg.scale, False)) < tol


@pytest.mark.gpu
def test_real_nvrtc_error_names_file_and_log(tmp_path):
    _need_gpu()
    from bench_kernels import cuda_raw

    bad = tmp_path / "broken.cu"
    bad.write_text("extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n")
    with pytest.raises(UserError) as info:
        cuda_raw.load_cu(str(bad), ("k",))
    assert str(bad) in str(info.value) and "undefined_name" in str(info.value)
