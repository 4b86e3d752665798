"""Stage 4, the after-timing checks: nothing is reported that fails a check after timing.

Per arm, in this order: what its timed calls left behind (state, host work, device work);
the output of one measured call chosen at random, and of the calls on refreshed content,
each against a reference on the content it ran on; whether it answers from memory of its
inputs; its timed outputs; whether its timed window is an empty one's. A baseline (or
control) failing any of them leaves no number against it. A candidate that passes them is,
for a rate bar, timed back to back (its rates) and checked again, then rechecked on fresh
inputs in its timed buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab.outcomes import (CAUGHT_RANDOM_CALL, CAUGHT_RECHECK, CAUGHT_REFRESHED, CAUGHT_SUSTAINED,
                                         CAUGHT_TIMED, INCORRECT, SKIPPED, rejection_tag)
from harness.measurement import clockguard
from harness.measurement.correctness.results import CLOCK_TAMPERED
from harness.measurement.timing.results import arm_name
from harness.pipeline import phase
from harness.pipeline.context import RECHECK_SEED_OFFSET, Failure, Outcome
from harness.pipeline.rows import base_row, baseline_failed
from harness.pipeline.timed import Timed
from harness.measurement.correctness.after_timing import check_timed_output, recheck_in_place
from harness.measurement.correctness.checks import ReferenceMemo
from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL, EMPTY_WINDOW_FACTOR, empty_window, told_apart
from harness.measurement import memory
from harness.measurement.correctness.poison import poison_
from harness.measurement.timing.timers import CudaEventTimer
from harness.measurement.timing.refresh import REMEMBERS_TAG
from harness.measurement.numerics import capture, describe, diff, pin
from harness.measurement.timing.sustained import sustain


@dataclass(frozen=True)
class Survivor:
    """A candidate that passed every after-timing check: its sustained timing (None unless
    the bar judges rates) and its ``details`` (the kernels' own report on the timed inputs)."""

    spec: object
    sus: object | None
    details: dict


@dataclass(frozen=True)
class Checked:
    """The checks' answer, one entry per timed candidate in order: its rejection row, or a
    ``Survivor`` (a baseline that failed: only rows). ``empty``: the empty window judged against.
    ``peak``: (the config's measured peak bytes, bytes held when it started), read once every
    check, sustained call and recheck has run: the whole config, as the VRAM model predicts it."""

    timed: Timed
    verdicts: tuple  # of Outcome | Survivor
    empty: object | None = None
    peak: tuple | None = None  # set where survivors are judged: only their rows carry memory


def check_after_timing(t: Timed) -> Checked:
    g = t.gated
    b = g.budget
    cfg, ctx, base_spec, timed, gates = b.task.config, b.ctx, b.base_spec, g.timed, g.gates
    m, slots, outs, snaps, content, watch = t.m, t.slots, t.outs, t.snaps, t.content, t.watch
    reg, policy = ctx.reg, ctx.reg.timing
    seed = reg.seeds[0] + RECHECK_SEED_OFFSET
    memo = ReferenceMemo()  # one reference per content, whichever arms are judged on it
    # Every timed output is checked before any recheck: a recheck rewrites slot 0's
    # inputs in place, after which the other arms' timed outputs no longer match them.
    # Then the random timed call of each arm (baseline and control included); its
    # copies are checked first and dropped before the recheck allocates.

    # What the timed calls left behind (state, host work, device work), per arm: a kernel
    # that leaves work for whoever runs next is never given a number.
    drains = {name: list(v) for name, v in m.drain_s.items()}
    confirm = _drain_confirm(t, {**{arm_name(s.name): s for s in timed}, ARM_BASELINE: base_spec,
                                 ARM_CONTROL: base_spec})
    left = {name: watch.failure(name, drains, ARM_BASELINE, confirm, m.clock_faults) for name in m.arms}
    base_left = left.get(ARM_BASELINE) or left.get(ARM_CONTROL)
    if base_left is not None:
        return Checked(t, tuple(baseline_failed(cfg, base_spec, timed, ctx, rejection_tag(CAUGHT_TIMED, base_left[0]),
                                                base_left[1],
                                                gates[base_spec.name], "a timed-call check")))
    # Outputs are checked against the content each was computed from (content refresh:
    # a slot's content may have changed since an arm last ran on it).
    spot_bad = {name: spot_failure(cfg, content, m, snaps, name, ctx, memo) for name in snaps}
    snaps.clear()
    fresh_bad = refreshed_failures(cfg, content, m, content.kept, ctx, memo)
    content.release()
    base_bad = spot_bad.get(ARM_BASELINE) or spot_bad.get(ARM_CONTROL)
    base_fresh = fresh_bad.get(ARM_BASELINE) or fresh_bad.get(ARM_CONTROL)
    base_mem = memory_failure(m, ARM_BASELINE) or memory_failure(m, ARM_CONTROL)
    if base_bad is not None or base_fresh is not None:
        # The baseline wrong on some timed call: every speedup against it is meaningless.
        caught, bad = (CAUGHT_RANDOM_CALL, base_bad) if base_bad is not None else (CAUGHT_REFRESHED, base_fresh)
        return Checked(t, tuple(baseline_failed(cfg, base_spec, timed, ctx, rejection_tag(caught, bad.tag), bad.reason,
                                                gates[base_spec.name], "a timed-call check")))
    if base_mem is not None and base_mem[0] is not None:
        return Checked(t, tuple(baseline_failed(cfg, base_spec, timed, ctx, base_mem[0], base_mem[1],
                                                gates[base_spec.name], "the memory-of-inputs check")))
    def left_behind(spec) -> Outcome:
        """A candidate's rejection for what its own timed calls did (``left``)."""
        tag, why = left[arm_name(spec.name)]
        return Outcome(INCORRECT, {**base_row(cfg, spec.name, ctx), "role": "candidate",
                                   "tag": rejection_tag(CAUGHT_TIMED, tag), "reason": why, "timing": t.timing_row(),
                                   "gate": gates[spec.name].to_row()})

    if base_mem is not None:
        # Not judged: no number against it (fail closed), no blame either; a candidate whose
        # own timed calls were caught (a replaced clock, changed state, work left) is still
        # refused for that: the baseline's judgement does not excuse it.
        return Checked(t, tuple(left_behind(spec) if left.get(arm_name(spec.name)) is not None else
                                Outcome(SKIPPED, {**base_row(cfg, spec.name, ctx), "reason": base_mem[1],
                                                  "timing": t.timing_row()}) for spec in timed))
    last_bad = {spec.name: timed_output_failure(cfg, content, m, arm_name(spec.name), outs[arm_name(spec.name)],
                                                ctx, memo) for spec in timed}
    content.release()  # an earlier content a timed output came from is not held through the recheck
    empty = _empty_window(policy, ctx.device)
    verdicts: list = []
    for spec in timed:
        if left.get(arm_name(spec.name)) is not None:
            verdicts.append(left_behind(spec))
            continue
        bad = last_bad[spec.name] or spot_bad.get(arm_name(spec.name)) or fresh_bad.get(arm_name(spec.name))
        if bad is not None:
            caught = (CAUGHT_TIMED if last_bad[spec.name] is not None else CAUGHT_RANDOM_CALL
                      if spot_bad.get(arm_name(spec.name)) is not None else CAUGHT_REFRESHED)
            verdicts.append(Outcome(INCORRECT, {**base_row(cfg, spec.name, ctx), "role": "candidate",
                                                "tag": rejection_tag(caught, bad.tag), "reason": bad.reason,
                                                "gate": gates[spec.name].to_row()}))
            continue
        mem = memory_failure(m, arm_name(spec.name))
        if mem is not None:
            # Answers from memory (incorrect), or could not be judged (no number: skipped).
            tag, why = mem
            kind, extra = (INCORRECT, {"role": "candidate", "tag": tag}) if tag else (SKIPPED, {})
            verdicts.append(Outcome(kind, {**base_row(cfg, spec.name, ctx), **extra, "reason": why,
                                           "timing": t.timing_row(), "gate": gates[spec.name].to_row()}))
            continue
        hollow = empty_failure(m, arm_name(spec.name), empty)
        if hollow is not None:
            verdicts.append(Outcome(INCORRECT, {**base_row(cfg, spec.name, ctx), "role": "candidate",
                                                "tag": "empty_window", "reason": hollow,
                                                "empty_window": empty.as_dict(), "timing": t.timing_row(),
                                                "gate": gates[spec.name].to_row()}))
            continue
        sus = None
        if policy.mode != "graph" and reg.judges_rates_of(cfg, spec.name):
            phase.report(spec.name, phase.RATES)
            sus, bad = sustained(cfg, spec, slots, outs[arm_name(spec.name)], ctx, memo)
            if bad is not None:
                verdicts.append(Outcome(INCORRECT, {**base_row(cfg, spec.name, ctx), "role": "candidate",
                                                    "tag": rejection_tag(CAUGHT_SUSTAINED, bad.tag), "reason": bad.reason,
                                                    "sustained": sus.as_dict(),
                                                    "gate": gates[spec.name].to_row()}))
                continue
        q, k, v = slots[0]
        o = outs[arm_name(spec.name)][0]
        phase.report(spec.name, phase.RECHECK)
        rc = recheck_in_place(spec, cfg, q, k, v, o, seed=seed, family="normal", **reg.tolerance(cfg.dtype),
                              memo=memo)
        if not rc.passed:
            verdicts.append(Outcome(INCORRECT, {**base_row(cfg, spec.name, ctx), "role": "candidate",
                                                "tag": rejection_tag(CAUGHT_RECHECK, rc.tag),
                                                "reason": f"after timing, on fresh inputs in the timed buffers: {rc.reason}",
                                                "gate": gates[spec.name].to_row()}))
            continue
        details = {"candidate": spec.details(*slots[0], cfg), "baseline": base_spec.details(*slots[0], cfg)}
        verdicts.append(Survivor(spec, sus, details))

    return Checked(t, tuple(verdicts), empty, (memory.peak_bytes(ctx.device, t.held), t.held))


def _drain_confirm(t: Timed, specs: dict):
    """``confirm(arm, n)`` for the timed-drain judgement (measurement/leftover.py): the arm
    called n more times through a timer of its own (hold, call, drain, as in the rounds), on
    copies of input slot 0 into a buffer of its own, so no slot, output or spot copy the
    later checks read is touched. Run only where a share of long drains needs confirming; a
    call that raises ends the config as any kernel exception does (no number)."""
    cfg, device = t.gated.budget.task.config, t.gated.budget.ctx.device

    def confirm(arm: str, n: int) -> list[float]:
        import torch

        fn = specs[arm].fn
        q, k, v = (x.clone() for x in t.slots[0])
        out = torch.empty_like(t.outs[arm][0])
        timer = CudaEventTimer(device)
        drains = []
        for _ in range(n):
            timer.time_call(lambda: fn(q, k, v, out, causal=cfg.causal, scale=cfg.scale), arm=arm,
                            before=lambda: poison_(out))
            drains.append(timer.last_drain_s)
        return drains

    return confirm if device.startswith("cuda") else None


def spot_failure(cfg, content, m, snaps, name, ctx, memo=None):
    """The check of arm ``name``'s randomly chosen timed call (its output copy against a fresh
    reference on that call's inputs), or None when it passed."""
    chosen = m.spot_calls.get(name)
    if chosen is None or name not in snaps:
        return None
    version = chosen.get("version")
    q, k, v = content.inputs(m, chosen["slot"], version)
    rep = check_timed_output(cfg, q, k, v, snaps[name], **ctx.reg.tolerance(cfg.dtype),
                             label=f"{name}: measured call {chosen['call']} (chosen at random, seed "
                                   f"{m.spot_seed}) on slot {chosen['slot']}{content.describe(m, version)}",
                             what="output of that call", memo=memo)
    return None if rep.passed else rep


def refreshed_failures(cfg, content, m, kept, ctx, memo=None) -> dict:
    """Per arm, the check of its kept calls on new content (one per kind of refresh: in place,
    where a kernel keyed by address answers for the old content; fresh buffers), each
    against a reference on the content it ran on: the first failure in the arm's order of
    kinds, or None. Judged kind by kind across the arms: the arms' kept calls of one kind
    share their round, so its content is drawn again once for all of them."""
    checks = m.refresh.checks if m.refresh is not None else {}
    reports: dict = {}
    kinds = list(dict.fromkeys(how for copies in kept.values() for how in copies))
    for how in kinds:
        for name, copies in kept.items():
            c = checks.get(name, {}).get(how)
            if how not in copies or c is None:
                continue
            q, k, v = content.inputs(m, c["slot"], c["version"])
            reports[(name, how)] = check_timed_output(
                cfg, q, k, v, copies[how], **ctx.reg.tolerance(cfg.dtype),
                label=f"{name}: measured round {c['round']} on slot {c['slot']}, its inputs rewritten "
                      f"{how.replace('_', ' ')} just before the call{content.describe(m, c['version'])}",
                what="output of the first call on the new content", memo=memo)
            del q, k, v  # not alive while the next content is drawn (the VRAM model counts one)
    out = {}
    for name, copies in kept.items():
        failed = [reports[(name, how)] for how in copies if (name, how) in reports and not reports[(name, how)].passed]
        out[name] = failed[0] if failed else None
    return out


def memory_failure(m, arm) -> tuple[str | None, str] | None:
    """(tag, reason) when arm ``arm`` answers from memory of its inputs (tag REMEMBERS_TAG), or
    (None, reason) when that could not be judged (fail closed: no number); None when it passed."""
    if m.refresh is None or arm not in m.refresh.memory:
        return None
    j = m.refresh.memory[arm]
    if not j.judged:
        if m.throttled or min(len(a.samples) for a in m.arms.values()) < m.policy.min_samples:
            return None  # no number anyway: the rates stage says why (throttled, undersampled)
        return None, f"{arm}: {j.reason}"
    return (REMEMBERS_TAG, j.reason) if j.remembers else None


def sustained(cfg, spec, slots, outs, ctx, memo=None):
    """The candidate's calls back to back at the sustained clock (rates for a rate bar), and
    the check of the last call's output (poisoned before every call), or None when it passed."""
    def call(slot: int) -> None:
        q, k, v = slots[slot]
        spec.fn(q, k, v, outs[slot], causal=cfg.causal, scale=cfg.scale)

    def poison(slot: int) -> None:
        poison_(outs[slot])  # the gate's poison: what a call leaves unwritten is told apart

    state = capture()  # the pinned state (numerics.apply is in force)
    sus = sustain(arm_name(spec.name), call, n_slots=len(slots), device=ctx.device, prepare=poison)
    found = clockguard.check()
    if found:
        clockguard.restore()
        return sus, Failure(CLOCK_TAMPERED, f"its calls back to back replaced the clocks the harness times with: "
                                            f"{clockguard.describe(found)}")
    if sus.clock_fault is not None:
        return sus, Failure(CLOCK_TAMPERED, f"its calls back to back disagree with an independent clock: "
                                            f"{sus.clock_fault}")
    moved = diff(state, capture())
    if moved:
        pin(state)
        return sus, Failure("numerics_changed", f"its calls back to back changed global state ({describe(moved)})")
    q, k, v = slots[sus.last_slot]
    rep = check_timed_output(cfg, q, k, v, outs[sus.last_slot], **ctx.reg.tolerance(cfg.dtype),
                             label=f"slot {sus.last_slot}", what="output of the last call timed back to back", memo=memo)
    return sus, (None if rep.passed else rep)


def _empty_window(policy, device):
    return empty_window(policy, device)


def empty_failure(m, arm, empty) -> str | None:
    """Why an arm's timing is an empty window's while the baseline's is not, or None."""
    cand, base = m.arms[arm].stats, m.arms[ARM_BASELINE].stats
    if told_apart(cand, empty.stats) or not told_apart(base, empty.stats):
        return None
    return (f"its timed window reads {cand.median * 1e3:.3g} µs, which cannot be told apart from an empty "
            f"window on this device in mode {empty.mode} ({empty.stats.median * 1e3:.3g} µs, factor "
            f"{EMPTY_WINDOW_FACTOR:g}), while the baseline's reads {base.median * 1e3:.3g} µs: its work runs "
            f"where the timed window does not see it")


def timed_output_failure(cfg, content, m, arm, outs, ctx, memo=None):
    """The first failing timed output among the checked slots, or None."""
    # The first and last rotation slots: each holds what the last timed call on it wrote,
    # computed from the content that call ran on (the refresh may have changed it since).
    for slot in sorted({0, len(content.slots) - 1}):
        version = m.refresh.last_versions[arm][slot] if m.refresh is not None else None
        q, k, v = content.inputs(m, slot, version)
        rep = check_timed_output(cfg, q, k, v, outs[slot], **ctx.reg.tolerance(cfg.dtype),
                                 label=f"slot {slot}{content.describe(m, version)}", memo=memo)
        del q, k, v  # not alive while the next content is drawn (the VRAM model counts one)
        if not rep.passed:
            return rep
    return None
