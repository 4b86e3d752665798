"""The git guard: no number is produced from a tree that differs from a commit.

Every ledger row carries the full SHA of HEAD; that stamp means something only if the
working tree is exactly that commit. The ledger directory is the harness's output and
is the one exemption.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError

LEDGER_DIR = "ledger"
# How many offending paths a refusal lists before summarising the rest.
MAX_LISTED_PATHS = 20


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


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


@dataclass(frozen=True)
class CleanTree:
    root: Path
    commit: str


def require_clean(root: Path | None = None) -> CleanTree:
    """Refuse (UserError, exit 2) unless the tree equals HEAD outside ``ledger/``."""
    root = repo_root(root)
    commit = head_commit(root)
    dirty = dirty_paths(root)
    if dirty:
        raise UserError("uncommitted changes outside ledger/ — commit or remove them first: " + listed(dirty))
    return CleanTree(root=root, commit=commit)


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


def _files(res: subprocess.CompletedProcess, what: str, root: Path) -> set[str]:
    if res.returncode != 0:
        raise UserError(f"git {what} failed in {root}: {res.stderr.strip()}")
    return {p for p in res.stdout.split("\0") if p}


def untracked_files(root: Path, dirs: list[str]) -> list[str]:
    """Files under the repository-relative ``dirs`` that git does not track, each as
    'path (ignored)' or 'path (untracked)'. The dirty-tree check never sees ignored files,
    yet Python imports them like any other; bytecode caches (``__pycache__/``) are skipped."""
    if not dirs:
        return []
    others = _files(_git(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--", *dirs), "ls-files", root)
    ignored = _files(_git(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--ignored",
                          "--exclude-standard", "--", *dirs), "ls-files", root)
    return [f"{p} ({'ignored' if p in ignored else 'untracked'})" for p in sorted(others)
            if "__pycache__" not in p.split("/")]


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


def show_file(root: Path, commit: str, rel: str) -> bytes:
    """The bytes of ``rel`` as committed at ``commit``."""
    res = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=root, capture_output=True)
    if res.returncode != 0:
        raise UserError(f"git show {commit[:12]}:{rel} failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout
