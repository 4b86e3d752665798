"""Stage 3, timing: the interleaved rounds of every passing candidate, the baseline and the control.

Timing inputs come from seeds the gate never uses. Each arm writes its own output buffers
(every output the workload declares, per slot), poisoned before every call; one measured call
per arm, chosen at random, keeps a copy of its outputs, and the content refresh's calls keep
theirs, for the after-timing checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.measurement.timing.results import arm_name
from harness.pipeline import phase
from harness.pipeline.context import refresh_seed, spot_seed
from harness.workloads.seeds import TIMING_SEED_OFFSET
from harness.pipeline.gate import Gated
from harness.measurement.correctness.poison import poison_
from harness.measurement.leftover import TimedWatch
from harness.measurement.numerics import capture
from harness.measurement.memory import timing_slots
from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL, CallHooks, criterion_for, measure
from harness.measurement.timing.refresh import IN_PLACE, SHAM


@dataclass(frozen=True)
class Timed:
    """The timing's answer: the measurement, the input slots (``content`` as the refresh left
    them), every arm's output buffers, the spot copies (``snaps``), the timed-call watch, the
    bytes the config found held when it started (its measured peak is read after the checks,
    ``Checked.peak``) and the numeric state pinned for it (as a row records it)."""

    gated: Gated
    numerics: dict
    m: object
    slots: list
    outs: dict
    snaps: dict
    content: object
    watch: object
    held: int  # bytes held when the config started (memory.reset_peak)

    def timing_row(self) -> dict:
        """The measurement's row, with the timed-drain confirmations where any ran (the watch's
        calls made again: measurement/leftover.py), so a row says what its number went through."""
        row = self.m.to_row()
        if self.watch.confirmed:
            row["drain_confirm"] = dict(self.watch.confirmed)
        return row


def time_arms(g: Gated, held: int, numerics: dict) -> Timed:
    """Time the gate's passing candidates against the baseline and the control (under the
    numeric state the caller pinned, ``numerics``)."""
    b = g.budget
    ctx = b.ctx
    phase.report((b.base_spec.name, *(spec.name for spec in g.timed)), phase.TIMING)
    m, slots, outs, snaps, content, watch = _time(b.task.config, b.base_spec, g.timed, ctx, ctx.reg.timing)
    phase.report(None, phase.CHECK)
    return Timed(g, numerics, m, slots, outs, snaps, content, watch, held)


def _time(cfg, base_spec, timed, ctx, policy):
    """Interleaved timing of every passing candidate, the baseline, and the control.

    Returns the measurement, the input slots, every arm's output buffers (per slot, a tuple
    of the call's outputs) and, per arm, a copy of the outputs of one measured call chosen at
    random (``measure``'s spot).
    """
    wl = ctx.workload
    n_slots = timing_slots(cfg, policy, ctx.device, workload=wl)
    # Timing inputs come from seeds the gate never uses, so no answer is already known.
    slot_seeds = [TIMING_SEED_OFFSET + ctx.reg.seeds[0] + s for s in range(n_slots)]
    slots = [tuple(wl.make_inputs(cfg, seed, wl.timing_family, ctx.device)) for seed in slot_seeds]
    content = SlotContent(cfg, slots, slot_seeds, ctx.device, wl)
    arm_specs = {arm_name(spec.name): spec for spec in timed}
    arm_specs[ARM_BASELINE] = base_spec
    arm_specs[ARM_CONTROL] = base_spec  # the baseline again, its own buffers, timed as if it were a candidate
    outs = {name: [tuple(wl.allocate_outputs(cfg, ctx.device)) for _ in range(n_slots)] for name in arm_specs}

    def arm(name):
        fn = arm_specs[name].fn
        o = outs[name]

        def call(slot: int) -> None:
            wl.call(fn, slots[slot], o[slot], cfg)

        return call

    def poison(name):
        o = outs[name]

        def fill(slot: int) -> None:
            for out in o[slot]:
                poison_(out)  # the gate's poison: what a timed call leaves unwritten is told apart

        return fill

    snaps: dict = {}
    watch = TimedWatch(capture())  # the state pinned for this config (numerics.apply is in force)

    def snapshot(name):
        o = outs[name]

        def keep(slot: int) -> None:
            watch.after(name)  # first: the copy below is the harness's work, not the call's
            copy_into(snaps, name, o[slot])

        return keep

    def keep(name):
        o = outs[name]

        def copy(slot: int, how: str) -> None:
            copy_into(content.kept.setdefault(name, {}), how, o[slot])

        return copy

    peers = [(arm_name(p), arm_name(c)) for p, c in ctx.reg.peer_pairs(cfg, [spec.name for spec in timed])]
    m = measure({name: arm(name) for name in arm_specs}, n_slots=n_slots, policy=policy, device=ctx.device,
                criterion=criterion_for(policy, tuple(arm_specs), peers),
                hooks=CallHooks(prepare={name: poison(name) for name in arm_specs},
                                spot={name: snapshot(name) for name in arm_specs}, spot_seed=spot_seed(cfg, ctx),
                                refresh=content.refresh, keep_refreshed={name: keep(name) for name in arm_specs},
                                refresh_seed=refresh_seed(cfg, ctx), watch=watch.before))
    watch.settle()  # the last timed call's changes
    return m, slots, outs, snaps, content, watch


def copy_into(held: dict, key, outs: tuple) -> None:
    """Keep a copy of a call's outputs as ``held[key]``: into the copies already kept there (no
    allocation between timed calls), else new ones."""
    if key in held:
        for kept, out in zip(held[key], outs):
            kept.copy_(out)
    else:
        held[key] = tuple(out.clone() for out in outs)


class SlotContent:
    """The timing's input slots as the content refresh changes them: ``refresh`` (measure's
    hook) rewrites a slot in place or replaces its tensors (``slots`` is the list the arms
    read at each call); ``inputs`` gives the content an output was computed from, the slot's
    current tensors or, for an earlier version, regenerated from its recorded seed.
    ``kept``: per arm and kind, the copy of one refreshed call's output (``keep_refreshed``)."""

    def __init__(self, cfg, slots, slot_seeds, device, workload):
        self.cfg, self.slots, self.slot_seeds, self.device = cfg, slots, slot_seeds, device
        self.workload = workload
        self.kept: dict = {}
        self._drawn: tuple | None = None  # ((slot, version), its regenerated inputs): the last one

    def refresh(self, slot: int, seed: int, how: str) -> None:
        wl = self.workload
        fam = wl.timing_family
        if how == SHAM:  # the same generation, into buffers no call reads: the content stays
            wl.make_inputs(self.cfg, seed, fam, self.device)
        elif how == IN_PLACE:
            wl.fill_inputs(self.cfg, self.slots[slot], seed, fam)
        else:  # new tensors, new addresses; the old ones are released once replaced
            self.slots[slot] = tuple(wl.make_inputs(self.cfg, seed, fam, self.device))
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)  # written before the timed call's window opens

    def inputs(self, m, slot: int, version: int | None):
        """The inputs of ``slot`` at content ``version`` (None: never refreshed, the current)."""
        rec = m.refresh
        if rec is None or version is None:
            return self.slots[slot]
        current = max((i + 1 for i, r in enumerate(rec.refreshes) if r["slot"] == slot), default=0)
        if version == current:
            return self.slots[slot]
        if self._drawn is not None and self._drawn[0] == (slot, version):
            return self._drawn[1]  # the arms' checked calls share contents: drawn once for all of them

        self._drawn = None  # one regenerated content at a time (the VRAM model counts one)
        wl = self.workload
        inputs = tuple(wl.make_inputs(self.cfg, rec.content_seed(self.slot_seeds[slot], version), wl.timing_family,
                                      self.device))
        self._drawn = ((slot, version), inputs)
        return inputs

    def release(self) -> None:
        """Drop the kept output copies and the last regenerated content (the checks on earlier
        contents are done)."""
        self.kept.clear()
        self._drawn = None

    @staticmethod
    def describe(m, version: int | None) -> str:
        """Which content a version is, for a failure's reason."""
        if m.refresh is None or not version:
            return ""
        r = m.refresh.refreshes[version - 1]
        return (f" (content of refresh {version}: measured round {r['round']}, rewritten "
                f"{r['how'].replace('_', ' ')}, seed {r['seed']})")
