"""The integration stage of a sweep: the line's model step with the baseline, each candidate
and the baseline again, after the kernel grid (registration/integration.py says why).

1. **Gate.** The step runs once in float64 through the harness's reference attention, then
   once per kernel in the step's dtype; an output off by more than ``[integration]`` atol +
   rtol·|ref| gives that candidate an ``integration`` row with ``correct = false`` and no
   number (a failing baseline: every candidate's, and nothing is timed).
2. **Timing.** ``measure`` times the step arms interleaved (baseline, candidates, control —
   the baseline again on its own model copy) under the line's timing policy, clocks and
   throttle rule included; graph mode times the step in hot mode (a whole step is not
   captured). Each candidate's row carries ``step_gain`` = baseline / candidate − 1.
3. **In situ.** The step runs INSITU_STEPS more times per kernel with each hook call timed
   (the held CUDA-event timer of the kernel arms on a GPU, a host timer on the CPU): the kernel's time inside
   the step, the op's share of the baseline step, the probe → in-situ factor (the kernel's
   grid row at the step's attention shape over its in-situ time) and the step gain that
   probe speedup predicts.
4. **Amdahl.** A measured gain above 1/(1 − share) − 1 (the stated op_share, else the
   measured one), its 95% interval's low end included (noise alone does not flag it), is
   recorded as ``amdahl_violated`` with the share the op must have had.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from harness.ledger.line_payloads import InSitu, Probe, StepCheck
from harness.ledger.payloads import Metrics
from harness.registration import integration as amdahl
from harness.registration.bar import reduce
from harness.vocab.metrics import step_metrics
from harness.vocab.outcomes import RESULT, current_rows, is_replicate
from harness.measurement.correctness.figures import compare
from harness.workloads import Config
from harness.integration import CallTimer, load_step, reference_attention, use_kernel
from harness.measurement.numerics import apply
from harness.measurement.correctness.checks import exception_text
from harness.measurement.timing import measure
from harness.measurement.timing.results import ARM_BASELINE, ARM_CONTROL, arm_name
from harness.registry import get_kernel

# Steps run per kernel with every hook call timed (after one untimed warm-up step).
INSITU_STEPS = 5
INSITU_WARMUP_STEPS = 1
# The mode a step is timed in when the line's is graph (a model step is not graph-captured).
STEP_MODE_FOR_GRAPH = "hot"


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def _close(out, ref, atol: float, rtol: float) -> dict:
    """The step output against the float64 step (the gate's ``compare``): whether every element
    is within atol + rtol·|ref|, the worst error, and, failing, which element, by how much, in
    how many ULPs."""
    o = out.detach()
    if tuple(o.shape) != tuple(ref.shape):
        return {"ok": False, "why": f"output shape {tuple(o.shape)} differs from the float64 step's {tuple(ref.shape)}"}
    fig = compare(o, ref, atol=atol, rtol=rtol)
    return {"ok": fig.passed, "max_abs_err": fig.max_abs_err, "finite": fig.n_nonfinite + fig.n_unwritten == 0,
            "why": None if fig.passed else fig.summary()}


def _probe(rows, key: str | None, cand: str) -> Probe:
    """The kernel grid's result at the step's attention shape (``key``): probe ms of the
    candidate and the baseline, and the speedup; else its geomean speedup over the grid."""
    results = [r for r in current_rows(rows) if r.kind == RESULT and r.candidate == cand and not is_replicate(r)]
    at = [r for r in results if r.config_key == key] if key else []
    if at:
        m = Metrics.from_row(at[-1].metrics)
        return Probe(config_key=key, source="the grid row at the step's attention shape", speedup=m.speedup,
                     ms=m.interleaved_ms, baseline_ms=m.baseline_ms)
    speedups = [s for r in results if r.metrics and (s := Metrics.from_row(r.metrics).speedup)]
    if not speedups:
        return Probe(config_key=key, source="no result row of the candidate")
    g = reduce("geomean", speedups)
    return Probe(source=f"geomean speedup over {len(speedups)} grid rows (no row at the step's attention shape "
                        f"{key})", speedup=g)


def _shape_key(reg, shapes: list[tuple]) -> str | None:
    """The grid config key of the step's attention calls (None: calls of several shapes)."""
    if not shapes or len(set(shapes)) != 1:
        return None
    b, h, n, d, hkv, dt, causal = shapes[0]
    return Config(reg.workload, b, h, hkv, n, d, dt, causal).key()


@dataclasses.dataclass(frozen=True)
class _Timed:
    """One kernel's hook calls timed in situ: the figures its row keeps (``record``), and the
    attention shapes the calls had and the timer that timed them."""

    record: InSitu
    shapes: list
    timer: str


def _insitu(run, fn, device: str) -> _Timed:
    """Each hook call of INSITU_STEPS steps timed: per-call median, calls and op ms per step."""
    with use_kernel(fn):
        for _ in range(INSITU_WARMUP_STEPS):
            run()
    per_step, timer = [], CallTimer(device)
    with use_kernel(fn, timer=timer):
        for _ in range(INSITU_STEPS):
            before = len(timer.ms)
            run()
            per_step.append(sum(timer.ms[before:]))
    calls = len(timer.ms) // INSITU_STEPS if timer.ms else 0
    return _Timed(InSitu(call_ms=statistics.median(timer.ms) if timer.ms else None, calls_per_step=calls,
                         op_ms_per_step=statistics.median(per_step), steps=INSITU_STEPS), timer.shapes, timer.what)


def run(reg, device: str, rows) -> list[dict]:
    """The integration rows' payloads (one per candidate) for ``reg`` on ``device``, given the
    line's ledger rows (the kernel grid's results: the probe), under the line's [numerics]
    pinned as the kernel grid's configs are."""
    with apply(reg.numerics.state()):
        return _run(reg, device, rows)


@dataclasses.dataclass(frozen=True)
class _Steps:
    """One line's model step, ready to judge: per kernel its step (``steps``, its own model
    copy; ``control``: the baseline's second copy) and its gate against the float64 step
    (``gates``), the tolerance those were judged under (``tol``), and the ledger's rows (the
    probe's kernel-grid results)."""

    reg: object
    device: str
    rows: list
    kernels: dict
    steps: dict
    control: object
    gates: dict
    tol: dict

    def row(self, cand, **fields) -> dict:
        """A candidate's integration row payload."""
        spec = self.reg.integration
        return {"baseline": self.reg.baseline, "step": spec.step, "dtype": spec.dtype, "candidate": cand,
                "metrics": None, **fields}


def _run(reg, device: str, rows) -> list[dict]:
    st = _gated_steps(reg, device, rows)
    gates = st.gates
    checks = {name: StepCheck.from_row(g) for name, g in gates.items()}
    if not checks[reg.baseline].ok:
        return [st.row(c, correct=False, gate={**st.tol, "baseline": gates[reg.baseline]},
                       error=f"the baseline's step fails the float64 check ({checks[reg.baseline].why}): "
                             f"nothing was timed") for c in reg.candidates]
    passing = [c for c in reg.candidates if checks[c].ok]
    out = {c: st.row(c, correct=False, gate={**st.tol, "candidate": gates[c], "baseline": gates[reg.baseline]},
                     error=f"the candidate's step fails the float64 check ({checks[c].why}): not timed")
           for c in reg.candidates if c not in passing}
    if passing:
        out.update(_timed_rows(st, passing))
    return [out[c] for c in reg.candidates]


def _gated_steps(reg, device: str, rows) -> _Steps:
    """Every kernel's step built and run once against the step in float64 through the reference
    attention (a kernel that raises inside the step is recorded, never timed)."""
    import torch

    spec = reg.integration
    factory = load_step(spec.step)
    dtype = _torch_dtype(spec.dtype)
    kernels = {name: get_kernel(name).fn for name in (reg.baseline, *reg.candidates)}
    with use_kernel(reference_attention):
        ref = factory(device, torch.float64)().detach().to(torch.float64)
    steps = {name: factory(device, dtype) for name in kernels}
    control_step = factory(device, dtype)  # the baseline again, its own model copy
    gates = {}
    for name, fn in kernels.items():
        try:
            with use_kernel(fn):
                out = steps[name]()
            gates[name] = _close(out, ref, spec.atol, spec.rtol)
        except Exception as exc:  # a kernel that raises inside the step: recorded, never timed
            gates[name] = {"ok": False, "why": exception_text(exc)}
    tol = {"atol": spec.atol, "rtol": spec.rtol, "against": "the step in float64 through the reference attention"}
    return _Steps(reg, device, rows, kernels, steps, control_step, gates, tol)


def _timed_rows(st: _Steps, passing: list[str]) -> dict:
    """The passing candidates' rows: the step arms timed interleaved, then each in situ."""
    reg, kernels, steps, gates = st.reg, st.kernels, st.steps, st.gates

    def arm(step, fn):
        def call(slot):
            with use_kernel(fn):
                step()
        return call

    arms = {ARM_BASELINE: arm(steps[reg.baseline], kernels[reg.baseline]),
            **{arm_name(c): arm(steps[c], kernels[c]) for c in passing},
            ARM_CONTROL: arm(st.control, kernels[reg.baseline])}
    policy = reg.timing
    if policy.mode == "graph":
        policy = dataclasses.replace(policy, mode=STEP_MODE_FOR_GRAPH)
    m = measure(arms, n_slots=1, policy=policy, device=st.device)
    timing = m.to_row(include_rounds=False)
    b_ms = m.arms[ARM_BASELINE].stats.median
    if not math.isfinite(b_ms):  # every round dropped: no number, as a kernel pair's skipped row
        why = f"the step's timing kept no round (stopped: {m.stop_reason}): raise [timing] timeout_s"
        return {c: st.row(c, correct=True, gate={**st.tol, "candidate": gates[c]}, timing=timing,
                          throttled=bool(m.throttled), rig_noisy=True, error=why) for c in passing}
    situ_b = _insitu(steps[reg.baseline], kernels[reg.baseline], st.device)
    out = {}
    for c in passing:
        ratio = m.speedup(candidate=arm_name(c))[0]
        if not math.isfinite(ratio):
            out[c] = st.row(c, correct=True, gate={**st.tol, "candidate": gates[c]}, timing=timing, rig_noisy=True,
                            throttled=bool(m.throttled), error=f"the step's timing kept no round of {c} "
                                                               f"(stopped: {m.stop_reason})")
            continue
        out[c] = _step_row(st, c, m, {**timing, "step_mode": policy.mode}, situ_b)
    return out


def _step_row(st: _Steps, c: str, m, timing: dict, situ_b: _Timed) -> dict:
    """A timed candidate's row: its step gain, in-situ figures, the probe's prediction, Amdahl."""
    reg, spec = st.reg, st.reg.integration
    b_ms = m.arms[ARM_BASELINE].stats.median
    ratio, ratio_lo, _ = m.speedup(candidate=arm_name(c))
    sb = situ_b.record
    share = sb.op_ms_per_step / b_ms if b_ms > 0 else None
    key = _shape_key(reg, situ_b.shapes)
    situ = _insitu(st.steps[c], st.kernels[c], st.device)
    sc = situ.record
    probe = _probe(st.rows, key, c)
    s = probe.speedup
    t_op = sb.op_ms_per_step
    predicted = (b_ms / (b_ms - t_op * (1 - 1 / s)) - 1) if s and b_ms > t_op * (1 - 1 / s) else None
    gain = ratio - 1 if math.isfinite(ratio) else None
    used_share = spec.op_share if spec.op_share is not None else share
    used = {"value": used_share, "source": (f"stated: {spec.op_share_source}" if spec.op_share is not None else
                                            "measured: the baseline's in-situ op time over its step time")}
    metrics = step_metrics({
        "step_ms": m.arms[arm_name(c)].stats.median, "step_baseline_ms": b_ms, "step_control": m.control_ratio,
        "step_gain": gain, "step_gain_predicted": predicted, "op_share": share,
        "insitu_ms": sc.call_ms, "insitu_baseline_ms": sb.call_ms,
        "probe_factor": probe.ms / sc.call_ms if probe.ms and sc.call_ms else None})
    probe = dataclasses.replace(probe, baseline_factor=(probe.baseline_ms / sb.call_ms
                                                        if probe.baseline_ms and sb.call_ms else None))
    situ_rec = {"candidate": sc.dump(), "baseline": sb.dump(), "config_key": key, "timer": situ.timer}
    return st.row(c, correct=True, gate={**st.tol, "candidate": st.gates[c], "baseline": st.gates[reg.baseline]},
                  metrics=metrics, timing=timing, insitu=situ_rec, probe=probe.dump(),
                  op_share_used=used, amdahl_violated=amdahl.violation(
                      gain, ratio_lo - 1 if math.isfinite(ratio_lo) else None, used_share),
                  throttled=bool(m.throttled), rig_noisy=bool(m.rig_noise_of(arm_name(c))), error=None)
