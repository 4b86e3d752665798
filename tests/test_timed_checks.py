"""Issue 16's timed-call checks on the CPU: host time per call, the output of one timed call
chosen at random, and the empty-window rule (the GPU halves are marked ``gpu``)."""

from __future__ import annotations

import dataclasses

import math
import time

import pytest

from harness.registration import bar as barlang
from harness.measurement.correctness.after_timing import check_timed_output
from harness.measurement.correctness.results import Tolerance
from harness.measurement.stats import Stats
from harness.measurement.timing import (ARM_BASELINE, ARM_CONTROL, EMPTY_WINDOW_FACTOR, CallHooks, TimingPolicy,
                                        empty_window, measure, told_apart)
from harness import kernel
from harness.pipeline.checks import empty_failure
from harness.pipeline.context import SweepContext
from harness.pipeline.run import run_config
from harness.workloads import Config
from harness.workloads.inputs import make_inputs
from harness.workloads.shipped import ATTENTION
from tests import zoo
from tests.conftest import sweep_context
from tests.timers import ScriptedClockSource, ScriptedTimer

CFG = Config("attention", 1, 2, 2, 32, 16, "float32", False)
# CFG's gate with one seed and one family: 2 calls at CFG and each of its 3 boundary configs.
GATE_CALLS = 8


def policy(**kw) -> TimingPolicy:
    base = dict(warmup_ms=1.0, min_samples=30, max_samples=60, min_time_ms=0.0, noise_target=1e-9, timeout_s=1e5)
    return TimingPolicy(**{**base, **kw})


def ctx(line="t", go="pass_rate == 1.0", **timing) -> SweepContext:
    return sweep_context(line=line, go=go, timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 20,
                                                   "min_time_ms": 1, "timeout_s": 5, **timing})


# A bar over an absolute rate: its line takes rates from the sustained phase.
RATE_BAR = "min(tflops) >= 0 and pass_rate == 1.0"


# ----------------------------------------------------------------------------- host_us


def test_host_time_per_call_is_measured_per_arm():
    arms = {"slow": lambda s: time.sleep(0.002), "fast": lambda s: None}
    m = measure(arms, n_slots=1, policy=policy(min_samples=5, max_samples=5), device="cpu",
                timer=ScriptedTimer({"slow": 1.0, "fast": 1.0}))
    # The device time is scripted (1 ms each); the host time is the arm's own Python.
    assert m.host_us["slow"] >= 2000 and m.host_us["fast"] < 1000
    assert m.to_row()["host_us"] == m.host_us


def test_host_us_is_a_result_metric_and_a_bar_metric():
    (row,) = run_config(CFG, ("sdpa",), ctx())
    assert row.kind == "result"
    met = row.payload["metrics"]
    assert met["host_us"] > 0 and met["baseline_host_us"] > 0
    assert set(row.payload["timing"]["host_us"]) == {"candidate:sdpa", ARM_BASELINE, ARM_CONTROL}
    # On the CPU no clocks are read: the rates carry no clock or power, and say so with None.
    assert met["sm_mhz"] is None and met["power_w"] is None
    bar = barlang.parse("max(host_us) <= 1e9 and min(baseline_host_us) > 0")
    rows = [{**CFG.as_dict(), "candidate": "sdpa", "correct": True, **met}]
    assert barlang.evaluate(bar, rows).passed


# ----------------------------------------------------------------------------- one random timed call


def _spot_run(seed: int):
    """An alternating-wrong kernel timed alone; returns (measurement, its copy, inputs, kernel)."""
    import torch

    fn = zoo.make_alternating_wrong(honest_calls=0)
    q, k, v = make_inputs(CFG, 5, "normal", "cpu")
    out = torch.empty(CFG.shapes()[0])
    snap = {}
    m = measure({"a": lambda s: fn(q, k, v, out, causal=False, scale=CFG.scale)}, n_slots=1,
                policy=policy(), device="cpu", timer=ScriptedTimer({"a": 1.0}),
                hooks=CallHooks(spot={"a": lambda s: snap.__setitem__("a", out.clone())}, spot_seed=seed))
    return m, snap["a"], (q, k, v), fn


def test_one_random_timed_call_is_chosen_reproducibly_and_its_output_kept():
    m1, s1, _, _ = _spot_run(3)
    m2, s2, _, _ = _spot_run(3)
    assert m1.spot_calls == m2.spot_calls and m1.spot_seed == 3  # recorded, reproducible
    assert 0 <= m1.spot_calls["a"]["call"] < len(m1.rounds)
    assert m1.to_row()["spot_calls"] == m1.spot_calls
    chosen = {_spot_run(seed)[0].spot_calls["a"]["call"] for seed in range(12)}
    assert len(chosen) >= 4  # not always the same call


