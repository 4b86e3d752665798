"""Issue 25, item 1: inputs that change between timed calls. New content at random measured
rounds (in place, or in fresh buffers), outputs checked against the content they came from,
and the one-sided judgement of an arm whose first-seen calls are slower than its seen ones."""

from __future__ import annotations

import time

from harness.measurement.timing import CallHooks, TimingPolicy, measure
from harness.measurement.timing.criteria import REFRESH_EXTRA_ROUNDS
from harness.measurement.timing.refresh import (FRESH_BUFFERS, IN_PLACE, MIN_FRESH_CALLS, REMEMBERS_TAG, SHAM,
                                                judge_input_memory)
from harness import kernel
from harness.pipeline.run import run_config
from harness.workloads import Config
from tests import zoo
from tests.conftest import sweep_context
from tests.timers import ScriptedTimer

CFG = Config("attention", 1, 2, 2, 32, 16, "float32", False)
# Large enough that attention costs several times the remembering kernel's fingerprint on a CPU.
BIG = Config("attention", 1, 2, 2, 128, 32, "float32", False)


def policy(**kw) -> TimingPolicy:
    return TimingPolicy(**{**dict(warmup_ms=1.0, min_samples=5, max_samples=80, min_time_ms=0.0, noise_target=0.5,
                                  timeout_s=1e5), **kw})


def ctx(line, **timing):
    return sweep_context(line=line, timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 20, "min_time_ms": 1,
                                            "timeout_s": 10, **timing})


def test_an_arm_slower_on_content_it_has_not_seen_is_judged_to_remember_and_an_even_one_is_not():
    content = [0, 0]          # per slot: which content it holds (the refresh hook bumps it)
    seen, state = set(), {"hit": False}

    def refresh(slot, seed, how):
        if how != SHAM:
            content[slot] = seed

    def remembering(slot):   # its time depends on whether it has seen the content (the timer reads it)
        state["hit"] = (slot, content[slot]) in seen
        seen.add((slot, content[slot]))

    timer = ScriptedTimer({"mem": lambda k, t: 0.3 if state["hit"] else 1.0, "even": 1.0})
    m = measure({"mem": remembering, "even": lambda s: None}, n_slots=2, policy=policy(), device="cpu", timer=timer,
                hooks=CallHooks(refresh=refresh, refresh_seed=11))
    mem, even = m.refresh.memory["mem"], m.refresh.memory["even"]
    assert mem.judged and mem.remembers and mem.n_fresh >= MIN_FRESH_CALLS, mem
    assert "Mann-Whitney" in mem.reason and f"median of {mem.n_fresh}" in mem.reason
    assert even.judged and not even.remembers and even.reason is None
    row = m.to_row()["refresh"]
    assert {r["how"] for r in row["refreshes"]} == {IN_PLACE, FRESH_BUFFERS} and row["shams"]
    assert row["memory"]["mem"]["remembers"] and row["memory"]["mem"]["p_value"] < row["memory"]["mem"]["alpha"]
    # Reproducible from the seed, not fixed: another seed refreshes other rounds.
    again = measure({"mem": lambda s: None, "even": lambda s: None}, n_slots=2, policy=policy(), device="cpu",
                    timer=ScriptedTimer({"mem": 1.0, "even": 1.0}),
                    hooks=CallHooks(refresh=lambda *a: None, refresh_seed=11))
    def planned(x):
        return sorted({r["round"] for r in x.refresh.refreshes if r["round"] < x.refresh.span})

    assert planned(again) == planned(m)
    other = measure({"mem": lambda s: None}, n_slots=1, policy=policy(), device="cpu",
                    timer=ScriptedTimer({"mem": 1.0}), hooks=CallHooks(refresh=lambda *a: None, refresh_seed=12))
    assert planned(other) != planned(m)


def calls(times, rounds=None):
    """(round, ms) pairs: ``times`` at ``rounds`` (default 0, 1, ...)."""
    return list(zip(rounds if rounds is not None else range(len(times)), times))


