"""Registrations: the GO/NO-GO bar, written down and committed before any number exists.

A registration is a TOML file ``registrations/<line>.toml`` (the line id is the stem).
``load`` parses and validates it completely — every problem is one ``UserError`` naming
the key and the fix — so that a bad bar is refused at register time, not after a night
of sweeping. The file's SHA-256 is the registration's identity: ``sweep`` and
``verdict`` refuse a file whose hash differs from the registered one.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UserError, plural, shown
from harness.registration import line_ids
from harness.workloads import DTYPES, WORKLOADS, Config
from harness.vocab.metrics import RATE_METRICS, STEP_NAMES
from harness.registration import bar as barlang, integration, replication, verify
from harness.workloads.inputs import DEFAULT_FAMILIES, FAMILIES
from harness.measurement.canaries import CANARIES
from harness.registry import get_kernel
from harness.provenance.git import repo_root
from harness.registration.integration import load_checked_step
from harness.measurement import memory
from harness.measurement.numerics import NumericPins
from harness.measurement.timing import TimingPolicy

if TYPE_CHECKING:
    from harness.registration.bar import Aggregate, Bar
    from harness.registration.integration import IntegrationSpec
    from harness.registration.replication import ReplicationSpec
    from harness.registration.verify import Clause

REGISTRATION_SCHEMA = 7
DEFAULT_BASELINE = "cublas_stack"
DEFAULT_PRIMARY = "geomean(speedup)"
# Tolerances are >= 0 (atol 0 with rtol > 0 is a pure relative bar) and below this (a
# "tolerance" of 1 accepts anything).
MAX_TOLERANCE = 0.5
# Refuse grids that would take a night per line by accident.
MAX_GRID_CONFIGS = 4096
# Seeds are checked one by one against a float64 reference; 1000 is far past any use
# (shape-aware attention used 40) and keeps a typo from building a million-seed line.
MAX_SEEDS = 1000

TOP_KEYS = {"schema", "hypothesis", "workload", "candidate", "candidates", "baseline", "amends", "grid",
            "correctness", "timing", "numerics", "bar", "notes", "verify", "integration", "replication"}
GRID_KEYS = {"batch", "tokens", "heads", "kv_heads", "seq_len", "head_dim", "dtype", "causal"}
CORRECTNESS_KEYS = {"atol", "rtol", "seeds", "families", "min_pass_rate", "accept_weak"}
BAR_KEYS = {"go", "prediction", "primary", "include_noisy", "allow_missing", "min_coverage", "mixed_devices",
            "beyond_ceiling_ok"}
# The schema a key first appeared in: a file using it must declare at least that schema, so
# a bench that predates the key refuses the file with "upgrade bench", never misreads it.
# (table, key) -> the schema that introduced it: a bench older than that refuses the file
# ("upgrade bench") instead of misreading it, so a file using the key must say that schema.
KEY_SCHEMA = {("bar", "mixed_devices"): 2, ("numerics", "num_threads"): 2, ("bar", "beyond_ceiling_ok"): 3,
              ("grid", "tokens"): 5,
              # the statistic stop (timing/criteria.py): an older bench would stop on noise instead
              ("timing", "stop"): 6, ("timing", "precision"): 6, ("timing", "alpha"): 6,
              # replications the verdict waits for (registration/replication.py): an older bench would close without them
              ("replication", "instances"): 7, ("replication", "combine"): 7}
# The schema that introduced a bar clause against a peer candidate (``speedup vs "P"``).
PEER_SCHEMA = 5
# Bar metrics -> the schema that introduced them: a bench older than that refuses the metric's
# name, so a file naming one must say that schema (the clock-normalised figures: cycles per
# call, the rate at a stated SM clock; the next-run interval, issue 48: an older bench would refuse
# its names).
METRIC_SCHEMA = {"cycles": 6, "tflops_at": 6, "speedup_next_low": 7, "speedup_next_high": 7}
# A verdict needs every registered pair decided unless [bar] min_coverage says less
# (allow_missing = true, the older key, means min_coverage = 0 unless it is given).
DEFAULT_MIN_COVERAGE = 1.0
VERIFY_KEYS = {"clauses"}


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


def _err(path: Path, msg: str) -> UserError:
    return UserError(f"{shown(path)}: {msg}")



def _unknown(path: Path, where: str, keys, allowed) -> None:
    extra = sorted(set(keys) - set(allowed))
    if extra:
        raise _err(path, f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} in {where} "
                         f"(allowed: {', '.join(sorted(allowed))})")


def _list(path, key, value, kind, check=None) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _err(path, f"[grid] {key} is empty: give at least one value")
    out = []
    for v in values:
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if not ok:
            raise _err(path, f"[grid] {key} = {v!r} is not {_KIND_NAMES[kind]}")
        if check and (msg := check(v)):
            raise _err(path, f"[grid] {key} = {v!r}: {msg}")
        out.append(v)
    if len(set(out)) != len(out):
        raise _err(path, f"[grid] {key} lists a value twice: {out}")
    return out


_KIND_NAMES = {int: "an integer", str: "a string", bool: "true or false"}


def _positive(v):
    return None if v > 0 else "must be > 0"


def _tolerance(path, key, value) -> dict:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        table = {d: float(value) for d in DTYPES}
    elif isinstance(value, dict):
        _unknown(path, f"[correctness] {key}", value, DTYPES)
        table = {}
        for d, v in value.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise _err(path, f"[correctness] {key}.{d} = {v!r} is not a number")
            table[d] = float(v)
    else:
        raise _err(path, f"[correctness] {key} must be a number or a table of dtype = number")
    for d, v in table.items():
        if not (0 <= v < MAX_TOLERANCE):
            raise _err(path, f"[correctness] {key} for {d} = {v} is outside [0, {MAX_TOLERANCE})")
    return table


def _checked_table(path: Path, raw: dict, key: str, parse):
    """An optional table, parsed by the room that owns it (its UserError gains the path)."""
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise _err(path, f"[{key}] must be a table")
    try:
        return parse(table)
    except UserError as exc:
        raise _err(path, f"[{key}] {exc}") from exc


def _check_filters(path: Path, tests, allowed: dict) -> None:
    """A filter naming a candidate, dtype or workload the line does not have can never
    match: the bar would be decided on nothing. Refuse it now, not after the sweep."""
    for t in tests:
        if t.field not in allowed:
            continue
        values = t.value if isinstance(t.value, tuple) else (t.value,)
        for v in values:
            if v not in allowed[t.field]:
                raise _err(path, f"[bar] filters on {t.field} == {v!r}, which this line does not have "
                                 f"({', '.join(map(repr, allowed[t.field]))}): fix the bar")


def _parsed(path: Path, key: str, text: str, parse):
    """``parse(text)``; its error (which begins "bar: ") names the key instead."""
    try:
        return parse(text)
    except UserError as exc:
        raise _err(path, f"[bar] {key}: {str(exc).removeprefix('bar: ')}") from exc


def _check_metric_schema(path: Path, schema: int, named: list) -> None:
    """A bar metric newer than the file's schema (``METRIC_SCHEMA``) is refused with the fix."""
    for key, agg in named:
        since = METRIC_SCHEMA.get(agg.metric)
        if since is not None and schema < since:
            raise _err(path, f"[bar] {key}: '{agg.metric}' needs schema = {since} (a bench older than that would "
                             f"refuse the file): set schema = {since}")


