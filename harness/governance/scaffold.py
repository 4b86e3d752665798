"""`bench new`: a commented registration written from flags, valid as written.

A new user should not have to assemble a registration from the docs: the file this writes
names the kernels and grid given, fills the tolerance, timing and bar sections with the
defaults the rest of bench uses (each with a comment saying what it means and when to
change it), and is checked by the same parser and kernel checks `bench register` runs
before a byte is written. Only the hypothesis and the prediction are the user's.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.registration import line_ids
from harness.registry import check_name, get_kernel, get_workload, load_kernels
from harness.measurement.correctness.figures import DEFAULT_TOLERANCES
from harness.measurement.device import detect_device
from harness.registration.schema import check_kernels, from_table
from harness.registration.schema_keys import KEY_SCHEMA
from harness.governance.power import tolerance_floor

# The bar a flag left out: every candidate faster than the baseline on the geometric mean of
# the grid by more than the smallest speedup a cold-mode line resolves (1 ± 0.02: a bar at
# 1.0 would be decided by rig noise, and `bench register` warns so), and correct on every config.
DEFAULT_GO = "geomean(speedup) >= 1.05 and pass_rate == 1.0"
DEFAULT_PRIMARY = "geomean(speedup)"
# The baseline a flag left out: the first of these that runs the workload and dtypes on the
# device the line is written for (the cuBLAS stack on a GPU, the torch stack on a CPU), else
# the first kernel registered for the workload that does, so a line `bench new` writes sweeps
# on the machine that wrote it.
DEFAULT_BASELINES = ("cublas_stack", "torch_stack")
DEVICES = ("cpu", "cuda")
MACHINES = {"cpu": "a machine without a GPU", "cuda": "a GPU machine"}


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
    device: str = "cpu"  # the device every kernel named was checked to run on


# --causal's words and the grid values they stand for.
CAUSAL_CHOICES = {"both": [False, True], "true": [True], "false": [False]}


@dataclass(frozen=True)
class GridAsk:
    """The grid `bench new`'s flags ask for: the workload, values per field (field -> values,
    empty ones left out: the workload's default), --causal's word (None: the default) and
    --grid's ``AXIS=V1,V2`` entries (any axis of the workload)."""

    workload: str
    values: dict
    causal: str | None = None
    axes: tuple[str, ...] = ()


# --grid's words for a bool axis.
BOOL_WORDS = {"true": True, "false": False}


def _axis_value(axis, word: str):
    """``word`` (one value of a --grid entry) as ``axis``'s type; UserError naming it."""
    try:
        if axis.type is bool:
            return BOOL_WORDS[word]
        return axis.type(word) if axis.type in (int, float) else word
    except (KeyError, ValueError):
        want = "true or false" if axis.type is bool else f"{'an integer' if axis.type is int else 'a number'}"
        raise UserError(f"--grid {axis.name}={word!r}: not {want}") from None


def _grid_entries(wl, entries, flagged: dict) -> dict:
    """--grid's ``AXIS=V1,V2`` entries as axis -> values, each checked as the axis checks a
    [grid] value; an axis also given by its own flag (``flagged``) or twice is refused."""
    axes = {a.name: a for a in wl.axes}
    out: dict = {}
    for entry in entries:
        name, eq, words = entry.partition("=")
        name = name.strip()
        if not eq or not words.strip():
            raise UserError(f"--grid {entry!r}: write AXIS=V1,V2 (axes of {wl.name}: {', '.join(wl.axis_names)})")
        if name not in axes:
            raise UserError(f"--grid {entry!r}: {name!r} is not an axis of workload '{wl.name}' (its axes: "
                            f"{', '.join(wl.axis_names)})")
        if name in out or name in flagged:
            raise UserError(f"--grid {entry!r}: {name} is given twice")
        values = [_axis_value(axes[name], w.strip()) for w in words.split(",")]
        try:
            out[name] = axes[name].values(values)
        except UserError as exc:
            raise UserError(f"--grid {entry!r}: {exc}") from None
    return out


