"""Research scripts: kernel explorations and measurement tables, outside the installed package.

Run from the repository root as ``python3 -m research.NAME``; see research/README.md.
"""
