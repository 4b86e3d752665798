"""``gemm_triton``: GEMM with bias + GELU fused into its tile loop's epilogue, for workload
``gemm_bias_gelu`` (the code: kernels/_triton_gemm_impl.py, imported on first call).

Numerics: tl.dot with float32 accumulation (full float32 products for float32 lines, not
TF32), bias and GELU (exact erf, or tanh) on the float32 accumulator, one rounding of out.

Devices: CUDA; the CPU only under ``TRITON_INTERPRET=1`` set before this module is imported
(as triton_flash), slow, for tests.
"""

from __future__ import annotations

import os

from harness import kernel

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = ("cpu", "cuda") if _INTERPRET else ("cuda",)


@kernel("gemm_triton", workloads=("gemm_bias_gelu",), dtypes=("float16", "bfloat16", "float32"),
        devices=DEVICES, requires=("triton",),
        numerics={"gemm": "tl.dot, float32 accumulation (ieee float32 products for float32)",
                  "epilogue": "bias + GELU on the float32 accumulator in registers, one rounding of out"})
def gemm_triton(x, w, bias, out, *, gelu):
    """Triton GEMM, bias + GELU fused in the epilogue: the pre-activation never reaches memory."""
    from ._triton_gemm_impl import gemm_bias_gelu

    gemm_bias_gelu(x, w, bias, out, gelu)
