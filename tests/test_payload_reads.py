"""Issue 49, item 3: rows and their nested payloads are read through the typed classes of
``harness/ledger/rows.py`` and ``harness/ledger/payloads.py``, never by string key. An AST count
of string-key reads (``x["literal"]`` and ``x.get("literal")``; writes into a dict being built
are not reads) over harness/, outside the modules allowlisted below, may only go down; and every
payload class (ledger/payloads.py, ledger/line_payloads.py) gives back, from ``dump``, the object
it was read from in the shipped ledgers."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from harness.ledger import line_payloads, payloads
from harness.measurement.ceilings import CeilingsMethod
from harness.measurement.nextrun import BetweenRun, NextRunRecord
from harness.vocab import outcomes

REPO = Path(__file__).resolve().parents[1]

# Modules whose string-key reads are allowed, each with why.
ALLOWLIST = {
    "harness/ledger/rows.py": "the row module: the typed rows are built from the dicts read",
    "harness/ledger/payloads.py": "the payload module: the typed payloads are built from the dicts read",
    "harness/ledger/line_payloads.py": "the payload module of a line's own rows (as payloads.py)",
    "harness/ledger/format.py": "the on-disk format: a raw record's schema before it is typed",
    "harness/ledger/verify.py": "the chain check: each raw record's seq, prev_hash, hash, line and kind, and "
                                "the committed versions' raw rows, read before (and whether or not) they type",
    "harness/registration/schema.py": "reads a registration's TOML tables, no row",
    "harness/registration/sections.py": "reads a registration's TOML tables, no row",
    "harness/registration/cross_checks.py": "reads a registration's TOML tables, no row",
    "harness/registration/integration.py": "reads a registration's [integration] TOML table, no row",
    "harness/workloads/shipped.py": "reads a registration's [grid] table and a grid point's axis values, no row",
    "harness/workloads/api.py": "reads a grid point's own instance dict (its __getattr__), no row",
    "harness/execution/ray_executor.py": "reads Ray's cluster resources (GPU, CPU), no row",
    "harness/ledger/store.py": "the append: the time given with the fields of a row it builds, the chain's raw "
                               "last record (seq, hash) and a damaged file's raw records, read before (and "
                               "whether or not) they type, as verify.py",
    "harness/execution/devicelock.py": "reads the device lock file's JSON, no row",
    "harness/provenance/code.py": "reads an installed distribution's direct_url.json, no row",
    "harness/pycache.py": "reads the environment, no row",
    "harness/governance/scaffold.py": "builds a registration's TOML tables (bench new), no row",
    "harness/measurement/clockguard.py": "reads its own module state table, no row",
    "harness/measurement/numerics.py": "reads a registration's [numerics] table and the numeric state it "
                                       "captures (NumericState.as_dict), no row",
    "harness/execution/profile_worker.py": "reads the profile job's JSON spec handed to the worker, no row",
    "harness/reporting/analysis/verify_cache.py": "reads its own cache file's JSON document, no row",
    "harness/reporting/render/sweep.py": "renders the sweep's summary document (commands/sweep.py "
                                         "SweepSummary.as_dict, also `bench sweep --json`), no row",
    "harness/reporting/render/route.py": "renders the route document (reporting/analysis/route.py), no row",
    "harness/reporting/render/report.py": "renders the report's data document (reporting/analysis/report.py "
                                          "report_data, also `bench report --format json`), no row",
}
# String-key reads outside the allowlist: a ratchet, lowered as readers move to the typed
# payloads. The target is 40.
MAX_STRING_KEY_READS = 74
# Receivers that are no payload (the environment, the module table).
NOT_PAYLOADS = ("os.environ", "environ", "sys.modules")


def _is_literal(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_key_reads(source: str) -> int:
    """``x["literal"]`` loads and ``x.get("literal", ...)`` calls in ``source``."""
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_literal(node.slice):
            n += ast.unparse(node.value) not in NOT_PAYLOADS
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _is_literal(node.args[0])):
            n += ast.unparse(node.func.value) not in NOT_PAYLOADS
    return n


def counts() -> dict[str, int]:
    """String-key reads per module of harness/ outside the allowlist (modules with none left out)."""
    out = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel not in ALLOWLIST and (n := string_key_reads(path.read_text(encoding="utf-8"))):
            out[rel] = n
    return out


def test_counter_counts_reads_not_writes():
    src = 'a["x"]; a.get("y"); a.get(k); b["z"] = 1; os.environ.get("HOME"); a[k]'
    assert string_key_reads(src) == 2


def test_string_key_reads_only_go_down():
    found = counts()
    total = sum(found.values())
    worst = ", ".join(f"{m} {n}" for m, n in sorted(found.items(), key=lambda kv: -kv[1])[:8])
    assert total <= MAX_STRING_KEY_READS, (
        f"{total} string-key reads of rows or payloads in harness/ (at most {MAX_STRING_KEY_READS}): read the "
        f"typed classes of harness/ledger/rows.py and payloads.py instead (most: {worst})")


def test_allowlist_names_modules_that_exist():
    missing = [m for m in ALLOWLIST if not (REPO / m).is_file()]
    assert not missing, f"allowlisted modules that no longer exist: {missing}"


# (row field, payload class) of the payloads a row holds directly; the gate holds one per role.
DIRECT = {"timing": payloads.Measurement, "sustained": payloads.Sustained, "cost": payloads.Cost,
          "registration": line_payloads.RegistrationSummary, "ceilings_ref": payloads.CeilingsRef,
          "replicate": line_payloads.Replicate, "reopens": line_payloads.Reopens, "metrics": payloads.Metrics,
          "policy": payloads.Policy, "config": payloads.ConfigFields, "numerics": payloads.Numerics,
          "coverage": line_payloads.Coverage, "measured_at": line_payloads.MeasuredAt, "counters": payloads.Counters,
          "op_share_used": payloads.OpShare, "amdahl_violated": payloads.Amdahl,
          "tolerance_power": line_payloads.TolerancePower, "timing_resolution": line_payloads.TimingResolution,
          "reductio": line_payloads.Reductio, "probe": line_payloads.Probe, "method": CeilingsMethod, "bare": payloads.Bare,
          "next_run": NextRunRecord}
# (row field, payload class) of the lists of payloads a row holds.
LISTED = {"launches": payloads.Launch, "integration": line_payloads.IntegrationStep,
          "failures": line_payloads.Failure, "code": outcomes.CodePackage, "remeasured": outcomes.Remeasured}


def _shipped_rows():
    for path in sorted((REPO / "ledger").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            yield path.name, json.loads(line)


def _payloads_of(row: dict):
    for name, cls in DIRECT.items():
        if isinstance(row.get(name), dict):
            yield name, cls, row[name]
    for name, cls in LISTED.items():
        for d in row.get(name) or []:
            yield f"{name}[]", cls, d
    for d in (row.get("tolerance_floor") or {}).values():
        yield "tolerance_floor.*", line_payloads.ToleranceFloor, d
        if isinstance(d.get("worst"), dict):
            yield "tolerance_floor.*.worst", line_payloads.WorstElement, d["worst"]
    for d in ((row.get("timing_resolution") or {}).get("devices") or {}).values():
        yield "timing_resolution.devices.*", line_payloads.ResolvedDevice, d
    for d in ((row.get("tolerance_power") or {}).get("canaries") or []):
        yield "tolerance_power.canaries[]", line_payloads.CanaryCheck, d
    reductio = row.get("reductio") or {}
    for d in (reductio.get("checked") or []) + (reductio.get("not_checked") or []):
        yield "reductio.*checked[]", line_payloads.ReductioDevice, d
    timing = row.get("timing")
    if isinstance(timing, dict) and isinstance(timing.get("rounds"), dict):
        yield "timing.rounds", payloads.Rounds, timing["rounds"]
    for arm in (timing.get("arms") or {}).values() if isinstance(timing, dict) else ():
        yield "timing.arms[]", payloads.Samples, arm
    gate = row.get("gate")
    for role, g in (gate.items() if isinstance(gate, dict) else ()):
        if isinstance(g, dict):
            yield f"gate.{role}", payloads.Gate, g
    for field in ("clauses", "verify"):  # a verdict's bar and its [verify] clauses
        for c in (row.get(field) or []) if row.get("kind") == "verdict" else []:
            yield f"{field}[]", line_payloads.Clause, c


def test_payloads_round_trip_on_shipped_ledgers():
    n = 0
    for file, row in _shipped_rows():
        for where, cls, d in _payloads_of(row):
            back = cls.from_row(d).dump()
            assert back == d and list(back) == list(d), f"{file} seq {row.get('seq')}: {where} does not round-trip"
            n += 1
    assert n > 0


def test_from_row_tolerates_older_and_absent_payloads():
    assert payloads.Gate.from_row(None) is None and payloads.Gate.from_row([1]) is None
    old = payloads.Gate.from_row({"passed": True})  # a schema that wrote only some fields
    assert old.passed is True and old.n_checks is None and not old.has("n_checks") and old.has("passed")
    kept = payloads.Cost.from_row({"total": 1.5, "added_later": 2})
    assert kept.total == 1.5 and kept.dump() == {"total": 1.5, "added_later": 2}


@pytest.mark.parametrize("kind, build", [("incorrect", payloads.incorrect), ("crashed", payloads.crashed),
                                         ("skipped", payloads.skipped)])
def test_rejection_constructors(kind, build):
    base = {"config_key": "k", "candidate": "c"}
    fields = {"tag": "mismatch"} if kind == "incorrect" else {}
    got_kind, payload = build(base, reason="why", **fields)
    assert got_kind == kind and payload["reason"] == "why" and payload["config_key"] == "k"
    assert base == {"config_key": "k", "candidate": "c"}  # the pair's fields are not changed


@pytest.mark.parametrize("module", ["harness/ledger/verify.py", "harness/reporting/analysis/summary.py"])
def test_split_modules_stay_short(module):
    n = len((REPO / module).read_text(encoding="utf-8").splitlines())
    assert n <= 500, f"{module} has {n} lines (at most 500: split it by job)"


def test_payloads_no_shipped_ledger_holds_round_trip():
    # No shipped row holds a remeasured pair or an installed code package: built here as written.
    was = outcomes.Remeasure("b1_h8", "fa2", ((3, "result"), (7, "throttled")), (12, "result"))
    d = was.as_row()
    assert outcomes.Remeasured.from_row(d).dump() == d and outcomes.Remeasure.from_row(d) == was
    code = {"package": "kernels", "name": "bench-kernels", "version": "1.0", "editable": False, "files": 3,
            "sha256": "ab" * 32}
    held = outcomes.CodePackage.from_row(code)
    assert held.dump() == code and list(held.dump()) == list(code) and held.sha256 == "ab" * 32
    between = BetweenRun(0.02, "replicates", "replicates", 4, 0.02)
    d = between.as_dict()
    assert NextRunRecord.from_row(d).dump() == d and BetweenRun.from_dict(d) == between
