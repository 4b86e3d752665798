"""A registered line: its registration, its ledger, and the rules that govern them.

``register`` writes the first row; ``open_line`` is what ``sweep`` and ``verdict`` enter
first: clean tree, ledger writable with room to grow, line lock held, ledger chain intact,
registration unchanged (same SHA-256 as registered), line not closed. The line lock is held for the whole command, so
two sweeps, a sweep and a verdict, or two registrations of one line never interleave.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

from harness import __version__
from harness.errors import UserError, shown
from harness.provenance import code as codeprov, git as gitguard
from harness.registration import integration, line_ids, schema as registration
from harness.provenance.code import CODE_PACKAGES, require_code_from
from harness.ledger.store import Ledger, Left, require_anchorable
from harness.ledger.format import ledger_path
from harness.ledger.verify import rows_at, verify, verify_refusal
from harness.ledger.locks import exclusive
from harness.ledger.line_payloads import RegistrationSummary
from harness.ledger.rows import RegisteredRow, load
from harness.vocab.outcomes import REGISTERED, VERDICT
from harness.measurement.device import host_id
from harness.governance import power, reductio
from harness.registry import load_kernels as discover


@dataclass(frozen=True)
class Stamp:
    """The fields every row of a line carries: what produced it, under which bar."""

    commit: str
    registration_sha256: str
    registration_commit: str
    env: dict
    # Code packages loaded from an installed distribution, not the repository (codeprov.outside_code):
    # the commit does not cover them, so each row names them with version and file digest.
    code: tuple = ()

    def fields(self) -> dict:
        return {"commit": self.commit, "registration_sha256": self.registration_sha256,
                "registration_commit": self.registration_commit, "harness_version": __version__,
                "code": [dict(c) for c in self.code], "env": self.env}


@dataclass(frozen=True)
class Line:
    root: Path
    reg: registration.Registration
    ledger: Ledger
    registered: dict  # the line's `registered` row
    rows: tuple
    commit: str  # the code commit (gitguard.code_commit): what rows written now are stamped with
    code: tuple = ()  # Stamp.code
    left: Left | None = None  # the ledger file as it was verified: a command's appends follow it (commands/writer.py)

    def stamp(self, env: dict) -> Stamp:
        return Stamp(self.commit, self.registered.registration_sha256, self.registered.registration_commit, env,
                     self.code)


@contextlib.contextmanager
def line_lock(root: Path, line: str) -> Iterator[None]:
    """Exclusive use of one line for one bench command; a second one is refused at once."""
    path = ledger_path(root, line).with_suffix(".line.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path, timeout=0, busy=f"line '{line}' is in use by another bench command (register, sweep or "
                                         f"verdict): wait for it to finish"):
        yield


def register(path_or_line: str, *, root: Path | None = None, env: dict | None = None, reopen: bool = False) -> dict:
    """Validate, require a committed clean tree, and append the line's `registered` row.

    The row names the registration by its path relative to the repository root, whatever
    form was typed, so the line reads the same in every clone. A line whose ledger is in
    git history is never silently re-opened: ``reopen`` is allowed only when that ledger
    holds no verdict, and the new row says what it replaces.
    """
    tree = gitguard.require_clean(root)
    # The row is committed next (by the user): a clone whose git cannot write is found now.
    gitguard.require_git_writable(tree.root, fallback="register in a clone you can commit to")
    path = line_ids.resolve(tree.root, path_or_line)
    reg = registration.load(path)
    rel = gitguard.relative(tree.root, path)
    if rel.startswith(gitguard.LEDGER_DIR + "/"):
        raise UserError(f"{rel}: registrations cannot live in ledger/ (the git guard exempts it): "
                        f"move it to registrations/")
    code = _with(require_tracked_code(tree.root), registration.check_kernels(reg, tree.root))
    _require_new(tree.root, reg, rel)  # before the lock: a refused command leaves no lock file
    reopens = _reopens(tree.root, reg.line, rel, reopen)
    # The row is committed next (by the user), every later one by bench: a symlinked ledger/, a
    # hook or a signer that would refuse those commits is found now, before the row exists.
    gitguard.require_ledger_commits(tree.root, Ledger(tree.root, reg.line).rel,
                                    fallback="register in a clone you can commit to")

    checked = reductio.at_register(tree.root, reg)  # refuses a bar that cannot decide or cannot be met
    floor = power.tolerance_floor(reg)  # refuses a tolerance no kernel can pass (below the dtype's rounding)
    tol_power = power.tolerance_power(reg)  # refuses a tolerance that cannot fail a canary
    resolution = power.timing_resolution(tree.root, reg)
    reg_commit = gitguard.file_commit(tree.root, path)
    with line_lock(tree.root, reg.line):
        led = _require_new(tree.root, reg, rel)  # again under the lock: another register may have won
        stamp = Stamp(tree.commit, reg.sha256, reg_commit, env if env is not None else host_env(), code)
        fields = {**stamp.fields(), "registration": {**reg.summary(), "path": rel},
                  "n_configs": len(reg.configs), "amends": reg.amends,
                  "tolerance_floor": floor, "tolerance_power": tol_power, "timing_resolution": resolution,
                  "reductio": checked}
        if reopens is not None:
            fields["reopens"] = reopens
        return led.append(REGISTERED, fields)


def _reopens(root: Path, line: str, rel: str, reopen: bool) -> dict | None:
    """What a new registration of ``line`` replaces: None when its ledger never was committed;
    a refusal when it was, unless ``reopen`` and that ledger holds no verdict."""
    led_rel = ledger_path(root, line).relative_to(root).as_posix()
    at = gitguard.last_commit_holding(root, led_rel)
    if at is None:
        if reopen:
            raise UserError(f"--reopen: line '{line}' has no earlier ledger in git history ({led_rel} was never "
                            f"committed): register it without --reopen")
        return None
    if not reopen:
        raise UserError(f"line '{line}' was registered before: {led_rel} last existed at commit {at[:12]} and is "
                        f"gone from the work tree; a line is never silently re-opened — restore it "
                        f"(git checkout {at[:12]} -- {led_rel}), or run `bench register {rel} --reopen` "
                        f"(allowed only if that ledger holds no verdict)")
    old = _old_rows(root, at, led_rel)
    verdict = next((r for r in old if r.kind == VERDICT), None)
    if verdict is not None:
        raise UserError(f"--reopen: {led_rel} at commit {at[:12]} holds a verdict ({verdict.outcome}, row "
                        f"{verdict.seq}): a decided line is never re-opened — register the bar as a new "
                        f"line (copy {rel} to a new name and set amends = \"{line}\")")
    return {"commit": at, "rows": len(old), "last_hash": old[-1].hash if old else None}


def _old_rows(root: Path, commit: str, led_rel: str) -> list[dict]:
    """The rows of a ledger as committed at ``commit``, chain verified (a broken chain could
    hide a verdict, so it refuses)."""
    found = rows_at(root, commit, led_rel)
    if found is None:
        raise UserError(f"git show {commit[:12]}:{led_rel} failed: the re-opened ledger cannot be read back")
    rows, res = found
    if not res.ok:
        raise UserError(f"--reopen: {led_rel} at commit {commit[:12]} fails verification ({res.reason}): "
                        f"it cannot be shown to hold no verdict — register the bar as a new line with amends")
    return rows


def require_tracked_code(root: Path, *, load_kernels: bool = True) -> tuple[dict, ...]:
    """Refuse, by name, any code this command would run from the repository that is not
    tracked and unchanged at HEAD: the commit stamp vouches for nothing else.

    Ignored or untracked files in the code packages are refused before kernel discovery
    imports them (it imports every public module of kernels/); after it, every module
    loaded from inside the repository (outside the Python environment) must be tracked and
    unchanged. Kernel sources such as kernels/*.cu are covered by the first check. Before and
    after, the code packages must come from this repository (where it holds them) and have
    run from source, not bytecode (``provenance/code.py``). Returns the record of the code packages
    that come from an installed distribution instead (``codeprov.outside_code``).
    """
    import importlib.util

    top = Path(root).resolve()
    require_code_from(top)
    dirs = []
    for pkg in CODE_PACKAGES:
        spec = importlib.util.find_spec(pkg)
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if Path(loc).resolve().is_relative_to(top):
                dirs.append(Path(loc).resolve().relative_to(top).as_posix())
    _refuse_code(gitguard.untracked_files(top, dirs, allowed=lambda rel: codeprov.own_bytecode(top / rel)),
                 "bench would import it")
    if load_kernels:
        discover()
    code = require_code_from(top)
    _refuse_code(gitguard.unverified_files(top, _repo_modules(top)), "bench imported it")
    return code


def _refuse_code(bad: list[str], when: str) -> None:
    cache = [b for b in bad if "__pycache__" in b.split("/")]
    if cache:
        raise UserError(f"bytecode in the repository's code packages that is not Python's own cache of the source "
                        f"beside it: {gitguard.listed(cache)} — bench never runs it, yet no commit covers it and it "
                        f"could stand in for its source in another process: delete it")
    if bad:
        raise UserError(f"code in the repository that is not committed as it is ({when}, and no commit stamp covers "
                        f"it): {gitguard.listed(bad)} — commit it or delete it (`git status --ignored` shows "
                        f"ignored files)")


def _repo_modules(top: Path) -> list[str]:
    """Repository-relative files of every imported module that lives inside the repository,
    leaving out a Python environment that happens to live there (e.g. .venv/)."""
    import sys

    env = codeprov.python_env_dirs(top)
    out = []
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str) or not os.path.isabs(f):  # some extension modules name a bare file
            continue
        p = Path(f).resolve()
        if p.is_relative_to(top) and not any(p.is_relative_to(e) for e in env):
            out.append(p.relative_to(top).as_posix())
    return out


def _require_new(root: Path, reg: registration.Registration, rel: str) -> Ledger:
    """The new line's (empty) ledger; refuses a line already registered or amending none."""
    led = Ledger(root, reg.line)
    if led.exists():
        rows = led.rows()
        at = (rows[0].registration_commit if rows and rows[0].kind == REGISTERED else None) or "?"
        raise UserError(f"line '{reg.line}' is already registered (at commit "
                        f"{at[:12]}); a changed bar is a new line: copy the "
                        f"file to a new name and set amends = \"{reg.line}\"")
    if reg.amends:
        old = ledger_path(root, reg.amends)
        if not old.exists():
            raise UserError(f"{rel}: amends = \"{reg.amends}\" but no line '{reg.amends}' is registered "
                            f"(no {old.relative_to(root)})")
    return led


def host_env() -> dict:
    """Registering needs no device: record only the host facts (no torch/NVML import), the
    host hashed as every row names it (measurement.device.host_id)."""
    import platform

    return {"python": platform.python_version(), "platform": platform.platform(), "host": host_id()}


@contextlib.contextmanager
def open_line(line_or_path: str, *, root: Path | None = None, action: str, commit: bool = False,
              closed_ok: bool = False) -> Iterator[Line]:
    """Everything ``sweep``/``verdict`` must check before touching anything; holds the line lock.
    With ``commit`` (the command commits its rows) git must take a commit of the ledger too
    (``ledger.require_anchorable``: a test commit, hooks and signing included). ``closed_ok``:
    a closed line is opened too (`bench replicate`, whose rows go beside the verdict)."""
    tree = gitguard.require_clean(root)
    code = require_tracked_code(tree.root, load_kernels=False)
    line, given = line_ids.line_of(tree.root, line_or_path)
    # Refusals that need no lock come before it: a refused command leaves no lock file.
    _require_registered(tree.root, line, given)
    Ledger(tree.root, line).require_writable()  # before the lock file is created, and before any work
    if commit:
        require_anchorable(Ledger(tree.root, line))
    with line_lock(tree.root, line):
        ln = _checked_line(tree, line, action, closed_ok=closed_ok)
        step = ln.reg.integration
        yield replace(ln, code=_with(code, integration.step_code(tree.root, step.step) if step else ()))


def _with(code: tuple, more: tuple) -> tuple:
    """The rows' ``code`` records, with those of ``more`` not yet among them."""
    return (*code, *(c for c in more if c not in code))


def registered_path(registered: dict, line: str, *, closed: bool) -> str:
    """The registration path of a line's `registered` row, refused unless it is relative and
    stays inside the repository: any other path names a file of some machine, not of this
    clone's commit (bench would hash the wrong file, or none)."""
    rel = RegistrationSummary.from_row(registered.registration or {}).path
    if not isinstance(rel, str) or not rel:
        raise UserError(f"ledger/{line}.jsonl: row 0 names no registration path: it is not a bench ledger")
    posix, win = PurePosixPath(rel), PureWindowsPath(rel)
    if posix.is_absolute() or win.is_absolute() or win.drive or ".." in posix.parts or ".." in win.parts:
        where = "leaves the repository" if ".." in posix.parts or ".." in win.parts else \
            "is an absolute path of the machine it was registered on"
        fix = (f"register the bar again as a new line (copy the file to a new name and set amends = \"{line}\")"
               if closed else
               f"git rm ledger/{line}.jsonl, commit, and `bench register {line} --reopen`")
        raise UserError(f"ledger/{line}.jsonl: row 0 names its registration as {rel}, which {where}; bench reads "
                        f"registrations relative to the repository only — {fix}")
    return posix.as_posix()


def _require_registered(root: Path, line: str, given: Path | None = None) -> None:
    """The line has a ledger, and a registration the user named by path is the registered one."""
    path = ledger_path(root, line)
    if not path.exists():
        raise UserError(f"line '{line}' is not registered: run `bench register registrations/{line}.toml` first")
    if given is None:
        return
    try:  # only row 0 is needed; a ledger it cannot be read from is refused under the lock
        with open(path, "rb") as fh:
            first = json.loads(fh.readline())
        row0 = load(first) if isinstance(first, dict) else None
    except (OSError, ValueError):  # unreadable, no JSON, or no row bench knows (rows.UnknownField)
        return
    summary = RegistrationSummary.from_row(row0.registration) if isinstance(row0, RegisteredRow) else None
    rel = summary.path if summary is not None else None
    if not isinstance(rel, str) or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
        return  # registered_path refuses it, with its fix, under the lock
    if (root / rel).resolve() != given.resolve():
        raise UserError(f"{shown(given)} is not the registration of line '{line}' (registered from "
                        f"{rel}): give the line id {line}")


def read_line(line_or_path: str, *, root: Path | None = None, action: str) -> Line:
    """A registered line as ``open_line`` checks it (clean tree, ledger chain intact,
    registration unchanged), for a command that reads it and writes nothing of its own
    ledger (``bench bisect``): no line lock, and a closed line is allowed."""
    tree = gitguard.require_clean(root)
    line, given = line_ids.line_of(tree.root, line_or_path)
    _require_registered(tree.root, line, given)
    return _checked_line(tree, line, action, closed_ok=True)


def _checked_line(tree: gitguard.CleanTree, line: str, action: str, *, closed_ok: bool = False) -> Line:
    led = Ledger(tree.root, line)
    _require_registered(tree.root, line)
    left = led.left()
    res = verify(led.path)
    if not res.ok:
        raise UserError(verify_refusal(f"ledger/{line}.jsonl", res, action))
    rows = led.rows()
    if led.left() != left:  # under the line lock, no bench command writes it: something else did
        led.require_left(left)
    registered = rows[0]
    if registered.kind != REGISTERED:
        raise UserError(f"ledger/{line}.jsonl: the first row is not a `registered` row: it is not a bench ledger")
    rel = registered_path(registered, line, closed=any(r.kind == VERDICT for r in rows))
    at = registered.registration_commit[:12]
    path = tree.root / rel
    if not path.is_file():
        raise UserError(f"registration {rel} is gone, but line '{line}' was registered from it at commit {at}: "
                        f"restore it with git checkout {at} -- {rel}")
    sha = registration.sha256_file(path)
    if sha != registered.registration_sha256:
        raise UserError(f"registration {rel} changed since it was registered at commit {at} "
                        f"(sha256 {registered.registration_sha256[:12]} → {sha[:12]}): restore it "
                        f"(git checkout {at} -- {rel}) or register the new bar as a new line with amends = \"{line}\"")
    verdict = next((r for r in rows if r.kind == VERDICT), None)
    if verdict is not None and not closed_ok:
        raise UserError(f"line '{line}' is closed: its verdict ({verdict.outcome}) was written at row {verdict.seq} "
                        f"on commit {verdict.commit[:12]}; {action} would change a decided line — register a new line "
                        f"(amends = \"{line}\") to measure again; `bench verdict {line} --show` prints its verdict")
    return Line(root=tree.root, reg=registration.load(path), ledger=led, registered=registered, rows=tuple(rows),
                commit=tree.commit, left=left)