def test_too_few_calls_cannot_be_judged_and_faster_first_calls_never_flag():
    j = judge_input_memory(calls([2.0] * (MIN_FRESH_CALLS - 1)), calls([1.0] * 20))
    assert not j.judged and not j.remembers and "could not be judged" in j.reason
    # one-sided: faster is never memory
    assert not judge_input_memory(calls([0.5] * 10), calls([1.0, 1.1] * 10)).remembers
    # A timeout before the judgement has its calls: measured, but not judged (the sweep gives no
    # number). max_samples alone does not cut it short: the content check may run
    # REFRESH_EXTRA_ROUNDS past it, every one refreshed or shammed, so the judgement is made.
    m = measure({"a": lambda s: None}, n_slots=1, policy=policy(max_samples=8, timeout_s=0.012), device="cpu",
                timer=ScriptedTimer({"a": 1.0}), hooks=CallHooks(refresh=lambda *a: None))
    assert not m.refresh.memory["a"].judged and m.stop_reason == "timeout"
    m = measure({"a": lambda s: None}, n_slots=1, policy=policy(max_samples=8), device="cpu",
                timer=ScriptedTimer({"a": 1.0}), hooks=CallHooks(refresh=lambda *a: None))
    assert m.refresh.memory["a"].judged and len(m.rounds) <= 8 + REFRESH_EXTRA_ROUNDS


def test_an_honest_arm_is_not_read_as_remembering_when_the_load_changes_during_the_catch_up():
    """The span's rounds are lost (their calls waited on a run queue: dropped), so every first-seen
    and seen call comes from the catch-up rounds past it; the host's load halves during them.
    Refreshes alone until the first-seen calls suffice, then shams alone, put every first-seen
    call under the load and every seen one after it: 2.0× even against the nearest seen calls
    (the CI's 2-core host read an honest baseline so). Shams among the refreshes keep seen calls
    near each first-seen one: no arm is read as remembering, and every arm is judged."""
    names = ("a", "b", "c")
    for seed in range(4):
        for cut in range(20, 36, 3):   # the call from which the load is gone, across the catch-up
            timer = ScriptedTimer({n: (lambda k, t, cut=cut: 2.0 if k < cut else 1.0) for n in names},
                                  waits={n: (lambda k, t: 0.5 if k < 14 else 0.0) for n in names})
            m = measure({n: (lambda s: None) for n in names}, n_slots=1, policy=policy(max_samples=12),
                        device="cpu", timer=timer, hooks=CallHooks(refresh=lambda *a: None, refresh_seed=seed))
            span = m.refresh.span
            assert all(r.dropped for r in m.rounds if r.index < span), (seed, cut)
            catch_up = {r["round"] for r in m.refresh.refreshes if r["round"] >= span}
            shams = {r["round"] for r in m.refresh.shams if r["round"] >= span and "before" not in r}
            assert shams and min(shams) < max(catch_up), (seed, cut, sorted(catch_up), sorted(shams))
            for n, j in m.refresh.memory.items():
                assert j.judged and not j.remembers, (seed, cut, n, j)


def test_every_judged_first_seen_call_follows_an_input_generation_as_a_seen_call_after_a_sham_does():
    """On a loaded host a call right after an input generation ran faster than one with no work
    before it (the CI's 2-core host, every core busy). One refresh serves a round on one slot,
    so the later arms' first-seen calls had no generation before them while every seen call
    compared had a sham's: an honest arm read as remembering. Each later arm now gets a sham
    right before its first-seen call; an arm that does remember is still caught."""
    names = ("a", "b", "c")
    state = {"after_draw": False}

    def refresh(slot, seed, how):
        state["after_draw"] = True

    def honest(k, t):      # faster right after a generation (the loaded host), else no difference
        fast, state["after_draw"] = state["after_draw"], False
        return 1.0 if fast else 2.0

    for seed in range(3):
        m = measure({n: (lambda s: None) for n in names}, n_slots=1, policy=policy(), device="cpu",
                    timer=ScriptedTimer({n: honest for n in names}),
                    hooks=CallHooks(refresh=refresh, refresh_seed=seed))
        rec = m.refresh
        work = {(r["round"], r["arm"]) for r in (*rec.refreshes, *rec.shams)}
        for n in names:
            assert rec.fresh_rounds[n] and all((i, n) in work for i in rec.fresh_rounds[n]), (seed, n)
            assert rec.memory[n].judged and not rec.memory[n].remembers, (seed, n, rec.memory[n])
        assert any(s.get("before") == "first_seen" for s in rec.shams), seed

    seen: set = set()
    content = {"v": 0}

    def refresh_content(slot, seed, how):
        state["after_draw"] = True
        if how != SHAM:
            content["v"] = seed

    def remembering(k, t):  # 2.8× slower on content it has not seen, whatever ran before
        state["after_draw"] = False
        new = content["v"] not in seen
        seen.add(content["v"])
        return 2.8 if new else 1.0

    m = measure({n: (lambda s: None) for n in names}, n_slots=1, policy=policy(), device="cpu",
                timer=ScriptedTimer({"a": remembering, "b": honest, "c": honest}),
                hooks=CallHooks(refresh=refresh_content, refresh_seed=5))
    assert m.refresh.memory["a"].remembers and not m.refresh.memory["b"].remembers


