"""The correctness gate: hollow kernels rejected with their tag, correct kernels never.

Shapes are small (seq_len 128, head_dim 16) and seeds few so the file runs in well under a
minute on two CPU cores; the GPU-marked tests repeat the essentials on CUDA.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.errors import UserError
from harness.measurement.correctness.after_timing import recheck_in_place
from harness.measurement.correctness.results import InputCase, Tolerance
from harness.measurement.correctness.figures import DEFAULT_TOLERANCES, compare, ulp
from harness.measurement.correctness import gate as gate_module
from harness.measurement.correctness.checks import checksum
from harness.measurement.correctness.gate import GatePolicy, gate, gate_kernels
from harness.measurement.correctness.poison import poison_, unwritten_mask
from harness.measurement.correctness.results import FAILURE_TAGS, STRUCTURAL_TAGS
from harness.measurement.correctness.side_stream import side_stream_check
from harness.measurement.correctness.vram import gate_bytes
from harness.measurement.reference import reference
from harness.workloads import Config
from harness.workloads.inputs import (BOUNDARY_SEQ_LENS, DEFAULT_FAMILIES, FAMILIES, LARGE_LOGIT, OUTLIER_V,
                                      boundary_configs, fill_inputs_, make_inputs, outlier_rows)
from bench_kernels.sdpa import sdpa
from bench_kernels.torch_stack import torch_stack
from harness.registry import KernelSpec
from harness.workloads.shipped import ATTENTION

try:
    from tests import zoo
    from tests.test_reference import naive
except ImportError:  # plain `pytest` puts tests/ itself, not the repository root, on sys.path
    import zoo
    from test_reference import naive

has_cuda = torch.cuda.is_available()


@pytest.fixture(autouse=True, scope="module")
def one_cpu_thread():
    """Shapes here are tiny: intra-op threads only add synchronization, and on a loaded
    two-core machine OpenMP's spin-waits make a 16-wide GEMM ~100x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


ALL_DTYPES = ("float16", "bfloat16", "float32")
SEEDS = (0, 1)


def spec(fn, name=None, dtypes=ALL_DTYPES, supports=None):
    """A real KernelSpec for a test kernel (not put in the global registry)."""
    return KernelSpec(name=name or fn.__name__, fn=fn, workloads=("attention", "decode"), dtypes=tuple(dtypes),
                      devices=("cpu", "cuda"), source=__file__, supports=supports)


def float64_kernel(q, k, v, out, *, causal, scale):
    """Correct by construction: naive float64 attention (independent of the reference module)."""
    out.copy_(naive(q, k, v, causal=causal, scale=scale))


def cfg_of(workload="attention", dtype="float16", causal=True, seq_len=128, batch=1, heads=4, kv_heads=2,
           head_dim=16):
    return Config(workload, batch, heads, kv_heads, seq_len, head_dim, dtype, causal)


# ----------------------------------------------------------------------------- inputs


def test_inputs_deterministic_fresh_per_seed_and_cast_from_float32():
    cfg = cfg_of(dtype="bfloat16")
    for fam in FAMILIES:
        a, b = make_inputs(cfg, 3, fam), make_inputs(cfg, 3, fam)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        assert all(x.dtype == torch.bfloat16 and x.is_contiguous() for x in a)
        assert not torch.equal(a[2], make_inputs(cfg, 4, fam)[2])
    # Generated in float32 then cast: every dtype sees the same draw, rounded.
    c16 = make_inputs(cfg_of(dtype="float16"), 0, "outliers")
    c32 = make_inputs(cfg_of(dtype="float32"), 0, "outliers")
    assert all(torch.equal(a, b.half()) for a, b in zip(c16, c32))
    # Families and shapes never share a stream.
    assert not torch.equal(make_inputs(cfg, 0, "normal")[0], make_inputs(cfg, 0, "distinct")[0])
    assert not torch.equal(make_inputs(cfg, 0, "normal")[0][:, :, :67],
                           make_inputs(cfg_of(dtype="bfloat16", seq_len=67), 0, "normal")[0])
    with pytest.raises(UserError):
        make_inputs(cfg, 0, "nope")


def _splitmix64_reference(key: int, i: int, golden: int, mix1: int, mix2: int) -> int:
    """splitmix64 in Python integers, unsigned: what the tensor version must compute."""
    m = (1 << 64) - 1
    z = (key + (i + 1) * (golden % (1 << 64))) & m
    z = ((z ^ (z >> 30)) * (mix1 % (1 << 64))) & m
    z = ((z ^ (z >> 27)) * (mix2 % (1 << 64))) & m
    return z ^ (z >> 31)


