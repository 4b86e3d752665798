"""Figures that do not move with the card's clock, which card and host measured, and on what
software (issue 48, items 2 and 4).

Cycles per call from scripted clocks in virtual time (the timing path's own test seam); the
bar's ``cycles`` and ``tflops_at(F)``, their reductio and their refusal on the CPU through the
real CLI in temporary repositories; a verdict over rows of two software stacks refused, rows
built through the sweep's own path (``run_config``) and appended by the ledger's writer.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.registration import bar as barlang
from harness.vocab import metrics
from harness.registration.schema import from_table
from harness.measurement.clocks import ClockMonitor
from harness.measurement.timing import TimingPolicy, measure
from harness.measurement.timing.sustained import SustainBudget, sustain
from harness.workloads.shipped import ATTENTION

from tests.conftest import REPO, TINY, copy_project, git, init_repo, run_bench
from tests.timers import ScriptedClockSource, ScriptedTimer

TINY_GO = 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"'
# What one call of each arm costs in cycles (thousands): a compute-bound call's time is this
# over the SM clock the card holds at the moment.
KCYCLES = {"candidate": 3800.0, "baseline": 9000.0, "control": 9000.0}


def _clock(t: float) -> float:
    """The power limiter's step: boost, then the clock a loop settles at."""
    return 1980.0 if t < 0.3 else 1750.0


def _scripted(arms=KCYCLES):
    """(timer, monitor): each call takes its cycles over the clock at its start; NVML read at 200 Hz."""
    timer = ScriptedTimer({a: (lambda k, t, a=a: arms[a] / _clock(t)) for a in arms})
    return timer, ClockMonitor(ScriptedClockSource(_clock, mem=lambda t: 3201.0), hz=200)


def _bar(go: str, *, schema: int = 6, text: str = TINY) -> str:
    return text.replace(TINY_GO, f"go = {json.dumps(go)}").replace("schema = 1", f"schema = {schema}")


def _reg(go: str, schema: int = 6):
    return from_table(tomllib.loads(_bar(go, schema=schema)), Path("registrations/t.toml"), "0" * 64)


# ----------------------------------------------------------------------------- cycles per call


def test_cycles_per_call_are_the_calls_times_their_rounds_clock():
    timer, mon = _scripted()
    pol = TimingPolicy(warmup_ms=100.0, min_samples=40, max_samples=40, min_time_ms=0.0, timeout_s=1e5)
    m = measure({a: (lambda s: None) for a in KCYCLES}, n_slots=1, policy=pol, device="cpu", timer=timer, monitor=mon)
    clocks = m.arm_clocks
    # The clock fell from 1980 to 1750 MHz during the rounds: the times moved with it, the cycles did not.
    assert {r.sm_mhz for r in m.rounds} == {1980.0, 1750.0}
    assert len({round(s, 9) for s in m.arms["candidate"].samples}) == 2
    for arm, kc in KCYCLES.items():
        assert clocks[arm].kcycles == pytest.approx(kc, rel=1e-12)
        assert clocks[arm].mem_mhz == pytest.approx(3201.0) and clocks[arm].n == len(m.arms[arm].samples)
    row = m.to_row()
    assert row["arm_clocks"]["candidate"]["kcycles"] == pytest.approx(3800.0)
    assert row["rounds"]["sm_mhz"] == [r.sm_mhz for r in m.rounds] and row["rounds"]["mem_mhz"][0] == 3201.0


def test_sustained_cycles_take_each_calls_batch_clock():
    timer, mon = _scripted({"a": 3800.0})
    sus = sustain("a", lambda s: None, n_slots=1, device="cpu", timer=timer, monitor=mon,
                  budget=SustainBudget(warm_s=0.2, timed_s=0.3))
    assert sum(sus.batch_calls) == len(sus.samples) and 1980.0 in sus.batch_sm_mhz and 1750.0 in sus.batch_sm_mhz
    assert sus.kcycles == pytest.approx(3800.0, rel=1e-12)
    # The mean clock over the window is neither batch's: time × that mean is not the cycles.
    assert abs(sus.median_ms * sus.sm_mhz / 3800.0 - 1) > 0.01
    assert sus.as_dict()["kcycles"] == pytest.approx(3800.0)
    assert sus.as_dict()["batches"]["calls"] == list(sus.batch_calls)


