"""The check sequence every checked call goes through, in one order.

Poison every output → call → the kernel raised, wrote its inputs, wrote off the current
stream, changed global state or left work running → reference → compare → unwritten, a
repeat of an earlier output, non-finite, out of tolerance, exactly constant along an axis.
The gate, the recheck after timing and the timed-output check all go through it, for any
workload: ``workload`` (a ``harness.workloads.api.Workload``) says how a kernel is called
(``Workload.call``), what its inputs and outputs are named, each output's tolerance and its
float64 reference; nothing here knows what the kernel computes.

A call's outputs are a tuple (``Workload.allocate_outputs``), judged together: each stage of
the judgement (unwritten, repeat, non-finite, out of tolerance, constant) looks at every
output before the next stage does, so the gravest failure of any output decides, and its
reason names the output where the workload declares several.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Callable

from harness.measurement.correctness.figures import ErrorFigures, chunks, compare, fmt_idx, ulp_tensor, unravel
from harness.measurement.correctness.poison import as_bits, bits_diff, bits_equal, poison_
from harness.measurement.correctness.results import CLOCK_TAMPERED, Tolerance
from harness.measurement import clockguard, leftover
from harness.measurement.numerics import capture, describe, diff
from harness.measurement.correctness.figures import CHECKSUM_BLOCK, CHECKSUM_WARPS, use_fused

# An output exactly constant along an axis is degenerate when the reference varies along it
# by more than this many ULPs of the dtype: a correctly rounded output could not be flat.
DEGENERATE_ULPS = 4.0


@dataclass(frozen=True)
class _Call:
    visible: tuple | None      # what the outputs held when the current stream finished
    exception: str | None
    side_stream: str | None
    left_running: str | None = None
    state_changed: str | None = None
    clock_tampered: str | None = None


def is_cuda(t) -> bool:
    return t.device.type == "cuda"


def exception_text(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    msg = str(exc).strip().splitlines()
    return f"kernel raised {type(exc).__name__}: {msg[0] if msg else ''}{where}"


def outputs_of(out) -> tuple:
    """A call's outputs as a tuple: the tuple given, or a lone tensor (a workload's only
    output, as callers of one-output workloads pass it) as a tuple of one."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def output_names(workload, cfg) -> tuple:
    """How reasons name each output of ``cfg``: None for a workload's only output (its
    reasons say "output", as they always have), else the declared names."""
    names = tuple(t.name for t in workload.outputs(cfg))
    return (None,) if len(names) == 1 else names


def elements(name: str | None) -> str:
    """``output elements``, or ``elements of residual_out`` where the output has a name."""
    return f"elements of {name}" if name else "output elements"


def spec_parts(spec):
    fn = getattr(spec, "fn", spec)
    name = getattr(spec, "name", getattr(fn, "__name__", "kernel"))
    return fn, name


