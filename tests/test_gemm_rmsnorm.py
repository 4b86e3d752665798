"""The shipped gemm_bias_gelu and rmsnorm workloads and their kernels, on the CPU: every
kernel within the default tolerance of the float64 reference on every family and boundary
config, every canary rejected, the formulas by hand, and `bench kernels` by workload.
Triton kernels run in the interpreter (tests/interpreted.py); the cuBLASLt rung only on a GPU."""

from __future__ import annotations

import pytest

from harness import get_kernel, get_workload, load_kernels
from harness.errors import UserError
from tests.interpreted import interpreted

GEMM_POINTS = ({"m": 48, "n": 40, "k": 72},)
RMSNORM_POINTS = ({"tokens": 12, "hidden": 96},)
DTYPES = ("float16", "bfloat16", "float32")
SEEDS = (0, 1)


def _configs(workload: str, points, extra: dict, boundary: bool = True, dtypes=DTYPES) -> list:
    """Every point at every dtype and extra axis value, with the gate's boundary configs."""
    import itertools

    wl = get_workload(workload)
    out = []
    keys = list(extra)
    for p, dt, *rest in itertools.product(points, dtypes, *extra.values()):
        cfg = wl.config({**p, "dtype": dt, **dict(zip(keys, rest))})
        out += [c for c in (cfg, *(wl.boundary_configs(cfg) if boundary else ())) if c not in out]
    return out


def kernel_cases(kernel: str, workload: str, points, extra: dict, device: str = "cpu",
                 boundary: bool = True, dtypes=DTYPES) -> list[str]:
    """Run ``kernel`` the contract's way on every config, family and seed; raise on any output
    outside the workload's default tolerance (the gate's rule); the cases checked."""
    from harness.measurement.correctness.figures import compare

    wl, spec = get_workload(workload), get_kernel(kernel)
    checked = []
    for cfg in _configs(workload, points, extra, boundary, dtypes):
        if spec.config_reason(cfg) is not None:
            continue
        atol, rtol = wl.tolerances[cfg.dtype]
        for fam in wl.default_families:
            for seed in SEEDS:
                inputs = wl.make_inputs(cfg, seed, fam, device)
                outs = tuple(o.fill_(float("nan")) for o in wl.allocate_outputs(cfg, device))
                wl.call(spec.fn, inputs, outs, cfg)
                refs = wl.reference(cfg, tuple(t.cpu() for t in inputs))
                for i, (got, ref) in enumerate(zip(outs, refs)):
                    fig = compare(got.cpu(), ref, atol=atol, rtol=rtol, dtype=cfg.dtype)
                    if not fig.passed:
                        raise AssertionError(f"{kernel} {cfg.key()} {fam} seed {seed} output {i}: {fig.summary()}")
                checked.append(f"{cfg.key()}|{fam}|{seed}")
    return checked


GEMM_EXTRA = {"gelu": ("exact", "tanh")}
RMSNORM_EXTRA = {"residual": (False, True)}


def _usable(kernel: str, device: str) -> None:
    why = get_kernel(kernel).unusable_reason(device)
    if why:
        pytest.skip(why)


def test_gemm_torch_matches_the_reference_everywhere():
    checked = kernel_cases("gemm_torch", "gemm_bias_gelu", GEMM_POINTS, GEMM_EXTRA)
    # 3 dtypes x 2 GELUs x (the point + 2 boundary shapes) x 3 families x 2 seeds
    assert len(checked) == 3 * 2 * 3 * 3 * 2


def test_rmsnorm_torch_matches_the_reference_everywhere():
    checked = kernel_cases("rmsnorm_torch", "rmsnorm", RMSNORM_POINTS, RMSNORM_EXTRA)
    assert len(checked) == 3 * 2 * 3 * 4 * 2


# The compile peers recompile for every shape and dtype (minutes on a 2-core CPU): here one
# float32 shape each, everywhere on the GPU below.
@pytest.mark.parametrize("kernel, workload, extra", [
    ("gemm_compile", "gemm_bias_gelu", {"gelu": ("exact",)}),
    ("rmsnorm_compile", "rmsnorm", {"residual": (True,)}),
])
def test_the_compile_peers_match_the_reference_at_one_shape(kernel, workload, extra):
    _usable(kernel, "cpu")
    points = GEMM_POINTS if workload == "gemm_bias_gelu" else RMSNORM_POINTS
    checked = kernel_cases(kernel, workload, points, extra, boundary=False, dtypes=("float32",))
    assert len(checked) == len(get_workload(workload).default_families) * len(SEEDS)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, workload", [
    ("gemm_torch", "gemm_bias_gelu"), ("gemm_triton", "gemm_bias_gelu"), ("gemm_compile", "gemm_bias_gelu"),
    ("rmsnorm_torch", "rmsnorm"), ("rmsnorm_triton", "rmsnorm"), ("rmsnorm_compile", "rmsnorm"),
])
def test_every_kernel_matches_the_reference_everywhere_on_a_gpu(kernel, workload):
    _usable(kernel, "cuda")
    points, extra = (GEMM_POINTS, GEMM_EXTRA) if workload == "gemm_bias_gelu" else (RMSNORM_POINTS, RMSNORM_EXTRA)
    checked = kernel_cases(kernel, workload, points, extra, device="cuda")
    assert len(checked) == (3 * 2 * 3 * 3 * 2 if workload == "gemm_bias_gelu" else 3 * 2 * 3 * 4 * 2)


