"""Strict JSON for rows: the one sanitiser and its reader (one NaN policy for every row).

Measurement objects hand over their raw floats; ``jsonable`` — the ledger's row encoder,
and anything else that writes JSON — spells non-finite floats ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (strict JSON has no such numbers, and a string keeps which one it was),
tuples become lists, numpy/torch scalars Python numbers, paths strings; anything else is
refused, so a row never holds what a reader cannot parse back. ``number`` reads a numeric
field back: a spelled non-finite value is that float, null is an absent value.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# How a row spells each non-finite float (and how a reader recognises one).
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON data (see the module docstring); TypeError for other types."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if hasattr(obj, "item"):  # numpy / torch scalars
        return jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"ledger rows hold JSON data only, not {type(obj).__name__}: {obj!r}")


def number(v: Any) -> float | None:
    """A numeric row field as a float: numbers and spelled non-finite values; None for null
    (absent — rows written before the one policy also held null for a non-finite value),
    booleans and anything else."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in NON_FINITE:
        return NON_FINITE[v]
    return None
