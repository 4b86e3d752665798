"""Kernels under test. Each public module registers kernels with ``@kernel``.

See docs/kernels.md for the contract and a worked example.
"""

from kernels._registry import KernelSpec, get_kernel, kernel, load_kernels

__all__ = ["KernelSpec", "get_kernel", "kernel", "load_kernels"]