def test_counter_based_generator_is_the_specified_hash_and_chunk_independent():
    from harness.workloads import inputs as I

    key = I._stream_key(12345, "k")
    idx = torch.arange(1, 9, dtype=torch.int64)
    z = I._splitmix64_(idx * I._GOLDEN + key)
    assert [int(x) % (1 << 64) for x in z] == [_splitmix64_reference(key, i, I._GOLDEN, I._MIX1, I._MIX2)
                                               for i in range(8)]
    whole = I._normals(key, 0, 1000, "cpu")
    parts = torch.cat([I._normals(key, s, n, "cpu") for s, n in ((0, 7), (7, 500), (507, 493))])
    assert torch.equal(whole, parts)  # element i depends on i alone, not on the chunking
    x = I._normals(key, 0, 1 << 20, "cpu").double()
    assert abs(float(x.mean())) < 0.005 and abs(float(x.std()) - 1) < 0.005
    assert abs(float((x ** 4).mean()) - 3) < 0.05  # normal kurtosis, not a uniform's 1.8
    assert float(x.abs().max()) > 4


def test_fill_inputs_keeps_pointers():
    cfg = cfg_of(workload="decode", dtype="float16", causal=False)
    q, k, v = make_inputs(cfg, 0, "normal")
    ptrs = [t.data_ptr() for t in (q, k, v)]
    fill_inputs_(q, k, v, cfg, 5, "outliers")
    assert [t.data_ptr() for t in (q, k, v)] == ptrs
    assert all(torch.equal(x, y) for x, y in zip((q, k, v), make_inputs(cfg, 5, "outliers")))
    with pytest.raises(ValueError):
        fill_inputs_(q[:, :1], k, v, cfg, 0, "normal")


def test_outliers_land_in_short_tensors_and_at_the_tail():
    assert outlier_rows(32768, 1543)[:3] == [32767, 31224, 29681]  # the llama-bench artifact's stride on a long cache
    assert outlier_rows(3255, 1543) == [3254, 2440, 1626, 812]    # shorter: denser, at least 4
    assert outlier_rows(40, 911) == [39, 29, 19, 9]        # a 40-head decode query still gets 4
    assert outlier_rows(1, 911) == [0]
    for cfg in (cfg_of(workload="decode", causal=False, seq_len=67), cfg_of(seq_len=67), cfg_of(seq_len=1)):
        q, k, v = make_inputs(cfg, 0, "outliers")
        assert (v.float().abs() == OUTLIER_V).any()
        assert (v[-1, -1, -1].float().abs() == OUTLIER_V).any()  # the last KV row carries one
        assert q.float().abs().max() > 10


@pytest.mark.parametrize("workload,causal", [("attention", True), ("attention", False), ("decode", False)])
def test_large_logits_overflow_exp_but_stay_one_hot(workload, causal):
    cfg = cfg_of(workload=workload, causal=causal, seq_len=67, dtype="bfloat16")
    q, k, _ = make_inputs(cfg, 0, "large_logits")
    s = q.double() @ k.double().repeat_interleave(cfg.group, 1).transpose(-1, -2) * cfg.scale
    if causal:
        s.masked_fill_(torch.ones(67, 67, dtype=torch.bool).triu(1), float("-inf"))
    top2 = s.topk(2, dim=-1).values
    assert (top2[..., 0] > 88.8).all()  # float32 exp overflows on every row
    assert abs(float(top2[..., 0].max()) - LARGE_LOGIT) < 2
    margin = top2[..., 0] - top2[..., 1]
    assert (margin[..., 1:] > LARGE_LOGIT / 3).all() if causal else (margin > LARGE_LOGIT / 3).all()


def test_distinct_operands_differ_in_distribution():
    q, k, v = (t.double() for t in make_inputs(cfg_of(seq_len=512, head_dim=64, dtype="float32"), 0, "distinct"))
    assert abs(q.mean() - 0.5) < 0.05 and abs(k.mean() + 0.25) < 0.05 and abs(v.mean() - 1.0) < 0.05
    assert abs(v.std() - 2.0) < 0.1 and abs(k.std() - 1.5) < 0.1


def test_boundary_configs():
    cfg = cfg_of(seq_len=128)
    got = boundary_configs(cfg)
    assert [c.seq_len for c in got] == list(BOUNDARY_SEQ_LENS)
    assert all(c.workload == cfg.workload and c.heads == cfg.heads and c.dtype == cfg.dtype for c in got)
    assert [c.seq_len for c in boundary_configs(cfg_of(seq_len=67))] == [n for n in BOUNDARY_SEQ_LENS if n != 67]


