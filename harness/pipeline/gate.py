"""Stage 2, the gate: every runnable kernel against the float64 reference, before any timing.

Nothing is timed that has not passed the gate on the same inputs. A kernel that changes
global numeric state during its call is never timed (the TF32 incident), and a baseline
that fails leaves nothing to compare against: its `incorrect` row and a `skipped` row per
candidate, and no timing at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.measurement import clockguard
from harness.measurement.correctness.results import CLOCK_TAMPERED
from harness.pipeline import phase
from harness.pipeline.budget import Budget
from harness.pipeline.context import Outcome
from harness.pipeline.rows import base_row, baseline_failed
from harness.ledger import payloads
from harness.measurement.correctness.gate import BoundaryMemo, GatePolicy, gate, gate_kernels
from harness.measurement.numerics import apply, capture, describe, diff
from harness.measurement import memory
from harness.registry import get_kernel, get_workload


# The boundary cases judged in this process, per (registration, device, pinned numeric state):
# a worker runs many configs of a line, and those that differ only in seq_len share their
# boundary configs (issue 32). A new registration, device or state starts a new memo.
_BOUNDARY_MEMOS: dict = {}


def boundary_memo(reg, device: str, state):
    """This process's memo of boundary cases for ``reg`` on ``device`` under ``state``."""
    return _BOUNDARY_MEMOS.setdefault((reg.line, reg.sha256, str(device), repr(state)), BoundaryMemo())


@dataclass(frozen=True)
class Gated:
    """The gate's answer: each kernel's gate report, the candidates to time (none: nothing is
    timed), the rows of the kernels that failed, and the numeric state the config is pinned to."""

    budget: Budget
    state: object
    gates: dict
    timed: tuple
    rows: tuple[Outcome, ...]


def gate_one(spec, cfg, reg, state, device: str):
    """One kernel's gate under the line's pinned numeric state: its report, and the numeric
    flags its call changed (empty: none)."""
    phase.report(spec.name, phase.GATE)
    with apply(state) as pinned:
        g = gate(spec, cfg, workload=get_workload(reg.workload), seeds=reg.seeds, families=reg.families, **reg.tolerance(cfg.dtype), device=device,
                 min_pass_rate=reg.min_pass_rate)
        phase.note("reference", g.reference_seconds)
        # The TF32 incident: a flag flipped between arms changes which kernels run. A kernel that
        # changes global numeric state would make the arms differ: it is never timed.
        return g, diff(pinned, capture())


def gate_job(cfg, name: str, ctx) -> dict:
    """A `gate` job (execution/jobs.py), for a command that gates one kernel before it
    measures it elsewhere (`bench profile`): the gate's summary, whether it passed (a kernel
    that changed global numeric state or replaced a clock does not, nor any kernel while a
    clock replaced with no call in flight is on record), and the failure's tag and reason."""
    spec = get_kernel(name)
    early = clockguard.before_config()
    g, moved = gate_one(spec, cfg, ctx.reg, ctx.reg.numerics.state(), ctx.device)
    memory.release(ctx.device)
    found = clockguard.check()
    if found:  # during its gate: the kernel's
        clockguard.restore()
    tag, reason = _failure(name, {name: g}, {name: moved} if moved else {},
                           {name: clockguard.describe(found)} if found else {})
    if early:
        tag, reason = CLOCK_TAMPERED, _clocks_reason(early)
    passed = g.passed and not moved and not found and not early
    return {"gate": g.to_row(), "passed": passed, "tag": None if passed else tag, "reason": None if passed else reason}


