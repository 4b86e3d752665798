"""The git guard: no number is produced from a tree that differs from a commit.

Every ledger row carries the full SHA of the code commit: the newest commit that changed
anything outside ``ledger/``. That stamp means something only if the working tree is
exactly that commit outside ``ledger/``; the ledger directory is the harness's output and
is the one exemption. Commits that only append ledger rows (bench anchors its rows in git)
move HEAD but not the code commit, so they never split a sweep across two stamps.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from harness.errors import UserError

LEDGER_DIR = "ledger"
# Who commits ledger rows where git has no identity configured (CI machines).
FALLBACK_NAME = "bench"
FALLBACK_EMAIL = "bench@localhost"
# How many offending paths a refusal lists before summarising the rest.
MAX_LISTED_PATHS = 20
# git's own lock files (index.lock, HEAD.lock, a branch's ref lock) are held by another git
# command for milliseconds to seconds: a second sweep committing in the same clone, an
# editor's background `git status`. bench waits for them rather than failing a sweep — first
# LOCK_RETRY_FIRST_S, doubling to at most LOCK_RETRY_MAX_S, LOCK_WAIT_S in all; a lock held
# longer than that is taken for one a killed git command left behind (only the user can tell).
LOCK_WAIT_S = 30.0
LOCK_RETRY_FIRST_S = 0.05
LOCK_RETRY_MAX_S = 2.0
# What git says when a lock file it must create is already there.
_LOCK_HELD = re.compile(r"Unable to create '([^']+\.lock)': File exists")
# The hooks that can stop `git commit`: pre-commit, prepare-commit-msg and commit-msg by their
# exit status, reference-transaction in its "prepared" state. The test commit runs these and
# no other: post-commit and the rest only notify (one may push), and must never see it.
BLOCKING_HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "reference-transaction")
# The test commit's scratch git directory, made inside the clone's own git directory (so
# `includeIf "gitdir:…"` in the user's config matches it as it matches the clone) and removed after.
PROBE_PREFIX = "bench-probe-"
# git's id of the empty blob, per object format: the test commit's base holds an empty ledger
# file where the work tree has none yet.
_EMPTY_BLOB = {"sha1": "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
               "sha256": "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"}
# Environment variables that would point git at the user's index, objects or git directory
# instead of the test commit's own.
_REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


def _git(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """git in a process group of its own (``process_group=0``): a Ctrl-C at the terminal,
    sent to the whole foreground group, cannot kill it half-way (a sweep's first Ctrl-C lets
    its configs in flight finish and commits each); this process alone decides what the
    Ctrl-C means, and an interrupt raised here ends git with it (``subprocess.run``). Its
    output is decoded as file names are (``os.fsdecode``): a repository path holding bytes
    that are not UTF-8 reads back as the path it is."""
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, process_group=0, env=env,
                          encoding=sys.getfilesystemencoding(), errors=sys.getfilesystemencodeerrors())


def _waits() -> Iterator[float]:
    """Pauses between tries while a git lock is held: doubling, LOCK_WAIT_S in all."""
    deadline = time.monotonic() + LOCK_WAIT_S
    pause = LOCK_RETRY_FIRST_S
    while (left := deadline - time.monotonic()) > 0:
        yield min(pause, left)
        pause = min(2 * pause, LOCK_RETRY_MAX_S)


def _held_lock(res: subprocess.CompletedProcess) -> str | None:
    """The lock file a failed git command found held by another git process, or None."""
    found = _LOCK_HELD.search(res.stderr or "") if res.returncode != 0 else None
    return found.group(1) if found else None


def _git_waiting(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``_git`` for commands that take git's locks (add, commit, update-ref): run again, with
    a bounded backoff, while git says another git process holds one. The last result is
    returned either way (``_held_lock`` tells a lock still held after LOCK_WAIT_S)."""
    res = _git(root, *args)
    for pause in _waits():
        if _held_lock(res) is None:
            break
        time.sleep(pause)
        res = _git(root, *args)
    return res


