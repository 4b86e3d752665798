"""`bench new`: a commented registration written from flags, valid as written.

A new user should not have to assemble a registration from the docs: the file this writes
names the kernels and grid given, fills the tolerance, timing and bar sections with the
defaults the rest of bench uses (each with a comment saying what it means and when to
change it), and is checked by the same parser and kernel checks `bench register` runs
before a byte is written. Only the hypothesis and the prediction are the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.governance import line_ids

# The grid a flag left out, per workload: a small one that runs anywhere (a fused-attention
# prefill sweep, a decode step over a long cache), to be widened once the line works.
DEFAULT_GRID = {
    "attention": {"batch": [1], "heads": [16], "kv_heads": [16], "seq_len": [1024, 4096], "head_dim": [128],
                  "dtype": ["float16"], "causal": [False, True]},
    "decode": {"batch": [16], "heads": [32], "kv_heads": [8], "seq_len": [8192, 32768], "head_dim": [128],
               "dtype": ["float16"], "causal": [False]},
}
# The bar a flag left out: every candidate faster than the baseline on the geometric mean of
# the grid by more than the smallest speedup a cold-mode line resolves (1 ± 0.02: a bar at
# 1.0 would be decided by rig noise, and `bench register` warns so), and correct on every config.
DEFAULT_GO = "geomean(speedup) >= 1.05 and pass_rate == 1.0"
DEFAULT_PRIMARY = "geomean(speedup)"


@dataclass(frozen=True)
class NewLine:
    """What `bench new` was asked for."""

    line: str
    candidates: tuple[str, ...]
    baseline: str
    workload: str
    grid: dict
    hypothesis: str
    prediction: float
    go: str = DEFAULT_GO
    primary: str = DEFAULT_PRIMARY


# --causal's words and the grid values they stand for.
CAUSAL_CHOICES = {"both": [False, True], "true": [True], "false": [False]}


def plan(line: str, candidates, prediction: float, *, baseline: str, workload: str, grid: dict,
         causal: str | None = None, hypothesis: str | None = None, go: str | None = None,
         primary: str | None = None) -> NewLine:
    """What `bench new`'s flags ask for, defaults filled: the workload's default grid under the
    values given (``grid``: field -> values, empty ones left out), --causal's word, and the
    default bar with its hypothesis in words (a bar of one's own needs one's own hypothesis)."""
    from harness.workloads import WORKLOADS

    line_ids.check(line)
    if workload not in WORKLOADS:
        raise UserError(f"--workload {workload!r}: use {' or '.join(WORKLOADS)}")
    if go is not None and hypothesis is None:
        raise UserError("--go without --hypothesis: say in words what the bar tests and why you expect it")
    full = {**DEFAULT_GRID[workload], **{k: list(v) for k, v in grid.items() if v}}
    if causal is not None:
        if causal not in CAUSAL_CHOICES:
            raise UserError(f"--causal {causal!r}: use {', '.join(CAUSAL_CHOICES)}")
        full["causal"] = CAUSAL_CHOICES[causal]
    cands = tuple(dict.fromkeys(candidates))
    if hypothesis is None:
        who = cands[0] if len(cands) == 1 else ", ".join(cands)
        hypothesis = (f"{who} {'is' if len(cands) == 1 else 'are each'} at least 5% faster than {baseline} on "
                      f"the geometric mean of the speedups over this grid, with every config passing the float64 gate.")
    return NewLine(line, cands, baseline, workload, full, hypothesis, prediction, go or DEFAULT_GO,
                   primary or DEFAULT_PRIMARY)


def _toml_list(values) -> str:
    return "[" + ", ".join(("true" if v else "false") if isinstance(v, bool) else
                           (f'"{v}"' if isinstance(v, str) else str(v)) for v in values) + "]"


def _toml_str(s: str) -> str:
    if "\n" in s or '"' in s:
        if '"""' in s:
            raise UserError('the hypothesis or bar contains """: write it without a triple quote')
        return f'"""{s}"""'
    return f'"{s}"'


def registration_text(new: NewLine, waived: dict[str, str] | None = None) -> str:
    """The registration file's text, every section commented; ``waived``: canary -> why it is
    waived (written as ``accept_weak`` with that reason)."""
    from harness.measurement.correctness.figures import DEFAULT_TOLERANCES
    from harness.workloads.inputs import DEFAULT_FAMILIES

    dtypes = new.grid["dtype"]
    unknown = [d for d in dtypes if d not in DEFAULT_TOLERANCES]
    if unknown:
        raise UserError(f"--dtype {unknown[0]}: bench knows {', '.join(DEFAULT_TOLERANCES)}")
    atol = ", ".join(f"{d} = {DEFAULT_TOLERANCES[d][0]:g}" for d in dtypes)
    rtol = ", ".join(f"{d} = {DEFAULT_TOLERANCES[d][1]:g}" for d in dtypes)
    cands = (f'candidate = "{new.candidates[0]}"' if len(new.candidates) == 1 else
             f"candidates = {_toml_list(new.candidates)}")
    grid = "\n".join(f"{k} = {_toml_list(new.grid[k])}" for k in ("batch", "heads", "kv_heads", "seq_len",
                                                                   "head_dim", "dtype", "causal"))
    return f'''# Line `{new.line}`, written by `bench new`. Edit what you need, commit it, then
# `bench register registrations/{new.line}.toml` before any number exists: from then on the
# bar below is fixed (the file is hashed into the ledger).
schema = 1
# What you expect and why, in your words: the verdict is judged against this bar, not this text.
hypothesis = {_toml_str(new.hypothesis)}
workload = "{new.workload}"
{cands}
# Every candidate is timed against this kernel, and the baseline against itself (the control).
baseline = "{new.baseline}"

[grid]
# Every combination of these values is one config (`bench kernels` says which shapes each
# kernel supports). Widen it once the line sweeps.
{grid}

[correctness]
# The float64 gate: |out - ref| <= atol + rtol * |ref| on every element. bench's defaults per
# dtype (measurement/correctness/figures.py): they leave the 3-kernel baseline, which rounds S
# to the input dtype, about 2x margin. `bench register` refuses a tolerance no output in the
# dtype can meet and one loose enough to let a broken kernel through (its canaries).
atol = {{ {atol} }}
rtol = {{ {rtol} }}
# Seeds per config; a seed passes when every input family passes at it.
seeds = 3
families = {_toml_list(DEFAULT_FAMILIES)}
{_waivers(waived or {})}
[timing]
# cold: the L2 is flushed before every timed call (what a kernel sees in a model's forward
# pass); hot: inputs rotate past the L2; graph: CUDA-graph replays. The stopping rule, clocks
# and throttle policy keep bench's defaults (docs/contracts.md lists every key).
mode = "cold"

[bar]
# GO when this holds on the ledger (the bar language: docs/contracts.md). pass_rate == 1.0:
# every config of every candidate passed the float64 gate.
go = {_toml_str(new.go)}
# The figure the verdict reports against your prediction, written down before any number exists.
primary = {_toml_str(new.primary)}
prediction = {new.prediction!r}
'''


def _waivers(waived: dict[str, str]) -> str:
    if not waived:
        return ""
    lines = ["# Canaries `bench register` checks that these tolerances cannot tell from rounding at",
             "# some grid point (the baseline needs them this loose): waived, so the line registers.",
             "# Tighten [correctness] where a kernel allows it, and drop the waiver.",
             *(f"#   {name}: {why}" for name, why in waived.items()),
             f"accept_weak = {_toml_list(list(waived))}"]
    return "\n".join(lines) + "\n"


def _parsed(text: str, path: Path):
    import hashlib
    import tomllib

    from harness.governance.registration import from_table

    return from_table(tomllib.loads(text), path, hashlib.sha256(text.encode()).hexdigest())


def write_new(root: Path, new: NewLine) -> tuple[Path, dict[str, str]]:
    """Write ``registrations/<line>.toml`` under ``root`` once it parses and passes the checks
    `bench register` makes (kernels, grid, feasible tolerance, canaries: those the default
    tolerance cannot reject are waived in the file, each with its reason); refuse an existing
    file (nothing is overwritten). Returns the path and the waived canaries."""
    from harness.governance.power import tolerance_floor
    from harness.governance.registration import check_kernels
    from harness.measurement import canaries

    path = Path(root) / "registrations" / f"{new.line}.toml"
    if path.exists():
        raise UserError(f"registrations/{new.line}.toml exists: edit it, or pick another line id")
    reg = _parsed(registration_text(new), path)
    check_kernels(reg)
    tolerance_floor(reg)  # a tolerance no output in the dtype could meet is refused here, not at register
    waived: dict[str, str] = {}
    for c in canaries.check(reg.configs, atol=reg.atol, rtol=reg.rtol, seed=reg.seeds[0], families=reg.families):
        if not c.rejected and c.canary not in waived:
            waived[c.canary] = (f"{canaries.CANARIES[c.canary]}, at {c.point}: {c.dtype} atol {c.atol:g} rtol "
                                f"{c.rtol:g} lets it through; {c.fix()} would reject it")
    text = registration_text(new, waived)
    _parsed(text, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as f:  # "x": a file that appeared meanwhile is not overwritten
        f.write(text)
    return path, waived