def test_the_cpu_has_no_cycles_and_says_why():
    timer = ScriptedTimer({a: 2.0 for a in KCYCLES})
    pol = TimingPolicy(warmup_ms=10.0, min_samples=5, max_samples=5, min_time_ms=0.0, timeout_s=1e5)
    m = measure({a: (lambda s: None) for a in KCYCLES}, n_slots=1, policy=pol, device="cpu", timer=timer)
    assert m.arm_clocks is None and m.to_row()["arm_clocks"] is None
    assert "no GPU clocks to monitor" in m.clock_note
    sus = sustain("a", lambda s: None, n_slots=1, device="cpu", timer=ScriptedTimer({"a": 2.0}),
                  budget=SustainBudget(timed_s=0.05))
    assert sus.kcycles is None and "no GPU clocks to monitor" in sus.clock_note


def test_the_audit_recomputes_cycles_from_the_rows_samples_and_clocks():
    from harness.ledger.audit import recompute
    from harness.ledger.rows import load

    from harness.workloads import Config

    _, mon = _scripted()
    pol = TimingPolicy(warmup_ms=100.0, min_samples=40, max_samples=40, min_time_ms=0.0, timeout_s=1e5)
    arms = {"candidate:k": "candidate", "baseline": "baseline", "control": "control"}
    timer = ScriptedTimer({n: (lambda k, t, a=a: KCYCLES[a] / _clock(t)) for n, a in arms.items()})
    m = measure({n: (lambda s: None) for n in arms}, n_slots=1, policy=pol, device="cpu", timer=timer, monitor=mon)
    cfg = Config("attention", 1, 2, 2, 32, 16, "float32", False)
    row = {"kind": "result", "seq": 1, "candidate": "k", "config": cfg.as_dict(), "timing": m.to_row(),
           "rate_protocol": "interleaved", "metrics": {"cycles": m.arm_clocks["candidate:k"].kcycles}}
    assert recompute(load(row)) == []
    forged = {**row, "metrics": {"cycles": 3700.0}}  # a card that "did it in fewer cycles"
    (bad,) = recompute(load(forged))
    assert bad.field == "metrics.cycles" and bad.recomputed == pytest.approx(3800.0)
    timing = json.loads(json.dumps(row["timing"]))
    timing["arm_clocks"]["baseline"]["kcycles"] = 8000.0
    assert [d.field for d in recompute(load({**row, "timing": timing}))] == ["timing.arm_clocks.baseline.kcycles"]


# ----------------------------------------------------------------------------- the bar


@pytest.mark.parametrize("expr,metric,at", [
    ("min(tflops_at(1980)) >= 500", "tflops_at", 1980.0),
    ("min(tflops_at(1755.5) where dtype == \"float32\") >= 500", "tflops_at", 1755.5),
    ("max(cycles) <= 3900", "cycles", None),
])
def test_the_bar_reads_cycles_and_rates_at_a_stated_clock(expr, metric, at):
    agg = barlang.parse(expr).clauses()[0].aggregate
    assert (agg.metric, agg.at) == (metric, at)
    assert barlang.parse(expr).clauses()[0].text == expr


@pytest.mark.parametrize("expr,fragment", [
    ("min(tflops_at) >= 1", "tflops_at needs the SM clock it states, in MHz"),
    ("min(tflops_at()) >= 1", "expected an SM clock in MHz after 'tflops_at('"),
    ("min(tflops_at(\"1980\")) >= 1", "expected an SM clock in MHz"),
    ("min(tflops_at(0)) >= 1", "SM clock 0 MHz is outside (0, 10000]"),
    ("min(tflops_at(1.98e9)) >= 1", "SM clock 1.98e9 MHz is outside"),
    ("min(tflops(1980)) >= 1", "'tflops' takes no argument"),
    ("min(cycles(1980)) >= 1", "'cycles' takes no argument"),
    ("min(tflops_at(1980) >= 1", "expected ')' or 'where' to close min("),
])
def test_the_bar_refuses_a_stated_clock_it_cannot_read(expr, fragment):
    with pytest.raises(barlang.BarError) as exc:
        barlang.parse(expr)
    assert fragment in str(exc.value)


