"""Stop criteria (timing/criteria.py): the statistic stop keeps its error rate and stops early
where a common clock swing dominates; the noise stop is the protocol it always was.

The simulation plants a 1.00× pair: baseline, candidate and control drawn from one
distribution, every round's calls scaled by one random clock factor (lognormal, 5%: the
H200's 1755–1965 MHz at its power limit, docs/benchmarks-log.md 2026-12-04) and each call's
own heavy-tailed jitter (Student t, 3 degrees of freedom). The stop is the real one:
``criterion.stop`` round by round (N = 2000 measurements), and ``measure`` itself through the
scripted timer.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.registration import bar as barlang
from harness.measurement.clocks import ClockMonitor
from harness.measurement.stats import paired_ratio
from harness.measurement.timing import (
    ARM_BASELINE, ARM_CANDIDATE, ARM_CONTROL, NoiseStop, Progress, StatisticStop, TimingPolicy, bar_pairs,
    criterion_for, look_confidence, looks, measure)
from tests.timers import ScriptedClockSource, ScriptedTimer

ARMS = (ARM_BASELINE, ARM_CANDIDATE, ARM_CONTROL)
BASE_MS = 0.1
SWING = 0.05     # the common per-round clock factor's log-sd
JITTER = 0.004   # each call's own jitter (× a t(3) draw: sd 0.7%, heavy tails)
BAR = "min(speedup) >= 1.02"
N_SIM = 2000
# The registered policy: bench's defaults (20 to 2000 rounds: 7 looks + the end, K = 8).
POLICY = TimingPolicy(stop="statistic", min_time_ms=0.0, timeout_s=1e5)


def rounds_of(rng, n: int, speedup: float = 1.0, swing: float = SWING) -> dict:
    """n rounds of every arm's samples: a common clock factor per round and each call's jitter;
    the candidate ``speedup`` times faster than the baseline and control."""
    common = BASE_MS * np.exp(swing * rng.standard_normal(n))
    return {a: common * np.exp(JITTER * rng.standard_t(3, n)) / (speedup if a == ARM_CANDIDATE else 1.0)
            for a in ARMS}


def stopped(criterion, data: dict) -> tuple[str, int]:
    """(stop reason, rounds) of ``criterion`` asked after every round of ``data`` (nothing
    dropped, no content check, no time floor), as measure asks it."""
    n_max = len(data[ARM_BASELINE])
    for r in range(1, n_max + 1):
        why = criterion.stop(Progress(data, range(r), judged=r, rounds=r, counted=r, pending=False,
                                      min_time_met=True, timed_out=False))
        if why:
            return why, r
    raise AssertionError("the fixed maximum never stopped the rounds")


def simulate(seed: int, speedup: float = 1.0, policy: TimingPolicy = POLICY):
    """One measurement through the statistic stop: (its record, rounds run)."""
    rng = np.random.default_rng(seed)
    data = rounds_of(rng, policy.max_samples, speedup)
    crit = criterion_for(policy, ARMS)
    why, r = stopped(crit, data)
    return crit.record({a: data[a][:r] for a in ARMS}, why), r


def declared(speedup: float) -> bool:
    """The bar's decision on a one-row line: ``min(speedup) >= 1.02`` reads the row's speedup
    (the point figure, not its CI), as a verdict does."""
    return barlang.evaluate(barlang.parse(BAR), [{"candidate": "k", "correct": True, "speedup": speedup}]).passed


def sweep_sim(n: int = N_SIM, speedup: float = 1.0) -> dict:
    """The figures of ``n`` simulated measurements (seeds 0..n-1)."""
    out = {"declared": 0, "lo_over": 0, "missed": 0, "missed_control": 0, "rounds": [], "reasons": set()}
    for seed in range(n):
        rec, r = simulate(seed, speedup)
        sp, ctl = rec.quantities
        assert (sp.numerator, sp.denominator) == (ARM_BASELINE, ARM_CANDIDATE)
        out["declared"] += declared(sp.ratio)
        out["lo_over"] += sp.lo >= 1.02
        out["missed"] += not sp.lo <= speedup <= sp.hi
        out["missed_control"] += not ctl.lo <= 1.0 <= ctl.hi
        out["rounds"].append(r)
        out["reasons"].add(rec.n if rec.reached else None)
    return out


# -- the registered statistic keeps its error rate -----------------------------------------------
def test_a_planted_equal_pair_is_declared_faster_no_more_often_than_alpha():
    """N = 2000 measurements of a 1.00× pair under a 5% common clock swing: the bar's
    ``min(speedup) >= 1.02`` passes (and the CI's lower bound clears 1.02) no more often than
    alpha, and the reported interval misses the true ratio 1.00 no more often than alpha
    (observed with these seeds: never declared, 0.2% missed)."""
    s = sweep_sim()
    alpha = POLICY.alpha
    assert s["declared"] / N_SIM <= alpha and s["lo_over"] / N_SIM <= alpha, s
    assert s["missed"] / N_SIM <= alpha and s["missed_control"] / N_SIM <= alpha, s
    # Every stop was for precision, at a look of the schedule (the guarantee's premise).
    assert s["reasons"] <= set(looks(POLICY.min_samples, POLICY.max_samples)), s["reasons"]


def test_a_real_speedup_is_still_found():
    """The stop is not blind: a planted 1.03× candidate clears the 1.02 bar in nearly every
    measurement (the interval is within ±0.5% when it stops)."""
    s = sweep_sim(200, speedup=1.03)
    assert s["declared"] >= 0.95 * 200 and s["missed"] / 200 <= POLICY.alpha, s


def test_the_look_confidence_is_bonferroni_over_the_looks_and_the_end():
    crit = criterion_for(POLICY, ARMS)
    assert crit.looks == (20, 40, 80, 160, 320, 640, 1280)
    assert crit.confidence == look_confidence(0.05, 7) == 1 - 0.05 / 8
    assert crit.pairs == ((ARM_BASELINE, ARM_CANDIDATE), (ARM_BASELINE, ARM_CONTROL))


# -- fewer rounds where a common clock swing dominates ----------------------------------------
def test_through_measure_the_statistic_stop_needs_far_fewer_rounds_than_the_noise_stop():
    """The same scripted rounds (a 5% common swing, 0.7% own jitter) through ``measure``: the
    noise stop waits for each arm's median (the swing stays in it) — hundreds of rounds — where
    the paired ratios cancel the swing and stop at an early look."""
    def durations(seed):
        data = rounds_of(np.random.default_rng(seed), 20_000)  # warm-up included: indexed by call count
        return {a: (lambda x: lambda k, t: float(x[k]))(data[a]) for a in ARMS}

    runs = {}
    for stop in ("noise", "statistic"):
        pol = TimingPolicy(warmup_ms=1.0, min_time_ms=0.0, timeout_s=1e5, stop=stop)
        runs[stop] = [measure({a: (lambda s: None) for a in ARMS}, n_slots=1, policy=pol, device="cpu",
                              timer=ScriptedTimer(durations(seed))) for seed in range(3)]
    noise = [len(m.rounds) for m in runs["noise"]]
    stat = [len(m.rounds) for m in runs["statistic"]]
    assert all(m.stop_reason == "noise_target" for m in runs["noise"])
    assert all(m.stop_reason == "precision" and m.stop.reached for m in runs["statistic"])
    assert max(stat) * 4 <= min(noise), (stat, noise)
    for m in runs["statistic"]:  # the per-arm noise stays a reported figure, far from its old target
        assert all(a.stats.rel_noise > m.policy.noise_target for a in m.arms.values())


def test_through_measure_the_row_reports_the_interval_the_stop_used():
    """measure() under the statistic stop: its reason, the look its record names, and the row's
    speedup, CI and control are the stop's paired figures over the look's rounds."""
    rng = np.random.default_rng(7)
    data = rounds_of(rng, 20_000)
    timer = ScriptedTimer({a: (lambda x: lambda k, t: float(x[k]))(data[a]) for a in ARMS})
    m = measure({a: (lambda s: None) for a in ARMS}, n_slots=1, policy=TimingPolicy(
        warmup_ms=1.0, min_time_ms=0.0, timeout_s=1e5, stop="statistic"), device="cpu", timer=timer)
    assert m.stop_reason == "precision" and m.stop.n in looks(20, 2000) and m.stop.n == len(m.rounds)
    b, c, k = (m.arms[a].samples for a in ARMS)
    sp, ctl = m.stop.quantities
    assert m.speedup() == paired_ratio(b, c, m.stop.confidence) == (sp.ratio, sp.lo, sp.hi)
    assert m.control_ratio == paired_ratio(b, k)[0] == ctl.ratio
    assert sp.half_width <= 0.005 and ctl.half_width <= 0.005 and sp.lo <= 1.0 <= sp.hi
    # One look too early, some quantity was still wider than the precision.
    earlier = [q for n, q in m.stop.taken if n < m.stop.n]
    assert earlier and earlier[-1] > 0.005
    row = json.loads(json.dumps(m.to_row()))
    assert row["stop"]["n"] == m.stop.n and row["stop"]["k"] == 8 and row["stop"]["reached"] is True
    assert row["policy"]["stop"] == "statistic" and row["policy"]["precision"] == 0.005
    assert row["stop_reason"] == "precision"


def test_through_measure_a_planted_pair_is_never_declared_faster():
    """40 measurements through measure() itself: none declared ≥ 1.02, every interval covering
    1.00 (the full N = 2000 run drives the same criterion directly)."""
    pol = TimingPolicy(warmup_ms=1.0, min_time_ms=0.0, timeout_s=1e5, stop="statistic")
    for seed in range(100, 140):
        data = rounds_of(np.random.default_rng(seed), 20_000)
        m = measure({a: (lambda s: None) for a in ARMS}, n_slots=1, policy=pol, device="cpu",
                    timer=ScriptedTimer({a: (lambda x: lambda k, t: float(x[k]))(data[a]) for a in ARMS}))
        ratio, lo, hi = m.speedup()
        assert m.stop_reason == "precision" and not declared(ratio) and lo <= 1.0 <= hi, (seed, m.speedup())


def test_the_look_takes_only_rounds_whose_clocks_are_judged():
    """On a monitored device a round's drop is final only once a reading after it exists: a look
    takes the first n kept rounds among the judged ones. Rounds unjudged at the stop and then
    dropped (a throttled reading right after it) change neither the look nor the row's figures."""
    data = rounds_of(np.random.default_rng(3), 20_000)
    load = 1980.0

    def run(sm):
        # 0.05 ms calls: 0.15 ms rounds against a reading every 5 ms, ~30 rounds at a time unjudged.
        # The look at 40 rounds is met at 10 ms; min_time_ms holds the stop back to the middle
        # of a reading interval, where the rounds since the last reading have none of their own.
        timer = ScriptedTimer({a: (lambda x: lambda k, t: 0.5 * float(x[k]))(data[a]) for a in ARMS})
        pol = TimingPolicy(warmup_ms=30.0, min_time_ms=12.5, timeout_s=1e5, stop="statistic", max_drop_fraction=0.9)
        return measure({a: (lambda s: None) for a in ARMS}, n_slots=1, policy=pol, device="cpu", timer=timer,
                       monitor=ClockMonitor(ScriptedClockSource(sm), hz=200))

    clean = run(lambda t: load)
    assert clean.stop_reason == "precision" and not any(r.dropped for r in clean.rounds)
    assert len(clean.rounds) > clean.stop.n  # rounds still unjudged at the stop, kept after it
    last_read = math.floor(clean.rounds[-1].t1 * 200) / 200  # the last reading before the stop
    late = run(lambda t: 1500.0 if t > last_read + 1e-9 else load)  # the same run until then
    dropped = [r.index for r in late.rounds if r.dropped]
    assert len(dropped) > 10 and min(dropped) >= clean.stop.n and len(late.rounds) == len(clean.rounds)
    assert late.stop == clean.stop and late.speedup() == clean.speedup() == paired_ratio(
        clean.arms[ARM_BASELINE].samples[:clean.stop.n], clean.arms[ARM_CANDIDATE].samples[:clean.stop.n],
        clean.stop.confidence)


# -- the criteria themselves --------------------------------------------------------------------
def test_the_noise_stop_is_the_old_rule_and_its_rows_read_as_before():
    pol = TimingPolicy(min_samples=6, min_time_ms=0.0)
    crit = criterion_for(pol, ("a", "b"))
    assert isinstance(crit, NoiseStop)
    assert "stop" not in pol.as_dict() and "precision" not in pol.as_dict() and "alpha" not in pol.as_dict()
    m = measure({"a": lambda s: None, "b": lambda s: None}, n_slots=1, policy=pol, device="cpu",
                timer=ScriptedTimer({"a": 1.0, "b": 2.0}))
    assert m.stop_reason == "noise_target" and len(m.rounds) == 6 and m.stop is None
    assert "stop" not in m.to_row() and m.speedup("a", "b")[0] == 2.0


@pytest.mark.parametrize("kw, reason", [
    (dict(counted=40), "max_samples"),                                  # max_samples rounds
    (dict(counted=40, pending=True), None),                             # the content check's extra rounds
    (dict(counted=40 + 40, pending=True), "max_samples"),
    (dict(timed_out=True), "timeout"),
])
def test_both_criteria_share_the_fixed_maximum(kw, reason):
    data = rounds_of(np.random.default_rng(0), 200, swing=0.3)  # too noisy for either target
    base = dict(judged=40, rounds=40, counted=39, pending=False, min_time_met=True, timed_out=False)
    for stop in ("noise", "statistic"):
        pol = TimingPolicy(min_samples=20, max_samples=40, stop=stop)
        assert criterion_for(pol, ARMS).stop(Progress(data, range(40), **{**base, **kw})) == reason


def test_a_look_waits_for_min_time_and_the_content_check():
    data = rounds_of(np.random.default_rng(1), 200, swing=0.0)
    crit = criterion_for(TimingPolicy(min_samples=20, max_samples=2000, stop="statistic", precision=0.05), ARMS)
    p = dict(judged=20, rounds=20, counted=20, pending=False, min_time_met=True, timed_out=False)
    assert crit.stop(Progress(data, range(20), **{**p, "min_time_met": False})) is None
    assert crit.stop(Progress(data, range(20), **{**p, "pending": True})) is None
    assert crit.stop(Progress(data, range(20), **{**p, "judged": 19})) is None  # round 19's clocks not judged
    assert crit.stop(Progress(data, range(20), **p)) == "precision" and crit.stopped_at == 20


def test_bar_pairs_name_every_quantity_and_refuse_a_config_without_a_baseline():
    names = (ARM_BASELINE, "candidate:a", "candidate:b", ARM_CONTROL)
    assert bar_pairs(names, [("candidate:a", "candidate:b")]) == (
        (ARM_BASELINE, "candidate:a"), (ARM_BASELINE, "candidate:b"), (ARM_BASELINE, ARM_CONTROL),
        ("candidate:a", "candidate:b"))
    with pytest.raises(ValueError, match="baseline"):
        bar_pairs(("candidate:a",))
    with pytest.raises(ValueError, match="not timed"):
        bar_pairs(names, [("candidate:z", "candidate:a")])
    with pytest.raises(ValueError, match="statistic"):
        StatisticStop(TimingPolicy(), bar_pairs(names))


def test_a_stop_at_the_end_reports_every_kept_round_at_the_look_confidence():
    data = rounds_of(np.random.default_rng(2), 40, swing=0.3)
    crit = criterion_for(TimingPolicy(min_samples=10, max_samples=40, stop="statistic", precision=1e-4), ARMS)
    why, r = stopped(crit, data)
    rec = crit.record({a: data[a][:r] for a in ARMS}, why)
    assert why == "max_samples" and rec.n == 40 and not rec.reached
    assert rec.confidence == 1 - 0.05 / 3 and [n for n, _ in rec.taken] == [10, 20]
    sp = rec.quantities[0]
    assert (sp.ratio, sp.lo, sp.hi) == paired_ratio(data[ARM_BASELINE], data[ARM_CANDIDATE], rec.confidence)
    assert math.isfinite(sp.half_width) and sp.half_width > 1e-4


# -- a sweep's rows under the statistic stop ------------------------------------------------------
@pytest.fixture(scope="module")
def stat_rows():
    """A real CPU sweep of one config under the statistic stop: two candidates, a bar clause on
    one against the other (a peer quantity), the content check and the recheck as always."""
    from harness.pipeline.run import run_config
    from harness.workloads import Config
    from tests.conftest import sweep_context

    ctx = sweep_context(line="stat", schema=6, candidates=("sdpa", "sdpa_math"),
                        go='min(speedup vs "sdpa_math" where candidate == "sdpa") >= 0.01 and pass_rate == 1.0',
                        timing={"warmup_ms": 1, "min_samples": 10, "max_samples": 40, "min_time_ms": 1,
                                "timeout_s": 60, "stop": "statistic", "precision": 0.5})
    rows = run_config(Config("attention", 1, 2, 2, 32, 16, "float32", False), ("sdpa", "sdpa_math"), ctx)
    assert [r.kind for r in rows] == ["result"] * 2, [r.payload.get("reason") for r in rows]
    return {r.payload["candidate"]: {"kind": r.kind, **r.payload} for r in rows}


def test_a_sweep_row_carries_the_stops_quantities_and_its_figures_are_theirs(stat_rows):
    from harness.ledger.rows import load
    from harness.governance.peers import speedup_vs

    row = stat_rows["sdpa"]
    stop, t = row["timing"]["stop"], row["timing"]
    pairs = [(q["numerator"], q["denominator"]) for q in stop["quantities"]]
    assert pairs == [(ARM_BASELINE, "candidate:sdpa"), (ARM_BASELINE, "candidate:sdpa_math"),
                     (ARM_BASELINE, ARM_CONTROL), ("candidate:sdpa_math", "candidate:sdpa")]
    assert row["policy"]["stop"] == "statistic" and stop["k"] == 3 and stop["looks"] == [10, 20]
    assert t["stop_reason"] in ("precision", "max_samples", "timeout")
    sp, other, ctl, peer = stop["quantities"]
    assert (row["metrics"]["speedup"], row["metrics"]["speedup_ci_low"], row["metrics"]["speedup_ci_high"]) == (
        sp["ratio"], sp["lo"], sp["hi"])
    assert row["metrics"]["control"] == t["control_ratio"] == ctl["ratio"]
    assert stat_rows["sdpa_math"]["timing"]["stop"] == stop  # one measurement, one stop
    assert speedup_vs(load(row), "sdpa_math") == peer["ratio"]


def test_a_statistic_row_adds_up_and_an_edit_is_named(stat_rows):
    import copy

    from harness.ledger.audit import recompute
    from harness.ledger.rows import load

    row = stat_rows["sdpa"]
    assert recompute(load(row)) == [] and recompute(load(stat_rows["sdpa_math"])) == []
    n = row["timing"]["stop"]["n"]
    for path, value, named in (
            ("metrics.speedup", lambda v: v * 1.01, ["metrics.speedup"]),
            ("metrics.speedup_ci_low", lambda v: v * 1.01, ["metrics.speedup_ci_low"]),
            ("metrics.control", lambda v: v * 1.01, ["metrics.control"]),
            ("timing.stop.quantities.3.ratio", lambda v: v * 1.01, ["timing.stop.quantities.3.ratio"]),
            ("timing.stop.confidence", 0.95, ["timing.stop.confidence"]),
            ("timing.stop.reached", lambda v: not v, ["timing.stop.reached"])):
        forged = copy.deepcopy(row)
        where = forged
        *head, last = path.split(".")
        for k in head:
            where = where[int(k)] if isinstance(where, list) else where[k]
        where[last] = value(where[last]) if callable(value) else value
        assert [d.field for d in recompute(load(forged))] == named, path
    # Another n: the figures and the quantities move with it, and n itself is not one the rule gives.
    forged = copy.deepcopy(row)
    forged["timing"]["stop"]["n"] = 7 if n != 7 else 8
    found = [d.field for d in recompute(load(forged))]
    assert "timing.stop.n" in found and "metrics.speedup" in found, found
    forged["timing"]["stop"].pop("n")
    assert [d.field for d in recompute(load(forged))] == ["timing.stop"]
