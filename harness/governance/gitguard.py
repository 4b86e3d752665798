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
        shown = dirty[:MAX_LISTED_PATHS]
        more = f" (+{len(dirty) - len(shown)} more)" if len(dirty) > len(shown) else ""
        raise UserError("uncommitted changes outside ledger/ — commit or remove them first: "
                        + "; ".join(shown) + more)
    return CleanTree(root=root, commit=commit)


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


def has_uncommitted(root: Path, path: Path) -> bool:
    """Whether ``path`` differs from HEAD or is untracked (rows a commit has not anchored)."""
    res = _git(root, "status", "--porcelain", "--untracked-files=all", "--", relative(root, path))
    return res.returncode != 0 or bool(res.stdout.strip())
