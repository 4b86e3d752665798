"""The checks after timing: the outputs the last timed call left against a fresh reference, and
one more call on fresh inputs written into the same buffers (a result remembered by shape or
pointer answers the old inputs). ``out`` is a call's outputs (``Workload.allocate_outputs``),
or its only one.
"""

from __future__ import annotations

from harness.measurement.correctness.checks import check_call, check_output, outputs_of, spec_parts, sync
from harness.measurement.correctness.poison import bits_equal
from harness.measurement.correctness.results import CheckReport, InputCase, Tolerance


def recheck_in_place(spec, cfg, inputs, out, *, workload, case: InputCase, tol: Tolerance,
                     memo=None) -> CheckReport:
    """After timing: fresh inputs (``case``) written into the SAME buffers (``inputs``, by
    ``workload.fill_inputs``), every output poisoned, one more call.

    A kernel that remembers results by shape or by pointer returns its old answer here; it
    is tagged stale_mismatch (the reason says when every output equals its pre-refill one).
    ``memo`` (a ReferenceMemo): the reference of the new content, shared with other candidates.
    """
    fn, _ = spec_parts(spec)
    outs = outputs_of(out)
    seed, family = case.seed, case.family
    before = tuple(o.clone() for o in outs)
    workload.fill_inputs(cfg, tuple(inputs), seed, family)
    pristine = tuple(t.clone() for t in inputs)
    prefix = f"recheck seed {seed} family {family}"

    def report(tag=None, detail=None, fig=None, secs=0.0):
        return CheckReport(config=cfg.key(), seed=seed, family=family, passed=tag is None, tag=tag,
                           reason=f"{prefix}: {detail}" if tag else None, figures=fig, after_figures=None,
                           reference_seconds=secs, phase="recheck")

    r = check_call(fn, cfg, inputs, outs, pristine, workload=workload, tol=tol, mismatch="stale_mismatch", memo=memo)
    detail = r.detail
    if r.tag == "stale_mismatch":
        same = all(bits_equal(v, b) for v, b in zip(r.visible, before))
        which = "output is bit-identical to the one" if len(outs) == 1 else "every output is bit-identical to the ones"
        detail = (f"{which} before the inputs were rewritten in place (a result remembered by shape or "
                  "pointer): " if same else "fails after the inputs were rewritten in place: ") + detail
    return report(r.tag, detail, r.figures, r.reference_seconds)


def check_timed_output(cfg, inputs, out, *, workload, tol: Tolerance, label: str,
                       what: str = "output of the last timed call", memo=None) -> CheckReport:
    """After timing: the outputs the last timed call left in ``out`` against a fresh reference
    on ``inputs`` (``workload.reference``).

    The gate saw a handful of calls; timing makes hundreds. A kernel that drifts, degrades
    or caches after N calls passes the gate and is caught here, on the timed buffers
    themselves (nothing is re-run, inputs are not touched). The timed path poisoned ``out``
    with ``poison_`` before the call, so what the call left unwritten is tagged unwritten.
    ``memo`` (a ReferenceMemo): a reference shared with the other arms judged on the same inputs.
    """
    outs = outputs_of(out)
    sync(outs[0].device)
    r = check_output(outs, tuple(inputs), cfg, workload=workload, atol=tol.atol, rtol=tol.rtol, mismatch="stale_mismatch", flat=False,
                     memo=memo)
    return CheckReport(config=cfg.key(), seed=-1, family="timed", passed=r.tag is None, tag=r.tag,
                       reason=f"{label}: {what}: {r.detail}" if r.tag else None,
                       figures=r.figures, after_figures=None, reference_seconds=r.reference_seconds,
                       phase="timed_output")
