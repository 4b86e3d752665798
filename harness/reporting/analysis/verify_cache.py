"""The read commands' ledger verification, cached (issue 51 item 2).

`bench status`, `site`, `report` and the other read commands verify every ledger they read
(``ledger_verify.verify``: the chain, git, and a re-audit of every result row's figures from
its raw samples — the bootstrap CIs are most of a status's time). A ledger that verified once
verifies again as long as nothing it was checked against changed, so its result is kept:

    key = the ledger's bytes (SHA-256 of the whole file, and its size) and its head hash (the
          last row's ``hash``), the git state it was checked
          against (HEAD, the repository, a shallow clone's boundary), and the code that checked
          it (bench's version, Python's, and a SHA-256 of every harness source file).

Any change to any of them is a miss and the ledger is verified in full again. Only a ledger
that verified clean is stored: a broken one is re-audited (and reported) every time. The
cache lives under the user's cache directory (``$XDG_CACHE_HOME``, else ``~/.cache``:
``bench/verify/``, mode 0700), never in a repository; a cache file that is not ours, not a
regular file, unreadable, of another format or for another key is a miss (fail closed). `bench
ledger verify` and every writing command call ``verify`` directly and never read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
from harness.ledger.verify import VerifyResult, verify
from harness.vocab.outcomes import Remeasure

# The cache's folder under the user's cache directory, and its files' format (a change of
# what is stored bumps it: an older file is then a miss).
CACHE_SUBDIR = ("bench", "verify")
CACHE_FORMAT = 1
CACHE_SUFFIX = ".json"
# The environment variable that turns the cache off for a process (any non-empty value).
NO_CACHE_ENV = "BENCH_NO_VERIFY_CACHE"
# Entries kept: every ledger path read gets one (a test suite's scratch repositories too), so
# past this many the least recently written are removed when one is written.
MAX_ENTRIES = 2000
# Group and other permission bits: the cache decides what a read command trusts, so only its
# owner may read or write it.
SHARED_BITS = 0o077

_code_hash: str | None = None


def cache_dir() -> Path:
    """``bench/verify`` under ``$XDG_CACHE_HOME`` (when absolute, per the XDG spec), else ``~/.cache``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).joinpath(*CACHE_SUBDIR)


def code_version() -> str:
    """bench's version, Python's, and a SHA-256 over every harness source file (path and bytes):
    any edit to the code that verifies is a new version."""
    global _code_hash
    if _code_hash is None:
        pkg = Path(harness.__file__).resolve().parent
        h = hashlib.sha256(f"{harness.__version__}\0{sys.version}\0".encode())
        for f in sorted(pkg.rglob("*.py")):
            h.update(str(f.relative_to(pkg)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
        _code_hash = h.hexdigest()
    return _code_hash


def git_state(path: Path) -> list:
    """What ``verify`` checks a ledger against in git: the repository, HEAD, and a shallow
    clone's boundary ([] where the file is in no git work tree)."""
    return list(_git_state(str(Path(path).resolve().parent)))


@functools.lru_cache(maxsize=None)
def _git_state(folder: str) -> tuple:
    """``git_state`` of a folder, once per process (a read command's ledgers share one)."""
    res = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD", "--is-shallow-repository", "--git-path",
                          "shallow"], cwd=folder, capture_output=True, text=True, process_group=0)
    out = res.stdout.split("\n")
    if res.returncode != 0 or len(out) < 4:
        return ()
    top, head, shallow, where = out[:4]
    boundary = ""
    if shallow == "true":
        try:
            boundary = (Path(folder) / where).read_text()
        except OSError:
            boundary = "unreadable"
    return (top, head, shallow, boundary)


def _head_hash(data: bytes) -> str | None:
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        h = json.loads(last).get("hash")
    except (ValueError, AttributeError):
        return None
    return h if isinstance(h, str) else None


def ledger_key(path: Path, data: bytes, git: list) -> dict:
    """The cache key of ledger ``path`` with bytes ``data`` under git state ``git``."""
    return {"path": str(Path(path).resolve()), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "head": _head_hash(data), "git": git, "code": code_version()}


def _entry(path: Path) -> Path:
    return cache_dir() / (hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:32] + CACHE_SUFFIX)


def _private_dir(d: Path) -> bool:
    """Whether ``d`` is a directory of this user's that no one else may enter (created so)."""
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & SHARED_BITS


