"""The ledger: one append-only, hash-chained JSON Lines file per registered line.

Each row's ``hash`` is the SHA-256 of its canonical JSON (sorted keys, no spaces, finite
numbers only) including ``prev_hash``, so editing, deleting, reordering or truncating any
row breaks the chain at that row. Rows are written under a file lock, flushed and
fsynced before ``append`` returns: a row reported as written survives a crash or kill;
an append that fails leaves no partial row. The chain alone cannot tell a file re-hashed
from scratch or cut after a valid row: git is the anchor (``anchor`` commits a line's new
rows; ``verify`` checks every committed version is still a prefix of the file). Neither
can tell a row rewritten and re-hashed before its commit: ``verify`` also recomputes each
result row's figures from its raw samples (governance/audit.py).

Python API: ``read_rows(path)``, ``verify(path)``, ``dataframe(path, tidy=False)`` (pandas).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.errors import UserError, plural
from harness.governance import gitguard
from harness.governance.gitguard import LEDGER_DIR
from harness.governance.locks import exclusive
from harness.governance.outcomes import ROW_KINDS, SUPERSEDES, VERDICT
from harness.jsonsafe import jsonable

LEDGER_SCHEMA = 1
# The device ceilings' ledger (sweep/ceilings.py); line ids cannot start with '_'. Outcome
# rows name the ceilings row they used in ``ceilings_ref`` ({"seq", "hash"}; null: none).
CEILINGS_LEDGER = "_device_ceilings"
CEILINGS_REF = "ceilings_ref"
GENESIS_HASH = "0" * 64
# Row kinds (governance/outcomes.py); a row of another kind is refused at append time.
KINDS = ROW_KINDS
LOCK_TIMEOUT_S = 60.0
# Free space a command needs on the ledger's file system before it starts: a result row
# is tens of KB, and a sweep commits a new version of the file after every config.
MIN_FREE_BYTES = 64 * 2**20


def canonical(obj: Any) -> str:
    """The exact text that is hashed: sorted keys, compact separators, no NaN/Infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def row_hash(row: dict) -> str:
    body = {k: v for k, v in row.items() if k != "hash"}
    return hashlib.sha256(canonical(body).encode("utf-8")).hexdigest()


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def ledger_path(root: Path, line: str) -> Path:
    return Path(root) / LEDGER_DIR / f"{line}.jsonl"


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
    torn: bool = False  # the only damage is an incomplete final line (`bench ledger repair` removes it)
    # Result rows whose stored figures their own raw samples do not give back (governance/audit.py):
    # (row index, seq, its disagreements), every such row.
    unsound: tuple = ()
    n_results: int = 0  # result rows whose figures were recomputed (when ok: all add up)
    # What could not be checked because this clone is shallow (one line), None when everything was.
    unchecked: str | None = None
    # Pairs measured again where they were measured (outcomes.Remeasure), when ok.
    remeasured: tuple = ()

    def lines(self) -> list[str]:
        """One line per bad row: the chain's first, or every row that does not add up."""
        if self.unsound:
            return [_unsound_text(n, seq, found) for n, seq, found in self.unsound]
        return [] if self.ok else [str(self.reason)]


def recorded(root: Path) -> Iterator[tuple[str, list[dict]]]:
    """Every ledger of ``root``/ledger as (file name, rows), read leniently: a line that is not
    JSON is left out. For figures gathered across lines before a new one exists (register's
    timing resolution, the reductio's baseline times), never for verification."""
    for path in sorted((Path(root) / LEDGER_DIR).glob("*.jsonl")):
        rows = []
        for text in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        yield path.name, rows


def _unsound_text(n: int, seq, found) -> str:
    return f"line {n + 1} (seq {seq}) does not add up: " + "; ".join(d.describe() for d in found)


