"""The payloads every stage builds its rows from: the fields all of a config's rows share,
a hollow baseline's rows, and the rows of a config that crashed or took its worker down."""

from __future__ import annotations

import copy
import traceback

from harness.vocab.outcomes import INCORRECT
from harness.ledger import payloads
from harness.ledger.payloads import Figures, Gate
from harness.ledger.rows import load
from harness.pipeline.context import Outcome, SweepContext
from harness.workloads import Config
from harness.registry import get_kernel
from harness.provenance.code import module_path
from harness.jsonsafe import number
from harness.measurement.correctness.results import FAILURE_TAGS

# The last frames of a config's exception kept in its `crashed` rows.
TRACEBACK_FRAMES = 6
# Gate failures a different tolerance could change (the output's distance from the reference);
# the others (an exception, unwritten elements, ...) are the kernel's whatever the tolerance.
TOLERANCE_TAGS = frozenset({"mismatch"})


class _ConfigPairs:
    """The shared fields of the config being run, per candidate: its stages build a pair's rows
    several times (a rejection, a skip, a result), and the fields (the kernels' sources hashed
    among them) are computed once per config. One config at a time: a new config, or a new
    sweep's context, starts afresh."""

    def __init__(self):
        self.ctx, self.key, self.fields = None, None, {}

    def of(self, cfg: Config, candidate: str, ctx: SweepContext) -> dict:
        key = cfg.key()
        if self.ctx is not ctx or self.key != key:
            self.ctx, self.key, self.fields = ctx, key, {}
        if candidate not in self.fields:
            self.fields[candidate] = {
                "config": cfg.as_dict(), "config_key": key, "candidate": candidate, "baseline": ctx.reg.baseline,
                "ceilings_ref": ceilings_ref(ctx.ceilings),
                "kernel_sources": {"candidate": kernel_source(get_kernel(candidate), ctx.root),
                                   "baseline": kernel_source(get_kernel(ctx.reg.baseline), ctx.root)}}
        return copy.deepcopy(self.fields[candidate])  # each row its own objects


_PAIRS = _ConfigPairs()


def base_row(cfg: Config, candidate: str, ctx: SweepContext) -> dict:
    """The fields of every outcome row of a (config, candidate) pair (computed once per config)."""
    return _PAIRS.of(cfg, candidate, ctx)


def ceilings_ref(row: dict | None) -> dict | None:
    """What an outcome row records of the ceilings row it used (``ledger.CEILINGS_REF``): its
    seq and chain hash (null fields for ceilings that are no ledger row, which verify refuses)."""
    return None if row is None else {"seq": row.seq, "hash": row.hash}


def kernel_source(spec, root: str | None) -> dict:
    """Which file the kernel came from and its SHA-256, and for a kernel of an installed
    package (a ``bench.kernels`` entry point) that package's name and version: the commit
    stamp covers this repository only. A path inside the repository is relative to its root."""
    import hashlib
    from pathlib import Path

    p = Path(spec.source)
    if root is not None and p.resolve().is_relative_to(Path(root).resolve()):
        shown = p.resolve().relative_to(Path(root).resolve()).as_posix()
    else:  # outside the repository: the module's path (a row never names a directory of a machine)

        shown = module_path(p)
    return {"path": shown, "sha256": hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
            "distribution": spec.distribution}


def memory_row(pred, peak) -> dict:
    """Predicted vs measured peak; measured is this config's own, above what was held when it
    started (``held_bytes``)."""
    return {"predicted_peak_bytes": pred.peak_bytes, "measured_peak_bytes": peak[0], "held_bytes": peak[1],
            "breakdown": pred.breakdown}


def baseline_failed(cfg, base_spec, specs, ctx, tag, reason, gate, what) -> list[Outcome]:
    """A hollow baseline: its `incorrect` row, and a `skipped` row for every candidate."""
    out = [Outcome(*payloads.incorrect(base_row(cfg, base_spec.name, ctx), role="baseline", tag=tag, reason=reason,
                                       gate=gate.to_row()))]
    for spec in specs:
        out.append(Outcome(*payloads.skipped(base_row(cfg, spec.name, ctx),
                                             reason=f"baseline {base_spec.name} failed {what} [{tag}]: {reason}")))
    return out


def baseline_gate_failure(outcomes) -> dict | None:
    """Why a sweep stops after this config: its baseline failed the correctness gate (the
    baseline's `incorrect` row carries one of the gate's own tags; the timed checks prefix
    theirs). No candidate is timed against a baseline that fails, and a tolerance or a
    baseline wrong here is most likely wrong at every config. The config, the failure, whether
    a tolerance could change it, and for a mismatch the least atol its listed failing elements
    need (a lower bound); None when the baseline passed the gate."""
    for o in outcomes:
        if o.kind != INCORRECT:
            continue
        row = load({"kind": o.kind, **o.payload})
        if row.role != "baseline" or row.tag not in FAILURE_TAGS:
            continue
        gate = Gate.from_row(row.gate or {})
        rtol = number(gate.rtol)
        needs = []
        for f in gate.failing if gate.has("failures") else []:
            fig = Figures.from_row(f.figures or {})
            out, ref = number(fig.worst_out), number(fig.worst_ref)
            if f.tag == "mismatch" and out is not None and ref is not None and rtol is not None:
                needs.append(abs(out - ref) - rtol * abs(ref))
        return {"config_key": row.config_key, "baseline": row.candidate, "tag": row.tag, "reason": row.reason,
                "what": FAILURE_TAGS[row.tag], "tolerance": row.tag in TOLERANCE_TAGS,
                "atol": number(gate.atol), "rtol": rtol, "need_atol": max(needs) if needs else None}
    return None


def fault_outcome(cfg: Config, candidate: str, ctx: SweepContext, reason: str, fault: dict) -> Outcome:
    """The `crashed` row of a pair whose kernel took its worker down (killed, hung, poisoned
    its device): ``fault`` says in which phase, and the worker's last output."""
    return Outcome(*payloads.crashed(base_row(cfg, candidate, ctx), reason=reason, fault=fault))


def crashed_outcomes(cfg: Config, candidates, ctx: SweepContext, exc: BaseException) -> list[Outcome]:
    """A kernel or harness failure inside one config: recorded, the sweep goes on."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return [Outcome(*payloads.crashed(base_row(cfg, c, ctx), reason=f"{type(exc).__name__}: {exc}".splitlines()[0],
                                      traceback="".join(tb[-TRACEBACK_FRAMES:]))) for c in candidates]
