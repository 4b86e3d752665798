"""A command's LINE argument: a line id (``example``, the registration's file stem) or the path
of a registration file, resolved one way for every command.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import UserError

# A line id: the registration's file name without ``.toml``; ledger/<id>.jsonl holds its rows.
LINE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_path(arg: str) -> bool:
    """An argument with a directory part or a .toml suffix is a path; anything else a line id."""
    return "/" in arg or os.sep in arg or arg.endswith(".toml")


def resolve(root: Path, line_or_path: str) -> Path:
    """The registration file an argument names: a line id (``example``) is
    ``registrations/<id>.toml`` of the repository, a path is taken as given (relative to the
    current directory) — never reduced to its stem. A directory or a file that is not
    ``.toml`` is refused by name."""
    arg = str(line_or_path)
    given = Path(arg) if Path(arg).is_absolute() else Path.cwd() / arg
    if given.is_dir() and (is_path(arg) or not (Path(root) / "registrations" / f"{arg}.toml").is_file()):
        raise UserError(f"{arg} is a directory, not a registration: give registrations/<line>.toml or a line id")
    if is_path(arg):
        if given.suffix != ".toml":
            raise UserError(f"{arg} is not a registration (a .toml file): give registrations/<line>.toml or a line id")
        return given
    if not LINE_ID.match(arg):
        raise UserError(f"{arg!r} is neither a line id (matching {LINE_ID.pattern}) nor a path to a .toml registration")
    return Path(root) / "registrations" / f"{arg}.toml"


def line_of(root: Path, line_or_path: str) -> tuple[str, Path | None]:
    """The line id an argument names, and the registration file when it was given as a path
    (which must exist: a path that names nothing is refused, not read as a line id)."""
    path = resolve(root, line_or_path)
    if not is_path(str(line_or_path)):
        return path.stem, None
    if not path.is_file():
        raise UserError(f"no registration file at {line_or_path}: give the registration's path or its line id")
    return path.stem, path


# Configs a refusal names when a CONFIG argument matches none or several.
MAX_CONFIGS_LISTED = 8


def config_of(reg, text: str):
    """The config of ``reg``'s grid a CONFIG argument names: its full key
    (``attention/b2/h4/kv4/n256/d64/float32/full``), or a short form — some of the key's
    fields, separated by spaces or '/', as tables print it (``n256 float32 full``) — that
    exactly one config has. Anything else is refused with the configs it could mean."""
    from harness.workloads.keys import shorten

    keys = {c.key(): c for c in reg.configs}
    if text in keys:
        return keys[text]
    fields = set(re.split(r"[\s/]+", text.strip())) - {""}
    found = [k for k in keys if fields and fields <= set(k.split("/"))]
    if len(found) == 1:
        return keys[found[0]]
    short, shared = shorten(list(keys))  # as the line's tables show its configs
    listed = [short[k] for k in (found or list(keys))]
    more = f" (+{len(listed) - MAX_CONFIGS_LISTED} more)" if len(listed) > MAX_CONFIGS_LISTED else ""
    within = f" (all {shared})" if shared else ""
    what = (f"config {text!r} matches {len(found)} configs of line '{reg.line}'" if found else
            f"config {text!r} is not in line '{reg.line}'s grid")
    raise UserError(f"{what}: give one of {', '.join(repr(s) for s in listed[:MAX_CONFIGS_LISTED])}{more}{within}, "
                    f"or a full key as `bench ledger show {reg.line}` prints it")