def _checked_call(call: Callable[[], object], outs: tuple, names: tuple) -> _Call:
    """Poison every output, ``call()`` the kernel, read the outputs as the current stream sees
    them (``names``: how reasons name them, ``output_names``); then what the call
    left behind: device work still running once the current stream finished (confirmed on
    DRAIN_CONFIRM_CALLS calls in a row), host threads or processes still busy, global state
    (numeric flags, thread counts, affinity) changed, a clock the harness times with replaced
    (put back at once: clockguard)."""
    import torch

    device = outs[0].device
    cuda = is_cuda(outs[0])
    state0 = capture()
    left = None
    for attempt in range(leftover.DRAIN_CONFIRM_CALLS):
        for out in outs:
            poison_(out)
        if cuda:
            torch.cuda.synchronize(device)
        host0 = leftover.host_snapshot()
        try:
            call()
            if cuda:
                torch.cuda.current_stream(device).synchronize()
        except Exception as exc:  # the kernel's failure is the check's result, with its text
            return _Call(visible=None, exception=exception_text(exc), side_stream=None)
        visible = tuple(out.clone() for out in outs) if cuda else outs
        drain = None
        if cuda:
            torch.cuda.current_stream(device).synchronize()  # the copies above are not the kernel's work
            try:
                drain = leftover.drain_s(device)
            except Exception as exc:
                return _Call(visible=None, exception=exception_text(exc), side_stream=None)
        host = leftover.host_leftovers(host0)
        found = clockguard.check()
        if found:
            clockguard.restore()
            return _Call(visible=visible, exception=None, side_stream=None,
                         clock_tampered=f"the call replaced the clocks the harness times with: "
                                        f"{clockguard.describe(found)}")
        moved = diff(state0, capture())
        if moved:
            return _Call(visible=visible, exception=None, side_stream=None,
                         state_changed=f"the call changed global state for whoever runs next ({describe(moved)})")
        if host is not None:
            left = host
            break
        if drain is None or drain <= leftover.DRAIN_LIMIT_S:
            left = None
            break
        left = (f"the device stayed busy {drain * 1e6:.0f} µs after the caller's stream had finished the call "
                f"(> {leftover.DRAIN_LIMIT_S * 1e6:.0f} µs) on {attempt + 1} call(s) in a row: work left "
                f"running on another stream")
    if not cuda:
        return _Call(visible=outs, exception=None, side_stream=None, left_running=left)
    side = None
    for name, seen, out in zip(names, visible, outs):
        if not bits_equal(seen, out):
            changed = int(bits_diff(seen, out).sum())
            side = (f"{changed} of {out.numel()} {elements(name)} were written after the current stream "
                    f"had finished (work on another stream that the current stream never waited for)")
            break
    return _Call(visible=visible, exception=None, side_stream=side, left_running=left)


def _mutated(pristine, inputs, names) -> str | None:
    import torch

    for name, p, t in zip(names, pristine, inputs):
        if not bits_equal(p, t):
            diff = bits_diff(p, t)
            n = int(diff.sum())
            j = int(torch.nonzero(diff)[0, 0]) if n else 0
            return (f"kernel modified its input {name}: {n} of {p.numel()} elements changed, first at "
                    f"{fmt_idx(unravel(j, p.shape))}: {float(p.view(-1)[j]):.4g} -> {float(t.view(-1)[j]):.4g}")
    return None


def _constant_axis(out, ref, dtype, dims: tuple[str, ...] = (), name: str | None = None) -> str | None:
    """An axis along which out is exactly constant while ref varies by > DEGENERATE_ULPS ULPs
    (``dims``: the output's dimension names, from its workload's Tensor; ``name``: the
    output's, where the call has several)."""
    import torch

    axes = [axis for axis in range(out.dim()) if out.shape[axis] >= 2]
    if not axes:
        return None
    # Every axis's flatness read at once (one device sync, issue 32), then judged in order.
    flat = torch.stack([(out == out.narrow(axis, 0, 1)).all() for axis in axes]).tolist()
    for axis, is_flat in zip(axes, flat):
        if not is_flat:
            continue
        hi, lo = ref.amax(dim=axis), ref.amin(dim=axis)
        spread = hi - lo
        limit = DEGENERATE_ULPS * ulp_tensor(torch.maximum(hi.abs(), lo.abs()), dtype)
        if bool((spread > limit).any()):
            along = dims[axis] if len(dims) == out.dim() else f"dim {axis}"
            return (f"{name or 'output'} is exactly constant along the {along} axis (all {out.shape[axis]} equal) "
                    f"while the reference varies along it by up to {float(spread.max()):.3g}")
    return None


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed_reference(pristine, cfg, workload):
    """The float64 reference outputs on ``pristine`` (``workload.reference``: one tensor per
    declared output, in order) and the seconds they took (the device synchronized)."""
    device = pristine[0].device
    sync(device)
    t0 = time.perf_counter()
    refs = tuple(workload.reference(cfg, tuple(pristine)))
    sync(device)
    declared = len(workload.outputs(cfg))
    if len(refs) != declared:
        raise ValueError(f"workload '{workload.name}' declares {declared} outputs at {cfg.key()} but its "
                         f"reference returned {len(refs)}")
    return refs, time.perf_counter() - t0


