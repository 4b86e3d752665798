"""Optional accelerations: whether a module that needs an optional package (Triton) imports here.

The one-pass compare, checksum and input draw run where Triton does; elsewhere their torch
paths give the same values. A missing optional package means the torch path; any other
import error (a broken module of ours, a package that fails while importing) keeps its
traceback.
"""

from __future__ import annotations

import functools

# The packages whose absence only means the torch path.
OPTIONAL_PACKAGES = ("triton",)


@functools.lru_cache(maxsize=None)
def importable(module: str) -> bool:
    """Whether ``module`` imports (once per process: the answer cannot change)."""
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in OPTIONAL_PACKAGES:
            return False
        raise
    return True
