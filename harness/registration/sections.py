"""The tables every registration has, each parsed and validated on its own: the top level
(``head``: schema, hypothesis, workload, candidates, baseline, amends), [grid] (``grid``:
the configs it expands to), [correctness] (``correctness``) and [bar] (``bar_table``: the
bar as written; cross_checks parses and checks it against the line)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from harness.errors import UserError
from harness.registration import line_ids
from harness.registration.fields import err, unknown
from harness.registration.schema_keys import (BAR_KEYS, CORRECTNESS_KEYS, DEFAULT_BASELINE, DEFAULT_MIN_COVERAGE,
                                              DEFAULT_PRIMARY, DEFAULT_WORKLOAD, KEY_SCHEMA, MAX_GRID_CONFIGS, MAX_SEEDS,
                                              MAX_TOLERANCE)
from harness.registry import get_workload
from harness.workloads import Config
from harness.workloads.api import Workload


@dataclass(frozen=True)
class Head:
    """The top-level keys: what the line is and which kernels it times."""

    schema: int
    hypothesis: str
    workload: str
    candidates: list[str]
    baseline: str
    amends: str | None


@dataclass(frozen=True)
class Correctness:
    """[correctness]: per-dtype tolerances, the seeds and input families of the gate."""

    atol: dict[str, float]
    rtol: dict[str, float]
    seeds: list[int]
    families: list[str]
    accept_weak: list[str]
    min_pass_rate: float


@dataclass(frozen=True)
class BarTable:
    """[bar] as written (``go`` and ``primary`` still text)."""

    go: str
    prediction: float
    primary: str
    include_noisy: bool
    allow_missing: bool
    mixed_devices: bool
    beyond_ceiling_ok: str | None
    min_coverage: float


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _kernels(path: Path, raw: dict[str, Any]) -> tuple[list[str], str]:
    """The candidates (``candidate`` or ``candidates``) and the baseline."""
    if "candidate" in raw and "candidates" in raw:
        raise err(path, "give either 'candidate' or 'candidates', not both")
    cands = raw.get("candidates", raw.get("candidate"))
    cands = [cands] if isinstance(cands, str) else cands
    if not isinstance(cands, list) or not cands or not all(isinstance(c, str) and c for c in cands):
        raise err(path, "'candidate' must name a kernel (or 'candidates' a list of kernels): `bench kernels` lists them")
    if len(set(cands)) != len(cands):
        raise err(path, f"'candidates' lists a kernel twice: {cands}")
    baseline = raw.get("baseline", DEFAULT_BASELINE)
    if not isinstance(baseline, str) or not baseline:
        raise err(path, "'baseline' must name a kernel")
    if baseline in cands:
        raise err(path, f"'{baseline}' is both baseline and candidate: the control arm already times the "
                        f"baseline against itself")
    return cands, baseline


def head(path: Path, raw: dict[str, Any], line: str, schema: int) -> Head:
    """The top-level keys of the registration of ``line``, whose file says ``schema``."""
    hypothesis = raw.get("hypothesis")
    if not isinstance(hypothesis, str) or not hypothesis.strip():
        raise err(path, "'hypothesis' must be a non-empty string saying what you expect and why")
    workload = raw.get("workload", DEFAULT_WORKLOAD)
    try:
        get_workload(workload)
    except UserError as exc:
        raise err(path, str(exc)) from None
    cands, baseline = _kernels(path, raw)
    amends = raw.get("amends")
    if amends is not None and (not isinstance(amends, str) or amends == line):
        raise err(path, "'amends' must name the earlier line this one replaces (its file stem)")
    if amends is not None:
        try:
            line_ids.check(amends, "amends")
        except UserError as exc:
            raise err(path, f"{exc} — 'amends' names the earlier line this one replaces") from None
    return Head(schema, hypothesis, workload, cands, baseline, amends)


def grid(path: Path, raw: dict[str, Any], workload: str) -> tuple[dict[str, Any], list[Config]]:
    """[grid] as the ledger shows it, and the configs it expands to: the workload's axes, their
    types and validation (``Workload.expand_grid``)."""
    wl = get_workload(workload)
    grid_raw = raw.get("grid")
    if not isinstance(grid_raw, dict):
        raise err(path, f"missing [grid] table ({', '.join(wl.axis_names)})")
    try:
        configs, table = wl.expand_grid(grid_raw)
    except UserError as exc:
        raise err(path, str(exc)) from None
    if len(configs) > MAX_GRID_CONFIGS:
        raise err(path, f"[grid] expands to {len(configs)} configs (> {MAX_GRID_CONFIGS}): split the line")
    return table, configs


def _tolerance(path: Path, key: str, value: object, dtypes: tuple[str, ...]) -> dict[str, float]:
    """``atol`` or ``rtol``: one number for every dtype of the workload, or a table dtype -> number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        table = {d: float(value) for d in dtypes}
    elif isinstance(value, dict):
        unknown(path, f"[correctness] {key}", value, dtypes)
        table = {}
        for d, v in value.items():
            if not _is_number(v):
                raise err(path, f"[correctness] {key}.{d} = {v!r} is not a number")
            table[d] = float(v)
    else:
        raise err(path, f"[correctness] {key} must be a number or a table of dtype = number")
    for d, v in table.items():
        if not (0 <= v < MAX_TOLERANCE):
            raise err(path, f"[correctness] {key} for {d} = {v} is outside [0, {MAX_TOLERANCE})")
    return table


