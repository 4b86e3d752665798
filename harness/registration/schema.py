"""Registrations: the GO/NO-GO bar, written down and committed before any number exists.

A registration is a TOML file ``registrations/<line>.toml`` (the line id is the stem).
``load`` parses and validates it completely — every problem is one ``UserError`` naming
the key and the fix — so that a bad bar is refused at register time, not after a night
of sweeping. The file's SHA-256 is the registration's identity: ``sweep`` and
``verdict`` refuse a file whose hash differs from the registered one. Each table is parsed
in its own room: sections (top level, [grid], [correctness], [bar]), cross_checks (the bar
against the line; [verify], [integration], [replication]); schema_keys holds the keys and
the schema versions, fields the checks of one value.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import UserError, shown
from harness.measurement import memory
from harness.measurement.numerics import NumericPins
from harness.measurement.timing import TimingPolicy
from harness.provenance.gitcmd import repo_root
from harness.registration import bar as barlang, cross_checks, line_ids, sections
from harness.registration.fields import checked_table, err, parsed, unknown
from harness.registration.integration import load_checked_step
from harness.registration.schema_keys import (DEFAULT_MIN_COVERAGE, KEY_SCHEMA, METRIC_SCHEMA, REGISTRATION_SCHEMA,
                                              TOP_KEYS)
from harness.registry import get_kernel, get_workload, workload_for
from harness.vocab.metrics import RATE_METRICS
from harness.workloads import Config

if TYPE_CHECKING:
    from harness.registration.bar_syntax import Aggregate, Bar
    from harness.registration.integration import IntegrationSpec
    from harness.registration.replication import ReplicationSpec
    from harness.registration.verify import Clause

# The schema's keys and versions are read from here too (tests, the reductio).
__all__ = ["KEY_SCHEMA", "METRIC_SCHEMA", "REGISTRATION_SCHEMA", "Registration", "check_fits", "check_kernels",
           "from_table", "load", "sha256_file"]


@dataclass(frozen=True)
class Registration:
    """A validated registration, its tables parsed once: the sweep, power and verdict read
    these objects and never the TOML again. It is plain data (picklable): the sweep sends
    it to its worker processes."""

    line: str
    path: Path
    sha256: str
    schema: int
    hypothesis: str
    workload: str
    candidates: tuple[str, ...]
    baseline: str
    amends: str | None
    grid: dict
    configs: tuple[Config, ...]
    atol: dict  # dtype -> atol
    rtol: dict  # dtype -> rtol
    seeds: tuple[int, ...]
    families: tuple[str, ...]
    min_pass_rate: float
    timing: TimingPolicy  # [timing] with the named defaults filled in
    numerics: NumericPins  # the [numerics] flags pinned over the measuring process's state
    go: str
    bar: Bar  # ``go`` parsed
    prediction: float
    primary: str
    primary_aggregate: Aggregate  # ``primary`` parsed
    include_noisy: bool
    allow_missing: bool
    min_coverage: float = DEFAULT_MIN_COVERAGE
    accept_weak: tuple[str, ...] = ()  # canaries (measurement.canaries) the tolerance may let through
    raw: dict = field(repr=False, default_factory=dict)
    verify: tuple[str, ...] = ()  # [verify] clauses over hardware counters (registration/verify.py)
    mixed_devices: bool = False  # [bar]: the verdict may decide over rows from several GPU models
    verify_clauses: tuple[Clause, ...] = ()  # ``verify`` parsed
    # [bar]: why the bar may need more than a device's measured ceilings (governance/reductio.py)
    beyond_ceiling_ok: str | None = None
    # [integration]: the model step the kernel is meant to speed up (registration/integration.py)
    integration: IntegrationSpec | None = None
    # [replication]: how many device instances the verdict waits for, and how it combines them
    replication: ReplicationSpec | None = None

    def tolerance(self, dtype: str) -> dict[str, float]:
        """``{"atol": …, "rtol": …}`` for ``dtype`` (a dtype of the grid): every check against
        the reference reads the registered tolerances through this, as keyword arguments."""
        return {"atol": self.atol[dtype], "rtol": self.rtol[dtype]}

    @property
    def dtypes(self) -> list:
        """The grid's dtypes, as [grid] lists them."""
        return self.grid["dtype"]

    @property
    def timing_table(self) -> dict:
        """[timing] as written (only the keys the registration sets)."""
        return dict(self.raw.get("timing", {}))

    def _rate_aggregates(self) -> list:
        """The bar's clauses and its primary that aggregate an absolute rate (metrics.RATE_METRICS)."""
        return [a for a in [c.aggregate for c in self.bar.clauses()] + [self.primary_aggregate]
                if a.metric in RATE_METRICS]

    def judges_rates(self) -> bool:
        """Whether a bar clause, or the primary, is over an absolute rate."""
        return bool(self._rate_aggregates())

    def judges_rates_of(self, cfg, candidate: str) -> bool:
        """Whether a rate clause, or a rate primary, reads this (config, candidate) pair (its
        ``where`` selects the pair): only such a pair's rates must be the sustained clock's;
        the others' are the interleaved rounds', as on a line whose bar judges no rate (the
        harness's own cost, issue 32)."""
        row = [{**cfg.as_dict(), "candidate": candidate}]
        return any(barlang.matching(a, row) for a in self._rate_aggregates())

    def peer_pairs(self, cfg, timed: list[str]) -> list[tuple[str, str]]:
        """(peer P, candidate A) for each go clause ``speedup vs "P"`` that selects A at ``cfg``,
        both among ``timed``: the peer quantities the statistic stop must resolve there."""
        out = []
        for clause in self.bar.clauses():
            peer = clause.aggregate.peer
            if peer is None or peer not in timed:
                continue
            for a in timed:
                if (a != peer and (peer, a) not in out
                        and barlang.matching(clause.aggregate, [{**cfg.as_dict(), "candidate": a}])):
                    out.append((peer, a))
        return out

    def summary(self) -> dict:
        """What a ledger row carries so reports can be built from the ledger alone."""
        return {"line": self.line, "path": self.path.as_posix(), "sha256": self.sha256, "schema": self.schema,
                "hypothesis": self.hypothesis, "workload": self.workload, "candidates": list(self.candidates),
                "baseline": self.baseline, "amends": self.amends, "grid": self.grid, "atol": self.atol,
                "rtol": self.rtol, "seeds": list(self.seeds), "families": list(self.families),
                "min_pass_rate": self.min_pass_rate, "timing": self.timing_table,
                "numerics": dict(self.raw.get("numerics", {})), "go": self.go, "prediction": self.prediction,
                "primary": self.primary, "include_noisy": self.include_noisy, "allow_missing": self.allow_missing,
                "min_coverage": self.min_coverage, "accept_weak": list(self.accept_weak),
                "verify": list(self.verify), **({"mixed_devices": True} if self.mixed_devices else {}),
                **({"beyond_ceiling_ok": self.beyond_ceiling_ok} if self.beyond_ceiling_ok else {}),
                **({"integration": self.integration.as_dict()} if self.integration else {}),
                **({"replication": self.replication.as_dict()} if self.replication else {})}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load(path: Path) -> Registration:
    """Parse and fully validate a registration file (no ledger or git access)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{shown(path)} is a directory, not a registration: give registrations/<line>.toml")
    if not path.is_file():
        raise UserError(f"no registration file at {shown(path)}: write registrations/<line>.toml (see registrations/example.toml)")
    if path.suffix != ".toml":
        raise err(path, "a registration is a .toml file")
    raw_bytes = path.read_bytes()
    try:
        text = raw_bytes.decode("utf-8-sig")  # an editor's byte-order mark is not an error
    except UnicodeDecodeError as exc:
        raise err(path, f"is not UTF-8 text (byte 0x{raw_bytes[exc.start]:02x} at offset {exc.start}): "
                         f"save it as UTF-8") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise err(path, f"not valid TOML: {exc}") from exc
    return from_table(raw, path, hashlib.sha256(raw_bytes).hexdigest())


def _schema(path: Path, raw: dict[str, Any]) -> int:
    """The file's schema, which this bench must understand (it is read first: it says what the rest means)."""
    schema = raw.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise err(path, f"'schema' must be an integer (this bench writes schema = {REGISTRATION_SCHEMA})")
    if schema > REGISTRATION_SCHEMA:
        raise err(path, f"registration schema {schema} is newer than this bench understands "
                        f"({REGISTRATION_SCHEMA}): upgrade bench (pip install -U -e .)")
    if schema < 1:
        raise err(path, f"'schema' must be >= 1, got {schema}")
    return schema