def _check_peers(path: Path, schema: int, cands: list[str], baseline: str, named: list) -> None:
    """A clause against a peer (``speedup vs "P"``) names another candidate of the line: only
    the candidates are timed in the same rounds (the baseline's speedup is ``speedup``)."""
    for key, agg in named:
        if agg.peer is None:
            continue
        if schema < PEER_SCHEMA:
            raise _err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' needs schema = {PEER_SCHEMA} (a bench "
                             f"older than that would refuse the file): set schema = {PEER_SCHEMA}")
        if agg.peer == baseline:
            raise _err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' names the baseline: a speedup is "
                             f"already the candidate against the baseline — write plain {agg.metric}")
        if agg.peer not in cands:
            raise _err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' names no candidate of this line "
                             f"(candidates: {', '.join(cands)}): a peer is timed in the same rounds only as a "
                             f"candidate — add it to candidates or fix the name")


def _check_decidable(path: Path, parsed, primary: str, primary_agg, rows: list[dict]) -> None:
    """A filter that matches none of the registered (config, candidate) pairs aggregates
    nothing whatever the sweep measures: its clause can never be decided. Refuse it now."""
    named = [(f"clause `{c.text}`", c.aggregate) for c in parsed.clauses()] + [(f"primary `{primary}`", primary_agg)]
    for what, agg in named:
        if barlang.matches_nothing(agg, rows):
            raise _err(path, f"[bar] {what} filters out every registered config ({plural(len(rows), 'pair')} of "
                             f"grid × candidates): it can never be decided — fix the filter or widen the grid")


