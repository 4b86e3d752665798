"""Stage 5, the rates: a surviving candidate's figures, judged against what the device can do.

No number comes from a measurement the protocol could not vouch for (clocks dropped too many
rounds, or timing stopped before min_samples). Absolute rates come from the sustained phase
when the bar judges them, else from the interleaved rounds; with the device's ceilings, each
rate's fraction of its peak, every timed call against the physical floor, and the reductio.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab.outcomes import SKIPPED, THROTTLED
from harness.measurement.timing.results import arm_name
from harness.pipeline.checks import Checked, Survivor
from harness.pipeline.context import Outcome
from harness.pipeline.rows import base_row, memory_row
from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL
from harness.measurement.timing.sustained import rates as rates_at
from harness.measurement.ceilings import Ceilings, impossible
from harness.ledger.format import ceilings_where
from harness.vocab.metrics import CEILING_RATES
from harness.measurement.floor import FLOOR_MARGIN
from harness.measurement import floor as physical


@dataclass(frozen=True)
class Rated:
    """A candidate's figures for its `result` row: the metric table's inputs (``metrics``),
    why it is impossible (None: it is not), the floor record and the rig's noise."""

    checked: Checked
    survivor: Survivor
    metrics: dict
    impossible: str | None
    floor: dict | None
    noise: list


def rates(c: Checked, s: Survivor) -> Rated | Outcome:
    """The candidate's figures, or the row that says why it gets none (throttled,
    undersampled, a baseline faster than the device can go)."""
    t = c.timed
    b = t.gated.budget
    cfg, ctx, base_spec, spec, sus, m = b.task.config, b.ctx, b.base_spec, s.spec, s.sus, t.m
    policy = ctx.reg.timing
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
        return Outcome(kind, {**base_row(cfg, spec.name, ctx), "reason": why, "undersampled": kind == SKIPPED,
                              "timing": t.timing_row(), "policy": policy.as_dict(),
                              "memory": memory_row(b.pred, c.peak)})

    speedup, lo, hi = m.speedup(candidate=arm_name(spec.name), baseline=ARM_BASELINE)
    control = m.control_ratio
    # Absolute rates: from the sustained phase when the bar judges them, else from the
    # interleaved rounds; the clock and power recorded are those the rates were measured at.
    if sus is not None:
        ms, sm_mhz, power_w, kcycles = sus.median_ms, sus.sm_mhz, sus.power_w, sus.kcycles
    else:
        ms = cand.stats.median
        sm_mhz = m.clock.mean_mhz if m.clock else None
        power_w = m.clock.power_mean_w if m.clock else None
        # The candidate's own calls at their rounds' clocks (None on the CPU: no SM clock).
        kcycles = m.arm_clocks[arm_name(spec.name)].kcycles if m.arm_clocks else None
    r = rates_at(cfg, ms, ctx.workload)
    tflops, gbps, kv_gbps = r["tflops"], r["gbps"], r["kv_gbps"]
    metrics = {"ms": ms, "baseline_ms": base.stats.median, "control_ms": ctl.stats.median, "speedup": speedup,
               "speedup_ci_low": lo, "speedup_ci_high": hi, "control": control, "tflops": tflops, "gbps": gbps,
               "kv_gbps": kv_gbps, "tflops_frac": None, "gbps_frac": None, "kv_gbps_frac": None,
               # Host time of enqueuing one timed call (nvbench's CPU time beside GPU time).
               "host_us": m.host_us.get(arm_name(spec.name)), "baseline_host_us": m.host_us.get(ARM_BASELINE),
               "sm_mhz": sm_mhz, "power_w": power_w, "cycles": kcycles,
               # The candidate's median in the interleaved rounds (the speedup's numerator).
               "interleaved_ms": cand.stats.median}
    impossible = floor = None
    if ctx.ceilings:
        ceil = Ceilings.from_row(ctx.ceilings)
        metrics.update(ceil.fractions(r, cfg.dtype))
        floor, below, base_below = floor_check(cfg, ctx, ceil, m, arm_name(spec.name), sus)
        base_beyond = "; ".join(f"{arm}: {why}" for arm in (ARM_BASELINE, ARM_CONTROL)
                                if (why := beyond_ceilings(cfg, ctx, ceil, rates_at(cfg, m.arms[arm].stats.median, ctx.workload))))
        if base_below is not None or base_beyond:
            # Fail closed: a baseline (or control) faster than the device can go means the
            # ceilings are wrong or the baseline skips work; no speedup against it is believable.
            said = [f"timed below the physical floor [below_floor]: {base_below}" if base_below else None,
                    f"ran beyond the device's ceilings [beyond_ceiling]: {base_beyond}" if base_beyond else None]
            return Outcome(SKIPPED, {
                **base_row(cfg, spec.name, ctx), "floor": floor, "timing": t.timing_row(), "policy": policy.as_dict(),
                "reason": f"baseline {base_spec.name} {'; and '.join(w for w in said if w)} (re-measure the "
                          f"ceilings with `bench ceilings --force`, or the baseline skips work)"})
        why = [beyond_ceilings(cfg, ctx, ceil, r), below]
        impossible = "; ".join(w for w in why if w) or None
    noise = m.rig_noise_of(arm_name(spec.name))
    return Rated(c, s, metrics, impossible, floor, noise)