def from_table(raw: dict[str, Any], path: Path, sha256: str) -> Registration:
    """Validate a parsed registration table (the TOML's content) read from ``path``, whose
    bytes hash to ``sha256``; the line id is the file's stem. The tables are checked in this
    order, so a file with several faults is refused for the same one every time."""
    path = Path(path)
    line = path.stem
    try:
        line_ids.check(line, "the file name")
    except UserError as exc:
        raise err(path, str(exc)) from None
    unknown(path, "the top level", raw, TOP_KEYS)
    head = sections.head(path, raw, line, _schema(path, raw))
    grid, configs = sections.grid(path, raw, head.workload)
    corr = sections.correctness(path, raw, grid["dtype"], head.workload)
    timing = checked_table(path, raw, "timing", TimingPolicy.from_mapping)
    numerics = checked_table(path, raw, "numerics", NumericPins.from_registration)
    bar = sections.bar_table(path, raw, head.schema)
    # A bar filters on the line's own workload's axes: another workload's axis is an unknown field.
    fields = barlang.workload_fields(get_workload(head.workload))
    go = parsed(path, "go", bar.go, lambda text: barlang.parse(text, fields))
    primary_agg = parsed(path, "primary", bar.primary, lambda text: barlang.parse_aggregate(text, fields))
    cross_checks.check_bar(path, head, grid["dtype"], configs, go, bar.primary, primary_agg)
    verify, verify_clauses = cross_checks.verify_clauses(path, raw, get_workload(head.workload), configs)
    if verify and bar.mixed_devices:
        raise err(path, "[verify] with [bar] mixed_devices = true: counters are profiled on one GPU model, so a "
                        "line with [verify] is decided on one — drop one of the two")
    integration = cross_checks.integration_spec(path, raw, head.schema, grid["dtype"], go, primary_agg)
    replication = cross_checks.replication_spec(path, raw, head.schema, integration)
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise err(path, "'notes' must be a string")

    return Registration(
        line=line, path=path, sha256=sha256, schema=head.schema,
        hypothesis=head.hypothesis.strip(), workload=head.workload, candidates=tuple(head.candidates),
        baseline=head.baseline, amends=head.amends, grid=grid, configs=tuple(configs), atol=corr.atol,
        rtol=corr.rtol, seeds=tuple(corr.seeds), families=tuple(corr.families), min_pass_rate=corr.min_pass_rate,
        timing=timing, numerics=numerics, go=bar.go, bar=go, prediction=bar.prediction, primary=bar.primary,
        primary_aggregate=primary_agg, include_noisy=bar.include_noisy, allow_missing=bar.allow_missing,
        min_coverage=bar.min_coverage, accept_weak=tuple(corr.accept_weak), raw=raw, verify=verify,
        verify_clauses=verify_clauses, mixed_devices=bar.mixed_devices, beyond_ceiling_ok=bar.beyond_ceiling_ok,
        integration=integration, replication=replication)


