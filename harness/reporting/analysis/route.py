"""`bench route`: a dispatch table per shape as in shape-aware attention, from ledgers alone.

Per shape (config key), the fastest kernel (lowest median in the interleaved rounds — the
protocol its speedup comes from, shown beside it with the rounds' clock) among those that passed every
check there — a result row that is neither rig-noisy nor impossible, and no failing row
(incorrect, crashed, impossible) for that kernel at that shape in any of the lines — and
whose speedup CI lies wholly above 1; otherwise the baseline. A kernel measured at one
shape in several lines is judged by its weakest measurement there (lowest CI low).

Ties: kernels whose speedup CIs overlap the fastest one's cannot be told apart at that
shape, so the one tied-best at the most shapes of the table wins (a smaller dispatcher,
fewer kernels to ship), then the lower median; the route's ``why`` names the kernels it
tied with. The table is written (``render/route.py``) as JSON and as a small dispatcher
module that imports nothing, keyed by the workload's axes; a shape it has not seen takes the
route of the nearest measured size (``Workload.size_axis``: seq_len for attention and decode)
with the same other fields (the baseline only where there is none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.ledger.line_payloads import RegistrationSummary
from harness.ledger.payloads import Metrics
from harness.errors import UserError
from harness.jsonsafe import number
from harness.vocab.outcomes import FAILING_KINDS, RESULT
from harness.vocab.devices import device_of
from harness.reporting.analysis.lines import LineView
from harness.reporting.analysis.protocol import pair_text, timed
from harness.registry import get_workload
from harness.vocab.metrics import INTERLEAVED
from harness.workloads import SHIPPED_WORKLOADS

ROUTE_SCHEMA = 3  # 2: each route carries the interleaved medians and clock its speedup comes from; 3: "candidate", not "kernel"
CONFIG_FIELDS = ("workload", "batch", "heads", "kv_heads", "seq_len", "head_dim", "dtype", "causal")
# The size axis attention's and decode's routes fall back along.
SEQ_LEN = "seq_len"
# Axis types a nearest-size fallback can take a ratio of.
NUMERIC_AXES = (int, float)


@dataclass(frozen=True)
class Route:
    config_key: str
    config: dict
    kernel: str
    speedup: float  # of the chosen kernel over the baseline (1.0 for the baseline)
    ci_low: float
    ci_high: float
    line: str | None  # where the chosen result came from (None: baseline)
    seq: int | None
    why: str  # why the baseline, or which kernels were passed over
    # The speedup's own figures, from the interleaved rounds (None where no result was measured):
    # the chosen kernel's median (the baseline's for a baseline route), the baseline's, the clock.
    ms: float | None = None
    baseline_ms: float | None = None
    sm_mhz: float | None = None

    def times(self) -> str:
        """``1.968 ms vs baseline 11.31 ms at 1980 MHz``; a baseline route: the baseline's alone
        ("—" where nothing was measured)."""
        if self.baseline_ms is None:
            return "—"
        if self.line is None:
            return f"baseline {self.baseline_ms:.4g} ms" + ("" if self.sm_mhz is None else f" at {self.sm_mhz:.0f} MHz")
        return pair_text(self.ms, self.baseline_ms, self.sm_mhz)


@dataclass(frozen=True)
class RouteTable:
    baseline: str
    device: str
    lines: tuple[str, ...]
    routes: tuple[Route, ...]
    # The dispatcher's key: "workload", then the workload's axes in order; the axis an unseen
    # shape falls back along (None: exact shapes only, the workload declares no numeric size).
    fields: tuple[str, ...] = CONFIG_FIELDS
    size_axis: str | None = SEQ_LEN

    @property
    def geomean(self) -> float:
        return math.exp(sum(math.log(r.speedup) for r in self.routes) / len(self.routes))

    @property
    def worst(self) -> Route:
        return min(self.routes, key=lambda r: r.speedup)

    def as_json(self) -> dict:
        return {"schema": ROUTE_SCHEMA, "baseline": self.baseline, "device": self.device, "lines": list(self.lines),
                "geomean_speedup": self.geomean, "worst_speedup": self.worst.speedup,
                "routes": [{"config_key": r.config_key, "config": r.config, "candidate": r.kernel, "speedup": r.speedup,
                            "speedup_ci": [r.ci_low, r.ci_high], "line": r.line, "seq": r.seq, "why": r.why,
                            "interleaved": {"ms": r.ms, "baseline_ms": r.baseline_ms, "sm_mhz": r.sm_mhz}}
                           for r in self.routes]}


def _ci_low(row: dict) -> float:
    """The row's speedup CI low as a float (NaN where none could be formed or none is given)."""
    lo = number(Metrics.from_row(row.metrics).speedup_ci_low)
    return math.nan if lo is None else lo


def _worse(a: float, b: float) -> bool:
    """``a`` is a worse CI low than ``b``: lower, or NaN (no interval) where ``b`` has one."""
    return (math.isnan(a) and not math.isnan(b)) or a < b


def _or_inf(v) -> float:
    x = number(v)
    return math.inf if x is None or math.isnan(x) else x


def _interleaved_ms(row: dict) -> float:
    """The candidate's median in the interleaved rounds (inf where none): a route compares
    kernels in the protocol their speedups come from, never one's sustained median with
    another's interleaved one."""
    return _or_inf(timed(row, INTERLEAVED).median_ms)


def _failed(row: dict) -> bool:
    return row.kind in FAILING_KINDS or (row.kind == RESULT and bool(row.impossible))


