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

from dataclasses import dataclass, field

from harness.vocab.outcomes import (CAUGHT_RANDOM_CALL, CAUGHT_RECHECK, CAUGHT_REFRESHED, CAUGHT_SUSTAINED,
                                         CAUGHT_TIMED, INCORRECT, SKIPPED, rejection_tag)
from harness.measurement import clockguard
from harness.measurement.correctness.results import CLOCK_TAMPERED, InputCase, Tolerance
from harness.measurement.timing.results import arm_name
from harness.pipeline import phase
from harness.pipeline.context import Failure, Outcome
from harness.workloads.seeds import RECHECK_SEED_OFFSET
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


@dataclass
class _Judging:
    """What the after-timing checks share while they judge one config's arms: the timing, what
    the timed calls left behind per arm (``left``), the references drawn so far (``memo``) and
    the failures found over all arms at once (outputs on the spot, refreshed and last timed
    calls; the empty window), filled in as the checks run; ``sus``: per candidate, its
    sustained timing."""

    t: Timed
    left: dict
    memo: ReferenceMemo
    spot_bad: dict = field(default_factory=dict)
    fresh_bad: dict = field(default_factory=dict)
    last_bad: dict = field(default_factory=dict)
    empty: object | None = None
    sus: dict = field(default_factory=dict)

    @property
    def cfg(self):
        return self.t.gated.budget.task.config

    @property
    def ctx(self):
        return self.t.gated.budget.ctx

    @property
    def wl(self):
        return self.ctx.workload

    def gate_row(self, spec) -> dict:
        return self.t.gated.gates[spec.name].to_row()

    def refused(self, spec, tag: str, why: str, **extra) -> Outcome:
        """A candidate's rejection row (INCORRECT), its gate result last."""
        return Outcome(INCORRECT, {**base_row(self.cfg, spec.name, self.ctx), "role": "candidate", "tag": tag,
                                   "reason": why, **extra, "gate": self.gate_row(spec)})

    def baseline_failed(self, tag: str, why: str, what: str) -> tuple:
        """Every candidate's row when the baseline (or control) failed ``what``."""
        g = self.t.gated
        base = g.budget.base_spec
        return tuple(baseline_failed(self.cfg, base, g.timed, self.ctx, tag, why, g.gates[base.name], what))


def check_after_timing(t: Timed) -> Checked:
    """Run the baseline's checks (``BASELINE_CHECKS``: the first failure ends the config with
    rows against every candidate), then each candidate's (``CANDIDATE_CHECKS``: its first
    failure is its row; passing all, it survives). Every timed output is checked before any
    recheck: a recheck rewrites slot 0's inputs in place, after which the other arms' timed
    outputs no longer match them."""
    g = t.gated
    b = g.budget
    drains = {name: list(v) for name, v in t.m.drain_s.items()}
    confirm = _drain_confirm(t, {**{arm_name(s.name): s for s in g.timed}, ARM_BASELINE: b.base_spec,
                                 ARM_CONTROL: b.base_spec})
    left = {name: t.watch.failure(name, drains, ARM_BASELINE, confirm, t.m.clock_faults) for name in t.m.arms}
    j = _Judging(t, left, ReferenceMemo())  # one reference per content, whichever arms are judged on it
    rows = _first_failure(BASELINE_CHECKS, b.base_spec, j)
    if rows is not None:
        return Checked(t, rows)
    _judge_timed_outputs(j)
    verdicts = []
    for spec in g.timed:
        row = _first_failure(CANDIDATE_CHECKS, spec, j)
        verdicts.append(row if row is not None else _survivor(spec, j))
    return Checked(t, tuple(verdicts), j.empty, (memory.peak_bytes(b.ctx.device, t.held), t.held))


def _first_failure(checks, spec, j: _Judging):
    """The first of ``checks`` (in order) that fails ``spec``: its answer; None when all pass."""
    for check in checks:
        found = check(spec, j)
        if found is not None:
            return found
    return None


# The baseline's checks, each ``check(base_spec, judging) -> rows | None``: a baseline (or
# control) failing one leaves no number against it, so its rows are every candidate's.

def _base_left_behind(base, j: _Judging) -> tuple | None:
    """What the baseline's (or control's) timed calls left behind (state, host work, device work)."""
    bad = j.left.get(ARM_BASELINE) or j.left.get(ARM_CONTROL)
    if bad is None:
        return None
    return j.baseline_failed(rejection_tag(CAUGHT_TIMED, bad[0]), bad[1], "a timed-call check")


