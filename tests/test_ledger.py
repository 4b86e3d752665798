"""The hash-chained ledger: appends, verification of tampering, torn writes, DataFrame export."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.governance.ledger import (GENESIS_HASH, LEDGER_SCHEMA, Ledger, dataframe, read_rows, row_hash,
                                       verify)
from tests.conftest import git


def _fill(root: Path, n: int = 5) -> Ledger:
    led = Ledger(root, "line")
    led.append("registered", {"commit": "c" * 40, "note": "first"})
    for i in range(1, n):
        led.append("result", {"commit": "c" * 40, "value": i * 1.5, "nan": float("nan")})
    return led


def test_chain_fields_and_verify_ok(tmp_path):
    led = _fill(tmp_path)
    rows = led.rows()
    assert [r["seq"] for r in rows] == list(range(5))
    assert rows[0]["prev_hash"] == GENESIS_HASH
    for a, b in zip(rows, rows[1:]):
        assert b["prev_hash"] == a["hash"]
    assert all(r["schema"] == LEDGER_SCHEMA and r["hash"] == row_hash(r) for r in rows)
    assert rows[1]["nan"] == "NaN"  # strict JSON: non-finite numbers are spelled out
    res = verify(led.path)
    assert res.ok and res.n_rows == 5


def _lines(path):
    return path.read_bytes().split(b"\n")[:-1]


def _write(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_edited_byte_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[2] = lines[2].replace(b'"value":3.0', b'"value":3.1')
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 2 and "edited" in res.reason


def test_deleted_row_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    del lines[2]
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 2 and "deleted" in res.reason


def test_swapped_pair_is_named(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[1], lines[2] = lines[2], lines[1]
    _write(led.path, lines)
    res = verify(led.path)
    assert not res.ok and res.bad_row == 1 and "reordered" in res.reason


def test_partial_last_row_is_named_and_append_recovers(tmp_path):
    led = _fill(tmp_path)
    data = led.path.read_bytes()
    led.path.write_bytes(data + b'{"schema":1,"seq":5,"kin')  # a write killed mid-row
    res = verify(led.path)
    assert not res.ok and res.bad_row == 5 and res.torn
    assert "incomplete final line" in res.reason and "bench ledger repair line" in res.reason
    assert len(read_rows(led.path)) == 5  # never acknowledged, so never a row
    led.append("result", {"commit": "c" * 40})
    assert verify(led.path).ok and len(led.rows()) == 6


def test_truncated_committed_tail_is_caught_through_git(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@e")
    git(tmp_path, "config", "user.name", "t")
    led = _fill(tmp_path)
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "ledger")
    lines = _lines(led.path)
    _write(led.path, lines[:3])  # the chain of the first 3 rows is still valid on its own
    res = verify(led.path)
    assert not res.ok and res.bad_row == 3 and "missing" in res.reason


def test_append_refuses_to_chain_onto_an_edited_last_row(tmp_path):
    led = _fill(tmp_path)
    lines = _lines(led.path)
    lines[-1] = lines[-1].replace(b'"value":6.0', b'"value":7.0')
    _write(led.path, lines)
    with pytest.raises(UserError, match="fails its hash check"):
        led.append("result", {"commit": "c" * 40})


def test_newer_schema_refused_with_fix(tmp_path):
    led = _fill(tmp_path, 1)
    row = json.loads(_lines(led.path)[0])
    row["schema"] = LEDGER_SCHEMA + 1
    led.path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError, match="upgrade bench"):
        read_rows(led.path)


def _appender(root, n):
    led = Ledger(Path(root), "line")
    for i in range(n):
        led.append("result", {"commit": "c" * 40, "i": i})


def test_concurrent_writers_keep_one_chain(tmp_path):
    Ledger(tmp_path, "line").append("registered", {"commit": "c" * 40})
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_appender, args=(str(tmp_path), 15)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    res = verify(Ledger(tmp_path, "line").path)
    assert res.ok and res.n_rows == 46


def test_dataframe_flattens_rows(tmp_path):
    led = _fill(tmp_path, 3)
    led.append("result", {"commit": "c" * 40, "config": {"seq_len": 128}})
    df = dataframe(led.path)
    assert len(df) == 4
    assert "config.seq_len" in df.columns and df["config.seq_len"].iloc[-1] == 128


@pytest.mark.parametrize("last", [b'{"schema":1,"seq":', b'[1, 2, 3]'])
def test_a_garbled_last_row_is_one_clear_error(tmp_path, last):
    led = _fill(tmp_path, 2)
    led.path.write_bytes(led.path.read_bytes() + last + b"\n")
    with pytest.raises(UserError, match="restore the file from git"):
        led.append("result", {"commit": "c" * 40})
    with pytest.raises(UserError, match="row 2"):
        read_rows(led.path)