def _read(entry: Path, key: dict):
    """The stored VerifyResult for ``key``, or None (missing, foreign, corrupt, another key)."""

    try:
        st = os.lstat(entry)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & SHARED_BITS:
            return None
        doc = json.loads(entry.read_bytes())
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("key") != key:
            return None
        r = doc["result"]
        unc = r["uncommitted"]
        res = VerifyResult(path=str(r["path"]), ok=True, n_rows=int(r["n_rows"]), n_results=int(r["n_results"]),
                           unchecked=r["unchecked"] if isinstance(r["unchecked"], str) else None,
                           remeasured=tuple(Remeasure.from_row(m) for m in r["remeasured"]),
                           uncommitted=(int(unc[0]), int(unc[1])) if unc is not None else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError):
        return None
    return res


def _write(entry: Path, key: dict, res) -> None:
    """Store a clean result atomically (a temporary file renamed into place); best effort."""
    if not _private_dir(entry.parent):
        return
    doc = {"format": CACHE_FORMAT, "key": key,
           "result": {"path": res.path, "n_rows": res.n_rows, "n_results": res.n_results, "unchecked": res.unchecked,
                      "remeasured": [m.as_row() for m in res.remeasured],
                      "uncommitted": list(res.uncommitted) if res.uncommitted is not None else None}}
    _dump(entry, doc)


def prune(folder: Path, keep: int = MAX_ENTRIES) -> int:
    """Remove all but the ``keep`` most recently written entries of ``folder``; how many went."""
    try:
        found = sorted(folder.glob("*" + CACHE_SUFFIX), key=lambda f: f.stat().st_mtime_ns, reverse=True)
    except OSError:
        return 0
    gone = 0
    for f in found[keep:]:
        try:
            f.unlink()
            gone += 1
        except OSError:
            pass
    return gone


def _dump(entry: Path, doc: dict) -> None:
    if not entry.exists():  # a new entry: the folder is bounded
        prune(entry.parent, MAX_ENTRIES - 1)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=CACHE_SUFFIX)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, entry)
    except (OSError, TypeError, ValueError):
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _current(path: Path) -> tuple[Path, dict] | None:
    """(cache entry, key) of ledger ``path`` as it is now; None where the cache is off or unreadable."""
    path = Path(path)
    if os.environ.get(NO_CACHE_ENV) or not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return _entry(path), ledger_key(path, data, git_state(path))


def read_extra(path: Path, name: str):
    """What a read command stored beside ``path``'s clean verification (``write_extra``) under
    ``name``, for the ledger as it is now; None: nothing stored, or anything changed."""
    at = _current(path)
    if at is None or _read(at[0], at[1]) is None:
        return None
    try:
        extra = json.loads(at[0].read_bytes()).get("extra") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return extra.get(name) if isinstance(extra, dict) else None


def write_extra(path: Path, name: str, payload) -> None:
    """Store ``payload`` (JSON) beside ``path``'s clean verification, where one is stored for the
    ledger as it is now (a figure computed from the ledger's rows alone, by this code)."""
    at = _current(path)
    if at is None:
        return
    entry, key = at
    res = _read(entry, key)
    if res is None:
        return
    try:
        doc = json.loads(entry.read_bytes())
        doc.setdefault("extra", {})[name] = payload
        json.dumps(doc)
    except (OSError, ValueError, TypeError, AttributeError):
        return
    _dump(entry, doc)


def cached_verify(path: Path):
    """``ledger_verify.verify(path)``, from the cache where nothing it checked changed (module
    docstring); a clean full verification is stored for the next read command."""

    path = Path(path)
    at = _current(path)
    if at is None:
        return verify(path)
    entry, key = at
    data_sha = key["sha256"]
    hit = _read(entry, key)
    if hit is not None:
        return hit
    res = verify(path)
    try:
        same = hashlib.sha256(path.read_bytes()).hexdigest() == data_sha  # not written to while verified
    except OSError:
        same = False
    if same and res.ok and not res.torn and not res.unsound:
        _write(entry, key, res)
    return res


__all__ = ["CACHE_FORMAT", "NO_CACHE_ENV", "cache_dir", "cached_verify", "code_version", "git_state", "ledger_key",
           "prune", "read_extra", "write_extra"]
