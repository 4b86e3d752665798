"""torch.compile peers: the shared compile step (imported on first call, never at listing).

A peer is the unfused torch code compiled by inductor: Triton kernels on CUDA, C++ on the
CPU. Each peer compiles with ``dynamic=False`` (one specialised kernel per shape, what a
deployment of a fixed shape gets) and ``fullgraph=True`` (a graph break is an error, never a
silent fall-back to eager). Dynamo keeps at most ``recompile_limit`` compiled versions of a
function and past it runs the function eagerly without a word: a sweep of more shapes
than that would time eager torch under the peer's name, so the limit is raised to
RECOMPILE_LIMIT once, here, and ``fail_on_recompile_limit_hit`` makes going past it an error.
"""

from __future__ import annotations

import functools
import os
import shutil

# Shapes (and dtypes, and GELU kinds) one compiled peer may specialise for: past every grid
# the shipped drafts sweep, boundary configs included.
RECOMPILE_LIMIT = 256
# The C++ compilers inductor looks for on the CPU, besides $CXX.
CPU_COMPILERS = ("g++", "c++", "clang++")


def compile_available(device: str) -> str | None:
    """Why inductor cannot compile for ``device`` here, or None: Triton on CUDA, a C++
    compiler on the CPU (checked on PATH, without importing inductor)."""
    import importlib.util

    if device == "cuda":
        return None if importlib.util.find_spec("triton") else "torch.compile on CUDA needs triton"
    compilers = (os.environ.get("CXX", ""), *CPU_COMPILERS)
    if not any(c and shutil.which(c) for c in compilers):
        return f"torch.compile on the CPU needs a C++ compiler ({', '.join(CPU_COMPILERS)} or $CXX): none found"
    return None


@functools.lru_cache(maxsize=None)
def compiled(fn):
    """``fn`` compiled once per process (each shape specialised on its first call)."""
    import torch
    import torch._dynamo

    cfg = torch._dynamo.config
    cfg.recompile_limit = max(cfg.recompile_limit, RECOMPILE_LIMIT)
    cfg.fail_on_recompile_limit_hit = True
    return torch.compile(fn, dynamic=False, fullgraph=True)