def test_a_rate_at_a_stated_clock_is_the_rate_over_the_calls_own_clock():
    # 500 TFLOP/s measured in 2.1 ms calls of 3780 kcycles: the card held 1800 MHz.
    row = {"candidate": "k", "correct": True, "tflops": 500.0, "ms": 2.1, "cycles": 3780.0}
    out = barlang.evaluate(barlang.parse("min(tflops_at(1980)) >= 540 and max(cycles) <= 3800"), [row])
    assert out.passed and out.clauses[0].value == pytest.approx(550.0) and out.clauses[1].value == 3780.0
    assert metrics.derived("tflops_at", row, 1800.0) == pytest.approx(500.0)
    # A row without cycles (older rows, the CPU's) has no such figure: the clause is unknown, never a pass.
    old = {k: v for k, v in row.items() if k != "cycles"}
    unknown = barlang.evaluate(barlang.parse("min(tflops_at(1980)) >= 1"), [old])
    assert not unknown.passed and unknown.clauses[0].value is None


def test_a_clock_normalised_bar_needs_schema_6():
    assert _reg("min(tflops_at(1980)) >= 1 and pass_rate == 1.0").bar.clauses()[0].aggregate.at == 1980.0
    for go in ("min(tflops_at(1980)) >= 1 and pass_rate == 1.0", "max(cycles) <= 1e9 and pass_rate == 1.0"):
        with pytest.raises(UserError, match="needs schema = 6"):
            _reg(go, schema=5)
    reg = _reg("min(tflops_at(1980)) >= 1 and pass_rate == 1.0")
    assert reg.judges_rates()  # timed as a rate bar: the sustained phase, lead calls


def test_reports_show_the_measured_and_the_normalised_figure_side_by_side(tmp_path):
    from harness.ledger.store import Ledger
    from harness.measurement.timing.sustained import rates
    from harness.reporting.analysis import lines, report
    from harness.workloads import Config

    led = Ledger(tmp_path, "norm")
    go = "min(tflops_at(1980)) >= 500 and pass_rate == 1.0"
    led.append("registered", {"commit": "a" * 40, "registration_commit": "a" * 40, "registration_sha256": "0" * 64,
                              "env": {}, "n_configs": 1,
                              "registration": {"line": "norm", "candidates": ["k"], "baseline": "base",
                                               "workload": "attention", "go": go, "prediction": 550.0,
                                               "primary": "min(tflops_at(1980))", "hypothesis": "h"}})
    # flash-h200-v2's deciding row as shipped: 2.141 ms at 1776 MHz, sustained.
    cfg = Config("attention", 8, 16, 16, 4096, 128, "float16", False)
    calls, sm = [2.141] * 20, 1776.0
    kc, r = 2.141 * sm, rates(cfg, 2.141, ATTENTION)
    led.append("result", {
        "commit": "a" * 40, "env": {"device": "cuda", "gpu": "NVIDIA H200"}, "config": cfg.as_dict(),
        "config_key": cfg.key(), "candidate": "k", "baseline": "base", "numerics": {},
        "policy": {"control_tolerance": 0.02}, "rate_protocol": "sustained",
        "sustained": {"samples_ms": calls, "median_ms": 2.141, "n_calls": 20, "sm_mhz": sm, "kcycles": kc,
                      "batches": {"calls": [20], "sm_mhz": [sm], "mem_mhz": [3201.0]}},
        "metrics": {"ms": 2.141, "interleaved_ms": 1.968, "baseline_ms": 11.31, "speedup": 11.31 / 1.968,
                    "control": 1.0, "tflops": r["tflops"], "gbps": r["gbps"], "sm_mhz": sm, "cycles": kc},
        "timing": {"mode": "cold", "clock": {"mean_mhz": 1980.0},
                   "arm_clocks": {"baseline": {"kcycles": 22394.0, "sm_mhz": 1980.0, "mem_mhz": 3201.0, "n": 2}},
                   "arms": {"candidate:k": {"samples_ms": [1.968, 1.968]}, "baseline": {"samples_ms": [11.31, 11.31]}}}})
    data = report.report_data(lines.load_path(led.path))
    head = data["header"]
    at = r["tflops"] * 1980 / sm  # the rate at 1980 MHz: 513.6 TFLOP/s measured at 1776 MHz
    assert head.index("TFLOP/s") < head.index("TFLOP/s at 1980 MHz") and "kcycles" in head
    (table,) = data["tables"]
    base, cand = (row["cells"] for row in table["rows"])
    assert cand[head.index("TFLOP/s")] == f"{r['tflops']:.4g}" and cand[head.index("TFLOP/s at 1980 MHz")] == f"{at:.4g}"
    assert cand[head.index("kcycles")] == f"{kc:.4g}"
    # The baseline's own cycles (its interleaved calls); no rate at a stated clock of its own.
    assert base[head.index("kcycles")] == "2.239e+04" and base[head.index("TFLOP/s at 1980 MHz")] == "—"
    clause = data["clauses"][0]
    assert clause["value"] == f"{at:.4g}" and clause["outcome"] == "pass"
    assert f"{r['tflops']:.4g} TFLOP/s as measured, {kc:.4g} kcycles" in clause["source"]
    assert "sustained 2.141 ms at 1776 MHz" in clause["source"]


