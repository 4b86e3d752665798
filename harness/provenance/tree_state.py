"""The work tree against its commit: the stamp rows carry and the checks that make it mean
something.

Every ledger row carries the full SHA of the code commit: the newest commit that changed
anything outside ``ledger/``. That stamp means something only if the working tree is
exactly that commit outside ``ledger/``; the ledger directory is the harness's output and
is the one exemption. Commits that only append ledger rows (bench anchors its rows in git)
move HEAD but not the code commit, so they never split a sweep across two stamps.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.errors import UserError
from harness.provenance.gitcmd import head_commit, repo_root, run

LEDGER_DIR = "ledger"


# How many offending paths a refusal lists before summarising the rest.
MAX_LISTED_PATHS = 20


def shallow_boundary(root: Path) -> tuple[str, ...]:
    """The commits where a shallow clone's history stops (``git clone --depth``, CI
    checkouts): their parents are not in this clone. Empty for a full clone."""
    if run(root, "rev-parse", "--is-shallow-repository").stdout.strip() != "true":
        return ()
    where = Path(root) / run(root, "rev-parse", "--git-path", "shallow").stdout.strip()
    try:
        return tuple(where.read_text().split())
    except OSError:
        return ()


def _exempt(path: str) -> bool:
    return path == LEDGER_DIR or path.startswith(LEDGER_DIR + "/")


def dirty_paths(root: Path) -> list[str]:
    """Modified, staged, deleted, renamed or untracked-and-not-ignored paths outside ``ledger/``,
    and tracked files git was told to stop looking at (assume-unchanged, skip-worktree)."""
    res = run(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
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
    hidden = run(root, "ls-files", "-v", "-z")
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
    res = run(root, "log", "-1", "--format=%H", head, "--", *outside)
    code = res.stdout.strip()
    if code and code in shallow_boundary(root) and _has_parent(root, code):
        raise UserError(f"this clone is shallow and its history stops at {code[:12]}, whose parent it lacks: bench "
                        f"stamps rows with the newest commit that changed anything outside {LEDGER_DIR}/ and cannot "
                        f"tell whether that is {code[:12]} or an older one — fetch more history (git fetch "
                        f"--unshallow, or git fetch --deepen N) and run the same command again")
    if res.returncode != 0 or not code or code == head:
        return head
    same = run(root, "diff", "--quiet", code, head, "--", *outside)
    return code if same.returncode == 0 else head


def _has_parent(root: Path, commit: str) -> bool:
    """Whether ``commit`` itself names a parent: a shallow clone lists a true root commit at its
    boundary too, and only a commit whose parent was cut off hides older history."""
    res = run(root, "cat-file", "commit", commit)
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
    res = run(root, "log", "-1", "--format=%H", "--", rel)
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


def is_ignored(root: Path, rel: str) -> bool:
    return run(root, "check-ignore", "-q", "--", rel).returncode == 0


def _files(res: subprocess.CompletedProcess[str], what: str, root: Path) -> set[str]:
    if res.returncode != 0:
        raise UserError(f"git {what} failed in {root}: {res.stderr.strip()}")
    return {p for p in res.stdout.split("\0") if p}


def untracked_files(root: Path, dirs: list[str], allowed: Callable[[str], bool] | None = None) -> list[str]:
    """Files under the repository-relative ``dirs`` that git does not track, each as
    'path (ignored)' or 'path (untracked)', leaving out those ``allowed(path)`` accepts. The
    dirty-tree check never sees ignored files, yet Python imports (and runs bytecode from)
    them like any other."""
    if not dirs:
        return []
    others = _files(run(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--", *dirs), "ls-files", root)
    ignored = _files(run(root, "--literal-pathspecs", "ls-files", "-z", "--others", "--ignored",
                          "--exclude-standard", "--", *dirs), "ls-files", root)
    return [f"{p} ({'ignored' if p in ignored else 'untracked'})" for p in sorted(others)
            if allowed is None or not allowed(p)]


def unverified_files(root: Path, paths: list[str]) -> list[str]:
    """Of the repository-relative ``paths``, those not tracked or not equal to HEAD, each as
    'path (why)' — including files under ``ledger/``, which the dirty-tree check exempts."""
    if not paths:
        return []
    tracked = _files(run(root, "--literal-pathspecs", "ls-files", "-z", "--", *paths), "ls-files", root)
    changed = _files(run(root, "--literal-pathspecs", "diff", "--name-only", "-z", "HEAD", "--", *paths),
                     "diff", root)
    out = []
    for p in sorted(set(paths)):
        if p not in tracked:
            ignored = run(root, "check-ignore", "-q", "--", p).returncode == 0
            out.append(f"{p} ({'ignored' if ignored else 'untracked'})")
        elif p in changed:
            out.append(f"{p} (changed since HEAD)")
    return out


def has_uncommitted(root: Path, path: Path) -> bool:
    """Whether ``path`` differs from HEAD or is untracked (rows a commit has not anchored)."""
    res = run(root, "status", "--porcelain", "--untracked-files=all", "--", relative(root, path))
    return res.returncode != 0 or bool(res.stdout.strip())
