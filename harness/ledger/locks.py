"""Exclusive file locks: the one wrapper around ``filelock`` that the line lock, the ledger's
writer lock and the device lock share. They are ``flock`` locks, released by the kernel when
the holding process dies, so a killed bench never leaves one behind.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from harness.errors import UserError


def try_acquire(path: Path, timeout: float, *, mode: int | None = None) -> Any | None:
    """The lock on ``path``, held; None when another process held it for ``timeout`` seconds.
    ``mode`` sets the lock file's permissions where several users share it."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=timeout, **({} if mode is None else {"mode": mode}))
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


@contextlib.contextmanager
def exclusive(path: Path, *, timeout: float, busy: str) -> Iterator[None]:
    """Hold the lock on ``path`` for the block; a UserError saying ``busy`` when another
    process holds it past ``timeout`` seconds (0: refuse at once)."""
    lock = try_acquire(path, timeout)
    if lock is None:
        raise UserError(busy)
    try:
        yield
    finally:
        lock.release()