def _shown(root: Path, path: str) -> str:
    """``path`` relative to the repository where it lies inside it (a lock file, a git directory)."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path


def _stale(root: Path, lock: str) -> str:
    lock = _shown(root, lock)
    return (f"{lock} exists and stayed for {LOCK_WAIT_S:g} s: another git command is running, or one was "
            f"killed — if none is running, remove it (rm {lock})")


def repo_root(start: Path | None = None) -> Path:
    """The top of the git work tree containing ``start`` (default: cwd)."""
    start = Path(start or Path.cwd())
    try:
        res = _git(start, "rev-parse", "--show-toplevel")
    except FileNotFoundError as exc:
        raise UserError("git is not installed: bench needs git to stamp results with a commit") from exc
    if res.returncode != 0:
        raise UserError(f"{start} is not inside a git repository: run bench from a clone of your "
                        f"benchmark repository (git init && git commit first)")
    return Path(res.stdout.strip())


def shallow_boundary(root: Path) -> tuple[str, ...]:
    """The commits where a shallow clone's history stops (``git clone --depth``, CI
    checkouts): their parents are not in this clone. Empty for a full clone."""
    if _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() != "true":
        return ()
    where = Path(root) / _git(root, "rev-parse", "--git-path", "shallow").stdout.strip()
    try:
        return tuple(where.read_text().split())
    except OSError:
        return ()


def head_commit(root: Path) -> str:
    res = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if res.returncode != 0 or not res.stdout.strip():
        raise UserError(f"the repository at {root} has no commit yet: commit your registration and kernels first")
    return res.stdout.strip()


def _exempt(path: str) -> bool:
    return path == LEDGER_DIR or path.startswith(LEDGER_DIR + "/")


def dirty_paths(root: Path) -> list[str]:
    """Modified, staged, deleted, renamed or untracked-and-not-ignored paths outside ``ledger/``,
    and tracked files git was told to stop looking at (assume-unchanged, skip-worktree)."""
    res = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    if res.returncode != 0:
        raise UserError(f"git status failed in {root}: {res.stderr.strip()}")
    paths = []
    entries = res.stdout.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        moved = []
        if "R" in status or "C" in status:  # a rename/copy carries its source path as the next entry
            moved.append(entries[i])
            i += 1
        # A rename into ledger/ still removes a file from outside it: both ends must be exempt.
        if all(_exempt(p) for p in [path, *moved]):
            continue
        shown = f"{moved[0]} -> {path}" if moved else path
        paths.append(f"{status.strip() or '??'} {shown}")
    hidden = _git(root, "ls-files", "-v", "-z")
    for entry in hidden.stdout.split("\0"):
        if entry and (entry[0].islower() or entry[0] == "S") and not _exempt(entry[2:]):
            paths.append(f"{'assume-unchanged' if entry[0].islower() else 'skip-worktree'} {entry[2:]}")
    return paths


def code_commit(root: Path) -> str:
    """The newest commit that changed anything outside ``ledger/``: what rows are stamped with.

    Ledger-only commits are skipped, so a sweep that commits its rows after each config
    keeps one stamp. Falls back to HEAD where that commit's tree outside ``ledger/`` is not
    HEAD's (it always is with git's history simplification; checked, not assumed).

    The same code gets the same stamp in every clone: in a shallow clone git takes a commit
    where history stops for a root commit, so it "changed everything" — when that is the
    commit found, the real code commit may be it or any older one, and this refuses rather
    than stamp a commit a full clone would not.
    """
    head = head_commit(root)
    outside = [":(top)", f":(top,exclude){LEDGER_DIR}"]
    res = _git(root, "log", "-1", "--format=%H", head, "--", *outside)
    code = res.stdout.strip()
    if code and code in shallow_boundary(root) and _has_parent(root, code):
        raise UserError(f"this clone is shallow and its history stops at {code[:12]}, whose parent it lacks: bench "
                        f"stamps rows with the newest commit that changed anything outside {LEDGER_DIR}/ and cannot "
                        f"tell whether that is {code[:12]} or an older one — fetch more history (git fetch "
                        f"--unshallow, or git fetch --deepen N) and run the same command again")
    if res.returncode != 0 or not code or code == head:
        return head
    same = _git(root, "diff", "--quiet", code, head, "--", *outside)
    return code if same.returncode == 0 else head


def _has_parent(root: Path, commit: str) -> bool:
    """Whether ``commit`` itself names a parent: a shallow clone lists a true root commit at its
    boundary too, and only a commit whose parent was cut off hides older history."""
    res = _git(root, "cat-file", "commit", commit)
    header = res.stdout.split("\n\n", 1)[0]
    return res.returncode != 0 or any(x.startswith("parent ") for x in header.splitlines())


@dataclass(frozen=True)
class CleanTree:
    root: Path
    commit: str  # the code commit (``code_commit``): the stamp of every row written now


def require_clean(root: Path | None = None) -> CleanTree:
    """Refuse (UserError, exit 2) unless the tree equals HEAD outside ``ledger/``."""
    root = repo_root(root)
    head_commit(root)
    dirty = dirty_paths(root)
    if dirty:
        raise UserError("uncommitted changes outside ledger/ — commit or remove them first: " + listed(dirty))
    return CleanTree(root=root, commit=code_commit(root))


def listed(paths: list[str]) -> str:
    """Paths for a refusal: the first MAX_LISTED_PATHS, then how many more."""
    shown = paths[:MAX_LISTED_PATHS]
    return "; ".join(shown) + (f" (+{len(paths) - len(shown)} more)" if len(paths) > len(shown) else "")


def file_commit(root: Path, path: Path) -> str:
    """The last commit that touched ``path``; refuses a file git does not track."""
    rel = relative(root, path)
    res = _git(root, "log", "-1", "--format=%H", "--", rel)
    if res.returncode != 0 or not res.stdout.strip():
        raise UserError(f"{rel} is not committed: git add {rel} && git commit, then register it")
    return res.stdout.strip()


def relative(root: Path, path: Path) -> str:
    """``path`` relative to the repository root; a file outside the repository is refused."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        raise UserError(f"{path} is outside the repository at {root}: bench governs files of this "
                        f"repository only — move it under {root}") from None


