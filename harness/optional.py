"""Optional accelerations: whether a module that needs an optional package (Triton) imports here.

The one-pass compare and the one-pass input draw run where Triton does; elsewhere their torch
paths give the same values. A missing package means the torch path; any other import error
keeps its traceback.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def importable(module: str) -> bool:
    """Whether ``module`` imports (once per process: the answer cannot change)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