# ----------------------------------------------------------------------------- compare


def test_compare_has_allclose_semantics():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    for noise in (1e-4, 3e-3, 2e-2):
        out = (ref + noise * torch.randn(ref.shape, generator=g, dtype=torch.float64)).float()
        fig = compare(out, ref, atol=1e-2, rtol=1e-2)
        assert fig.passed == torch.allclose(out.double(), ref, atol=1e-2, rtol=1e-2)
        err = (out.double() - ref).abs()
        assert fig.max_abs_err == pytest.approx(float(err.max()))
        assert fig.rel_frobenius == pytest.approx(float(err.norm() / ref.norm()))
        assert fig.n_failing == int((err > 1e-2 + 1e-2 * ref.abs()).sum())


def test_ulp_matches_seed_003():
    assert ulp(2.17, "bfloat16") == 2.0 ** (1 - 7)
    assert ulp(1.0, "float16") == 2.0 ** -10 and ulp(1.0, "float32") == 2.0 ** -23
    assert ulp(0.0, "float16") == 2.0 ** -24  # smallest subnormal spacing
    ref = torch.full((1, 1, 1, 1), 2.17, dtype=torch.float64)
    out = (ref + 0.03125).to(torch.bfloat16)  # the bf16 2-ULP trap's worst element: 2 ULP, 1.44% relative
    fig = compare(out, ref, atol=0.0, rtol=1e-2, dtype="bfloat16")
    assert not fig.passed
    assert fig.worst_ulps == pytest.approx(abs(float(out) - 2.17) / 2 ** -6)
    assert fig.max_rel_err == pytest.approx(abs(float(out) - 2.17) / 2.17)