def is_tracked(root: Path, path: Path) -> bool:
    return _git(root, "ls-files", "--error-unmatch", "--", relative(root, path)).returncode == 0


def is_ignored(root: Path, rel: str) -> bool:
    return _git(root, "check-ignore", "-q", "--", rel).returncode == 0


def require_committable(root: Path) -> None:
    """Refuse before any work where git's index, HEAD or branch stays locked (waiting up to
    LOCK_WAIT_S for another git command to finish), or where git cannot write at all."""
    ref = _git(root, "symbolic-ref", "-q", "HEAD").stdout.strip()
    names = ("index", "HEAD", *([ref] if ref else []))
    locks = [_git(root, "rev-parse", "--git-path", f"{n}.lock").stdout.strip() for n in names]
    held = [x for x in locks if x and (Path(root) / x).exists()]
    for pause in _waits() if held else ():
        time.sleep(pause)
        held = [x for x in held if (Path(root) / x).exists()]
        if not held:
            break
    if held:
        raise UserError(f"{_stale(root, str(Path(root) / held[0]))} and run the same command again "
                        f"(or pass --no-commit)")
    require_git_writable(root, fallback="pass --no-commit")


def require_git_writable(root: Path, *, fallback: str) -> None:
    """Refuse unless git can write here: a real file is created and removed in each directory
    a commit writes to (the git directory, for index.lock; objects/; the branch's ref
    directory). Permissions are not asked — the kernel answers (read-only mounts, immutable
    directories, another owner's clone), so root is refused where root cannot write too."""
    ref = _git(root, "symbolic-ref", "-q", "HEAD").stdout.strip()
    res = _git(root, "rev-parse", "--git-path", "index", "--git-path", "objects/pack",
               *(["--git-path", ref] if ref else []))
    if res.returncode != 0:
        raise UserError(f"git rev-parse failed in {root}: {_last_message(res.stderr)}")
    dirs = []
    for p in res.stdout.splitlines():
        d = (Path(root) / p).parent
        while not d.exists() and d != d.parent:  # git creates missing ref directories: their parent must take them
            d = d.parent
        if d not in dirs:
            dirs.append(d)
    for d in dirs:
        try:
            fd, probe = tempfile.mkstemp(prefix=".bench-write-probe-", dir=d)
            try:
                os.write(fd, b"probe")
            finally:
                os.close(fd)
                os.unlink(probe)
        except OSError as exc:
            shown = _shown(root, str(d))
            raise UserError(f"git cannot write in this clone: creating a file in {shown}/ failed ({exc.strerror}), so "
                            f"bench could not commit its rows — make .git writable (chmod -R u+w .git, chattr -i, "
                            f"a read-write mount, or run as the clone's owner), or {fallback}") from None


