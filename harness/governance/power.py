"""What a registration can tell apart, shown before any number exists (`bench register`).

Feasibility: the least tolerance per dtype that the float64 reference rounded to the
nearest value of the dtype passes on the gate's own inputs (``measurement.feasible``); a
registered tolerance below it is refused with the arithmetic and that least tolerance: no
kernel could pass the gate, the baseline included.

Correctness: the canaries of ``measurement.canaries`` against the registered tolerance; a
canary that passes at a canary point refuses the registration (naming the canary, the point
and a tolerance that would reject it) unless ``[correctness] accept_weak`` waives it. The
precision downgrades the tolerance can and cannot see are reported.

Timing: the smallest speedup the line can resolve on each device with recorded results in
the line's timing mode — 1 + the 95th percentile of the control arm's |ratio − 1| over
every ledger's results there (the baseline timed against itself), capped by the policy's
``control_tolerance`` (results beyond it are rig-noisy and left out of verdicts); with too
few recorded results, the control tolerance itself. A speedup threshold of the bar inside
that band is warned about: the bar would be decided by rig noise there.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from harness.errors import UserError, shown
from harness.vocab.devices import device_name
from harness.vocab.outcomes import RESULT
from harness.measurement import feasible
from harness.registry import get_kernel, get_workload
from harness.ledger.line_payloads import ResolvedDevice, WorstElement
from harness.ledger.payloads import Metrics, Policy
from harness.ledger.store import recorded

# Recorded results per device below which its control spread is not trusted.
MIN_SPREAD_ROWS = 5
SPREAD_QUANTILE = 0.95
SPEEDUP_METRICS = ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_next_low", "speedup_next_high")


def tolerance_floor(reg) -> dict:
    """Per dtype, the least tolerance the best possible output passes (``measurement.feasible``);
    UserError, with the arithmetic, when the registered tolerance is below it."""
    wl = get_workload(reg.workload)
    found = feasible.floors(reg.configs, atol=reg.atol, rtol=reg.rtol, seeds=reg.seeds, families=reg.families,
                            min_pass_rate=reg.min_pass_rate, baseline=get_kernel(reg.baseline), workload=wl)
    for f in found:
        if not f.passed:
            raise UserError(f"{shown(reg.path)}: {_infeasible(f, wl.output_bound)}")
    return {f.dtype: f.as_dict() for f in found}


def _infeasible(f, bound: str = "") -> str:
    """Why no output in ``f.dtype`` passes the gate, worked out at the deciding element;
    ``bound``: why the workload's outputs are as large as they are (``Workload.output_bound``)."""
    w, u, dt = WorstElement.from_row(f.worst), f.unit_roundoff, f.dtype
    k = math.frexp(abs(w.ref))[1] - 1  # |ref| in [2^k, 2^(k+1)): half a ULP there is u·2^k
    seeds = (f"seed {w.seed}" if len(f.seeds) == 1 else
             f"seed {w.seed} (every seed checked fails: {', '.join(map(str, f.seeds))})")
    return (f"[correctness] {dt} atol {f.atol:g}, rtol {f.rtol:g} is below {dt}'s own rounding, so no kernel can "
            f"pass the gate: the float64 reference rounded to the nearest {dt} (the best output any kernel can "
            f"write) fails it at {w.config}, {seeds}, family {w.family}, element "
            f"({','.join(map(str, w.index))}): |ref| = {abs(w.ref):.4g}, where {dt} (unit roundoff u = "
            f"2^{round(math.log2(u))} = {u:.3g}) rounds by up to u·2^{k} = {w.half_ulp:.3g}; it errs "
            f"{w.err:.3g} > atol + rtol·|ref| = {w.bound:.3g}. Outputs reach |ref| = "
            f"{f.magnitude[w.family]:.4g} on family {w.family}{f' ({bound})' if bound else ''}. The smallest "
            f"tolerance that passes: atol >= {ceil_sig(f.need_atol):g} at rtol "
            f"{f.rtol:g}, or rtol >= {ceil_sig(f.need_rtol):g} at atol {f.atol:g} (a real kernel needs margin "
            f"above it) — loosen [correctness] for {dt}")


def ceil_sig(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits: a printed least tolerance still passes."""
    if x <= 0 or not math.isfinite(x):
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(x / step) * step


def tolerance_power(reg) -> dict:
    """Canary checks and the downgrade report; UserError when a canary passes un-waived."""
    seed = reg.seeds[0]
    # One pass: canaries and downgrades share each point's inputs and reference.
    wl = get_workload(reg.workload)
    names = tuple(dict.fromkeys((*wl.canaries, *wl.downgrade_names(reg.dtypes))))
    every = wl.check_canaries(reg.configs, atol=reg.atol, rtol=reg.rtol, seed=seed, families=reg.families,
                              names=names)
    checks = [c for c in every if c.canary in wl.canaries]
    passing = [c for c in checks if not c.rejected]
    for c in passing:
        if c.canary not in reg.accept_weak:
            raise UserError(
                f"{reg.path}: the registered tolerance cannot fail canary '{c.canary}' ({wl.canaries[c.canary]}) "
                f"at {c.point}: {c.dtype} atol {c.atol:g} rtol {c.rtol:g} lets it through (worst "
                f"{c.worst_ratio:.2f} of the bound); {c.fix()} would reject it — tighten [correctness] there, or "
                f"waive it with [correctness] accept_weak = [\"{c.canary}\"] and say why in a comment")
    return {"canaries": [c.as_dict() for c in checks], "accepted_weak": sorted({c.canary for c in passing}),
            "downgrades": wl.downgrades(every), "subset": wl.canary_subset(seed)}


def _recorded_controls(root: Path, mode: str) -> dict[str, list[float]]:
    """|control − 1| of every result row in ``root``/ledger, per GPU, in timing ``mode``."""
    out: dict[str, list[float]] = {}
    for _, rows in recorded(root):
        for row in rows:
            if row.kind != RESULT or Policy.from_row(row.policy or {}).mode != mode:
                continue
            control = Metrics.from_row(row.metrics or {}).control
            gpu = device_name(row.env or {})
            if isinstance(control, (int, float)) and gpu:
                out.setdefault(gpu, []).append(abs(control - 1.0))
    return out


def timing_resolution(root: Path, reg) -> dict:
    """The smallest resolvable speedup per device, and warnings for bar thresholds inside it."""
    policy = reg.timing
    tol = policy.control_tolerance
    devices = {}
    for gpu, devs in _recorded_controls(root, policy.mode).items():
        if len(devs) >= MIN_SPREAD_ROWS:
            spread = statistics.quantiles(devs, n=100, method="inclusive")[round(SPREAD_QUANTILE * 100) - 1]
            devices[gpu] = ResolvedDevice(n=len(devs), spread=min(spread, tol), observed_spread=spread)
    worst = max((d.spread for d in devices.values()), default=tol)
    warnings = []
    for clause in reg.bar.clauses():
        if clause.aggregate.metric in SPEEDUP_METRICS and 1 / (1 + worst) < clause.threshold < 1 + worst:
            warnings.append(f"bar clause `{clause.text}`: its threshold {clause.threshold:g} lies inside the smallest "
                            f"speedup this line can resolve (1 ± {worst:.3g}, mode {policy.mode}): rig noise decides it")
    return {"mode": policy.mode, "control_tolerance": tol, "devices": {gpu: d.dump() for gpu, d in devices.items()},
            "resolvable_speedup": 1 + worst, "warnings": warnings}
