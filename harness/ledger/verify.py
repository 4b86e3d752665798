"""``bench ledger verify``: whether a ledger file is what bench wrote and git holds.

The chain alone cannot tell a file re-hashed from scratch or cut after a valid row: git is
the anchor (ledger.anchor commits a line's new rows; ``verify`` checks every committed
version is still a prefix of the file). Neither can tell a row rewritten and re-hashed
before its commit: ``verify`` also recomputes each result row's figures from its raw
samples (ledger/audit.py), checks that ``supersedes`` rows replace only what may be
measured again, and that ceilings references name real ceilings rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from harness.errors import UserError, plural
from harness.provenance import git as gitguard
from harness.provenance.git import LEDGER_DIR
from harness.ledger.format import (CEILINGS_LEDGER, CEILINGS_REF, GENESIS_HASH, LEDGER_SCHEMA, check_schema,
                                              read_rows, row_hash)
from harness.ledger.rows import UnknownField, load
from harness.vocab.outcomes import REGISTERED, VERDICT
from harness.ledger.audit import rates_unaudited, recompute
from harness.ledger.audit_ceilings import ceilings_disagreements, ceilings_figures
from harness.vocab.outcomes import RESULT, remeasures
from harness.ledger.verify_links import replicate_fault, supersedes_fault
from harness.ledger.payloads import CeilingsRef
from harness.ledger.line_payloads import RegistrationSummary, Reopens

@dataclass(frozen=True)
class VerifyResult:
    path: str
    ok: bool
    n_rows: int
    bad_row: int | None = None
    reason: str | None = None
    torn: bool = False  # the only damage is an incomplete final line (`bench ledger repair` removes it)
    # Result rows whose stored figures their own raw samples do not give back (ledger/audit.py):
    # (row index, seq, its disagreements), every such row.
    unsound: tuple = ()
    n_results: int = 0  # result rows whose figures were recomputed (when ok: all add up)
    # What could not be checked because this clone is shallow (one line), None when everything was.
    unchecked: str | None = None
    # Pairs measured again where they were measured (outcomes.Remeasure), when ok.
    remeasured: tuple = ()
    # Why some result rows' rates were not recomputed (their workload is not installed here),
    # one line per workload with the rows' count; () when every row's were.
    unaudited: tuple[str, ...] = ()
    # (first, last) rows no commit holds, when ok and in git; None: every row is committed, or
    # the file is in no git repository. The chain cannot show who wrote them: a commit is the anchor.
    uncommitted: tuple[int, int] | None = None

    def lines(self) -> list[str]:
        """One line per bad row: the chain's first, or every row that does not add up."""
        if self.unsound:
            return [_unsound_text(n, seq, found) for n, seq, found in self.unsound]
        return [] if self.ok else [str(self.reason)]


def _unsound_text(n: int, seq, found) -> str:
    return f"line {n + 1} (seq {seq}) does not add up: " + "; ".join(d.describe() for d in found)


def _git_location(path: Path) -> tuple[Path, str] | None:
    """(repository root, path relative to it) of a ledger file, or None outside git."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True,
                             text=True, encoding=sys.getfilesystemencoding(), errors=sys.getfilesystemencodeerrors())
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


def _not_this_line(row: dict, n: int, path: Path) -> str | None:
    """Why row ``n`` is not a row of the line ``path`` holds (None: it is): a ledger's line is
    its file's stem, every row names the line it was appended to (``Ledger.append``), and a
    `registered` row holds that line's registration (a line id is its registration's stem:
    ``registration.load``). A copy outside a ``ledger/`` directory (an export, a fixture) is
    no line's ledger."""
    line = path.stem
    if path.parent.name != LEDGER_DIR:
        return None
    if row.get("line") != line:
        return f"row {n} names line {row.get('line')!r}, not {line!r} (the file's name)"
    reg = row.get("registration") if row.get("kind") == REGISTERED else None
    if not isinstance(reg, dict):
        return None
    summary = RegistrationSummary.from_row(reg)
    rel = summary.path
    named = {summary.line} if summary.has("line") else set()
    if isinstance(rel, str) and rel:
        named.add(PureWindowsPath(rel).stem if "\\" in rel else PurePosixPath(rel).stem)
    other = sorted(named - {line})
    if other:
        return f"row {n} registers line {other[0]!r} ({rel}), not {line!r} (the file's name)"
    return None


def _check_chain(records: list[bytes], path: Path) -> tuple[VerifyResult | None, str]:
    """The first broken row of complete ``records`` (or None), and the last row's hash.

    A row of the chain that names another line (``_not_this_line``) is refused, not reported:
    the file is a copy or a forgery, not this line's ledger, and no command may read it as one."""
    prev = GENESIS_HASH
    for n, raw in enumerate(records):
        try:
            row = json.loads(raw)
        except json.JSONDecodeError:
            return VerifyResult(str(path), False, n, n, f"row {n} is not valid JSON: edited or truncated"), prev
        if not isinstance(row, dict):
            return VerifyResult(str(path), False, n, n, f"row {n} is not a JSON object: edited"), prev
        if isinstance(row.get("schema"), int) and row["schema"] > LEDGER_SCHEMA:
            check_schema(row, path, n)
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
        other = _not_this_line(row, n, path)
        if other is not None:
            shown = f"{LEDGER_DIR}/{path.name}"
            raise UserError(f"{shown}: {other}: a ledger file holds the rows of the one line it is named after — "
                            f"this one is a copy or a forgery; delete it (git rm -- {shown} where it is "
                            f"committed), or restore the line's own ledger from git")
        try:
            load(row)
        except UnknownField as exc:
            return VerifyResult(str(path), False, n, n, f"row {n}: {exc} (written by a newer bench, or forged): "
                                                        f"upgrade bench, or restore the file from git"), prev
        prev = row["hash"]
    return None, prev


def chained(data: bytes, path: Path) -> tuple[int, int]:
    """How many complete rows at the start of ``data`` (a ledger file's bytes) chain, and the
    offset just past them: where the first row bench could not have appended begins."""
    records = data[:data.rfind(b"\n") + 1].split(b"\n")[:-1]
    bad, _ = _check_chain(records, path)
    n = len(records) if bad is None else bad.bad_row
    return n, sum(len(r) + 1 for r in records[:n])


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
    declared = Reopens.from_row(declared)
    at = declared.commit
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
    elif len(rows) != declared.rows or (rows and rows[-1].get("hash") != declared.last_hash):
        bad = f"declares {declared.rows} rows ending in {str(declared.last_hash)[:12]}, which is not " \
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
    re-hashed file leaves a valid chain, so git is the anchor: rows past HEAD's, which it
    cannot vouch for, are named in ``uncommitted``); then every result row whose
    stored statistics or metrics its own raw samples do not give back (ledger/audit.py:
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
    results, unaudited = 0, ()
    if bad is None:
        bad = _check_figures(records, path)
        if isinstance(bad, tuple):
            bad, (results, unaudited) = None, bad
    if bad is None:
        bad = _check_ceilings_refs(records, path)
    remeasured: tuple = ()
    if bad is None:
        bad = _check_links(records, path)
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
    where = _git_location(path)
    held = count if where is None else (gitguard.show_file(where[0], "HEAD", where[1]) or b"").count(b"\n")
    return VerifyResult(str(path), True, count, n_results=results, unchecked=unchecked, remeasured=remeasured,
                        uncommitted=(held, count - 1) if count > held else None, unaudited=unaudited)


def _check_figures(records: list[bytes], path: Path) -> VerifyResult | tuple[int, tuple[str, ...]]:
    """Every result row's derived figures against its raw samples (``audit.recompute``): a row
    rewritten and re-hashed before its commit keeps a valid chain but not a sound row.
    When all add up: the number of result rows, and why some rows' rates were not re-audited
    (``audit.rates_unaudited``: one line per reason, with its count of rows)."""
    unsound, results, unaudited = [], 0, {}
    for n, raw in enumerate(records):
        row = load(json.loads(raw))
        results += row.kind == RESULT
        found = recompute(row)
        if found:
            unsound.append((n, n, tuple(found)))  # the chain held: seq == n
        why = rates_unaudited(row)
        if why is not None:
            unaudited[why] = unaudited.get(why, 0) + 1
    if not unsound:
        return results, tuple(f"{why} ({plural(k, 'result row')})" for why, k in unaudited.items())
    n = unsound[0][0]
    more = f" (and {plural(len(unsound) - 1, 'more row')}: bench ledger verify names each)" if len(unsound) > 1 else ""
    return VerifyResult(str(path), False, len(records), n, _unsound_text(*unsound[0]) + more, unsound=tuple(unsound))


def _check_links(records: list[bytes], path: Path) -> VerifyResult | tuple:
    """Rows that name other rows (ledger/verify_links.py): replicates, then supersedes rows.
    When all hold: the pairs re-measured where they were measured (``remeasures``)."""
    rows = [load(json.loads(raw)) for raw in records]
    fault = replicate_fault(rows) or supersedes_fault(rows)
    if fault is None:
        return remeasures(rows)
    n, why = fault
    return VerifyResult(str(path), False, len(records), n, f"line {n + 1} (seq {n}) {why}")


def _check_ceilings_refs(records: list[bytes], path: Path) -> VerifyResult | None:
    """Each row's ``ceilings_ref`` (rows written before it carry none and are not checked):
    the ceilings row it names exists in ``_device_ceilings.jsonl`` with that hash, that file
    verifies, the row is committed when the naming row is, and the figures the row used
    (its floor's ceilings, its ``*_frac`` metrics) are that row's. A null ref: no such figures.
    A copy outside a ``ledger/`` directory with no ceilings file beside it (a commit's version
    read back into a temporary file, an export) is checked without the link, as without git."""
    if path.stem == CEILINGS_LEDGER:
        return None
    named = [(n, row) for n, row in ((n, load(json.loads(raw))) for n, raw in enumerate(records))
             if row.has(CEILINGS_REF)]
    if not named:
        return None
    cpath = path.parent / f"{CEILINGS_LEDGER}.jsonl"
    linked = cpath.exists() or path.parent.name == LEDGER_DIR
    shown = f"{LEDGER_DIR}/{cpath.name}"
    ceilings: list | None = None
    in_git, committed_ceilings, committed_here = False, 0, 0

    def bad(n: int, why: str) -> VerifyResult:
        return VerifyResult(str(path), False, len(records), n, f"line {n + 1} (seq {n}) {why}")

    for n, row in named:
        ref = row.ceilings_ref
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
        named_ref = CeilingsRef.from_row(ref)
        seq, want = (named_ref.seq, named_ref.hash) if named_ref is not None else (None, None)
        what = f"names ceilings row {seq} ({str(want)[:12]}) of {shown}"
        found = ceilings[seq] if isinstance(seq, int) and 0 <= seq < len(ceilings) else None
        if found is None:
            return bad(n, f"{what}, which does not exist")
        if found.hash != want:
            return bad(n, f"{what}, whose hash there is {str(found.hash)[:12]}: the ceilings row it used "
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