def _identity(root: Path) -> list[str]:
    """``-c`` options giving git the fallback identity where the user has none configured."""
    for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        if _git(root, "var", who).returncode != 0:
            return ["-c", f"user.name={FALLBACK_NAME}", "-c", f"user.email={FALLBACK_EMAIL}"]
    return []


def _add_args(rel: str) -> tuple[str, ...]:
    """How bench stages a ledger file: the same for its commits and for its test commit."""
    return ("add", "--", rel)


def _commit_args(identity: list[str], rel: str, message: str) -> tuple[str, ...]:
    """How bench commits a ledger file (``commit_file``), and so how its test commit
    (``require_ledger_commits``) makes one: the same command, options, hooks and signing;
    ``identity`` is ``_identity``'s."""
    return (*identity, "commit", "--only", "-q", "-m", message, "--", rel)


def commit_file(root: Path, rel: str, message: str) -> str:
    """Commit the work-tree content of ``rel`` alone; returns the new HEAD.

    ``commit --only`` leaves whatever else the user staged staged and uncommitted. The
    user's hooks run and their signing config applies, as for any commit of theirs:
    ``require_ledger_commits`` made a test commit the same way before any work, so a hook or
    signer that refuses bench's commits is found then, not after a config has run.
    """
    unanchored = f"its rows are written but not anchored — run git commit -m 'bench: ledger rows' -- {rel}"
    add = _git_waiting(root, *_add_args(rel))
    if _held_lock(add):
        raise UserError(f"git add {rel}: {_stale(root, _held_lock(add))}; {unanchored}")
    if add.returncode != 0:
        raise UserError(f"git add {rel} failed ({_last_message(add.stderr)}): commit {rel} by hand")
    res = _git_waiting(root, *_commit_args(_identity(root), rel, message))
    if _held_lock(res):
        raise UserError(f"git commit {rel}: {_stale(root, _held_lock(res))}; {unanchored}")
    if res.returncode != 0:
        raise UserError(f"could not commit {rel} ({_git_error(res.stderr or res.stdout)}): its rows are written "
                        f"but not anchored — fix that and run git commit -m 'bench: ledger rows' -- {rel}")
    return head_commit(root)


def require_real_path(root: Path, rel: str) -> None:
    """Refuse a ledger path that is, or lies under, a symbolic link: git refuses to add a path
    beyond a symbolic link, and commits a symlinked file as the link, not the rows it reaches."""
    here = Path(root)
    for part in Path(rel).parts:
        here = here / part
        if here.is_symlink():
            shown = here.relative_to(root).as_posix()
            raise UserError(f"{shown} is a symbolic link (to {os.readlink(here)}): git cannot commit rows written "
                            f"through it — make {shown} a real {'directory' if here.is_dir() else 'file'} of this "
                            f"repository (rm {shown}, then move what it pointed to into its place)")


def require_ledger_commits(root: Path, rel: str, *, fallback: str) -> None:
    """Refuse, before any work, where git would not take bench's commit of ``rel``: a
    symlinked path, a hook that fails, a signer that fails, anything else ``git commit`` says.

    A real test commit of ``rel`` made as every ledger commit is (``_add_args``,
    ``_commit_args``), from the real work tree, in a scratch git directory (``_scratch_repo``)
    whose branch has the user's branch's name: the hooks that can stop a commit run, the
    signing config applies. The user's refs, reflogs, index and objects are never written;
    the scratch directory, with its objects and commits, is removed after.
    """
    require_real_path(root, rel)
    head = head_commit(root)
    with _scratch_repo(root, head) as scratch:
        _test_commit(root, rel, head, scratch, fallback)


