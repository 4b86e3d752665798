"""[verify] clauses against the workload's bare op (issue 50, item 3): the ``bare_<counter>``
names, the refusals at `bench register` (no bare op, a formula the workload does not define),
the bare op's own float64 check, and a clause over `profile` rows that carry bare counters."""

from __future__ import annotations

import textwrap

import pytest

from harness import get_workload
from harness.errors import UserError
from harness.measurement.counters import COUNTERS
from harness.registration import verify

from conftest import TINY, git, run_bench

ISSUE_CLAUSE = "dram_read_bytes + dram_write_bytes <= 1.1 * (bare_dram_read_bytes + bare_dram_write_bytes)"

GEMM_LINE = textwrap.dedent('''\
    schema = 7
    hypothesis = "the fused epilogue moves a bare GEMM's bytes"
    workload = "gemm_bias_gelu"
    candidates = ["gemm_triton"]
    baseline = "gemm_torch"

    [grid]
    m = [32]
    n = [48]
    k = [64]
    dtype = ["float32"]
    gelu = ["tanh"]

    [correctness]
    atol = 1e-4
    rtol = 1e-4
    seeds = [0]

    [bar]
    go = "pass_rate == 1.0"
    prediction = 1.0

    [verify]
    clauses = {clauses}
    ''')


def _gemm_line(clauses) -> str:
    return GEMM_LINE.format(clauses=repr(list(clauses)).replace("'", '"'))


# ----------------------------------------------------------------------------- grammar


def test_the_issue_clause_parses_with_bare_counters():
    c = verify.parse(ISSUE_CLAUSE)
    assert verify.names(c) == {"dram_read_bytes", "dram_write_bytes", "bare_dram_read_bytes", "bare_dram_write_bytes"}
    assert verify.bare_names([c]) == {"bare_dram_read_bytes", "bare_dram_write_bytes"}
    env = {"dram_read_bytes": 100.0, "dram_write_bytes": 10.0, "bare_dram_read_bytes": 95.0,
           "bare_dram_write_bytes": 10.0}
    assert verify.check(c, env) == (110.0, pytest.approx(115.5), True)
    # Every counter has its bare twin; a formula has none.
    for name in COUNTERS:
        assert verify.names(verify.parse(f"{name} <= 2 * bare_{name}")) == {name, f"bare_{name}"}


@pytest.mark.parametrize("text, bad", [("dram_read_bytes <= bare_dram_bytes", "bare_dram_bytes"),
                                       ("dram_read_bytes <= bare_min_bytes", "bare_min_bytes"),
                                       ("bare_ <= 1", "bare_")])
def test_a_bare_name_that_is_no_counter_is_refused(text, bad):
    with pytest.raises(UserError, match=f"unknown name '{bad}'") as info:
        verify.parse(text)
    assert "bare_<counter>" in str(info.value)


def test_which_names_a_workload_gives_no_value():
    gemm, attention = get_workload("gemm_bias_gelu"), get_workload("attention")
    gemm_cfgs = [gemm.config({"m": 8, "n": 16, "k": 32, "dtype": "float16", "gelu": "tanh"})]
    att_cfgs = [attention.config({"batch": 1, "heads": 2, "kv_heads": 2, "seq_len": 32, "head_dim": 16,
                                  "dtype": "float32", "causal": False})]
    bare = [verify.parse(ISSUE_CLAUSE)]
    kv = [verify.parse("dram_read_bytes <= 1.2 * kv_bytes")]
    assert verify.undefined_names(bare, gemm, gemm_cfgs) is None
    assert verify.undefined_names(kv, attention, att_cfgs) is None
    assert "declares no bare op" in verify.undefined_names(bare, attention, att_cfgs)
    why = verify.undefined_names(kv, gemm, gemm_cfgs)
    assert "kv_bytes, which workload 'gemm_bias_gelu' does not define" in why and gemm_cfgs[0].key() in why
    assert get_workload("rmsnorm").has_bare_op and not attention.has_bare_op


# ----------------------------------------------------------------------------- register


def _register_refused(repo, text: str, message: str) -> None:
    (repo / "registrations" / "v.toml").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v")
    res = run_bench(repo, "register", "registrations/v.toml")
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (repo / "ledger" / "v.jsonl").exists()


def test_register_refuses_bare_counters_on_a_workload_without_a_bare_op(repo):
    _register_refused(repo, TINY + f"\n[verify]\nclauses = [\"{ISSUE_CLAUSE}\"]\n",
                      "workload 'attention' declares no bare op")