def gate_all(b: Budget) -> Gated:
    """Every runnable kernel and the baseline gated together, case by case (they share each
    case's inputs and float64 reference), each under the line's pinned numeric state."""
    import contextlib

    cfg, ctx, base_spec, runnable = b.task.config, b.ctx, b.base_spec, b.runnable
    reg = ctx.reg
    state = reg.numerics.state()
    changed = {}
    tampered = {}
    early = clockguard.before_config()
    if early:
        return Gated(b, state, {}, (), _clocks_refused(b, _clocks_reason(early)))

    @contextlib.contextmanager
    def around(name):
        phase.report(name, phase.GATE)
        with apply(state) as pinned:
            yield
            # The TF32 incident: a flag flipped between arms changes which kernels run. A
            # kernel that changes global numeric state would make the arms differ: it is never
            # timed (apply puts the state back before the next kernel runs).
            moved = diff(pinned, capture())
            if moved and name is not None:
                changed.setdefault(name, moved)
            # Issue 47: a clock replaced during a kernel's stretch (its checked calls catch
            # their own) is that kernel's; during the shared work, no kernel's (kept: every
            # candidate is refused, here and in this process's later configs).
            found = clockguard.check()
            if found and name is not None:
                tampered.setdefault(name, clockguard.describe(found))
                clockguard.restore()
            elif found:
                clockguard.keep(found)

    # A candidate that is the baseline under its own name is gated once (one result serves both).
    unique = list({spec.name: spec for spec in (base_spec, *runnable)}.values())
    memo = boundary_memo(reg, ctx.device, state)
    pol = GatePolicy(reg.seeds, **reg.tolerance(cfg.dtype), families=reg.families, device=ctx.device,
                     min_pass_rate=reg.min_pass_rate)
    run = gate_kernels(unique, cfg, pol, workload=ctx.workload, around=around, memo=memo)
    for spec in unique:
        if spec.name in changed or spec.name in tampered:  # its boundary calls run (and are caught) again
            memo.forget(spec.fn)
    phase.note("reference", run.reference_seconds)
    kept = clockguard.before_config()
    if kept:
        return Gated(b, state, run.results, (), _clocks_refused(b, _clocks_reason(kept)))
    gates = run.results
    gb = gates[base_spec.name]
    if base_spec.name in changed or base_spec.name in tampered:
        gb = None
    if gb is None or not gb.passed:
        # A hollow baseline makes every speedup meaningless: record it and time nothing.
        tag, reason = _failure(base_spec.name, gates, changed, tampered)
        rows = baseline_failed(cfg, base_spec, runnable, ctx, tag, reason, gates[base_spec.name],
                               "the correctness gate")
        return Gated(b, state, gates, (), tuple(rows))
    out: list[Outcome] = []
    timed = []
    for spec in runnable:
        g = gates[spec.name]
        if g.passed and spec.name not in changed and spec.name not in tampered:
            timed.append(spec)
            continue
        tag, reason = _failure(spec.name, gates, changed, tampered)
        base, failed = base_row(cfg, spec.name, ctx), {"tag": tag, "reason": reason, "gate": g.to_row()}
        out.append(Outcome(*(payloads.crashed(base, role="candidate", **failed) if tag == "exception"
                             else payloads.incorrect(base, **failed))))
    return Gated(b, state, gates, tuple(timed), tuple(out))


def _clocks_reason(found) -> str:
    """Why clocks replaced with no kernel's call in flight refuse a config."""
    return ("the clocks the harness times with were replaced with no kernel's call in flight (at import, by a "
            "thread, or in an earlier config of this process): " + clockguard.describe(found))


def _clocks_refused(b: Budget, reason: str) -> tuple[Outcome, ...]:
    """Every candidate's row when the clocks cannot be vouched for: nothing is timed."""
    cfg, ctx = b.task.config, b.ctx
    return tuple(Outcome(*payloads.incorrect(base_row(cfg, spec.name, ctx), tag=CLOCK_TAMPERED, reason=reason))
                 for spec in b.runnable)


def _failure(name, gates, changed, tampered=None) -> tuple[str, str]:
    if tampered and name in tampered:
        return CLOCK_TAMPERED, (f"kernel {name} replaced the clocks the harness times with during its gate calls: "
                                f"{tampered[name]}")
    if name in changed:
        flags = describe(changed[name])
        return "numerics_changed", f"kernel {name} changed global numeric state during its call ({flags})"
    g = gates[name]
    return g.tag, g.reason