def _seeds(path: Path, seeds: object) -> list[int]:
    """``seeds``: a count (seeds 0 .. count-1) or a list of distinct non-negative integers."""
    count = len(seeds) if isinstance(seeds, list) else seeds
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_SEEDS:  # before a count expands
        raise err(path, f"[correctness] {count} seeds is more than {MAX_SEEDS}: give a count or list you mean")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise err(path, "[correctness] seeds must be >= 1 (a count) or a list of seeds")
        seeds = list(range(seeds))
    if not isinstance(seeds, list) or not seeds or not all(_is_int(s) and s >= 0 for s in seeds):
        raise err(path, "[correctness] seeds must be a count or a non-empty list of non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise err(path, f"[correctness] seeds lists a seed twice: {seeds}")
    return seeds


def _names(path: Path, corr: dict[str, Any], wl: Workload) -> tuple[list[str], list[str]]:
    """``families`` (the workload's input families the gate runs) and ``accept_weak`` (its
    canaries let through)."""
    families = corr.get("families", list(wl.default_families))
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise err(path, "[correctness] families must be a non-empty list of family names")
    if len(set(families)) != len(families):
        raise err(path, f"[correctness] families lists a family twice: {families}")
    for fam in families:
        if fam not in wl.families:
            raise err(path, f"[correctness] unknown input family {fam!r} (known: {', '.join(wl.families)})")
    accept_weak = corr.get("accept_weak", [])
    if not isinstance(accept_weak, list) or not all(isinstance(a, str) for a in accept_weak):
        raise err(path, f"[correctness] accept_weak must be a list of canary names ({', '.join(wl.canaries)})")
    for name in accept_weak:
        if name not in wl.canaries:
            raise err(path, f"[correctness] accept_weak names unknown canary {name!r} "
                            f"(known: {', '.join(wl.canaries)})")
    return families, accept_weak


def correctness(path: Path, raw: dict[str, Any], dtypes: list[str], workload: str) -> Correctness:
    """[correctness], with a tolerance for each of the grid's ``dtypes``, in ``workload``'s
    families and canaries."""
    wl = get_workload(workload)
    corr = raw.get("correctness")
    if not isinstance(corr, dict):
        raise err(path, "missing [correctness] table (atol, rtol, seeds)")
    unknown(path, "[correctness]", corr, CORRECTNESS_KEYS)
    for key in ("atol", "rtol", "seeds"):
        if key not in corr:
            raise err(path, f"[correctness] needs '{key}'")
    atol = _tolerance(path, "atol", corr["atol"], wl.dtypes)
    rtol = _tolerance(path, "rtol", corr["rtol"], wl.dtypes)
    for dt in dtypes:
        if dt not in atol or dt not in rtol:
            raise err(path, f"[correctness] atol/rtol give no tolerance for dtype {dt} of the grid")
    seeds = _seeds(path, corr["seeds"])
    families, accept_weak = _names(path, corr, wl)
    min_pass_rate = corr.get("min_pass_rate", 1.0)
    if not _is_number(min_pass_rate) or not 0 < min_pass_rate <= 1:
        raise err(path, "[correctness] min_pass_rate must be in (0, 1]")
    return Correctness(atol, rtol, seeds, families, accept_weak, float(min_pass_rate))


def _key_schemas(path: Path, raw: dict[str, Any], schema: int) -> None:
    """A key newer than the file's schema (``KEY_SCHEMA``) is refused with the fix."""
    for (table, key), since in KEY_SCHEMA.items():
        held = raw.get(table)
        if isinstance(held, dict) and key in held and schema < since:
            raise err(path, f"[{table}] {key} needs schema = {since} (a bench older than that would refuse the "
                            f"file): set schema = {since}")


def bar_table(path: Path, raw: dict[str, Any], schema: int) -> BarTable:
    """[bar] as written, its keys checked (and every table's keys against the file's schema)."""
    bar = raw.get("bar")
    if not isinstance(bar, dict):
        raise err(path, "missing [bar] table with go = \"<expression>\" and prediction = <number>")
    unknown(path, "[bar]", bar, BAR_KEYS)
    go = bar.get("go")
    if not isinstance(go, str) or not go.strip():
        raise err(path, "[bar] go must be an expression, e.g. \"geomean(speedup) >= 1.10 and pass_rate == 1.0\"")
    prediction = bar.get("prediction")
    if not _is_number(prediction) or not math.isfinite(prediction):
        raise err(path, "[bar] prediction must be a number: your predicted value of the primary metric")
    primary = bar.get("primary", DEFAULT_PRIMARY)
    if not isinstance(primary, str):
        raise err(path, "[bar] primary must be an aggregate such as \"geomean(speedup)\"")
    flags = {key: bar.get(key, False) for key in ("include_noisy", "allow_missing", "mixed_devices")}
    for key, val in flags.items():
        if not isinstance(val, bool):
            raise err(path, f"[bar] {key} must be true or false")
    _key_schemas(path, raw, schema)
    beyond_ceiling_ok = bar.get("beyond_ceiling_ok")
    if beyond_ceiling_ok is not None and (not isinstance(beyond_ceiling_ok, str) or not beyond_ceiling_ok.strip()):
        raise err(path, "[bar] beyond_ceiling_ok must say why the bar may need more than a device's measured "
                        "ceilings, e.g. beyond_ceiling_ok = \"the copy ceiling counts reads and writes; this "
                        "kernel only reads\"")
    min_coverage = bar.get("min_coverage", 0.0 if flags["allow_missing"] else DEFAULT_MIN_COVERAGE)
    if not _is_number(min_coverage) or not 0 <= min_coverage <= 1:
        raise err(path, "[bar] min_coverage must be a number in [0, 1]: the share of registered pairs "
                        "the verdict must have decided")
    return BarTable(go, float(prediction), primary, flags["include_noisy"], flags["allow_missing"],
                    flags["mixed_devices"], beyond_ceiling_ok.strip() if beyond_ceiling_ok else None,
                    float(min_coverage))