@dataclass(frozen=True)
class _Scratch:
    """The test commit's git directory: its path, the environment that runs git in it on the
    real work tree, the ref its HEAD names (the user's branch, or HEAD itself when detached),
    the clone's hooks directory and object format."""

    path: Path
    env: dict
    ref: str
    hooks: Path
    object_format: str


@contextlib.contextmanager
def _scratch_repo(root: Path, head: str):
    """A git directory inside the clone's own (so `includeIf "gitdir:…"` in the user's config
    matches it as it matches the clone) with refs, index and objects of its own: it reads the
    clone's objects (alternates), shallow boundary, info/ (exclude, attributes) and config
    (included; then hooks pointed at ``_hook_wrappers``, automatic gc off), and its HEAD
    names the user's branch. Yields a ``_Scratch``; removed on the way out."""
    q = _git(root, "rev-parse", "--git-dir", "--git-common-dir", "--git-path", "index", "--git-path", "objects",
             "--git-path", "config", "--git-path", "shallow", "--git-path", "hooks", "--show-object-format",
             "--symbolic-full-name", "HEAD")
    said = q.stdout.splitlines()
    if q.returncode != 0 or len(said) != 9:
        raise UserError(f"git rev-parse failed in {root}: {_last_message(q.stderr)}")
    gitdir, common, index, objects, config, shallow, hooks = [(Path(root) / x).resolve() for x in said[:7]]
    branch = said[8] if said[8].startswith("refs/") else ""  # "HEAD" when detached
    scratch = Path(tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=common))
    try:
        (scratch / "objects" / "info").mkdir(parents=True)
        (scratch / "refs").mkdir()
        (scratch / "hooks").mkdir()
        _write_fs(scratch / "objects" / "info" / "alternates", f"{objects}\n")
        _write_fs(scratch / "HEAD", f"ref: {branch}\n" if branch else f"{head}\n")
        if (common / "info").is_dir():
            os.symlink(common / "info", scratch / "info")
        if shallow.is_file():
            shutil.copyfile(shallow, scratch / "shallow")
        if index.is_file():
            # The user's index, its stat data (and times) included: git commit refreshes the
            # index first, and one without stat data would have every tracked file hashed again.
            shutil.copy2(index, scratch / "index")
            for shared in gitdir.glob("sharedindex.*"):  # a split index names these beside itself
                os.symlink(shared, scratch / shared.name)
        fmt = said[7].strip()
        _write_fs(scratch / "config",
            f"[core]\n\trepositoryformatversion = {0 if fmt == 'sha1' else 1}\n\tbare = false\n"
            + ("" if fmt == "sha1" else f"[extensions]\n\tobjectformat = {fmt}\n")
            + f"[include]\n\tpath = {_config_value(config)}\n"
            # After the include, so they win: the wrappers, and nothing that outlives the test
            # commit or costs time to remove (reflogs, loose objects of the base commit, gc).
            + f"[core]\n\thooksPath = {_config_value(scratch / 'hooks')}\n\tfsmonitor = false\n"
            + "\tlogAllRefUpdates = false\n[fastimport]\n\tunpackLimit = 0\n"
            + "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n")
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        env.update(GIT_DIR=str(scratch), GIT_WORK_TREE=str(Path(root).resolve()))
        yield _Scratch(scratch, env, branch or "HEAD", hooks, fmt)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _config_value(path: Path) -> str:
    """A path as a git config value: quoted, with git's escapes."""
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _test_commit(root: Path, rel: str, head: str, scratch: _Scratch, fallback: str) -> None:
    """In ``scratch``: a base commit on the branch (HEAD's tree with ``rel`` one row short; with
    no ``rel`` where it has one row; with an empty one where the work tree has none yet), then
    bench's own add and commit of ``rel`` from the work tree on top: a commit that appends a
    row, as bench's do. A refusal names the hook that failed and its first line, or git's error."""
    def failed(res: subprocess.CompletedProcess, what: str) -> UserError:
        err = res.stderr.decode(errors="replace") if isinstance(res.stderr, bytes) else res.stderr
        return UserError(f"bench's test commit of {rel} failed at git {what} ({_git_error(err)}): bench could not "
                         f"check that git takes its commits — {fallback}")

    path = Path(root) / rel
    data = path.read_bytes() if path.is_file() else None
    base = b"" if data is None else data[:data.rstrip(b"\n").rfind(b"\n") + 1]  # all but the last row
    change = f"D {rel}\n".encode() if data is not None and not base else \
        f"M 100644 inline {rel}\ndata {len(base)}\n".encode() + base + b"\n"
    # One process writes the base commit (one pack, no loose objects) and the branch's tip.
    message = b"bench: test base\n"
    stream = (f"commit {scratch.ref}\ncommitter {FALLBACK_NAME} <{FALLBACK_EMAIL}> 0 +0000\n"
              f"data {len(message)}\n").encode() + message + f"from {head}\n".encode() + change
    res = subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=stream, capture_output=True,
                         env=scratch.env, process_group=0)
    if res.returncode != 0:
        raise failed(res, "fast-import")
    if data is None:  # git add stages a deletion only of a path the index knows
        empty = _EMPTY_BLOB[scratch.object_format]
        res = _git(root, "update-index", "--add", "--cacheinfo", f"100644,{empty},{rel}", env=scratch.env)
        if res.returncode != 0:
            raise failed(res, "update-index")
    _hook_wrappers(scratch)
    add = _git(root, *_add_args(rel), env=scratch.env)
    if add.returncode != 0:
        raise UserError(f"git add {rel} fails in this clone ({_git_error(add.stderr)}): bench could not commit its "
                        f"rows — fix that (git add {rel} shows it), or {fallback}")
    res = _git(root, *_commit_args(_identity(root), rel, f"bench: {rel} test commit (never kept)"), env=scratch.env)
    if res.returncode == 0:
        return
    hook = scratch.path / "hook-failed"
    if hook.is_file():
        name = hook.read_text().strip()
        out = scratch.path / f"{name}.out"
        said = _said(out.read_text(errors="replace")) if out.is_file() else []
        first = said[0] if said else "it failed and said nothing"
        raise UserError(f"git's {name} hook ({_shown(root, str(scratch.hooks / name))}) refused a test commit of "
                        f"{rel} ({first}): bench commits its rows after every config and runs your hooks as git "
                        f"commit does — make the hook accept bench's commits of {LEDGER_DIR}/, or {fallback}")
    said = _git_error(res.stderr or res.stdout)
    if "sign" in said.lower():
        raise UserError(f"git could not sign a test commit of {rel} ({said}): commit.gpgsign is on and its signer "
                        f"fails, so every commit of bench's rows would — fix the signer (gpg.program, "
                        f"user.signingkey), or {fallback}")
    raise UserError(f"git refused a test commit of {rel} ({said}): bench commits its rows with git commit --only "
                    f"after every config, and each would fail so — fix what git reports, or {fallback}")


