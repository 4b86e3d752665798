"""Checks of one registration value or table, each refusal naming the file and the key: the
parsers of the tables (sections, cross_checks) build on these."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from harness.errors import UserError, shown

T = TypeVar("T")

_KIND_NAMES = {int: "an integer", str: "a string", bool: "true or false"}


def err(path: Path, msg: str) -> UserError:
    """The refusal of a registration file: its path, then what is wrong and the fix."""
    return UserError(f"{shown(path)}: {msg}")


def unknown(path: Path, where: str, keys: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse keys of ``where`` outside ``allowed``, naming the allowed ones."""
    extra = sorted(set(keys) - set(allowed))
    if extra:
        raise err(path, f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} in {where} "
                        f"(allowed: {', '.join(sorted(allowed))})")


def grid_values(path: Path, key: str, value: object, kind: type,
                check: Callable[[Any], str | None] | None = None) -> list[Any]:
    """A [grid] key's values (one value or a non-empty list), each of ``kind`` and passing
    ``check`` (which returns the complaint, or None), none twice."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise err(path, f"[grid] {key} is empty: give at least one value")
    out = []
    for v in values:
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if not ok:
            raise err(path, f"[grid] {key} = {v!r} is not {_KIND_NAMES[kind]}")
        if check and (msg := check(v)):
            raise err(path, f"[grid] {key} = {v!r}: {msg}")
        out.append(v)
    if len(set(out)) != len(out):
        raise err(path, f"[grid] {key} lists a value twice: {out}")
    return out


def positive(v: int) -> str | None:
    return None if v > 0 else "must be > 0"


def checked_table(path: Path, raw: dict[str, Any], key: str, parse: Callable[[dict[str, Any]], T]) -> T:
    """An optional table, parsed by the room that owns it (its UserError gains the path)."""
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise err(path, f"[{key}] must be a table")
    try:
        return parse(table)
    except UserError as exc:
        raise err(path, f"[{key}] {exc}") from exc


def parsed(path: Path, key: str, text: str, parse: Callable[[str], T]) -> T:
    """``parse(text)``; its error (which begins "bar: ") names the key instead."""
    try:
        return parse(text)
    except UserError as exc:
        raise err(path, f"[bar] {key}: {str(exc).removeprefix('bar: ')}") from exc
