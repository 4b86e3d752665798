"""The ledger: one append-only, hash-chained JSON Lines file per registered line.

Each row's ``hash`` is the SHA-256 of its canonical JSON (sorted keys, no spaces, finite
numbers only) including ``prev_hash``, so editing, deleting, reordering or truncating any
row breaks the chain at that row. Rows are written under a file lock, flushed and
fsynced before ``append`` returns: a row reported as written survives a crash or kill.

Python API: ``read_rows(path)``, ``verify(path)``, ``dataframe(path, tidy=False)`` (pandas).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.errors import UserError

LEDGER_SCHEMA = 1
GENESIS_HASH = "0" * 64
# Row kinds; a row of another kind is refused at append time.
KINDS = ("registered", "result", "skipped", "incorrect", "throttled", "crashed", "verdict",
         "supersedes", "ceilings", "unsupported")
LOCK_TIMEOUT_S = 60.0


def canonical(obj: Any) -> str:
    """The exact text that is hashed: sorted keys, compact separators, no NaN/Infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def jsonable(obj: Any) -> Any:
    """Make ``obj`` strict-JSON: non-finite floats become strings, tuples lists, numpy scalars Python."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if hasattr(obj, "item"):  # numpy / torch scalars
        return jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"ledger rows hold JSON data only, not {type(obj).__name__}: {obj!r}")


def row_hash(row: dict) -> str:
    body = {k: v for k, v in row.items() if k != "hash"}
    return hashlib.sha256(canonical(body).encode("utf-8")).hexdigest()


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def ledger_path(root: Path, line: str) -> Path:
    return Path(root) / "ledger" / f"{line}.jsonl"


def _check_schema(row: dict, path: Path, n: int) -> None:
    schema = row.get("schema")
    if not isinstance(schema, int):
        raise UserError(f"{path}: row {n} has no integer 'schema': not a bench ledger row")
    if schema > LEDGER_SCHEMA:
        raise UserError(f"{path}: row {n} has ledger schema {schema}, newer than this bench understands "
                        f"({LEDGER_SCHEMA}): upgrade bench (pip install -U -e .) to read it")


def _parse_row(raw: bytes, path: Path, n: int) -> dict:
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: row {n} is not valid JSON ({exc.msg}): run `bench ledger verify` and "
                        f"restore the file from git") from exc
    if not isinstance(row, dict):
        raise UserError(f"{path}: row {n} is not a JSON object: run `bench ledger verify` and restore the file from git")
    return row


def read_rows(path: Path) -> list[dict]:
    """All rows of a ledger file, schema-checked (chain not checked: use ``verify``)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh):
            if not raw.endswith(b"\n"):
                break  # a torn final write: never acknowledged, so not a row
            row = _parse_row(raw, path, n)
            _check_schema(row, path, n)
            rows.append(row)
    return rows


@dataclass(frozen=True)
class VerifyResult:
    path: str
    ok: bool
    n_rows: int
    bad_row: int | None = None
    reason: str | None = None


def _committed_bytes(path: Path) -> bytes | None:
    """The ledger file as committed at HEAD, or None outside git / when untracked."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True,
                             text=True)
        if top.returncode != 0:
            return None
        rel = path.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
        res = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=path.parent, capture_output=True)
    except (FileNotFoundError, ValueError):
        return None
    return res.stdout if res.returncode == 0 else None


def verify(path: Path) -> VerifyResult:
    """Re-check the whole chain and name the first bad row.

    Catches an edited byte (hash mismatch), a deleted or reordered row (seq / prev_hash
    break), a torn final row, and — where the file is committed — rows missing or changed
    relative to HEAD (a truncated tail leaves a valid chain, so git is the anchor).
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"no ledger at {path}: register the line first (bench register registrations/<line>.toml)")
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends in a newline
    prev = GENESIS_HASH
    n = 0
    for n, raw in enumerate(lines):
        try:
            row = json.loads(raw)
        except json.JSONDecodeError:
            return VerifyResult(str(path), False, n, n, f"row {n} is not valid JSON: edited or truncated")
        if not isinstance(row, dict):
            return VerifyResult(str(path), False, n, n, f"row {n} is not a JSON object: edited")
        if isinstance(row.get("schema"), int) and row["schema"] > LEDGER_SCHEMA:
            _check_schema(row, path, n)
        if row.get("seq") != n:
            return VerifyResult(str(path), False, n, n,
                                f"row {n} has seq {row.get('seq')}: a row before it was deleted or rows were reordered")
        if row.get("prev_hash") != prev:
            return VerifyResult(str(path), False, n, n,
                                f"row {n} does not chain to row {n - 1}: a row was deleted, inserted or reordered")
        if row_hash(row) != row.get("hash"):
            return VerifyResult(str(path), False, n, n, f"row {n} was edited: its content no longer matches its hash")
        prev = row["hash"]
    count = len(lines)
    if tail:
        return VerifyResult(str(path), False, count, count, f"row {count} is a partial write (truncated)")
    committed = _committed_bytes(path)
    if committed is not None and not data.startswith(committed):
        committed_rows = committed.count(b"\n")
        for i, (a, b) in enumerate(zip(committed.split(b"\n"), lines)):
            if a != b:
                return VerifyResult(str(path), False, count, i, f"row {i} differs from the row committed at HEAD")
        return VerifyResult(str(path), False, count, count,
                            f"rows {count}..{committed_rows - 1} committed at HEAD are missing (truncated)")
    return VerifyResult(str(path), True, count)


