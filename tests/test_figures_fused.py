"""compare()'s one-pass table on a GPU gives the torch path's figures (issue 32: the same
checks, cheaper): counts, maxima, the worst element and the first/last unwritten and
non-finite elements exactly, the relative Frobenius norm to the last bits; and the torch
path itself picks the first of equal worst elements across blocks."""

from __future__ import annotations

import math

import pytest
import torch

from harness.measurement.correctness import figures
from harness.measurement.correctness.figures import compare
from harness.measurement.correctness.figures import FUSED_BLOCK
from harness.measurement.correctness.poison import poison_
from tests.interpreted import interpreted


CASES = 3 * 9 + 3  # per dtype, then the float64 ones


def _case(n: int, dtype, seed: int, device):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=g, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    return out.to(device), ref.to(device)


def _cases(device):
    """(name, out, ref, atol, rtol): every figure compare() reports, exercised."""
    span = 3 * FUSED_BLOCK + 517  # several blocks and a ragged tail
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        out, ref = _case(span, dtype, 1, device)
        yield "within tolerance", out, ref, 2e-2, 2e-2
        yield "tight: most fail", out, ref, 1e-6, 1e-6
        bad = out.clone()
        bad[5] += 4.0
        bad[FUSED_BLOCK + 9] = bad[FUSED_BLOCK + 9] + 4.0  # a second large error in another block
        yield "two large errors", bad, ref, 2e-2, 2e-2
        holes = out.clone()
        poison_(holes[FUSED_BLOCK - 3: FUSED_BLOCK + 40])
        poison_(holes[span - 2:])
        holes[11] = float("nan")
        holes[2 * FUSED_BLOCK + 1] = float("inf")
        holes[2 * FUSED_BLOCK + 2] = -float("inf")
        yield "unwritten, NaN and inf", holes, ref, 2e-2, 2e-2
        all_bad = out.clone()
        poison_(all_bad)
        yield "nothing written", all_bad, ref, 2e-2, 2e-2
        exact = ref.to(dtype)
        yield "exactly rounded: every ratio tied", exact, exact.to(torch.float64), 0.0, 0.0
        # The same worst ratio in two blocks: the first element is the worst one.
        tie = torch.zeros(span, dtype=torch.float64, device=device)
        o = tie.to(dtype)
        o[FUSED_BLOCK + 7] = 1.0
        o[2 * FUSED_BLOCK + 7] = 1.0
        yield "tied worst in two blocks", o, tie, 1e-3, 0.0
        one, one_ref = _case(1, dtype, 2, device)
        yield "one element", one, one_ref, 2e-2, 2e-2
        grid, grid_ref = _case(64 * 130, dtype, 6, device)
        yield "non-contiguous views", grid.view(64, 130).t(), grid_ref.view(64, 130).t(), 2e-2, 2e-2
    # float64 outputs (register's feasibility check compares the rounded reference): an
    # infinite ratio (atol 0 at a zero reference) and NaN ratios (err and bound both inf),
    # which torch's max and argmax put above everything, the first one named.
    out, ref = _case(span, torch.float64, 7, device)
    yield "float64 output", out, ref, 1e-6, 1e-6
    zero = torch.zeros(span, dtype=torch.float64, device=device)
    spike = zero.clone()
    spike[FUSED_BLOCK + 3] = 1e300
    yield "an infinite ratio", spike, zero, 0.0, 0.0
    huge_ref = torch.zeros(span, dtype=torch.float64, device=device)
    huge_ref[[9, FUSED_BLOCK + 2, 2 * FUSED_BLOCK + 4]] = 1e308
    huge = huge_ref.clone()
    huge[[FUSED_BLOCK + 2, 2 * FUSED_BLOCK + 4]] = -1e308
    huge[9] = 0.5e308
    yield "NaN ratios", huge, huge_ref, 1e-3, 10.0


def _same(a, b):
    for field in figures.ErrorFigures.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), field
        elif field == "rel_frobenius":  # two sums in another order: the last bits
            assert x == pytest.approx(y, rel=1e-12, abs=0), field
        else:
            assert x == y, (field, x, y)


def check_one_pass(device: str) -> int:
    """Every case through both paths on ``device`` (the one pass runs in Triton's interpreter
    on a CPU): the same figures, and the CPU's torch path's decisions. Returns the cases run."""
    n = 0
    for name, out, ref, atol, rtol in _cases(device):
        fused = compare(out, ref, atol=atol, rtol=rtol, fused=True)
        plain = compare(out, ref, atol=atol, rtol=rtol, fused=False)
        _same(fused, plain)
        cpu = compare(out.cpu(), ref.cpu(), atol=atol, rtol=rtol)
        assert (cpu.n_failing, cpu.n_unwritten, cpu.n_nonfinite, cpu.worst_index) == \
            (fused.n_failing, fused.n_unwritten, fused.n_nonfinite, fused.worst_index), name
        n += 1
    return n


@pytest.mark.gpu
def test_the_one_pass_table_gives_the_torch_figures():
    assert check_one_pass("cuda") == CASES
    # The sweep's own choice on a GPU is the one pass.
    out, ref = _case(100, torch.float16, 3, "cuda")
    assert figures.use_fused(out.device)


@pytest.mark.gpu
def test_the_one_pass_table_refuses_a_reference_with_non_finite_values():
    out, ref = _case(2 * FUSED_BLOCK, torch.float16, 4, "cuda")
    ref[FUSED_BLOCK + 1] = float("nan")
    for fused in (True, False):
        with pytest.raises(ValueError, match="reference has non-finite values"):
            compare(out, ref, atol=2e-2, rtol=2e-2, fused=fused)


