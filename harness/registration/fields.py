"""Checks of one registration value or table, each refusal naming the file and the key: the
parsers of the tables (sections, cross_checks) build on these."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from harness.errors import UserError, shown

T = TypeVar("T")

def err(path: Path, msg: str) -> UserError:
    """The refusal of a registration file: its path, then what is wrong and the fix."""
    return UserError(f"{shown(path)}: {msg}")


def unknown(path: Path, where: str, keys: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse keys of ``where`` outside ``allowed``, naming the allowed ones."""
    extra = sorted(set(keys) - set(allowed))
    if extra:
        raise err(path, f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} in {where} "
                        f"(allowed: {', '.join(sorted(allowed))})")


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
