"""fa4, the FlashAttention-4 peer (issue 31): registered whatever is installed, refused with
the fix where it cannot run, and on an sm_90+ GPU with flash-attn-4 installed, gated by the
harness's own float64 gate (every seed, family and boundary shape) like any candidate."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from harness.registry import get_kernel, load_kernels
from harness.workloads import Config
from harness.workloads.shipped import ATTENTION


def _fa4():
    load_kernels()
    return get_kernel("fa4")


def _usable() -> str | None:
    """Why fa4 cannot run here (no GPU, an older one, flash-attn-4 missing), or None."""
    try:
        import torch
    except ImportError:
        return "torch is missing"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    return _fa4().unusable_reason("cuda")


def test_fa4_is_registered_as_a_destination_passing_half_precision_cuda_kernel():
    spec = _fa4()
    assert spec.devices == ("cuda",) and spec.dtypes == ("float16", "bfloat16")
    assert set(spec.workloads) == {"attention", "decode"} and spec.requires == ("flash_attn.cute",)
    assert "flash-attn-4" in spec.numerics["library"] and "no copy" in spec.numerics["layout"]
    assert spec.unusable_reason("cpu") == "runs on cuda, not cpu"


def test_a_missing_peer_package_is_refused_with_the_command_that_installs_it():
    from bench_kernels.fa4 import FA4_VERSION

    spec = dataclasses.replace(_fa4(), requires=("flash_attn_is_not_installed_here.cute",))
    why = spec.unusable_reason("cuda")
    assert why.startswith("needs the Python module 'flash_attn_is_not_installed_here.cute'"), why
    assert 'pip install -e ".[peers]"' in why and FA4_VERSION in why and "scripts/fa4_wheelhouse.sh" in why


def test_the_peers_extra_pins_the_release_the_kernel_calls_into():
    import tomllib
    from pathlib import Path

    from bench_kernels.fa4 import FA4_VERSION

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert f"flash-attn-4=={FA4_VERSION}" in extras["peers"]
    assert f"flash-attn-4[cu13]=={FA4_VERSION}" in extras["peers-cu13"]
    assert not any("flash-attn" in r for r in extras["test"])  # CI never downloads it


def test_configs_fa4_cannot_run_are_named():
    spec = _fa4()
    ok = Config("attention", 2, 16, 4, 1024, 128, "float16", True)
    assert spec.config_reason(ok) is None
    assert "head_dim 256" in spec.config_reason(dataclasses.replace(ok, head_dim=256))
    assert "not a multiple" in spec.config_reason(dataclasses.replace(ok, kv_heads=3))
    assert "float32" in spec.config_reason(dataclasses.replace(ok, dtype="float32"))


def test_listing_kernels_imports_no_flash_attn():
    code = ("import sys; from harness.registry import load_kernels; load_kernels(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flash_attn', 'cutlass', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# Each (dtype, causal, head_dim) is a kernel FA4 compiles on first use (seconds each): both
# dtypes, both masks and both head dims, in four cases rather than the eight of a full product.
GATE_CASES = [("float16", False, (2, 16, 16, 1024, 128)), ("bfloat16", True, (2, 16, 16, 1024, 128)),
              ("float16", True, (1, 8, 2, 1037, 64)), ("bfloat16", False, (1, 8, 2, 1037, 64))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,causal,shape", GATE_CASES,
                         ids=["fp16-full-mha-d128", "bf16-causal-mha-d128", "fp16-causal-gqa4-d64-odd",
                              "bf16-full-gqa4-d64-odd"])
def test_fa4_passes_the_float64_gate_on_the_gpu(dtype, causal, shape):
    why = _usable()
    if why:
        pytest.skip(f"fa4 cannot run here: {why}")
    from harness.measurement.correctness.gate import gate

    b, h, hkv, n, d = shape
    cfg = Config("attention", b, h, hkv, n, d, dtype, causal)
    # flash-h200-v2's tolerances (2x over the cuBLAS stack), bf16's atol tightened from 0.2 to 0.1
    tol = {"float16": 2e-2, "bfloat16": 1e-1}[dtype]
    res = gate(_fa4(), cfg, workload=ATTENTION, seeds=(0, 1), atol=tol, rtol=tol, device="cuda")
    assert res.passed, res.reason
    # Boundary shapes (one key, odd lengths) were judged too, not skipped.
    assert res.boundary_configs and not res.skipped_configs


@pytest.mark.gpu
def test_fa4_writes_the_callers_out_and_matches_float64_on_decode():
    why = _usable()
    if why:
        pytest.skip(f"fa4 cannot run here: {why}")
    import torch

    from harness.measurement.reference import reference

    torch.manual_seed(0)
    q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    ptr = out.data_ptr()
    _fa4().fn(q, k, v, out, causal=True, scale=128 ** -0.5)
    torch.cuda.synchronize()
    ref = reference(q, k, v, causal=True, scale=128 ** -0.5)
    assert out.data_ptr() == ptr and not out.isnan().any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err  # bf16: two roundings (P and out), ~2e-3 observed on flash kernels
