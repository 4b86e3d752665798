"""Strict JSON for rows: the one sanitiser (the ledger's row encoder and measurement results use it).

Non-finite floats are spelled ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (strict JSON has no
such numbers, and a string keeps which one it was; ``reporting.tidy`` reads them back),
tuples become lists, numpy/torch scalars Python numbers, paths strings; anything else is
refused, so a row never holds what a reader cannot parse back.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


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