def test_the_spot_call_is_drawn_before_it_runs_and_the_watch_is_told_which_it_is():
    """The reservoir draw is made ahead of the call (so the watch snapshots the host only before
    the calls that may be checked): random.Random(seed), one uniform per measured round shared
    by its arms (each arm's choice uniform over its calls; arms with as many calls choose the
    same round, so their outputs share one content); the watch hears spot=True exactly before
    the calls that replaced the choice, the last of them the recorded one."""
    import random

    import torch

    seen: list[tuple[str, bool]] = []
    calls = {"a": 0, "b": 0}
    flagged: dict[str, list[int]] = {"a": [], "b": []}

    def arm(name):
        def run(slot):
            calls[name] += 1
        return run

    def watch(name, spot):
        seen.append((name, spot))
        if spot:
            flagged[name].append(calls[name])  # this arm's calls so far: the next one is flagged

    out = torch.zeros(1)
    for seed in range(6):
        seen.clear()
        calls.update(a=0, b=0)
        flagged.update(a=[], b=[])
        m = measure({"a": arm("a"), "b": arm("b")}, n_slots=1, policy=policy(), device="cpu",
                    timer=ScriptedTimer({"a": 1.0, "b": 1.0}),
                    hooks=CallHooks(watch=watch, spot_seed=seed,
                                    spot={"a": lambda s: out.add_(1), "b": lambda s: out.add_(1)}))
        # Replay the reservoir: one uniform per measured round, shared by its arms.
        rng, k, expect = random.Random(seed), {"a": 0, "b": 0}, {}
        for r in m.rounds:
            u = rng.random()
            for name in r.order:
                k[name] += 1
                if u * k[name] < 1.0:
                    expect[name] = k[name] - 1
        assert {n: c["call"] for n, c in m.spot_calls.items()} == expect, seed
        assert expect["a"] == expect["b"]  # arms with as many calls check the same round
        first_measured = {n: calls[n] - len(m.rounds) for n in calls}  # prime and warm-up calls first
        for name in ("a", "b"):
            picks = [c - first_measured[name] for c in flagged[name]]
            assert picks and picks[-1] == expect[name], (seed, name, picks)
            assert len(picks) < len(m.rounds)  # not every call: only the draws that replaced the choice
        assert any(spot for _, spot in seen) and not all(spot for _, spot in seen)


def test_a_kernel_wrong_on_alternate_calls_is_caught_when_the_random_call_is_a_wrong_one():
    caught = 0
    for seed in range(12):
        m, snap, (q, k, v), fn = _spot_run(seed)
        # The kernel's call number of the chosen measured call: prime + warm-up rounds come first.
        n = 1 + m.warmup_rounds + m.spot_calls["a"]["call"] + 1
        rep = check_timed_output(CFG, (q, k, v), snap, workload=ATTENTION, tol=Tolerance(1e-5, 1e-4), label="a", what="that call")
        assert rep.passed == (n % 2 == 0), (seed, n, rep.reason)
        caught += not rep.passed
    assert 0 < caught < 12


_alt = {"fn": None}


