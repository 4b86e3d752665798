"""Whether a registered tolerance can be met at all (`bench register`).

A kernel writes its output in the line's dtype, so element by element none comes closer to
the float64 reference than the reference rounded to the nearest value of that dtype
(``correctness.figures.nearest``). When that output fails the gate's own rule
(``correctness.figures.compare``: |out - ref| <= atol + rtol·|ref|) on inputs the gate draws, every
kernel fails there — the baseline too, and a sweep would record it incorrect and time
nothing. The rounding grows with the output's magnitude (half a ULP: the dtype's unit
roundoff u times 2^⌊log₂|ref|⌋), and attention's output is a convex combination of V rows,
so its magnitude is set by the input family (|out| <= max|V|: ~2 on normal draws, ~138
where the outliers family injects into V).

The check runs on the gate's own inputs — the same (config, seed, family) draws — at one
config the gate checks for the baseline: the cheapest of the smallest registered point of
each dtype and its boundary seq_lens (up to FLOOR_MAX_ELEMS per tensor, so registering stays
a matter of seconds on a CPU), every registered family, and as many seeds as
``min_pass_rate`` lets fail plus one. So a refusal is exact: no kernel can pass the gate
there. A tolerance that passes here may still be too tight for a real kernel or at another
point; the sweep stops at the first config whose baseline fails the gate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from typing import Callable

from harness.workloads import Config, with_dtype
from harness.workloads.inputs import boundary_configs, make_inputs
from harness.measurement.correctness.figures import compare, nearest, ulp
from harness.measurement.reference import reference

# Largest q, k or v (elements) whose float64 reference the check computes on the CPU: a
# boundary config of the usual grids (batch 8, 16 heads, 131 keys, head_dim 128) is 2.1 M.
FLOOR_MAX_ELEMS = 1 << 22


def input_elems(cfg: Config) -> int:
    """Elements of the largest of q, k, v at ``cfg``: what drawing and referencing it costs."""
    qs, ks, _ = cfg.shapes()
    return max(math.prod(qs), math.prod(ks))


@dataclass(frozen=True)
class Floor:
    """The least tolerance of one dtype that the nearest-rounded reference passes, on the
    cases checked. ``need_atol`` is the smallest atol at the registered rtol, ``need_rtol``
    the smallest rtol at the registered atol (either alone makes it pass)."""

    dtype: str
    atol: float
    rtol: float
    point: str                  # the registered config the cases come from
    configs: tuple[str, ...]    # the gate configs checked (the point or its boundary configs)
    seeds: tuple[int, ...]      # the seeds checked: every one must fail for a refusal
    passed: bool                # some checked seed passes every case (always, when unchecked)
    need_atol: float
    need_rtol: float
    magnitude: dict             # family -> largest |ref| over the cases checked
    worst: dict | None          # the deciding element: where, |ref|, its rounding, the bound
    unchecked: str | None = None  # why no case could be checked (then it proves nothing)

    @property
    def unit_roundoff(self) -> float:
        """u: half the dtype's ULP at 1 (2^-8 for bfloat16)."""
        import torch

        return torch.finfo(getattr(torch, self.dtype)).eps / 2

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(configs=list(self.configs), seeds=list(self.seeds))
        return d


def gate_config(point: Config, baseline) -> tuple[Config | None, str | None]:
    """The cheapest config the gate checks for ``baseline`` at ``point`` (the point or one of its
    boundary configs) with more than one key — one key makes the output a V row, exact in
    the dtype — or None and why, when it is too large to reference here."""
    gated = [c for c in (point, *boundary_configs(point)) if c.seq_len > 1 and baseline.config_reason(c) is None]
    best = min(gated, key=lambda c: (input_elems(c), c.key()), default=None)
    if best is None or input_elems(best) > FLOOR_MAX_ELEMS:
        return None, (f"no config the gate checks at {point.key()} with more than one key has at most "
                      f"{FLOOR_MAX_ELEMS} elements in q, k and v: too large for a float64 reference at register")
    return best, None


def _gate_configs(point: Config, baseline) -> tuple[list[Config], str | None]:
    case, why = gate_config(point, baseline)
    return ([case] if case is not None else []), why


def floors(configs, *, atol: dict, rtol: dict, seeds, families, min_pass_rate: float, baseline,
           workload=None) -> list[Floor]:
    """One Floor per dtype of ``configs`` (the registered grid), for the gate as the
    registration runs it (``baseline`` is the KernelSpec whose boundary configs are gated).

    ``workload`` (a ``harness.workloads.api.Workload``) says which config the gate checks
    (``floor_configs``), its size (``input_elems``) and its float64 references
    (``floor_references``); None is attention's own, this module's functions."""
    size = workload.input_elems if workload is not None else input_elems
    pick = workload.floor_configs if workload is not None else _gate_configs
    drawn: dict = {}  # one float32 draw per shape, seed and family, rounded to each dtype
    refs = partial(workload.floor_references if workload is not None else attention_references, drawn=drawn)
    own = workload.output_tolerances if workload is not None else None  # attention: one output, the line's
    by_dtype: dict[str, list[Config]] = {}
    for c in configs:
        by_dtype.setdefault(c.dtype, []).append(c)
    seeds = tuple(seeds)
    # The gate passes when passing seeds / seeds >= min_pass_rate (its own comparison): a
    # refusal needs one more failing seed than that allows, and no more are checked.
    needed = next(k for k in range(len(seeds) + 1) if k / len(seeds) >= min_pass_rate)
    checked = seeds[:len(seeds) - needed + 1]
    out = []
    for dt, group in by_dtype.items():
        point = min(group, key=lambda c: (size(c), c.key()))
        cases, why = pick(point, baseline)
        if not cases:
            out.append(Floor(dt, atol[dt], rtol[dt], point.key(), (), (), True, 0.0, 0.0, {}, None, unchecked=why))
            continue
        out.append(_floor(dt, atol[dt], rtol[dt], point, cases, checked, tuple(families),
                          _judged_by(refs, own, atol[dt], rtol[dt])))
    return out


