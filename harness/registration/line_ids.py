"""A command's LINE argument: a line id (``example``, the registration's file stem) or the path
of a registration file inside the repository, resolved one way for every command.

``check`` is the one gate every line id passes — typed on the command line, read from a
registration's file name or its ``amends`` — before bench builds a file name from it: a line
id is one file name component (no ``/``, no ``..``, no leading ``.``), short enough for the
names bench derives from it, so no argument can make bench read or write outside
``registrations/``, ``ledger/`` or ``reports/``.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from harness.errors import UserError
from harness.workloads.keys import shorten

# A line id: the registration's file name without ``.toml``; ledger/<id>.jsonl holds its rows.
# Matched whole (``fullmatch``: ``$`` alone would let a trailing newline through).
LINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# A line's files end so; an id ending so would read as a path (``is_path``), so none may.
FILE_SUFFIXES = (".toml", ".jsonl")
# The longest line id. bench makes file names of it: registrations/<id>.toml, ledger/<id>.jsonl,
# its locks <id>.jsonl.lock and <id>.line.lock (the longest, 11 characters more than the id)
# and report folders reports/<id>/. ext4, XFS, btrfs, APFS and NTFS allow 255 bytes per name,
# eCryptfs (encrypted home directories) 143: 128 + 11 fits all of them, and the ASCII of
# LINE_ID is one byte a character.
MAX_LINE_ID = 128
# How much of a refused argument a message quotes (a refusal stays one readable line).
QUOTED_CHARS = 60


def _quoted(text: str) -> str:
    return ascii(text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "...")


def check(text: str, what: str = "", *, or_path: bool = False) -> str:
    """``text`` if it is a line id, else a UserError naming the problem and the fix; the one
    check every line id passes before a path is built from it. ``what`` names where the text
    came from (``amends``); ``or_path``: the argument could have been a registration's path too
    (the refusal says so)."""
    said = f"{what} {_quoted(str(text))}" if what else _quoted(str(text))
    if not isinstance(text, str) or not LINE_ID.fullmatch(text) or text.endswith(FILE_SUFFIXES):
        stem = Path(text).stem if isinstance(text, str) and text.endswith(FILE_SUFFIXES) else None
        hint = (f" (a path: give the line id {stem!r})" if stem and LINE_ID.fullmatch(stem)
                and len(stem) <= MAX_LINE_ID else "")
        nor = " nor a path to a .toml registration" if or_path else ""
        raise UserError(f"{said} is {'neither' if or_path else 'not'} a line id{nor}{hint}: a line id is letters, "
                        f"digits, '_', '.' and '-', starting with a letter or digit (the registration's file name "
                        f"without .toml, as `bench status` lists it)")
    if len(text) > MAX_LINE_ID:
        raise UserError(f"{said} is {len(text)} characters long, more than {MAX_LINE_ID} (bench makes file names "
                        f"of it): pick a shorter line id")
    return text


def is_path(arg: str) -> bool:
    """An argument with a directory part or a .toml suffix is a path; anything else a line id."""
    return "/" in arg or os.sep in arg or arg.endswith(".toml")


def _is(path: Path, kind: str, arg: str) -> bool:
    """``path.is_dir()`` / ``path.is_file()``, with a name longer than the file system allows
    refused as such (pathlib raises it, where it answers False for a missing file)."""
    try:
        return getattr(path, kind)()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UserError(f"{_quoted(arg)} holds a name longer than the file system allows, so no registration "
                            f"is there: give a line id or the path of its registrations/<line>.toml") from None
        raise


def resolve(root: Path, line_or_path: str) -> Path:
    """The registration file an argument names: a line id (``example``) is
    ``registrations/<id>.toml`` of the repository; a path (relative to the current directory)
    must name a ``.toml`` file inside the repository whose name is a line id — never a file
    outside, never reduced to its stem. A directory or a file that is not ``.toml`` is refused
    by name."""
    arg = str(line_or_path)
    given = Path(arg) if Path(arg).is_absolute() else Path.cwd() / arg
    if not is_path(arg):
        path = Path(root) / "registrations" / f"{check(arg, or_path=True)}.toml"
        if _is(given, "is_dir", arg) and not _is(path, "is_file", arg):
            raise UserError(f"{arg} is a directory, not a registration: give registrations/<line>.toml or a line id")
        return path
    if _is(given, "is_dir", arg):
        raise UserError(f"{arg} is a directory, not a registration: give registrations/<line>.toml or a line id")
    if given.suffix != ".toml":
        raise UserError(f"{arg} is not a registration (a .toml file): give registrations/<line>.toml or a line id")
    if not given.resolve().is_relative_to(Path(root).resolve()):
        raise UserError(f"{arg} is outside the repository ({root}): bench reads the registrations of this "
                        f"repository only — give a line id, or the path of its registrations/<line>.toml")
    check(given.stem, f"{_quoted(arg)}: the file name")
    return given


def line_of(root: Path, line_or_path: str) -> tuple[str, Path | None]:
    """The line id an argument names, and the registration file when it was given as a path
    (which must exist: a path that names nothing is refused, not read as a line id)."""
    path = resolve(root, line_or_path)
    if not is_path(str(line_or_path)):
        return path.stem, None
    if not _is(path, "is_file", str(line_or_path)):
        raise UserError(f"no registration file at {line_or_path}: give the registration's path or its line id")
    return path.stem, path


# Configs a refusal names when a CONFIG argument matches none or several.
MAX_CONFIGS_LISTED = 8


def config_of(reg, text: str):
    """The config of ``reg``'s grid a CONFIG argument names: its full key
    (``attention/b2/h4/kv4/n256/d64/float32/full``), or a short form — some of the key's
    fields, separated by spaces or '/', as tables print it (``n256 float32 full``) — that
    exactly one config has. Anything else is refused with the configs it could mean."""
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