def test_register_refuses_a_formula_the_workload_does_not_define(repo):
    _register_refused(repo, _gemm_line(["dram_read_bytes <= 1.2 * kv_bytes"]),
                      "names kv_bytes, which workload 'gemm_bias_gelu' does not define")


def test_a_gemm_line_with_the_issue_clause_reads(tmp_path):
    from harness.registration import schema as registration

    p = tmp_path / "g.toml"
    p.write_text(_gemm_line([ISSUE_CLAUSE, "local_spill_bytes == 0"]))
    reg = registration.load(p)
    assert reg.verify == (ISSUE_CLAUSE, "local_spill_bytes == 0")
    assert verify.bare_names(reg.verify_clauses) == {"bare_dram_read_bytes", "bare_dram_write_bytes"}


# ----------------------------------------------------------------------------- the bare op


BARE_POINTS = [("gemm_bias_gelu", {"m": 40, "n": 24, "k": 72, "gelu": "tanh"}),
               ("gemm_bias_gelu", {"m": 67, "n": 131, "k": 197, "gelu": "exact"}),
               ("rmsnorm", {"tokens": 12, "hidden": 96, "residual": False}),
               ("rmsnorm", {"tokens": 5, "hidden": 67, "residual": True})]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("workload, point", BARE_POINTS)
def test_the_bare_op_passes_its_own_float64_check(workload, point, dtype):
    from harness.measurement.correctness.poison import poison_

    wl = get_workload(workload)
    cfg = wl.config({**point, "dtype": dtype})
    atol, rtol = wl.tolerances[dtype]
    for family in wl.default_families:
        inputs = wl.make_inputs(cfg, 0, family)
        outs = wl.allocate_bare_outputs(cfg)
        assert len(outs) == len(wl.bare_reference(cfg, inputs)) >= 1
        for o in outs:
            poison_(o)
        assert wl.bare_check(cfg, inputs, outs, atol=atol, rtol=rtol) is not None  # the poison: unwritten
        wl.bare_op(cfg, inputs, outs)
        assert wl.bare_check(cfg, inputs, outs, atol=atol, rtol=rtol) is None, (cfg.key(), family)
        # An op that computed something else fails it: the bare counters would measure nothing.
        outs[-1].mul_(2).add_(1)
        why = wl.bare_check(cfg, inputs, outs, atol=atol, rtol=rtol)
        assert why is not None and wl.bare_name in why


@pytest.mark.parametrize("workload, point", BARE_POINTS[::2])
def test_the_profile_worker_runs_and_checks_the_bare_op_on_the_cpu(workload, point, tmp_path):
    from harness.execution.profile_worker import run

    cfg = get_workload(workload).config({**point, "dtype": "float32"})
    spec = {"config": cfg.as_dict(), "kernel": None, "name": "bare_op", "seed": 7, "atol": 1e-5, "rtol": 1e-5,
            "calls": 1, "device": "cpu", "bare": True}
    assert run(spec) == {"output_check": {"passed": True, "reason": None}}
    # A tolerance no float32 GEMM meets fails the check, and says it is the bare op's.
    if workload == "gemm_bias_gelu":
        check = run({**spec, "atol": 0.0, "rtol": 0.0})["output_check"]
        assert check["passed"] is False and check["reason"].startswith("profiled bare op: bare op (torch.matmul")


def test_a_bare_op_declaration_must_be_whole():
    from harness.workloads.gemm import GemmBiasGelu
    from harness.workloads.api import Workload

    class Half(GemmBiasGelu):
        bare_op = Workload.bare_op

    with pytest.raises(UserError, match="declares bare_name .* but not bare_op"):
        Half().validate()
    get_workload("gemm_bias_gelu").validate()
    get_workload("rmsnorm").validate()


# ----------------------------------------------------------------------------- evaluation


def _rows(cfg, kernels: dict, bare) -> list:
    """Typed ledger rows: a result and a `profile` row per kernel (``kernels``: name -> per-call
    counters), written through commands/profile.py ``payload`` with ``bare`` (a ProfileResult
    of the bare op, or None: a row profiled without it)."""
    from harness.commands.profile import bare_payload, payload
    from harness.ledger.rows import load
    from harness.measurement.profile import ProfileResult

    stamp = {"commit": "c" * 40, "env": {"device": "cuda", "gpu": "NVIDIA H200"}}
    rows, seq = [], 0
    for name, per_call in kernels.items():
        res = ProfileResult(cfg, name, per_call=per_call, output_check={"passed": True}, l2_bytes=0)
        p = payload(res, "candidate", {"passed": True}, None if bare is None else bare_payload(bare))
        for kind, fields in (("result", {"config": cfg.as_dict(), "config_key": cfg.key(), "candidate": name}),
                             ("profile", p)):
            seq += 1
            rows.append(load({"kind": kind, "seq": seq, "line": "g", **stamp, **fields}))
    return rows