# One wrapper per hook: the real hook by its own path (a hook that finds its helpers beside
# itself still does), its output kept, its name recorded when it fails.
_WRAPPER = ('#!/bin/sh\n{skip}{hook} "$@" >{out} 2>&1\nstatus=$?\n'
            '[ $status -eq 0 ] || echo {name} >{failed}\nexit $status\n')
# reference-transaction runs for "prepared" (which can abort), then "committed" or "aborted"
# (which only notify): the test commit runs it for the first alone.
_NOTIFY_ONLY = 'if [ "$1" != prepared ]; then cat >/dev/null; exit 0; fi\n'


def _write_fs(path: Path, text: str) -> None:
    """Write git's own files (alternates, HEAD, config, hook wrappers) in the encoding of file
    names: they hold paths, and a clone at a path that is not UTF-8 must write them as the bytes
    the path is (``os.fsencode``), not fail on them."""
    path.write_bytes(text.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()))


def _hook_wrappers(scratch: _Scratch) -> None:
    """A wrapper in the scratch hooks directory for each of the clone's executable BLOCKING_HOOKS."""
    for name in BLOCKING_HOOKS:
        real = scratch.hooks / name
        if not (real.is_file() and os.access(real, os.X_OK)):
            continue  # git skips a hook that is absent or not executable
        wrapper = scratch.path / "hooks" / name
        _write_fs(wrapper, _WRAPPER.format(skip=_NOTIFY_ONLY if name == "reference-transaction" else "",
                                           hook=shlex.quote(str(real)), name=name,
                                           out=shlex.quote(str(scratch.path / f"{name}.out")),
                                           failed=shlex.quote(str(scratch.path / "hook-failed"))))
        wrapper.chmod(0o755)