class Ledger:
    """Appends rows to ``ledger/<line>.jsonl`` under a lock, chaining each to the last."""

    def __init__(self, root: Path, line: str):
        self.root = Path(root)
        self.line = line
        self.path = ledger_path(root, line)

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def rows(self) -> list[dict]:
        return read_rows(self.path)

    @contextlib.contextmanager
    def _lock(self):
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S)
        try:
            lock.acquire()
        except Timeout:
            raise UserError(f"{self.path} stayed locked for {LOCK_TIMEOUT_S:.0f} s by another writer: "
                            f"check for a stuck bench process") from None
        try:
            yield
        finally:
            lock.release()

    def append(self, kind: str, fields: dict) -> dict:
        """Append one row; returns it once it is flushed and fsynced to disk."""
        if kind not in KINDS:
            raise ValueError(f"unknown ledger row kind {kind!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock():
            seq, prev = self._tail()
            row = jsonable({**fields, "schema": LEDGER_SCHEMA, "seq": seq, "kind": kind, "line": self.line,
                            "time": fields.get("time") or utc_now(), "prev_hash": prev})
            row["hash"] = row_hash(row)
            data = (canonical(row) + "\n").encode("utf-8")
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:  # the new file's directory entry must survive a power loss too
                _fsync_dir(self.path.parent)
        return row

    def _tail(self) -> tuple[int, str]:
        """Next seq and the hash to chain to; a torn (never acknowledged) final write is cut off."""
        if not self.path.exists():
            return 0, GENESIS_HASH
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                # The last write was interrupted before its fsync returned, so no caller was
                # told it was written: dropping the partial bytes loses nothing reported.
                cut = data.rfind(b"\n") + 1
                fh.truncate(cut)
                os.fsync(fh.fileno())
                data = data[:cut]
        lines = data.splitlines()
        if not lines:
            return 0, GENESIS_HASH
        last = _parse_row(lines[-1], self.path, len(lines) - 1)
        _check_schema(last, self.path, len(lines) - 1)
        if row_hash(last) != last.get("hash") or last.get("seq") != len(lines) - 1:
            raise UserError(f"{self.path}: the last row fails its hash check; refusing to chain onto it — "
                            f"run `bench ledger verify {self.line}` and restore the file from git")
        return len(lines), last["hash"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_rows(rows: Iterable[dict]) -> list[dict]:
    """Rows not named by any ``supersedes`` row."""
    rows = list(rows)
    gone = {s for r in rows if r.get("kind") == "supersedes" for s in r.get("supersedes", [])}
    return [r for r in rows if r.get("seq") not in gone]


def dataframe(path: Path, *, tidy: bool = False):
    """The ledger's rows as a flat pandas DataFrame (nested fields joined with '.').

    ``tidy=True``: one row per current (config, kernel) outcome with typed config columns
    and one float column per metric (``harness.reporting.tidy``).
    """
    import pandas as pd

    if tidy:
        from harness.reporting.tidy import tidy as tidy_view

        return tidy_view(Path(path))
    rows = read_rows(Path(path))
    if not rows:
        return pd.DataFrame()
    return pd.json_normalize(rows, sep=".")
