"""The time and clock each figure of a result row was computed from, for every renderer.

A result row records two measurements of its candidate: the interleaved rounds
(``timing``: every arm in turn under one clock; the speedup's) and, on a line whose bar
judges an absolute rate, the sustained phase (``sustained``: its calls back to back; the
rates'). Which metric comes from which is the metric table's ``protocol``
(vocab/metrics.py); this module reads that protocol's own record in the row (its
samples, mean SM clock and power), so a renderer prints a figure beside the time and clock it
came from — never a rate beside the interleaved median, nor a speedup beside the sustained one.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab import metrics as metric_table
from harness.vocab.metrics import INTERLEAVED, SUSTAINED
from harness.jsonsafe import number
from harness.ledger.payloads import Clock, Measurement, Metrics, Samples, Sustained
from harness.measurement.stats import Stats
from harness.measurement.timing.results import arm_name
from harness.registration import bar as barlang
from harness.vocab.outcomes import RESULT
from harness.governance.verdict import bar_row_map


@dataclass(frozen=True)
class Timed:
    """One arm's time under one protocol, with the clock and power it ran at (None: not known)."""

    protocol: str  # INTERLEAVED or SUSTAINED
    arm: str  # "candidate", "baseline" or "control"
    median_ms: float | None
    p20_ms: float | None
    p80_ms: float | None
    n: int
    sm_mhz: float | None
    power_w: float | None

    def spread(self, spec: str = ".4g") -> str:
        """``median [p20–p80]`` in ms: "—" for a figure not recorded, nan for one measured as NaN."""
        f = lambda x: "—" if x is None else format(x, spec)  # noqa: E731
        return f"{f(self.median_ms)} [{f(self.p20_ms)}–{f(self.p80_ms)}]"

    def clock(self) -> str:
        """The mean SM clock as ``1776 MHz``, "—" where none was read (the CPU)."""
        return "—" if self.sm_mhz is None else f"{self.sm_mhz:.0f} MHz"

    def text(self) -> str:
        """``sustained 2.141 ms at 1776 MHz``: the protocol, the median and its clock."""
        ms = "—" if self.median_ms is None else f"{self.median_ms:.4g}"
        return f"{self.protocol} {ms} ms" + ("" if self.sm_mhz is None else f" at {self.sm_mhz:.0f} MHz")


def _percentiles(samples) -> tuple[float | None, float | None, float | None]:
    xs = [float(x) for x in samples or () if number(x) is not None]
    if not xs:
        return None, None, None
    s = Stats.from_samples(xs)
    return s.median, s.p20, s.p80


def timed(row: dict, protocol: str, arm: str = "candidate") -> Timed:
    """``arm``'s time in ``row`` under ``protocol``, from that protocol's own record.

    Interleaved: the arm's kept rounds (``timing.arms``), the rounds' mean clock and power.
    Sustained: the candidate's back-to-back calls (``sustained``), their clock and power; only
    the candidate has that phase (a ValueError for another arm, or a row without the phase).
    """
    if protocol == INTERLEAVED:
        timing = Measurement.from_row(row.timing or {})
        name = f"candidate:{row.candidate}" if arm == "candidate" else arm
        rec = timing.arm(name) or Samples.from_row({})
        if rec.stats:
            stats = rec.summary
            med, p20, p80 = number(stats.median), number(stats.p20), number(stats.p80)
            n = int(stats.n or len(rec.samples_ms or ()))
        else:  # rows that keep only the samples: the same statistics, computed here
            med, p20, p80 = _percentiles(rec.samples_ms)
            n = len(rec.samples_ms or ())
        clock = Clock.from_row(timing.clock or {})
        return Timed(INTERLEAVED, arm, med, p20, p80, n, number(clock.mean_mhz), number(clock.power_mean_w))
    if protocol != SUSTAINED:
        raise ValueError(f"unknown protocol {protocol!r}: {', '.join(metric_table.PROTOCOLS)}")
    sus = row.sustained
    if arm != "candidate" or not isinstance(sus, dict):
        raise ValueError(f"row {row.seq}: no sustained phase of the {arm} (only a rate line's candidate has one)")
    sus = Sustained.from_row(sus)
    med, p20, p80 = _percentiles(sus.samples_ms)
    return Timed(SUSTAINED, arm, number(sus.median_ms) if med is None else med, p20, p80,
                 len(sus.samples_ms or ()), number(sus.sm_mhz), number(sus.power_w))


def rates(row: dict) -> Timed:
    """The candidate's time the row's rates (``ms``, TFLOP/s, GB/s, fractions) were computed from."""
    return timed(row, metric_table.rate_protocol(row))


def of_metric(row: dict, name: str) -> Timed:
    """The candidate's time metric ``name`` of ``row`` was computed from (the metric table's protocol)."""
    return timed(row, metric_table.protocol(name, row))