def _git_location(path: Path) -> tuple[Path, str] | None:
    """(repository root, path relative to it) of a ledger file, or None outside git."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True,
                             text=True)
        if top.returncode != 0:
            return None
        root = Path(top.stdout.strip())
        return root, path.resolve().relative_to(root.resolve()).as_posix()
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def _committed_bytes(path: Path) -> bytes | None:
    """The ledger file as committed at HEAD, or None outside git / when not committed."""
    where = _git_location(path)
    return None if where is None else gitguard.show_file(where[0], "HEAD", where[1])


def _first_difference(a: bytes, b: bytes) -> int:
    """Index of the first row where ``a`` and ``b`` differ."""
    for i, (x, y) in enumerate(zip(a.split(b"\n"), b.split(b"\n"))):
        if x != y:
            return i
    return min(a.count(b"\n"), b.count(b"\n"))


def _check_chain(records: list[bytes], path: Path) -> tuple[VerifyResult | None, str]:
    """The first broken row of complete ``records`` (or None), and the last row's hash."""
    prev = GENESIS_HASH
    for n, raw in enumerate(records):
        try:
            row = json.loads(raw)
        except json.JSONDecodeError:
            return VerifyResult(str(path), False, n, n, f"row {n} is not valid JSON: edited or truncated"), prev
        if not isinstance(row, dict):
            return VerifyResult(str(path), False, n, n, f"row {n} is not a JSON object: edited"), prev
        if isinstance(row.get("schema"), int) and row["schema"] > LEDGER_SCHEMA:
            _check_schema(row, path, n)
        if row.get("seq") != n:
            return VerifyResult(str(path), False, n, n,
                                f"row {n} has seq {row.get('seq')}: a row before it was deleted or rows were "
                                f"reordered"), prev
        if row.get("prev_hash") != prev:
            return VerifyResult(str(path), False, n, n,
                                f"row {n} does not chain to row {n - 1}: a row was deleted, inserted or "
                                f"reordered"), prev
        if row_hash(row) != row.get("hash"):
            return VerifyResult(str(path), False, n, n,
                                f"row {n} was edited: its content no longer matches its hash"), prev
        prev = row["hash"]
    return None, prev


def _check_git(body: bytes, path: Path) -> tuple[VerifyResult | None, str | None]:
    """Rows committed at HEAD, and in every earlier committed version, must all still be here.

    Also returns what a shallow clone kept from being checked (the history before its
    boundary), in one line, or None."""
    where = _git_location(path)
    if where is None:
        return None, None
    root, rel = where
    count = body.count(b"\n")
    committed = _committed_bytes(path)
    if committed is not None and not body.startswith(committed):
        committed_rows = committed.count(b"\n")
        i = _first_difference(committed, body)
        if i < count:
            return VerifyResult(str(path), False, count, i, f"row {i} differs from the row committed at HEAD"), None
        return VerifyResult(str(path), False, count, count,
                            f"rows {count}..{committed_rows - 1} committed at HEAD are missing (truncated)"), None
    if not rel.startswith(LEDGER_DIR + "/"):
        return None, None  # a copy elsewhere (a test fixture, an export) is no line's ledger: HEAD is its anchor
    history = gitguard.file_history(root, rel)
    versions = [v or b"" for v in gitguard.blobs(root, [f"{sha}:{rel}" for sha, _ in history])]  # b"": deleted
    boundary = gitguard.shallow_boundary(root)
    start = _current_incarnation(body, history, versions, path, shallow=bool(boundary))
    if isinstance(start, VerifyResult):
        return start, None
    unchecked = _unchecked(body, history, boundary, start)
    start = max(start, 0)
    taken = None  # (row, commit, subject, content) of the first committed version the file no longer extends
    for (sha, subject), version in list(zip(history, versions))[start:]:
        if taken is None:
            if not body.startswith(version):
                taken = (_first_difference(version, body), sha, subject, version)
        elif not version.startswith(taken[3]):
            i, was, was_subject, _ = taken
            return VerifyResult(str(path), False, count, i,
                                f"row {i} as committed in {was[:12]} ({was_subject}) was rewritten or taken back "
                                f"in commit {sha[:12]} ({subject}): committed rows never change — see "
                                f"git show {was[:12]}:{rel}"), None
    if taken is not None:
        i, was, was_subject, _ = taken
        return VerifyResult(str(path), False, count, i,
                            f"row {i} as committed in {was[:12]} ({was_subject}) is changed or missing in the "
                            f"work tree: restore it with git checkout {was[:12]} -- {rel}"), None
    return None, unchecked


