"""bench: a pre-registered benchmark harness for GPU kernels.

Rooms: ``governance`` (git guard, registration, bar language, ledger, verdict),
``measurement`` (timing, clocks, memory model, correctness, ceilings),
``workloads`` (shapes, FLOP/byte formulas, inputs, float64 references),
``sweep`` (plan and run a registered grid), ``reporting`` (renderers), ``cli`` (thin).
"""

__version__ = "0.1.0"