def pair_text(ms: float | None, baseline_ms: float | None, sm_mhz: float | None, other: str = "baseline") -> str:
    """Two arms' medians of one run of rounds and its clock: ``1.968 ms vs baseline 11.31 ms at 1980 MHz``
    (``other``: the second arm's name)."""
    f = lambda x: "—" if x is None else f"{x:.4g}"  # noqa: E731
    return f"{f(ms)} ms vs {other} {f(baseline_ms)} ms" + ("" if sm_mhz is None else f" at {sm_mhz:.0f} MHz")


def speedup_text(row: dict, *, named: bool = True, peer: str | None = None) -> str:
    """A speedup's own figures: ``interleaved 1.968 ms vs baseline 11.31 ms at 1980 MHz``
    (without the protocol's name where a column header gives it); ``peer``: against that
    candidate's arm of the same rounds instead of the baseline's."""
    cand = timed(row, INTERLEAVED)
    other = timed(row, INTERLEAVED, "baseline" if peer is None else arm_name(peer))
    return (f"{INTERLEAVED} " if named else "") + pair_text(cand.median_ms, other.median_ms, cand.sm_mhz,
                                                            "baseline" if peer is None else peer)


def normalised_text(agg, row) -> str:
    """Beside a figure restated at a clock (``tflops_at(F)``), the one measured and the cycles it
    was restated from: ``, 513.6 TFLOP/s as measured, 3787 kcycles``; empty for any other."""
    spec = metric_table.BY_NAME.get(agg.metric or "")
    if spec is None or spec.of is None:
        return ""
    m = row.metrics or {}
    raw, kc = number(m.get(spec.of)), number(Metrics.from_row(m).cycles)
    return (f", {'—' if raw is None else format(raw, '.4g')} {metric_table.BY_NAME[spec.of].unit} as measured, "
            f"{'—' if kc is None else format(kc, '.4g')} kcycles")


def deciding_values(agg, outcomes: dict, *, include_noisy: bool, next_run=None) -> list[tuple]:
    """(result row, the value ``agg`` reads at it) for each row a bar aggregate over a metric
    reduces: those its filter selects that the bar sees as correct and that have the value
    (with a peer: compared with it), in ``outcomes``' order; none for a peer aggregate that
    could not compare one of its correct rows (its value is unknown). ``next_run``: the
    between-run variance a next-run metric is read with (``verdict.bar_row_map``)."""
    if agg.metric is None:
        return []
    rows, _ = bar_row_map(outcomes, include_noisy=include_noisy, next_run=next_run)
    if barlang.uncompared_note(agg, list(rows.values())) is not None:
        return []  # a peer not compared somewhere: the aggregate has no value, so no row decides it
    out = []
    for key, row in rows.items():
        if outcomes[key].kind != RESULT or not row.get("correct") or not barlang.matching(agg, [row]):
            continue
        v = barlang.row_value(agg, row)
        if v is not None:
            out.append((outcomes[key], v))
    return out


def deciding_rows(agg, outcomes: dict, *, include_noisy: bool) -> list:
    """The result rows of ``deciding_values``."""
    return [r for r, _ in deciding_values(agg, outcomes, include_noisy=include_noisy)]


def source(agg, outcomes: dict, *, include_noisy: bool, value, next_run=None) -> str:
    """Where a bar aggregate's ``value`` (a clause's, the primary's) was measured: its metric's
    protocol and, for a value decided by one row (min, max, an odd median), that row's kernel,
    config and the time and clock it came from. "—" for one over no metric (a count of rows,
    pass_rate). ``outcomes`` are the line's current outcomes, as the bar saw them."""
    if agg.metric is None or agg.func == "pass_rate" or agg.metric not in metric_table.BY_NAME:
        return "—"
    values = deciding_values(agg, outcomes, include_noisy=include_noisy, next_run=next_run)
    if not values:
        return "—"
    matched = [r for r, _ in values]
    kinds = sorted({metric_table.protocol(agg.metric, r) for r in matched})
    target = number(value)
    if agg.func in ("min", "max", "median") and target is not None:
        decided = [r for r, v in values if v == target]
        if decided:
            r = min(decided, key=lambda r: r.seq)
            # An interleaved figure is a ratio of (or one side of) the arms' medians: both are shown.
            interleaved = metric_table.protocol(agg.metric, r) == INTERLEAVED
            fig = speedup_text(r, peer=agg.peer) if interleaved else of_metric(r, agg.metric).text()
            return f"{fig}{normalised_text(agg, r)} ({r.candidate} @ {r.config_key})"
    return f"{' and '.join(kinds)}, over {len(matched)} result{'s' if len(matched) != 1 else ''}"


__all__ = ["Timed", "deciding_rows", "deciding_values", "normalised_text", "of_metric", "pair_text", "rates", "source", "speedup_text", "timed"]