def test_the_refresh_runs_outside_the_timed_window_after_the_leads_and_before_prepare():
    from harness.measurement.timing.timers import HostTimer

    log = []

    def refresh(slot, seed, how):
        log.append(("refresh", slot))
        time.sleep(0.01)    # far longer than any call: inside a window it would show

    arms = {n: (lambda s, n=n: log.append(("call", n, s))) for n in ("a", "b")}
    prep = {n: (lambda s, n=n: log.append(("prepare", n, s))) for n in ("a", "b")}
    m = measure(arms, n_slots=1, policy=policy(mode="hot", lead_calls=1), device="cpu", timer=HostTimer(),
                hooks=CallHooks(prepare=prep, refresh=refresh))
    assert len(m.refresh.refreshes) + len(m.refresh.shams) >= 2 * MIN_FRESH_CALLS
    assert max(max(a.samples) for a in m.arms.values()) < 5.0  # ms: no 10 ms refresh in any sample
    for i, e in enumerate(log):
        if e[0] == "refresh":   # after a lead call, then prepare, then the timed call
            assert log[i - 1][0] == "call" and log[i + 1][0] == "prepare" and log[i + 2][0] == "call"


def test_arms_on_one_slot_keep_the_same_refreshed_calls_each_chosen_uniformly_over_its_own():
    """The kept refreshed call of each (arm, kind) is a reservoir draw over that arm's refreshed
    calls of the kind, with one uniform per round shared by the arms (issue 32): on one slot
    every arm keeps the same rounds (one content, one float64 reference after timing), and the
    replay of the draws, arm by arm, chooses what was kept."""
    import random

    names = ("a", "b", "c")
    kinds_seen = set()
    for seed in range(8):
        kept: dict = {}
        m = measure({n: (lambda s: None) for n in names}, n_slots=1, policy=policy(max_samples=60), device="cpu",
                    timer=ScriptedTimer({n: 1.0 for n in names}), hooks=CallHooks(
                        refresh=lambda *a: None, refresh_seed=seed,
                        keep_refreshed={n: (lambda slot, how, n=n: kept.setdefault(n, {}).__setitem__(how, slot))
                                        for n in names}))
        checks = m.refresh.checks
        assert set(checks) == set(names) and set(kept) == set(names), seed
        for how in (IN_PLACE, FRESH_BUFFERS):
            picked = {n: (checks[n][how]["round"], checks[n][how]["version"]) for n in names if how in checks[n]}
            if picked:
                kinds_seen.add(how)
                assert len(set(picked.values())) == 1 and len(picked) == len(names), (seed, how, picked)
        # Replay: per measured round with a refresh of kind `how`, one uniform; each arm's k-th
        # refreshed call of that kind replaces its choice when u·k < 1.
        rng, k, expect = random.Random(seed + 1), {}, {}
        by_round = {r["round"]: r["how"] for r in m.refresh.refreshes}
        for r in range(len(m.rounds)):  # measured rounds, as the refreshes number them
            how = by_round.get(r)
            if how is None:
                continue
            u = rng.random()
            for n in names:
                k[(n, how)] = k.get((n, how), 0) + 1
                if u * k[(n, how)] < 1.0:
                    expect.setdefault(n, {})[how] = r
        assert {n: {h: c["round"] for h, c in checks[n].items()} for n in names} == expect, seed
    assert kinds_seen == {IN_PLACE, FRESH_BUFFERS}


