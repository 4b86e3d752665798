"""triton_decode: split planning (CPU), numerics under TRITON_INTERPRET=1 (CPU, subprocess), GPU.

The interpreter check runs in a subprocess so TRITON_INTERPRET=1 is set before triton is
first imported (triton reads it at import). Every check poisons ``out`` with NaN first and
compares with a float64 reference by ‖out − ref‖ / ‖ref‖.

Tolerance: 2 unit roundoffs of the rounding that dominates (P and out are rounded to the
input dtype): fp16 2·2⁻¹¹, bf16 2·2⁻⁸. Triton's interpreter converts fp32 → bf16 by
truncation, not round-to-nearest (measured: every element matches truncation), which
doubles the unit roundoff there: 2·2⁻⁷ for bf16 under the interpreter only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from bench_kernels.triton_decode import COMBINE_ONE_PASS_SPLITS, COMBINE_SPLIT_BLOCK, MAX_SPLITS, MIN_KEYS_PER_SPLIT, SMALL_PROGRAMS_PER_SM, cut, plan
from harness.workloads import Config
from harness.workloads.shipped import ATTENTION

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
INTERPRETER_UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-7}


@pytest.mark.parametrize("batch,kv_heads,seq_len,head_dim", [
    (1, 1, 1, 64), (1, 8, 37, 128), (2, 2, 300, 64), (16, 8, 8192, 128), (64, 8, 32768, 128),
    (1, 8, 32768, 128), (3, 5, 100_003, 64)])
@pytest.mark.parametrize("sms", [1, 78, 132])
def test_plan_covers_every_key_once(batch, kv_heads, seq_len, head_dim, sms):
    splits, chunk, block_n = plan(batch, kv_heads, seq_len, head_dim, sms)
    assert chunk % block_n == 0
    assert 1 <= splits <= MAX_SPLITS
    assert (splits - 1) * chunk < seq_len <= splits * chunk  # no empty split, nothing left over
    if splits > 1:
        # Splits keep at least ~MIN_KEYS_PER_SPLIT keys (the last one may be shorter).
        assert chunk >= min(MIN_KEYS_PER_SPLIT, seq_len) - block_n


@pytest.mark.parametrize("batch,seq_len", [(1, 8192), (1, 32768), (1, 131072), (2, 32768), (4, 8192),
                                           (16, 8192), (32, 8192)])
def test_a_small_batch_is_one_wave_of_about_two_programs_per_sm(batch, seq_len):
    # B·Hkv programs alone would leave an H200 (132 SMs) under one program per SM at B ≤ 16;
    # more than SMALL_PROGRAMS_PER_SM per SM measured slower (kernels/triton_decode.py).
    splits, _, _ = plan(batch, 8, seq_len, 128, 132)
    programs = batch * 8 * splits
    assert SMALL_PROGRAMS_PER_SM * 132 // 2 < programs <= SMALL_PROGRAMS_PER_SM * 132, (splits, programs)


def test_a_large_batch_fills_the_last_wave():
    # B 64 × 8 KV heads = 512 pairs: 3 splits are 1536 programs, 3.9 waves of 3 × 132 resident.
    splits, _, _ = plan(64, 8, 8192, 128, 132)
    assert splits == 3


@pytest.mark.parametrize("seq_len", [1, 63, 64, 65, 300, 8192, 33000])
@pytest.mark.parametrize("asked", [1, 2, 3, 7, 40, 99, 10_000])
def test_cut_is_whole_tiles_with_no_empty_split(seq_len, asked):
    splits, chunk = cut(seq_len, asked, 64)
    assert chunk % 64 == 0 and 1 <= splits <= asked
    assert (splits - 1) * chunk < seq_len <= splits * chunk


def test_plan_counts_splits_as_launched():
    # 1 sequence × 1 KV head: 264 wanted, capped at L / MIN_KEYS_PER_SPLIT = 129 splits of 4 tiles.
    splits, chunk, block_n = plan(1, 1, 33000, 128, 132)
    assert (splits, chunk, block_n) == (129, 256, 64)


def test_registration_cpu_only_under_interpreter():
    from harness import load_kernels

    spec = load_kernels()["triton_decode"]
    want = ("cuda", "cpu") if os.environ.get("TRITON_INTERPRET") == "1" else ("cuda",)
    assert spec.devices == want
    assert spec.workloads == ("decode",)
    cfg = Config("decode", 16, 32, 8, 8192, 128, "float16", False)
    splits, _, _ = plan(16, 8, 8192, 128, 132)
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert spec.extra_bytes(cfg) == 16 * 32 * splits * (128 + 2) * 4 + 16 * 8 * 4
    assert spec.config_reason(Config("decode", 1, 8, 8, 64, 96, "float16", False)) is not None
    assert spec.config_reason(Config("decode", 1, 8, 8, 64, 64, "float32", False)) is not None


_INTERPRETER_CHECK = textwrap.dedent("""
    import json, os, sys
    assert os.environ["TRITON_INTERPRET"] == "1"
    import torch
    from bench_kernels.triton_decode import decode, scratch_bytes
    from harness import load_kernels
    from harness.workloads import Config

    def reference(q, k, v, scale):
        g = q.shape[1] // k.shape[1]
        kk = k.double().repeat_interleave(g, dim=1)
        vv = v.double().repeat_interleave(g, dim=1)
        return torch.softmax((q.double() @ kk.transpose(-1, -2)) * scale, dim=-1) @ vv

    import triton
    import triton.language as tl

    def _probe(X):
        for i in range(tl.program_id(0), 1):
            tl.store(X + i, 1.0)

    try:  # loop bounds computed from program_id (as in the split kernel)
        triton.jit(_probe)[(1,)](torch.zeros(1))
    except Exception as exc:
        print(json.dumps({"skip": f"this Triton interpreter cannot use a tensor as a loop bound "
                                  f"({type(exc).__name__}: {exc}); triton 3.6's __index__ breaks on "
                                  f"numpy >= 2.5 (later triton squeezes the value)"}))
        sys.exit(0)

    spec = load_kernels()["triton_decode"]
    results = []
    gen = torch.Generator().manual_seed(1234)
    cases = [  # batch, heads, kv_heads, seq_len, head_dim, forced splits, via registry, fused
        (2, 8, 2, 1, 64, None, True, None), (1, 4, 4, 37, 64, None, False, None),
        (2, 8, 2, 300, 128, None, True, None), (1, 8, 1, 300, 64, 3, False, False),
        (1, 4, 2, 300, 128, 5, False, False),
        (1, 4, 2, 5000, 64, 40, False, False),  # 40 splits: the combine merges them in one pass
        (1, 4, 2, 4480, 128, 70, False, False),  # 70 splits (> 64): in three blocks of 32, after the max
        (2, 8, 2, 300, 128, 3, False, True),
        (1, 4, 2, 5000, 64, 40, False, True)]  # merged by the last arriver, in two blocks of 32
    from bench_kernels import _triton_decode_impl as impl
    for dtype in ("float16", "bfloat16"):
        dt = getattr(torch, dtype)
        for b, h, hkv, n, d, forced, via_registry, fused in cases:
            q = torch.randn(b, h, 1, d, generator=gen).to(dt)
            k = torch.randn(b, hkv, n, d, generator=gen).to(dt)
            v = torch.randn(b, hkv, n, d, generator=gen).to(dt)
            out = torch.full_like(q, float("nan"))
            scale = d ** -0.5
            if via_registry:
                spec.fn(q, k, v, out, causal=False, scale=scale)
                splits = None
            else:
                splits = decode(q, k, v, out, scale, num_splits=forced, fused=fused)
                if fused:  # a second call finds the arrival counters back at zero
                    out.fill_(float("nan"))
                    decode(q, k, v, out, scale, num_splits=forced, fused=fused)
            arrivals = impl._SCRATCH[q.device][1][3]
            ref = reference(q, k, v, scale)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            cfg = Config("decode", b, h, hkv, n, d, dtype, False)
            results.append(dict(dtype=dtype, shape=[b, h, hkv, n, d], forced=forced, splits=splits, err=err,
                                finite=bool(torch.isfinite(out).all()), scratch=scratch_bytes(cfg),
                                devices=list(spec.devices), fused=fused, arrivals=int(arrivals.abs().sum())))
    from harness.errors import UserError
    try:  # no programmatic dependent launch under the interpreter: refused, not ignored
        decode(q, k, v, out, scale, pdl=True)
        pdl = "ran"
    except UserError as exc:
        pdl = str(exc)
    try:  # nor a timeline (%globaltimer)
        decode(q, k, v, out, scale, timeline=torch.zeros(4096, dtype=torch.int64))
        timeline = "ran"
    except UserError as exc:
        timeline = str(exc)
    try:  # a combine block that tl.arange cannot take
        decode(q, k, v, out, scale, combine_block=24)
        block = "ran"
    except UserError as exc:
        block = str(exc)
    print(json.dumps({"results": results, "pdl": pdl, "timeline": timeline, "block": block}))
