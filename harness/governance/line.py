"""A registered line: its registration, its ledger, and the rules that govern them.

``register`` writes the first row; ``open_line`` is what ``sweep`` and ``verdict`` enter
first: clean tree, line lock held, ledger chain intact, registration unchanged (same
SHA-256 as registered), line not closed. The line lock is held for the whole command, so
two sweeps, a sweep and a verdict, or two registrations of one line never interleave.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from harness import __version__
from harness.errors import UserError, shown
from harness.governance import gitguard, registration
from harness.governance.ledger import Ledger, ledger_path, verify


@dataclass(frozen=True)
class Stamp:
    """The fields every row of a line carries: what produced it, under which bar."""

    commit: str
    registration_sha256: str
    registration_commit: str
    env: dict

    def fields(self) -> dict:
        return {"commit": self.commit, "registration_sha256": self.registration_sha256,
                "registration_commit": self.registration_commit, "harness_version": __version__,
                "env": self.env}


@dataclass(frozen=True)
class Line:
    root: Path
    reg: registration.Registration
    ledger: Ledger
    registered: dict  # the line's `registered` row
    rows: tuple
    commit: str  # HEAD now

    def stamp(self, env: dict) -> Stamp:
        return Stamp(self.commit, self.registered["registration_sha256"], self.registered["registration_commit"], env)


@contextlib.contextmanager
def line_lock(root: Path, line: str) -> Iterator[None]:
    """Exclusive use of one line for one bench command; a second one is refused at once."""
    from filelock import FileLock, Timeout

    path = ledger_path(root, line).with_suffix(".line.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(f"line '{line}' is in use by another bench command (register, sweep or verdict): "
                        f"wait for it to finish") from None
    try:
        yield
    finally:
        lock.release()


def register(path_or_line: str, *, root: Path | None = None, env: dict | None = None) -> dict:
    """Validate, require a committed clean tree, and append the line's `registered` row."""
    tree = gitguard.require_clean(root)
    path = registration.resolve(tree.root, path_or_line)
    reg = registration.load(path)
    rel = gitguard.relative(tree.root, path)
    if rel.startswith(gitguard.LEDGER_DIR + "/"):
        raise UserError(f"{rel}: registrations cannot live in ledger/ (the git guard exempts it): "
                        f"move it to registrations/")
    registration.check_kernels(reg)
    from harness.governance import power

    tol_power = power.tolerance_power(reg)  # refuses a tolerance that cannot fail a canary
    resolution = power.timing_resolution(tree.root, reg)
    reg_commit = gitguard.file_commit(tree.root, path)
    _require_new(tree.root, reg, rel)  # before the lock: a refused command leaves no lock file
    with line_lock(tree.root, reg.line):
        led = _require_new(tree.root, reg, rel)  # again under the lock: another register may have won
        stamp = Stamp(tree.commit, reg.sha256, reg_commit, env if env is not None else host_env())
        return led.append("registered", {**stamp.fields(), "registration": {**reg.summary(), "path": rel},
                                         "n_configs": len(reg.configs), "amends": reg.amends,
                                         "tolerance_power": tol_power, "timing_resolution": resolution})


def _require_new(root: Path, reg: registration.Registration, rel: str) -> Ledger:
    """The new line's (empty) ledger; refuses a line already registered or amending none."""
    led = Ledger(root, reg.line)
    if led.exists():
        first = led.rows()[0] if led.rows() else {}
        raise UserError(f"line '{reg.line}' is already registered (at commit "
                        f"{first.get('registration_commit', '?')[:12]}); a changed bar is a new line: copy the "
                        f"file to a new name and set amends = \"{reg.line}\"")
    if reg.amends:
        old = ledger_path(root, reg.amends)
        if not old.exists():
            raise UserError(f"{rel}: amends = \"{reg.amends}\" but no line '{reg.amends}' is registered "
                            f"(no {old.relative_to(root)})")
    return led


def host_env() -> dict:
    """Registering needs no device: record only the host facts (no torch/NVML import)."""
    import platform
    import socket

    return {"python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname()}


@contextlib.contextmanager
def open_line(line_or_path: str, *, root: Path | None = None, action: str) -> Iterator[Line]:
    """Everything ``sweep``/``verdict`` must check before touching anything; holds the line lock."""
    tree = gitguard.require_clean(root)
    line, given = registration.line_of(tree.root, line_or_path)
    # Refusals that need no lock come before it: a refused command leaves no lock file.
    _require_registered(tree.root, line, given)
    with line_lock(tree.root, line):
        yield _checked_line(tree, line, action)


def _require_registered(root: Path, line: str, given: Path | None = None) -> None:
    """The line has a ledger, and a registration the user named by path is the registered one."""
    path = ledger_path(root, line)
    if not path.exists():
        raise UserError(f"line '{line}' is not registered: run `bench register registrations/{line}.toml` first")
    if given is None:
        return
    try:  # only row 0 is needed; a ledger it cannot be read from is refused under the lock
        with open(path, "rb") as fh:
            rel = json.loads(fh.readline())["registration"]["path"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if (root / rel).resolve() != given.resolve():
        raise UserError(f"{shown(given)} is not the registration of line '{line}' (registered from "
                        f"{rel}): give the line id {line}")


def _checked_line(tree: gitguard.CleanTree, line: str, action: str) -> Line:
    led = Ledger(tree.root, line)
    _require_registered(tree.root, line)
    res = verify(led.path)
    if not res.ok:
        raise UserError(f"ledger/{line}.jsonl fails verification ({res.reason}): restore it from git before {action}")
    rows = led.rows()
    registered = rows[0]
    if registered.get("kind") != "registered":
        raise UserError(f"ledger/{line}.jsonl: the first row is not a `registered` row: it is not a bench ledger")
    rel = registered["registration"]["path"]
    at = registered["registration_commit"][:12]
    path = tree.root / rel
    if not path.is_file():
        raise UserError(f"registration {rel} is gone, but line '{line}' was registered from it at commit {at}: "
                        f"restore it with git checkout {at} -- {rel}")
    sha = registration.sha256_file(path)
    if sha != registered["registration_sha256"]:
        raise UserError(f"registration {rel} changed since it was registered at commit {at} "
                        f"(sha256 {registered['registration_sha256'][:12]} → {sha[:12]}): restore it "
                        f"(git checkout {at} -- {rel}) or register the new bar as a new line with amends = \"{line}\"")
    verdict = next((r for r in rows if r["kind"] == "verdict"), None)
    if verdict is not None:
        raise UserError(f"line '{line}' is closed: its verdict ({verdict['outcome']}) was written at row {verdict['seq']} "
                        f"on commit {verdict['commit'][:12]}; {action} would change a decided line — register a new line "
                        f"(amends = \"{line}\") to measure again")
    return Line(root=tree.root, reg=registration.load(path), ledger=led, registered=registered, rows=tuple(rows),
                commit=tree.commit)
