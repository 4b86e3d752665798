"""The input draw in one pass on a GPU gives the torch path's values bit for bit (issue 32: the
same inputs, cheaper): every dtype, the families' float32 scale and shift, keys past 2^63,
ragged sizes and element indices past 2^31; in Triton's interpreter on this CPU as well, and
compiled for the H200 offline."""

from __future__ import annotations


import pytest
import torch

from harness.workloads import inputs as I
from tests.interpreted import interpreted

KEYS = (12345, (1 << 63) - 7, 0xD1B54A32D192ED03)  # the last two past 2^62 / 2^63 as unsigned
AFFINE = (None, I.DISTINCT["q"], I.DISTINCT["k"], I.DISTINCT["v"])
PTX_TYPE = {"*fp16": "f16", "*bf16": "bf16"}


def check_draw(device: str, dtypes=("float32", "float16", "bfloat16")) -> int:
    """The one pass against the torch path on ``device``, bit for bit; the cases checked."""
    from harness.workloads import inputs_fused

    n_cases = 0
    n = 3 * inputs_fused.BLOCK + 517  # several programs and a ragged tail
    for dt in dtypes:
        for key in KEYS:
            for ms in AFFINE:
                fused = torch.empty(n, dtype=getattr(torch, dt), device=device)
                plain = torch.empty_like(fused)
                inputs_fused.fill_normal_(fused, key, ms, I._constants(device), (I._GOLDEN, I._MIX1, I._MIX2))
                I._fill_normal_torch_(plain, key, ms)
                bits = torch.int32 if dt == "float32" else torch.int16
                bad = (fused.view(bits) != plain.view(bits)).nonzero()
                if bad.numel():
                    j = int(bad[0, 0])
                    raise AssertionError(f"{dt} key {key} {ms}: {bad.numel()} of {n} differ, first at {j}: "
                                         f"{float(fused[j])!r} vs {float(plain[j])!r}")
                n_cases += 1
    return n_cases


@pytest.mark.gpu
def test_the_one_pass_draw_gives_the_torch_values_on_the_gpu():
    assert check_draw("cuda") == 3 * len(KEYS) * len(AFFINE)
    assert I.use_fused_draw("cuda", "float16") and I.use_fused_draw(torch.device("cuda", 0), torch.bfloat16)
    assert I.generation_bytes(I.Config("attention", 8, 16, 16, 4096, 128, "float16", False), "cuda") == 0


@pytest.mark.gpu
def test_the_one_pass_draw_past_two_to_the_31_elements():
    """Element indices past 2^31 (a long decode cache) carry on the counter as the torch path's
    chunks do: the tail of a 2^31 + 3·2^20-element draw equals the torch path there."""
    from harness.workloads import inputs_fused

    n = (1 << 31) + 3 * (1 << 20)
    t = torch.empty(n, dtype=torch.float16, device="cuda")
    inputs_fused.fill_normal_(t, KEYS[1], None, I._constants("cuda"), (I._GOLDEN, I._MIX1, I._MIX2))
    start = (1 << 31) - 1000
    tail = I._normals(KEYS[1], start, n - start, "cuda").to(torch.float16)
    assert torch.equal(t[start:].view(torch.int16), tail.view(torch.int16))
    del t, tail


@pytest.mark.gpu
def test_every_family_is_drawn_on_the_gpu_as_on_the_cpu_in_every_dtype():
    """make_inputs on the H200 (the one pass) equals the CPU's (the torch path) bit for bit, at
    a config of several million elements per tensor, for each family and dtype."""
    for dt, bits in (("float16", torch.int16), ("bfloat16", torch.int16), ("float32", torch.int32)):
        cfg = I.Config("attention", 2, 8, 4, 2048, 128, dt, True)
        for fam in I.FAMILIES:
            on_gpu = I.make_inputs(cfg, 3, fam, device="cuda")
            on_cpu = I.make_inputs(cfg, 3, fam)
            assert all(torch.equal(a.cpu().view(bits), b.view(bits)) for a, b in zip(on_gpu, on_cpu)), (dt, fam)


def test_the_one_pass_draw_in_the_interpreter_gives_the_torch_values():
    """The same kernel through Triton's interpreter on this CPU. bfloat16 is left to the GPU
    test: the interpreter rounds a float32 to bfloat16 by truncation, whatever rounding the
    kernel names."""
    assert interpreted("test_inputs_fused", "check_draw", "cpu", ["float32", "float16"]) == 2 * len(KEYS) * len(AFFINE)


def test_the_one_pass_draw_compiles_for_the_h200():
    """Compiled (not interpreted) for sm_90 by this machine's Triton and ptxas, for every
    dtype, with and without the families' scale and shift: float64 square roots are IEEE
    (sqrt.rn.f64), the casts round to nearest."""
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        pytest.skip(f"this Triton has no offline compile API: {exc}")

    from harness.workloads import inputs_fused

    for out in ("*fp32", "*fp16", "*bf16"):
        for affine in (False, True):
            src = ASTSource(fn=inputs_fused._draw,
                            signature={"out_ptr": out, "n": "i64", "key_ptr": "*i64", "consts_ptr": "*fp64",
                                       "affine_ptr": "*fp32", "AFFINE": "constexpr", "BLOCK": "constexpr"},
                            constexprs={"AFFINE": affine, "BLOCK": inputs_fused.BLOCK})
            ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                 options={"num_warps": 4, "enable_fp_fusion": False}).asm["ptx"]
            assert "sqrt.rn.f64" in ptx and "cvt.rn.f32.f64" in ptx, (out, affine)
            assert "fma.rn.f32" not in ptx, (out, affine)  # x·std + mean: two roundings, as torch's
            if out != "*fp32":
                assert f"cvt.rn.{PTX_TYPE[out]}.f32" in ptx, (out, affine)  # to nearest even


def test_the_cpu_the_interpreter_and_other_dtypes_keep_the_torch_path(monkeypatch):
    cfg = I.Config("attention", 1, 2, 2, 64, 16, "float32", False)
    assert not I.use_fused_draw("cpu", "float32") and I.generation_bytes(cfg, "cpu") > 0
    assert not I.use_fused_draw("cuda", "float64")  # no such input dtype; the torch path would serve it
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not I.use_fused_draw("cuda", "float16") and I.generation_bytes(cfg, "cuda") > 0