@pytest.mark.gpu
def test_the_one_pass_table_at_a_sweep_output_size():
    """A seq_len 4096 output of flash-h200-v2's shape (67M elements, 16k blocks)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    ref = torch.randn(8, 16, 4096, 128, device="cuda", dtype=torch.float64, generator=g)
    out = ref.to(torch.bfloat16)
    out[3, 7, 4000, 100] += 0.5
    poison_(out[7, 15, 4095])
    _same(compare(out, ref, atol=2e-1, rtol=1e-1, fused=True), compare(out, ref, atol=2e-1, rtol=1e-1, fused=False))


def test_the_worst_of_equal_ratios_is_the_first_across_blocks(monkeypatch):
    """The blocks are combined on the device: equal worst ratios in two blocks name the
    first element, counts add, first/last unwritten span the blocks."""
    monkeypatch.setattr(figures, "COMPARE_CHUNK_ELEMS", 64)
    ref = torch.zeros(300, dtype=torch.float64)
    out = ref.to(torch.float16)
    out[70] = 1.0
    out[200] = 1.0
    poison_(out[120:130])
    poison_(out[290:])
    out[250] = float("inf")
    f = compare(out, ref, atol=1e-3, rtol=0.0)
    assert f.worst_index == (70,) and f.worst_out == 1.0
    assert (f.n_unwritten, f.first_unwritten, f.last_unwritten) == (20, (120,), (299,))
    assert (f.n_nonfinite, f.first_nonfinite) == (1, (250,))
    assert f.n_failing == 2 + 20 + 1
    clean = compare(ref.to(torch.float16), ref, atol=1e-3, rtol=0.0)
    assert clean.passed and clean.worst_index == (0,) and clean.first_unwritten is None


def test_the_one_pass_table_in_the_interpreter_gives_the_torch_figures():
    """The same kernel through Triton's interpreter on this CPU."""
    assert interpreted("test_figures_fused", "check_one_pass", "cpu") == CASES


def test_the_one_pass_kernel_compiles_for_the_h200_without_fused_multiply_adds():
    """Compiled (not interpreted) for sm_90 by this machine's Triton and ptxas, for every output
    dtype: the float64 bound |ref|·rtol + atol is two rounded operations (no fma.rn.f64 in
    the PTX, as torch's separate kernels compute it) and the ratios are IEEE divisions."""
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        pytest.skip(f"this Triton has no offline compile API: {exc}")
    import triton.language as tl

    from harness.measurement.correctness import figures_fused
    from harness.measurement.correctness.figures import FUSED_BLOCK, FUSED_WARPS
    from harness.measurement.correctness.poison import POISON_BITS

    for name, bits in (("float16", "*i16"), ("bfloat16", "*i16"), ("float32", "*i32"), ("float64", "*i64")):
        src = ASTSource(fn=figures_fused._block_figures,
                        signature={"bits_ptr": bits, "ref_ptr": "*fp64", "table_ptr": "*fp64", "bars_ptr": "*fp64",
                                   "n": "i64", "POISON": "constexpr", "VALUE": "constexpr", "BLOCK": "constexpr"},
                        constexprs={"POISON": POISON_BITS[name], "VALUE": getattr(tl, name), "BLOCK": FUSED_BLOCK})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                             options={"num_warps": FUSED_WARPS, "enable_fp_fusion": False}).asm["ptx"]
        assert "fma.rn.f64" not in ptx and "div.rn.f64" in ptx and "mul.rn.f64" in ptx, name


def check_checksums(device) -> int:
    """checksum()'s one pass against its torch path on ``device``: every integer width, ragged
    sizes, sign-extended values and positions past one block; the cases checked."""
    from harness.measurement.correctness import figures_fused
    from harness.measurement.correctness.checks import CHECKSUM_WEIGHT, _checksum_torch
    from harness.measurement.correctness.figures import CHECKSUM_BLOCK, CHECKSUM_WARPS
    from harness.measurement.correctness.poison import as_bits

    n = 0
    g = torch.Generator().manual_seed(9)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for size in (1, 517, 3 * CHECKSUM_BLOCK + 11):
            t = (torch.randn(size, generator=g, dtype=torch.float64) * 1e3).to(dtype).to(device)
            bits = as_bits(t).reshape(-1)
            a, s = figures_fused.checksum_sums(bits, CHECKSUM_WEIGHT, CHECKSUM_BLOCK, CHECKSUM_WARPS).tolist()
            assert (a & (2**64 - 1), s) == _checksum_torch(bits), (dtype, size)
            n += 1
    return n


@pytest.mark.gpu
def test_the_one_pass_checksum_gives_the_torch_sums():
    from harness.measurement.correctness.checks import checksum

    assert check_checksums("cuda") == 12
    from harness.measurement.correctness.checks import _checksum_torch
    from harness.measurement.correctness.poison import as_bits

    t = torch.randn(8, 16, 4096, 128, device="cuda").half()  # a sweep's output: 67M elements
    u = t.clone()
    assert checksum(t) == checksum(u) == _checksum_torch(as_bits(t).reshape(-1))  # the torch path in 8 blocks
    u.view(-1)[40_000_000] = -u.view(-1)[40_000_000]
    assert checksum(t) != checksum(u)


def test_the_one_pass_checksum_in_the_interpreter_gives_the_torch_sums():
    assert interpreted("test_figures_fused", "check_checksums", "cpu") == 12