# ----------------------------------------------------------------------------- the reductio


def _gpu_ceilings(root: Path, *, clock: bool) -> Path:
    """The shipped H200 ceilings row, through the ledger's writer, with (``clock``) the SM clock
    its matmuls ran at as a ceilings measurement now records it (``method.sm_mhz``)."""
    from harness.ledger.store import Ledger

    shipped = json.loads((REPO / "ledger" / "_device_ceilings.jsonl").read_text().splitlines()[0])
    method = dict(shipped["method"])
    if clock:
        method["sm_mhz"] = {k: 1755.0 for k in shipped["matmul_tflops"]}
    fields = {k: shipped[k] for k in ("commit", "env", "device", "fingerprint", "copy_gbps", "matmul_tflops")}
    Ledger(root, "_device_ceilings").append("ceilings", {**fields, "method": method})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "ceilings")
    return root


def _refused(root: Path, *args: str) -> str:
    r = run_bench(root, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def test_a_rate_at_a_clock_beyond_the_ceiling_scaled_to_it_is_refused(tmp_path):
    lines = {"t": _bar("min(tflops_at(1980)) >= 480 and pass_rate == 1.0"),
             "c": _bar("max(cycles) <= 1e-4 and pass_rate == 1.0"),
             "ok": _bar("min(tflops_at(1980)) >= 470 and pass_rate == 1.0")}
    root = _gpu_ceilings(init_repo(tmp_path / "proj", lines), clock=True)
    # float32 is held to the faster of fp32 and TF32: 420.25 TFLOP/s at 1755 MHz, 474.1 at 1980 MHz.
    err = _refused(root, "register", "t")
    assert "the bar can never be GO on NVIDIA H200" in err and "`min(tflops_at(1980)) >= 480` is always false" in err
    assert "0.2395 TFLOP/s per MHz" in err and "474.1 TFLOP/s at 1980 MHz" in err
    assert not (root / "ledger" / "t.jsonl").exists()
    err = _refused(root, "register", "c")
    assert "`max(cycles) <= 1e-4` is always false" in err and "kcycles" in err
    assert not (root / "ledger" / "c.jsonl").exists()
    ok = run_bench(root, "register", "ok")
    assert ok.returncode == 0, ok.stderr


def test_ceilings_without_their_clock_bound_no_rate_at_a_clock(tmp_path):
    root = _gpu_ceilings(init_repo(tmp_path / "proj", {"t": _bar("min(tflops_at(1980)) >= 480 and pass_rate == 1.0")}),
                         clock=False)
    r = run_bench(root, "register", "t")
    assert r.returncode == 0, r.stderr  # the shipped row predates the clock: nothing to scale by


def test_a_clock_normalised_bar_on_the_cpu_is_refused_at_register_and_at_sweep(tmp_path):
    lines = {"t": _bar("min(tflops_at(1980)) >= 1 and pass_rate == 1.0"),
             "c": _bar("geomean(speedup) >= 0.01 and max(cycles) <= 1e12")}
    root = init_repo(tmp_path / "proj", lines)
    # No device known yet: registered (the sweep checks the device it runs on) ...
    assert run_bench(root, "register", "c").returncode == 0
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "registered")
    before = sorted(p.name for p in (root / "ledger").iterdir())
    head = git(root, "rev-parse", "HEAD")
    # ... and the sweep on the CPU refuses before it measures anything, ceilings included.
    err = _refused(root, "sweep", "c")
    assert "`max(cycles) <= 1e12` needs cycles, had only from the SM clock NVML reads on a GPU" in err
    assert "this sweep runs on the CPU" in err and "sweep line 'c' on a GPU" in err
    assert sorted(p.name for p in (root / "ledger").iterdir()) == before and git(root, "rev-parse", "HEAD") == head
    assert len((root / "ledger" / "c.jsonl").read_text().splitlines()) == 1  # row 0 only
    # With this host's CPU ceilings known (`bench ceilings` commits its row), register refuses the bar on it.
    assert run_bench(root, "ceilings").returncode == 0
    err = _refused(root, "register", "t")
    assert "min(tflops_at(1980)) has no value (tflops_at is read through NVML: none on" in err
    assert not (root / "ledger" / "t.jsonl").exists()


