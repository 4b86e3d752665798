"""Tolerance power: outputs wrong in known ways, checked against a registration's tolerance.

Pre-registration means showing the test can fail. At `bench register`, on the smallest and
largest grid points of each dtype and head_dim, the float64 reference is bent in known ways
(CANARIES), cast to the line's dtype as a kernel would write it, and compared with the
gate's own rule (``correctness.figures.compare``). A canary the tolerance lets through at a point
means a kernel with that bug would pass the gate there: `register` refuses unless the
registration waives it (``[correctness] accept_weak``). Precision downgrades inside a line's
dtype (DOWNGRADES) are reported, seen or not, never refused.

The reference is computed on a subset, so registering stays fast on a CPU: batch 1, one KV
head and the query heads it serves, the registration's first seed, every registered input
family, at the point's full seq_len and head_dim; of the query rows, the last CANARY_ROWS
(exact under the bottom-right causal alignment) and, for causal attention, the first
CANARY_ROWS with their keys (exact: they see no later key). The inputs are the same
families' draws at that shape, not the gate's own tensors: a canary rejected on them is
rejected by the family the gate runs; one passing on them may still fail elsewhere, and is
refused all the same (fail closed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.workloads import Config, with_dtype
from harness.measurement.correctness.figures import compare
from harness.workloads.inputs import make_inputs

# Query rows kept per view of a grid point (see the module docstring).
CANARY_ROWS = 32
SCALE_ERROR = 0.01        # scale_1pct: softmax scale off by 1%
TF32_MANTISSA_BITS = 10
CANARIES = {
    "drop_last_key": "the last key (and its value) left out of the softmax",
    "scale_1pct": f"the softmax scale off by {SCALE_ERROR:.0%}",
    "causal_shift": "the causal mask shifted by one (each query also sees the next key)",
    "tf32": "QKᵀ and PV with TF32 operands (10-bit mantissa) in a float32 line",
}
# Precision downgrades reported per line dtype: operands of QKᵀ and PV rounded to these.
DOWNGRADES = {"float16": ("bfloat16",), "bfloat16": (), "float32": ("float16", "bfloat16", "tf32")}


def _round(x, fmt: str):
    """float64 ``x`` with its values rounded to ``fmt`` (tf32: float32 with a 10-bit mantissa)."""
    import torch

    if fmt == "tf32":
        drop = 23 - TF32_MANTISSA_BITS
        bits = x.to(torch.float32).view(torch.int32)
        half = (1 << (drop - 1)) - 1
        bits = (bits + half + ((bits >> drop) & 1)) & ~((1 << drop) - 1)  # round to nearest even
        return bits.view(torch.float32).to(torch.float64)
    return x.to(getattr(torch, fmt)).to(torch.float64)


def _attention64(q, k, v, *, causal: bool, scale: float, shift: int = 0, fmt: str | None = None):
    """float64 attention (GQA expanded, bottom-right causal), optionally bent."""
    import torch

    h = q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    if fmt:
        q, k, v = _round(q, fmt), _round(k, fmt), _round(v, fmt)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        j = torch.arange(nk)
        i = torch.arange(nq) + (nk - nq) + shift
        s = s.masked_fill(j[None, :] > i[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    if fmt:
        p = _round(p, fmt)
    return torch.matmul(p, v)


def _views(cfg: Config, q, k, v):
    """(name, q, k, v) subsets whose float64 attention is exactly that of the rows they keep."""
    nq = q.shape[2]
    rows = min(CANARY_ROWS, nq)
    views = [(f"last {rows} rows", q[:, :, nq - rows:], k, v)]
    if cfg.causal and nq == k.shape[2] and nq > rows:
        views.append((f"first {rows} rows", q[:, :, :rows], k[:, :, :rows], v[:, :, :rows]))
    return views


def _bent(name: str, q, k, v, *, causal: bool, scale: float):
    if name == "drop_last_key":
        if k.shape[2] < 2:
            return None
        if causal and q.shape[2] == k.shape[2]:  # the last row would see no key at all
            q = q[:, :, :-1]
        return _attention64(q, k[:, :, :-1], v[:, :, :-1], causal=causal, scale=scale), q
    if name == "scale_1pct":
        return _attention64(q, k, v, causal=causal, scale=scale * (1 + SCALE_ERROR)), q
    if name == "causal_shift":
        return _attention64(q, k, v, causal=causal, scale=scale, shift=1), q
    return _attention64(q, k, v, causal=causal, scale=scale, fmt=name), q  # a precision


def applies(name: str, cfg: Config) -> bool:
    """Whether canary (or precision) ``name`` means anything at ``cfg``."""
    if name == "causal_shift":
        return cfg.causal
    if name == "tf32":
        return cfg.dtype == "float32"
    return name in CANARIES or name in DOWNGRADES[cfg.dtype]


def canary_points(configs) -> list[Config]:
    """The smallest and largest grid points (by seq_len, then batch × heads) of each dtype,
    head_dim and causal setting (a causal point for the shifted mask)."""
    groups: dict[tuple, list[Config]] = {}
    for c in configs:
        groups.setdefault((c.dtype, c.head_dim, c.causal), []).append(c)
    points = []
    for group in groups.values():
        group = sorted(group, key=lambda c: (c.seq_len, c.batch * c.heads, c.key()))
        for c in (group[0], group[-1]):
            if c not in points:
                points.append(c)
    return points


@dataclass(frozen=True)
class Check:
    """One canary at one grid point: rejected by the tolerance (on some family and view)?"""

    canary: str
    point: str
    dtype: str
    rejected: bool
    atol: float
    rtol: float
    worst_ratio: float      # largest max |out - ref| / (atol + rtol·|ref|) over families and views
    reject_atol: float      # an atol below this (at the registered rtol) rejects it (<= 0: none does)
    reject_rtol: float      # an rtol below this (at the registered atol) rejects it

    def as_dict(self) -> dict:
        """Raw values: a bound no finite tolerance reaches stays inf (the ledger writes "Infinity")."""
        return dict(self.__dict__)

    def fix(self) -> str:
        parts = []
        if self.reject_atol > 0:
            parts.append(f"atol < {self.reject_atol:.3g} (at rtol {self.rtol:g})")
        if self.reject_rtol > 0 and math.isfinite(self.reject_rtol):
            parts.append(f"rtol < {self.reject_rtol:.3g} (at atol {self.atol:g})")
        return " or ".join(parts) if parts else "no tolerance of this dtype (the canary is exact in it)"


def check(configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list[Check]:
    """Every canary (or precision in ``names``) at every canary point of ``configs``."""
    import torch

    out: list[Check] = []
    drawn: dict = {}  # one draw per shape and family: every dtype sees the same float32 values
    for cfg in canary_points(configs):
        sub = Config(cfg.workload, 1, cfg.heads // cfg.kv_heads, 1, cfg.seq_len, cfg.head_dim, "float32", cfg.causal)
        a, r = atol[cfg.dtype], rtol[cfg.dtype]
        todo = [n for n in (names or CANARIES) if applies(n, cfg)]
        found = {n: [False, 0.0, 0.0, 0.0] for n in todo}
        for fam in families:
            if all(f[0] for f in found.values()):
                break  # every canary already rejected here: more families cannot change that
            if (sub, fam) not in drawn:
                drawn[(sub, fam)] = make_inputs(sub, seed, fam, "cpu")
            # make_inputs rounds its float32 draws once to the dtype: so does this cast.
            q, k, v = (t.to(getattr(torch, cfg.dtype)).to(torch.float64) for t in drawn[(sub, fam)])
            for _, vq, vk, vv in _views(cfg, q, k, v):
                for n in todo:
                    bent = _bent(n, vq, vk, vv, causal=cfg.causal, scale=cfg.scale)
                    if bent is None:
                        continue
                    got, bq = bent
                    ref = _attention64(bq, vk, vv, causal=cfg.causal, scale=cfg.scale)
                    _judge(found[n], got, ref, cfg.dtype, a, r)
        for n, (rej, ratio, ra, rr) in found.items():
            out.append(Check(n, cfg.key(), cfg.dtype, rej, a, r, ratio, ra, rr))
    return out


def _judge(f: list, got, ref, dtype: str, a: float, r: float) -> None:
    """Fold one bent output into its canary's findings ``f`` = [rejected, largest tolerance
    ratio, atol it needs, rtol it needs]: ``got`` rounded to ``dtype`` as a kernel would write
    it, judged by the gate's rule against the float64 ``ref``."""
    import torch

    got = got.to(getattr(torch, dtype))
    fig = compare(got, ref, atol=a, rtol=r, dtype=dtype)
    err = (got.to(torch.float64) - ref).abs()
    f[0] = f[0] or not fig.passed
    f[1] = max(f[1], fig.tolerance_ratio)
    f[2] = max(f[2], float((err - r * ref.abs()).max()))
    f[3] = max(f[3], float(((err - a) / ref.abs().clamp_min(1e-300)).max()))


