"""Typed ledger rows (ledger/rows.py): one class per row kind, a symmetric
load/dump that keeps every hash, old rows that still load, and fields no class declares
refused on both sides of the file."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import UserError
from harness.vocab import outcomes
from harness.ledger.store import Ledger
from harness.ledger.format import read_rows, row_hash
from harness.ledger.rows import (ROW_CLASSES, OutcomeRow, ResultRow, SkippedRow, UnknownField, load)
from harness.ledger.verify import verify
from tests.conftest import REPO, run_bench

SHIPPED = sorted((REPO / "ledger").glob("*.jsonl")) + sorted((REPO / "tests" / "data").glob("*.jsonl"))


def test_every_row_kind_has_its_class():
    assert set(ROW_CLASSES) == set(outcomes.ROW_KINDS)
    assert all(issubclass(ROW_CLASSES[k], OutcomeRow) for k in outcomes.OUTCOME_KINDS)
    assert all(cls.KIND == kind for kind, cls in ROW_CLASSES.items())


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_row_loads_and_dumps_back_to_the_bytes_it_was_hashed_from(path):
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    typed = read_rows(path)
    assert len(typed) == len(raw) > 0
    for d, row in zip(raw, typed):
        assert type(row) is ROW_CLASSES[d["kind"]]
        assert row.dump() == d and row_hash(row.dump()) == d["hash"]
        assert all(row.has(k) for k in d if k != "kind")


def test_shipped_ledgers_hold_every_outcome_kind_they_claim():
    kinds = {r.kind for p in SHIPPED for r in read_rows(p)}
    assert {outcomes.REGISTERED, outcomes.RESULT, outcomes.VERDICT, outcomes.CEILINGS} <= kinds


def test_an_absent_field_reads_none_and_has_tells_it_from_a_written_null():
    row = load({"kind": "result", "seq": 3, "floor": None})
    assert isinstance(row, ResultRow) and row.floor is None and row.has("floor")
    assert row.sustained is None and not row.has("sustained")
    assert row.dump() == {"kind": "result", "seq": 3, "floor": None}
    # Any outcome row answers any outcome field (None where its kind never holds it).
    skipped = load({"kind": "skipped", "reason": "memory"})
    assert isinstance(skipped, SkippedRow) and skipped.metrics is None and skipped.pair == (None, None)
    assert row.replace(impossible="why").impossible == "why" and row.replace(impossible="why").has("impossible")


@pytest.mark.parametrize("d, named", [
    ({"kind": "result", "speedupp": 2.0}, "speedupp"),
    ({"kind": "skipped", "metrics": {"speedup": 9.0}}, "metrics"),  # another kind's field
    ({"kind": "verdict", "candidate": "x"}, "candidate"),
    ({"kind": "later", "seq": 0}, "'later'"),
])
def test_a_field_no_class_declares_is_refused(d, named):
    with pytest.raises(UnknownField, match=re.escape(named)):
        load(d)


def test_an_append_with_an_undeclared_field_writes_nothing(tmp_path):
    led = Ledger(tmp_path, "line")
    led.append("registered", {"commit": "c" * 40})
    before = led.path.read_bytes()
    with pytest.raises(UnknownField, match="speedupp"):
        led.append("result", {"commit": "c" * 40, "speedupp": 2.0})
    assert led.path.read_bytes() == before
    row = led.append("result", {"commit": "c" * 40, "metrics": {"speedup": 2.0}})
    assert isinstance(row, ResultRow) and row.seq == 1 and row.metrics == {"speedup": 2.0}


def test_a_row_of_a_field_this_bench_does_not_know_is_one_clear_refusal(repo):
    """A forged (or newer) row: the chain holds, the row class does not: show and verify name it."""
    led = Ledger(repo, "line")
    led.append("registered", {"commit": "c" * 40})
    d = {"schema": 1, "seq": 1, "kind": "result", "line": "line", "time": "t", "commit": "c" * 40,
         "prev_hash": read_rows(led.path)[0].hash, "turbo": True}
    d["hash"] = row_hash(d)
    with open(led.path, "a") as fh:
        fh.write(json.dumps(d, sort_keys=True, separators=(",", ":")) + "\n")
    with pytest.raises(UserError, match="row 1: a result row has field turbo that this bench does not know"):
        read_rows(led.path)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 1 and "field turbo" in res.reason and "upgrade bench" in res.reason
    r = run_bench(repo, "ledger", "show", "line")
    assert r.returncode == 2 and "field turbo" in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr


def test_no_reader_indexes_a_ledger_row_by_string_key():
    """Readers use the classes: a row's kind is an attribute everywhere but the file-format
    checks that read raw JSON before a row is typed (ledger/format, ledger/verify's chain)."""
    raw_ok = {"ledger/format.py", "ledger/verify.py", "ledger/rows.py"}
    pattern = re.compile(r"""(?<!df)\[["']kind["']\]|\.get\(["']kind["']\)""")  # df: a pandas column
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in sorted((REPO / "harness").rglob("*.py")) if p.relative_to(REPO / "harness").as_posix() not in raw_ok
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], "\n".join(found)
