"""One measuring process per device on a host, whatever line, checkout or user it serves.

Two sweeps on one GPU time each other. The lock is a file named after the device (the GPU's
UUID; ``cpu`` for the host CPU) in a host-wide directory — the system temp dir, not the
repository, so two checkouts of one repository exclude each other too — overridable with
``BENCH_DEVICE_LOCK_DIR``. ``flock`` locks die with their process: a killed sweep never
leaves a device locked.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from harness.errors import UserError
from harness.ledger.locks import try_acquire

LOCK_DIR_ENV = "BENCH_DEVICE_LOCK_DIR"
LOCK_SUBDIR = "bench-device-locks"
# How often a waiting sweep tries the lock again.
WAIT_POLL_S = 1.0


def lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / LOCK_SUBDIR


def holder(key: str) -> dict | None:
    """What the current holder wrote about itself (pid, line, root), if readable."""
    try:
        return json.loads((lock_dir() / f"{key}.holder.json").read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def device_lock(key: str, *, who: dict, wait: bool, on_wait: Callable[[str, dict | None], None] | None = None) -> Iterator[None]:
    """Hold the device ``key`` for the block; wait (calling ``on_wait`` once) or refuse if taken."""
    d = lock_dir()
    path = d / f"{key}.lock"
    try:
        d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user of the host
            os.chmod(d, 0o1777)
        lock = try_acquire(path, 0, mode=0o666)
    except PermissionError as exc:
        raise UserError(f"cannot create the device lock in {d} ({exc.strerror}): set {LOCK_DIR_ENV} to a "
                        f"directory every bench user of this host can write") from None
    if lock is None:
        other = holder(key)
        if not wait:
            raise UserError(f"device {key} is in use by another bench process{describe_holder(other)}: wait for it, "
                            f"or drop --no-wait to queue behind it")
        if on_wait:
            on_wait(key, other)
        while lock is None:
            lock = try_acquire(path, WAIT_POLL_S, mode=0o666)
    info = d / f"{key}.holder.json"
    try:
        with contextlib.suppress(OSError):
            info.write_text(json.dumps({**who, "pid": os.getpid(), "since": time.time()}))
        yield
    finally:
        with contextlib.suppress(OSError):
            info.unlink()
        lock.release()


def describe_holder(other: dict | None) -> str:
    """`` (pid N, line 'x', in /path)`` or empty: who holds a device, for messages."""
    if not other:
        return ""
    bits = [f"pid {other.get('pid')}"]
    if other.get("line"):
        bits.append(f"line '{other['line']}'")
    if other.get("root"):
        bits.append(f"in {other['root']}")
    return " (" + ", ".join(bits) + ")"
