"""A registered line: its registration, its ledger, and the rules that govern them.

``register`` writes the first row; ``open_line`` is what ``sweep`` and ``verdict`` call
first: clean tree, registration intact (same SHA-256 as registered), line not closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.errors import UserError
from harness.governance import gitguard, registration
from harness.governance.ledger import Ledger, ledger_path


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

    @property
    def verdict_row(self) -> dict | None:
        return next((r for r in self.rows if r["kind"] == "verdict"), None)


def register(path_or_line: str, *, root: Path | None = None, env: dict | None = None) -> dict:
    """Validate, require a committed clean tree, and append the line's `registered` row."""
    tree = gitguard.require_clean(root)
    path = registration.resolve(tree.root, path_or_line)
    reg = registration.load(path)
    registration.check_kernels(reg)
    reg_commit = gitguard.file_commit(tree.root, path)
    led = Ledger(tree.root, reg.line)
    if led.exists():
        first = led.rows()[0] if led.rows() else {}
        raise UserError(f"line '{reg.line}' is already registered (at commit {first.get('registration_commit', '?')[:12]}); "
                        f"a changed bar is a new line: copy the file to a new name and set amends = \"{reg.line}\"")
    if reg.amends:
        old = ledger_path(tree.root, reg.amends)
        if not old.exists():
            raise UserError(f"{path}: amends = \"{reg.amends}\" but no line '{reg.amends}' is registered "
                            f"(no {old.relative_to(tree.root)})")
    stamp = Stamp(tree.commit, reg.sha256, reg_commit, env if env is not None else _light_env())
    return led.append("registered", {**stamp.fields(), "registration": reg.summary(),
                                     "n_configs": len(reg.configs), "amends": reg.amends})


def _light_env() -> dict:
    """Registering needs no device: record only the host facts (no torch/NVML import)."""
    import platform
    import socket

    return {"python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname()}


def open_line(line_or_path: str, *, root: Path | None = None, action: str) -> Line:
    """Everything ``sweep``/``verdict`` must check before touching anything."""
    tree = gitguard.require_clean(root)
    path = registration.resolve(tree.root, line_or_path)
    line = path.stem
    led = Ledger(tree.root, line)
    rows = led.rows()
    if not rows:
        raise UserError(f"line '{line}' is not registered: run `bench register {path.relative_to(tree.root) if path.is_relative_to(tree.root) else path}` first")
    registered = rows[0]
    if registered.get("kind") != "registered":
        raise UserError(f"{led.path}: the first row is not a `registered` row: run `bench ledger verify {line}`")
    if not path.is_file():
        raise UserError(f"registration {path} is gone, but line '{line}' was registered at commit "
                        f"{registered['registration_commit'][:12]}: restore it with git checkout {registered['registration_commit'][:12]} -- {path.name}")
    sha = registration.sha256_file(path)
    if sha != registered["registration_sha256"]:
        raise UserError(f"registration {path.name} changed since it was registered at commit "
                        f"{registered['registration_commit'][:12]} (sha256 {registered['registration_sha256'][:12]} → {sha[:12]}): "
                        f"restore it (git checkout {registered['registration_commit'][:12]} -- registrations/{path.name}) "
                        f"or register the new bar as a new line with amends = \"{line}\"")
    verdict = next((r for r in rows if r["kind"] == "verdict"), None)
    if verdict is not None:
        raise UserError(f"line '{line}' is closed: its verdict ({verdict['outcome']}) was written at row {verdict['seq']} "
                        f"on commit {verdict['commit'][:12]}; {action} would change a decided line — register a new line "
                        f"(amends = \"{line}\") to measure again")
    reg = registration.load(path)
    return Line(root=tree.root, reg=reg, ledger=led, registered=registered, rows=tuple(rows), commit=tree.commit)