def _verify_clauses(path: Path, raw: dict) -> tuple[tuple[str, ...], tuple]:
    """The optional [verify] table: clauses over hardware counters, parsed now so a typo is
    refused at register time (an unknown metric names the known ones)."""
    if "verify" not in raw:
        return (), ()
    table = raw["verify"]
    if not isinstance(table, dict):
        raise _err(path, "[verify] must be a table with clauses = [\"<counter clause>\", ...]")
    _unknown(path, "[verify]", table, VERIFY_KEYS)
    if "clauses" not in table:
        raise _err(path, "[verify] needs clauses = [\"dram_read_bytes <= 1.2 * min_bytes\", ...]")

    try:
        parsed = verify.parse_all(table["clauses"])
    except UserError as exc:
        raise _err(path, f"[verify] {exc}") from exc
    return tuple(table["clauses"]), parsed


def _integration(path: Path, raw: dict, schema: int, dtypes: list[str], parsed, primary_agg):
    """The optional [integration] table; a bar over step metrics needs it, and such a clause
    filters on the candidate only (an integration row has no config of the grid)."""
    step_aggs = [c.aggregate for c in parsed.clauses() if c.aggregate.metric in STEP_NAMES]
    if primary_agg.metric in STEP_NAMES:
        step_aggs.append(primary_agg)
    if "integration" not in raw:
        if step_aggs:
            raise _err(path, f"[bar] judges {step_aggs[0].metric}, a step metric, but the line has no [integration] "
                             f"table: add [integration] step = \"module:function\"")
        return None
    if schema < integration.INTEGRATION_SCHEMA:
        raise _err(path, f"[integration] needs schema = {integration.INTEGRATION_SCHEMA} (a bench older than that "
                         f"would refuse the file): set schema = {integration.INTEGRATION_SCHEMA}")
    for agg in step_aggs:
        fields = sorted({t.field for t in barlang.field_tests(agg)} - {"candidate"})
        if fields:
            raise _err(path, f"[bar] {agg.metric} filters on {', '.join(fields)}: an integration row has one "
                             f"candidate and no grid config — filter a step metric on candidate only")
    spec = _checked_table(path, raw, "integration", lambda t: integration.parse(t, dtypes))
    return spec


def _replication(path: Path, raw: dict, schema: int, integration):
    """The optional [replication] table (registration/replication.py): the instances the verdict
    waits for and how it combines them. The whole table is newer than schema 6: a bench before
    it would close the line without the replications, so the file must say schema 7."""
    if "replication" not in raw:
        return None

    if schema < replication.REPLICATION_SCHEMA:
        raise _err(path, f"[replication] needs schema = {replication.REPLICATION_SCHEMA} (a bench older than that "
                         f"would refuse the file): set schema = {replication.REPLICATION_SCHEMA}")
    if integration is not None:
        raise _err(path, "[replication] with [integration]: the model step is timed once, where the line was swept, "
                         "and a replicate re-times the kernel grid only — drop one of the two")
    return _checked_table(path, raw, "replication", replication.parse)


