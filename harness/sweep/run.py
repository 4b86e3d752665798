"""Running one config of a sweep: memory check → correctness gate → interleaved timing → recheck.

``run_config`` is a function of plain data (the task and a SweepContext) that returns
row payloads; it never writes the ledger, so it can move into a worker process. The
order of stages is the policy: nothing is timed that has not passed the float64 gate on
the same inputs, and nothing is reported that fails the recheck after timing.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from harness.governance.outcomes import CRASHED, INCORRECT, RESULT, SKIPPED, THROTTLED, UNSUPPORTED
from harness.measurement.timing.results import arm_name, rig_noise
from harness.sweep import phase
from harness.workloads import Config

if TYPE_CHECKING:
    from harness.governance.registration import Registration

# Fresh inputs for the post-timing recheck come from a seed no registration uses for the
# gate, so a kernel cannot have seen them.
RECHECK_SEED_OFFSET = 1_000_003
TIMING_SEED_OFFSET = 2_000_003
# The last frames of a config's exception kept in its `crashed` rows.
TRACEBACK_FRAMES = 6


@dataclass(frozen=True)
class SweepContext:
    """What a config runs under: the line's registration (parsed once, at load) and what the
    registration cannot know — the device, its stored ceilings, the repository root (kernel
    sources inside it are recorded by their path relative to it). Picklable: it travels to
    the worker processes."""

    reg: Registration
    device: str
    ceilings: dict | None = None
    root: str | None = None

    @property
    def rate_bar(self) -> bool:
        """The bar judges an absolute rate (one of metrics.RATE_METRICS): each candidate's
        rates come from the sustained phase after the interleaved rounds (calls back to back,
        as triton.testing.do_bench times them); speedups still come from the rounds, where
        the arms share one clock."""
        return self.reg.judges_rates()


class Failure(NamedTuple):
    """A check's failure in the shape of a CheckReport's: its tag and why."""

    tag: str
    reason: str


@dataclass(frozen=True)
class Outcome:
    """One row to append: its kind and payload (the stamp is added by the writer)."""

    kind: str
    payload: dict


def _base(cfg: Config, candidate: str, ctx: SweepContext) -> dict:
    from harness.registry import get_kernel

    from harness.sweep.ceilings import ceilings_ref

    return {"config": cfg.as_dict(), "config_key": cfg.key(), "candidate": candidate, "baseline": ctx.reg.baseline,
            "ceilings_ref": ceilings_ref(ctx.ceilings),
            "kernel_sources": {"candidate": _source(get_kernel(candidate), ctx.root),
                               "baseline": _source(get_kernel(ctx.reg.baseline), ctx.root)}}


def run_config(cfg: Config, candidates: tuple[str, ...], ctx: SweepContext) -> list[Outcome]:
    """All outcome rows for one config (one per candidate, plus a baseline `incorrect` row if any)."""
    from harness.measurement import memory
    from harness.registry import get_kernel

    base_spec = get_kernel(ctx.reg.baseline)
    out: list[Outcome] = []
    runnable = []
    why_base = base_spec.config_reason(cfg)
    for name in candidates:
        spec = get_kernel(name)
        why = spec.unusable_reason(ctx.device) or spec.config_reason(cfg)
        if why is None and why_base is not None:
            why = f"baseline {ctx.reg.baseline} cannot run this config: {why_base}"
        if why:
            out.append(Outcome(UNSUPPORTED, {**_base(cfg, name, ctx), "reason": why}))
        else:
            runnable.append(spec)
    if not runnable:
        return out

    phase.report(None, phase.SETUP)
    policy = ctx.reg.timing
    pred = memory.predict(cfg, [base_spec, *runnable], policy, ctx.device)
    avail = memory.available_bytes(ctx.device)
    if pred.peak_bytes > avail:
        for spec in runnable:
            out.append(Outcome(SKIPPED, {
                **_base(cfg, spec.name, ctx), "predicted_bytes": pred.peak_bytes, "available_bytes": avail,
                "memory_breakdown": pred.breakdown,
                "reason": f"predicted peak {pred.peak_bytes / 2**30:.2f} GiB > available {avail / 2**30:.2f} GiB "
                          f"(free memory less a {memory.MEMORY_MARGIN:.0%} margin)"}))
        return out

    held = memory.reset_peak(ctx.device)
    try:
        out.extend(_gate_and_time(cfg, base_spec, runnable, ctx, policy, pred, held))
    except Exception as exc:
        if not memory.is_oom(exc):
            raise
        memory.release(ctx.device)
        for spec in runnable:
            out.append(Outcome(CRASHED, {
                **_base(cfg, spec.name, ctx), "predicted_bytes": pred.peak_bytes,
                "reason": f"out of device memory although predicted {pred.peak_bytes / 2**30:.2f} GiB fits: "
                          f"{str(exc).splitlines()[0]} (the memory model is wrong for this config)"}))
    finally:
        memory.release(ctx.device)
    return out


def spot_seed(cfg: Config, ctx: SweepContext) -> int:
    """The seed of the random timed call checked per arm: from the config and the line's
    seeds, so it is recorded and reproducible but not known to a kernel before it runs."""
    import hashlib

    digest = hashlib.sha256(f"{ctx.reg.line}|{cfg.key()}|{ctx.reg.seeds[0]}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def refresh_seed(cfg: Config, ctx: SweepContext) -> int:
    """The seed of the content refresh (which measured rounds get new inputs, how, and the
    inputs' seeds): as ``spot_seed``, recorded and reproducible, not known to a kernel."""
    import hashlib

    digest = hashlib.sha256(f"refresh|{ctx.reg.line}|{cfg.key()}|{ctx.reg.seeds[0]}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _gate_and_time(cfg, base_spec, runnable, ctx, policy, pred, held) -> list[Outcome]:
    from harness.measurement import memory
    from harness.measurement.correctness.after_timing import recheck_in_place
    from harness.measurement.correctness.gate import gate
    from harness.measurement.numerics import apply, capture, diff

    reg = ctx.reg
    out: list[Outcome] = []
    state = reg.numerics.state()
    gates, changed = {}, {}
    for spec in [base_spec, *runnable]:
        phase.report(spec.name, phase.GATE)
        with apply(state) as pinned:
            gates[spec.name] = gate(spec, cfg, seeds=reg.seeds, families=reg.families, atol=reg.atol[cfg.dtype],
                                    rtol=reg.rtol[cfg.dtype], device=ctx.device, min_pass_rate=reg.min_pass_rate)
            # The TF32 incident: a flag flipped between arms changes which kernels run. A kernel that
            # changes global numeric state would make the arms differ: it is never timed.
            moved = diff(pinned, capture())
            if moved:
                changed[spec.name] = moved
    with apply(state) as pinned:
        numerics = pinned.as_dict()
        gb = gates[base_spec.name]
        if base_spec.name in changed:
            gb = None
        if gb is None or not gb.passed:
            # A hollow baseline makes every speedup meaningless: record it and time nothing.
            tag, reason = _failure(base_spec.name, gates, changed)
            return out + _baseline_failed(cfg, base_spec, runnable, ctx, tag, reason, gates[base_spec.name],
                                          "the correctness gate")
        timed = []
        for spec in runnable:
            g = gates[spec.name]
            if g.passed and spec.name not in changed:
                timed.append(spec)
                continue
            tag, reason = _failure(spec.name, gates, changed)
            kind = CRASHED if tag == "exception" else INCORRECT
            out.append(Outcome(kind, {**_base(cfg, spec.name, ctx), "role": "candidate", "tag": tag,
                                      "reason": reason, "gate": g.to_row()}))
        if not timed:
            return out

        phase.report((base_spec.name, *(spec.name for spec in timed)), phase.TIMING)
        m, slots, outs, snaps, content, watch = _time(cfg, base_spec, timed, ctx, policy)
        phase.report(None, phase.CHECK)
        measured_peak = memory.peak_bytes(ctx.device, held)
        seed = reg.seeds[0] + RECHECK_SEED_OFFSET
        # Every timed output is checked before any recheck: a recheck rewrites slot 0's
        # inputs in place, after which the other arms' timed outputs no longer match them.
        # Then the random timed call of each arm (baseline and control included); its
        # copies are checked first and dropped before the recheck allocates.
        from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL

        # What the timed calls left behind (state, host work, device work), per arm: a kernel
        # that leaves work for whoever runs next is never given a number.
        drains = {name: list(v) for name, v in m.drain_s.items()}
        left = {name: watch.failure(name, drains, ARM_BASELINE) for name in m.arms}
        base_left = left.get(ARM_BASELINE) or left.get(ARM_CONTROL)
        if base_left is not None:
            return out + _baseline_failed(cfg, base_spec, timed, ctx, "timed_" + base_left[0], base_left[1],
                                          gates[base_spec.name], "a timed-call check")
        # Outputs are checked against the content each was computed from (content refresh:
        # a slot's content may have changed since an arm last ran on it).
        spot_bad = {name: _spot_failure(cfg, content, m, snaps, name, ctx) for name in snaps}
        snaps.clear()
        fresh_bad = {name: _refreshed_failure(cfg, content, m, content.kept, name, ctx) for name in content.kept}
        content.kept.clear()
        base_bad = spot_bad.get(ARM_BASELINE) or spot_bad.get(ARM_CONTROL)
        base_fresh = fresh_bad.get(ARM_BASELINE) or fresh_bad.get(ARM_CONTROL)
        base_mem = _memory_failure(m, ARM_BASELINE) or _memory_failure(m, ARM_CONTROL)
        if base_bad is not None or base_fresh is not None:
            # The baseline wrong on some timed call: every speedup against it is meaningless.
            tag, bad = ("random_call_", base_bad) if base_bad is not None else ("refreshed_", base_fresh)
            return out + _baseline_failed(cfg, base_spec, timed, ctx, tag + bad.tag, bad.reason,
                                          gates[base_spec.name], "a timed-call check")
        if base_mem is not None and base_mem[0] is not None:
            return out + _baseline_failed(cfg, base_spec, timed, ctx, base_mem[0], base_mem[1],
                                          gates[base_spec.name], "the memory-of-inputs check")
        if base_mem is not None:  # not judged: no number against it (fail closed), no blame either
            return out + [Outcome(SKIPPED, {**_base(cfg, spec.name, ctx), "reason": base_mem[1],
                                            "timing": m.to_row()}) for spec in timed]
        last_bad = {spec.name: _timed_output_failure(cfg, content, m, arm_name(spec.name), outs[arm_name(spec.name)],
                                                     ctx) for spec in timed}
        empty = _empty_window(policy, ctx.device)
        for spec in timed:
            if left.get(arm_name(spec.name)) is not None:
                tag, why = left[arm_name(spec.name)]
                out.append(Outcome(INCORRECT, {**_base(cfg, spec.name, ctx), "role": "candidate", "tag": "timed_" + tag,
                                                 "reason": why, "timing": m.to_row(),
                                                 "gate": gates[spec.name].to_row()}))
                continue
            bad = last_bad[spec.name] or spot_bad.get(arm_name(spec.name)) or fresh_bad.get(arm_name(spec.name))
            if bad is not None:
                prefix = ("timed_" if last_bad[spec.name] is not None else
                          "random_call_" if spot_bad.get(arm_name(spec.name)) is not None else "refreshed_")
                out.append(Outcome(INCORRECT, {**_base(cfg, spec.name, ctx), "role": "candidate",
                                                 "tag": prefix + bad.tag, "reason": bad.reason,
                                                 "gate": gates[spec.name].to_row()}))
                continue
            mem = _memory_failure(m, arm_name(spec.name))
            if mem is not None:
                # Answers from memory (incorrect), or could not be judged (no number: skipped).
                tag, why = mem
                kind, extra = (INCORRECT, {"role": "candidate", "tag": tag}) if tag else (SKIPPED, {})
                out.append(Outcome(kind, {**_base(cfg, spec.name, ctx), **extra, "reason": why, "timing": m.to_row(),
                                          "gate": gates[spec.name].to_row()}))
                continue
            hollow = _empty_failure(m, arm_name(spec.name), empty)
            if hollow is not None:
                out.append(Outcome(INCORRECT, {**_base(cfg, spec.name, ctx), "role": "candidate",
                                                 "tag": "empty_window", "reason": hollow,
                                                 "empty_window": empty.as_dict(), "timing": m.to_row(),
                                                 "gate": gates[spec.name].to_row()}))
                continue
            sus = None
            if ctx.rate_bar and policy.mode != "graph":
                phase.report(spec.name, phase.RATES)
                sus, bad = _sustained(cfg, spec, slots, outs[arm_name(spec.name)], ctx)
                if bad is not None:
                    out.append(Outcome(INCORRECT, {**_base(cfg, spec.name, ctx), "role": "candidate",
                                                   "tag": "sustained_" + bad.tag, "reason": bad.reason,
                                                   "sustained": sus.as_dict(),
                                                   "gate": gates[spec.name].to_row()}))
                    continue
            q, k, v = slots[0]
            o = outs[arm_name(spec.name)][0]
            phase.report(spec.name, phase.RECHECK)
            rc = recheck_in_place(spec, cfg, q, k, v, o, seed=seed, family="normal", atol=reg.atol[cfg.dtype],
                                  rtol=reg.rtol[cfg.dtype])
            if not rc.passed:
                out.append(Outcome(INCORRECT, {**_base(cfg, spec.name, ctx), "role": "candidate",
                                                 "tag": "recheck_" + rc.tag,
                                                 "reason": f"after timing, on fresh inputs in the timed buffers: {rc.reason}",
                                                 "gate": gates[spec.name].to_row()}))
                continue
            details = {"candidate": spec.details(*slots[0], cfg), "baseline": base_spec.details(*slots[0], cfg)}
            out.append(_result(cfg, spec, base_spec, ctx, policy, m, gates, pred, (measured_peak, held), numerics,
                               details, empty, sus))
    return out


def _baseline_failed(cfg, base_spec, specs, ctx, tag, reason, gate, what) -> list[Outcome]:
    """A hollow baseline: its `incorrect` row, and a `skipped` row for every candidate."""
    out = [Outcome(INCORRECT, {**_base(cfg, base_spec.name, ctx), "role": "baseline", "tag": tag,
                                 "reason": reason, "gate": gate.to_row()})]
    for spec in specs:
        out.append(Outcome(SKIPPED, {**_base(cfg, spec.name, ctx),
                                       "reason": f"baseline {base_spec.name} failed {what} [{tag}]: {reason}"}))
    return out


# Gate failures a different tolerance could change (the output's distance from the reference);
# the others (an exception, unwritten elements, ...) are the kernel's whatever the tolerance.
TOLERANCE_TAGS = frozenset({"mismatch"})


def baseline_gate_failure(outcomes) -> dict | None:
    """Why a sweep stops after this config: its baseline failed the correctness gate (the
    baseline's `incorrect` row carries one of the gate's own tags; the timed checks prefix
    theirs). No candidate is timed against a baseline that fails, and a tolerance or a
    baseline wrong here is most likely wrong at every config. The config, the failure, whether
    a tolerance could change it, and for a mismatch the least atol its listed failing elements
    need (a lower bound); None when the baseline passed the gate."""
    from harness.jsonsafe import number
    from harness.measurement.correctness.results import FAILURE_TAGS

    for o in outcomes:
        p = o.payload
        if o.kind != INCORRECT or p.get("role") != "baseline" or p.get("tag") not in FAILURE_TAGS:
            continue
        gate = p.get("gate") or {}
        rtol = number(gate.get("rtol"))
        needs = []
        for f in gate.get("failures", []):
            fig = f.get("figures") or {}
            out, ref = number(fig.get("worst_out")), number(fig.get("worst_ref"))
            if f.get("tag") == "mismatch" and out is not None and ref is not None and rtol is not None:
                needs.append(abs(out - ref) - rtol * abs(ref))
        return {"config_key": p["config_key"], "baseline": p["candidate"], "tag": p["tag"], "reason": p["reason"],
                "what": FAILURE_TAGS[p["tag"]], "tolerance": p["tag"] in TOLERANCE_TAGS,
                "atol": number(gate.get("atol")), "rtol": rtol, "need_atol": max(needs) if needs else None}
    return None


def _failure(name, gates, changed) -> tuple[str, str]:
    if name in changed:
        from harness.measurement.numerics import describe

        flags = describe(changed[name])
        return "numerics_changed", f"kernel {name} changed global numeric state during its call ({flags})"
    g = gates[name]
    return g.tag, g.reason


def _time(cfg, base_spec, timed, ctx, policy):
    """Interleaved timing of every passing candidate, the baseline, and the control.

    Returns the measurement, the input slots, every arm's output buffers (per slot) and,
    per arm, a copy of the output of one measured call chosen at random (``measure``'s spot).
    """
    import torch

    from harness.measurement.correctness.poison import poison_
    from harness.measurement.leftover import TimedWatch
    from harness.measurement.numerics import capture
    from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL, measure
    from harness.workloads.inputs import make_inputs

    from harness.measurement.memory import timing_slots

    qs, _, _ = cfg.shapes()
    n_slots = timing_slots(cfg, policy, ctx.device)
    # Timing inputs come from seeds the gate never uses, so no answer is already known.
    slot_seeds = [TIMING_SEED_OFFSET + ctx.reg.seeds[0] + s for s in range(n_slots)]
    slots = [make_inputs(cfg, seed, "normal", ctx.device) for seed in slot_seeds]
    content = _SlotContent(cfg, slots, slot_seeds, ctx.device)
    arm_specs = {arm_name(spec.name): spec for spec in timed}
    arm_specs[ARM_BASELINE] = base_spec
    arm_specs[ARM_CONTROL] = base_spec  # the baseline again, its own buffers, timed as if it were a candidate
    outs = {name: [torch.empty(qs, dtype=slots[0][0].dtype, device=ctx.device) for _ in range(n_slots)]
            for name in arm_specs}

    def arm(name):
        fn = arm_specs[name].fn
        o = outs[name]

        def call(slot: int) -> None:
            q, k, v = slots[slot]
            fn(q, k, v, o[slot], causal=cfg.causal, scale=cfg.scale)

        return call

    def poison(name):
        o = outs[name]

        def fill(slot: int) -> None:
            poison_(o[slot])  # the gate's poison: what a timed call leaves unwritten is told apart

        return fill

    snaps: dict = {}
    watch = TimedWatch(capture())  # the state pinned for this config (numerics.apply is in force)

    def snapshot(name):
        o = outs[name]

        def keep(slot: int) -> None:
            watch.after(name)  # first: the copy below is the harness's work, not the call's
            if name in snaps:
                snaps[name].copy_(o[slot])
            else:
                snaps[name] = o[slot].clone()

        return keep

    def keep(name):
        o = outs[name]

        def copy(slot: int, how: str) -> None:
            held = content.kept.setdefault(name, {})
            if how in held:
                held[how].copy_(o[slot])
            else:
                held[how] = o[slot].clone()

        return copy

    m = measure({name: arm(name) for name in arm_specs}, n_slots=n_slots, policy=policy, device=ctx.device,
                prepare={name: poison(name) for name in arm_specs},
                spot={name: snapshot(name) for name in arm_specs}, spot_seed=spot_seed(cfg, ctx),
                watch=watch.before, refresh=content.refresh, keep_refreshed={name: keep(name) for name in arm_specs},
                refresh_seed=refresh_seed(cfg, ctx))
    watch.settle()  # the last timed call's changes
    return m, slots, outs, snaps, content, watch


class _SlotContent:
    """The timing's input slots as the content refresh changes them: ``refresh`` (measure's
    hook) rewrites a slot in place or replaces its tensors (``slots`` is the list the arms
    read at each call); ``inputs`` gives the content an output was computed from, the slot's
    current tensors or, for an earlier version, regenerated from its recorded seed.
    ``kept``: per arm and kind, the copy of one refreshed call's output (``keep_refreshed``)."""

    def __init__(self, cfg, slots, slot_seeds, device):
        self.cfg, self.slots, self.slot_seeds, self.device = cfg, slots, slot_seeds, device
        self.kept: dict = {}

    def refresh(self, slot: int, seed: int, how: str) -> None:
        from harness.measurement.timing.refresh import IN_PLACE, SHAM
        from harness.workloads.inputs import fill_inputs_, make_inputs

        if how == SHAM:  # the same generation, into buffers no call reads: the content stays
            make_inputs(self.cfg, seed, "normal", self.device)
        elif how == IN_PLACE:
            fill_inputs_(*self.slots[slot], self.cfg, seed, "normal")
        else:  # new tensors, new addresses; the old ones are released once replaced
            self.slots[slot] = make_inputs(self.cfg, seed, "normal", self.device)
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)  # written before the timed call's window opens

    def inputs(self, m, slot: int, version: int | None):
        """(q, k, v) of ``slot`` at content ``version`` (None: never refreshed, the current)."""
        rec = m.refresh
        if rec is None or version is None:
            return self.slots[slot]
        current = max((i + 1 for i, r in enumerate(rec.refreshes) if r["slot"] == slot), default=0)
        if version == current:
            return self.slots[slot]
        from harness.workloads.inputs import make_inputs

        return make_inputs(self.cfg, rec.content_seed(self.slot_seeds[slot], version), "normal", self.device)

    @staticmethod
    def describe(m, version: int | None) -> str:
        """Which content a version is, for a failure's reason."""
        if m.refresh is None or not version:
            return ""
        r = m.refresh.refreshes[version - 1]
        return (f" (content of refresh {version}: measured round {r['round']}, rewritten "
                f"{r['how'].replace('_', ' ')}, seed {r['seed']})")


def _spot_failure(cfg, content, m, snaps, name, ctx):
    """The check of arm ``name``'s randomly chosen timed call (its output copy against a fresh
    reference on that call's inputs), or None when it passed."""
    from harness.measurement.correctness.after_timing import check_timed_output

    chosen = m.spot_calls.get(name)
    if chosen is None or name not in snaps:
        return None
    version = chosen.get("version")
    q, k, v = content.inputs(m, chosen["slot"], version)
    rep = check_timed_output(cfg, q, k, v, snaps[name], atol=ctx.reg.atol[cfg.dtype], rtol=ctx.reg.rtol[cfg.dtype],
                             label=f"{name}: measured call {chosen['call']} (chosen at random, seed "
                                   f"{m.spot_seed}) on slot {chosen['slot']}{content.describe(m, version)}",
                             what="output of that call")
    return None if rep.passed else rep


def _refreshed_failure(cfg, content, m, kept, name, ctx):
    """The check of arm ``name``'s kept calls on new content (one per kind of refresh: in
    place, where a kernel keyed by address answers for the old content; fresh buffers),
    each against a reference on the content it ran on; the first failure, or None."""
    from harness.measurement.correctness.after_timing import check_timed_output

    checks = m.refresh.checks.get(name, {}) if m.refresh is not None else {}
    for how, copy in kept.get(name, {}).items():
        c = checks.get(how)
        if c is None:
            continue
        q, k, v = content.inputs(m, c["slot"], c["version"])
        rep = check_timed_output(cfg, q, k, v, copy, atol=ctx.reg.atol[cfg.dtype], rtol=ctx.reg.rtol[cfg.dtype],
                                 label=f"{name}: measured round {c['round']} on slot {c['slot']}, its inputs "
                                       f"rewritten {how.replace('_', ' ')} just before the call"
                                       f"{content.describe(m, c['version'])}",
                                 what="output of the first call on the new content")
        if not rep.passed:
            return rep
    return None


def _memory_failure(m, arm) -> tuple[str | None, str] | None:
    """(tag, reason) when arm ``arm`` answers from memory of its inputs (tag REMEMBERS_TAG), or
    (None, reason) when that could not be judged (fail closed: no number); None when it passed."""
    from harness.measurement.timing.refresh import REMEMBERS_TAG

    if m.refresh is None or arm not in m.refresh.memory:
        return None
    j = m.refresh.memory[arm]
    if not j.judged:
        if m.throttled or min(len(a.samples) for a in m.arms.values()) < m.policy.min_samples:
            return None  # no number anyway: _result says why (throttled, undersampled)
        return None, f"{arm}: {j.reason}"
    return (REMEMBERS_TAG, j.reason) if j.remembers else None


def _sustained(cfg, spec, slots, outs, ctx):
    """The candidate's calls back to back at the sustained clock (rates for a rate bar), and
    the check of the last call's output (poisoned before every call), or None when it passed."""
    from harness.measurement.correctness.after_timing import check_timed_output
    from harness.measurement.correctness.poison import poison_
    from harness.measurement.numerics import capture, describe, diff, pin
    from harness.measurement.timing.sustained import sustain

    def call(slot: int) -> None:
        q, k, v = slots[slot]
        spec.fn(q, k, v, outs[slot], causal=cfg.causal, scale=cfg.scale)

    def poison(slot: int) -> None:
        poison_(outs[slot])  # the gate's poison: what a call leaves unwritten is told apart

    state = capture()  # the pinned state (numerics.apply is in force)
    sus = sustain(arm_name(spec.name), call, n_slots=len(slots), device=ctx.device, prepare=poison)
    moved = diff(state, capture())
    if moved:
        pin(state)
        return sus, Failure("numerics_changed", f"its calls back to back changed global state ({describe(moved)})")
    q, k, v = slots[sus.last_slot]
    rep = check_timed_output(cfg, q, k, v, outs[sus.last_slot], atol=ctx.reg.atol[cfg.dtype], rtol=ctx.reg.rtol[cfg.dtype],
                             label=f"slot {sus.last_slot}", what="output of the last call timed back to back")
    return sus, (None if rep.passed else rep)


def _empty_window(policy, device):
    from harness.measurement.timing import empty_window

    return empty_window(policy, device)


def _empty_failure(m, arm, empty) -> str | None:
    """Why an arm's timing is an empty window's while the baseline's is not, or None."""
    from harness.measurement.timing import ARM_BASELINE, EMPTY_WINDOW_FACTOR, told_apart

    cand, base = m.arms[arm].stats, m.arms[ARM_BASELINE].stats
    if told_apart(cand, empty.stats) or not told_apart(base, empty.stats):
        return None
    return (f"its timed window reads {cand.median * 1e3:.3g} µs, which cannot be told apart from an empty "
            f"window on this device in mode {empty.mode} ({empty.stats.median * 1e3:.3g} µs, factor "
            f"{EMPTY_WINDOW_FACTOR:g}), while the baseline's reads {base.median * 1e3:.3g} µs: its work runs "
            f"where the timed window does not see it")


def _timed_output_failure(cfg, content, m, arm, outs, ctx):
    """The first failing timed output among the checked slots, or None."""
    from harness.measurement.correctness.after_timing import check_timed_output

    # The first and last rotation slots: each holds what the last timed call on it wrote,
    # computed from the content that call ran on (the refresh may have changed it since).
    for slot in sorted({0, len(content.slots) - 1}):
        version = m.refresh.last_versions[arm][slot] if m.refresh is not None else None
        q, k, v = content.inputs(m, slot, version)
        rep = check_timed_output(cfg, q, k, v, outs[slot], atol=ctx.reg.atol[cfg.dtype], rtol=ctx.reg.rtol[cfg.dtype],
                                 label=f"slot {slot}{content.describe(m, version)}")
        if not rep.passed:
            return rep
    return None


def _memory(pred, peak) -> dict:
    """Predicted vs measured peak; measured is this config's own, above what was held when it
    started (``held_bytes``)."""
    return {"predicted_peak_bytes": pred.peak_bytes, "measured_peak_bytes": peak[0], "held_bytes": peak[1],
            "breakdown": pred.breakdown}


def _result(cfg, spec, base_spec, ctx, policy, m, gates, pred, peak, numerics, details, empty=None,
            sus=None) -> Outcome:
    """A `result` row; its ``metrics`` are the metric table's (governance/metrics.py)."""
    from harness.governance.metrics import INTERLEAVED, SUSTAINED, result_metrics
    from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL

    cand, base, ctl = m.arms[arm_name(spec.name)], m.arms[ARM_BASELINE], m.arms[ARM_CONTROL]
    kept = min(len(a.samples) for a in (cand, base, ctl))
    if m.throttled or kept < policy.min_samples:
        # No number from a measurement the protocol could not vouch for: clocks dropped too
        # many rounds (or could not be verified), or it stopped before min_samples.
        kind = THROTTLED if m.throttled else SKIPPED
        why = (m.throttle_note if m.throttled else
               f"timing stopped ({m.stop_reason}) with {kept} kept rounds, fewer than min_samples "
               f"{policy.min_samples}: raise [timing] timeout_s")
        # The measured peak is kept: memory does not depend on the clocks.
        return Outcome(kind, {**_base(cfg, spec.name, ctx), "reason": why, "undersampled": kind == SKIPPED,
                              "timing": m.to_row(), "policy": policy.as_dict(), "memory": _memory(pred, peak)})
    from harness.measurement.timing.sustained import rates

    speedup, lo, hi = m.speedup(candidate=arm_name(spec.name), baseline=ARM_BASELINE)
    control = m.control_ratio
    # Absolute rates: from the sustained phase when the bar judges them, else from the
    # interleaved rounds; the clock and power recorded are those the rates were measured at.
    if sus is not None:
        ms, sm_mhz, power_w = sus.median_ms, sus.sm_mhz, sus.power_w
    else:
        ms = cand.stats.median
        sm_mhz = m.clock.mean_mhz if m.clock else None
        power_w = m.clock.power_mean_w if m.clock else None
    r = rates(cfg, ms)
    tflops, gbps, kv_gbps = r["tflops"], r["gbps"], r["kv_gbps"]
    metrics = {"ms": ms, "baseline_ms": base.stats.median, "control_ms": ctl.stats.median, "speedup": speedup,
               "speedup_ci_low": lo, "speedup_ci_high": hi, "control": control, "tflops": tflops, "gbps": gbps,
               "kv_gbps": kv_gbps, "tflops_frac": None, "gbps_frac": None, "kv_gbps_frac": None,
               # Host time of enqueuing one timed call (nvbench's CPU time beside GPU time).
               "host_us": m.host_us.get(arm_name(spec.name)), "baseline_host_us": m.host_us.get(ARM_BASELINE),
               "sm_mhz": sm_mhz, "power_w": power_w,
               # The candidate's median in the interleaved rounds (the speedup's numerator).
               "interleaved_ms": cand.stats.median}
    impossible = floor = None
    if ctx.ceilings:
        from harness.measurement.ceilings import Ceilings, impossible as reductio

        ceil = Ceilings.from_row(ctx.ceilings)
        metrics.update(ceil.fractions(r, cfg.dtype))
        floor, below, base_below = _floor_check(cfg, ctx, ceil, m, arm_name(spec.name), sus)
        if base_below is not None:
            # Fail closed: a baseline (or control) call faster than the device can go means the
            # ceilings are wrong or the baseline skips work; no speedup against it is believable.
            return Outcome(SKIPPED, {
                **_base(cfg, spec.name, ctx), "floor": floor, "timing": m.to_row(), "policy": policy.as_dict(),
                "reason": f"baseline {base_spec.name} timed below the physical floor [below_floor]: {base_below} "
                          f"(re-measure the ceilings with `bench ceilings --force`, or the baseline skips work)"})
        # The median-rate reductio on GPUs only: on the CPU the "ceilings" are short host
        # measurements on a shared machine, not peaks (the per-call floor allows for that
        # with its CPU margin).
        why = [reductio(tflops, gbps, ceil, cfg.dtype) if ctx.device == "cuda" else None, below]
        impossible = "; ".join(w for w in why if w) or None
    mine = (arm_name(spec.name), ARM_BASELINE, ARM_CONTROL)  # another candidate's quanta are its own row's
    noise = rig_noise(control, policy.control_tolerance, m.host_gaps, {a: q for a, q in m.quanta.items() if a in mine},
                      (m.n_waited, len(m.rounds)), policy.max_drop_fraction)
    payload = {
        **_base(cfg, spec.name, ctx),
        "metrics": result_metrics(metrics),
        "timing": m.to_row(),
        "policy": policy.as_dict(),
        "empty_window": empty.as_dict() if empty is not None else None,
        "rate_protocol": SUSTAINED if sus is not None else INTERLEAVED,
        "sustained": sus.as_dict() if sus is not None else None,
        "rig_noisy": bool(noise),
        "rig_noise": noise,
        "impossible": impossible,
        "floor": floor,
        "memory": _memory(pred, peak),
        "gate": {"candidate": gates[spec.name].to_row(), "baseline": gates[base_spec.name].to_row()},
        "numerics": numerics,
        "kernel_numerics": {"candidate": spec.numerics, "baseline": base_spec.numerics},
        "kernel_details": details,
    }
    return Outcome(RESULT, payload)


def _floor_check(cfg, ctx, ceil, m, cand_arm, sus) -> tuple[dict, str | None, str | None]:
    """Every timed call against the physical floor (measurement/floor.py): the row's ``floor``
    (the floors and each arm's fastest call), why the candidate is impossible, and why the
    baseline or control is (None when not). Dropped rounds count: no clock excuses them."""
    from harness.measurement import floor as physical
    from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL

    cache, source = physical.cache_bytes(ctx.device)
    rounds = physical.floor(cfg, ceil, m.effective_mode, cache, source)
    calls = [physical.judge(arm, "rounds", {"kept": m.arms[arm].samples, "dropped": m.arms[arm].dropped_samples},
                            rounds) for arm in (cand_arm, ARM_BASELINE, ARM_CONTROL)]
    sustained = None
    if sus is not None:
        # On a GPU do_bench's flush precedes every sustained call, whatever the line's mode.
        sustained = physical.floor(cfg, ceil, "cold" if sus.flush != "none" else "host", cache, source)
        calls.append(physical.judge(cand_arm, "sustained", {"sustained": sus.samples}, sustained))
    row = {"margin": rounds.margin, "rounds": rounds.as_dict(),
           "sustained": sustained.as_dict() if sustained is not None else None,
           "calls": [c.as_dict() for c in calls]}
    cand = "; ".join(c.reason() for c in calls if c.arm == cand_arm and c.impossible) or None
    base = "; ".join(c.reason() for c in calls if c.arm != cand_arm and c.impossible) or None
    return row, cand, base


def _source(spec, root: str | None) -> dict:
    """Which file the kernel came from and its SHA-256, and for a kernel of an installed
    package (a ``bench.kernels`` entry point) that package's name and version: the commit
    stamp covers this repository only. A path inside the repository is relative to its root."""
    import hashlib
    from pathlib import Path

    p = Path(spec.source)
    if root is not None and p.resolve().is_relative_to(Path(root).resolve()):
        shown = p.resolve().relative_to(Path(root).resolve()).as_posix()
    else:  # outside the repository: the module's path (a row never names a directory of a machine)
        from harness.governance.codeprov import module_path

        shown = module_path(p)
    return {"path": shown, "sha256": hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
            "distribution": spec.distribution}


def fault_outcome(cfg: Config, candidate: str, ctx: SweepContext, reason: str, fault: dict) -> Outcome:
    """The `crashed` row of a pair whose kernel took its worker down (killed, hung, poisoned
    its device): ``fault`` says in which phase, and the worker's last output."""
    return Outcome(CRASHED, {**_base(cfg, candidate, ctx), "reason": reason, "fault": fault})


def crashed_outcomes(cfg: Config, candidates, ctx: SweepContext, exc: BaseException) -> list[Outcome]:
    """A kernel or harness failure inside one config: recorded, the sweep goes on."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return [Outcome(CRASHED, {**_base(cfg, c, ctx), "reason": f"{type(exc).__name__}: {exc}".splitlines()[0],
                                "traceback": "".join(tb[-TRACEBACK_FRAMES:])}) for c in candidates]