def _counters(read: float, write: float) -> dict:
    return {**dict.fromkeys(COUNTERS, 0.0), "dram_read_bytes": read, "dram_write_bytes": write, "launches": 1.0}


def test_clauses_over_profile_rows_carrying_bare_counters(tmp_path):
    from harness.governance.verdict import verify_clauses
    from harness.measurement.profile import ProfileResult
    from harness.registration import schema as registration
    from harness.vocab.outcomes import measured_on

    p = tmp_path / "g.toml"
    p.write_text(_gemm_line([ISSUE_CLAUSE, "dram_write_bytes <= 1.1 * bare_dram_write_bytes"]))
    reg = registration.load(p)
    cfg = reg.configs[0]
    bare = ProfileResult(cfg, "bare_op", per_call=_counters(1000.0, 200.0), output_check={"passed": True})
    # The fused kernel moves the GEMM's bytes (and the bias); the unfused one writes out three times.
    rows = _rows(cfg, {"gemm_triton": _counters(1020.0, 200.0), "gemm_torch": _counters(1400.0, 600.0)}, bare)
    assert rows[1].bare["counters"]["dram_read_bytes"] == 1000.0 and rows[1].bare["op"].startswith("torch.matmul")
    where = measured_on(rows[0])
    results = [r for r in rows if r.kind == "result"]
    both, writes = verify_clauses(reg, results, rows, where)[0]
    assert both.passed is False and [c.holds for c in both.checks] == [True, False]
    assert both.checks[0].left == 1220.0 and both.checks[0].right == pytest.approx(1320.0)
    assert writes.passed is False and writes.as_row(5)["failing"][0]["candidate"] == "gemm_torch"
    fused_only = [r for r in results if r.candidate == "gemm_triton"]
    assert all(c.passed for c in verify_clauses(reg, fused_only, rows, where)[0])

    # A bare op whose output failed its float64 check gives no counters: unknown, with the reason.
    wrong = ProfileResult(cfg, "bare_op", per_call=_counters(1000.0, 200.0),
                          output_check={"passed": False, "reason": "profiled bare op: output c: 12 of 1536 outside"})
    rows = _rows(cfg, {"gemm_triton": _counters(1020.0, 200.0)}, wrong)
    assert rows[1].bare["counters"] is None and rows[1].bare["correct"] is False
    (clause, _), _ = verify_clauses(reg, rows[:1], rows, measured_on(rows[0]))
    assert clause.passed is None
    assert clause.as_row(5)["failing"][0]["why"] == "bare op: profiled bare op: output c: 12 of 1536 outside"

    # A row profiled before bare counters existed holds none: unknown, never true.
    rows = _rows(cfg, {"gemm_triton": _counters(1020.0, 200.0)}, None)
    assert not rows[1].has("bare") and rows[1].bare is None
    (clause, _), _ = verify_clauses(reg, rows[:1], rows, measured_on(rows[0]))
    assert clause.passed is None and "no bare op was profiled" in clause.as_row(5)["failing"][0]["why"]


def test_bench_profile_shows_the_bare_op_beside_the_kernels(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from harness.measurement import counters
    from harness.measurement.profile import ProfileResult
    from harness.reporting.render.console import console
    from harness.reporting.render.profile import render_profile

    cfg = get_workload("gemm_bias_gelu").config({"m": 32, "n": 48, "k": 64, "dtype": "float32", "gelu": "tanh"})
    recorded = counters.parse_csv((Path(__file__).parent / "data" / "ncu" / "raw-base.csv").read_text())
    ls = tuple(x for x in recorded if counters.in_range(x, "triton_flash"))  # any recorded launch will do
    bare = ProfileResult(cfg, "bare_op", launches=ls, per_call=counters.per_call(list(ls), 1),
                         output_check={"passed": True})
    rows = [r for r in _rows(cfg, {"gemm_triton": _counters(1.0, 1.0)}, bare) if r.kind == "profile"]
    failed = ProfileResult(cfg, "bare_op", output_check={"passed": False, "reason": "profiled bare op: off"})
    rows += [r for r in _rows(cfg.replace(m=64), {"gemm_triton": _counters(1.0, 1.0)}, failed) if r.kind == "profile"]
    monkeypatch.setenv("COLUMNS", "200")
    console.cache_clear()
    try:
        render_profile("g", rows)
        out = capsys.readouterr().out
    finally:
        console.cache_clear()
    assert out.count("bare op") >= 2 and "_attn_fwd" in out and "profiled bare op: off" in out