def _judge(outs: tuple, figs: tuple, refs: tuple, tensors: tuple, *, mismatch: str = "mismatch",
           nonfinite: str = "nonfinite", repeat: Callable | None = None,
           flat: bool = True) -> tuple[str | None, str | None, ErrorFigures]:
    """The output half of the check sequence, in its one order, over every output of the call:
    (tag, detail, the figures that decided), or (None, None, the figures of the output
    nearest its bound).

    Unwritten (the poison survived) → a repeat of an earlier output (``repeat(i, out, fig)``,
    asked only of a failing output) → non-finite → out of tolerance → exactly constant along
    an axis (``flat``); each stage over every output, in declared order, before the next.
    ``mismatch``/``nonfinite`` name those failures where the call is a later one
    (``stale_mismatch``: state carried across calls).
    """
    for fig in figs:
        if fig.n_unwritten:
            return "unwritten", fig.summary(), fig
    if repeat is not None:
        for i, (out, fig) in enumerate(zip(outs, figs)):
            found = None if fig.passed else repeat(i, out, fig)
            if found is not None:
                return (*found, fig)
    for fig in figs:
        if fig.n_nonfinite:
            return nonfinite, fig.summary(), fig
    for fig in figs:
        if not fig.passed:
            return mismatch, fig.summary(), fig
    if flat:
        for out, fig, ref, t in zip(outs, figs, refs, tensors):
            axis = _constant_axis(out, ref, fig.dtype, t.dims, fig.output)
            if axis:
                return ("degenerate", f"{axis} (within tolerance only because the tolerance is loose: "
                                      f"{fig.summary()})", fig)
    return None, None, max(figs, key=lambda f: f.tolerance_ratio) if len(figs) > 1 else figs[0]


@dataclass(frozen=True)
class Checked:
    """One pass of the check sequence over one call's outputs."""

    tag: str | None
    detail: str | None
    visible: tuple | None         # the outputs as the current stream saw them; None when the call raised
    figures: ErrorFigures | None  # the deciding output's (check_output); None before the comparison
    ref: tuple | None             # the float64 references (None when the comparison was not reached)
    reference_seconds: float


# checksum()'s position weights are i·CHECKSUM_WEIGHT + 1 (a 32-bit odd constant: distinct
# positions weigh differently modulo 2^64).
CHECKSUM_WEIGHT = 0x9E3779B1


def checksum(t) -> tuple[int, int]:
    """A position-weighted checksum of t's bits: equal for bit-identical tensors and, short
    of a 2^-64 accident, different otherwise. Lets the gate remember every earlier output of
    a config without keeping the outputs. Summed on the device, read once (int64 sums wrap
    modulo 2^64, which is what the checksum keeps); on a GPU in one pass."""
    bits = as_bits(t).reshape(-1)
    if use_fused(bits.device):  # one pass on a GPU (figures_fused): the same two sums
        from harness.measurement.correctness import figures_fused

        a, n = figures_fused.checksum_sums(bits.contiguous(), CHECKSUM_WEIGHT, CHECKSUM_BLOCK, CHECKSUM_WARPS).tolist()
        return a & (2**64 - 1), n
    return _checksum_torch(bits)


def _checksum_torch(bits) -> tuple[int, int]:
    """checksum()'s sums over a flat integer view in torch operations, block by block (any device)."""
    import torch

    acc = torch.zeros((), dtype=torch.int64, device=bits.device)
    total = torch.zeros((), dtype=torch.int64, device=bits.device)
    for s, e in chunks(bits.numel(), bits.device):
        b = bits[s:e].to(torch.int64)
        w = torch.arange(s, e, dtype=torch.int64, device=b.device).mul_(CHECKSUM_WEIGHT).add_(1)
        acc += (b * w).sum()
        total += b.sum()
    a, n = torch.stack([acc, total]).tolist()
    return a & (2**64 - 1), n


# References a config's checks after timing keep for reuse (``ReferenceMemo``): the timed
# outputs of every candidate share two contents (the first and last slot), and each
# candidate's recheck draws the same one; two kept cover those orders (the VRAM model counts them).
REFERENCE_MEMO_SIZE = 2