""")


def test_interpreter_matches_float64_reference(tmp_path):
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    script = tmp_path / "interpreter_check.py"  # a file: triton.jit reads its source
    script.write_text(_INTERPRETER_CHECK)
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=root, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"interpreter check failed:\n{proc.stderr[-4000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in report:
        pytest.skip(report["skip"])
    assert "programmatic dependent launch needs" in report["pdl"], report["pdl"]
    assert "needs compiled Triton on a GPU" in report["timeline"], report["timeline"]
    assert "combine_block must be a power of 2" in report["block"], report["block"]
    results = report["results"]
    assert len(results) == 18
    assert sum(1 for r in results if r["fused"]) == 4
    for r in results:
        assert r["arrivals"] == 0, r  # every counter reset by its last arriver (0 when unfused)
        assert r["devices"] == ["cuda", "cpu"]
        assert r["finite"], r
        tol = 2 * INTERPRETER_UNIT_ROUNDOFF[r["dtype"]]
        assert r["err"] < tol, r
        if r["forced"] is not None:
            assert r["splits"] > 1, r  # the combine of several splits, masked tail included
    # both combine paths: one pass, and blocks of COMBINE_SPLIT_BLOCK after the max
    assert max(r["splits"] or 0 for r in results if not r["fused"]) > COMBINE_ONE_PASS_SPLITS
    assert any(COMBINE_SPLIT_BLOCK < (r["splits"] or 0) <= COMBINE_ONE_PASS_SPLITS for r in results)


def _reference(q, k, v, scale):
    import torch

    g = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for i in range(q.shape[0]):  # per sequence: a float64 copy of a 32k cache is large
        kk = k[i:i + 1].double().repeat_interleave(g, dim=1)
        vv = v[i:i + 1].double().repeat_interleave(g, dim=1)
        out[i:i + 1] = torch.softmax((q[i:i + 1].double() @ kk.transpose(-1, -2)) * scale, dim=-1) @ vv
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_len,head_dim", [
    (2, 8, 2, 1, 64), (2, 8, 2, 37, 128), (3, 32, 8, 300, 128), (2, 32, 8, 4097, 128),
    (2, 16, 16, 8191, 64), (4, 32, 8, 32768, 128), (1, 32, 1, 33000, 128)])
@pytest.mark.parametrize("path", [None, {"fused": True}, {"fused": False, "pdl": False}, {"fused": False, "pdl": True}])
def test_gpu_matches_float64_reference(dtype, batch, heads, kv_heads, seq_len, head_dim, path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs CUDA (compiled Triton)")
    from harness import load_kernels

    spec = load_kernels()["triton_decode"]
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seq_len)
    q = torch.randn(batch, heads, 1, head_dim, generator=gen, device="cuda").to(dt)
    k = torch.randn(batch, kv_heads, seq_len, head_dim, generator=gen, device="cuda").to(dt)
    v = torch.randn(batch, kv_heads, seq_len, head_dim, generator=gen, device="cuda").to(dt)
    out = torch.full_like(q, float("nan"))
    ref = _reference(q, k, v, head_dim ** -0.5)
    from bench_kernels._triton_decode_impl import _SCRATCH
    from bench_kernels.triton_decode import decode, pdl_available

    if path and path.get("pdl") and not pdl_available(q.device):
        pytest.skip("programmatic dependent launch needs sm_90+")
    for _ in range(3):  # fused: each call finds its arrival counters reset by the last
        out.fill_(float("nan"))
        if path is None:  # the shipped path, through the registry
            spec.fn(q, k, v, out, causal=False, scale=head_dim ** -0.5)
        else:
            decode(q, k, v, out, head_dim ** -0.5, **path)
            assert int(_SCRATCH[q.device][1][3].abs().sum()) == 0
        assert torch.isfinite(out).all()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < 2 * UNIT_ROUNDOFF[dtype], err


@pytest.mark.gpu
@pytest.mark.parametrize("warm_first", [False, True])
@pytest.mark.parametrize("fused, pdl", [(False, False), (True, False), (False, True)])
def test_gpu_cuda_graph_capture(warm_first, fused, pdl, monkeypatch):
    # The split scratch is cached per device and shape for eager calls; a captured call
    # always takes its own from the graph's pool, and nothing a capture allocates is cached
    # (it would outlive the graph).
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs CUDA (compiled Triton)")
    from bench_kernels import _triton_decode_impl as impl
    from bench_kernels import triton_decode as td
    from harness import load_kernels

    monkeypatch.setattr(td, "FUSE_COMBINE", fused)
    monkeypatch.setattr(td, "LAUNCH_PDL", pdl)
    if pdl and not td.pdl_available(torch.device("cuda")):
        pytest.skip("programmatic dependent launch needs sm_90+")
    spec = load_kernels()["triton_decode"]
    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(1, 32, 1, 128, generator=gen, device="cuda").half()
    k = torch.randn(1, 8, 5000 + warm_first, 128, generator=gen, device="cuda").half()
    v = torch.randn(1, 8, 5000 + warm_first, 128, generator=gen, device="cuda").half()
    out = torch.full_like(q, float("nan"))
    impl._SCRATCH.clear()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        if warm_first:
            spec.fn(q, k, v, out, causal=False, scale=128 ** -0.5)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            spec.fn(q, k, v, out, causal=False, scale=128 ** -0.5)
    torch.cuda.current_stream().wait_stream(side)
    assert (torch.device("cuda", torch.cuda.current_device()) in impl._SCRATCH) == warm_first
    # Another shape evicts the cached scratch, and empty_cache (which every capture runs)
    # gives freed blocks back to the driver: a graph that had captured the cached buffers
    # would now write unmapped memory (an illegal address at b4e3746).
    k2, v2 = k[:, :, :3000].contiguous(), v[:, :, :3000].contiguous()
    spec.fn(q, k2, v2, torch.empty_like(q), causal=False, scale=128 ** -0.5)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    ref = _reference(q, k, v, 128 ** -0.5)
    for _ in range(3):  # fused: every replay finds the arrival counters reset
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        assert ((out.double() - ref).norm() / ref.norm()).item() < 2 * UNIT_ROUNDOFF["float16"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode, batch, seq_len", [("graph", 1, 8192), ("hot", 2, 8192), ("hot", 1, 32768)])
def test_gpu_sweep_row_rotates_the_kv_cache_and_the_vram_model_holds(mode, batch, seq_len, vram_checked_row):
    # A decode at B 1, 8k keys (34 MB of K+V) fits the 60 MB L2 on one copy: graph mode
    # rotates copies past 4 × L2 as hot mode does, the captured calls each keep their own
    # scratch, the timed outputs pass the check, and the VRAM model holds (±10%; it read
    # +21%, +30% and +37% on these configs before compare_bytes and GEN_BYTES_PER_ELEM).
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs CUDA (compiled Triton)")
    from harness.measurement.memory import timing_slots
    from harness.measurement.timing import TimingPolicy

    cfg = Config("decode", batch, 32, 8, seq_len, 128, "float16", False)
    row, timing = vram_checked_row(cfg, "triton_decode", baseline="torch_stack", mode=mode)
    slots = row.payload["timing"]["n_slots"]
    assert slots == timing_slots(cfg, TimingPolicy(**timing), "cuda", workload=ATTENTION) >= 2


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True])
def test_gpu_timeline_records_every_program_in_order(pdl):
    # decode(timeline=...) records (start ns, end ns, SM) per program from %globaltimer, as
    # explore_decode_splits --floor/--timeline read it: every split and combine program once,
    # each ending after it starts, on a real SM, and no combine program starting before the
    # last split program ended (the combine waits for the whole split grid, with PDL too).
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs CUDA (compiled Triton)")
    from bench_kernels.triton_decode import decode, pdl_available, sm_count
    from harness.errors import UserError

    if pdl and not pdl_available(torch.device("cuda")):
        pytest.skip("no programmatic dependent launch here")
    b, h, hkv, n, d = 1, 32, 8, 8192, 128
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(b, h, 1, d, generator=gen, device="cuda").half()
    k = torch.randn(b, hkv, n, d, generator=gen, device="cuda").half()
    v = torch.randn(b, hkv, n, d, generator=gen, device="cuda").half()
    ref = _reference(q, k, v, d ** -0.5)
    out = torch.full_like(q, float("nan"))
    rec = torch.full((4096 * 3,), -1, dtype=torch.int64, device="cuda")
    splits = decode(q, k, v, out, d ** -0.5, pdl=pdl, timeline=rec)
    torch.cuda.synchronize()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2 * UNIT_ROUNDOFF["float16"]
    n_split, n_comb = b * hkv * splits, b * h
    r = rec[: 3 * (n_split + n_comb)].view(-1, 3).cpu()
    assert (rec[3 * (n_split + n_comb):] == -1).all()  # nothing past the programs launched
    assert (r[:, 0] > 0).all() and (r[:, 1] >= r[:, 0]).all(), r
    assert ((r[:, 2] >= 0) & (r[:, 2] < sm_count())).all()
    assert int(r[n_split:, 0].min()) >= int(r[:n_split, 1].max())
    with pytest.raises(UserError, match="timeline"):
        decode(q, k, v, out, d ** -0.5, timeline=rec[:3])
    with pytest.raises(UserError, match="contiguous int64"):
        decode(q, k, v, out, d ** -0.5, timeline=rec.int())
    with pytest.raises(UserError, match="power of 2"):
        decode(q, k, v, out, d ** -0.5, combine_block=24)
