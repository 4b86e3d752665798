"""Committing ledger files: bench's own commit of a ledger file (``commit_file``), and the
checks made before any work that git will take it (locks, a writable git directory, a real
path, a test commit that runs the user's hooks and signer in a scratch git directory)."""

from __future__ import annotations

import contextlib
import os
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
from harness.provenance.gitcmd import (error_line, head_commit, held_lock, in_repo, last_line, run,
                                       run_waiting, said_lines, stale_lock, waits)
from harness.provenance.tree_state import LEDGER_DIR

# Who commits ledger rows where git has no identity configured (CI machines).
FALLBACK_NAME = "bench"


FALLBACK_EMAIL = "bench@localhost"


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


def require_committable(root: Path) -> None:
    """Refuse before any work where git's index, HEAD or branch stays locked (waiting up to
    LOCK_WAIT_S for another git command to finish), or where git cannot write at all."""
    ref = run(root, "symbolic-ref", "-q", "HEAD").stdout.strip()
    names = ("index", "HEAD", *([ref] if ref else []))
    locks = [run(root, "rev-parse", "--git-path", f"{n}.lock").stdout.strip() for n in names]
    held = [x for x in locks if x and (Path(root) / x).exists()]
    for pause in waits() if held else ():
        time.sleep(pause)
        held = [x for x in held if (Path(root) / x).exists()]
        if not held:
            break
    if held:
        raise UserError(f"{stale_lock(root, str(Path(root) / held[0]))} and run the same command again "
                        f"(or pass --no-commit)")
    require_git_writable(root, fallback="pass --no-commit")


def require_git_writable(root: Path, *, fallback: str) -> None:
    """Refuse unless git can write here: a real file is created and removed in each directory
    a commit writes to (the git directory, for index.lock; objects/; the branch's ref
    directory). Permissions are not asked — the kernel answers (read-only mounts, immutable
    directories, another owner's clone), so root is refused where root cannot write too."""
    ref = run(root, "symbolic-ref", "-q", "HEAD").stdout.strip()
    res = run(root, "rev-parse", "--git-path", "index", "--git-path", "objects/pack",
               *(["--git-path", ref] if ref else []))
    if res.returncode != 0:
        raise UserError(f"git rev-parse failed in {root}: {last_line(res.stderr)}")
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
            shown = in_repo(root, str(d))
            raise UserError(f"git cannot write in this clone: creating a file in {shown}/ failed ({exc.strerror}), so "
                            f"bench could not commit its rows — make .git writable (chmod -R u+w .git, chattr -i, "
                            f"a read-write mount, or run as the clone's owner), or {fallback}") from None


def _identity(root: Path) -> list[str]:
    """``-c`` options giving git the fallback identity where the user has none configured."""
    for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        if run(root, "var", who).returncode != 0:
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
    add = run_waiting(root, *_add_args(rel))
    if (lock := held_lock(add)) is not None:
        raise UserError(f"git add {rel}: {stale_lock(root, lock)}; {unanchored}")
    if add.returncode != 0:
        raise UserError(f"git add {rel} failed ({last_line(add.stderr)}): commit {rel} by hand")
    res = run_waiting(root, *_commit_args(_identity(root), rel, message))
    if (lock := held_lock(res)) is not None:
        raise UserError(f"git commit {rel}: {stale_lock(root, lock)}; {unanchored}")
    if res.returncode != 0:
        raise UserError(f"could not commit {rel} ({error_line(res.stderr or res.stdout)}): its rows are written "
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
    env: dict[str, str]
    ref: str
    hooks: Path
    object_format: str


@contextlib.contextmanager
def _scratch_repo(root: Path, head: str) -> Iterator[_Scratch]:
    """A git directory inside the clone's own (so `includeIf "gitdir:…"` in the user's config
    matches it as it matches the clone) with refs, index and objects of its own: it reads the
    clone's objects (alternates), shallow boundary, info/ (exclude, attributes) and config
    (included; then hooks pointed at ``_hook_wrappers``, automatic gc off), and its HEAD
    names the user's branch. Yields a ``_Scratch``; removed on the way out."""
    q = run(root, "rev-parse", "--git-dir", "--git-common-dir", "--git-path", "index", "--git-path", "objects",
             "--git-path", "config", "--git-path", "shallow", "--git-path", "hooks", "--show-object-format",
             "--symbolic-full-name", "HEAD")
    said = q.stdout.splitlines()
    if q.returncode != 0 or len(said) != 9:
        raise UserError(f"git rev-parse failed in {root}: {last_line(q.stderr)}")
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
    def failed(res: subprocess.CompletedProcess[bytes] | subprocess.CompletedProcess[str], what: str) -> UserError:
        err = res.stderr.decode(errors="replace") if isinstance(res.stderr, bytes) else res.stderr
        return UserError(f"bench's test commit of {rel} failed at git {what} ({error_line(err)}): bench could not "
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
    imported = subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=stream, capture_output=True,
                              env=scratch.env, process_group=0)
    if imported.returncode != 0:
        raise failed(imported, "fast-import")
    if data is None:  # git add stages a deletion only of a path the index knows
        empty = _EMPTY_BLOB[scratch.object_format]
        res = run(root, "update-index", "--add", "--cacheinfo", f"100644,{empty},{rel}", env=scratch.env)
        if res.returncode != 0:
            raise failed(res, "update-index")
    _hook_wrappers(scratch)
    add = run(root, *_add_args(rel), env=scratch.env)
    if add.returncode != 0:
        raise UserError(f"git add {rel} fails in this clone ({error_line(add.stderr)}): bench could not commit its "
                        f"rows — fix that (git add {rel} shows it), or {fallback}")
    res = run(root, *_commit_args(_identity(root), rel, f"bench: {rel} test commit (never kept)"), env=scratch.env)
    if res.returncode == 0:
        return
    hook = scratch.path / "hook-failed"
    if hook.is_file():
        name = hook.read_text().strip()
        out = scratch.path / f"{name}.out"
        said = said_lines(out.read_text(errors="replace")) if out.is_file() else []
        first = said[0] if said else "it failed and said nothing"
        raise UserError(f"git's {name} hook ({in_repo(root, str(scratch.hooks / name))}) refused a test commit of "
                        f"{rel} ({first}): bench commits its rows after every config and runs your hooks as git "
                        f"commit does — make the hook accept bench's commits of {LEDGER_DIR}/, or {fallback}")
    why = error_line(res.stderr or res.stdout)
    if "sign" in why.lower():
        raise UserError(f"git could not sign a test commit of {rel} ({why}): commit.gpgsign is on and its signer "
                        f"fails, so every commit of bench's rows would — fix the signer (gpg.program, "
                        f"user.signingkey), or {fallback}")
    raise UserError(f"git refused a test commit of {rel} ({why}): bench commits its rows with git commit --only "
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
