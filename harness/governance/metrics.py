"""The metric table: every number a `result` row carries in ``metrics``, in one place.

The bar language accepts exactly these names, the sweep's result rows carry exactly these
keys (``result_metrics`` refuses any other set), reports take their units and formats from
here, and the README's metric list is generated from it (tests/test_metrics.py checks it is
current). Adding a metric is one row here plus its computation in ``sweep/run.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str  # what it is and how it is computed
    higher_is_better: bool | None  # None: neither (closer to 1, or a condition of the rig)
    fmt: str = ".4g"  # how reports print it
    label: str | None = None  # its column header where a report gives it a column of its own
    # Reports show it in the timing, speedup or control columns (or leave it out): no column
    # of its own. A metric with neither a label nor this gets a column under its name.
    shown_elsewhere: bool = False
    rate: bool = False  # an absolute rate: a bar judging it times compute-bound configs with lead calls
    needs: str | None = None  # None: every result has it; else what it needs to be known


METRICS: tuple[Metric, ...] = (
    Metric("speedup", "×", "baseline median over candidate median, from the interleaved rounds", True,
           shown_elsewhere=True),
    Metric("speedup_ci_low", "×", "lower bound of the speedup's paired bootstrap 95% confidence interval", True,
           shown_elsewhere=True),
    Metric("speedup_ci_high", "×", "upper bound of the speedup's paired bootstrap 95% confidence interval", True,
           shown_elsewhere=True),
    Metric("tflops", "TFLOP/s", "useful FLOPs (formulas.flops) over ms", True,
           label="TFLOP/s", rate=True),
    Metric("gbps", "GB/s", "fewest bytes any implementation moves (formulas.min_bytes) over ms", True,
           label="GB/s", rate=True),
    Metric("kv_gbps", "GB/s", "K and V cache bytes (formulas.kv_bytes) over ms: decode's bandwidth",
           True, rate=True, shown_elsewhere=True),
    Metric("ms", "ms", "median time of one candidate call: of its calls back to back (sustained phase) when the "
           "bar judges a rate, else of the interleaved rounds", False, rate=True, shown_elsewhere=True),
    Metric("interleaved_ms", "ms", "the candidate's median in the interleaved rounds (the speedup's numerator)",
           False),
    Metric("baseline_ms", "ms", "median time of one baseline call, interleaved with the candidate's", False,
           shown_elsewhere=True),
    Metric("control_ms", "ms", "median time of one control call (the baseline again, its own buffers)", False,
           shown_elsewhere=True),
    Metric("control", "×", "baseline median over control median: 1 on a quiet rig (rig-noisy outside the tolerance)",
           None, shown_elsewhere=True),
    Metric("tflops_frac", "fraction", "tflops over the device's measured matmul ceiling for the dtype", True,
           fmt=".1%", label="of peak FLOP/s", rate=True, needs="ceilings"),
    Metric("gbps_frac", "fraction", "gbps over the device's measured copy bandwidth", True,
           fmt=".1%", label="of peak GB/s", rate=True, needs="ceilings"),
    Metric("kv_gbps_frac", "fraction", "kv_gbps over the device's measured copy bandwidth", True,
           fmt=".1%", rate=True, needs="ceilings", shown_elsewhere=True),
    Metric("host_us", "µs", "median host time to enqueue one timed candidate call", False, fmt=".3g",
           label="host µs"),
    Metric("baseline_host_us", "µs", "median host time to enqueue one timed baseline call", False, fmt=".3g"),
    Metric("sm_mhz", "MHz", "mean SM clock while ms was measured (NVML)", None, needs="nvml"),
    Metric("power_w", "W", "mean board power while ms was measured (NVML)", None, needs="nvml"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
RATE_METRICS = frozenset(m.name for m in METRICS if m.rate)


def result_metrics(values: dict) -> dict:
    """A result row's ``metrics``: exactly the table's names, in its order (a metric computed
    but not declared, or declared but not computed, is a bug caught on the first result)."""
    if set(values) != set(NAMES):
        extra, missing = sorted(set(values) - set(NAMES)), sorted(set(NAMES) - set(values))
        raise ValueError(f"result metrics differ from harness/governance/metrics.py METRICS: "
                         f"not declared {extra}, not computed {missing}")
    return {name: values[name] for name in NAMES}


def markdown() -> str:
    """The README's metric table (generated; tests/test_metrics.py checks it is current)."""
    lines = ["| metric | unit | higher is better | what it is |", "| --- | --- | --- | --- |"]
    better = {True: "yes", False: "no", None: "—"}
    for m in METRICS:
        when = {"ceilings": " (null without the device's ceilings)", "nvml": " (null on the CPU)"}.get(m.needs, "")
        lines.append(f"| `{m.name}` | {m.unit} | {better[m.higher_is_better]} | {m.description}{when} |")
    return "\n".join(lines) + "\n"
