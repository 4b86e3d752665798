"""Kernels under test, imported as ``bench_kernels`` (harness.KERNELS_PACKAGE). Each public
module registers kernels with ``@kernel`` (``from harness import kernel``).

See docs/kernels.md for the contract and a worked example.
"""
