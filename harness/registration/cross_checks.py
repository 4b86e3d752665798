"""Checks across a registration's tables: the parsed bar against the line (its metrics'
schema, its peers, its filters, whether each clause can be decided), and the optional
tables whose meaning depends on the rest ([verify], [integration], [replication])."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import UserError, plural
from harness.registration import bar as barlang, integration, replication, verify
from harness.registration.fields import checked_table, err, unknown
from harness.registration.schema_keys import METRIC_SCHEMA, PEER_SCHEMA, VERIFY_KEYS
from harness.vocab.metrics import STEP_NAMES

if TYPE_CHECKING:
    from harness.registration.bar_syntax import Aggregate, Bar, FieldTest
    from harness.registration.integration import IntegrationSpec
    from harness.registration.replication import ReplicationSpec
    from harness.registration.sections import Head
    from harness.registration.verify import Clause
    from harness.workloads import Config
    from harness.workloads.api import Workload

    Named = list[tuple[str, Aggregate]]


def _check_metric_schema(path: Path, schema: int, named: Named) -> None:
    """A bar metric newer than the file's schema (``METRIC_SCHEMA``) is refused with the fix."""
    for key, agg in named:
        since = METRIC_SCHEMA.get(agg.metric or "")
        if since is not None and schema < since:
            raise err(path, f"[bar] {key}: '{agg.metric}' needs schema = {since} (a bench older than that would "
                            f"refuse the file): set schema = {since}")


def _check_peers(path: Path, schema: int, cands: list[str], baseline: str, named: Named) -> None:
    """A clause against a peer (``speedup vs "P"``) names another candidate of the line: only
    the candidates are timed in the same rounds (the baseline's speedup is ``speedup``)."""
    for key, agg in named:
        if agg.peer is None:
            continue
        if schema < PEER_SCHEMA:
            raise err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' needs schema = {PEER_SCHEMA} (a bench "
                            f"older than that would refuse the file): set schema = {PEER_SCHEMA}")
        if agg.peer == baseline:
            raise err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' names the baseline: a speedup is "
                            f"already the candidate against the baseline — write plain {agg.metric}")
        if agg.peer not in cands:
            raise err(path, f"[bar] {key}: '{agg.metric} vs \"{agg.peer}\"' names no candidate of this line "
                            f"(candidates: {', '.join(cands)}): a peer is timed in the same rounds only as a "
                            f"candidate — add it to candidates or fix the name")


def _check_filters(path: Path, tests: list[FieldTest], allowed: dict[str, list[str]]) -> None:
    """A filter naming a candidate, dtype or workload the line does not have can never
    match: the bar would be decided on nothing. Refuse it now, not after the sweep."""
    for t in tests:
        if t.field not in allowed:
            continue
        values = t.value if isinstance(t.value, tuple) else (t.value,)
        for v in values:
            if v not in allowed[t.field]:
                raise err(path, f"[bar] filters on {t.field} == {v!r}, which this line does not have "
                                f"({', '.join(map(repr, allowed[t.field]))}): fix the bar")


def _check_decidable(path: Path, parsed: Bar, primary: str, primary_agg: Aggregate,
                     rows: list[dict[str, Any]]) -> None:
    """A filter that matches none of the registered (config, candidate) pairs aggregates
    nothing whatever the sweep measures: its clause can never be decided. Refuse it now."""
    named = [(f"clause `{c.text}`", c.aggregate) for c in parsed.clauses()] + [(f"primary `{primary}`", primary_agg)]
    for what, agg in named:
        if barlang.matches_nothing(agg, rows):
            raise err(path, f"[bar] {what} filters out every registered config ({plural(len(rows), 'pair')} of "
                            f"grid × candidates): it can never be decided — fix the filter or widen the grid")