def attention_references(c: Config, seed: int, family: str, drawn: dict) -> tuple:
    """Attention's float64 reference output at (c, seed, family), on the gate's inputs."""
    q, k, v = _inputs(c, seed, family, drawn)
    return (reference(q, k, v, causal=c.causal, scale=c.scale),)


def references_of(workload, c, seed: int, family: str, drawn: dict) -> tuple:
    """A workload's float64 reference outputs at (c, seed, family), on the gate's inputs:
    drawn once in float32 per shape, rounded to ``c``'s dtype (a workload's draw must not
    depend on the dtype, as make_inputs' does not), then referenced."""
    import torch

    key = (with_dtype(c, "float32"), seed, family)
    if key not in drawn:
        drawn[key] = workload.make_inputs(key[0], seed, family, "cpu")
    inputs = tuple(t.to(getattr(torch, c.dtype)) for t in drawn[key])
    return tuple(workload.reference(c, inputs))


def _inputs(c: Config, seed: int, family: str, drawn: dict):
    """The gate's (q, k, v) at ``c``: make_inputs draws in float32 and rounds once to the
    dtype (the draw does not depend on it), so one float32 draw serves every dtype."""
    import dataclasses

    import torch

    key = (dataclasses.replace(c, dtype="float32"), seed, family)
    if key not in drawn:
        drawn[key] = make_inputs(key[0], seed, family, "cpu")
    return tuple(t.to(getattr(torch, c.dtype)) for t in drawn[key])


def _judged_by(refs: Callable, own: Callable | None, atol: float, rtol: float) -> Callable:
    """``refs`` with each reference paired with the tolerance its output is judged by (``own``:
    ``Workload.output_tolerances``; None: the line's ``atol``/``rtol`` for every output)."""
    def judged(c, seed: int, family: str) -> tuple:
        found = refs(c, seed, family)
        tols = own(c, atol, rtol) if own is not None else ((atol, rtol),) * len(found)
        return tuple(zip(found, tols))

    return judged


def _floor(dtype: str, atol: float, rtol: float, point: Config, cases: list[Config], seeds, families,
           refs: Callable) -> Floor:
    """The Floor of ``dtype`` over ``cases`` (``refs(c, seed, family)``: their float64 references,
    each with the (atol, rtol) its output is judged by, ``_judged_by``: an output with a
    tolerance of its own is judged by it, and the least atol/rtol the line needs is that of
    the outputs judged by the line's)."""
    import torch

    tiny = torch.finfo(torch.float64).tiny
    magnitude: dict[str, float] = {}
    per_seed = []  # (passed, need_atol, need_rtol, worst element) per seed
    for seed in seeds:
        passed, need_a, need_r, worst = True, 0.0, 0.0, None
        for fam in families:
            for c in cases:
                for i, (ref, (a, r)) in enumerate(refs(c, seed, fam)):
                    near = nearest(ref, dtype)
                    mag, err = ref.abs(), (near - ref).abs()
                    magnitude[fam] = max(magnitude.get(fam, 0.0), float(mag.max()))
                    if (a, r) == (atol, rtol):
                        need_a = max(need_a, float((err - rtol * mag).max()))
                        need_r = max(need_r, float(((err - atol) / mag.clamp_min(tiny)).max()))
                    fig = compare(near, ref, atol=a, rtol=r, dtype=dtype)  # the gate's own rule decides
                    passed = passed and fig.passed
                    if worst is None or fig.tolerance_ratio > worst["ratio"]:
                        worst = {"config": c.key(), "seed": seed, "family": fam, **({"output": i} if i else {}),
                                 "index": list(fig.worst_index),
                                 "ref": fig.worst_ref, "nearest": fig.worst_out,
                                 "err": abs(fig.worst_out - fig.worst_ref), "half_ulp": ulp(fig.worst_ref, dtype) / 2,
                                 "bound": a + r * abs(fig.worst_ref), "ratio": fig.tolerance_ratio}
        per_seed.append((passed, max(need_a, 0.0), max(need_r, 0.0), worst))
    # The check passes when one checked seed passes: the least of the seeds' needs, and the
    # deciding element of the seed closest to passing.
    easiest = min(per_seed, key=lambda s: s[3]["ratio"])
    return Floor(dtype, atol, rtol, point.key(), tuple(c.key() for c in cases), tuple(seeds),
                 passed=any(s[0] for s in per_seed), need_atol=min(s[1] for s in per_seed),
                 need_rtol=min(s[2] for s in per_seed), magnitude=magnitude, worst=easiest[3])
