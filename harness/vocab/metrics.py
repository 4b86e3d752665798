"""The metric table: every number a `result` row carries in ``metrics``, in one place.

The bar language accepts exactly these names, the sweep's result rows carry exactly these
keys (``result_metrics`` refuses any other set), reports take their units, formats and protocols from
here, and the README's metric list is generated from it (tests/test_metrics.py checks it is
current). Adding a metric is one row here plus its computation in ``pipeline/rates.py``.

A result row holds two measurements of its candidate: the interleaved rounds (every arm in
turn under one clock: the speedup's) and, on a line whose bar judges an absolute rate, the
sustained phase (its calls back to back: the rates'; ``measurement/timing/sustained.py``). Each
metric's ``protocol`` says which one it was computed from, so a renderer shows a figure
beside the time and clock of that protocol and names it; ``protocol(name, row)`` resolves it
for one row.

A metric with a ``param`` (``tflops_at(F)``) is no key of a row: a bar states its argument
and ``derived`` computes it from the row's own figures of one protocol where it is read. Nor is
one read ``from_ledger`` (``speedup_next_low`` / ``speedup_next_high``, the next-run interval):
it is computed where it is read from the row's own CI and the between-run variance of the
line's ledger (governance/nextrun.py), so no stored row changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from harness.jsonsafe import number

# The two timing protocols a result row's figures come from (a row's ``rate_protocol`` names one).
INTERLEAVED = "interleaved"  # the interleaved rounds: each arm in turn, one clock, each call isolated
SUSTAINED = "sustained"  # one arm's calls back to back after a warm-up, as do_bench times them
PROTOCOLS = (INTERLEAVED, SUSTAINED)
# A metric's protocol in the table: INTERLEAVED, or RATES — the row's own ``rate_protocol``
# (sustained when the bar judges an absolute rate and the mode is not graph, else interleaved).
RATES = "rates"
PROTOCOL_TEXT = {  # what each protocol is, where a renderer explains its columns
    INTERLEAVED: "each arm in turn under one clock, each call isolated",
    SUSTAINED: "the candidate's calls back to back after a warm-up load, as do_bench times them, at the clock "
               "a loop settles at",
}


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str  # what it is and how it is computed
    higher_is_better: bool | None  # None: neither (closer to 1, or a condition of the rig)
    fmt: str = ".4g"  # how reports print it
    label: str | None = None  # its column header where a report gives it a column of its own
    # Reports show it in the timing, speedup or control columns (or leave it out): no column
    # of its own — unless it has a label and the line's bar judges it (decode's kv_gbps_frac).
    # A metric with neither a label nor this gets a column under its name.
    shown_elsewhere: bool = False
    rate: bool = False  # an absolute rate: a bar judging it times compute-bound configs with lead calls
    needs: str | None = None  # None: every result has it; else what it needs to be known
    # What it was computed from: INTERLEAVED, or RATES (the row's ``rate_protocol``). Every
    # row of the table states it; renderers show the figure beside that protocol's time and clock.
    protocol: str = ""
    # What a bar gives it in parentheses (None: it takes nothing and is a key of every result
    # row); a metric with one is computed where it is read (``derived``), never stored.
    param: str | None = None
    # The row metric it restates (tflops_at: tflops at a stated clock), for reports and plots.
    of: str | None = None
    # Computed where read from the row and the line's ledger (the next-run interval: the row's
    # CI widened by the between-run variance, governance/nextrun.py), never stored in a row.
    from_ledger: bool = False

    def __post_init__(self):
        if self.protocol not in (INTERLEAVED, RATES):
            raise ValueError(f"metric {self.name}: protocol must be {INTERLEAVED!r} or {RATES!r}, "
                             f"got {self.protocol!r}")


METRICS: tuple[Metric, ...] = (
    Metric("speedup", "×", "baseline median over candidate median, from the interleaved rounds (`[timing] stop = "
           "\"statistic\"`: the median of the per-round ratios over the stop's rounds)", True,
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("speedup_ci_low", "×", "lower bound of the speedup's paired bootstrap 95% confidence interval (statistic "
           "stop: of the interval the stop judged, at its look confidence)", True,
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("speedup_ci_high", "×", "upper bound of the speedup's paired bootstrap 95% confidence interval (statistic "
           "stop: of the interval the stop judged)", True,
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("tflops", "TFLOP/s", "useful FLOPs (formulas.flops) over ms", True,
           label="TFLOP/s", rate=True, protocol=RATES),
    Metric("gbps", "GB/s", "fewest bytes any implementation moves (formulas.min_bytes) over ms", True,
           label="GB/s", rate=True, protocol=RATES),
    Metric("kv_gbps", "GB/s", "K and V cache bytes (formulas.kv_bytes) over ms: decode's bandwidth",
           True, label="KV GB/s", rate=True, shown_elsewhere=True, protocol=RATES),
    Metric("ms", "ms", "median time of one candidate call: of its calls back to back (sustained phase) when the "
           "bar judges a rate, else of the interleaved rounds", False, rate=True, shown_elsewhere=True,
           protocol=RATES),
    Metric("interleaved_ms", "ms", "the candidate's median in the interleaved rounds (the speedup's numerator)",
           False, shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("baseline_ms", "ms", "median time of one baseline call, interleaved with the candidate's", False,
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("control_ms", "ms", "median time of one control call (the baseline again, its own buffers)", False,
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("control", "×", "baseline median over control median: 1 on a quiet rig (rig-noisy outside the tolerance; "
           "statistic stop: the median of the per-round ratios, as the speedup)",
           None, shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("tflops_frac", "fraction", "tflops over the device's measured matmul ceiling for the dtype", True,
           fmt=".1%", label="of measured matmul", rate=True, needs="ceilings", protocol=RATES),
    Metric("gbps_frac", "fraction", "gbps over the device's measured copy bandwidth", True,
           fmt=".1%", label="of measured copy", rate=True, needs="ceilings", protocol=RATES),
    Metric("kv_gbps_frac", "fraction", "kv_gbps over the device's measured copy bandwidth", True,
           fmt=".1%", label="KV of measured copy", rate=True, needs="ceilings", shown_elsewhere=True, protocol=RATES),
    Metric("host_us", "µs", "median host time to enqueue one timed candidate call", False, fmt=".3g",
           label="host µs", protocol=INTERLEAVED),
    Metric("baseline_host_us", "µs", "median host time to enqueue one timed baseline call", False, fmt=".3g",
           shown_elsewhere=True, protocol=INTERLEAVED),
    Metric("sm_mhz", "MHz", "mean SM clock while ms was measured (NVML)", None, needs="nvml",
           shown_elsewhere=True, protocol=RATES),
    Metric("power_w", "W", "mean board power while ms was measured (NVML)", None, needs="nvml",
           shown_elsewhere=True, protocol=RATES),
    Metric("cycles", "kcycles", "thousands of SM cycles per candidate call: the median over its timed calls of the "
           "call's time × the SM clock NVML read during it (its interleaved round, or its batch of the sustained "
           "loop) — a compute-bound call's cost whatever clock the card's power limit holds", False,
           label="kcycles", rate=True, needs="nvml", protocol=RATES),
    Metric("tflops_at", "TFLOP/s", "tflops at the SM clock F (MHz) a bar states, tflops_at(F): tflops × F over the "
           "clock the candidate ran at in its timed calls, its cycles over its ms (kcycles / ms = MHz)", True,
           rate=True, needs="nvml", protocol=RATES, param="F", of="tflops"),
    Metric("speedup_next_low", "×", "lower end of the next-run interval: where another run (another card, another "
           "sweep) will read the speedup, at 95% — the speedup's own CI widened by the between-run variance the line's "
           "ledger shows (replicates, else its controls, never below a floor: docs/measurement.md#the-next-runs-speedup)",
           True, protocol=INTERLEAVED, from_ledger=True),
    Metric("speedup_next_high", "×", "upper end of the next-run interval (see speedup_next_low)", True,
           protocol=INTERLEAVED, from_ledger=True),
)

# The numbers an `integration` row carries (commands/integration.py): one row per candidate of
# a line with [integration], its model step timed with the baseline, the candidate and the
# baseline again, interleaved. A bar clause over one of these aggregates the integration
# rows (filterable by candidate only); a bare ``step_gain >= 0.02`` is ``min(step_gain)``.
STEP_METRICS: tuple[Metric, ...] = (
    Metric("step_ms", "ms", "median time of one model step with the candidate behind the attention hook", False,
           protocol=INTERLEAVED),
    Metric("step_baseline_ms", "ms", "median time of one model step with the baseline, interleaved with the "
           "candidate's", False, protocol=INTERLEAVED),
    Metric("step_control", "×", "baseline step median over control step median: 1 on a quiet rig", None,
           protocol=INTERLEAVED),
    Metric("step_gain", "fraction", "baseline step median over candidate step median, minus 1", True, fmt="+.2%",
           protocol=INTERLEAVED),
    Metric("step_gain_predicted", "fraction", "the step gain the kernel's probe speedup predicts: the baseline's "
           "in-situ op time per step cut by 1 − 1/speedup", True, fmt="+.2%", protocol=INTERLEAVED),
    Metric("op_share", "fraction", "the baseline's in-situ op time per step over its step time", None, fmt=".1%",
           protocol=INTERLEAVED),
    Metric("insitu_ms", "ms", "median time of one candidate call inside the step (timed at the hook)", False,
           protocol=INTERLEAVED),
    Metric("insitu_baseline_ms", "ms", "median time of one baseline call inside the step (timed at the hook)",
           False, protocol=INTERLEAVED),
    Metric("probe_factor", "×", "the candidate's probe time (its grid row at the step's shape) over its in-situ "
           "time", None, protocol=INTERLEAVED),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
NAMES: tuple[str, ...] = tuple(m.name for m in METRICS if m.param is None and not m.from_ledger)  # a row's keys
PARAM_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS if m.param is not None)  # computed where read
# Computed where read from the row and its ledger (governance/nextrun.py): the next-run interval.
LEDGER_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS if m.from_ledger)
STEP_NAMES: tuple[str, ...] = tuple(m.name for m in STEP_METRICS)
BY_NAME.update({m.name: m for m in STEP_METRICS})
RATE_METRICS = frozenset(m.name for m in METRICS if m.rate)
# The rates a device ceiling bounds: each one a ``<rate>_frac`` metric divides by its ceiling. The
# sweep judges every one of them, for every arm, against its ceiling (pipeline/rates.py).
CEILING_RATES = tuple(m.name.removesuffix("_frac") for m in METRICS if m.needs == "ceilings")
# Figures had only from an SM clock: a bar naming one is refused where none is read (the CPU).
SM_CLOCK_METRICS = frozenset({"cycles", "tflops_at"})
# The SM clocks a bar may state (MHz): no GPU clocks its SMs anywhere near 10 GHz, so a larger
# figure is a unit slip (Hz, kHz) and is refused rather than read as a clock.
MAX_STATED_MHZ = 10_000.0


def rate_protocol(row) -> str:
    """The protocol a result row's rates (and ``ms``, ``sm_mhz``, ``power_w``) come from. Rows
    older than the sustained phase carry no ``rate_protocol``: theirs were interleaved."""
    p = row.rate_protocol or INTERLEAVED
    if p not in PROTOCOLS:
        raise ValueError(f"row {row.seq}: rate_protocol {p!r} is not one of {', '.join(PROTOCOLS)}")
    return p


def protocol(name: str, row: dict) -> str:
    """The protocol metric ``name`` of result row ``row`` was computed from (INTERLEAVED or
    SUSTAINED); KeyError for a name the table does not declare."""
    p = BY_NAME[name].protocol
    return rate_protocol(row) if p == RATES else p


def derived(name: str, metrics: Mapping, at: float) -> float | None:
    """Parameterised metric ``name`` (``PARAM_NAMES``) of a result row's ``metrics`` with the
    argument a bar states, ``at``; None where the row lacks a figure it is made of (rows from
    before cycles were recorded, the CPU's).

    ``tflops_at(F)``: the rate at SM clock F, tflops × F / (cycles / ms) — the candidate's own
    clock over its timed calls, taken from the same protocol as the rate (the row's
    ``rate_protocol``); the same as FLOPs × F over the cycles of one call."""
    if name != "tflops_at":
        raise KeyError(f"{name!r} is not a parameterised metric ({', '.join(PARAM_NAMES)})")
    tflops, ms, kcycles = (number(metrics.get(k)) for k in ("tflops", "ms", "cycles"))
    if tflops is None or ms is None or kcycles is None or not all(map(math.isfinite, (tflops, ms, kcycles))):
        return None
    return tflops * at * ms / kcycles if kcycles > 0 else None


def result_metrics(values: dict) -> dict:
    """A result row's ``metrics``: exactly the table's names, in its order (a metric computed
    but not declared, or declared but not computed, is a bug caught on the first result)."""
    if set(values) != set(NAMES):
        extra, missing = sorted(set(values) - set(NAMES)), sorted(set(NAMES) - set(values))
        raise ValueError(f"result metrics differ from harness/vocab/metrics.py METRICS: "
                         f"not declared {extra}, not computed {missing}")
    return {name: values[name] for name in NAMES}


def step_metrics(values: dict) -> dict:
    """An integration row's ``metrics``: exactly STEP_METRICS' names, in order (as ``result_metrics``)."""
    if set(values) != set(STEP_NAMES):
        raise ValueError(f"integration metrics differ from STEP_METRICS: not declared "
                         f"{sorted(set(values) - set(STEP_NAMES))}, not computed {sorted(set(STEP_NAMES) - set(values))}")
    return {name: values[name] for name in STEP_NAMES}


def markdown() -> str:
    """The README's metric table (generated; tests/test_metrics.py checks it is current)."""
    lines = ["| metric | unit | higher is better | measured in | what it is |", "| --- | --- | --- | --- | --- |"]
    better = {True: "yes", False: "no", None: "—"}
    measured = {INTERLEAVED: "interleaved rounds", RATES: "the row's `rate_protocol`"}
    for m in METRICS:
        when = {"ceilings": " (null without the device's ceilings)", "nvml": " (null on the CPU)"}.get(m.needs, "")
        if m.param is not None:
            when = " (no key of the row: computed where a bar reads it; none on the CPU)"
        if m.from_ledger:
            when = " (no key of the row: computed where read, from the row and its line's ledger)"
        name = m.name if m.param is None else f"{m.name}({m.param})"
        lines.append(f"| `{name}` | {m.unit} | {better[m.higher_is_better]} | {measured[m.protocol]} | "
                     f"{m.description}{when} |")
    for m in STEP_METRICS:  # an `integration` row's, on a line with [integration]
        lines.append(f"| `{m.name}` | {m.unit} | {better[m.higher_is_better]} | the model step (`integration` "
                     f"rows) | {m.description} |")
    return "\n".join(lines) + "\n"