def beyond_ceilings(cfg, ctx, ceil, arm_rates: dict) -> str | None:
    """Why ``arm_rates`` (one arm's: sustained.rates) are beyond the device's ceilings, or None:
    every rate a ceiling bounds (metrics.CEILING_RATES), without a cache allowance, at the
    device's reductio margin (floor.FLOOR_MARGIN: IMPOSSIBLE_MARGIN on a GPU; on a CPU, whose
    ceilings are short medians on a shared host, CPU_FLOOR_MARGIN). The per-call floor credits a
    cache with every byte it may hold, so on a CPU, whose caches hold a small config whole, it
    never judged the copy ceiling: this does, whatever the cache."""
    return impossible({k: arm_rates[k] for k in CEILING_RATES}, ceil, cfg.dtype, FLOOR_MARGIN[ceil.device],
                      ceilings_where(ctx.ceilings))


def floor_check(cfg, ctx, ceil, m, cand_arm, sus) -> tuple[dict, str | None, str | None]:
    """Every timed call against the physical floor (measurement/floor.py): the row's ``floor``
    (the floors and each arm's fastest call), why the candidate is impossible, and why the
    baseline or control is (None when not). Dropped rounds count: no clock excuses them."""
    cache, source = physical.cache_bytes(ctx.device)
    rounds = physical.floor(cfg, ceil, m.effective_mode, cache, source, workload=ctx.workload)
    calls = [physical.judge(arm, "rounds", {"kept": m.arms[arm].samples, "dropped": m.arms[arm].dropped_samples},
                            rounds) for arm in (cand_arm, ARM_BASELINE, ARM_CONTROL)]
    sustained = None
    if sus is not None:
        # On a GPU do_bench's flush precedes every sustained call, whatever the line's mode.
        sustained = physical.floor(cfg, ceil, "cold" if sus.flush != "none" else "host", cache, source,
                                   workload=ctx.workload)
        calls.append(physical.judge(cand_arm, "sustained", {"sustained": sus.samples}, sustained))
    row = {"margin": rounds.margin, "rounds": rounds.as_dict(),
           "sustained": sustained.as_dict() if sustained is not None else None,
           "calls": [c.as_dict() for c in calls]}
    cand = "; ".join(c.reason() for c in calls if c.arm == cand_arm and c.impossible) or None
    base = "; ".join(c.reason() for c in calls if c.arm != cand_arm and c.impossible) or None
    return row, cand, base