def test_gemm_triton_matches_the_reference_in_the_interpreter():
    checked = interpreted("test_gemm_rmsnorm", "kernel_cases", "gemm_triton", "gemm_bias_gelu",
                          list(GEMM_POINTS), GEMM_EXTRA)
    assert len(checked) == 3 * 2 * 3 * 3 * 2


def test_rmsnorm_triton_matches_the_reference_in_the_interpreter():
    checked = interpreted("test_gemm_rmsnorm", "kernel_cases", "rmsnorm_triton", "rmsnorm",
                          list(RMSNORM_POINTS), RMSNORM_EXTRA)
    assert len(checked) == 3 * 2 * 3 * 4 * 2


@pytest.mark.gpu
def test_gemm_cublaslt_matches_the_reference_for_tanh_on_a_gpu():
    checked = kernel_cases("gemm_cublaslt", "gemm_bias_gelu", GEMM_POINTS, GEMM_EXTRA, device="cuda")
    assert len(checked) == 3 * 1 * 3 * 3 * 2  # tanh only


def test_gemm_cublaslt_declines_exact_gelu_and_runs_on_cuda_only():
    spec, wl = get_kernel("gemm_cublaslt"), get_workload("gemm_bias_gelu")
    exact = wl.config({"m": 8, "n": 8, "k": 8, "dtype": "float16", "gelu": "exact"})
    assert "tanh approximation" in spec.config_reason(exact)
    assert spec.config_reason(exact.replace(gelu="tanh")) is None
    assert spec.devices == ("cuda",)


# -- canaries: each rejected by the default tolerance at a representative config ------------
GEMM_SEEDS_POINT = {"m": 4096, "n": 64, "k": 1024}  # canaries cut m to CANARY_ROWS


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gelu", ["exact", "tanh"])
def test_every_gemm_canary_is_rejected_by_the_default_tolerance(dtype, gelu):
    wl = get_workload("gemm_bias_gelu")
    cfg = wl.config({**GEMM_SEEDS_POINT, "dtype": dtype, "gelu": gelu})
    atol, rtol = ({d: t[i] for d, t in wl.tolerances.items()} for i in (0, 1))
    checks = wl.check_canaries([cfg], atol=atol, rtol=rtol, seed=0, families=wl.default_families)
    names = {c.canary for c in checks}
    assert {c.point for c in checks} == {cfg.replace(m=64).key()}  # judged on 64 rows of the point
    expected = set(wl.canaries) - ({"gelu_swapped"} if dtype != "float32" else set())
    assert names == expected
    assert all(c.rejected for c in checks), [(c.canary, c.worst_ratio) for c in checks if not c.rejected]


# A tolerance must clear the baseline's own error by this factor to be a usable bar.
MARGIN = 2.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_gelu_swap_is_within_the_baselines_own_error_in_half_precision(dtype):
    """Why gelu_swapped is not checked in half precision: the default tolerance lets it
    through, and any atol (at the default rtol) that rejects it leaves the torch baseline
    less than MARGIN of room on the same draws (bfloat16: none at all)."""
    from harness.measurement.canaries import _judge

    wl = get_workload("gemm_bias_gelu")
    cfg = wl.config({**GEMM_SEEDS_POINT, "dtype": dtype, "gelu": "exact"})
    atol, rtol = wl.tolerances[dtype]
    found, base_need = [False, 0.0, 0.0, 0.0], 0.0
    for fam in wl.default_families:
        drawn = wl.make_inputs(cfg, 0, fam)
        exact = tuple(t.double() for t in drawn)
        ref = wl.reference(cfg, exact)[0]
        _judge(found, wl.canary("gelu_swapped", cfg, exact)[0], ref, dtype, atol, rtol)
        (out,) = wl.allocate_outputs(cfg)
        wl.call(get_kernel("gemm_torch").fn, drawn, (out,), cfg)
        base_need = max(base_need, float(((out.double() - ref).abs() - rtol * ref.abs()).max()))
    assert not found[0]
    assert found[2] < MARGIN * base_need  # rejecting it leaves the baseline < MARGIN of room
    if dtype == "bfloat16":
        assert found[2] < base_need  # no tolerance the baseline passes rejects it


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
def test_every_rmsnorm_canary_is_rejected_by_the_default_tolerance(dtype, residual):
    wl = get_workload("rmsnorm")
    cfg = wl.config({"tokens": 4096, "hidden": 4096, "dtype": dtype, "residual": residual})
    atol, rtol = ({d: t[i] for d, t in wl.tolerances.items()} for i in (0, 1))
    checks = wl.check_canaries([cfg], atol=atol, rtol=rtol, seed=0, families=wl.default_families)
    expected = {n for n in wl.canaries if residual or not n.startswith("residual_")}
    assert {c.canary for c in checks} == expected
    assert all(c.rejected for c in checks), [(c.canary, c.worst_ratio) for c in checks if not c.rejected]