# ----------------------------------------------------------------------------- the software stack


def _rows_of_two_stacks(repo: Path, second: dict) -> None:
    """Register ``tiny`` and append each config's rows (run_config on the CPU, as the sweep
    does) stamped with its own env: the first config's stack, then ``second``."""
    from harness.governance.line import open_line, register
    from harness.pipeline.run import run_config
    from harness.commands.sweep import context

    register("tiny", root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "registered")
    first = {"device": "cpu", "gpu": None, "torch": "2.13.0+cpu", "triton": "3.6.0", "cupy": None}
    with open_line("tiny", root=repo, action="a test") as line:
        for cfg, env in zip(line.reg.configs, (first, second)):
            stamp = line.stamp(env).fields()
            for o in run_config(cfg, line.reg.candidates, context(line, "cpu", None)):
                line.ledger.append(o.kind, {**stamp, **o.payload})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "rows")


def test_a_verdict_over_two_software_stacks_is_refused_naming_both(repo):
    _rows_of_two_stacks(repo, {"device": "cpu", "gpu": None, "torch": "2.13.0+cpu", "triton": "3.5.0", "cupy": None})
    rows = (repo / "ledger" / "tiny.jsonl").read_bytes()
    err = _refused(repo, "verdict", "tiny", "--no-commit")
    assert "measured in 2 places" in err and "with one software stack" in err
    assert "(torch 2.13.0+cpu, triton 3.5.0, cupy none)" in err and "(torch 2.13.0+cpu, triton 3.6.0, cupy none)" in err
    err = _refused(repo, "verdict", "tiny")
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == rows  # nothing written


def test_a_version_one_row_never_recorded_is_no_difference(repo):
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import OUTCOME_KINDS, places

    # The second config's rows predate the cupy and triton fields (an older bench's env).
    _rows_of_two_stacks(repo, {"device": "cpu", "gpu": None, "torch": "2.13.0+cpu"})
    rows = [r for r in read_rows(repo / "ledger" / "tiny.jsonl") if r.kind in OUTCOME_KINDS]
    (place,) = places(rows)
    assert place[1] == {"torch": "2.13.0+cpu", "triton": "3.6.0", "cupy": None}
    # A version recorded with two values splits them, and a row without it is its own place.
    third = rows[-1].replace(env={"device": "cpu", "gpu": None, "torch": "2.13.0+cpu", "triton": "3.5.0"})
    assert [p[1].get("triton") for p in places([*rows, third])] == ["3.5.0", "3.6.0", "not recorded"]


# ----------------------------------------------------------------------------- identity


def test_a_row_names_its_host_by_a_hash_and_its_card_by_uuid_and_serial():
    import socket

    from harness.governance.line import host_env
    from harness.measurement.device import HOST_HASH_CHARS, env_summary, host_id

    env = env_summary("cpu")
    kind, _, digest = env["host"].partition(":")
    assert kind in ("machine-id", "hostname") and len(digest) == HOST_HASH_CHARS and int(digest, 16) >= 0
    assert env["host"] == host_id() and socket.gethostname() not in env.values()  # no field names the machine
    assert {"gpu_uuid", "gpu_serial", "torch", "triton", "cupy"} <= set(env)
    assert host_env()["host"] == env["host"]  # the registered row names the host the same way


# ----------------------------------------------------------------------------- the GPU


GPU_LINE = """\
schema = 6
hypothesis = "a row's cycles per call are its calls' times at the clock NVML read during them"
workload = "attention"
candidate = "sdpa"
baseline = "torch_stack"

[grid]
batch = [4]
heads = [16]
seq_len = [1024]
head_dim = [128]
dtype = ["float16"]
causal = [false]

[correctness]
atol = 2e-2
rtol = 2e-2
# This line tests what a row records of its clocks, not tolerance power: float16's 2e-2 cannot
# see a 1% scale error or a dropped last key at seq_len 1024 (register would refuse it).
accept_weak = ["scale_1pct", "drop_last_key"]
seeds = [0]
families = ["normal"]

[timing]
# Warm-up outlasts a few NVML polls: the reference clock is read in its tail.
warmup_ms = 100
min_samples = 10
max_samples = 40
min_time_ms = 20
timeout_s = 30

[bar]
go = "min(tflops_at(1980)) >= 1 and max(cycles) <= 1e12"
prediction = 100
include_noisy = true
"""
# A row's cycles per call against its time × its clock: each call's own round or batch
# clock against the window's mean clock, within the power limiter's wander over the window.
GPU_CYCLES_RTOL = 0.01


@pytest.mark.gpu
@pytest.mark.slow
def test_a_gpu_rows_cycles_are_its_time_times_its_clock_and_it_names_its_card(tmp_path):
    root = copy_project(tmp_path / "proj")
    (root / "registrations").mkdir()
    (root / "registrations" / "g.toml").write_text(GPU_LINE)
    (root / "ledger").mkdir()
    (root / ".gitignore").write_text("ledger/*.lock\n__pycache__/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "user.name", "test")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "g")
    for cmd in (("register", "g"), ("sweep", "g")):
        r = run_bench(root, *cmd)
        assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (root / "ledger" / "g.jsonl").read_text().splitlines()]
    (res,) = [r for r in rows if r["kind"] == "result"]
    m, env = res["metrics"], res["env"]
    assert res["rate_protocol"] == "sustained"
    assert m["cycles"] == pytest.approx(m["ms"] * m["sm_mhz"], rel=GPU_CYCLES_RTOL)
    assert res["sustained"]["kcycles"] == m["cycles"]
    for arm, c in res["timing"]["arm_clocks"].items():
        ms = res["timing"]["arms"][arm]["stats"]["median"]
        assert c["kcycles"] == pytest.approx(ms * c["sm_mhz"], rel=GPU_CYCLES_RTOL), arm
        assert c["mem_mhz"] is not None, arm  # NVML gives the H200's memory clock
    assert env["gpu_uuid"].startswith(("GPU-", "MIG-")) and env["host"].split(":")[0] in ("machine-id", "hostname")
    assert "gpu_serial" in env
    # The ceilings measured for this sweep record the clock their matmuls ran at.
    (ceil,) = [json.loads(x) for x in (root / "ledger" / "_device_ceilings.jsonl").read_text().splitlines()]
    assert set(ceil["method"]["sm_mhz"]) == set(ceil["matmul_tflops"])
    v = run_bench(root, "verdict", "g", "--no-commit", "--format", "json")
    assert v.returncode == 0, v.stdout + v.stderr
    clause = json.loads(v.stdout)["row"]["clauses"][0]
    assert clause["value"] == pytest.approx(m["tflops"] * 1980 * m["ms"] / m["cycles"])
    rep = run_bench(root, "report", "g", "--out", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "kcycles" in text and "TFLOP/s at 1980 MHz" in text and "TFLOP/s as measured" in text
