"""A ledger file's format: one JSON row per line, each hash-chained to the one before.

Each row's ``hash`` is the SHA-256 of its canonical JSON (sorted keys, no spaces, finite
numbers only) including ``prev_hash``, so editing, deleting, reordering or truncating any
row breaks the chain at that row. Writing is ledger.py's (``Ledger.append``); checking a
whole file is ledger/verify.py's.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.provenance.git import LEDGER_DIR
from harness.ledger.rows import CeilingsRow, Row, UnknownField, load

LEDGER_SCHEMA = 1
# The device ceilings' ledger (commands/ceilings.py); line ids cannot start with '_'. Outcome
# rows name the ceilings row they used in ``ceilings_ref`` ({"seq", "hash"}; null: none).
CEILINGS_LEDGER = "_device_ceilings"
CEILINGS_REF = "ceilings_ref"
# `bench bisect`'s probes, every line's (commands/bisect.py): one `probe` row per commit measured.
BISECT_LEDGER = "_bisect"
GENESIS_HASH = "0" * 64
def canonical(obj: Any) -> str:
    """The exact text that is hashed: sorted keys, compact separators, no NaN/Infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def row_hash(row: dict[str, Any]) -> str:
    body = {k: v for k, v in row.items() if k != "hash"}
    return hashlib.sha256(canonical(body).encode("utf-8")).hexdigest()


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def ledger_path(root: Path, line: str) -> Path:
    return Path(root) / LEDGER_DIR / f"{line}.jsonl"


def check_schema(row: dict[str, Any], path: Path, n: int) -> None:
    schema = row.get("schema")
    if not isinstance(schema, int):
        raise UserError(f"{path}: row {n} has no integer 'schema': not a bench ledger row")
    if schema > LEDGER_SCHEMA:
        raise UserError(f"{path}: row {n} has ledger schema {schema}, newer than this bench understands "
                        f"({LEDGER_SCHEMA}): upgrade bench (pip install -U -e .) to read it")


def parse_row(raw: bytes, path: Path, n: int) -> dict[str, Any]:
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: row {n} is not valid JSON ({exc.msg}): run `bench ledger verify` and "
                        f"restore the file from git") from exc
    if not isinstance(row, dict):
        raise UserError(f"{path}: row {n} is not a JSON object: run `bench ledger verify` and restore the file from git")
    return row


def typed(row: dict[str, Any], path: Path, n: int) -> Row:
    """Row ``n`` of ``path`` as its typed class (ledger/rows.py), schema-checked."""
    check_schema(row, path, n)
    try:
        return load(row)
    except UnknownField as exc:
        raise UserError(f"{path}: row {n}: {exc} (ledger schema {row.get('schema')}): upgrade bench "
                        f"(pip install -U -e .) to read it, or restore the file from git") from None


def read_rows(path: Path, *, as_far_as_it_reads: bool = False) -> list[Row]:
    """All rows of a ledger file as typed rows (ledger/rows.py), schema-checked (chain not
    checked: use ``verify``). A line that is not a JSON object is refused — or, with
    ``as_far_as_it_reads``, ends the rows: the rows before the damage (what `bench ledger show`
    shows of a ledger that fails verification). A row this bench does not know (a newer
    schema, an undeclared field) is refused either way: upgrade bench to read it."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh):
            if not raw.endswith(b"\n"):
                break  # a torn final write: never acknowledged, so not a row
            try:
                row = parse_row(raw, path, n)
            except UserError:
                if not as_far_as_it_reads:
                    raise
                break
            rows.append(typed(row, path, n))
    return rows


def ceilings_where(row: CeilingsRow) -> str:
    """Where a ceilings row lies, for a reason that names a figure it gave: file, row and hash."""
    if row.seq is None:  # a row built in memory, in no ledger
        name = (row.fingerprint or {}).get("name") or row.device
        return f"the ceilings given ({name}, in no ledger)"
    return f"{LEDGER_DIR}/{CEILINGS_LEDGER}.jsonl row {row.seq} ({str(row.hash)[:12]})"