def _base_outputs(base, j: _Judging) -> tuple | None:
    """Every arm's spot-checked and refreshed calls' outputs, each against the content it was
    computed from (a slot's content may have changed since an arm last ran on it; the copies
    are dropped once checked, before the recheck allocates); the baseline's failing ends it."""
    t = j.t
    j.spot_bad = {name: spot_failure(j.cfg, t.content, t.m, t.snaps, name, j.ctx, j.memo) for name in t.snaps}
    t.snaps.clear()
    j.fresh_bad = refreshed_failures(j.cfg, t.content, t.m, t.content.kept, j.ctx, j.memo)
    t.content.release()
    spot = j.spot_bad.get(ARM_BASELINE) or j.spot_bad.get(ARM_CONTROL)
    fresh = j.fresh_bad.get(ARM_BASELINE) or j.fresh_bad.get(ARM_CONTROL)
    if spot is None and fresh is None:
        return None
    # The baseline wrong on some timed call: every speedup against it is meaningless.
    caught, bad = (CAUGHT_RANDOM_CALL, spot) if spot is not None else (CAUGHT_REFRESHED, fresh)
    return j.baseline_failed(rejection_tag(caught, bad.tag), bad.reason, "a timed-call check")


def _base_memory(base, j: _Judging) -> tuple | None:
    """Whether the baseline (or control) answers from memory of its inputs; where that could not
    be judged, no number against it (fail closed), no blame either: a candidate whose own timed
    calls were caught (a replaced clock, changed state, work left) is still refused for that."""
    mem = memory_failure(j.t.m, ARM_BASELINE) or memory_failure(j.t.m, ARM_CONTROL)
    if mem is None:
        return None
    if mem[0] is not None:
        return j.baseline_failed(mem[0], mem[1], "the memory-of-inputs check")
    return tuple(_left_behind(spec, j) or Outcome(SKIPPED, {**base_row(j.cfg, spec.name, j.ctx), "reason": mem[1],
                                                            "timing": j.t.timing_row()})
                 for spec in j.t.gated.timed)


BASELINE_CHECKS = (_base_left_behind, _base_outputs, _base_memory)


def _judge_timed_outputs(j: _Judging) -> None:
    """Every candidate's timed outputs, then the empty window (both before any recheck)."""
    t = j.t
    j.last_bad = {spec.name: timed_output_failure(j.cfg, t.content, t.m, arm_name(spec.name),
                                                  t.outs[arm_name(spec.name)], j.ctx, j.memo)
                  for spec in t.gated.timed}
    t.content.release()  # an earlier content a timed output came from is not held through the recheck
    j.empty = _empty_window(j.ctx.reg.timing, j.ctx.device)


# A candidate's checks, each ``check(spec, judging) -> Outcome | None``, in order: its first
# failure is its row.

def _left_behind(spec, j: _Judging) -> Outcome | None:
    """What the candidate's own timed calls did (``left``): a replaced clock, changed state, work left."""
    bad = j.left.get(arm_name(spec.name))
    if bad is None:
        return None
    return j.refused(spec, rejection_tag(CAUGHT_TIMED, bad[0]), bad[1], timing=j.t.timing_row())


def _wrong_output(spec, j: _Judging) -> Outcome | None:
    """A timed output, the spot-checked call's or a refreshed call's, against its reference."""
    arm = arm_name(spec.name)
    last, spot, fresh = j.last_bad[spec.name], j.spot_bad.get(arm), j.fresh_bad.get(arm)
    bad = last or spot or fresh
    if bad is None:
        return None
    caught = CAUGHT_TIMED if last is not None else CAUGHT_RANDOM_CALL if spot is not None else CAUGHT_REFRESHED
    return j.refused(spec, rejection_tag(caught, bad.tag), bad.reason)


def _from_memory(spec, j: _Judging) -> Outcome | None:
    """Answers from memory of its inputs (incorrect), or could not be judged (no number: skipped)."""
    mem = memory_failure(j.t.m, arm_name(spec.name))
    if mem is None:
        return None
    tag, why = mem
    kind, extra = (INCORRECT, {"role": "candidate", "tag": tag}) if tag else (SKIPPED, {})
    return Outcome(kind, {**base_row(j.cfg, spec.name, j.ctx), **extra, "reason": why,
                          "timing": j.t.timing_row(), "gate": j.gate_row(spec)})


def _hollow(spec, j: _Judging) -> Outcome | None:
    """A timed window that cannot be told apart from an empty one's while the baseline's can."""
    why = empty_failure(j.t.m, arm_name(spec.name), j.empty)
    if why is None:
        return None
    return j.refused(spec, "empty_window", why, empty_window=j.empty.as_dict(), timing=j.t.timing_row())


