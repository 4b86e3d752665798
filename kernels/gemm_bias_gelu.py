"""The fusion ladder's torch rungs for workload ``gemm_bias_gelu`` (harness/workloads/gemm.py).

* ``gemm_torch``, the bottom rung: three kernels, each a round trip of the (m, n) tile
  through memory: the GEMM writes x·wᵀ into out, the bias add reads and writes it, GELU
  reads and writes it again (five crossings of m·n elements against the fused one).
* ``gemm_cublaslt``: the rung that costs three lines, cuBLASLt's fused bias + GELU epilogue
  through ``torch._addmm_activation(bias, x, wᵀ, use_gelu=True)``. On CUDA that is
  CUBLASLT_EPILOGUE_GELU_BIAS, the tanh approximation, where torch's Lt path applies, and
  ``gelu(…, "tanh")`` after the GEMM where it does not (aten/src/ATen/native/cuda/Blas.cpp):
  so it computes ``gelu = "tanh"`` lines only, and declines exact ones. On the CPU torch
  applies the exact GELU instead, and no cuBLASLt is involved: the kernel is CUDA-only.
* ``gemm_compile``: the bottom rung's code compiled by torch.compile, the peer a user gets
  for one line (kernels/_compile.py).
"""

from __future__ import annotations

from harness import kernel
from ._compile import compile_available

DTYPES = ("float16", "bfloat16", "float32")
# torch.nn.functional.gelu's name for each GELU kind of the workload.
APPROXIMATE = {"exact": "none", "tanh": "tanh"}


@kernel("gemm_torch", workloads=("gemm_bias_gelu",), dtypes=DTYPES,
        numerics={"gemm": "torch.matmul (cuBLAS on CUDA), rounded to the dtype",
                  "bias": "separate add, rounded to the dtype", "gelu": "separate in-place gelu, float32 math"})
def gemm_torch(x, w, bias, out, *, gelu):
    """matmul → add bias → gelu, three kernels in place in out (the unfused baseline)."""
    import torch

    torch.matmul(x, w.t(), out=out)
    out.add_(bias)
    torch.ops.aten.gelu_(out, approximate=APPROXIMATE[gelu])


def _cublaslt_supports(cfg) -> str | None:
    if cfg.gelu != "tanh":
        return ("cuBLASLt's GELU epilogue is the tanh approximation (CUBLASLT_EPILOGUE_GELU_BIAS): "
                "it cannot compute gelu = exact")
    return None


@kernel("gemm_cublaslt", workloads=("gemm_bias_gelu",), dtypes=DTYPES, devices=("cuda",),
        supports=_cublaslt_supports,
        numerics={"gemm": "cuBLASLt, float32 accumulation", "epilogue": "GELU_BIAS (tanh GELU) on the accumulator"})
def gemm_cublaslt(x, w, bias, out, *, gelu):
    """torch._addmm_activation: cuBLASLt's fused bias + GELU (tanh) epilogue, straight into out."""
    import torch

    del gelu  # always tanh: _cublaslt_supports declines the rest
    torch._addmm_activation(bias, x, w.t(), use_gelu=True, out=out)


def _unfused(x, w, bias, out, approximate: str):
    """The bottom rung's three ops, written into out: what torch.compile is given."""
    import torch

    out.copy_(torch.nn.functional.gelu(x @ w.t() + bias, approximate=approximate))


@kernel("gemm_compile", workloads=("gemm_bias_gelu",), dtypes=DTYPES,
        available=compile_available,
        numerics={"compiler": "torch.compile (inductor), dynamic=False, fullgraph=True",
                  "gemm": "inductor's choice (extern cuBLAS mm or a Triton template)",
                  "epilogue": "bias + gelu fused by inductor where it can"})
def gemm_compile(x, w, bias, out, *, gelu):
    """torch.compile of matmul + bias + gelu (inductor fuses the epilogue where it can)."""
    from ._compile import compiled

    compiled(_unfused)(x, w, bias, out, APPROXIMATE[gelu])
