"""The correctness gate: a candidate kernel's output against the float64 reference.

The fused-attention campaign's hollow decode kernel compiled, launched and produced finite,
plausible floats with no softmax in it; the llama-bench decode artifact read 7.9% of the KV
cache; the Sakana incident returned the reference's own result from memory the reference
had just freed. So the gate checks more than closeness on one random input:

* adversarial input families (``harness.workloads.inputs``) and boundary sequence lengths;
* ``out`` poisoned with a NaN of a private bit pattern before every call, so an unwritten
  element is told apart from a computed NaN;
* the candidate runs BEFORE the reference exists, then again AFTER it on fresh buffers:
  both must pass and agree (stale memory, accumulators carried across calls);
* q, k, v are compared to pristine copies (a kernel must not write its inputs);
* an output bit-identical to an earlier input's, or exactly constant along an axis where
  the reference is not, is degenerate however loose the tolerance;
* on CUDA only the current stream is synchronized before ``out`` is read, so work left on a
  side stream shows up as unwritten; and ``side_stream_check`` holds the caller's stream
  while the kernel is called, so work on a stream that does not wait for it shows up
  however fast it is;
* an exception from the kernel is a failing check carrying its text, never swallowed.

The gate's calls, the recheck after timing and the timed outputs all go through one check
sequence (``_check_call``/``_check_output``): poison → call → unwritten → non-finite →
compare, with the failing seed, element, error and ULPs in the reason. The timed path
poisons with ``poison_`` too, so an output a timed call never wrote is reported as unwritten.

Every failure is one readable line plus a short tag (``FAILURE_TAGS``) for sweep summaries.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable

from harness.errors import UserError
from harness.jsonsafe import jsonable
from harness.measurement.reference import reference, reference_bytes
from harness.workloads import Config
from harness.workloads.inputs import (DEFAULT_FAMILIES, FAMILIES, boundary_configs, fill_inputs_,
                                      make_inputs)

FAILURE_TAGS = {
    "mismatch": "output differs from the float64 reference beyond atol + rtol·|ref|",
    "unwritten": "output elements still hold the NaN poison after the call",
    "nonfinite": "output has inf/NaN (not the poison) where the reference is finite",
    "stale_mismatch": "a later call (fresh buffers after the reference, or inputs rewritten in "
                      "place) fails or disagrees with the first: state carried across calls",
    "input_mutated": "the kernel wrote into q, k or v",
    "degenerate": "output unchanged when the inputs changed, or constant along a whole axis",
    "exception": "the kernel raised",
    "side_stream": "output written while the caller's stream was held, or after it had finished the call: "
                   "work on another stream",
    "left_running": "the call returned with work still running: device work on another stream, or host "
                    "threads or child processes still using the CPU (measurement/leftover.py)",
    "numerics_changed": "the call changed global state the harness pins (numeric flags, thread counts, "
                        "CPU affinity) for whoever runs next",
}
# Failures a pass-rate threshold never excuses: min_pass_rate < 1 tolerates numerical seed
# luck (shape-aware attention's causal config passed 21 of 40 seeds), not a kernel that
# skips, caches or corrupts.
STRUCTURAL_TAGS = frozenset({"unwritten", "input_mutated", "degenerate", "exception", "side_stream",
                             "stale_mismatch", "left_running", "numerics_changed"})
# Tags of the call checks (before any comparison with the reference).
_CALL_TAGS = frozenset({"exception", "input_mutated", "side_stream", "left_running", "numerics_changed"})

# Named default tolerances (atol, rtol) per dtype; registrations pass their own. Sized so
# the torch 3-kernel baseline, which rounds S = QKᵀ to the input dtype (the bf16 2-ULP trap),
# passes every input family with >= 2x margin. On the outlier family logits reach ~20 and
# keep only 11 (float16) or 8 (bfloat16) significant bits once S is rounded, so a weight
# on a ±138 value row is off by up to ~5% in bfloat16. Measured worst needs (H200 and CPU,
# head_dim 16-128, seq_len 67-8k, 3-10 seeds): float16 atol 0.0096 at rtol 1e-2 and rtol
# 0.0073 at atol 2e-2; bfloat16 atol 0.094 at rtol 2e-2 and rtol 0.049 at atol 0.1. A fused
# kernel that keeps S in float32 (SDPA flash) needed 0.0003 / 0.0034: a registration for one
# may bar tighter, and the baseline then fails it honestly. float32: 1e-4 is ~800 float32
# ULPs at 1, room for any reduction order (measured 3e-6), but TF32 (2^-11 relative) or a
# bfloat16 compute path cannot pass it.
DEFAULT_TOLERANCES = {"float16": (2e-2, 2e-2), "bfloat16": (2e-1, 1e-1), "float32": (1e-4, 1e-4)}

# The poison: a quiet NaN with a payload no arithmetic produces (x86 and CUDA both make
# canonical NaNs), so "never written" is a bit-pattern test, not a guess.
POISON_BITS = {"float16": 0x7E5A, "bfloat16": 0x7FDA, "float32": 0x7FC0DA5A,
               "float64": 0x7FF8DA5ADA5ADA5A}
_INT_VIEW = {2: "int16", 4: "int32", 8: "int64"}

# Elements per block in compare(): bounds its float64 temporaries (~6 live) to ~100 MiB.
COMPARE_CHUNK_ELEMS = 1 << 21
# compare()'s float64 working blocks (|out - ref|, tolerances, ...) at their peak.


def compare_bytes(n_elems: int) -> int:
    """Peak bytes of compare()'s float64 temporaries (8 bounds its ~6 live) on an output of
    ``n_elems``: one block, which is the whole output when that is smaller than a block
    (a decode output of 4096 elements needs 256 KiB, not the full block's 128 MiB)."""
    return 8 * 8 * min(n_elems, COMPARE_CHUNK_ELEMS)

# An output exactly constant along an axis is degenerate when the reference varies along it
# by more than this many ULPs of the dtype: a correctly rounded output could not be flat.
DEGENERATE_ULPS = 4.0
# side_stream_check holds the current stream with a spin of SIDE_STREAM_HOLD_S while the
# kernel is called, waits SIDE_STREAM_SETTLE_S on the host, and looks at `out` from a
# stream of its own: anything written while the hold lasts ran on a stream that does not
# wait for the caller's. A hold that ended before the look (a slow host) is doubled, up to
# SIDE_STREAM_MAX_HOLD_S; SIDE_STREAM_REPS such looks are made.
SIDE_STREAM_HOLD_S = 0.05
SIDE_STREAM_MAX_HOLD_S = 0.8
SIDE_STREAM_SETTLE_S = 0.01
SIDE_STREAM_REPS = 2
# Failures listed in full in GateResult.to_row(): the rest are counted by tag.
MAX_ROW_FAILURES = 20

_AXES = ("batch", "head", "query row", "head_dim")


# ----------------------------------------------------------------------------- figures


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def ulp(value: float, dtype) -> float:
    """The dtype's unit in the last place at |value| (the bf16 2-ULP trap: bfloat16 at 2.17 is 2^(1-7))."""
    import torch

    fi = torch.finfo(getattr(torch, _dtype_name(dtype)))
    mag = max(abs(float(value)), fi.tiny)
    return fi.eps * 2.0 ** (math.frexp(mag)[1] - 1)


def _ulp_tensor(x, dtype):
    """ulp() elementwise for a float64 tensor."""
    import torch

    fi = torch.finfo(getattr(torch, _dtype_name(dtype)))
    exp = torch.frexp(x.abs().clamp_min(fi.tiny)).exponent
    return torch.ldexp(torch.full_like(x, fi.eps), (exp - 1).to(x.dtype))


def nearest(ref, dtype):
    """float64 ``ref`` rounded to the nearest value of ``dtype``, kept in float64: element by
    element no output written in ``dtype`` is closer, so it is the best any kernel can do
    against the gate (measurement/feasible.py). Rounded in float64 arithmetic (a power-of-two
    step divides exactly), not by a cast, which may round twice (through float32)."""
    import torch

    fi = torch.finfo(getattr(torch, _dtype_name(dtype)))
    step = _ulp_tensor(ref, dtype)
    out = torch.round(ref / step).mul_(step)
    return torch.where(out.abs() > fi.max, torch.copysign(torch.full_like(out, math.inf), out), out)


def _unravel(flat: int, shape) -> tuple[int, ...]:
    idx = []
    for n in reversed(tuple(shape)):
        idx.append(flat % n)
        flat //= n
    return tuple(reversed(idx))


def _fmt_idx(idx) -> str:
    return "(" + ",".join(str(i) for i in idx) + ")"


@dataclass(frozen=True)
class ErrorFigures:
    """How far one output is from the reference; ``passed`` is torch.allclose's rule."""

    dtype: str
    atol: float
    rtol: float
    passed: bool
    n_elements: int
    n_failing: int            # non-finite, or |out - ref| > atol + rtol·|ref|
    n_nonfinite: int          # inf/NaN other than the poison
    n_unwritten: int          # still the poison bit pattern
    max_abs_err: float        # over finite elements
    max_rel_err: float        # |out - ref| / max(|ref|, atol), over finite elements
    rel_frobenius: float      # ‖out - ref‖ / ‖ref‖ over finite elements
    tolerance_ratio: float    # max |out - ref| / (atol + rtol·|ref|): <= 1 passes
    worst_index: tuple | None  # the element with the largest tolerance_ratio
    worst_out: float | None
    worst_ref: float | None
    worst_ulps: float | None  # |out - ref| there, in ULPs of dtype at |ref|
    first_unwritten: tuple | None
    last_unwritten: tuple | None
    first_nonfinite: tuple | None
    first_nonfinite_ref: float | None

    def summary(self) -> str:
        """One readable line: the worst element, by how much, in ULPs, against the bar."""
        parts = []
        if self.n_unwritten:
            parts.append(f"{self.n_unwritten} of {self.n_elements} output elements still hold the NaN "
                         f"poison (never written), {_fmt_idx(self.first_unwritten)}.."
                         f"{_fmt_idx(self.last_unwritten)}")
        if self.n_nonfinite:
            parts.append(f"{self.n_nonfinite} of {self.n_elements} output elements are inf/NaN where the "
                         f"reference is finite, first at {_fmt_idx(self.first_nonfinite)} "
                         f"(ref={self.first_nonfinite_ref:.4g})")
        if self.worst_index is not None and (self.tolerance_ratio > 1 or not parts):
            n_tol = self.n_failing - self.n_nonfinite - self.n_unwritten
            rel = "≤" if self.tolerance_ratio <= 1 else ">"
            parts.append(f"err {abs(self.worst_out - self.worst_ref):.3g} at {_fmt_idx(self.worst_index)} "
                         f"out={self.worst_out:.4g} ref={self.worst_ref:.4g} "
                         f"({self.worst_ulps:.3g} ulp {self.dtype}) {rel} atol {self.atol:g} + rtol "
                         f"{self.rtol:g}·|ref| ({n_tol} of {self.n_elements} elements out of tolerance; "
                         f"max abs err {self.max_abs_err:.3g}, rel Frobenius {self.rel_frobenius:.3g})")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        """Raw values (NaN and inf too: ``harness.jsonsafe`` spells them where JSON is written)."""
        d = asdict(self)
        for key, val in d.items():
            if isinstance(val, tuple):
                d[key] = list(val)
        return d


def _chunks(n: int):
    for s in range(0, n, COMPARE_CHUNK_ELEMS):
        yield s, min(n, s + COMPARE_CHUNK_ELEMS)


def unwritten_mask(t):
    """Bool tensor: elements of ``t`` that still hold the poison bit pattern."""
    import torch

    bits = POISON_BITS.get(_dtype_name(t.dtype))
    if bits is None:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    return t.view(getattr(torch, _INT_VIEW[t.element_size()])) == bits


def poison_(out):
    """Fill ``out`` with the poison NaN (in place, same buffer)."""
    import torch

    name = _dtype_name(out.dtype)
    if name not in POISON_BITS:
        raise ValueError(f"cannot poison a {name} tensor (poison is defined for {', '.join(POISON_BITS)})")
    out.view(getattr(torch, _INT_VIEW[out.element_size()])).fill_(POISON_BITS[name])
    return out


def _as_bits(t):
    """``t`` viewed as same-width integers, so NaN payloads compare exactly."""
    import torch

    return t.view(getattr(torch, _INT_VIEW[t.element_size()])) if t.element_size() in _INT_VIEW else t


def _bits_equal(a, b) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(_as_bits(a), _as_bits(b))


def _bits_diff(a, b):
    """Bool tensor (flat): where a and b differ bit for bit."""
    return _as_bits(a).reshape(-1) != _as_bits(b).reshape(-1)


def compare(out, ref, *, atol: float, rtol: float, dtype=None) -> ErrorFigures:
    """Error figures of ``out`` (the kernel's dtype) against float64 ``ref``.

    Passes iff every element is finite and |out - ref| <= atol + rtol·|ref| (torch.allclose
    semantics, ref as the magnitude). Works in blocks so its float64 temporaries stay small.
    """
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    dname = _dtype_name(dtype if dtype is not None else out.dtype)
    o_flat, r_flat = out.reshape(-1), ref.reshape(-1)
    n = o_flat.numel()
    f64 = torch.float64
    rel_floor = max(float(atol), torch.finfo(f64).tiny)
    max_abs = max_rel = max_ratio = 0.0
    ratio_at = -1
    sum_e2 = sum_r2 = 0.0
    n_fail = n_nonfin = n_unw = 0
    first_unw = last_unw = first_nonfin = -1
    for s, e in _chunks(n):
        o, r = o_flat[s:e], r_flat[s:e].to(f64)
        if not bool(torch.isfinite(r).all()):
            raise ValueError("the reference has non-finite values: the inputs are not a valid test")
        o64 = o.to(f64)
        finite = torch.isfinite(o64)
        unw = unwritten_mask(o)
        nonfin = ~finite & ~unw
        err = torch.where(finite, (o64 - r).abs(), torch.zeros((), dtype=f64, device=o64.device))
        bound = r.abs().mul_(rtol).add_(atol)
        fail = ~finite | (err > bound)
        ratio = err / bound.clamp_min(torch.finfo(f64).tiny)
        c_unw, c_nonfin = int(unw.sum()), int(nonfin.sum())
        n_unw += c_unw
        n_nonfin += c_nonfin
        n_fail += int(fail.sum())
        if c_unw:
            idx = torch.nonzero(unw).flatten()
            if first_unw < 0:
                first_unw = s + int(idx[0])
            last_unw = s + int(idx[-1])
        if c_nonfin and first_nonfin < 0:
            first_nonfin = s + int(torch.nonzero(nonfin)[0, 0])
        max_abs = max(max_abs, float(err.max()) if err.numel() else 0.0)
        max_rel = max(max_rel, float((err / r.abs().clamp_min(rel_floor)).max()) if err.numel() else 0.0)
        if err.numel():
            j = int(torch.argmax(ratio))
            if float(ratio[j]) > max_ratio or ratio_at < 0:
                max_ratio, ratio_at = float(ratio[j]), s + j
        sum_e2 += float((err * err).sum())
        sum_r2 += float((r * r).sum())
    shape = tuple(out.shape)
    worst = worst_out = worst_ref = worst_ulps = None
    if ratio_at >= 0 and n_nonfin + n_unw < n:
        if not bool(torch.isfinite(o_flat[ratio_at])):  # all-zero ratios landed on a bad element
            ratio_at = int(torch.nonzero(torch.isfinite(o_flat.to(f64)))[0, 0])
        worst = _unravel(ratio_at, shape)
        worst_out, worst_ref = float(o_flat[ratio_at]), float(r_flat[ratio_at])
        worst_ulps = abs(worst_out - worst_ref) / ulp(worst_ref, dname)
    fro = math.sqrt(sum_e2 / sum_r2) if sum_r2 > 0 else (0.0 if sum_e2 == 0 else math.inf)
    return ErrorFigures(
        dtype=dname, atol=float(atol), rtol=float(rtol), passed=n_fail == 0, n_elements=n,
        n_failing=n_fail, n_nonfinite=n_nonfin, n_unwritten=n_unw, max_abs_err=max_abs,
        max_rel_err=max_rel, rel_frobenius=fro, tolerance_ratio=max_ratio, worst_index=worst,
        worst_out=worst_out, worst_ref=worst_ref, worst_ulps=worst_ulps,
        first_unwritten=_unravel(first_unw, shape) if first_unw >= 0 else None,
        last_unwritten=_unravel(last_unw, shape) if last_unw >= 0 else None,
        first_nonfinite=_unravel(first_nonfin, shape) if first_nonfin >= 0 else None,
        first_nonfinite_ref=float(r_flat[first_nonfin]) if first_nonfin >= 0 else None)


# ----------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class CheckReport:
    """One (config, seed, family) check of a kernel; ``figures`` are the first call's."""

    config: str
    seed: int
    family: str
    passed: bool
    tag: str | None               # a FAILURE_TAGS key, None when passed
    reason: str | None            # one readable line, None when passed
    figures: ErrorFigures | None  # first call (before the reference existed) vs reference
    after_figures: ErrorFigures | None  # second call (fresh buffers, after the reference)
    reference_seconds: float
    phase: str = "gate"           # "gate", "recheck", "timed_output" or "side_stream_check"

    def as_dict(self) -> dict:
        return {"config": self.config, "seed": self.seed, "family": self.family, "phase": self.phase,
                "passed": self.passed, "tag": self.tag, "reason": self.reason,
                "figures": self.figures.as_dict() if self.figures else None,
                "after_figures": self.after_figures.as_dict() if self.after_figures else None,
                "reference_seconds": self.reference_seconds}


@dataclass(frozen=True)
class GateResult:
    """The gate's result for one kernel at one config (plus its boundary configs)."""

    kernel: str
    config: str
    passed: bool
    pass_rate: float              # seeds whose every check passed / seeds
    n_seeds: int
    n_seeds_passed: int
    min_pass_rate: float
    seeds: tuple[int, ...]
    families: tuple[str, ...]
    boundary_configs: tuple[str, ...]
    skipped_configs: tuple[tuple[str, str], ...]  # (config key, why the kernel does not support it)
    atol: float
    rtol: float
    reports: tuple[CheckReport, ...]
    reason: str | None            # the first failure's, even when min_pass_rate let it pass
    tag: str | None
    reference_seconds: float      # wall time spent in the float64 reference
    seconds: float                # wall time of the whole gate

    @property
    def failures(self) -> tuple[CheckReport, ...]:
        return tuple(r for r in self.reports if not r.passed)

    def tag_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.failures:
            counts[r.tag] = counts.get(r.tag, 0) + 1
        return counts

    def to_row(self) -> dict:
        """Strict-JSON summary (``harness.jsonsafe``); failing checks carry their full error figures."""
        fails = self.failures
        worst = max((r for r in self.reports if r.figures is not None),
                    key=lambda r: r.figures.tolerance_ratio, default=None)
        return jsonable({
            "kernel": self.kernel, "config": self.config, "passed": self.passed,
            "pass_rate": self.pass_rate, "n_seeds": self.n_seeds, "n_seeds_passed": self.n_seeds_passed,
            "min_pass_rate": self.min_pass_rate, "seeds": list(self.seeds), "families": list(self.families),
            "boundary_configs": list(self.boundary_configs),
            "skipped_configs": [list(s) for s in self.skipped_configs],
            "atol": self.atol, "rtol": self.rtol, "tag": self.tag, "reason": self.reason,
            "tags": self.tag_counts(), "n_checks": len(self.reports), "n_failed": len(fails),
            "reference_seconds": self.reference_seconds, "gate_seconds": self.seconds,
            "worst": worst.as_dict() if worst else None,
            "failures": [r.as_dict() for r in fails[:MAX_ROW_FAILURES]],
            "failures_left_out": max(0, len(fails) - MAX_ROW_FAILURES),
        })


# ----------------------------------------------------------------------------- calls


@dataclass(frozen=True)
class _Call:
    visible: object            # what out held when the current stream finished
    exception: str | None
    side_stream: str | None
    left_running: str | None = None
    state_changed: str | None = None


def _is_cuda(t) -> bool:
    return t.device.type == "cuda"


def _exception_text(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    msg = str(exc).strip().splitlines()
    return f"kernel raised {type(exc).__name__}: {msg[0] if msg else ''}{where}"


def _checked_call(fn: Callable, q, k, v, out, *, causal: bool, scale: float) -> _Call:
    """Poison out, call the kernel, read out as the current stream sees it; then what the call
    left behind: device work still running once the current stream finished (confirmed on
    DRAIN_CONFIRM_CALLS calls in a row), host threads or processes still busy, global state
    (numeric flags, thread counts, affinity) changed."""
    import torch

    from harness.measurement import leftover
    from harness.measurement.numerics import capture, describe, diff

    cuda = _is_cuda(out)
    state0 = capture()
    left = None
    for attempt in range(leftover.DRAIN_CONFIRM_CALLS):
        poison_(out)
        if cuda:
            torch.cuda.synchronize(out.device)
        host0 = leftover.host_snapshot()
        try:
            fn(q, k, v, out, causal=causal, scale=scale)
            if cuda:
                torch.cuda.current_stream(out.device).synchronize()
        except Exception as exc:  # the kernel's failure is the check's result, with its text
            return _Call(visible=None, exception=_exception_text(exc), side_stream=None)
        visible = out.clone() if cuda else out
        drain = None
        if cuda:
            torch.cuda.current_stream(out.device).synchronize()  # the copy above is not the kernel's work
            try:
                drain = leftover.drain_s(out.device)
            except Exception as exc:
                return _Call(visible=None, exception=_exception_text(exc), side_stream=None)
        host = leftover.host_leftovers(host0)
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
        return _Call(visible=out, exception=None, side_stream=None, left_running=left)
    side = None
    if not _bits_equal(visible, out):
        changed = int(_bits_diff(visible, out).sum())
        side = (f"{changed} of {out.numel()} output elements were written after the current stream "
                f"had finished (work on another stream that the current stream never waited for)")
    return _Call(visible=visible, exception=None, side_stream=side, left_running=left)


def _mutated(pristine, inputs) -> str | None:
    import torch

    for name, p, t in zip("qkv", pristine, inputs):
        if not _bits_equal(p, t):
            diff = _bits_diff(p, t)
            n = int(diff.sum())
            j = int(torch.nonzero(diff)[0, 0]) if n else 0
            return (f"kernel modified its input {name}: {n} of {p.numel()} elements changed, first at "
                    f"{_fmt_idx(_unravel(j, p.shape))}: {float(p.view(-1)[j]):.4g} -> {float(t.view(-1)[j]):.4g}")
    return None


def _constant_axis(out, ref, dtype) -> str | None:
    """An axis along which out is exactly constant while ref varies by > DEGENERATE_ULPS ULPs."""
    import torch

    for axis in range(out.dim()):
        if out.shape[axis] < 2:
            continue
        if not bool((out == out.narrow(axis, 0, 1)).all()):
            continue
        hi, lo = ref.amax(dim=axis), ref.amin(dim=axis)
        spread = hi - lo
        limit = DEGENERATE_ULPS * _ulp_tensor(torch.maximum(hi.abs(), lo.abs()), dtype)
        if bool((spread > limit).any()):
            name = _AXES[axis] if out.dim() == 4 else f"dim {axis}"
            return (f"output is exactly constant along the {name} axis (all {out.shape[axis]} equal) "
                    f"while the reference varies along it by up to {float(spread.max()):.3g}")
    return None


def _disagreement(a, b, ref, atol: float, rtol: float) -> str | None:
    """Where two passing outputs differ by more than the tolerance, or None."""
    import torch

    fa, fb, fr = a.reshape(-1), b.reshape(-1), ref.reshape(-1)
    worst, at = 0.0, -1
    for s, e in _chunks(fa.numel()):
        r = fr[s:e]
        d = (fa[s:e].to(torch.float64) - fb[s:e].to(torch.float64)).abs()
        ratio = d / (r.abs() * rtol + atol).clamp_min(torch.finfo(torch.float64).tiny)
        j = int(torch.argmax(ratio))
        if float(ratio[j]) > worst:
            worst, at = float(ratio[j]), s + j
    if worst <= 1.0:
        return None
    return (f"the two calls disagree: {float(fa[at]):.4g} vs {float(fb[at]):.4g} at "
            f"{_fmt_idx(_unravel(at, a.shape))} (ref {float(fr[at]):.4g}), beyond atol {atol:g} + rtol {rtol:g}·|ref|")


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _timed_reference(pristine, cfg: Config):
    device = pristine[0].device
    _sync(device)
    t0 = time.perf_counter()
    ref = reference(*pristine, causal=cfg.causal, scale=cfg.scale)
    _sync(device)
    return ref, time.perf_counter() - t0


def _new_out(cfg: Config, device):
    import torch

    qs, _, _ = cfg.shapes()
    return torch.empty(qs, dtype=getattr(torch, cfg.dtype), device=device)


def checksum(t) -> tuple[int, int]:
    """A position-weighted checksum of t's bits: equal for bit-identical tensors and, short
    of a 2^-64 accident, different otherwise. Lets the gate remember every earlier output of
    a config without keeping the outputs."""
    import torch

    bits = _as_bits(t).reshape(-1)
    acc = total = 0
    for s, e in _chunks(bits.numel()):
        b = bits[s:e].to(torch.int64)
        w = torch.arange(s, e, dtype=torch.int64, device=b.device).mul_(0x9E3779B1).add_(1)
        acc += int((b * w).sum())
        total += int(b.sum())
    return acc & (2**64 - 1), total


def _judge(out, fig: ErrorFigures, ref, dtype, *, mismatch: str = "mismatch", nonfinite: str = "nonfinite",
           repeat: Callable | None = None, flat: bool = True) -> tuple[str | None, str | None]:
    """The output half of the check sequence, in its one order: (tag, detail), or (None, None).

    Unwritten (the poison survived) → a repeat of an earlier output (``repeat(out, fig)``,
    asked only of a failing output) → non-finite → out of tolerance → exactly constant along
    an axis (``flat``). ``mismatch``/``nonfinite`` name those failures where the call is a
    later one (``stale_mismatch``: state carried across calls).
    """
    if fig.n_unwritten:
        return "unwritten", fig.summary()
    if repeat is not None and not fig.passed:
        found = repeat(out, fig)
        if found is not None:
            return found
    if fig.n_nonfinite:
        return nonfinite, fig.summary()
    if not fig.passed:
        return mismatch, fig.summary()
    if flat:
        axis = _constant_axis(out, ref, dtype)
        if axis:
            return "degenerate", f"{axis} (within tolerance only because the tolerance is loose: {fig.summary()})"
    return None, None


@dataclass(frozen=True)
class _Checked:
    """One pass of the check sequence over one output."""

    tag: str | None
    detail: str | None
    visible: object               # out as the current stream saw it; None when the call raised
    figures: ErrorFigures | None  # None when a call check failed before the comparison
    ref: object                   # the float64 reference (None when the comparison was not reached)
    reference_seconds: float


def _check_output(out, inputs, cfg: Config, *, atol: float, rtol: float, ref=None, **judge) -> _Checked:
    """Reference (unless given) → compare → ``_judge``: the half of the sequence the timed
    output check shares with the calls the gate makes itself."""
    secs = 0.0
    if ref is None:
        ref, secs = _timed_reference(inputs, cfg)
    fig = compare(out, ref, atol=atol, rtol=rtol, dtype=cfg.dtype)
    tag, detail = _judge(out, fig, ref, cfg.dtype, **judge)
    return _Checked(tag, detail, out, fig, ref, secs)


def _check_call(fn, cfg: Config, q, k, v, out, pristine, *, atol: float, rtol: float, ref=None,
                **judge) -> _Checked:
    """The check sequence: poison ``out`` → call → the kernel raised, wrote its inputs, or
    wrote off the current stream → ``_check_output`` (reference, compare, judge)."""
    c = _checked_call(fn, q, k, v, out, causal=cfg.causal, scale=cfg.scale)
    if c.exception:
        return _Checked("exception", c.exception, None, None, None, 0.0)
    mut = _mutated(pristine, (q, k, v))
    if mut:
        return _Checked("input_mutated", mut, c.visible, None, None, 0.0)
    if c.side_stream:
        return _Checked("side_stream", c.side_stream, c.visible, None, None, 0.0)
    if c.state_changed:
        return _Checked("numerics_changed", c.state_changed, c.visible, None, None, 0.0)
    if c.left_running:
        return _Checked("left_running", c.left_running, c.visible, None, None, 0.0)
    return _check_output(c.visible, pristine, cfg, atol=atol, rtol=rtol, ref=ref, **judge)


def _run_case(fn, cfg: Config, seed: int, family: str, atol: float, rtol: float, device, prefix: str,
              seen: dict):
    """One (config, seed, family) check: returns (CheckReport, the first call's visible output).

    ``seen``: checksums of the config's earlier outputs (the "inputs changed" check).
    """
    q, k, v = make_inputs(cfg, seed, family, device)
    pristine = tuple(t.clone() for t in (q, k, v))
    key = cfg.key()

    def report(tag=None, detail=None, fig=None, fig2=None, secs=0.0):
        return CheckReport(config=key, seed=seed, family=family, passed=tag is None, tag=tag,
                           reason=f"{prefix}: {detail}" if tag else None, figures=fig, after_figures=fig2,
                           reference_seconds=secs)

    def repeat(out, fig):
        earlier = seen.get(checksum(out))
        if earlier is None:
            return None
        return "degenerate", (f"output is bit-identical to seed {earlier[0]} family {earlier[1]}'s although "
                              f"the inputs changed (a result cached by shape or pointer?): {fig.summary()}")

    first = _check_call(fn, cfg, q, k, v, _new_out(cfg, device), pristine, atol=atol, rtol=rtol, repeat=repeat)
    secs = first.reference_seconds
    if first.tag:
        return report(first.tag, first.detail, first.figures, secs=secs), first.visible
    # Second call: fresh allocations while the first call's buffers are still alive (new
    # addresses), after the reference has run and freed its scratch.
    q2, k2, v2 = (t.clone() for t in pristine)
    second = _check_call(fn, cfg, q2, k2, v2, _new_out(cfg, device), pristine, atol=atol, rtol=rtol,
                         ref=first.ref, mismatch="stale_mismatch", nonfinite="stale_mismatch", flat=False)
    if second.tag:
        why = ("second call: " if second.tag in _CALL_TAGS else
               "first call passed, second call (fresh buffers, after the reference ran) fails: ")
        return report(second.tag, why + second.detail, first.figures, second.figures, secs), first.visible
    dis = _disagreement(first.visible, second.visible, first.ref, atol, rtol)
    if dis:
        return report("stale_mismatch", dis, first.figures, second.figures, secs), first.visible
    return report(fig=first.figures, fig2=second.figures, secs=secs), first.visible


def _spec_parts(spec):
    fn = getattr(spec, "fn", spec)
    name = getattr(spec, "name", getattr(fn, "__name__", "kernel"))
    return fn, name


def gate(spec, cfg: Config, *, seeds, families=DEFAULT_FAMILIES, atol: float, rtol: float,
         device: str = "cpu", min_pass_rate: float = 1.0) -> GateResult:
    """Check ``spec`` at ``cfg`` and its boundary configs for every seed × family.

    A seed passes if every check of it passes; the gate passes if the share of passing
    seeds reaches ``min_pass_rate`` and no failure is structural (STRUCTURAL_TAGS).
    """
    import torch

    t_start = time.perf_counter()
    fn, name = _spec_parts(spec)
    seeds = tuple(int(s) for s in seeds)
    families = tuple(families)
    if not seeds:
        raise UserError("the correctness gate needs at least one seed")
    for fam in families:
        if fam not in FAMILIES:
            raise UserError(f"unknown input family '{fam}' (known: {', '.join(FAMILIES)})")
    if not families:
        raise UserError("the correctness gate needs at least one input family")
    if not 0.0 < min_pass_rate <= 1.0:
        raise UserError(f"min_pass_rate must be in (0, 1], got {min_pass_rate}")
    if atol < 0 or rtol < 0:
        raise UserError(f"tolerances must be >= 0, got atol {atol}, rtol {rtol}")
    dev_type = torch.device(device).type
    if hasattr(spec, "unusable_reason") and spec.unusable_reason(dev_type):
        raise UserError(f"kernel '{name}' cannot run here: {spec.unusable_reason(dev_type)}")
    if hasattr(spec, "config_reason") and spec.config_reason(cfg):
        raise UserError(f"kernel '{name}' cannot be gated at {cfg.key()}: {spec.config_reason(cfg)}")

    configs, skipped = [(cfg, "")], []
    for bc in boundary_configs(cfg):
        why = spec.config_reason(bc) if hasattr(spec, "config_reason") else None
        if why:
            skipped.append((bc.key(), why))
        else:
            configs.append((bc, f" (boundary seq_len {bc.seq_len})"))

    reports: list[CheckReport] = []
    for c, note in configs:
        seen: dict = {}  # checksums of this config's first-call outputs -> (seed, family)
        for seed in seeds:
            for fam in families:
                rep, visible = _run_case(fn, c, seed, fam, atol, rtol, device, f"seed {seed} family {fam}{note}", seen)
                reports.append(rep)
                if visible is not None:
                    seen.setdefault(checksum(visible), (seed, fam))
                del visible
    if dev_type == "cuda":
        q, k, v = make_inputs(cfg, seeds[0], families[0], device)
        tag = "side_stream"
        try:
            why = side_stream_check(fn, q, k, v, _new_out(cfg, device), causal=cfg.causal, scale=cfg.scale)
        except Exception as exc:
            why, tag = _exception_text(exc), "exception"
        del q, k, v
        reports.append(CheckReport(config=cfg.key(), seed=seeds[0], family=families[0], passed=why is None,
                                   tag=tag if why else None,
                                   reason=f"seed {seeds[0]} family {families[0]}: {why}" if why else None,
                                   figures=None, after_figures=None, reference_seconds=0.0,
                                   phase="side_stream_check"))

    seed_ok = {s: all(r.passed for r in reports if r.seed == s) for s in seeds}
    n_ok = sum(seed_ok.values())
    rate = n_ok / len(seeds)
    fails = [r for r in reports if not r.passed]
    structural = any(r.tag in STRUCTURAL_TAGS for r in fails)
    return GateResult(
        kernel=name, config=cfg.key(), passed=rate >= min_pass_rate and not structural, pass_rate=rate,
        n_seeds=len(seeds), n_seeds_passed=n_ok, min_pass_rate=min_pass_rate, seeds=seeds, families=families,
        boundary_configs=tuple(c.key() for c, _ in configs[1:]), skipped_configs=tuple(skipped),
        atol=float(atol), rtol=float(rtol), reports=tuple(reports),
        reason=fails[0].reason if fails else None, tag=fails[0].tag if fails else None,
        reference_seconds=sum(r.reference_seconds for r in reports), seconds=time.perf_counter() - t_start)


def recheck_in_place(spec, cfg: Config, q, k, v, out, *, seed: int, family: str, atol: float,
                     rtol: float) -> CheckReport:
    """After timing: fresh inputs written into the SAME buffers, out poisoned, one more call.

    A kernel that remembers results by shape or by pointer returns its old answer here; it
    is tagged stale_mismatch (the reason says when the output equals the pre-refill one).
    """
    fn, _ = _spec_parts(spec)
    before = out.clone()
    fill_inputs_(q, k, v, cfg, seed, family)
    pristine = tuple(t.clone() for t in (q, k, v))
    prefix = f"recheck seed {seed} family {family}"

    def report(tag=None, detail=None, fig=None, secs=0.0):
        return CheckReport(config=cfg.key(), seed=seed, family=family, passed=tag is None, tag=tag,
                           reason=f"{prefix}: {detail}" if tag else None, figures=fig, after_figures=None,
                           reference_seconds=secs, phase="recheck")

    r = _check_call(fn, cfg, q, k, v, out, pristine, atol=atol, rtol=rtol, mismatch="stale_mismatch")
    detail = r.detail
    if r.tag == "stale_mismatch":
        same = _bits_equal(r.visible, before)
        detail = ("output is bit-identical to the one before the inputs were rewritten in place (a result "
                  "remembered by shape or pointer): " if same else
                  "fails after the inputs were rewritten in place: ") + detail
    return report(r.tag, detail, r.figures, r.reference_seconds)


def check_timed_output(cfg: Config, q, k, v, out, *, atol: float, rtol: float, label: str,
                       what: str = "output of the last timed call") -> CheckReport:
    """After timing: the output the last timed call left in ``out`` against a fresh reference.

    The gate saw a handful of calls; timing makes hundreds. A kernel that drifts, degrades
    or caches after N calls passes the gate and is caught here, on the timed buffers
    themselves (nothing is re-run, inputs are not touched). The timed path poisoned ``out``
    with ``poison_`` before the call, so what the call left unwritten is tagged unwritten.
    """
    _sync(out.device)
    r = _check_output(out, (q, k, v), cfg, atol=atol, rtol=rtol, mismatch="stale_mismatch", flat=False)
    return CheckReport(config=cfg.key(), seed=-1, family="timed", passed=r.tag is None, tag=r.tag,
                       reason=f"{label}: {what}: {r.detail}" if r.tag else None,
                       figures=r.figures, after_figures=None, reference_seconds=r.reference_seconds,
                       phase="timed_output")


def side_stream_check(spec, q, k, v, out, *, causal: bool, scale: float) -> str | None:
    """Why the kernel's work runs off the current stream, or None (always None on the CPU).

    Decided by ordering, not by a race the kernel could win however fast it is:

    * a spin holds the current stream while the kernel is called; ``out`` is read from a
      stream of the check's own while the hold still lasts (checked by an event after the
      spin): every element must still hold the poison, since nothing the caller's stream
      orders may have run yet. Work on a stream that does not wait for the caller's writes
      during the hold, however short it is;
    * a copy of ``out`` enqueued on the current stream right after the call (no host sync
      in between) must equal ``out`` after a device-wide synchronize: work forked to another
      stream and never joined back writes after the current stream is done with the call.
    """
    import torch

    if not _is_cuda(out):
        return None
    from harness.measurement.timing.timers import hold_stream, max_sm_hz

    fn, _ = _spec_parts(spec)
    dev = out.device
    stream = torch.cuda.current_stream(dev)
    watcher = torch.cuda.Stream(device=dev)  # a pool stream: it never waits for the caller's
    cycles_per_s = max_sm_hz(dev)
    hold, looks = SIDE_STREAM_HOLD_S, 0
    during = torch.empty_like(out)
    while looks < SIDE_STREAM_REPS:
        poison_(out)
        torch.cuda.synchronize(dev)
        hold_stream(hold, cycles_per_s)
        held = torch.cuda.Event()
        held.record(stream)
        t0 = time.perf_counter()
        fn(q, k, v, out, causal=causal, scale=scale)
        t_call = time.perf_counter() - t0
        visible = out.clone()  # on the current stream, right behind the call
        time.sleep(SIDE_STREAM_SETTLE_S)
        with torch.cuda.stream(watcher):
            during.copy_(out)
        watcher.synchronize()
        still_held = not held.query()
        torch.cuda.synchronize(dev)
        if not still_held:
            if t_call >= hold or hold >= SIDE_STREAM_MAX_HOLD_S:
                # The call itself waited for the hold (it synchronizes), or the host never
                # outlasted it: the look cannot be made; the forked-work look below and the
                # gate's per-call stream check still stand.
                if not _bits_equal(visible, out):
                    late = int(_bits_diff(visible, out).sum())
                    return (f"{late} of {out.numel()} output elements were written after the caller's stream had "
                            f"finished the call: work forked to another stream and never joined back")
                return None
            hold *= 2
            continue
        looks += 1
        early = int((~unwritten_mask(during)).sum())
        if early:
            return (f"{early} of {out.numel()} output elements were written while the caller's stream was still "
                    f"held before the call ({hold * 1e3:.0f} ms spin): the work runs on a stream that does not "
                    f"wait for the caller's")
        if not _bits_equal(visible, out):
            late = int(_bits_diff(visible, out).sum())
            return (f"{late} of {out.numel()} output elements were written after the caller's stream had finished "
                    f"the call: work forked to another stream and never joined back")
    return None


def gate_bytes(cfg: Config) -> int:
    """Peak device bytes of gate() at ``cfg``, for the VRAM model: three sets of q, k, v
    (first call, pristine copies, second call), four outputs (two calls and their stream
    snapshots), a bool mask, the reference and compare()'s blocks.
    The kernel's own extra memory (KernelSpec.extra_bytes) comes on top."""
    qs, ks, _ = cfg.shapes()
    q = math.prod(qs) * cfg.elem_bytes
    kv = 2 * math.prod(ks) * cfg.elem_bytes
    bool_mask = math.prod(qs)  # one full-size bool temporary at a time (bit comparisons)
    return 3 * (q + kv) + 4 * q + bool_mask + reference_bytes(cfg) + compare_bytes(math.prod(qs))