def test_the_checks_after_timing_compute_one_float64_reference_per_content(monkeypatch):
    """Issue 32: the arms' checked calls (each arm's random call, its kept refreshed calls, the
    timed outputs, the sustained and recheck outputs) share their contents on one slot, and
    each content's float64 reference is computed once for all of them (the gate's are its own)."""
    import traceback

    from harness.measurement.correctness import checks as checks_mod

    from harness.workloads import inputs as inputs_mod

    made: list[tuple] = []
    drawn: list = []
    real, real_draw = checks_mod.timed_reference, inputs_mod.make_inputs

    def counted(inputs, cfg, wl):
        if any(f.name == "check_after_timing" for f in traceback.extract_stack()):
            made.append(tuple(checks_mod.checksum(t) for t in inputs))
        return real(inputs, cfg, wl)

    def counted_draw(cfg, seed, family="normal", device="cpu"):
        if any(f.name == "check_after_timing" for f in traceback.extract_stack()):
            drawn.append(seed)
        return real_draw(cfg, seed, family, device)

    monkeypatch.setattr(checks_mod, "timed_reference", counted)
    monkeypatch.setattr(inputs_mod, "make_inputs", counted_draw)
    cands = ("sdpa", "sdpa_math")
    rows = run_config(CFG, cands, sweep_context(line="shared-refs", candidates=cands, timing={
        "warmup_ms": 1, "min_samples": 5, "max_samples": 60, "min_time_ms": 1, "timeout_s": 30, "noise_target": 0.9}))
    assert [r.kind for r in rows] == ["result"] * 2, [r.payload.get("reason") for r in rows]
    t = rows[0].payload["timing"]
    assert t["n_slots"] == 1
    spot = {(c["slot"], c["version"]) for c in t["spot_calls"].values()}
    kept = {how: {(c["slot"], c["version"]) for a in t["refresh"]["checks"].values() for h, c in a.items() if h == how}
            for how in ("in_place", "fresh_buffers")}
    assert len(spot) == 1 and all(len(v) == 1 for v in kept.values()), (spot, kept)
    # Contents: the random calls' one, the kept calls' two, the slot's current one, the
    # recheck's: at most five, each computed once (one may be computed again: two are kept).
    # Before issue 32's change each arm drew its own calls: up to 4 + 8 + 1 + 1 here.
    current = (0, t["refresh"]["last_versions"]["baseline"][0])
    contents = spot | kept["in_place"] | kept["fresh_buffers"] | {current}
    assert len(set(made)) == len(contents) + 1 and len(made) - len(set(made)) <= 1, (made, contents)
    # An earlier content is drawn again once for all the arms judged on it (the current one
    # is the slot itself; the recheck writes its own into the timed buffers in place).
    assert len(drawn) == len(contents - {current}) == len(set(drawn)), (drawn, contents)


_rem = {"fn": None}


