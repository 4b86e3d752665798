"""Bring-your-own CUDA C++: ``kernels/*.cu`` compiled at run time by NVRTC through cupy.

``load_cu(filename, names)`` compiles one ``.cu`` file of this folder (with this folder on
the include path, so ``#include "cuda_common.cuh"`` works) and returns its kernels by name
expression (templates allowed: ``"naive_decode<1>"``). Compilation happens at the first
call on each device and is cached (cupy also caches the binary on disk). A file that does
not compile raises ``UserError`` naming the file and carrying NVRTC's log: a broken kernel
is reported, never dropped from a sweep.

The example kernel registered here, ``cuda_naive_decode`` (``decode_naive.cu``), is correct
and deliberately naive (slow); docs/kernels.md walks through it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings

from harness import kernel
from harness.errors import UserError
from ._decode_inputs import decode_dims

KERNELS_DIR = os.path.dirname(os.path.abspath(__file__))
# NVRTC options: C++17 for `if constexpr`-era code, this folder for the shared header.
NVRTC_OPTIONS = ("-std=c++17", f"-I{KERNELS_DIR}")
# Template argument of the .cu kernels for each dtype (see cuda_common.cuh: DT_F32/F16/BF16).
DTYPE_TAG = {"float32": 0, "float16": 1, "bfloat16": 2}

_LOCK = threading.Lock()
_CACHE: dict = {}


def load_cu(filename: str, names, device_index: int = 0, options=()) -> dict:
    """Compile ``kernels/<filename>`` for one device; return {name expression: cupy kernel}.

    Raises UserError with the NVRTC log when the file does not compile, or naming the
    missing kernel when a name expression is not in it.
    """
    import cupy

    names = tuple(names)
    path = os.path.join(KERNELS_DIR, filename)
    key = (path, names, tuple(options), device_index)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
        except OSError as exc:
            raise UserError(f"CUDA source {path} cannot be read: {exc}") from exc
        compile_error = cupy.cuda.compiler.CompileException
        with cupy.cuda.Device(device_index):
            try:
                module = cupy.RawModule(code=source, options=NVRTC_OPTIONS + tuple(options), name_expressions=names)
                # get_function compiles and loads now, so a broken file fails here with its log.
                fns = {n: module.get_function(n) for n in names}
            except compile_error as exc:
                log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
                raise UserError(f"CUDA source {path} failed to compile (NVRTC, options "
                                f"{' '.join(NVRTC_OPTIONS + tuple(options))}):\n{log}") from exc
        _CACHE[key] = fns
        return fns


@contextlib.contextmanager
def on_torch_stream(torch_device):
    """Make cupy's current device and stream torch's current ones for ``torch_device``.

    Every cupy launch and cuBLAS call inside runs in torch's stream order, so torch's CUDA
    events (the harness's timer) and torch's caching allocator see them in sequence.
    Yields the cupy stream object.
    """
    import cupy
    import torch

    index = torch_device.index if torch_device.index is not None else torch.cuda.current_device()
    raw = torch.cuda.current_stream(index).cuda_stream
    with cupy.cuda.Device(index):
        if raw:
            with warnings.catch_warnings():
                # cupy 14 deprecates ExternalStream for Stream.from_external; both wrap the
                # same raw handle, and ExternalStream works on cupy 12-14 alike.
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = cupy.cuda.ExternalStream(raw, index)
        else:
            stream = cupy.cuda.Stream.null
        with stream:
            yield stream


def ptr(t):
    """A tensor's device address as a kernel argument (8-byte scalar)."""
    import numpy as np

    return np.uint64(t.data_ptr())


# ---------------------------------------------------------------------------------------
# The example kernel: naive decode attention in raw CUDA C++.
# ---------------------------------------------------------------------------------------

NAIVE_MAX_D = 256       # must match NAIVE_MAX_D in decode_naive.cu (q is staged in shared memory)
NAIVE_THREADS = 128     # one block of 128 threads per query head


def _naive_scores_bytes(cfg) -> int:
    """float32 scores, one row of seq_len per query head: the only allocation."""
    return cfg.batch * cfg.heads * cfg.seq_len * 4


def _naive_supports(cfg):
    if cfg.head_dim > NAIVE_MAX_D:
        return f"cuda_naive_decode stages q in shared memory: head_dim <= {NAIVE_MAX_D}, not {cfg.head_dim}"
    return None


@kernel("cuda_naive_decode", workloads=("decode",), dtypes=("float16", "bfloat16", "float32"),
        devices=("cuda",), requires=("cupy",), memory=_naive_scores_bytes, supports=_naive_supports,
        numerics={"scores": "float32 in global memory", "softmax": "float32, max-subtracted",
                  "accumulation": "float32, one rounding of the output"})
def cuda_naive_decode(q, k, v, out, *, causal, scale):
    """Naive decode attention in raw CUDA C++ (NVRTC via cupy): correct, deliberately slow."""
    import numpy as np
    import torch

    b, h, hkv, nk, d = decode_dims("cuda_naive_decode", q, k, v, out)  # raw pointers: contiguous
    if d > NAIVE_MAX_D:
        raise UserError(f"cuda_naive_decode stages q in shared memory: head_dim <= {NAIVE_MAX_D}, not {d}")
    # Decode is never masked: the one query is the newest token and sees the whole cache.
    del causal
    tag = DTYPE_TAG[str(q.dtype).removeprefix("torch.")]
    name = f"naive_decode<{tag}>"
    fn = load_cu("decode_naive.cu", (name,), q.device.index)[name]
    scores = torch.empty(b * h * nk, dtype=torch.float32, device=q.device)
    with on_torch_stream(q.device):
        fn((b * h,), (NAIVE_THREADS,),
           (ptr(q), ptr(k), ptr(v), ptr(out), ptr(scores), np.int32(h), np.int32(hkv), np.int32(nk),
            np.int32(d), np.float32(scale)))