def check_bar(path: Path, head: Head, dtypes: list[str], configs: list[Config], parsed: Bar, primary: str,
              primary_agg: Aggregate) -> None:
    """The parsed bar (``go`` as ``parsed``, ``primary`` as ``primary_agg``) against the line's
    kernels and workload (``head``), the grid's ``dtypes`` and ``configs``."""
    schema, workload, cands, baseline = head.schema, head.workload, head.candidates, head.baseline
    named = [("go", c.aggregate) for c in parsed.clauses()] + [("primary", primary_agg)]
    _check_metric_schema(path, schema, named)
    _check_peers(path, schema, cands, baseline, named)
    _check_filters(path, [*barlang.field_tests(parsed), *barlang.field_tests(primary_agg)],
                   {"candidate": cands, "dtype": dtypes, "workload": [workload]})
    _check_decidable(path, parsed, primary, primary_agg,
                     [{**c.as_dict(), "candidate": k} for c in configs for k in cands])


def verify_clauses(path: Path, raw: dict[str, Any], workload: Workload,
                   configs: list[Config]) -> tuple[tuple[str, ...], tuple[Clause, ...]]:
    """The optional [verify] table: clauses over hardware counters, parsed now so a typo is
    refused at register time (an unknown metric names the known ones), as is a name the line's
    ``workload`` gives no value at ``configs`` (no bare op, a formula it does not define)."""
    if "verify" not in raw:
        return (), ()
    table = raw["verify"]
    if not isinstance(table, dict):
        raise err(path, "[verify] must be a table with clauses = [\"<counter clause>\", ...]")
    unknown(path, "[verify]", table, VERIFY_KEYS)
    if "clauses" not in table:
        raise err(path, "[verify] needs clauses = [\"dram_read_bytes <= 1.2 * min_bytes\", ...]")

    try:
        parsed = verify.parse_all(table["clauses"])
    except UserError as exc:
        raise err(path, f"[verify] {exc}") from exc
    why = verify.undefined_names(parsed, workload, configs)
    if why:
        raise err(path, f"[verify] {why}")
    return tuple(table["clauses"]), parsed


def integration_spec(path: Path, raw: dict[str, Any], schema: int, dtypes: list[str], parsed: Bar,
                     primary_agg: Aggregate) -> IntegrationSpec | None:
    """The optional [integration] table; a bar over step metrics needs it, and such a clause
    filters on the candidate only (an integration row has no config of the grid)."""
    step_aggs = [c.aggregate for c in parsed.clauses() if c.aggregate.metric in STEP_NAMES]
    if primary_agg.metric in STEP_NAMES:
        step_aggs.append(primary_agg)
    if "integration" not in raw:
        if step_aggs:
            raise err(path, f"[bar] judges {step_aggs[0].metric}, a step metric, but the line has no [integration] "
                            f"table: add [integration] step = \"module:function\"")
        return None
    if schema < integration.INTEGRATION_SCHEMA:
        raise err(path, f"[integration] needs schema = {integration.INTEGRATION_SCHEMA} (a bench older than that "
                        f"would refuse the file): set schema = {integration.INTEGRATION_SCHEMA}")
    for agg in step_aggs:
        fields = sorted({t.field for t in barlang.field_tests(agg)} - {"candidate"})
        if fields:
            raise err(path, f"[bar] {agg.metric} filters on {', '.join(fields)}: an integration row has one "
                            f"candidate and no grid config — filter a step metric on candidate only")
    return checked_table(path, raw, "integration", lambda t: integration.parse(t, dtypes))


def replication_spec(path: Path, raw: dict[str, Any], schema: int,
                     spec: IntegrationSpec | None) -> ReplicationSpec | None:
    """The optional [replication] table (registration/replication.py): the instances the verdict
    waits for and how it combines them. The whole table is newer than schema 6: a bench before
    it would close the line without the replications, so the file must say schema 7."""
    if "replication" not in raw:
        return None

    if schema < replication.REPLICATION_SCHEMA:
        raise err(path, f"[replication] needs schema = {replication.REPLICATION_SCHEMA} (a bench older than that "
                        f"would refuse the file): set schema = {replication.REPLICATION_SCHEMA}")
    if spec is not None:
        raise err(path, "[replication] with [integration]: the model step is timed once, where the line was swept, "
                        "and a replicate re-times the kernel grid only — drop one of the two")
    return checked_table(path, raw, "replication", replication.parse)