def check_kernels(reg: Registration, root: Path | None = None) -> tuple[dict, ...]:
    """Every named kernel exists and supports the workload and every dtype of the grid, every
    grid point fits a known device, and an ``[integration]`` step is code of the repository
    ``root``'s commit (default: the current directory's repository) or of an installed
    distribution (then imported): returns that distribution's record for the rows
    (``integration.step_code``), () when there is none."""
    for name in (*reg.candidates, reg.baseline):
        spec = get_kernel(name)
        try:
            workload_for(spec, reg.workload)
        except UserError as exc:
            raise err(reg.path, str(exc)) from None
        for dt in reg.grid["dtype"]:
            if dt not in spec.dtypes:
                raise err(reg.path, f"kernel '{name}' does not support dtype {dt} of the grid "
                                     f"(supports {', '.join(spec.dtypes)}): drop it from [grid] dtype or pick another kernel")
        for cfg in reg.configs:
            why = spec.config_reason(cfg)
            if why:
                raise err(reg.path, f"kernel '{name}' cannot run {cfg.key()} of the grid ({why}): "
                                     f"shrink the grid or pick another kernel")
    check_fits(reg)
    if reg.integration is None:
        return ()

    try:  # the step's module must import now (torch stays inside its functions)
        return load_checked_step(repo_root() if root is None else root, reg.integration.step)[1]
    except UserError as exc:
        raise err(reg.path, str(exc)) from exc


def check_fits(reg: Registration) -> None:
    """Every grid point fits some known device (memory.KNOWN_DEVICES) by the VRAM model: a
    point none can hold would be skipped on every machine, and its pairs never measured."""
    specs = [get_kernel(reg.baseline), *(get_kernel(c) for c in reg.candidates)]
    wl = get_workload(reg.workload)
    for cfg in reg.configs:
        why = memory.unholdable(cfg, specs, reg.timing, workload=wl)
        if why:
            raise err(reg.path, f"[grid] point {cfg.key()} {why}: shrink the grid")
