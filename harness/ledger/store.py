"""The ledger: one append-only, hash-chained JSON Lines file per registered line.

Rows are written under a file lock, flushed and fsynced before ``append`` returns: a row
reported as written survives a crash or kill; an append that fails leaves no partial row.
git is the anchor: ``anchor`` commits a line's new rows, and ledger/verify.py checks every
committed version is still a prefix of the file. The row format and its hash chain are
ledger/format.py's.

Python API: ``read_rows(path)`` (ledger/format.py), ``verify(path)`` (ledger/verify.py),
``dataframe(path)`` (pandas; the tidy view is harness.reporting.tidy).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from contextlib import AbstractContextManager
from typing import Any, Iterator

from harness.errors import UserError
from harness.provenance import git as gitguard
from harness.provenance.git import LEDGER_DIR
from harness.ledger.format import (GENESIS_HASH, LEDGER_SCHEMA, canonical, check_schema, ledger_path,
                                              parse_row, read_rows, row_hash, utc_now)
from harness.ledger.rows import Row, UnknownField, load
from harness.ledger.verify import verify
from harness.ledger.locks import exclusive
from harness.vocab.outcomes import ROW_KINDS
from harness.jsonsafe import jsonable
from harness.ledger.verify import chained

# Row kinds (vocab/outcomes.py); a row of another kind is refused at append time.
KINDS = ROW_KINDS
LOCK_TIMEOUT_S = 60.0
# Free space a command needs on the ledger's file system before it starts: a result row
# is tens of KB, and a sweep commits a new version of the file after every config.
MIN_FREE_BYTES = 64 * 2**20


def recorded(root: Path) -> Iterator[tuple[str, list[Row]]]:
    """Every ledger of ``root``/ledger as (file name, typed rows), read leniently: a line that
    is not JSON, or not a row this bench knows, is left out. For figures gathered across lines before a new one exists (register's
    timing resolution, the reductio's baseline times), never for verification."""
    for path in sorted((Path(root) / LEDGER_DIR).glob("*.jsonl")):
        rows = []
        for text in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                try:
                    rows.append(load(row))
                except UnknownField:
                    continue
        yield path.name, rows


@dataclass(frozen=True)
class Repaired:
    path: str
    removed_bytes: int
    row: int  # the row the incomplete line would have been; rows 0..row-1 are kept
    # Foreign bytes removed (complete lines after the chain that no bench row claims): how many
    # lines, at which offset; 0 where only an incomplete final line was removed.
    foreign_lines: int = 0
    offset: int = 0


@dataclass(frozen=True)
class Left:
    """A ledger file as a command last read or wrote it: its size and the SHA-256 of its bytes.
    A command that appends holds the file to this before each append and before each commit:
    bytes that appeared meanwhile were written by something else (a kernel, another process)."""

    size: int
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> "Left":
        return cls(len(data), hashlib.sha256(data).hexdigest())


class Ledger:
    """Appends rows to ``ledger/<line>.jsonl`` under a lock, chaining each to the last."""

    def __init__(self, root: Path, line: str):
        self.root = Path(root)
        self.line = line
        self.path = ledger_path(root, line)

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def rows(self) -> list[Row]:
        return read_rows(self.path)

    def _lock(self) -> AbstractContextManager[None]:
        return exclusive(Path(str(self.path) + ".lock"), timeout=LOCK_TIMEOUT_S,
                         busy=f"{self.path} stayed locked for {LOCK_TIMEOUT_S:.0f} s by another writer: "
                              f"check for a stuck bench process")

    @property
    def rel(self) -> str:
        return f"{LEDGER_DIR}/{self.line}.jsonl"

    def require_writable(self) -> None:
        """Refuse before any work unless a row can be appended: the directory takes new files
        (lock files, the ledger), the file opens for append, and the file system has room.

        Opening for append writes nothing, and it is what the kernel actually allows —
        root included: an immutable file or a read-only mount refuses root too. A symlinked
        ledger/ or ledger file is refused too: rows written through it could never be committed.
        """
        gitguard.require_real_path(self.root, self.rel)
        where = self.path.parent
        try:
            if where.is_dir():
                with tempfile.TemporaryFile(dir=where):
                    pass
            if self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            what = self.rel if self.path.exists() and exc.filename == str(self.path) else f"{LEDGER_DIR}/"
            raise UserError(f"{what} is not writable ({exc.strerror}): bench appends rows there — make it "
                            f"writable (chmod u+w; chattr -i; a read-write mount) and run the command again") from None
        while not where.exists():
            where = where.parent
        free = shutil.disk_usage(where).free
        if free < MIN_FREE_BYTES:
            raise UserError(f"only {free / 2**20:.1f} MiB free on the file system of {LEDGER_DIR}/, bench needs "
                            f"{MIN_FREE_BYTES / 2**20:.0f} MiB before it starts: free disk space and run it again")

    def left(self) -> Left:
        """The file as it is now (an absent file is an empty one)."""
        return Left.of(self.path.read_bytes() if self.path.exists() else b"")

    def require_left(self, left: Left) -> None:
        """Refuse unless the file is byte for byte what a command left (``left``): bytes appended
        since (a kernel writing to its own ledger, in a worker or the driver), a cut or an edit
        are not bench's rows, and nothing may be appended to (or committed with) them."""
        data = self.path.read_bytes() if self.path.exists() else b""
        if len(data) == left.size and hashlib.sha256(data).hexdigest() == left.sha256:
            return
        rows = data[:left.size].count(b"\n")
        after = f"after row {rows - 1}, the last bench wrote" if rows else "before any row"
        if len(data) > left.size and hashlib.sha256(data[:left.size]).hexdigest() == left.sha256:
            foreign = len(data) - left.size
            raise UserError(f"{self.rel} changed since bench last wrote it: {foreign} foreign bytes at offset "
                            f"{left.size} ({after}) — something else (a kernel?) writes to the ledger, so nothing "
                            f"more is appended: stop it, remove them with `bench ledger repair {self.line}`, and run "
                            f"the command again")
        what = (f"is {left.size - len(data)} bytes shorter than bench left it (cut at offset {len(data)})"
                if len(data) < left.size else f"no longer holds the {left.size} bytes bench left there (edited)")
        raise UserError(f"{self.rel} {what}: something else writes to the ledger, so nothing more is appended — "
                        f"restore it from git (git checkout -- {self.rel}; rows not yet committed are lost) and run "
                        f"the command again")

    def append(self, kind: str, fields: dict[str, Any]) -> Row:
        """Append one row; returns it (typed, ledger_rows) once it is flushed and fsynced to disk.

        A write or fsync that fails (disk full, I/O error, short write) is cut back to the
        previous end of the file, so no partial row is left, and raised as one UserError.
        """
        return self.append_after(None, kind, fields)[0]

    def append_after(self, left: Left | None, kind: str, fields: dict[str, Any]) -> tuple[Row, Left]:
        """``append``, to a file that must be byte for byte ``left`` (``require_left``, under the
        lock: None, as it is); the row and the file as this append leaves it."""
        if kind not in KINDS:
            raise ValueError(f"unknown ledger row kind {kind!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock():
            if left is not None:
                self.require_left(left)
            created = not self.path.exists()
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise UserError(f"cannot open {self.rel} to append a row ({exc.strerror}): make it writable "
                                f"and run the same command again") from None
            try:
                seq, prev, before = self._tail()
                if left is not None and Left.of(before) != left:  # written to between the check and the read
                    self.require_left(left)  # names what changed
                    raise UserError(f"{self.rel} changed while bench appended to it: something else writes to the "
                                    f"ledger — run `bench ledger verify {self.line}` and restore it from git")
                row = jsonable({**fields, "schema": LEDGER_SCHEMA, "seq": seq, "kind": kind, "line": self.line,
                                "time": fields.get("time") or utc_now(), "prev_hash": prev})
                row["hash"] = row_hash(row)
                typed = load(row)  # refuses a field no row class declares, before anything is written
                data = (canonical(row) + "\n").encode("utf-8")
                size = os.fstat(fd).st_size
                try:
                    done = 0
                    while done < len(data):  # a short write is retried once more to learn why it stopped
                        n = os.write(fd, data[done:])
                        if n == 0:
                            raise OSError(0, f"short write, {done} of {len(data)} bytes")
                        done += n
                    os.fsync(fd)
                except OSError as exc:
                    self._cut_back(fd, size, seq, exc)
            finally:
                os.close(fd)
            if created:  # the new file's directory entry must survive a power loss too
                _fsync_dir(self.path.parent)
        return typed, Left.of(before + data)

    def _cut_back(self, fd: int, size: int, seq: int, exc: OSError) -> None:
        """After a failed append: restore the file to ``size`` bytes, then raise one UserError."""
        why = exc.strerror or str(exc)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as cut:
            raise UserError(f"appending row {seq} to {self.rel} failed ({why}) and so did cutting the partial "
                            f"row off ({cut.strerror}): free disk space, then run `bench ledger repair "
                            f"{self.line}`") from None
        raise UserError(f"appending row {seq} to {self.rel} failed ({why}): nothing of it was kept, the ledger "
                        f"still ends at row {seq - 1} — free disk space (or fix the file system) and run the same "
                        f"command again") from None

    def repair(self) -> Repaired:
        """Remove, at the end of the file, what bench did not write — and nothing else.

        That is an incomplete final line (a write that never finished), or the complete lines
        after the last row that chains (``ledger.verify.chained``) when none of them claims to
        be a row of this line (a kernel writing to its own ledger; `Writer` names such bytes
        when it finds them). Refused for a ledger that verifies, for damage reaching a row
        committed at HEAD, and for a row of the chain that was edited: a complete row is never
        removed, and a ledger that is wrong elsewhere is restored from git, not here.
        """
        with self._lock():
            res = verify(self.path)
            if res.ok:
                raise UserError(f"{self.rel} verifies ({res.n_rows} rows, chain intact): nothing to repair")
            data = self.path.read_bytes()
            if res.torn:
                cut = data.rfind(b"\n") + 1
                self._cut(cut)
                return Repaired(self.rel, len(data) - cut, res.n_rows)
            n, cut = chained(data, self.path)
            why = self._not_foreign(data, n, cut)
            if why is not None:
                raise UserError(f"{self.rel} fails verification ({res.reason}); `bench ledger repair` removes only "
                                f"an incomplete final line, or bytes after the chain that bench did not write — "
                                f"{why}: restore the file from git")
            self._cut(cut)
        lines = data[cut:].count(b"\n") + (not data.endswith(b"\n"))
        return Repaired(self.rel, len(data) - cut, n, foreign_lines=lines, offset=cut)

    def _not_foreign(self, data: bytes, n: int, cut: int) -> str | None:
        """Why the bytes after the first ``n`` rows (from offset ``cut``) are not removable
        foreign bytes (None: they are): there are none, the damage reaches the rows committed at
        HEAD, or a line among them claims to be a row of this line at its place (bench wrote it)."""
        if cut == len(data):
            return "the chain is whole, the damage is elsewhere"
        committed = gitguard.show_file(self.root, "HEAD", self.rel) or b""
        if not data[:cut].startswith(committed):
            held = committed.count(b"\n")
            return f"the damage starts at row {n}, inside the {held} rows committed at HEAD"
        for j, raw in enumerate(data[cut:].split(b"\n")):
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(row, dict) and row.get("seq") == n + j and row.get("line") == self.line:
                return f"line {n + j + 1} holds row {n + j} of this line, edited (bench wrote it)"
        return None

    def _cut(self, size: int) -> None:
        with open(self.path, "rb+") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())

    def _tail(self) -> tuple[int, str, bytes]:
        """Next seq, the hash to chain to, and the file's bytes; a torn (never acknowledged)
        final write is cut off."""
        if not self.path.exists():
            return 0, GENESIS_HASH, b""
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                # The last write was interrupted before its fsync returned, so no caller was
                # told it was written: dropping the partial bytes loses nothing reported.
                cut = data.rfind(b"\n") + 1
                fh.truncate(cut)
                os.fsync(fh.fileno())
                data = data[:cut]
        records = data.splitlines()
        if not records:
            return 0, GENESIS_HASH, data
        last = parse_row(records[-1], self.path, len(records) - 1)
        check_schema(last, self.path, len(records) - 1)
        if row_hash(last) != last.get("hash") or last.get("seq") != len(records) - 1:
            raise UserError(f"{self.path}: the last row fails its hash check; refusing to chain onto it — "
                            f"run `bench ledger verify {self.line}` and restore the file from git")
        return len(records), last["hash"], data


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dataframe(path: Path) -> Any:  # a pandas DataFrame (pandas is untyped here)
    """The ledger's rows as a flat pandas DataFrame (nested fields joined with '.'); the tidy
    view (one row per current outcome, typed columns) is ``harness.reporting.analysis.tidy.tidy``."""
    return frame(read_rows(Path(path)))


def frame(rows: list[Row]) -> Any:
    """Typed rows as ``dataframe`` flattens them."""
    import pandas as pd

    if not rows:
        return pd.DataFrame()
    return pd.json_normalize([r.dump() for r in rows], sep=".")


def committed_rows(led: Ledger) -> int:
    """How many of the line's rows are committed at HEAD (0 where the file is not)."""
    committed = gitguard.show_file(led.root, "HEAD", led.rel)
    return 0 if committed is None else committed.count(b"\n")


def _row_count(led: Ledger) -> int:
    return led.path.read_bytes().count(b"\n") if led.path.exists() else 0


def rows_text(first: int, last: int) -> str:
    return f"row {first}" if first == last else f"rows {first}-{last}"


def require_anchorable(led: Ledger) -> None:
    """Refuse before any work where the line's rows could not be committed: git locked or
    unwritable, the ledger ignored, or a test commit of it refused (a symlinked ledger, a
    failing hook or signer: ``provenance.git.require_ledger_commits``)."""
    gitguard.require_committable(led.root)
    if gitguard.is_ignored(led.root, led.rel):
        raise UserError(f"{led.rel} is ignored by git (.gitignore or .git/info/exclude), so bench cannot commit "
                        f"its rows: stop ignoring it, or pass --no-commit")
    gitguard.require_ledger_commits(led.root, led.rel, fallback="pass --no-commit")


def anchor(led: Ledger, why: str) -> str | None:
    """Commit the line's rows that HEAD does not hold yet (only this file; the user's index is
    left alone). Returns the new commit, or None when every row is already committed."""
    first, n = committed_rows(led), _row_count(led)
    if n <= first:
        return None
    return gitguard.commit_file(led.root, led.rel, f"bench: {led.rel} {rows_text(first, n - 1)} ({why})")


def require_anchored(led: Ledger, action: str) -> None:
    """Refuse while any row of the line is not committed: decide only on rows git holds."""
    first, n = committed_rows(led), _row_count(led)
    if n > first:
        raise UserError(f"{led.rel}: {rows_text(first, n - 1)} not committed; {action} decides on committed "
                        f"rows only — commit them: git add {led.rel} && git commit -m 'ledger: {led.line} rows' "
                        f"-- {led.rel}")


def missing_ledgers(root: Path) -> list[tuple[str, str]]:
    """Ledgers absent from the work tree that git says existed: (path, what happened)."""
    root = Path(root)
    missing = []
    at_head = [p for p in gitguard.files_at_head(root, LEDGER_DIR) if p.endswith(".jsonl")]
    for rel in at_head:
        if not (root / rel).exists():
            missing.append((rel, f"committed at HEAD but deleted from the work tree: restore it with "
                                 f"git checkout HEAD -- {rel}"))
    for rel, (sha, subject) in sorted(gitguard.deleted_files(root, LEDGER_DIR, ".jsonl").items()):
        if rel not in at_head and not (root / rel).exists():
            missing.append((rel, f"deleted in commit {sha[:12]} ({subject}): its rows are still in git — restore "
                                 f"them with git checkout {sha[:12]}^ -- {rel}"))
    return missing
