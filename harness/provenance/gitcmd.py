"""Running git for bench: in a process group of its own, waiting out another git command's
locks, and reading what a failed command said. The other provenance modules call git only
through ``run`` and ``run_waiting``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from harness.errors import UserError

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


def run(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """git in a process group of its own (``process_group=0``): a Ctrl-C at the terminal,
    sent to the whole foreground group, cannot kill it half-way (a sweep's first Ctrl-C lets
    its configs in flight finish and commits each); this process alone decides what the
    Ctrl-C means, and an interrupt raised here ends git with it (``subprocess.run``). Its
    output is decoded as file names are (``os.fsdecode``): a repository path holding bytes
    that are not UTF-8 reads back as the path it is."""
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, process_group=0, env=env,
                          encoding=sys.getfilesystemencoding(), errors=sys.getfilesystemencodeerrors())


def waits() -> Iterator[float]:
    """Pauses between tries while a git lock is held: doubling, LOCK_WAIT_S in all."""
    deadline = time.monotonic() + LOCK_WAIT_S
    pause = LOCK_RETRY_FIRST_S
    while (left := deadline - time.monotonic()) > 0:
        yield min(pause, left)
        pause = min(2 * pause, LOCK_RETRY_MAX_S)


def held_lock(res: subprocess.CompletedProcess[str]) -> str | None:
    """The lock file a failed git command found held by another git process, or None."""
    found = _LOCK_HELD.search(res.stderr or "") if res.returncode != 0 else None
    return found.group(1) if found else None


def run_waiting(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``run`` for commands that take git's locks (add, commit, update-ref): run again, with
    a bounded backoff, while git says another git process holds one. The last result is
    returned either way (``held_lock`` tells a lock still held after LOCK_WAIT_S)."""
    res = run(root, *args)
    for pause in waits():
        if held_lock(res) is None:
            break
        time.sleep(pause)
        res = run(root, *args)
    return res


def in_repo(root: Path, path: str) -> str:
    """``path`` relative to the repository where it lies inside it (a lock file, a git directory)."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path


def stale_lock(root: Path, lock: str) -> str:
    lock = in_repo(root, lock)
    return (f"{lock} exists and stayed for {LOCK_WAIT_S:g} s: another git command is running, or one was "
            f"killed — if none is running, remove it (rm {lock})")


def said_lines(text: str) -> list[str]:
    """The non-blank lines of a command's output, stripped."""
    return [x.strip() for x in text.splitlines() if x.strip()]


def error_line(text: str) -> str:
    """What a failed git command says: its first error or fatal line (git's own reason comes
    before the consequences it lists after), else its last line."""
    said = said_lines(text)
    return next((x for x in said if x.startswith(("error:", "fatal:"))), said[-1] if said else "no message")


def last_line(text: str) -> str:
    said = said_lines(text)
    return said[-1] if said else "no message"


def repo_root(start: Path | None = None) -> Path:
    """The top of the git work tree containing ``start`` (default: cwd)."""
    start = Path(start or Path.cwd())
    try:
        res = run(start, "rev-parse", "--show-toplevel")
    except FileNotFoundError as exc:
        raise UserError("git is not installed: bench needs git to stamp results with a commit") from exc
    if res.returncode != 0:
        raise UserError(f"{start} is not inside a git repository: run bench from a clone of your "
                        f"benchmark repository (git init && git commit first)")
    return Path(res.stdout.strip())


def head_commit(root: Path) -> str:
    res = run(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if res.returncode != 0 or not res.stdout.strip():
        raise UserError(f"the repository at {root} has no commit yet: commit your registration and kernels first")
    return res.stdout.strip()