def build(views: list[LineView]) -> RouteTable:
    """The dispatch table over every shape any of ``views`` measured (see module docstring)."""
    baselines = {RegistrationSummary.from_row(v.registration).baseline for v in views}
    if len(baselines) != 1:
        raise UserError(f"lines {', '.join(v.line for v in views)} time against different baselines "
                        f"({', '.join(sorted(map(str, baselines)))}): a route needs speedups over one baseline")

    (baseline,) = baselines
    fields, size_axis = _key_fields(views)
    outcomes = [(v.line, r) for v in views for r in v.outcomes().values()]
    devices = sorted({device_of(r) for _, r in outcomes if r.kind == RESULT}, key=str)
    if len(devices) > 1:
        raise UserError(f"the lines' results come from {len(devices)} devices "
                        f"({', '.join(g or d for d, g in devices)}): route one device's lines at a time")
    if not devices:
        raise UserError(f"lines {', '.join(v.line for v in views)} have no result rows: sweep them first")
    by_shape: dict[str, list[tuple[str, dict]]] = {}
    for line, r in outcomes:
        by_shape.setdefault(r.config_key, []).append((line, r))
    shapes = []  # per shape: (key, rows, its tied-best kernels, passed over)
    for key in sorted(by_shape):
        rows = by_shape[key]
        failed = {r.candidate for _, r in rows if _failed(r)}
        best: dict[str, tuple[str, dict]] = {}
        passed_over = []
        for line, r in rows:
            k = r.candidate
            if r.kind != RESULT or k in failed or r.role == "baseline":
                continue
            if r.rig_noisy:
                passed_over.append(f"{k}: rig-noisy")
                continue
            if k not in best or _worse(_ci_low(r), _ci_low(best[k][1])):  # its worst result here
                best[k] = (line, r)
        eligible = []
        for k, (line, r) in sorted(best.items()):
            lo = _ci_low(r)
            if lo > 1:
                eligible.append((line, r))
            else:
                passed_over.append(f"{k}: speedup CI low {lo:.3f} ≤ 1" if not math.isnan(lo) else f"{k}: no speedup CI")
        passed_over += [f"{k}: failed here" + (" (the baseline)" if k == baseline else "") for k in sorted(failed)]
        shapes.append((key, rows, _tied(eligible), passed_over))
    wins: dict[str, int] = {}
    for _, _, tied, _ in shapes:
        for _, r in tied:
            wins[r.candidate] = wins.get(r.candidate, 0) + 1
    routes = []
    for key, rows, tied, passed_over in shapes:
        config = next(r.config for _, r in rows)
        if tied:
            line, r = min(tied, key=lambda lr: (-wins[lr[1].candidate], _interleaved_ms(lr[1]), lr[1].candidate))
            others = sorted(x.candidate for _, x in tied if x.candidate != r.candidate)
            if others:
                passed_over = [f"tied with {', '.join(others)} (speedup CIs overlap; routed at more shapes, or faster)",
                               *passed_over]
            m = Metrics.from_row(r.metrics)
            cand, base = timed(r, INTERLEAVED), timed(r, INTERLEAVED, "baseline")
            routes.append(Route(key, config, r.candidate, m.speedup, m.speedup_ci_low, m.speedup_ci_high,
                                line, r.seq, "; ".join(passed_over), cand.median_ms, base.median_ms, cand.sm_mhz))
        else:
            measured = next((r for _, r in rows if r.kind == RESULT), None)
            base = timed(measured, INTERLEAVED, "baseline") if measured is not None else None
            routes.append(Route(key, config, baseline, 1.0, 1.0, 1.0, None, None,
                                "; ".join(passed_over) or "no kernel measured here",
                                None if base is None else base.median_ms, None if base is None else base.median_ms,
                                None if base is None else base.sm_mhz))
    device, gpu = devices[0]
    return RouteTable(baseline, gpu or device or "?", tuple(v.line for v in views), tuple(routes), fields, size_axis)


def _workload_fields(name) -> tuple[tuple[str, ...], str | None]:
    """(the dispatcher's key fields, the size axis) of workload ``name``: attention's and
    decode's as their routes always were; another's from its declaration (installed here)."""
    if name in (None, *SHIPPED_WORKLOADS):
        return CONFIG_FIELDS, SEQ_LEN
    try:
        wl = get_workload(name)
    except UserError as exc:
        raise UserError(f"bench route keys a route by the workload's axes: {exc}") from None
    types = {a.name: a.type for a in wl.axes}
    size = wl.size_axis if types.get(wl.size_axis) in NUMERIC_AXES else None
    return ("workload", *wl.axis_names), size


def _key_fields(views: list[LineView]) -> tuple[tuple[str, ...], str | None]:
    """The one key (fields, size axis) every line's workload routes by; refused where they differ."""
    names = sorted({RegistrationSummary.from_row(v.registration).workload for v in views}, key=str)
    keyed = {_workload_fields(n) for n in names}
    if len(keyed) != 1:
        raise UserError(f"lines {', '.join(v.line for v in views)} measure workloads {', '.join(map(str, names))}, "
                        f"whose shapes have different axes: route one workload's lines at a time")
    return keyed.pop()


def _tied(eligible: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The fastest eligible kernel (lowest interleaved median) and every one whose speedup CI
    overlaps its own: the kernels this shape cannot tell apart."""
    if not eligible:
        return []
    _, fastest = min(eligible, key=lambda lr: (_interleaved_ms(lr[1]), lr[1].candidate))
    lo, hi = _ci_low(fastest), number(Metrics.from_row(fastest.metrics).speedup_ci_high)
    return [(line, r) for line, r in eligible
            if r is fastest or (hi is not None and _ci_low(r) <= hi and lo <= _or_inf(Metrics.from_row(r.metrics).speedup_ci_high))]
