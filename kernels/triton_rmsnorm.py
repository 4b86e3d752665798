"""``rmsnorm_triton``: RMSNorm (and the fused residual add) in Triton, one row per program,
for workload ``rmsnorm`` (the code: kernels/_triton_rmsnorm_impl.py, imported on first call).

Numerics: the row (and the residual sum) in float32, the mean square in float32, one
rounding of out; residual_out is the float32 sum rounded once.

Devices: CUDA; the CPU only under ``TRITON_INTERPRET=1`` set before this module is imported.
"""

from __future__ import annotations

import os

from harness import kernel

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = ("cpu", "cuda") if _INTERPRET else ("cuda",)


@kernel("rmsnorm_triton", workloads=("rmsnorm",), dtypes=("float16", "bfloat16", "float32"), devices=DEVICES,
        requires=("triton",), numerics={"norm": "float32 row and mean square, one rounding of out"})
def rmsnorm_triton(x, weight, *rest, eps):
    """Triton RMSNorm, one row per program, residual add fused (float32 math, one rounding)."""
    from ._triton_rmsnorm_impl import rmsnorm

    if len(rest) == 3:  # residual, out, residual_out
        residual, out, residual_out = rest
        rmsnorm(x, weight, out, eps, residual, residual_out)
    else:
        (out,) = rest
        rmsnorm(x, weight, out, eps)
