"""Error figures: how far one output is from the float64 reference (``compare``), in absolute,
relative and ULP terms, with the worst element named; and the default tolerances per dtype.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harness.measurement.correctness.poison import POISON_BITS, dtype_name, unwritten_mask
from harness.optional import importable

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
# Elements per block in compare(): bounds its float64 temporaries (~6 live) to ~100 MiB on a
# CPU (blocks that stay in cache) and ~400 MiB on a GPU, where each block costs some thirty
# kernel launches: at 2M elements a seq_len 8192 output took 64 blocks and ~44 ms per compare
# on the H200, most of it launches (the gate compares every kernel's output twice per case).
COMPARE_CHUNK_ELEMS = 1 << 21
COMPARE_CHUNK_ELEMS_CUDA = 1 << 23
# The one-pass table on a GPU (figures_fused.py): elements per program (16 per thread at 8
# warps; a seq_len 8192 output of batch 8 and 16 heads makes a 32k-row table, 3.4 MB) and
# the thirteen figures of a block.
FUSED_BLOCK = 4096
FUSED_WARPS = 8
# checksum()'s one pass (figures_fused): elements per program, 16 per thread at 4 warps.
CHECKSUM_BLOCK = 2048
CHECKSUM_WARPS = 4
TABLE_COLS = 13


def ulp(value: float, dtype) -> float:
    """The dtype's unit in the last place at |value| (the bf16 2-ULP trap: bfloat16 at 2.17 is 2^(1-7))."""
    import torch

    fi = torch.finfo(getattr(torch, dtype_name(dtype)))
    mag = max(abs(float(value)), fi.tiny)
    return fi.eps * 2.0 ** (math.frexp(mag)[1] - 1)


def ulp_tensor(x, dtype):
    """ulp() elementwise for a float64 tensor."""
    import torch

    fi = torch.finfo(getattr(torch, dtype_name(dtype)))
    exp = torch.frexp(x.abs().clamp_min(fi.tiny)).exponent
    return torch.ldexp(torch.full_like(x, fi.eps), (exp - 1).to(x.dtype))


def nearest(ref, dtype):
    """float64 ``ref`` rounded to the nearest value of ``dtype``, kept in float64: element by
    element no output written in ``dtype`` is closer, so it is the best any kernel can do
    against the gate (measurement/feasible.py). Rounded in float64 arithmetic (a power-of-two
    step divides exactly), not by a cast, which may round twice (through float32)."""
    import torch

    fi = torch.finfo(getattr(torch, dtype_name(dtype)))
    step = ulp_tensor(ref, dtype)
    out = torch.round(ref / step).mul_(step)
    return torch.where(out.abs() > fi.max, torch.copysign(torch.full_like(out, math.inf), out), out)


def unravel(flat: int, shape) -> tuple[int, ...]:
    idx = []
    for n in reversed(tuple(shape)):
        idx.append(flat % n)
        flat //= n
    return tuple(reversed(idx))


def fmt_idx(idx) -> str:
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
    # Which output of the call these figures are of, named where the workload declares several
    # (None: its only output; a single output's figures and rows stay as they were).
    output: str | None = None

    def summary(self) -> str:
        """One readable line: the worst element, by how much, in ULPs, against the bar (naming
        the output where the call has several)."""
        parts = []
        elements = f"elements of {self.output}" if self.output else "output elements"
        if self.n_unwritten:
            parts.append(f"{self.n_unwritten} of {self.n_elements} {elements} still hold the NaN "
                         f"poison (never written), {fmt_idx(self.first_unwritten)}.."
                         f"{fmt_idx(self.last_unwritten)}")
        if self.n_nonfinite:
            parts.append(f"{self.n_nonfinite} of {self.n_elements} {elements} are inf/NaN where the "
                         f"reference is finite, first at {fmt_idx(self.first_nonfinite)} "
                         f"(ref={self.first_nonfinite_ref:.4g})")
        if self.worst_index is not None and (self.tolerance_ratio > 1 or not parts):
            n_tol = self.n_failing - self.n_nonfinite - self.n_unwritten
            rel = "≤" if self.tolerance_ratio <= 1 else ">"
            parts.append(f"{self.output + ': ' if self.output else ''}"
                         f"err {abs(self.worst_out - self.worst_ref):.3g} at {fmt_idx(self.worst_index)} "
                         f"out={self.worst_out:.4g} ref={self.worst_ref:.4g} "
                         f"({self.worst_ulps:.3g} ulp {self.dtype}) {rel} atol {self.atol:g} + rtol "
                         f"{self.rtol:g}·|ref| ({n_tol} of {self.n_elements} elements out of tolerance; "
                         f"max abs err {self.max_abs_err:.3g}, rel Frobenius {self.rel_frobenius:.3g})")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        """Raw values (NaN and inf too: ``harness.jsonsafe`` spells them where JSON is written)."""
        d = asdict(self)
        if self.output is None:
            del d["output"]  # a single output's figures keep the keys they always had
        for key, val in d.items():
            if isinstance(val, tuple):
                d[key] = list(val)
        return d


def use_fused(device) -> bool:
    """Whether compare() takes the one-pass table on ``device`` (a GPU with Triton)."""
    return getattr(device, "type", device) == "cuda" and importable("harness.measurement.correctness.figures_fused")


def table_bytes(n_elems: int) -> int:
    """Device bytes of the one-pass table and its combined row (a GPU compare's temporaries)."""
    return 8 * TABLE_COLS * (-(-n_elems // FUSED_BLOCK) + 4)


def chunks(n: int, device=None):
    """(start, end) blocks of n elements: COMPARE_CHUNK_ELEMS_CUDA on a GPU (``device``'s type), else COMPARE_CHUNK_ELEMS."""
    step = COMPARE_CHUNK_ELEMS_CUDA if getattr(device, "type", device) == "cuda" else COMPARE_CHUNK_ELEMS
    for s in range(0, n, step):
        yield s, min(n, s + step)


def _block_rows(o_flat, r_flat, *, atol: float, rtol: float, rel_floor: float):
    """compare()'s table with torch operations, block by block: (blocks, 13) float64 on the
    device. Columns: the reference all finite, unwritten, non-finite and failing counts, max
    abs err, max rel err, max tolerance ratio, where it is (first such element), first and last
    unwritten, first non-finite (absolute indices; n or -1 where there is none), sum of err²,
    sum of ref²."""
    import torch

    n = o_flat.numel()
    f64 = torch.float64
    blocks = []
    for s, e in chunks(n, o_flat.device):
        o, r = o_flat[s:e], r_flat[s:e].to(f64)
        o64 = o.to(f64)
        finite = torch.isfinite(o64)
        unw = unwritten_mask(o)
        nonfin = ~finite & ~unw
        err = torch.where(finite, (o64 - r).abs(), torch.zeros((), dtype=f64, device=o64.device))
        bound = r.abs().mul_(rtol).add_(atol)
        fail = ~finite | (err > bound)
        ratio = err / bound.clamp_min(torch.finfo(f64).tiny)
        j = torch.argmax(ratio)
        last = e - s - 1
        blocks.append(torch.stack([
            torch.isfinite(r).all(), unw.sum(), nonfin.sum(), fail.sum(), err.max(),
            (err / r.abs().clamp_min(rel_floor)).max(), ratio[j], j + s,
            torch.where(unw.any(), unw.to(torch.uint8).argmax() + s, n),
            torch.where(unw.any(), last - unw.flip(0).to(torch.uint8).argmax() + s, -1),
            torch.where(nonfin.any(), nonfin.to(torch.uint8).argmax() + s, n),
            (err * err).sum(), (r * r).sum()]).to(f64))
    return torch.stack(blocks)


def _combined(table) -> list[float]:
    """The table's rows as one (one read of the device): counts and sums added, maxima taken,
    the worst element the first of the largest ratio, first/last indices min/max."""
    import torch

    ratio = table[:, 6]
    top = ratio.max()  # NaN if any block's is (torch.argmax's order: NaN above everything)
    hit = (ratio == top) | (ratio.isnan() & top.isnan())
    at = torch.where(hit, table[:, 7], torch.full_like(ratio, math.inf)).min()
    return torch.stack([table[:, 0].min(), table[:, 1].sum(), table[:, 2].sum(), table[:, 3].sum(),
                        table[:, 4].max(), table[:, 5].max(), top, at, table[:, 8].min(), table[:, 9].max(),
                        table[:, 10].min(), table[:, 11].sum(), table[:, 12].sum()]).tolist()


def compare(out, ref, *, atol: float, rtol: float, dtype=None, fused: bool | None = None,
            output: str | None = None) -> ErrorFigures:
    """Error figures of ``out`` (the kernel's dtype) against float64 ``ref`` (``output``: its
    name, given where the call has several outputs).

    Passes iff every element is finite and |out - ref| <= atol + rtol·|ref| (torch.allclose
    semantics, ref as the magnitude). Works in blocks so its float64 temporaries stay small.
    On a GPU the blocks' figures come from one Triton pass (figures_fused.py) where Triton is
    there (``fused``: None picks, False forces the torch operations, True requires the pass).
    """
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    dname = dtype_name(dtype if dtype is not None else out.dtype)
    o_flat, r_flat = out.reshape(-1), ref.reshape(-1)
    n = o_flat.numel()
    f64 = torch.float64
    rel_floor = max(float(atol), torch.finfo(f64).tiny)
    if fused is None:
        fused = use_fused(out.device) and dtype_name(out.dtype) in POISON_BITS
    max_abs = max_rel = max_ratio = 0.0
    ratio_at = -1
    sum_e2 = sum_r2 = 0.0
    n_fail = n_nonfin = n_unw = 0
    first_unw = last_unw = first_nonfin = -1
    if n:
        # Each block's figures stay on the device, combined there and read once: a read per
        # figure per block synchronizes the device (hundreds of times per output on a GPU).
        if fused:
            from harness.measurement.correctness import figures_fused

            table = torch.empty((-(-n // FUSED_BLOCK), TABLE_COLS), dtype=f64, device=o_flat.device)
            figures_fused.block_table(o_flat, r_flat.to(f64), table, atol=atol, rtol=rtol, rel_floor=rel_floor,
                                      block=FUSED_BLOCK, warps=FUSED_WARPS)
        else:
            table = _block_rows(o_flat, r_flat, atol=atol, rtol=rtol, rel_floor=rel_floor)
        (ref_ok, n_unw, n_nonfin, n_fail, max_abs, max_rel, max_ratio, at, first, last, first_nf, sum_e2,
         sum_r2) = _combined(table)
        if not ref_ok:
            raise ValueError("the reference has non-finite values: the inputs are not a valid test")
        n_unw, n_nonfin, n_fail, ratio_at = int(n_unw), int(n_nonfin), int(n_fail), int(at)
        first_unw = int(first) if n_unw else -1
        last_unw = int(last) if n_unw else -1
        first_nonfin = int(first_nf) if n_nonfin else -1
    shape = tuple(out.shape)
    worst = worst_out = worst_ref = worst_ulps = None
    if ratio_at >= 0 and n_nonfin + n_unw < n:
        if not bool(torch.isfinite(o_flat[ratio_at])):  # all-zero ratios landed on a bad element
            ratio_at = int(torch.isfinite(o_flat).to(torch.uint8).argmax())  # the first finite one
        worst = unravel(ratio_at, shape)
        worst_out, worst_ref = float(o_flat[ratio_at]), float(r_flat[ratio_at])
        worst_ulps = abs(worst_out - worst_ref) / ulp(worst_ref, dname)
    fro = math.sqrt(sum_e2 / sum_r2) if sum_r2 > 0 else (0.0 if sum_e2 == 0 else math.inf)
    return ErrorFigures(
        dtype=dname, atol=float(atol), rtol=float(rtol), passed=n_fail == 0, n_elements=n,
        n_failing=n_fail, n_nonfinite=n_nonfin, n_unwritten=n_unw, max_abs_err=max_abs,
        max_rel_err=max_rel, rel_frobenius=fro, tolerance_ratio=max_ratio, worst_index=worst,
        worst_out=worst_out, worst_ref=worst_ref, worst_ulps=worst_ulps,
        first_unwritten=unravel(first_unw, shape) if first_unw >= 0 else None,
        last_unwritten=unravel(last_unw, shape) if last_unw >= 0 else None,
        first_nonfinite=unravel(first_nonfin, shape) if first_nonfin >= 0 else None,
        first_nonfinite_ref=float(r_flat[first_nonfin]) if first_nonfin >= 0 else None, output=output)
