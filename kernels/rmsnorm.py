"""torch kernels of workload ``rmsnorm`` (harness/workloads/rmsnorm.py).

* ``rmsnorm_torch``: Hugging Face's LlamaRMSNorm, the code most models run: the row in
  float32, its mean square, rsqrt, the normalised row rounded to the dtype, then times the
  weight (a second rounding); with a residual, the add first (rounded to the dtype, as the
  next block reads it).
* ``rmsnorm_compile``: the same code compiled by torch.compile (kernels/_compile.py), one
  fused kernel per shape.
"""

from __future__ import annotations

from harness import kernel
from ._compile import compile_available

DTYPES = ("float16", "bfloat16", "float32")


def _norm(s, weight, eps):
    """LlamaRMSNorm's forward on the rows of ``s``, returned in ``s``'s dtype."""
    import torch

    h = s.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(s.dtype)


def _scratch(cfg) -> int:
    """At most two float32 copies of the rows (the upcast, the normalised rows) and two in the
    dtype (the rounded rows, the weight product) live at once."""
    return cfg.tokens * cfg.hidden * 2 * (4 + cfg.elem_bytes)


@kernel("rmsnorm_torch", workloads=("rmsnorm",), dtypes=DTYPES, memory=_scratch,
        numerics={"norm": "float32 (LlamaRMSNorm)", "rounding": "normalised row to the dtype, then times weight"})
def rmsnorm_torch(x, weight, *rest, eps):
    """LlamaRMSNorm in torch ops (float32 statistics, two roundings), residual add first."""
    import torch

    if len(rest) == 3:  # residual, out, residual_out
        residual, out, residual_out = rest
        torch.add(x, residual, out=residual_out)
        out.copy_(_norm(residual_out, weight, eps))
    else:
        (out,) = rest
        out.copy_(_norm(x, weight, eps))


def _compiled_rmsnorm(x, weight, *rest, eps):
    if len(rest) == 3:  # residual, out, residual_out
        residual, out, residual_out = rest
        s = x + residual
        residual_out.copy_(s)
        out.copy_(_norm(s, weight, eps))
    else:
        (out,) = rest
        out.copy_(_norm(x, weight, eps))


@kernel("rmsnorm_compile", workloads=("rmsnorm",), dtypes=DTYPES, available=compile_available,
        numerics={"compiler": "torch.compile (inductor), dynamic=False, fullgraph=True",
                  "norm": "LlamaRMSNorm's float32 code, fused by inductor"})
def rmsnorm_compile(x, weight, *rest, eps):
    """torch.compile of LlamaRMSNorm (and the residual add): one fused kernel per shape."""
    from ._compile import compiled

    compiled(_compiled_rmsnorm)(x, weight, *rest, eps=eps)