def _said(text: str) -> list[str]:
    """The non-blank lines of a command's output, stripped."""
    return [x.strip() for x in text.splitlines() if x.strip()]


def _git_error(text: str) -> str:
    """What a failed git command says: its first error or fatal line (git's own reason comes
    before the consequences it lists after), else its last line."""
    said = _said(text)
    return next((x for x in said if x.startswith(("error:", "fatal:"))), said[-1] if said else "no message")


def _last_message(text: str) -> str:
    said = _said(text)
    return said[-1] if said else "no message"


def show_file(root: Path, commit: str, rel: str) -> bytes | None:
    """``rel`` as committed at ``commit``, or None where it does not exist there."""
    res = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=root, capture_output=True, process_group=0)
    return res.stdout if res.returncode == 0 else None


def file_history(root: Path, rel: str) -> list[tuple[str, str]]:
    """(commit, subject) of every commit that added, changed or deleted ``rel``, oldest first."""
    res = _git(root, "log", "--no-renames", "--format=%H %s", "HEAD", "--", rel)
    if res.returncode != 0:
        return []
    return [tuple(x.split(" ", 1)) if " " in x else (x, "") for x in reversed(res.stdout.splitlines())]


def blobs(root: Path, specs: list[str]):
    """Yield the content of each ``<commit>:<path>`` (None where missing) from one git process."""
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=root, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        for spec in specs:
            proc.stdin.write(spec.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                yield None
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after each object
            yield data
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def deleted_files(root: Path, under: str, suffix: str) -> dict[str, tuple[str, str]]:
    """Files directly under ``under`` ending in ``suffix`` that some commit deleted (renames
    count as deletions): path → (commit, subject) of the latest such deletion."""
    res = _git(root, "log", "--no-renames", "--diff-filter=D", "--name-only", "--format=\x01%H %s", "HEAD",
               "--", under)
    found: dict[str, tuple[str, str]] = {}
    commit = ("", "")
    for text in res.stdout.splitlines() if res.returncode == 0 else []:
        if text.startswith("\x01"):
            sha, _, subject = text[1:].partition(" ")
            commit = (sha, subject)
        elif text and text.endswith(suffix) and Path(text).parent.as_posix() == under:
            found.setdefault(text, commit)  # log runs newest first
    return found


def files_at_head(root: Path, under: str) -> list[str]:
    res = _git(root, "ls-tree", "--name-only", "HEAD", "--", under + "/")
    return res.stdout.splitlines() if res.returncode == 0 else []


def _files(res: subprocess.CompletedProcess, what: str, root: Path) -> set[str]:
    if res.returncode != 0:
        raise UserError(f"git {what} failed in {root}: {res.stderr.strip()}")
    return {p for p in res.stdout.split("\0") if p}


def untracked_files(root: Path, dirs: list[str], allowed=None) -> list[str]:
    """Files under the repository-relative ``dirs`` that git does not track, each as
    'path (ignored)' or 'path (untracked)', leaving out those ``allowed(path)`` accepts. The
    dirty-tree check never sees ignored files, yet Python imports (and runs bytecode from)
    them like any other."""
    if not dirs:
        return []
    others = _files(_git(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--", *dirs), "ls-files", root)
    ignored = _files(_git(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--ignored",
                          "--exclude-standard", "--", *dirs), "ls-files", root)
    return [f"{p} ({'ignored' if p in ignored else 'untracked'})" for p in sorted(others)
            if allowed is None or not allowed(p)]


def unverified_files(root: Path, paths: list[str]) -> list[str]:
    """Of the repository-relative ``paths``, those not tracked or not equal to HEAD, each as
    'path (why)' — including files under ``ledger/``, which the dirty-tree check exempts."""
    if not paths:
        return []
    tracked = _files(_git(root, "--literal-pathspecs", "ls-files", "-z", "--", *paths), "ls-files", root)
    changed = _files(_git(root, "--literal-pathspecs", "diff", "--name-only", "-z", "HEAD", "--", *paths),
                     "diff", root)
    out = []
    for p in sorted(set(paths)):
        if p not in tracked:
            ignored = _git(root, "check-ignore", "-q", "--", p).returncode == 0
            out.append(f"{p} ({'ignored' if ignored else 'untracked'})")
        elif p in changed:
            out.append(f"{p} (changed since HEAD)")
    return out


def last_commit_holding(root: Path, rel: str) -> str | None:
    """The newest commit of HEAD's history whose tree holds ``rel`` (None: never committed)."""
    res = _git(root, "--literal-pathspecs", "log", "--format=%H", "HEAD", "--", rel)
    if res.returncode != 0:
        raise UserError(f"git log failed in {root}: {res.stderr.strip()}")
    for commit in res.stdout.split():
        # The newest commit that touched it either holds it or deleted it (then an older one holds it).
        if _git(root, "cat-file", "-e", f"{commit}:{rel}").returncode == 0:
            return commit
    return None


def has_uncommitted(root: Path, path: Path) -> bool:
    """Whether ``path`` differs from HEAD or is untracked (rows a commit has not anchored)."""
    res = _git(root, "status", "--porcelain", "--untracked-files=all", "--", relative(root, path))
    return res.returncode != 0 or bool(res.stdout.strip())


# -- bisect: revisions, the code commits between two, and a commit's own worktree -------------

def resolve_commit(root: Path, rev: str, what: str) -> str:
    """The full SHA of the commit ``rev`` names, or the refusal naming ``what`` (e.g. --good)."""
    res = _git(root, "rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{commit}}")
    if res.returncode != 0 or not res.stdout.strip():
        raise UserError(f"{what} {rev!r} names no commit of this repository: give a commit SHA, branch or tag "
                        f"(git log --oneline lists them)")
    return res.stdout.strip()


def subject(root: Path, commit: str) -> str:
    """A commit's subject line."""
    return _git(root, "log", "-1", "--format=%s", commit).stdout.strip()


def is_ancestor(root: Path, old: str, new: str) -> bool:
    """Whether commit ``old`` is ``new`` or on its history (git merge-base --is-ancestor)."""
    return _git(root, "merge-base", "--is-ancestor", old, new).returncode == 0


def code_commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` on ``bad``'s first-parent history that change
    something outside ``ledger/``, oldest first (a ledger-only commit runs its parent's code).
    Refuses a ``good`` that is not on that history."""
    if _git(root, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise UserError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: give a good commit older than "
                        f"the bad one, on its history")
    chain = _git(root, "rev-list", "--first-parent", bad).stdout.split()
    if good not in chain:
        raise UserError(f"--good {good[:12]} is not on the first-parent history of --bad {bad[:12]} (it came in "
                        f"through a merge): give the merge's first parent, or a commit of the main line")
    outside = [":(top)", f":(top,exclude){LEDGER_DIR}"]
    res = _git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", "--", *outside)
    return res.stdout.split()


def worktree(root: Path, commit: str, where: Path) -> Path:
    """A detached worktree of ``commit`` at ``where`` (a new directory); ``remove_worktree`` ends it."""
    res = _git(root, "worktree", "add", "--detach", "-q", str(where), commit)
    if res.returncode != 0:
        raise UserError(f"git worktree add of {commit[:12]} failed ({_last_message(res.stderr)}): "
                        f"run `git worktree prune` and try again")
    return where


def remove_worktree(root: Path, where: Path) -> None:
    """Remove a worktree ``worktree`` made, its files and git's record of it."""
    import shutil

    _git(root, "worktree", "remove", "--force", str(where))
    shutil.rmtree(where, ignore_errors=True)
    _git(root, "worktree", "prune")
