"""A ledger row at a glance (the ledger table, the sweep's log lines), and the number formats they share."""

from __future__ import annotations

from harness.vocab.outcomes import (CEILINGS, CRASHED, INCORRECT, INTEGRATION, PROFILE, REGISTERED, RESULT,
                                         SKIPPED, SUPERSEDES, THROTTLED, UNSUPPORTED, VERDICT)
from harness.vocab.metrics import INTERLEAVED
from harness.ledger.payloads import Amdahl, Counters, Metrics
from harness.ledger.line_payloads import Coverage, RegistrationSummary
from harness.reporting.analysis import protocol


def fmt(v, spec=".3g"):
    if v is None:
        return "—"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def outcome_reason(row: dict) -> str:
    """One readable line saying what happened to a row (the reason at a glance)."""
    kind = row.kind
    if kind == RESULT:
        return _result_reason(row)
    if kind == INCORRECT:
        return f"[{row.tag}] {row.reason}"
    if kind in (SKIPPED, UNSUPPORTED, CRASHED, THROTTLED):
        return (row.reason or "")
    if kind == REGISTERED:
        plan = RegistrationSummary.from_row(row.registration)
        return f"bar: {plan.go} · prediction {plan.prediction}"
    if kind == VERDICT:
        cov = Coverage.from_row(row.coverage) if row.coverage else None
        on = f"; decided on {cov.decided} of {cov.pairs} pairs" if cov else ""
        return (f"{row.outcome}: {row.primary} = {fmt(row.primary_value, '.4g')} "
                f"(predicted {row.prediction}){on}")
    if kind == SUPERSEDES:
        return f"supersedes rows {row.supersedes}: {row.reason}"
    if kind == PROFILE:
        if row.error:
            return f"no counters: {row.error}"
        k = Counters.from_row(row.counters or {})
        flag = f" (impossible: {row.impossible})" if row.impossible else ""
        return (f"DRAM read {fmt(mb(k.dram_read_bytes), '.4g')} MB, write "
                f"{fmt(mb(k.dram_write_bytes), '.4g')} MB, {fmt(k.launches, '.0f')} launches"
                + flag)
    if kind == CEILINGS:
        return f"copy {fmt(row.copy_gbps, '.4g')} GB/s"
    if kind == INTEGRATION:
        if not row.metrics:
            return f"model step {row.step}: {row.error}"
        m = Metrics.from_row(row.metrics)
        flags = "".join(f" ({f})" for f in ("rig_noisy", "throttled") if getattr(row, f))
        flags += f" (amdahl_violated: op share ≥ {Amdahl.from_row(row.amdahl_violated).inverted_share:.1%})" \
            if row.amdahl_violated else ""
        return (f"model step {row.step}: gain {fmt(m.step_gain, '+.2%')} ({fmt(m.step_ms, '.4g')} ms vs "
                f"baseline {fmt(m.step_baseline_ms, '.4g')} ms), predicted {fmt(m.step_gain_predicted, '+.2%')}, "
                f"probe/in-situ {fmt(m.probe_factor, '.3g')}, control {fmt(m.step_control, '.4g')}{flags}")
    return ""


def _result_reason(row: dict) -> str:
    """A result at a glance: the speedup beside the interleaved medians and clock it is the ratio
    of, the rates beside the time, clock and power they were computed from (protocol named)."""
    m = Metrics.from_row(row.metrics)
    flags = [f for f in ("impossible", "rig_noisy") if getattr(row, f)]
    rt = protocol.rates(row)
    rates = f"{fmt(m.tflops, '.4g')} TFLOP/s, {fmt(m.gbps, '.4g')} GB/s"
    if rt.protocol == INTERLEAVED:
        rates += " (from that interleaved median)"
    else:
        rates += f" ({rt.text()}" + ("" if rt.power_w is None else f", {rt.power_w:.0f} W") + ")"
    return (f"speedup {fmt(m.speedup, '.3f')}× [{fmt(m.speedup_ci_low, '.3f')}, "
            f"{fmt(m.speedup_ci_high, '.3f')}] ({protocol.speedup_text(row)}); {rates}; host "
            f"{fmt(m.host_us, '.3g')} µs/call, control {fmt(m.control, '.4f')}"
            + (f" ({', '.join(flags)})" if flags else ""))


def mb(v):
    return None if v is None else v / 1e6