def _rates(spec, j: _Judging) -> Outcome | None:
    """For a rate bar (not in graph mode): its calls back to back (its rates), checked again."""
    cfg, ctx = j.cfg, j.ctx
    if ctx.reg.timing.mode == "graph" or not ctx.reg.judges_rates_of(cfg, spec.name):
        return None
    phase.report(spec.name, phase.RATES)
    sus, bad = sustained(cfg, spec, j.t.slots, j.t.outs[arm_name(spec.name)], ctx, j.memo)
    j.sus[spec.name] = sus
    if bad is None:
        return None
    return j.refused(spec, rejection_tag(CAUGHT_SUSTAINED, bad.tag), bad.reason, sustained=sus.as_dict())


def _recheck(spec, j: _Judging) -> Outcome | None:
    """One more call on fresh inputs written into its timed buffers (slot 0)."""
    cfg, reg = j.cfg, j.ctx.reg
    phase.report(spec.name, phase.RECHECK)
    rc = recheck_in_place(spec, cfg, tuple(j.t.slots[0]), j.t.outs[arm_name(spec.name)][0], workload=j.wl,
                          case=InputCase(reg.seeds[0] + RECHECK_SEED_OFFSET, j.wl.timing_family), tol=_tol(cfg, j.ctx),
                          memo=j.memo)
    if rc.passed:
        return None
    return j.refused(spec, rejection_tag(CAUGHT_RECHECK, rc.tag),
                     f"after timing, on fresh inputs in the timed buffers: {rc.reason}")


CANDIDATE_CHECKS = (_left_behind, _wrong_output, _from_memory, _hollow, _rates, _recheck)


def _survivor(spec, j: _Judging) -> Survivor:
    """A candidate that passed every check, with the kernels' own report on the timed inputs."""
    slots, cfg, base = j.t.slots, j.cfg, j.t.gated.budget.base_spec
    kwargs = j.wl.call_kwargs(cfg)
    details = {"candidate": spec.details(slots[0], kwargs), "baseline": base.details(slots[0], kwargs)}
    return Survivor(spec, j.sus.get(spec.name), details)


def _drain_confirm(t: Timed, specs: dict):
    """``confirm(arm, n)`` for the timed-drain judgement (measurement/leftover.py): the arm
    called n more times through a timer of its own (hold, call, drain, as in the rounds), on
    copies of input slot 0 into a buffer of its own, so no slot, output or spot copy the
    later checks read is touched. Run only where a share of long drains needs confirming; a
    call that raises ends the config as any kernel exception does (no number)."""
    cfg, ctx = t.gated.budget.task.config, t.gated.budget.ctx
    device, wl = ctx.device, ctx.workload

    def confirm(arm: str, n: int) -> list[float]:
        import torch

        fn = specs[arm].fn
        inputs = tuple(x.clone() for x in t.slots[0])
        outs = tuple(torch.empty_like(o) for o in t.outs[arm][0])
        timer = CudaEventTimer(device)
        drains = []

        def poison() -> None:
            for o in outs:
                poison_(o)

        for _ in range(n):
            timer.time_call(lambda: wl.call(fn, inputs, outs, cfg), arm=arm, before=poison)
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
    inputs = content.inputs(m, chosen["slot"], version)
    rep = check_timed_output(cfg, inputs, snaps[name], workload=ctx.workload, tol=_tol(cfg, ctx),
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
            inputs = content.inputs(m, c["slot"], c["version"])
            reports[(name, how)] = check_timed_output(
                cfg, inputs, copies[how], workload=ctx.workload, tol=_tol(cfg, ctx),
                label=f"{name}: measured round {c['round']} on slot {c['slot']}, its inputs rewritten "
                      f"{how.replace('_', ' ')} just before the call{content.describe(m, c['version'])}",
                what="output of the first call on the new content", memo=memo)
            del inputs  # not alive while the next content is drawn (the VRAM model counts one)
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
    wl = ctx.workload

    def call(slot: int) -> None:
        wl.call(spec.fn, slots[slot], outs[slot], cfg)

    def poison(slot: int) -> None:
        for out in outs[slot]:
            poison_(out)  # the gate's poison: what a call leaves unwritten is told apart

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
    rep = check_timed_output(cfg, slots[sus.last_slot], outs[sus.last_slot], workload=wl, tol=_tol(cfg, ctx),
                             label=f"slot {sus.last_slot}", what="output of the last call timed back to back", memo=memo)
    return sus, (None if rep.passed else rep)


def _tol(cfg, ctx) -> Tolerance:
    """The line's tolerance at the config's dtype."""
    return Tolerance(**ctx.reg.tolerance(cfg.dtype))


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
        inputs = content.inputs(m, slot, version)
        rep = check_timed_output(cfg, inputs, outs[slot], workload=ctx.workload, tol=_tol(cfg, ctx),
                                 label=f"slot {slot}{content.describe(m, version)}", memo=memo)
        del inputs  # not alive while the next content is drawn (the VRAM model counts one)
        if not rep.passed:
            return rep
    return None