def load(path: Path) -> Registration:
    """Parse and fully validate a registration file (no ledger or git access)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{shown(path)} is a directory, not a registration: give registrations/<line>.toml")
    if not path.is_file():
        raise UserError(f"no registration file at {shown(path)}: write registrations/<line>.toml (see registrations/example.toml)")
    if path.suffix != ".toml":
        raise _err(path, "a registration is a .toml file")
    raw_bytes = path.read_bytes()
    try:
        text = raw_bytes.decode("utf-8-sig")  # an editor's byte-order mark is not an error
    except UnicodeDecodeError as exc:
        raise _err(path, f"is not UTF-8 text (byte 0x{raw_bytes[exc.start]:02x} at offset {exc.start}): "
                         f"save it as UTF-8") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _err(path, f"not valid TOML: {exc}") from exc
    return from_table(raw, path, hashlib.sha256(raw_bytes).hexdigest())


def from_table(raw: dict, path: Path, sha256: str) -> Registration:
    """Validate a parsed registration table (the TOML's content) read from ``path``, whose
    bytes hash to ``sha256``; the line id is the file's stem."""
    path = Path(path)
    line = path.stem
    try:
        line_ids.check(line, "the file name")
    except UserError as exc:
        raise _err(path, str(exc)) from None
    _unknown(path, "the top level", raw, TOP_KEYS)

    schema = raw.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise _err(path, f"'schema' must be an integer (this bench writes schema = {REGISTRATION_SCHEMA})")
    if schema > REGISTRATION_SCHEMA:
        raise _err(path, f"registration schema {schema} is newer than this bench understands "
                         f"({REGISTRATION_SCHEMA}): upgrade bench (pip install -U -e .)")
    if schema < 1:
        raise _err(path, f"'schema' must be >= 1, got {schema}")

    hypothesis = raw.get("hypothesis")
    if not isinstance(hypothesis, str) or not hypothesis.strip():
        raise _err(path, "'hypothesis' must be a non-empty string saying what you expect and why")
    workload = raw.get("workload", "attention")
    if workload not in WORKLOADS:
        raise _err(path, f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")

    if "candidate" in raw and "candidates" in raw:
        raise _err(path, "give either 'candidate' or 'candidates', not both")
    cands = raw.get("candidates", raw.get("candidate"))
    cands = [cands] if isinstance(cands, str) else cands
    if not isinstance(cands, list) or not cands or not all(isinstance(c, str) and c for c in cands):
        raise _err(path, "'candidate' must name a kernel (or 'candidates' a list of kernels): `bench kernels` lists them")
    if len(set(cands)) != len(cands):
        raise _err(path, f"'candidates' lists a kernel twice: {cands}")
    baseline = raw.get("baseline", DEFAULT_BASELINE)
    if not isinstance(baseline, str) or not baseline:
        raise _err(path, "'baseline' must name a kernel")
    if baseline in cands:
        raise _err(path, f"'{baseline}' is both baseline and candidate: the control arm already times the "
                         f"baseline against itself")
    amends = raw.get("amends")
    if amends is not None and (not isinstance(amends, str) or amends == line):
        raise _err(path, "'amends' must name the earlier line this one replaces (its file stem)")
    if amends is not None:
        try:
            line_ids.check(amends, "amends")
        except UserError as exc:
            raise _err(path, f"{exc} — 'amends' names the earlier line this one replaces") from None

    grid_raw = raw.get("grid")
    if not isinstance(grid_raw, dict):
        raise _err(path, "missing [grid] table (batch, heads, seq_len, head_dim, dtype, causal)")
    _unknown(path, "[grid]", grid_raw, GRID_KEYS)
    if ("batch" in grid_raw) == ("tokens" in grid_raw):
        raise _err(path, "[grid] needs 'batch' or 'tokens' (batch = tokens / seq_len at each seq_len), not "
                         + ("both" if "batch" in grid_raw else "neither"))
    for key in ("heads", "seq_len", "head_dim", "dtype"):
        if key not in grid_raw:
            raise _err(path, f"[grid] needs '{key}'")
    grid = {
        **({"batch": _list(path, "batch", grid_raw["batch"], int, _positive)} if "batch" in grid_raw else
           {"tokens": _list(path, "tokens", grid_raw["tokens"], int, _positive)}),
        "heads": _list(path, "heads", grid_raw["heads"], int, _positive),
        "kv_heads": _list(path, "kv_heads", grid_raw["kv_heads"], int, _positive) if "kv_heads" in grid_raw else None,
        "seq_len": _list(path, "seq_len", grid_raw["seq_len"], int, _positive),
        "head_dim": _list(path, "head_dim", grid_raw["head_dim"], int, _positive),
        "dtype": _list(path, "dtype", grid_raw["dtype"], str,
                       lambda d: None if d in DTYPES else f"unknown dtype (known: {', '.join(DTYPES)})"),
        "causal": _list(path, "causal", grid_raw.get("causal", [False]), bool),
    }
    if workload == "decode" and True in grid["causal"]:
        raise _err(path, "[grid] causal = true has no meaning for decode (one query attends to the whole cache)")
    configs = []
    # A size given in tokens keeps B·N fixed across seq_len: each config's batch is tokens / seq_len.
    sizes = grid["batch"] if "batch" in grid else grid["tokens"]
    for b, h, kv, n, d, dt, c in itertools.product(sizes, grid["heads"], grid["kv_heads"] or [None],
                                                   grid["seq_len"], grid["head_dim"], grid["dtype"], grid["causal"]):
        if "tokens" in grid:
            if b % n:
                raise _err(path, f"[grid] tokens {b} is not a multiple of seq_len {n}: each config's batch is "
                                 f"tokens / seq_len — give seq_len values that divide it")
            b //= n
        kv = h if kv is None else kv
        if kv > h or h % kv:
            raise _err(path, f"[grid] heads {h} is not a multiple of kv_heads {kv}: each kv head must serve "
                             f"a whole group of query heads")
        configs.append(Config(workload, b, h, kv, n, d, dt, c))
    if len(configs) > MAX_GRID_CONFIGS:
        raise _err(path, f"[grid] expands to {len(configs)} configs (> {MAX_GRID_CONFIGS}): split the line")
    grid["kv_heads"] = grid["kv_heads"] or "= heads"

    corr = raw.get("correctness")
    if not isinstance(corr, dict):
        raise _err(path, "missing [correctness] table (atol, rtol, seeds)")
    _unknown(path, "[correctness]", corr, CORRECTNESS_KEYS)
    for key in ("atol", "rtol", "seeds"):
        if key not in corr:
            raise _err(path, f"[correctness] needs '{key}'")
    atol = _tolerance(path, "atol", corr["atol"])
    rtol = _tolerance(path, "rtol", corr["rtol"])
    for dt in grid["dtype"]:
        if dt not in atol or dt not in rtol:
            raise _err(path, f"[correctness] atol/rtol give no tolerance for dtype {dt} of the grid")
    seeds = corr["seeds"]
    count = len(seeds) if isinstance(seeds, list) else seeds
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_SEEDS:  # before a count expands
        raise _err(path, f"[correctness] {count} seeds is more than {MAX_SEEDS}: give a count or list you mean")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise _err(path, "[correctness] seeds must be >= 1 (a count) or a list of seeds")
        seeds = list(range(seeds))
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise _err(path, "[correctness] seeds must be a count or a non-empty list of non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise _err(path, f"[correctness] seeds lists a seed twice: {seeds}")

    families = corr.get("families", list(DEFAULT_FAMILIES))
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise _err(path, "[correctness] families must be a non-empty list of family names")
    if len(set(families)) != len(families):
        raise _err(path, f"[correctness] families lists a family twice: {families}")
    for fam in families:
        if fam not in FAMILIES:
            raise _err(path, f"[correctness] unknown input family {fam!r} (known: {', '.join(FAMILIES)})")

    accept_weak = corr.get("accept_weak", [])
    if not isinstance(accept_weak, list) or not all(isinstance(a, str) for a in accept_weak):
        raise _err(path, f"[correctness] accept_weak must be a list of canary names ({', '.join(CANARIES)})")
    for name in accept_weak:
        if name not in CANARIES:
            raise _err(path, f"[correctness] accept_weak names unknown canary {name!r} (known: {', '.join(CANARIES)})")
    min_pass_rate = corr.get("min_pass_rate", 1.0)
    if not isinstance(min_pass_rate, (int, float)) or isinstance(min_pass_rate, bool) or not 0 < min_pass_rate <= 1:
        raise _err(path, "[correctness] min_pass_rate must be in (0, 1]")

    timing = _checked_table(path, raw, "timing", TimingPolicy.from_mapping)
    numerics = _checked_table(path, raw, "numerics", NumericPins.from_registration)

    bar = raw.get("bar")
    if not isinstance(bar, dict):
        raise _err(path, "missing [bar] table with go = \"<expression>\" and prediction = <number>")
    _unknown(path, "[bar]", bar, BAR_KEYS)
    go = bar.get("go")
    if not isinstance(go, str) or not go.strip():
        raise _err(path, "[bar] go must be an expression, e.g. \"geomean(speedup) >= 1.10 and pass_rate == 1.0\"")
    prediction = bar.get("prediction")
    if not isinstance(prediction, (int, float)) or isinstance(prediction, bool) or not math.isfinite(prediction):
        raise _err(path, "[bar] prediction must be a number: your predicted value of the primary metric")
    primary = bar.get("primary", DEFAULT_PRIMARY)
    if not isinstance(primary, str):
        raise _err(path, "[bar] primary must be an aggregate such as \"geomean(speedup)\"")
    include_noisy = bar.get("include_noisy", False)
    allow_missing = bar.get("allow_missing", False)
    mixed_devices = bar.get("mixed_devices", False)
    for key, val in (("include_noisy", include_noisy), ("allow_missing", allow_missing),
                     ("mixed_devices", mixed_devices)):
        if not isinstance(val, bool):
            raise _err(path, f"[bar] {key} must be true or false")
    for (table, key), since in KEY_SCHEMA.items():
        held = raw.get(table)
        if isinstance(held, dict) and key in held and schema < since:
            raise _err(path, f"[{table}] {key} needs schema = {since} (a bench older than that would refuse the "
                             f"file): set schema = {since}")
    beyond_ceiling_ok = bar.get("beyond_ceiling_ok")
    if beyond_ceiling_ok is not None and (not isinstance(beyond_ceiling_ok, str) or not beyond_ceiling_ok.strip()):
        raise _err(path, "[bar] beyond_ceiling_ok must say why the bar may need more than a device's measured "
                         "ceilings, e.g. beyond_ceiling_ok = \"the copy ceiling counts reads and writes; this "
                         "kernel only reads\"")
    min_coverage = bar.get("min_coverage", 0.0 if allow_missing else DEFAULT_MIN_COVERAGE)
    if (not isinstance(min_coverage, (int, float)) or isinstance(min_coverage, bool)
            or not 0 <= min_coverage <= 1):
        raise _err(path, "[bar] min_coverage must be a number in [0, 1]: the share of registered pairs "
                         "the verdict must have decided")

    parsed = _parsed(path, "go", go, barlang.parse)
    primary_agg = _parsed(path, "primary", primary, barlang.parse_aggregate)
    named = [("go", c.aggregate) for c in parsed.clauses()] + [("primary", primary_agg)]
    _check_metric_schema(path, schema, named)
    _check_peers(path, schema, cands, baseline, named)
    _check_filters(path, [*barlang.field_tests(parsed), *barlang.field_tests(primary_agg)],
                   {"candidate": cands, "dtype": grid["dtype"], "workload": [workload]})
    _check_decidable(path, parsed, primary, primary_agg, [{**c.as_dict(), "candidate": k} for c in configs for k in cands])
    verify, verify_clauses = _verify_clauses(path, raw)
    if verify and mixed_devices:
        raise _err(path, "[verify] with [bar] mixed_devices = true: counters are profiled on one GPU model, so a "
                         "line with [verify] is decided on one — drop one of the two")
    integration = _integration(path, raw, schema, grid["dtype"], parsed, primary_agg)
    replication = _replication(path, raw, schema, integration)
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise _err(path, "'notes' must be a string")

    return Registration(
        line=line, path=path, sha256=sha256, schema=schema,
        hypothesis=hypothesis.strip(), workload=workload, candidates=tuple(cands), baseline=baseline,
        amends=amends, grid=grid, configs=tuple(configs), atol=atol, rtol=rtol, seeds=tuple(seeds),
        families=tuple(families), min_pass_rate=float(min_pass_rate), timing=timing,
        numerics=numerics, go=go, bar=parsed, prediction=float(prediction), primary=primary,
        primary_aggregate=primary_agg, include_noisy=include_noisy, allow_missing=allow_missing,
        min_coverage=float(min_coverage), accept_weak=tuple(accept_weak), raw=raw, verify=verify,
        verify_clauses=verify_clauses, mixed_devices=mixed_devices,
        beyond_ceiling_ok=beyond_ceiling_ok.strip() if beyond_ceiling_ok else None, integration=integration,
        replication=replication)


def check_kernels(reg: Registration, root: Path | None = None) -> tuple[dict, ...]:
    """Every named kernel exists and supports the workload and every dtype of the grid, every
    grid point fits a known device, and an ``[integration]`` step is code of the repository
    ``root``'s commit (default: the current directory's repository) or of an installed
    distribution (then imported): returns that distribution's record for the rows
    (``integration.step_code``), () when there is none."""
    for name in (*reg.candidates, reg.baseline):
        spec = get_kernel(name)
        if reg.workload not in spec.workloads:
            raise _err(reg.path, f"kernel '{name}' has no workload '{reg.workload}' (has {', '.join(spec.workloads)})")
        for dt in reg.grid["dtype"]:
            if dt not in spec.dtypes:
                raise _err(reg.path, f"kernel '{name}' does not support dtype {dt} of the grid "
                                     f"(supports {', '.join(spec.dtypes)}): drop it from [grid] dtype or pick another kernel")
        for cfg in reg.configs:
            why = spec.config_reason(cfg)
            if why:
                raise _err(reg.path, f"kernel '{name}' cannot run {cfg.key()} of the grid ({why}): "
                                     f"shrink the grid or pick another kernel")
    check_fits(reg)
    if reg.integration is None:
        return ()

    try:  # the step's module must import now (torch stays inside its functions)
        return load_checked_step(repo_root() if root is None else root, reg.integration.step)[1]
    except UserError as exc:
        raise _err(reg.path, str(exc)) from exc


def check_fits(reg: Registration) -> None:
    """Every grid point fits some known device (memory.KNOWN_DEVICES) by the VRAM model: a
    point none can hold would be skipped on every machine, and its pairs never measured."""
    specs = [get_kernel(reg.baseline), *(get_kernel(c) for c in reg.candidates)]
    for cfg in reg.configs:
        why = memory.unholdable(cfg, specs, reg.timing)
        if why:
            raise _err(reg.path, f"[grid] point {cfg.key()} {why}: shrink the grid")