def default_grid(wl) -> dict:
    """The grid of workload ``wl`` a flag leaves out, per axis: its ``example_grid``, else the
    axis's first choice (false for a bool); None for an axis with neither."""
    out = {}
    for axis in wl.axes:
        if axis.name in wl.example_grid:
            out[axis.name] = list(wl.example_grid[axis.name])
        elif axis.choices:
            out[axis.name] = [axis.choices[0]]
        elif axis.type is bool:
            out[axis.name] = [False]
        else:
            out[axis.name] = None
    return out


def _full_grid(wl, grid: GridAsk) -> dict:
    """The grid `bench new` writes for ``grid``: the workload's default under the flags' values."""
    flagged = {k: list(v) for k, v in grid.values.items() if v}
    for key in flagged:
        if key not in wl.axis_names:
            raise UserError(f"--{key.replace('_', '-')}: workload '{wl.name}' has no axis {key} (its axes: "
                            f"{', '.join(wl.axis_names)}) — give its axes with --grid AXIS=V1,V2")
    if grid.causal is not None and "causal" not in wl.axis_names:
        raise UserError(f"--causal: workload '{wl.name}' has no axis causal (its axes: {', '.join(wl.axis_names)})")
    full = {**default_grid(wl), **flagged, **_grid_entries(wl, grid.axes, flagged)}
    if grid.causal is not None:
        if grid.causal not in CAUSAL_CHOICES:
            raise UserError(f"--causal {grid.causal!r}: use {', '.join(CAUSAL_CHOICES)}")
        full["causal"] = CAUSAL_CHOICES[grid.causal]
    missing = [a for a, v in full.items() if v is None]
    if missing:
        raise UserError(f"workload '{wl.name}' gives no example value for axis {missing[0]}: pass --grid "
                        f"{missing[0]}=V1,V2")
    return full


@dataclass(frozen=True)
class BarAsk:
    """The bar `bench new`'s flags ask for: the hypothesis in words, the go expression and the
    primary figure (None: the defaults; a bar of one's own needs one's own hypothesis)."""

    hypothesis: str | None = None
    go: str | None = None
    primary: str | None = None


def plan(line: str, candidates, prediction: float, *, baseline: str | None, grid: GridAsk,
         bar: BarAsk = BarAsk(), device: str | None = None) -> NewLine:
    """What `bench new`'s flags ask for, defaults filled: the workload's default grid under the
    values given, the default bar with its hypothesis in words, and the device the line is for
    (``device``; None: this machine's) with a baseline that runs there. Every kernel named must
    run on that device: a line written here sweeps here."""
    workload = grid.workload
    hypothesis, go, primary = bar.hypothesis, bar.go, bar.primary
    line_ids.check(line)
    if not math.isfinite(prediction):
        raise UserError(f"--prediction {prediction}: give your predicted value of the primary figure as a finite "
                        f"number")
    try:
        wl = get_workload(workload)
    except UserError as exc:
        raise UserError(f"--workload {workload!r}: {exc}") from None
    if go is not None and hypothesis is None:
        raise UserError("--go without --hypothesis: say in words what the bar tests and why you expect it")
    hypothesis, go, primary = (_utf8(flag, text) for flag, text in
                               (("--hypothesis", hypothesis), ("--go", go), ("--primary", primary)))
    full = _full_grid(wl, grid)
    _known_dtypes(wl, full["dtype"])
    cands = tuple(dict.fromkeys(check_name(c, "--candidate") for c in candidates))
    device, here = _device(device)
    baseline = (_default_baseline(workload, full["dtype"], device, here) if baseline is None else
                check_name(baseline, "--baseline"))
    cands = cands or (_default_candidate(workload, full["dtype"], device, here, baseline),)
    _runs_on(device, here, (*cands, baseline))
    if hypothesis is None:
        who = cands[0] if len(cands) == 1 else ", ".join(cands)
        hypothesis = (f"{who} {'is' if len(cands) == 1 else 'are each'} at least 5% faster than {baseline} on "
                      f"the geometric mean of the speedups over this grid, with every config passing the float64 gate.")
    return NewLine(line, cands, baseline, workload, full, hypothesis, prediction, go or DEFAULT_GO,
                   primary or DEFAULT_PRIMARY, device)


