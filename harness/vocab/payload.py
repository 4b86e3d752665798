"""The typed payload's base: a nested row object (or a JSON document a row is built from) read
as a frozen dataclass with ``from_row`` (the object as read) and ``dump`` (the object as
written), so that ``from_row(d).dump() == d``, key order included (the hash chain holds).

It sits in vocab/, the lowest layer that knows rows, so that every layer can type what it
reads: ledger/payloads.py and ledger/line_payloads.py hold the classes of the rows' payloads,
and a module below ledger/ (registration/, measurement/, vocab/) declares the few it reads
itself. A field an older schema did not write reads its default (None unless the class says
otherwise), a field no class declares is kept for ``dump``, and an object that is not a JSON
object (absent, null) reads None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True, kw_only=True)
class Payload:
    """A nested row object's declared fields; the keys it was read with, in order, and those
    no field declares (both kept so that ``dump`` writes the object back as it was read)."""

    _keys: tuple = field(default=(), repr=False, compare=False)
    _extra: Mapping = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_row(cls, d: Any):
        """The payload of ``d`` as read from a row; None where ``d`` is no JSON object."""
        if not isinstance(d, Mapping):
            return None
        names = _names(cls)
        return cls(**{k: v for k, v in d.items() if k in names}, _keys=tuple(d),
                   _extra={k: v for k, v in d.items() if k not in names})

    def has(self, name: str) -> bool:
        """Whether the object held ``name`` (possibly as null)."""
        return name in self._keys

    def dump(self) -> dict:
        """The object as written: the keys it was read with, in their order."""
        names = _names(type(self))
        if not self._keys:  # built in code: every declared field
            return {k: getattr(self, k) for k in names}
        return {k: getattr(self, k) if k in names else self._extra[k] for k in self._keys}


_NAMES: dict[type, dict] = {}


def _names(cls: type) -> dict:
    """The declared fields of ``cls``, in declaration order (a built payload dumps in that order)."""
    if cls not in _NAMES:
        _NAMES[cls] = dict.fromkeys(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
    return _NAMES[cls]


def by_role(d: Any, role: str):
    """A per-role object's entry for ``role`` (a row's ``gate``, ``kernel_sources``); None where
    the row holds none."""
    return d.get(role) if isinstance(d, Mapping) else None


def each(cls: Any, items: Any) -> list:
    """``cls.from_row`` of each object in a row's list (none where it holds no list)."""
    return [cls.from_row(d) for d in items] if isinstance(items, list) else []