# -- the declarations ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gemm_bias_gelu", "rmsnorm"])
def test_the_new_workloads_validate_and_keep_their_tolerance_floor(name):
    """Workload.validate passes, and the nearest-rounded reference passes every default
    tolerance on the gate's own draws (the floor `bench register` checks)."""
    from harness.measurement import feasible

    wl = get_workload(name)
    wl.validate()
    point = {"gemm_bias_gelu": {"m": 64, "n": 64, "k": 512, "gelu": "exact"},
             "rmsnorm": {"tokens": 8, "hidden": 512, "residual": True}}[name]
    configs = [wl.config({**point, "dtype": dt}) for dt in DTYPES]
    atol, rtol = ({d: t[i] for d, t in wl.tolerances.items()} for i in (0, 1))
    baseline = get_kernel({"gemm_bias_gelu": "gemm_torch", "rmsnorm": "rmsnorm_torch"}[name])
    floors = feasible.floors(configs, atol=atol, rtol=rtol, seeds=[0, 1], families=wl.default_families,
                             min_pass_rate=1.0, baseline=baseline, workload=wl)
    assert [f.dtype for f in floors] == list(DTYPES)
    assert all(f.passed and f.unchecked is None for f in floors), floors


def test_gemm_flops_and_bytes_by_hand():
    wl = get_workload("gemm_bias_gelu")
    cfg = wl.config({"m": 3, "n": 5, "k": 7, "dtype": "bfloat16", "gelu": "tanh"})
    assert wl.flops(cfg) == 2 * 3 * 5 * 7 + 3 * 5  # the GEMM's multiply-adds, and the bias add
    # x (3x7), w (5x7), bias (5) read and out (3x5) written once, 2 bytes each.
    assert wl.min_read_bytes(cfg) == (21 + 35 + 5) * 2
    assert wl.min_bytes(cfg) == (21 + 35 + 5 + 15) * 2
    assert cfg.key() == "gemm_bias_gelu/m=3/n=5/k=7/dtype=bfloat16/gelu=tanh"
    assert wl.call_kwargs(cfg) == {"gelu": "tanh"}


def test_rmsnorm_flops_and_bytes_by_hand():
    wl = get_workload("rmsnorm")
    plain = wl.config({"tokens": 4, "hidden": 8, "dtype": "float16", "residual": False})
    fused = plain.replace(residual=True)
    assert wl.flops(plain) == 4 * 4 * 8 and wl.flops(fused) == 5 * 4 * 8
    assert wl.min_bytes(plain) == (32 + 8 + 32) * 2  # x and weight read, out written
    assert wl.min_bytes(fused) == (32 + 8 + 32 + 32 + 32) * 2  # + residual read, residual_out written
    assert [t.name for t in wl.outputs(fused)] == ["out", "residual_out"]
    assert wl.call_kwargs(plain) == {"eps": 1e-6}


@pytest.mark.parametrize("values, message", [
    ({"m": 4, "n": 4, "k": 4, "dtype": "float16", "gelu": "erf"}, "unknown gelu (known: exact, tanh)"),
    ({"m": 4, "n": 4, "k": 0, "dtype": "float16", "gelu": "tanh"}, "[grid] k = 0: must be > 0"),
    ({"m": 4, "n": 4, "k": 4, "dtype": "float16", "gelu": "tanh", "seq_len": 4}, "not an axis of workload"),
])
def test_gemm_grid_refusals_name_the_axis(values, message):
    with pytest.raises(UserError, match=__import__("re").escape(message)):
        get_workload("gemm_bias_gelu").config(values)


def test_bench_kernels_groups_kernels_by_workload():
    from typer.testing import CliRunner

    from harness.cli import app

    res = CliRunner().invoke(app, ["kernels", "--format", "json"])
    assert res.exit_code == 0, res.output
    import json

    records = json.loads(res.output)["kernels"]
    workloads = [r["workload"] for r in records]
    assert workloads == sorted(workloads, key=lambda w: list(dict.fromkeys(workloads)).index(w))
    names = {r["workload"]: set() for r in records}
    for r in records:
        names[r["workload"]].add(r["name"])
    assert {"gemm_torch", "gemm_cublaslt", "gemm_compile", "gemm_triton"} <= names["gemm_bias_gelu"]
    assert {"rmsnorm_torch", "rmsnorm_compile", "rmsnorm_triton"} <= names["rmsnorm"]
    assert set(load_kernels()) == {r["name"] for r in records}