@kernel("test_refresh_remembers", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def remembers(q, k, v, out, *, causal, scale):
    _rem["fn"](q, k, v, out, causal=causal, scale=scale)


def test_a_kernel_that_remembers_its_inputs_is_incorrect_and_an_honest_one_gets_a_result():
    _rem["fn"] = zoo.make_remembers_inputs()
    rows = run_config(BIG, ("test_refresh_remembers", "sdpa"), ctx("remember", min_samples=20, max_samples=40))
    by = {r.payload["candidate"]: r for r in rows}
    bad, good = by["test_refresh_remembers"], by["sdpa"]
    assert bad.kind == "incorrect" and bad.payload["tag"] == REMEMBERS_TAG, bad.payload.get("reason")
    assert "first calls on new content" in bad.payload["reason"] and "p = " in bad.payload["reason"]
    mem = bad.payload["timing"]["refresh"]["memory"]["candidate:test_refresh_remembers"]
    assert mem["remembers"] and mem["fresh_median_ms"] > 1.25 * mem["seen_median_ms"]
    assert len(_rem["fn"].cache) > 1  # it computed honestly on every new content
    assert good.kind == "result", good.payload.get("reason")
    assert not good.payload["timing"]["refresh"]["memory"]["candidate:sdpa"]["remembers"]


_ptr = {"fn": None}


@kernel("test_refresh_by_pointer", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def by_pointer(q, k, v, out, *, causal, scale):
    _ptr["fn"](q, k, v, out, causal=causal, scale=scale)


def test_a_kernel_keyed_by_address_answers_stale_on_content_rewritten_in_place():
    _ptr["fn"] = zoo.make_cached_by_pointer()
    (row,) = run_config(CFG, ("test_refresh_by_pointer",), ctx("ptr"))
    assert row.kind == "incorrect", row.payload
    assert row.payload["tag"] in ("refreshed_stale_mismatch", "timed_stale_mismatch"), row.payload["reason"]
    assert "rewritten in place" in row.payload["reason"]


def test_honest_arms_on_several_slots_are_checked_against_the_content_they_ran_on(monkeypatch):
    # Several slots: an arm's last output on a slot may predate the slot's newest content.
    from harness.measurement import memory
    from harness.pipeline import timed as timed_mod

    monkeypatch.setattr(memory, "timing_slots", lambda *a, **k: 3)
    monkeypatch.setattr(timed_mod, "timing_slots", lambda *a, **k: 3)  # timed.py imports it at its top
    stale = []
    for attempt in range(12):  # lines differ in their refresh rounds: some leave outputs of older content
        # timeout_s 30: on a host whose every core is busy (CI's two test processes) the
        # rounds dropped for run-queue waits took the default 10 s before min_samples were kept.
        (row,) = run_config(CFG, ("sdpa",), ctx(f"slots{attempt}", min_samples=18, max_samples=60,
                                                noise_target=0.9, timeout_s=30))
        assert row.kind == "result", row.payload.get("reason")
        rec = row.payload["timing"]["refresh"]
        assert row.payload["timing"]["n_slots"] == 3
        current = {r["slot"]: i + 1 for i, r in enumerate(rec["refreshes"])}
        stale += [(a, s) for a, v in rec["last_versions"].items() for s in (0, 2) if v[s] != current.get(s, 0)]
        spot = row.payload["timing"]["spot_calls"]
        stale += [(a, "spot") for a, c in spot.items() if c["version"] != current.get(c["slot"], 0)]
        if stale:
            break
    assert stale, "no checked output predates its slot's newest content: the trap was not exercised"


def test_a_load_that_changes_during_the_rounds_is_not_read_as_memory_but_memory_under_it_is():
    """The host gets busy at round 30 (another process starts: every call 1.6× slower). Honest
    arm: the random rounds put 14 of its 16 first-seen calls after the change and 14 of its 16
    seen calls before it, so the pooled comparison reads the load as memory (1.6×, p < 1e-3);
    against the seen calls nearest each, its first calls are as fast (1.0×): not memory. A
    kernel that remembers (2.8× on new content) under the same load is still caught."""
    from harness.measurement.timing.refresh import FRESH_SLOWDOWN_TOLERANCE, LOCAL_NEIGHBOURS, MEMORY_ALPHA

    def load(i):
        return 1.6 if i >= 30 else 1.0

    fresh_rounds = [9, 17] + list(range(31, 59, 2))
    seen_rounds = list(range(0, 28, 2)) + [40, 52]
    jitter = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0] * 2
    honest = judge_input_memory(calls([load(i) * j for i, j in zip(fresh_rounds, jitter)], fresh_rounds),
                                calls([load(i) * j for i, j in zip(seen_rounds, reversed(jitter))], seen_rounds))
    assert honest.p_value < MEMORY_ALPHA and honest.fresh_median_ms >= (1 + FRESH_SLOWDOWN_TOLERANCE) * honest.seen_median_ms
    assert honest.local_ratio < 1 + FRESH_SLOWDOWN_TOLERANCE and honest.judged and not honest.remembers, honest
    remembering = judge_input_memory(
        calls([2.8 * load(i) * j for i, j in zip(fresh_rounds, jitter)], fresh_rounds),
        calls([load(i) * j for i, j in zip(seen_rounds, reversed(jitter))], seen_rounds))
    assert remembering.remembers and remembering.local_ratio > 2.0
    assert f"against the {LOCAL_NEIGHBOURS} seen calls nearest each" in remembering.reason
    assert remembering.as_dict()["neighbours"] == LOCAL_NEIGHBOURS
