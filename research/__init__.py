"""Research scripts: kernel explorations and measurement tables, outside the installed package.

Run from the repository root as ``python3 -m research.NAME``; see research/README.md.
"""

# harness first: in a checkout, the shipped kernels (``bench_kernels``) are the kernels/
# folder that harness's import finder maps beside it.
import harness  # noqa: F401
