"""Reading history: files as committed, their commits, deletions under a folder, revisions
and the code commits between two (bisect), and a commit's own detached worktree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from harness.errors import UserError
from harness.provenance.gitcmd import last_line, run
from harness.provenance.tree_state import LEDGER_DIR

def show_file(root: Path, commit: str, rel: str) -> bytes | None:
    """``rel`` as committed at ``commit``, or None where it does not exist there."""
    res = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=root, capture_output=True, process_group=0)
    return res.stdout if res.returncode == 0 else None


def file_history(root: Path, rel: str) -> list[tuple[str, str]]:
    """(commit, subject) of every commit that added, changed or deleted ``rel``, oldest first."""
    res = run(root, "log", "--no-renames", "--format=%H %s", "HEAD", "--", rel)
    if res.returncode != 0:
        return []
    return [(sha, subject) for sha, _, subject in (x.partition(" ") for x in reversed(res.stdout.splitlines()))]


def blobs(root: Path, specs: list[str]) -> Iterator[bytes | None]:
    """Yield the content of each ``<commit>:<path>`` (None where missing) from one git process."""
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=root, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    stdin, stdout = proc.stdin, proc.stdout
    if stdin is None or stdout is None:  # both are pipes (PIPE above); this tells the type checker
        raise RuntimeError("git cat-file --batch started without its pipes")
    try:
        for spec in specs:
            stdin.write(spec.encode() + b"\n")
            stdin.flush()
            header = stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                yield None
                continue
            data = stdout.read(int(header[2]))
            stdout.read(1)  # the newline after each object
            yield data
    finally:
        stdin.close()
        stdout.close()
        proc.wait()


def deleted_files(root: Path, under: str, suffix: str) -> dict[str, tuple[str, str]]:
    """Files directly under ``under`` ending in ``suffix`` that some commit deleted (renames
    count as deletions): path → (commit, subject) of the latest such deletion."""
    res = run(root, "log", "--no-renames", "--diff-filter=D", "--name-only", "--format=\x01%H %s", "HEAD",
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
    res = run(root, "ls-tree", "--name-only", "HEAD", "--", under + "/")
    return res.stdout.splitlines() if res.returncode == 0 else []


def last_commit_holding(root: Path, rel: str) -> str | None:
    """The newest commit of HEAD's history whose tree holds ``rel`` (None: never committed)."""
    res = run(root, "--literal-pathspecs", "log", "--format=%H", "HEAD", "--", rel)
    if res.returncode != 0:
        raise UserError(f"git log failed in {root}: {res.stderr.strip()}")
    for commit in res.stdout.split():
        # The newest commit that touched it either holds it or deleted it (then an older one holds it).
        if run(root, "cat-file", "-e", f"{commit}:{rel}").returncode == 0:
            return commit
    return None


def resolve_commit(root: Path, rev: str, what: str) -> str:
    """The full SHA of the commit ``rev`` names, or the refusal naming ``what`` (e.g. --good)."""
    res = run(root, "rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{commit}}")
    if res.returncode != 0 or not res.stdout.strip():
        raise UserError(f"{what} {rev!r} names no commit of this repository: give a commit SHA, branch or tag "
                        f"(git log --oneline lists them)")
    return res.stdout.strip()


def subject(root: Path, commit: str) -> str:
    """A commit's subject line."""
    return run(root, "log", "-1", "--format=%s", commit).stdout.strip()


def is_ancestor(root: Path, old: str, new: str) -> bool:
    """Whether commit ``old`` is ``new`` or on its history (git merge-base --is-ancestor)."""
    return run(root, "merge-base", "--is-ancestor", old, new).returncode == 0


def code_commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` on ``bad``'s first-parent history that change
    something outside ``ledger/``, oldest first (a ledger-only commit runs its parent's code).
    Refuses a ``good`` that is not on that history."""
    if run(root, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise UserError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: give a good commit older than "
                        f"the bad one, on its history")
    chain = run(root, "rev-list", "--first-parent", bad).stdout.split()
    if good not in chain:
        raise UserError(f"--good {good[:12]} is not on the first-parent history of --bad {bad[:12]} (it came in "
                        f"through a merge): give the merge's first parent, or a commit of the main line")
    outside = [":(top)", f":(top,exclude){LEDGER_DIR}"]
    res = run(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", "--", *outside)
    return res.stdout.split()


def worktree(root: Path, commit: str, where: Path) -> Path:
    """A detached worktree of ``commit`` at ``where`` (a new directory); ``remove_worktree`` ends it."""
    res = run(root, "worktree", "add", "--detach", "-q", str(where), commit)
    if res.returncode != 0:
        raise UserError(f"git worktree add of {commit[:12]} failed ({last_line(res.stderr)}): "
                        f"run `git worktree prune` and try again")
    return where


def remove_worktree(root: Path, where: Path) -> None:
    """Remove a worktree ``worktree`` made, its files and git's record of it."""
    run(root, "worktree", "remove", "--force", str(where))
    shutil.rmtree(where, ignore_errors=True)
    run(root, "worktree", "prune")