def _known_dtypes(wl, dtypes: list[str]) -> list[str]:
    """``dtypes`` once each has the workload's default tolerance (which the file writes)."""
    unknown = [d for d in dtypes if d not in wl.tolerances or d not in wl.dtypes]
    if unknown:
        raise UserError(f"--dtype {ascii(unknown[0])}: bench knows "
                        f"{', '.join(d for d in wl.tolerances if d in wl.dtypes)}")
    return dtypes


def _utf8(flag: str, text: str | None) -> str | None:
    """``text`` as the UTF-8 file will hold it. An argument's bytes that the locale could not
    decode (a C locale's ASCII) reach Python as lone surrogates: their bytes are read as UTF-8,
    and bytes that are not UTF-8 either are refused (no UTF-8 file can hold them)."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return os.fsencode(text).decode("utf-8")
    except UnicodeError:
        raise UserError(f"{flag} holds bytes that are not UTF-8 text: give it as UTF-8") from None


def _device(device: str | None) -> tuple[str, bool]:
    """The device the line is written for (the one given, else this machine's), and whether
    it is this machine's: only there can a kernel's modules and hardware be checked."""
    here = detect_device()
    if device is None or device == "auto":
        return here, True
    if device not in DEVICES:
        raise UserError(f"--device {device!r}: use auto, {' or '.join(DEVICES)}")
    return device, device == here


def _why_not(spec, device: str, here: bool) -> str | None:
    """Why kernel ``spec`` cannot run on ``device``: everything on this machine's device; on
    another machine's, the devices it is written for (its modules may be installed there)."""
    if here:
        return spec.unusable_reason(device)
    return None if device in spec.devices else f"runs on {'/'.join(spec.devices)}, not {device}"


def _runs(spec, workload: str, dtypes, device: str, here: bool) -> bool:
    return (spec is not None and _why_not(spec, device, here) is None and workload in spec.workloads
            and all(d in spec.dtypes for d in dtypes))


def _default_baseline(workload: str, dtypes, device: str, here: bool) -> str:
    """The first of DEFAULT_BASELINES that runs ``workload`` in every dtype on ``device``, else
    the first kernel registered for ``workload`` that does."""
    kernels = load_kernels()
    for name in (*DEFAULT_BASELINES, *kernels):
        if _runs(kernels.get(name), workload, dtypes, device, here):
            return name
    raise UserError(f"none of the default baselines ({', '.join(DEFAULT_BASELINES)}) nor any kernel registered for "
                    f"{workload} runs it in {', '.join(dtypes)} on {device}{' here' if here else ''}: name one with "
                    f"--baseline (`bench kernels` lists them)")


def _default_candidate(workload: str, dtypes, device: str, here: bool, baseline: str) -> str:
    """The first kernel registered for ``workload`` but the baseline that runs it in every dtype on ``device``."""
    kernels = load_kernels()
    for name, spec in kernels.items():
        if name != baseline and _runs(spec, workload, dtypes, device, here):
            return name
    raise UserError(f"no kernel registered for {workload} but the baseline {baseline} runs it in "
                    f"{', '.join(dtypes)} on {device}{' here' if here else ''}: name one with --candidate "
                    f"(`bench kernels` lists them)")


def _runs_on(device: str, here: bool, names) -> None:
    """Every kernel named runs on ``device`` (the refusal names the fix)."""
    for name in names:
        why = _why_not(get_kernel(name), device, here)
        if why is not None:
            other = next(d for d in DEVICES if d != device)
            where = "here, so the line could not sweep on this machine" if here else ""
            raise UserError(f"kernel '{name}' cannot run on {device} ({why}){' ' + where if where else ''}: pick "
                            f"another kernel (`bench kernels`), or pass --device {other} to write a line for "
                            f"{MACHINES[other]}")


# TOML basic-string escapes (toml.io, "String"); any other control character is written \uXXXX.
TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
# A key TOML takes bare; any other is written quoted.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string: every character it holds reads back as itself."""
    return '"' + "".join(TOML_ESCAPES.get(ch) or (f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch)
                         for ch in s) + '"'


def toml_value(v) -> str:
    """``v`` (a string, bool, int, finite float, list or table of them) as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k if BARE_KEY.fullmatch(k) else toml_string(k)} = {toml_value(x)}"
                                for k, x in v.items()) + " }"
    raise TypeError(f"no TOML value for {v!r}")


def _schema_for(tables: dict) -> int:
    """The oldest schema that reads ``tables`` (table -> its keys): 1 unless a key is newer
    (``KEY_SCHEMA``: a workload's axis named as a newer bench's key, rmsnorm's ``tokens``)."""
    return max([1, *(since for (table, key), since in KEY_SCHEMA.items() if key in tables.get(table, {}))])


def registration_table(new: NewLine, waived: dict[str, str] | None = None) -> dict:
    """The registration as data: what ``registration_text`` writes, and what the file must
    read back as, value for value."""
    wl = get_workload(new.workload)
    dtypes = _known_dtypes(wl, new.grid["dtype"])
    cands = ({"candidate": new.candidates[0]} if len(new.candidates) == 1 else
             {"candidates": list(new.candidates)})
    grid = {k: list(new.grid[k]) for k in wl.axis_names}
    return {"schema": _schema_for({"grid": grid}), "hypothesis": new.hypothesis, "workload": new.workload, **cands, "baseline": new.baseline,
            "grid": grid,
            "correctness": {"atol": {d: wl.tolerances[d][0] for d in dtypes},
                            "rtol": {d: wl.tolerances[d][1] for d in dtypes}, "seeds": 3,
                            "families": list(wl.default_families),
                            **({"accept_weak": list(waived)} if waived else {})},
            "timing": {"mode": "cold"},
            "bar": {"go": new.go, "primary": new.primary, "prediction": new.prediction}}


def registration_text(new: NewLine, waived: dict[str, str] | None = None) -> str:
    """The registration file's text, every section commented; ``waived``: canary -> why it is
    waived (written as ``accept_weak`` with that reason). Every value is ``registration_table``'s,
    written by ``toml_value``."""
    t = registration_table(new, waived)
    corr, bar = t["correctness"], t["bar"]
    cands = "candidate" if "candidate" in t else "candidates"
    grid = "\n".join(f"{k} = {toml_value(v)}" for k, v in t["grid"].items())
    return f'''# Line `{new.line}`, written by `bench new`. Edit what you need, commit it, then
# `bench register registrations/{new.line}.toml` before any number exists: from then on the
# bar below is fixed (the file is hashed into the ledger).
schema = {t["schema"]}
# What you expect and why, in your words: the verdict is judged against this bar, not this text.
hypothesis = {toml_value(t["hypothesis"])}
workload = {toml_value(t["workload"])}
# Written for {new.device}: every kernel below runs there (`bench new --device` writes for another).
{cands} = {toml_value(t[cands])}
# Every candidate is timed against this kernel, and the baseline against itself (the control).
baseline = {toml_value(t["baseline"])}

[grid]
# Every combination of these values is one config (`bench kernels` says which shapes each
# kernel supports). Widen it once the line sweeps.
{grid}

[correctness]
{_tolerance_comment(new.workload)}
atol = {toml_value(corr["atol"])}
rtol = {toml_value(corr["rtol"])}
# Seeds per config; a seed passes when every input family passes at it.
seeds = {toml_value(corr["seeds"])}
families = {toml_value(corr["families"])}
{_waivers(waived or {})}
[timing]
# cold: the L2 is flushed before every timed call (what a kernel sees in a model's forward
# pass); hot: inputs rotate past the L2; graph: CUDA-graph replays. The stopping rule, clocks
# and throttle policy keep bench's defaults (docs/contracts.md lists every key).
mode = {toml_value(t["timing"]["mode"])}

[bar]
# GO when this holds on the ledger (the bar language: docs/contracts.md). pass_rate == 1.0:
# every config of every candidate passed the float64 gate.
go = {toml_value(bar["go"])}
# The figure the verdict reports against your prediction, written down before any number exists.
primary = {toml_value(bar["primary"])}
prediction = {toml_value(bar["prediction"])}
'''


def _tolerance_comment(workload: str) -> str:
    """What the [correctness] tolerances are and where they come from: bench's attention
    defaults, or the workload's own ``tolerances``."""
    if get_workload(workload).tolerances is DEFAULT_TOLERANCES:
        return """# The float64 gate: |out - ref| <= atol + rtol * |ref| on every element. bench's defaults per
# dtype (measurement/correctness/figures.py): they leave the 3-kernel baseline, which rounds S
# to the input dtype, about 2x margin. `bench register` refuses a tolerance no output in the
# dtype can meet and one loose enough to let a broken kernel through (its canaries)."""
    return f"""# The float64 gate: |out - ref| <= atol + rtol * |ref| on every element. Workload {workload}'s
# defaults per dtype (its `tolerances`: docs/workloads.md). `bench register` refuses a
# tolerance no output in the dtype can meet and one loose enough to let a broken kernel
# through (its canaries)."""


def _waivers(waived: dict[str, str]) -> str:
    if not waived:
        return ""
    lines = ["# Canaries `bench register` checks that these tolerances cannot tell from rounding at",
             "# some grid point (the baseline needs them this loose): waived, so the line registers.",
             "# Tighten [correctness] where a kernel allows it, and drop the waiver.",
             *(f"#   {name}: {' '.join(why.split())}" for name, why in waived.items()),
             f"accept_weak = {toml_value(list(waived))}"]
    return "\n".join(lines) + "\n"


def _parsed(text: str, path: Path, want: dict):
    """The registration ``text`` is, validated as `bench register` validates it — once it reads
    back as exactly ``want`` (``registration_table``): every value given and nothing else (fail
    closed: a text that would carry anything else is refused, never written)."""
    import hashlib
    import tomllib

    raw = tomllib.loads(text)
    if raw != want:
        differ = sorted(k for k in {*raw, *want} if raw.get(k) != want.get(k))
        raise UserError(f"the registration bench would write does not read back as given ({', '.join(differ)}): "
                        f"nothing written — give plain values")
    return from_table(raw, path, hashlib.sha256(text.encode()).hexdigest())


def write_new(root: Path, new: NewLine) -> tuple[Path, dict[str, str]]:
    """Write ``registrations/<line>.toml`` under ``root`` once it parses and passes the checks
    `bench register` makes (kernels, grid, feasible tolerance, canaries: those the default
    tolerance cannot reject are waived in the file, each with its reason); refuse an existing
    file (nothing is overwritten). Returns the path and the waived canaries."""
    path = Path(root) / "registrations" / f"{new.line}.toml"
    if path.exists():
        raise UserError(f"registrations/{new.line}.toml exists: edit it, or pick another line id")
    reg = _parsed(registration_text(new), path, registration_table(new))
    check_kernels(reg, root)
    tolerance_floor(reg)  # a tolerance no output in the dtype could meet is refused here, not at register
    waived: dict[str, str] = {}
    wl = get_workload(reg.workload)
    for c in wl.check_canaries(reg.configs, atol=reg.atol, rtol=reg.rtol, seed=reg.seeds[0], families=reg.families):
        if not c.rejected and c.canary not in waived:
            waived[c.canary] = (f"{wl.canaries[c.canary]}, at {c.point}: {c.dtype} atol {c.atol:g} rtol "
                                f"{c.rtol:g} lets it through; {c.fix()} would reject it")
    text = registration_text(new, waived)
    _parsed(text, path, registration_table(new, waived))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as f:  # "x": a file that appeared meanwhile is not overwritten
        f.write(text)
    return path, waived