def _judge_own(f: list, got, ref, dtype: str, a: float, r: float) -> None:
    """``_judge`` for an output judged by a tolerance of its own (``a``, ``r``): it rejects the
    canary or not, whatever the line's tolerance, so it adds nothing to the atol and rtol the
    line would need."""
    import torch

    fig = compare(got.to(getattr(torch, dtype)), ref, atol=a, rtol=r, dtype=dtype)
    f[0] = f[0] or not fig.passed
    f[1] = max(f[1], fig.tolerance_ratio)


def workload_points(workload, configs) -> list:
    """A plugin workload's canary points: the smallest and largest grid point (by its largest
    input) of each dtype."""
    groups: dict[str, list] = {}
    for c in configs:
        groups.setdefault(c.dtype, []).append(c)
    points = []
    for group in groups.values():
        group = sorted(group, key=lambda c: (workload.input_elems(c), c.key()))
        for c in (group[0], group[-1]):
            if c not in points:
                points.append(c)
    return points


def check_workload(workload, configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list[Check]:
    """Every canary of ``workload`` (``workload.canaries``, or ``names``) at its canary points,
    on the whole point: each bent float64 output (``workload.canary``: one per declared output)
    is rounded to the dtype as a kernel would write it and judged by the gate's rule against
    its reference, under its tolerance (``Workload.output_tolerances``; an output with one of
    its own rejects or not whatever the line's, so the atol/rtol that would reject the canary
    are those of the outputs judged by the line's)."""
    import torch

    out: list[Check] = []
    drawn: dict = {}  # one float32 draw per shape and family: every dtype sees the same values
    for cfg in workload_points(workload, configs):
        a, r = atol[cfg.dtype], rtol[cfg.dtype]
        todo = [n for n in (names or workload.canaries) if workload.canary_applies(n, cfg)]
        found = {n: [False, 0.0, 0.0, 0.0] for n in todo}
        base = with_dtype(cfg, "float32")
        for fam in families:
            if all(f[0] for f in found.values()):
                break  # every canary already rejected here: more families cannot change that
            if (base, fam) not in drawn:
                drawn[(base, fam)] = workload.make_inputs(base, seed, fam, "cpu")
            inputs = tuple(t.to(getattr(torch, cfg.dtype)).to(torch.float64) for t in drawn[(base, fam)])
            refs = workload.reference(cfg, inputs)
            tols = workload.output_tolerances(cfg, a, r)
            for n in todo:
                bent = workload.canary(n, cfg, inputs)
                if bent is None:
                    continue
                for got, ref, tol in zip(bent, refs, tols):
                    if tol == (a, r):
                        _judge(found[n], got, ref, cfg.dtype, a, r)
                    else:
                        _judge_own(found[n], got, ref, cfg.dtype, *tol)
        for n, (rej, ratio, ra, rr) in found.items():
            out.append(Check(n, cfg.key(), cfg.dtype, rej, a, r, ratio, ra, rr))
    return out


def downgrade_names(dtypes) -> tuple[str, ...]:
    """The lower precisions reported for a line of ``dtypes`` (check()'s extra names)."""
    return tuple(dict.fromkeys(f for dt in dtypes for f in DOWNGRADES.get(dt, ())))


def downgrades(checks: list[Check]) -> dict:
    """Per line dtype and lower precision (checks of DOWNGRADES names): 'seen' when the
    tolerance rejects QKᵀ and PV with operands in it at every canary point of the dtype,
    'unseen at <points>' otherwise."""
    report = {}
    for dt in sorted({c.dtype for c in checks}):
        for fmt in DOWNGRADES.get(dt, ()):
            mine = [c for c in checks if c.dtype == dt and c.canary == fmt]
            if not mine:
                continue
            missed = [c.point for c in mine if not c.rejected]
            report[f"{fmt} inside {dt}"] = "seen" if not missed else "unseen at " + ", ".join(missed)
    return report
