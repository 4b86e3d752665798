"""The poison and the bit-level comparisons of the checks.

``out`` is filled with a quiet NaN of a private bit pattern before every checked call, so
an element the kernel never wrote is told apart from a computed NaN by its bits; outputs
and inputs are compared as same-width integers, NaN payloads included.
"""

from __future__ import annotations

from harness.workloads import dtype_name  # noqa: F401 (figures.py, figures_fused.py read it here)

# The poison: a quiet NaN with a payload no arithmetic produces (x86 and CUDA both make
# canonical NaNs), so "never written" is a bit-pattern test, not a guess.
POISON_BITS = {"float16": 0x7E5A, "bfloat16": 0x7FDA, "float32": 0x7FC0DA5A,
               "float64": 0x7FF8DA5ADA5ADA5A}
_INT_VIEW = {2: "int16", 4: "int32", 8: "int64"}


def unwritten_mask(t):
    """Bool tensor: elements of ``t`` that still hold the poison bit pattern."""
    import torch

    bits = POISON_BITS.get(dtype_name(t.dtype))
    if bits is None:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    return t.view(getattr(torch, _INT_VIEW[t.element_size()])) == bits


def poison_(out):
    """Fill ``out`` with the poison NaN (in place, same buffer)."""
    import torch

    name = dtype_name(out.dtype)
    if name not in POISON_BITS:
        raise ValueError(f"cannot poison a {name} tensor (poison is defined for {', '.join(POISON_BITS)})")
    out.view(getattr(torch, _INT_VIEW[out.element_size()])).fill_(POISON_BITS[name])
    return out


def as_bits(t):
    """``t`` viewed as same-width integers, so NaN payloads compare exactly."""
    import torch

    return t.view(getattr(torch, _INT_VIEW[t.element_size()])) if t.element_size() in _INT_VIEW else t


def bits_equal(a, b) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(as_bits(a), as_bits(b))


def bits_diff(a, b):
    """Bool tensor (flat): where a and b differ bit for bit."""
    return as_bits(a).reshape(-1) != as_bits(b).reshape(-1)
