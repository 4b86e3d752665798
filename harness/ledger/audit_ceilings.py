"""A row's ceilings figures against the ceilings row it names (``bench ledger verify``): its
floor's copy and matmul ceilings and its ``*_frac`` metrics are copies or quotients of that
row's, so any difference beyond float rounding is a forged or stale figure."""

from __future__ import annotations

import math
from typing import Any

from harness.jsonsafe import number
from harness.ledger.payloads import ConfigFields, Floor, FloorCeilings
from harness.ledger.rows import OutcomeRow
from harness.measurement.ceilings import Ceilings
from harness.measurement.floor import matmul_ceiling

# A figure copied or divided from the ceilings row: equal to it but for float rounding.
CEILINGS_RTOL = 1e-9


def ceilings_disagreements(row: OutcomeRow, ceilings: dict[str, Any]) -> list[str]:
    """Where a row's ceilings figures (its ``floor``'s copy and matmul ceilings, the
    ``*_frac`` metrics) disagree with the ``ceilings`` row its ``ceilings_ref`` names."""
    ceil = Ceilings.from_row(ceilings)
    dtype = ConfigFields.from_row(row.config or {}).dtype
    out: list[str] = []

    def check(where: str, stored: Any, expected: float | None) -> None:
        got = number(stored)
        if got is None and expected is None:
            return
        if got is None or expected is None or not math.isclose(got, expected, rel_tol=CEILINGS_RTOL):
            out.append(f"{where} {stored} (ceilings row gives {expected})")

    floor = Floor.from_row(row.floor)
    for part in ("rounds", "sustained"):
        used = FloorCeilings.from_row(getattr(floor, part)) if floor is not None else None
        if used is not None:
            check(f"floor.{part}.copy_gbps", used.copy_gbps, ceil.copy_gbps)
            check(f"floor.{part}.matmul_tflops", used.matmul_tflops, matmul_ceiling(ceil, dtype))
    metrics = row.metrics
    if isinstance(metrics, dict):
        expected = ceil.fractions({rate: number(metrics.get(rate)) for rate in ("tflops", "gbps", "kv_gbps")}, dtype)
        for frac, value in expected.items():
            if frac in metrics:
                check(f"metrics.{frac}", metrics[frac], value)
    return out


def ceilings_figures(row: OutcomeRow) -> list[str]:
    """The ceilings figures a row holds (floor, ``*_frac`` metrics): a row naming no ceilings row must hold none."""
    held = ["floor"] if row.floor is not None else []
    metrics = row.metrics
    if isinstance(metrics, dict):
        held += [f"metrics.{k}" for k in ("tflops_frac", "gbps_frac", "kv_gbps_frac") if metrics.get(k) is not None]
    return held