class ReferenceMemo:
    """The last few float64 references of one config, by the bits of the inputs they were
    computed on (their checksums, read from the tensors at each use: a slot rewritten in
    place, or changed by a kernel, is another content), so the checks after timing compute
    each content's reference once however many arms are judged on it."""

    def __init__(self, size: int = REFERENCE_MEMO_SIZE):
        self.size = size
        self.kept: dict = {}

    def get(self, inputs, cfg, workload):
        """(reference of ``inputs``, seconds it took now: 0 when kept)."""
        key = tuple(checksum(t) for t in inputs)
        if key in self.kept:
            self.kept[key] = self.kept.pop(key)  # most recently used last
            return self.kept[key], 0.0
        while len(self.kept) >= self.size:
            self.kept.pop(next(iter(self.kept)))
        ref, secs = timed_reference(inputs, cfg, workload)
        self.kept[key] = ref
        return ref, secs


def check_output(out, inputs, cfg, *, workload, atol: float, rtol: float, ref=None,
                 memo: ReferenceMemo | None = None, **judge) -> Checked:
    """Reference (unless given; from ``memo`` when one is kept for these inputs) → compare
    every output (``out``: the call's outputs, or its only one) with its reference under its
    tolerance (``Workload.output_tolerances``: the line's ``atol``/``rtol`` unless the output
    declares its own) → ``_judge``: the half of the sequence the timed output check shares
    with the calls the gate makes itself."""
    outs = outputs_of(out)
    secs = 0.0
    if ref is None:
        ref, secs = memo.get(inputs, cfg, workload) if memo is not None else timed_reference(inputs, cfg, workload)
    refs = outputs_of(ref)
    tensors = tuple(workload.outputs(cfg))
    if not len(outs) == len(refs) == len(tensors):
        raise ValueError(f"{len(outs)} outputs and {len(refs)} references for the {len(tensors)} outputs "
                         f"workload '{workload.name}' declares at {cfg.key()}")
    names = output_names(workload, cfg)
    figs = tuple(compare(o, r, atol=a, rtol=rt, dtype=t.dtype_of(cfg), output=name)
                 for o, r, t, name, (a, rt) in zip(outs, refs, tensors, names,
                                                   workload.output_tolerances(cfg, atol, rtol)))
    tag, detail, fig = _judge(outs, figs, refs, tensors, **judge)
    return Checked(tag, detail, outs, fig, refs, secs)


def call_checks(fn, cfg, inputs, out, pristine, *, workload) -> Checked:
    """The call half of the check sequence: poison every output (``out``: the call's outputs,
    or its only one) → call (``workload.call``) → the kernel raised, wrote its inputs, wrote
    off the current stream, changed global state or left work running. Passing, the answer
    holds the outputs (``visible``) and no figures yet (``tag`` None)."""
    inputs, outs = tuple(inputs), outputs_of(out)
    c = _checked_call(lambda: workload.call(fn, inputs, outs, cfg), outs, output_names(workload, cfg))
    if c.exception:
        return Checked("exception", c.exception, None, None, None, 0.0)
    mut = _mutated(pristine, inputs, [t.name for t in workload.inputs(cfg)])
    if mut:
        return Checked("input_mutated", mut, c.visible, None, None, 0.0)
    if c.side_stream:
        return Checked("side_stream", c.side_stream, c.visible, None, None, 0.0)
    if c.clock_tampered:
        return Checked(CLOCK_TAMPERED, c.clock_tampered, c.visible, None, None, 0.0)
    if c.state_changed:
        return Checked("numerics_changed", c.state_changed, c.visible, None, None, 0.0)
    if c.left_running:
        return Checked("left_running", c.left_running, c.visible, None, None, 0.0)
    return Checked(None, None, c.visible, None, None, 0.0)


def check_call(fn, cfg, inputs, out, pristine, *, workload, tol: Tolerance, memo: ReferenceMemo | None = None,
               **judge) -> Checked:
    """The check sequence on ``inputs``: ``call_checks`` → ``check_output`` (reference,
    compare, judge; ``judge``: its other keywords, a given ``ref`` among them)."""
    c = call_checks(fn, cfg, inputs, out, pristine, workload=workload)
    if c.tag:
        return c
    return check_output(c.visible, pristine, cfg, workload=workload, atol=tol.atol, rtol=tol.rtol, memo=memo,
                        **judge)