def test_poison_is_told_apart_from_computed_nan():
    ref = torch.ones(1, 2, 3, 4, dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        out = poison_(torch.empty(1, 2, 3, 4, dtype=dtype))
        assert out.isnan().all() and unwritten_mask(out).all()
        out[0, 0] = 1.0
        out[0, 1, 0, 0] = float("inf") - float("inf")  # an arithmetic NaN
        fig = compare(out, ref, atol=1e-2, rtol=1e-2)
        assert (fig.n_unwritten, fig.n_nonfinite, fig.n_failing) == (11, 1, 12)
        assert fig.first_unwritten == (0, 1, 0, 1) and fig.last_unwritten == (0, 1, 2, 3)
        assert fig.first_nonfinite == (0, 1, 0, 0)
        assert not fig.passed and "NaN poison" in fig.summary()


def test_checksum_tells_bit_identical_outputs():
    t = torch.randn(2, 3, 5, 4).half()
    assert checksum(t) == checksum(t.clone())
    u = t.clone()
    u.view(torch.int16).view(-1)[7] += 1  # one ULP at one element
    assert checksum(u) != checksum(t)
    assert checksum(t.flip(0)) != checksum(t)  # the same values elsewhere differ too


def test_failure_summary_names_element_ulps_and_bar():
    ref = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    ref[0, 1, 2, 3] = 0.49
    out = ref.clone().half()
    out[0, 1, 2, 3] = -0.02
    said = compare(out, ref, atol=0.01, rtol=0.01).summary()
    assert "at (0,1,2,3)" in said and "out=-0.02" in said and "ref=0.49" in said
    assert "ulp float16" in said and "> atol 0.01 + rtol 0.01·|ref|" in said


# ----------------------------------------------------------------------------- correct kernels pass

CORRECT = {"torch_stack": torch_stack, "sdpa": sdpa, "float64": float64_kernel}
SHAPES = [("attention", True), ("attention", False), ("decode", False), ("decode", True)]


@pytest.mark.parametrize("workload,causal", SHAPES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_kernels_pass(name, dtype, workload, causal):
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    cfg = cfg_of(workload=workload, dtype=dtype, causal=causal, batch=2 if workload == "decode" else 1)
    res = gate(spec(CORRECT[name]), cfg, workload=ATTENTION, seeds=SEEDS, atol=atol, rtol=rtol)
    assert res.passed, res.reason
    assert res.pass_rate == 1.0 and res.n_seeds_passed == len(SEEDS) and res.tag is None
    n_cfgs = 1 + len(res.boundary_configs)
    assert len(res.reports) == n_cfgs * len(SEEDS) * len(DEFAULT_FAMILIES)
    assert all(r.after_figures is not None and r.after_figures.passed for r in res.reports)
    assert res.reference_seconds > 0
    json.dumps(res.to_row(), allow_nan=False)


def test_no_false_degenerate_when_the_reference_is_flat_too():
    # MQA at one token: every query head returns v[0], and all query rows of a large_logits
    # causal prefix pick the same key. Constant outputs there are right, not degenerate.
    cfg = cfg_of(dtype="bfloat16", heads=4, kv_heads=1, seq_len=131)
    atol, rtol = DEFAULT_TOLERANCES["bfloat16"]
    res = gate(spec(torch_stack), cfg, workload=ATTENTION, seeds=(0,), atol=atol, rtol=rtol)
    assert res.passed, res.reason
    assert any(r.config.endswith(("/n1/d16/bfloat16/causal",)) for r in res.reports)


def test_correct_kernel_passes_recheck_in_place():
    cfg = cfg_of(dtype="float16")
    q, k, v = make_inputs(cfg, 0, "normal")
    out = torch.empty_like(q)
    torch_stack(q, k, v, out, causal=True, scale=cfg.scale)
    ptrs = [t.data_ptr() for t in (q, k, v, out)]
    rep = recheck_in_place(spec(torch_stack), cfg, (q, k, v), out, workload=ATTENTION, case=InputCase(1000, "outliers"),
                           tol=Tolerance(1e-2, 1e-2))
    assert rep.passed and rep.phase == "recheck", rep.reason
    assert [t.data_ptr() for t in (q, k, v, out)] == ptrs


# ----------------------------------------------------------------------------- hollow kernels fail

ZOO_CONFIGS = {
    "attention-bf16-causal": cfg_of(dtype="bfloat16", causal=True),
    "decode-fp16": cfg_of(workload="decode", dtype="float16", causal=False, batch=2),
    "attention-fp32": cfg_of(dtype="float32", causal=False),
}


def zoo_cases(gpu_only: bool):
    for h in zoo.ZOO:
        if h.gpu != gpu_only or h.caught_by != "gate":
            continue
        for cname, cfg in ZOO_CONFIGS.items():
            if cfg.dtype in h.dtypes:
                yield pytest.param(h, cfg, id=f"{h.name}-{cname}")


def gate_hollow(h, cfg, device="cpu"):
    atol, rtol = (h.loose_atol, 0.0) if h.loose_atol is not None else DEFAULT_TOLERANCES[cfg.dtype]
    return gate(spec(h.make(), name=h.name), cfg, workload=ATTENTION, seeds=(0,), atol=atol, rtol=rtol, device=device)


@pytest.mark.parametrize("h,cfg", list(zoo_cases(gpu_only=False)))
def test_hollow_kernel_rejected_with_its_tag(h, cfg):
    res = gate_hollow(h, cfg)
    assert not res.passed
    assert res.tag == h.tag, res.reason
    assert res.reason.startswith("seed 0 family ") and "\n" not in res.reason
    row = res.to_row()
    json.dumps(row, allow_nan=False)
    assert row["tag"] == h.tag and row["failures"] and row["tags"][h.tag] >= 1


def test_kernels_gated_together_are_judged_as_if_alone_and_share_each_reference(monkeypatch):
    """The sweep gates every kernel of a config together (issue 32): each case's inputs and
    float64 reference are made once, yet every kernel gets the verdict it gets alone; a
    kernel that writes its inputs, called first, leaves the next ones the case's inputs."""
    cfg = ZOO_CONFIGS["attention-bf16-causal"]
    hollow = [h for h in zoo.ZOO if not h.gpu and h.caught_by == "gate" and cfg.dtype in h.dtypes]
    assert "inputs_mutated" in [h.name for h in hollow]
    hollow.sort(key=lambda h: h.name != "inputs_mutated")  # the input writer first
    atol, rtol = DEFAULT_TOLERANCES[cfg.dtype]
    from harness.measurement.numerics import apply, capture

    state = capture()  # put back after each kernel, as the sweep does (a kernel here moves it)

    def alone_gate(s):
        with apply(state):
            return gate(s, cfg, workload=ATTENTION, seeds=SEEDS, atol=atol, rtol=rtol)

    alone = {h.name: alone_gate(spec(h.make(), name=h.name)) for h in hollow}
    alone["torch_stack"] = alone_gate(spec(torch_stack))
    made = []
    real = gate_module.timed_reference

    def counted(pristine, c, wl):
        made.append(c.key())
        return real(pristine, c, wl)

    monkeypatch.setattr(gate_module, "timed_reference", counted)
    specs = [*(spec(h.make(), name=h.name) for h in hollow), spec(torch_stack)]
    run = gate_kernels(specs, cfg, GatePolicy(SEEDS, atol, rtol), workload=ATTENTION, around=lambda name: apply(state))
    for name, res in run.results.items():
        assert (res.passed, res.tag) == (alone[name].passed, alone[name].tag), (name, res.reason, alone[name].reason)
        assert len(res.reports) == len(alone[name].reports)
    assert run.results["torch_stack"].passed and run.results["inputs_mutated"].tag == "input_mutated"
    cases = (1 + len(boundary_configs(cfg))) * len(SEEDS) * len(DEFAULT_FAMILIES)
    assert len(made) == cases  # one reference per case, not one per kernel and case
    assert run.reference_seconds > 0
    with pytest.raises(ValueError, match="each kernel once"):
        gate_kernels([spec(torch_stack), spec(torch_stack)], cfg, GatePolicy(SEEDS, atol, rtol), workload=ATTENTION)


def test_a_second_call_bit_for_bit_the_first_is_judged_by_its_figures_and_any_other_is_compared(monkeypatch):
    """The gate's second call (fresh buffers, after the reference) of a deterministic kernel
    returns the first call's bits: its figures are the first's (no second compare, nothing to
    disagree on). A kernel whose second output differs in any bit, even within tolerance, is
    compared again and checked for disagreement; one beyond tolerance is still caught."""
    cfg = Config("attention", 1, 2, 2, 64, 16, "float32", False)
    atol, rtol = DEFAULT_TOLERANCES[cfg.dtype]
    compared = []
    real = gate_module.check_output

    def counted(out, *a, **kw):
        compared.append(kw.get("mismatch", "mismatch"))
        return real(out, *a, **kw)

    monkeypatch.setattr(gate_module, "check_output", counted)
    res = gate(spec(torch_stack), cfg, workload=ATTENTION, seeds=SEEDS, families=("normal",), atol=atol, rtol=rtol)
    assert res.passed
    judged = [r for r in res.reports if r.phase != "side_stream_check"]
    assert judged and all(r.after_figures is r.figures for r in judged)
    assert compared == ["mismatch"] * len(judged)  # the first calls only

    calls = {"n": 0}

    def nudged(q, k, v, out, *, causal, scale, by=1):
        # Correct, but every second call moves one element by `by` ULPs (within or beyond tolerance).
        torch_stack(q, k, v, out, causal=causal, scale=scale)
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            flat = out.view(-1)
            flat[3] = flat[3] + by * ulp(float(flat[3]), "float32")

    compared.clear()
    res = gate(spec(nudged), cfg, workload=ATTENTION, seeds=SEEDS, families=("normal",), atol=atol, rtol=rtol)
    judged = [r for r in res.reports if r.phase != "side_stream_check"]
    assert res.passed and all(r.after_figures is not r.figures for r in judged)
    assert compared.count("stale_mismatch") == len(judged)  # every second call compared again

    def far(q, k, v, out, *, causal, scale):
        nudged(q, k, v, out, causal=causal, scale=scale, by=2**20)

    calls["n"] = 0
    res = gate(spec(far, name="far"), cfg, workload=ATTENTION, seeds=SEEDS, families=("normal",), atol=atol, rtol=rtol)
    assert not res.passed and res.tag == "stale_mismatch" and "second call" in res.reason


def test_boundary_cases_are_judged_once_per_sweep_and_reused_marked_at_the_next_config():
    """Configs that differ only in seq_len share their boundary configs (issue 32): with a
    memo, the second config's gate runs only its own seq_len, takes the boundary reports
    from the first (marked where they were judged) and decides exactly as without one; a
    kernel that fails only at a boundary shape fails at both, a forgotten kernel is judged
    again, and another function object is never given another's reports."""
    from harness.measurement.correctness.gate import BoundaryMemo

    calls = []

    def counted(q, k, v, out, *, causal, scale):
        calls.append(q.shape[2])
        torch_stack(q, k, v, out, causal=causal, scale=scale)

    def short_wrong(q, k, v, out, *, causal, scale):
        torch_stack(q, k, v, out, causal=causal, scale=scale)
        if q.shape[2] == 67:  # wrong at one boundary shape only
            out.mul_(1.5)

    a, b = cfg_of(seq_len=96), cfg_of(seq_len=160)
    atol, rtol = DEFAULT_TOLERANCES[a.dtype]
    pol = GatePolicy(SEEDS, atol, rtol)
    memo = BoundaryMemo()
    ok, bad = spec(counted), spec(short_wrong)
    first = gate_kernels([ok, bad], a, pol, workload=ATTENTION, memo=memo).results
    boundary = {c.seq_len for c in boundary_configs(a)}
    assert boundary and boundary <= set(calls)
    calls.clear()
    second = gate_kernels([ok, bad], b, pol, workload=ATTENTION, memo=memo).results
    assert set(calls) == {160}  # its own seq_len only: every boundary case came from the memo
    alone = gate_kernels([spec(counted), spec(short_wrong)], b, pol, workload=ATTENTION).results  # no memo
    for name in ("counted", "short_wrong"):
        got, want = second[name], alone[name]
        assert (got.passed, got.tag, got.pass_rate, len(got.reports)) == (want.passed, want.tag, want.pass_rate,
                                                                        len(want.reports))
        assert [(r.config, r.seed, r.family, r.passed, r.tag) for r in got.reports] == \
            [(r.config, r.seed, r.family, r.passed, r.tag) for r in want.reports]
        assert {k: v for k, v in got.reused().items()} == {c.key(): a.key() for c in boundary_configs(b)}
        assert all(r.reference_seconds == 0.0 for r in got.reports if r.reused_from)
        assert got.to_row()["reused"] == got.reused() and not first[name].reused()
    assert not second["short_wrong"].passed and second["short_wrong"].tag == "mismatch"
    assert "boundary seq_len 67" in second["short_wrong"].reason
    assert second["short_wrong"].failures[0].reused_from == a.key()
    assert second["counted"].passed
    # Another function object (a re-import, a redefinition) is judged afresh; so is a forgotten one.
    calls.clear()
    gate_kernels([spec(lambda *x, **y: counted(*x, **y), name="counted")], b, pol, workload=ATTENTION, memo=memo)
    assert boundary <= set(calls)
    memo.forget(counted)
    calls.clear()
    gate_kernels([ok], b, pol, workload=ATTENTION, memo=memo)
    assert boundary <= set(calls)


def test_reference_memo_reuses_a_reference_only_for_bit_identical_inputs(monkeypatch):
    """The checks after timing judge several arms on one content: its reference is made once,
    keyed by the inputs' bits, so inputs rewritten in place (the recheck) or changed by a
    kernel get their own."""
    from harness.measurement.correctness import checks

    made = []
    real = checks.timed_reference
    monkeypatch.setattr(checks, "timed_reference", lambda inputs, c, wl: made.append(1) or real(inputs, c, wl))
    cfg = cfg_of()
    a, b = make_inputs(cfg, 1, "normal"), make_inputs(cfg, 2, "normal")
    memo = checks.ReferenceMemo(size=2)
    (ref_a,), secs = memo.get(a, cfg, ATTENTION)  # every output's reference: attention has one
    assert secs > 0 and len(made) == 1
    (again,), secs = memo.get(tuple(t.clone() for t in a), cfg, ATTENTION)  # other tensors, same bits
    assert again is ref_a and secs == 0.0 and len(made) == 1
    torch.testing.assert_close(ref_a, reference(*a, causal=cfg.causal, scale=cfg.scale), rtol=0, atol=0)
    a[2].view(-1)[7] += 1  # one element of v changed in place: another content
    (changed,), _ = memo.get(a, cfg, ATTENTION)
    assert len(made) == 2 and not torch.equal(changed, ref_a)
    memo.get(b, cfg, ATTENTION)  # a third content evicts the least recently used (the unchanged a)
    memo.get(tuple(t.clone() for t in make_inputs(cfg, 1, "normal")), cfg, ATTENTION)
    assert len(made) == 4 and len(memo.kept) == 2


def test_every_zoo_kernel_is_tested_and_tags_are_known():
    assert {h.tag for h in zoo.ZOO} <= set(FAILURE_TAGS)
    covered = {p.values[0].name for p in zoo_cases(False)} | {p.values[0].name for p in zoo_cases(True)}
    covered |= {h.name for h in zoo.ZOO if h.caught_by == "recheck"}
    assert covered == {h.name for h in zoo.ZOO}


def test_reasons_are_specific():
    cfg = ZOO_CONFIGS["decode-fp16"]
    by_name = {h.name: h for h in zoo.ZOO}
    r = gate_hollow(by_name["raises"], cfg)
    assert "RuntimeError" in r.reason and "illegal memory access" in r.reason and "zoo.py" in r.reason
    r = gate_hollow(by_name["tail_unwritten"], cfg_of(dtype="float16"))
    assert "(boundary seq_len 1)" in r.reason and "NaN poison" in r.reason
    r = gate_hollow(by_name["inputs_mutated"], cfg)
    assert "input q" in r.reason
    r = gate_hollow(by_name["no_max_subtraction"], cfg)
    assert "family large_logits" in r.reason and "inf/NaN" in r.reason
    r = gate_hollow(by_name["cached_by_shape"], cfg)
    assert "bit-identical to seed 0 family normal" in r.reason
    r = gate_hollow(by_name["zero_output"], cfg)
    assert "exactly constant" in r.reason


@pytest.mark.parametrize("name", ["cached_by_pointer", "cached_by_shape"])
def test_remembered_results_caught_by_recheck_in_place(name):
    h = next(h for h in zoo.ZOO if h.name == name)
    cfg = cfg_of(dtype="float16")
    fn = h.make()
    res = gate(spec(fn, name=name), cfg, workload=ATTENTION, seeds=(0,), atol=1e-2, rtol=1e-2)
    # The gate may catch it too, when the allocator hands a later check a reused address.
    assert res.passed or res.tag in ("degenerate", "stale_mismatch"), res.reason
    q, k, v = make_inputs(cfg, 0, "normal")
    out = torch.empty_like(q)
    fn(q, k, v, out, causal=cfg.causal, scale=cfg.scale)  # the timed calls
    rep = recheck_in_place(spec(fn, name=name), cfg, (q, k, v), out, workload=ATTENTION, case=InputCase(1000, "normal"),
                           tol=Tolerance(1e-2, 1e-2))
    assert not rep.passed and rep.tag == "stale_mismatch", rep.reason
    assert "bit-identical to the one before the inputs were rewritten" in rep.reason


def test_min_pass_rate_counts_seeds_and_never_excuses_structural_failures():
    def flaky(q, k, v, out, *, causal, scale):
        float64_kernel(q, k, v, out, causal=causal, scale=scale)
        if q.shape[2] == 128 and float(q.flatten()[0]) > 0:  # wrong on about half the main inputs
            out.add_(0.5)

    cfg = cfg_of(dtype="float32")
    seeds = range(6)
    res = gate(spec(flaky), cfg, workload=ATTENTION, seeds=seeds, families=("normal",), atol=1e-4, rtol=1e-4, min_pass_rate=0.01)
    expect = [float(make_inputs(cfg, s, "normal")[0].flatten()[0]) <= 0 for s in seeds]
    assert res.n_seeds_passed == sum(expect) and res.pass_rate == pytest.approx(sum(expect) / 6)
    assert 0 < res.pass_rate < 1
    assert res.passed and res.tag == "mismatch"  # reported even though the rate let it through
    strict = gate(spec(flaky), cfg, workload=ATTENTION, seeds=seeds, families=("normal",), atol=1e-4, rtol=1e-4)
    assert not strict.passed
    tail = next(h for h in zoo.ZOO if h.name == "tail_unwritten")
    loose = gate(spec(tail.make()), cfg, workload=ATTENTION, seeds=seeds[:2], families=("normal",), atol=1e-4, rtol=1e-4,
                 min_pass_rate=0.01)
    assert loose.tag in STRUCTURAL_TAGS and not loose.passed


def test_gate_refuses_bad_arguments_and_skips_unsupported_boundaries():
    cfg = cfg_of()
    with pytest.raises(UserError):
        gate(spec(torch_stack), cfg, workload=ATTENTION, seeds=(), atol=1e-2, rtol=1e-2)
    with pytest.raises(UserError):
        gate(spec(torch_stack), cfg, workload=ATTENTION, seeds=(0,), families=("nope",), atol=1e-2, rtol=1e-2)
    with pytest.raises(UserError):
        gate(spec(torch_stack, dtypes=("float32",)), cfg, workload=ATTENTION, seeds=(0,), atol=1e-2, rtol=1e-2)
    no_short = spec(torch_stack, supports=lambda c: "seq_len < 64" if c.seq_len < 64 else None)
    res = gate(no_short, cfg, workload=ATTENTION, seeds=(0,), families=("normal",), atol=1e-2, rtol=1e-2)
    assert res.passed and [k for k, _ in res.skipped_configs] == [boundary_configs(cfg)[0].key()]
    assert len(res.boundary_configs) == len(BOUNDARY_SEQ_LENS) - 1


def test_tolerance_defaults_and_gate_bytes():
    assert set(DEFAULT_TOLERANCES) == set(ALL_DTYPES)
    big = Config("attention", 1, 32, 8, 32768, 128, "bfloat16", True)
    assert gate_bytes(big, ATTENTION) < 12 * 2**30  # fits next to a kernel on any data-centre GPU


# ----------------------------------------------------------------------------- GPU


@pytest.mark.parametrize("name", ["torch_stack", "sdpa"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("workload,causal", [("attention", True), ("decode", False)])
@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda, reason="needs CUDA")
def test_gpu_correct_kernels_pass(name, dtype, workload, causal):
    atol, rtol = DEFAULT_TOLERANCES[dtype]
    cfg = cfg_of(workload=workload, dtype=dtype, causal=causal, seq_len=1024, heads=8, head_dim=128,
                 batch=4 if workload == "decode" else 1)
    res = gate(spec(CORRECT[name]), cfg, workload=ATTENTION, seeds=SEEDS, atol=atol, rtol=rtol, device="cuda")
    assert res.passed, res.reason
    assert any(r.phase == "side_stream_check" and r.passed for r in res.reports)


@pytest.mark.parametrize("h,cfg", list(zoo_cases(gpu_only=False)) + list(zoo_cases(gpu_only=True)))
@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda, reason="needs CUDA")
def test_gpu_hollow_kernel_rejected_with_its_tag(h, cfg):
    res = gate_hollow(h, cfg, device="cuda")
    assert not res.passed and res.tag == h.tag, res.reason


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda, reason="needs CUDA")
def test_gpu_side_stream_check_and_identical_inputs():
    cfg = cfg_of(dtype="float16", seq_len=256)
    q, k, v = make_inputs(cfg, 0, "outliers", device="cuda")
    assert all(torch.equal(a.cpu(), b) for a, b in zip((q, k, v), make_inputs(cfg, 0, "outliers")))
    # Bit-identical in float32 too, over several million draws (the log/cos of the GPU and
    # the CPU may differ in float64's last bit; the float32 rounding must absorb it).
    for fam in FAMILIES:
        big = cfg_of(dtype="float32", seq_len=8192, heads=8, kv_heads=4, head_dim=64)
        on_gpu = make_inputs(big, 1, fam, device="cuda")
        assert all(torch.equal(a.cpu(), b) for a, b in zip(on_gpu, make_inputs(big, 1, fam))), fam
    out = torch.empty_like(q)
    why = side_stream_check(zoo.side_stream, (q, k, v), out, cfg=cfg, workload=ATTENTION)
    assert why and "stream" in why
    torch.cuda.synchronize()
    assert side_stream_check(torch_stack, (q, k, v), out, cfg=cfg, workload=ATTENTION) is None
    assert side_stream_check(torch_stack, (q.cpu(), k.cpu(), v.cpu()), out.cpu(), cfg=cfg, workload=ATTENTION) is None
    rep = recheck_in_place(spec(torch_stack), cfg, (q, k, v), out, workload=ATTENTION, case=InputCase(7, "large_logits"),
                           tol=Tolerance(1e-2, 1e-2))
    assert rep.passed, rep.reason
    ref = reference(q, k, v, causal=True, scale=cfg.scale)
    assert ref.device.type == "cuda"


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda, reason="needs CUDA")
@pytest.mark.parametrize("seq_len", [67, 320])
def test_gpu_fast_side_stream_work_is_caught_without_a_race(seq_len):
    # Issue 16: work on another stream with no delay passed the race-based check at B 1,
    # H 2, N 67-320, D 32. Held stream: it cannot win, however fast it is.
    cfg = cfg_of(dtype="float16", batch=1, heads=2, kv_heads=2, seq_len=seq_len, head_dim=32, causal=False)
    q, k, v = make_inputs(cfg, 0, "normal", device="cuda")
    for fn in (zoo.side_stream_fast, zoo.side_stream_forked):
        for _ in range(5):
            why = side_stream_check(fn, (q, k, v), torch.empty_like(q), cfg=cfg, workload=ATTENTION)
            assert why and "stream" in why, fn.__name__
        res = gate(spec(fn, name=fn.__name__), cfg, workload=ATTENTION, seeds=(0,), atol=2e-2, rtol=2e-2, device="cuda")
        assert not res.passed and res.tag == "side_stream", res.reason
    assert side_stream_check(torch_stack, (q, k, v), torch.empty_like(q), cfg=cfg, workload=ATTENTION) is None

