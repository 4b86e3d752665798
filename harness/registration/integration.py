"""A line's ``[integration]`` table: the end-to-end step its kernel is meant to speed up.

A kernel GO says nothing about the model step it was written for: a registration may name
that step (``step = "module:function"``, committed in the repository) and bar it with the
step metrics of ``metrics.STEP_METRICS`` (``step_gain >= 0.02``). The sweep times the step
with the baseline, each candidate and the baseline again (commands/integration.py), through
the attention hook of ``harness.integration``.

Amdahl holds the two bars together: with the op taking a share ``s`` of the step, an
infinitely fast kernel gains at most ``1/(1 − s) − 1``. A registration stating ``op_share``
(and how it was obtained) has an integration bar above that ceiling refused at register,
with the arithmetic (governance/reductio.py); a measured gain above the ceiling (the stated
share, else the share the sweep measured) marks the verdict ``amdahl_violated`` with the
share the op must have had, ``1 − 1/(1 + gain)``, and decides nothing until an amendment
explains it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.errors import UserError
from harness.provenance import code as codeprov
from harness.workloads import DTYPES
from harness.integration import load_step

INTEGRATION_KEYS = {"step", "op_share", "op_share_source", "dtype", "atol", "rtol"}
# module:function, a dotted module path and a Python name.
STEP_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
# The step's own output against its float64 run (a whole model step accumulates rounding the
# kernel grid's per-call tolerance does not): defaults for a float32 step.
DEFAULT_STEP_ATOL = 1e-4
DEFAULT_STEP_RTOL = 1e-3
MAX_STEP_TOLERANCE = 0.5
# The schema a registration with [integration] must declare (a bench older refuses the file).
INTEGRATION_SCHEMA = 4
# Metrics a gain clause bounds from above by Amdahl (a step_gain of g is a speedup of 1 + g).
GAIN_METRIC = "step_gain"
# A measured gain this far above the ceiling marks the line (timing noise alone stays below).
AMDAHL_SLACK = 0.0


@dataclass(frozen=True)
class IntegrationSpec:
    """``[integration]`` parsed: the step, the op's share of it (stated or to be measured), the
    dtype the step runs in and its tolerance against the float64 step."""

    step: str
    dtype: str
    atol: float
    rtol: float
    op_share: float | None = None
    op_share_source: str | None = None

    def as_dict(self) -> dict:
        return {"step": self.step, "dtype": self.dtype, "atol": self.atol, "rtol": self.rtol,
                "op_share": self.op_share, "op_share_source": self.op_share_source}


def ceiling(op_share: float) -> float:
    """The largest step gain an infinitely fast op allows: 1/(1 − share) − 1."""
    return 1.0 / (1.0 - op_share) - 1.0


def inverted_share(gain: float) -> float:
    """The op share a measured step gain needs at the least: 1 − 1/(1 + gain)."""
    return 1.0 - 1.0 / (1.0 + gain)


def ceiling_text(op_share: float, source: str | None) -> str:
    """The Amdahl arithmetic, as shown in a refusal or a verdict."""
    how = f" ({source})" if source else ""
    return (f"op_share {op_share:.4g}{how}: an infinitely fast kernel gains at most 1/(1 − {op_share:.4g}) − 1 "
            f"= {ceiling(op_share):.4g}")


def _number(table: dict, key: str, lo: float, hi: float, default: float | None, what: str) -> float | None:
    v = table.get(key, default)
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v < hi:
        raise UserError(f"{key} = {v!r} must be a number in [{lo:g}, {hi:g}): {what}")
    return float(v)


def parse(table: dict, grid_dtypes: list[str]) -> IntegrationSpec:
    """Validate ``[integration]`` (a UserError names the key and the fix; the caller adds the path)."""
    extra = sorted(set(table) - INTEGRATION_KEYS)
    if extra:
        raise UserError(f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                        f"(allowed: {', '.join(sorted(INTEGRATION_KEYS))})")
    step = table.get("step")
    if not isinstance(step, str) or not STEP_REF.match(step):
        raise UserError("step must name the step function as \"module:function\" (a module committed in the "
                        "repository, e.g. \"bench_kernels.tiny_transformer:step\")")

    dtype = table.get("dtype", grid_dtypes[0])
    if dtype not in DTYPES:
        raise UserError(f"dtype = {dtype!r} is not one of {', '.join(DTYPES)}")
    atol = _number(table, "atol", 0.0, MAX_STEP_TOLERANCE, DEFAULT_STEP_ATOL, "the step output's absolute tolerance")
    rtol = _number(table, "rtol", 0.0, MAX_STEP_TOLERANCE, DEFAULT_STEP_RTOL, "the step output's relative tolerance")
    share = _number(table, "op_share", 0.0, 1.0, None, "the op's share of the step's time")
    if share is not None and share <= 0:
        raise UserError(f"op_share = {share:g} must be > 0 (a share of 0 allows no gain at all)")
    source = table.get("op_share_source")
    if share is not None and (not isinstance(source, str) or not source.strip()):
        raise UserError("op_share needs op_share_source = \"how it was obtained\" (e.g. \"profiler: attention "
                        "14.3% of the forward pass\"), or leave op_share out and the sweep measures it")
    if share is None and source is not None:
        raise UserError("op_share_source without op_share: give op_share = <share of the step> too")
    return IntegrationSpec(step=step, dtype=dtype, atol=atol, rtol=rtol, op_share=share,
                           op_share_source=source.strip() if source else None)


def step_code(root: Path, ref: str) -> tuple[dict, ...]:
    """Refuse a step whose code no row could name, before anything of it is imported: the
    rule the kernels are held to (``provenance.code.module_code``: committed in the repository, or
    an installed distribution, whose record is returned for the rows' ``code``)."""
    return codeprov.module_code(root, ref.partition(":")[0], f"[integration] step {ref!r}")


def load_checked_step(root: Path, ref: str) -> tuple[Callable, tuple[dict, ...]]:
    """The step factory ``ref`` names, imported only once ``step_code`` passed, and its record.
    What was imported must be what was checked: the module from the file checked, and the
    function defined in that module (``"m:system"`` where m imports os's is os's code)."""
    module, _, name = ref.partition(":")
    checked = codeprov.module_files(module, f"[integration] step {ref!r}")[-1]
    code = step_code(root, ref)
    fn = load_step(ref)
    loaded = getattr(sys.modules.get(module), "__file__", None)
    if not isinstance(loaded, str) or Path(loaded).resolve() != checked:
        raise UserError(f"[integration] step {ref!r}: {module} was imported from {loaded}, not from the file checked "
                        f"({checked}): run bench from the repository, with nothing else on PYTHONPATH")
    if getattr(fn, "__module__", None) != module:
        raise UserError(f"[integration] step {ref!r}: {name} is defined in {getattr(fn, '__module__', None)}, not in "
                        f"{module}, so the checked module is not the code that would run: name the module that "
                        f"defines the step")
    return fn, code


def amdahl_refusal(reg) -> str | None:
    """Why the bar is refused at register (None: it is not): a clause requiring a step gain
    above the Amdahl ceiling of the stated op_share."""
    spec = reg.integration
    if spec is None or spec.op_share is None:
        return None
    top = ceiling(spec.op_share)
    for c in reg.bar.clauses():
        if c.aggregate.metric != GAIN_METRIC or c.op not in (">=", ">", "=="):
            continue
        if c.threshold > top or (c.op == ">" and c.threshold >= top):
            return (f"[bar] clause `{c.text}` needs a step gain of {c.threshold:.4g}, above the Amdahl ceiling: "
                    f"{ceiling_text(spec.op_share, spec.op_share_source)}; no kernel can meet it — lower the "
                    f"integration bar, or correct op_share (its source) if the op takes more of the step")
    return None


def violation(gain: float | None, gain_low: float | None, op_share: float | None) -> dict | None:
    """A measured gain above the ceiling of ``op_share``, the low end of its confidence
    interval (``gain_low``) above it too: the record the verdict carries (the share the op
    must have had), or None."""
    if gain is None or gain_low is None or op_share is None or not 0 < op_share < 1:
        return None
    top = ceiling(op_share)
    if gain_low <= top + AMDAHL_SLACK:
        return None
    return {"gain": gain, "gain_ci_low": gain_low, "op_share": op_share, "ceiling": top,
            "inverted_share": inverted_share(gain)}