@kernel("test_alternating_wrong", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def alternating(q, k, v, out, *, causal, scale):
    _alt["fn"](q, k, v, out, causal=causal, scale=scale)


def test_run_config_checks_a_random_timed_call_of_every_arm():
    # Right on the gate's calls, then wrong on every other call: the last timed output and the
    # recheck each see one call (right or wrong by parity); the random call is a third, drawn
    # with a seed the row records. Different lines draw different calls: within a few lines
    # the random check is the one that catches it.
    tags = []
    for attempt in range(24):
        _alt["fn"] = zoo.make_alternating_wrong(honest_calls=GATE_CALLS)
        # The round counts alternate between attempts: a quiet machine stops every run at
        # min_samples, a loaded one at max_samples, and a fixed call count would give the last
        # timed call the same parity in every attempt (if wrong, the last-output check, not the
        # random one, catches it every time).
        (row,) = run_config(CFG, ("test_alternating_wrong",),
                            ctx(line=f"alt{attempt}", min_samples=5 + attempt % 2, max_samples=20 + attempt % 2))
        tags.append(row.payload.get("tag"))
        if row.kind == "incorrect" and row.payload["tag"].startswith("random_call_"):
            assert "chosen at random, seed" in row.payload["reason"]
            break
    else:
        pytest.fail(f"the random timed call never caught it: {tags}")


_skip = {"fn": None}


@kernel("test_timed_unwritten", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def skips_when_timed(q, k, v, out, *, causal, scale):
    _skip["fn"](q, k, v, out, causal=causal, scale=scale)


def test_a_timed_output_left_unwritten_is_tagged_unwritten_not_nonfinite():
    # The timed path poisons with the gate's poison, so an output no timed call wrote reads
    # as the poison, not as a NaN the kernel computed.
    _skip["fn"] = zoo.make_timed_unwritten(honest_calls=GATE_CALLS)
    (row,) = run_config(CFG, ("test_timed_unwritten",), ctx(line="skip"))
    assert row.kind == "incorrect", row.payload
    assert row.payload["tag"] == "timed_unwritten", row.payload["reason"]
    assert "still hold the NaN poison (never written)" in row.payload["reason"]
    n = math.prod(CFG.shapes()[0])
    assert f"{n} of {n} output elements" in row.payload["reason"]


def test_the_timed_check_tells_unwritten_from_a_computed_nan():
    import torch

    from harness.measurement.correctness.poison import poison_

    q, k, v = make_inputs(CFG, 5, "normal", "cpu")
    out = poison_(torch.empty(CFG.shapes()[0]))
    rep = check_timed_output(CFG, (q, k, v), out, workload=ATTENTION, tol=Tolerance(1e-5, 1e-4), label="slot 0")
    assert rep.tag == "unwritten" and rep.figures.n_unwritten == out.numel()
    out.fill_(float("nan"))  # a canonical NaN: computed, not left over
    rep = check_timed_output(CFG, (q, k, v), out, workload=ATTENTION, tol=Tolerance(1e-5, 1e-4), label="slot 0")
    assert rep.tag == "nonfinite" and rep.figures.n_unwritten == 0
    assert rep.reason.startswith("slot 0: output of the last timed call: ")


def test_result_rows_record_which_random_call_each_arm_had_checked():
    (row,) = run_config(CFG, ("sdpa",), ctx())
    t = row.payload["timing"]
    assert set(t["spot_calls"]) == {"candidate:sdpa", ARM_BASELINE, ARM_CONTROL}
    assert isinstance(t["spot_seed"], int)


# ----------------------------------------------------------------------------- empty windows


def stats(*xs) -> Stats:
    return Stats.from_samples(xs)


def test_told_apart_needs_a_factor_and_a_separate_median_ci():
    empty = stats(*[0.0012] * 10)
    assert not told_apart(stats(*[0.0012] * 10), empty)
    assert not told_apart(stats(*[0.0012 * EMPTY_WINDOW_FACTOR] * 10), empty)
    assert told_apart(stats(*[0.0012 * EMPTY_WINDOW_FACTOR * 1.5] * 10), empty)
    assert told_apart(stats(0.5), Stats.from_samples([]))  # nothing measured: the rule cannot apply


def test_the_empty_window_is_timed_through_the_same_timer_path():
    timer = ScriptedTimer({"empty": 0.0011})
    ew = empty_window(TimingPolicy(mode="hot"), "cpu", timer=timer)
    assert ew.stats.median == pytest.approx(0.0011) and ew.stats.n >= 20
    assert {arm for arm, _ in timer.calls} == {"empty"}
    assert ew.as_dict()["factor"] == EMPTY_WINDOW_FACTOR and ew.mode == "hot"


def _arms_timed(cand_ms: float, base_ms: float):
    names = ("candidate:x", ARM_BASELINE, ARM_CONTROL)
    timer = ScriptedTimer({"candidate:x": cand_ms, ARM_BASELINE: base_ms, ARM_CONTROL: base_ms})
    return measure({n: (lambda s: None) for n in names}, n_slots=1, policy=policy(), device="cpu", timer=timer)


def test_an_arm_that_reads_as_an_empty_window_while_the_baseline_does_not_gets_no_result():
    empty = empty_window(policy(), "cpu", timer=ScriptedTimer({"empty": 0.0012}))
    why = empty_failure(_arms_timed(0.0013, 0.050), "candidate:x", empty)
    assert why and "cannot be told apart from an empty window" in why
    assert empty_failure(_arms_timed(0.020, 0.050), "candidate:x", empty) is None  # a real, fast call
    # Both as fast as nothing: nothing tells a real kernel apart here, the rule does not apply.
    assert empty_failure(_arms_timed(0.0013, 0.0012), "candidate:x", empty) is None


def test_result_rows_carry_the_empty_window_they_were_judged_against():
    (row,) = run_config(CFG, ("sdpa",), ctx())
    ew = row.payload["empty_window"]
    assert ew["effective_mode"] == "host" and ew["stats"]["n"] >= 1


# ----------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["cold", "hot", "graph"])
def test_gpu_empty_window_reads_microseconds_and_a_hollow_arm_is_told_from_a_real_one(mode):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pol = TimingPolicy(mode=mode, warmup_ms=50, min_samples=20, max_samples=400, min_time_ms=50,
                       noise_target=0.02, timeout_s=30)
    ew = empty_window(pol, "cuda")
    assert 0 < ew.stats.median < 0.02, ew.as_dict()  # an empty window: µs, not a kernel's time
    if mode == "graph":
        return  # work on a stream outside the capture is not captured at all: nothing to time
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    side = torch.cuda.Stream()

    def hollow(slot):  # issue 16's cheat: the work on a stream the window does not see
        with torch.cuda.stream(side):
            torch.matmul(a, a, out=c)

    arms = {"candidate:x": hollow, ARM_BASELINE: lambda s: torch.matmul(a, a, out=c),
            ARM_CONTROL: lambda s: torch.matmul(a, a, out=c)}
    m = measure(arms, n_slots=1, policy=pol, device="cuda")
    torch.cuda.synchronize()
    why = empty_failure(m, "candidate:x", ew)
    assert why and "empty window" in why, (m.arms["candidate:x"].stats, ew.stats)
    honest = measure({"candidate:x": lambda s: torch.matmul(a, a, out=c), ARM_BASELINE: arms[ARM_BASELINE],
                      ARM_CONTROL: arms[ARM_CONTROL]}, n_slots=1, policy=pol, device="cuda")
    assert empty_failure(honest, "candidate:x", ew) is None


# ----------------------------------------------------------------------------- absolute rates


def test_a_bar_over_absolute_rates_is_told_from_a_bar_over_speedups():
    assert ctx(go="min(tflops where seq_len >= 32) >= 500 and pass_rate == 1.0").rate_bar
    assert ctx(go="max(ms) <= 2.0").rate_bar
    assert not ctx(go="geomean(speedup) >= 1.1").rate_bar


def _rotation():
    calls, prepared = [], []
    return calls, prepared, (lambda s: calls.append(s)), (lambda s: prepared.append(s))


def test_sustain_times_only_after_the_warm_up_and_back_to_back():
    from harness.measurement.timing.sustained import SustainBudget, sustain

    # 20 ms per call during the first 0.2 s of (virtual) time, then 10 ms: the warm-up absorbs
    # the slow start, and only the settled calls are timed.
    timer = ScriptedTimer({"a": lambda k, t: 20.0 if t < 0.2 else 10.0})
    calls, prepared, fn, prep = _rotation()
    sus = sustain("a", fn, n_slots=3, device="cpu", prepare=prep, timer=timer,
                  budget=SustainBudget(warm_s=0.2, timed_s=0.1, min_calls=4))
    assert set(sus.samples) == {10.0} and sus.median_ms == 10.0
    assert len(sus.samples) >= 10  # 0.1 s of 10 ms calls
    assert calls == prepared  # the caller's prepare ran before every call, on its slot
    assert calls == [i % 3 for i in range(len(calls))]  # the input rotation, across warm-up and timing
    assert sus.last_slot == calls[-1]
    assert sus.sm_mhz is None and sus.flush == "none"  # the CPU: no clocks
    row = sus.as_dict()
    assert row["n_calls"] == len(sus.samples) and row["samples_ms"] == list(sus.samples)


def test_sustain_takes_at_least_min_calls_however_slow_the_call():
    from harness.measurement.timing.sustained import SustainBudget, sustain

    calls, prepared, fn, prep = _rotation()
    sus = sustain("a", fn, n_slots=1, device="cpu", timer=ScriptedTimer({"a": 500.0}),
                  budget=SustainBudget(warm_s=0.0, timed_s=0.01, min_calls=7))
    assert len(sus.samples) == 7


def test_sustain_reports_the_clock_and_power_of_the_timed_calls_only():
    from harness.measurement.clocks import ClockMonitor
    from harness.measurement.timing.sustained import SustainBudget, sustain

    # Boost clock and low power while warming (t < 0.5 s), then settled: the row must carry the
    # settled figures, the ones the timed calls ran at.
    src = ScriptedClockSource(lambda t: 1980.0 if t < 0.5 else 1750.0, power=lambda t: 300.0 if t < 0.5 else 690.0,
                              mem=lambda t: 3201.0 if t < 0.5 else 2619.0,
                              reasons=lambda t: ("sw_power_cap",) if t < 0.5 else ("hw_thermal_slowdown",))
    mon = ClockMonitor(src, hz=1000)
    _, _, fn, _ = _rotation()
    sus = sustain("a", fn, n_slots=2, device="cpu", timer=ScriptedTimer({"a": 2.0}), monitor=mon,
                  budget=SustainBudget(warm_s=0.5, timed_s=0.2))
    assert sus.sm_mhz == pytest.approx(1750.0) and sus.power_w == pytest.approx(690.0)
    # the memory clock and the clock-event reasons of the timed calls too: a memory-bound
    # rate read while the HBM clock had dropped says so in its row
    assert sus.mem_mhz == pytest.approx(2619.0) and sus.reasons == ("hw_thermal_slowdown",)
    assert sus.as_dict()["mem_mhz"] == pytest.approx(2619.0) and sus.as_dict()["reasons"] == ["hw_thermal_slowdown"]


def test_a_rate_bar_takes_rates_from_the_sustained_phase_and_speedups_from_the_rounds():
    (row,) = run_config(CFG, ("sdpa",), ctx(go=RATE_BAR))
    assert row.kind == "result", row.payload.get("reason")
    p, met = row.payload, row.payload["metrics"]
    assert p["rate_protocol"] == "sustained"
    sus = p["sustained"]
    assert sus["arm"] == "candidate:sdpa" and sus["n_calls"] >= 10
    assert met["ms"] == sus["median_ms"]
    assert met["tflops"] == pytest.approx(CFG_FLOPS() / (met["ms"] * 1e-3) / 1e12)
    # The speedup is the interleaved rounds' (arms at one clock), not the sustained median's.
    assert met["interleaved_ms"] == p["timing"]["arms"]["candidate:sdpa"]["stats"]["median"]
    (plain,) = run_config(CFG, ("sdpa",), ctx())
    assert plain.payload["rate_protocol"] == "interleaved" and plain.payload["sustained"] is None
    assert plain.payload["metrics"]["ms"] == plain.payload["metrics"]["interleaved_ms"]


def test_only_the_pairs_a_rate_clause_reads_time_the_sustained_phase():
    # The rates a bar judges come from the sustained clock; a pair no rate clause (or rate
    # primary) selects keeps the interleaved rounds' rates, as on a line with no rate bar,
    # and pays no sustained phase (the harness's own cost, issue 32).
    other = dataclasses.replace(CFG, seq_len=48)
    c = ctx(go="min(tflops where seq_len == 32 and candidate == \"sdpa\") >= 0 and pass_rate == 1.0")
    assert c.reg.judges_rates_of(CFG, "sdpa") and not c.reg.judges_rates_of(other, "sdpa")
    assert not c.reg.judges_rates_of(CFG, "torch_stack")
    (judged,) = run_config(CFG, ("sdpa",), c)
    (free,) = run_config(other, ("sdpa",), c)
    assert judged.payload["rate_protocol"] == "sustained" and judged.payload["sustained"] is not None
    assert free.payload["rate_protocol"] == "interleaved" and free.payload["sustained"] is None
    assert free.payload["metrics"]["ms"] == free.payload["metrics"]["interleaved_ms"]
    assert "rates" not in free.payload["cost"]["seconds"] and judged.payload["cost"]["seconds"]["rates"] > 0


def CFG_FLOPS():
    from harness.workloads import formulas

    return formulas.flops(CFG)


_late = {"fn": None}


@kernel("test_wrong_when_looped", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def wrong_when_looped(q, k, v, out, *, causal, scale):
    _late["fn"](q, k, v, out, causal=causal, scale=scale)


def test_a_kernel_that_stops_writing_in_a_long_loop_gets_no_rate():
    # Honest for the gate, the rounds and their checks; then, once its calls come back to back
    # (here: told by the phase report a worker sends its driver), it leaves its output as it
    # was. The sustained phase poisons the output before every call and checks the last one.
    from harness.pipeline import phase

    def lazy_in_a_loop(q, k, v, out, *, causal, scale):
        if phase.current()[1] != phase.RATES:
            out.copy_(zoo.attention(q, k, v, causal=causal, scale=scale))

    _late["fn"] = lazy_in_a_loop
    (row,) = run_config(CFG, ("test_wrong_when_looped",), ctx(go=RATE_BAR))
    assert row.kind == "incorrect" and row.payload["tag"].startswith("sustained_"), row.payload.get("reason")
    assert "back to back" in row.payload["reason"]