def _unchecked(body: bytes, history: list, boundary: tuple[str, ...], start: int) -> str | None:
    """What a shallow clone keeps from being checked, in one line (None: nothing). ``start``
    is -1 where row 0's re-open declaration names a commit this clone lacks."""
    if not boundary:
        return None
    what = []
    shas = [sha for sha, _ in history]
    # The file (this incarnation of it) already existed where history stops: older versions are not here.
    at = next((b for b in boundary if b in shas and shas.index(b) >= max(start, 0)), None)
    if at is not None:
        what.append("the versions committed before it")
    if start < 0:
        declared = json.loads(body.split(b"\n", 1)[0])["reopens"].get("commit")
        what.append(f"row 0's re-open of {str(declared)[:12]} (that commit is not here)")
        at = at or boundary[0]
    if not what:
        return None
    return f"history before {at[:12]} is not in this clone (shallow): could not check {' nor '.join(what)}"


def _current_incarnation(body: bytes, history: list, versions: list[bytes], path: Path, *,
                         shallow: bool = False) -> int | VerifyResult:
    """Where this file's own history starts: 0, or — for a line re-opened with
    ``bench register --reopen`` — just past the deletion of the ledger its row 0 declares it
    replaces. The declaration is checked, not trusted: the named commit must hold the last
    version of the old ledger (the next change deleted it), with the declared row count and
    last hash, and no verdict (a decided line is never re-opened). In a ``shallow`` clone a
    declared commit that is not in the history here cannot be checked: -1 (every version
    here is then of this ledger — the old one's deletion came after that commit)."""
    first = body.split(b"\n", 1)[0]
    try:
        declared = json.loads(first).get("reopens") if first else None
    except (json.JSONDecodeError, AttributeError):
        return 0
    if not declared:
        return 0
    shas = [sha for sha, _ in history]
    at = declared.get("commit")
    i = shas.index(at) if at in shas else -1
    if i < 0 and shallow:
        return -1
    old = versions[i].split(b"\n")[:-1] if i >= 0 else []
    rows = []
    for raw in old:
        try:
            rows.append(json.loads(raw))
        except json.JSONDecodeError:
            rows = []
            break
    bad = None
    if i < 0 or not old:
        bad = f"names commit {str(at)[:12]}, which holds no version of this ledger"
    elif i + 1 >= len(versions) or versions[i + 1] != b"":
        bad = f"names commit {at[:12]}, but the old ledger was not deleted right after it (a later version exists)"
    elif len(rows) != declared.get("rows") or (rows and rows[-1].get("hash") != declared.get("last_hash")):
        bad = f"declares {declared.get('rows')} rows ending in {str(declared.get('last_hash'))[:12]}, which is not " \
              f"the ledger committed at {at[:12]}"
    elif any(r.get("kind") == VERDICT for r in rows):
        bad = f"re-opens the ledger committed at {at[:12]}, which holds a verdict"
    if bad:
        return VerifyResult(str(path), False, body.count(b"\n"), 0, f"row 0 re-opens this line but {bad}")
    return i + 2


def verify(path: Path) -> VerifyResult:
    """Re-check the whole chain and name the first bad row.

    Catches an edited byte (hash mismatch), a deleted or reordered row (seq / prev_hash
    break), an incomplete final line, and — where the file is in git — rows missing or
    changed relative to HEAD or to any earlier committed version (a truncated tail or a
    re-hashed file leaves a valid chain, so git is the anchor); then every result row whose
    stored statistics or metrics its own raw samples do not give back (governance/audit.py:
    a row rewritten and re-hashed before its commit), all of them in ``unsound``. In a shallow
    clone what needs the missing history is named in ``unchecked``; everything else is checked.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"no ledger at {path}: register the line first (bench register registrations/<line>.toml)")
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    body, tail = data[:cut], data[cut:]
    records = body.split(b"\n")[:-1]
    bad, prev = _check_chain(records, path)
    unchecked = None
    if bad is None:
        bad, unchecked = _check_git(body, path)
    results = 0
    if bad is None:
        bad = _check_figures(records, path)
        if isinstance(bad, int):
            bad, results = None, bad
    if bad is None:
        bad = _check_ceilings_refs(records, path)
    remeasured: tuple = ()
    if bad is None:
        bad = _check_supersedes(records, path)
        if isinstance(bad, tuple):
            bad, remeasured = None, bad
    if bad is not None:
        return bad
    count = len(records)
    if tail:
        if _completes_chain(tail, prev, count):
            return VerifyResult(str(path), False, count, count,
                                f"row {count} is complete but lacks its final newline (bench writes none without "
                                f"it): add the newline (echo >> ledger/{path.name})")
        return VerifyResult(str(path), False, count, count,
                            f"row {count} is an incomplete final line ({len(tail)} bytes of a write that never "
                            f"finished): run `bench ledger repair {path.stem}` to remove it", torn=True)
    return VerifyResult(str(path), True, count, n_results=results, unchecked=unchecked, remeasured=remeasured)


def _check_figures(records: list[bytes], path: Path) -> VerifyResult | int:
    """Every result row's derived figures against its raw samples (``audit.recompute``): a row
    rewritten and re-hashed before its commit keeps a valid chain but not a sound row.
    The number of result rows when all add up."""
    from harness.governance.audit import recompute
    from harness.governance.outcomes import RESULT

    unsound, results = [], 0
    for n, raw in enumerate(records):
        row = json.loads(raw)
        results += row.get("kind") == RESULT
        found = recompute(row)
        if found:
            unsound.append((n, n, tuple(found)))  # the chain held: seq == n
    if not unsound:
        return results
    n = unsound[0][0]
    more = f" (and {plural(len(unsound) - 1, 'more row')}: bench ledger verify names each)" if len(unsound) > 1 else ""
    return VerifyResult(str(path), False, len(records), n, _unsound_text(*unsound[0]) + more, unsound=tuple(unsound))


def _check_supersedes(records: list[bytes], path: Path) -> VerifyResult | tuple:
    """Every ``supersedes`` row names earlier outcome rows of its own config that nothing
    superseded yet; one measured at the commit and device the superseding row was written at
    must be one a sweep measures again there (``outcomes.remeasurable``: rig-noisy, skipped,
    throttled, crashed, a baseline's row), unless a later row of its pair had already replaced
    it — a decided outcome is never re-rolled at the same commit. When all hold: the pairs
    re-measured where they were measured (``remeasures``)."""
    from harness.governance.outcomes import OUTCOME_KINDS, measured_on, remeasurable, remeasures, state_of

    def pair(r: dict) -> tuple:  # rows of any shape verify: a row lacking the fields is no pair's
        return r.get("config_key"), r.get("candidate")

    rows = [json.loads(raw) for raw in records]
    reg = (rows[0].get("registration") or {}) if rows else {}
    include_noisy = bool(reg.get("include_noisy")) if isinstance(reg, dict) else False
    taken: dict[int, int] = {}

    def bad(n: int, why: str) -> VerifyResult:
        return VerifyResult(str(path), False, len(records), n, f"line {n + 1} (seq {n}) {why}")

    for n, row in enumerate(rows):
        if row.get("kind") != SUPERSEDES:
            continue
        named = row.get("supersedes")
        if not isinstance(named, list) or not named or not all(isinstance(s, int) and not isinstance(s, bool)
                                                               for s in named):
            return bad(n, f"is a supersedes row naming no rows ({named!r}): it was not written by a sweep")
        for s in named:
            old = rows[s] if 0 <= s < n else None
            if old is None or old.get("kind") not in OUTCOME_KINDS:
                what = "a later row" if s >= n else f"a {old.get('kind')} row" if old else "no row"
                return bad(n, f"supersedes row {s}, which is {what}: a sweep supersedes only earlier outcome rows")
            if old.get("config_key") != row.get("config_key"):
                return bad(n, f"supersedes row {s} of config {old.get('config_key')}, not its own config "
                              f"{row.get('config_key')}: a re-run config supersedes only its own rows")
            if s in taken:
                return bad(n, f"supersedes row {s}, already superseded at row {taken[s]}")
            shadowed = any(r.get("kind") in OUTCOME_KINDS and pair(r) == pair(old) for r in rows[s + 1:n])
            if (measured_on(old) == measured_on(row) and not shadowed
                    and not remeasurable(old, include_noisy=include_noisy)):
                return bad(n, f"supersedes row {s} ({old.get('candidate')} @ {old.get('config_key')}: "
                              f"{state_of(old)}) at the commit and device it was measured at: a sweep measures "
                              f"again only rig-noisy, skipped, throttled or crashed pairs there — a decided "
                              f"outcome is never re-rolled (restore the ledger from git)")
            taken[s] = n
    return remeasures(rows)


def _check_ceilings_refs(records: list[bytes], path: Path) -> VerifyResult | None:
    """Each row's ``ceilings_ref`` (rows written before it carry none and are not checked):
    the ceilings row it names exists in ``_device_ceilings.jsonl`` with that hash, that file
    verifies, the row is committed when the naming row is, and the figures the row used
    (its floor's ceilings, its ``*_frac`` metrics) are that row's. A null ref: no such figures.
    A copy outside a ``ledger/`` directory with no ceilings file beside it (a commit's version
    read back into a temporary file, an export) is checked without the link, as without git."""
    from harness.governance.audit import ceilings_disagreements, ceilings_figures

    if path.stem == CEILINGS_LEDGER:
        return None
    named = [(n, row) for n, row in ((n, json.loads(raw)) for n, raw in enumerate(records)) if CEILINGS_REF in row]
    if not named:
        return None
    cpath = path.parent / f"{CEILINGS_LEDGER}.jsonl"
    linked = cpath.exists() or path.parent.name == LEDGER_DIR
    shown = f"{LEDGER_DIR}/{cpath.name}"
    ceilings: list[dict] | None = None
    in_git, committed_ceilings, committed_here = False, 0, 0

    def bad(n: int, why: str) -> VerifyResult:
        return VerifyResult(str(path), False, len(records), n, f"line {n + 1} (seq {n}) {why}")

    for n, row in named:
        ref = row[CEILINGS_REF]
        if ref is None:
            held = ceilings_figures(row)
            if held:
                return bad(n, f"names no ceilings row ({CEILINGS_REF} null) but holds ceilings figures "
                              f"({', '.join(held)})")
            continue
        if not linked:
            continue
        if ceilings is None:  # read once, for the first row that names one
            if cpath.exists():
                res = verify(cpath)
                if not res.ok:
                    return bad(n, f"names a ceilings row of {shown}, which fails verification ({res.reason})")
            ceilings = read_rows(cpath)
            in_git = _git_location(cpath) is not None
            committed_ceilings = (_committed_bytes(cpath) or b"").count(b"\n")
            committed_here = (_committed_bytes(path) or b"").count(b"\n")
        seq, want = (ref.get("seq"), ref.get("hash")) if isinstance(ref, dict) else (None, None)
        what = f"names ceilings row {seq} ({str(want)[:12]}) of {shown}"
        found = ceilings[seq] if isinstance(seq, int) and 0 <= seq < len(ceilings) else None
        if found is None:
            return bad(n, f"{what}, which does not exist")
        if found.get("hash") != want:
            return bad(n, f"{what}, whose hash there is {str(found.get('hash'))[:12]}: the ceilings row it used "
                          f"was changed")
        if in_git and n < committed_here and seq >= committed_ceilings:
            return bad(n, f"{what}, which is not committed: commit it (git commit -m 'bench: ceilings' -- {shown})")
        differ = ceilings_disagreements(row, found)
        if differ:
            return bad(n, f"{what}, whose figures it does not hold: " + "; ".join(differ))
    return None


def _completes_chain(raw: bytes, prev: str, seq: int) -> bool:
    try:
        row = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return (isinstance(row, dict) and row.get("seq") == seq and row.get("prev_hash") == prev
            and row_hash(row) == row.get("hash"))


def verify_refusal(shown: str, res: VerifyResult, action: str) -> str:
    """What a command says of the ledger file ``shown`` when it fails verification: the fix
    it needs (an incomplete final line is repaired, anything else is restored from git)."""
    if res.torn:
        return f"{shown}: {res.reason} before {action}"
    if res.unsound:
        return (f"{shown} fails verification ({res.reason}): a result row was edited after it was measured — "
                f"restore the rows as measured (git log -p -- {shown}) or measure again in a new line before {action}")
    return f"{shown} fails verification ({res.reason}): restore it from git before {action}"


@dataclass(frozen=True)
class Repaired:
    path: str
    removed_bytes: int
    row: int  # the row the incomplete line would have been; rows 0..row-1 are kept


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

    def _lock(self):
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
        root included: an immutable file or a read-only mount refuses root too.
        """
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

    def append(self, kind: str, fields: dict) -> dict:
        """Append one row; returns it once it is flushed and fsynced to disk.

        A write or fsync that fails (disk full, I/O error, short write) is cut back to the
        previous end of the file, so no partial row is left, and raised as one UserError.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown ledger row kind {kind!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock():
            created = not self.path.exists()
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise UserError(f"cannot open {self.rel} to append a row ({exc.strerror}): make it writable "
                                f"and run the same command again") from None
            try:
                seq, prev = self._tail()
                row = jsonable({**fields, "schema": LEDGER_SCHEMA, "seq": seq, "kind": kind, "line": self.line,
                                "time": fields.get("time") or utc_now(), "prev_hash": prev})
                row["hash"] = row_hash(row)
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
        return row

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
        """Remove an incomplete final line — a write that never finished — and nothing else.

        Refuses a ledger that verifies and one with any other damage: a complete row is
        never removed, and a ledger that is wrong elsewhere is restored from git, not here.
        """
        with self._lock():
            res = verify(self.path)
            if res.ok:
                raise UserError(f"{self.rel} verifies ({res.n_rows} rows, chain intact): nothing to repair")
            if not res.torn:
                raise UserError(f"{self.rel} fails verification ({res.reason}); `bench ledger repair` removes "
                                f"only an incomplete final line — restore the file from git")
            with open(self.path, "rb+") as fh:
                data = fh.read()
                cut = data.rfind(b"\n") + 1
                fh.truncate(cut)
                fh.flush()
                os.fsync(fh.fileno())
        return Repaired(self.rel, len(data) - cut, res.n_rows)

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
        records = data.splitlines()
        if not records:
            return 0, GENESIS_HASH
        last = _parse_row(records[-1], self.path, len(records) - 1)
        _check_schema(last, self.path, len(records) - 1)
        if row_hash(last) != last.get("hash") or last.get("seq") != len(records) - 1:
            raise UserError(f"{self.path}: the last row fails its hash check; refusing to chain onto it — "
                            f"run `bench ledger verify {self.line}` and restore the file from git")
        return len(records), last["hash"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dataframe(path: Path):
    """The ledger's rows as a flat pandas DataFrame (nested fields joined with '.'); the tidy
    view (one row per current outcome, typed columns) is ``harness.reporting.tidy.tidy``."""
    import pandas as pd

    rows = read_rows(Path(path))
    if not rows:
        return pd.DataFrame()
    return pd.json_normalize(rows, sep=".")


def committed_rows(led: Ledger) -> int:
    """How many of the line's rows are committed at HEAD (0 where the file is not)."""
    committed = gitguard.show_file(led.root, "HEAD", led.rel)
    return 0 if committed is None else committed.count(b"\n")


def _row_count(led: Ledger) -> int:
    return led.path.read_bytes().count(b"\n") if led.path.exists() else 0


def _rows_text(first: int, last: int) -> str:
    return f"row {first}" if first == last else f"rows {first}-{last}"


def require_anchorable(led: Ledger) -> None:
    """Refuse before any work where the line's rows could not be committed."""
    gitguard.require_committable(led.root)
    if gitguard.is_ignored(led.root, led.rel):
        raise UserError(f"{led.rel} is ignored by git (.gitignore or .git/info/exclude), so bench cannot commit "
                        f"its rows: stop ignoring it, or pass --no-commit")


def anchor(led: Ledger, why: str) -> str | None:
    """Commit the line's rows that HEAD does not hold yet (only this file; the user's index is
    left alone). Returns the new commit, or None when every row is already committed."""
    first, n = committed_rows(led), _row_count(led)
    if n <= first:
        return None
    return gitguard.commit_file(led.root, led.rel, f"bench: {led.rel} {_rows_text(first, n - 1)} ({why})")


def require_anchored(led: Ledger, action: str) -> None:
    """Refuse while any row of the line is not committed: decide only on rows git holds."""
    first, n = committed_rows(led), _row_count(led)
    if n > first:
        raise UserError(f"{led.rel}: {_rows_text(first, n - 1)} not committed; {action} decides on committed "
                        f"rows only — commit them: git add {led.rel} && git commit -m 'ledger: {led.line} rows' "
                        f"-- {led.rel}")


def rows_at(root: Path, commit: str, rel: str) -> tuple[list[dict], VerifyResult] | None:
    """The rows of ledger ``rel`` as committed at ``commit`` and the verification of that
    version's chain on its own (read back into a temporary file, outside the repository, so
    only the chain and the rows' figures are checked); None where the commit lacks the file."""
    import tempfile

    data = gitguard.show_file(root, commit, rel)
    if data is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(rel).name
        copy.write_bytes(data)
        res = verify(copy)
        return (read_rows(copy) if res.ok else []), res


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
