"""Rows add up: a `result` row's derived figures, recomputed from its own raw samples.

The hash chain proves a row was not changed after it was written (and git, after it was
committed); it cannot tell a row rewritten and re-hashed before its commit. So ``verify``
also recomputes, with the sweep's own functions, every figure a result row derives from
the raw data it carries, and names each one that disagrees (``recompute``):

- from ``timing.arms.<arm>.samples_ms`` (every arm): that arm's ``stats`` (``Stats``);
- from the candidate's, baseline's and control's samples: ``metrics.speedup`` (baseline
  median / candidate median), ``speedup_ci_low`` / ``speedup_ci_high`` (the paired
  bootstrap, seeded: ``stats.DEFAULT_SEED``, so it recomputes exactly), ``control``,
  ``baseline_ms``, ``control_ms``, ``interleaved_ms``; ``timing.control_ratio`` and
  ``control_ok`` (against the row's ``policy.control_tolerance``);
- ``metrics.ms``: the sustained calls' median (``rate_protocol == "sustained"``, also
  ``sustained.median_ms`` and ``n_calls``) else the candidate's median; ``tflops``, ``gbps``,
  ``kv_gbps`` from it and the config's workload's formulas (``sustained.rates``; a plugin
  workload's through ``harness.registry``, and where it is not installed here the rates are
  not re-audited and verify says so: ``rates_unaudited``); ``gbps_frac`` and ``kv_gbps_frac`` from the
  copy ceiling the row's ``floor`` records;
- a row measured under the statistic stop (``policy.stop = "statistic"``, schema 6) has its
  speedup, CI and control from the stop's look instead (``criteria.row_statistic``): the
  median of the per-round ratios over its first ``timing.stop.n`` kept rounds, the interval
  at the look confidence its policy gives; ``timing.stop`` itself (the look's confidence,
  every quantity, ``reached``) is recomputed, and its ``n`` must be a look of the schedule
  whose quantities all met the precision (stop reason "precision") or every kept round;
- ``timing.host_us`` per arm from ``timing.host_samples_us`` (the kept rounds' host enqueue
  times), and ``metrics.host_us`` / ``baseline_host_us`` from it; ``sm_mhz`` and ``power_w``
  as the row's clock record (``timing.clock`` or ``sustained``) holds them;
- ``metrics.cycles``, ``sustained.kcycles`` and each arm's ``timing.arm_clocks.<arm>.kcycles``:
  the median of each call's time × the SM clock the row records for its window (the columnar
  ``timing.rounds.sm_mhz`` of the kept rounds; the sustained phase's ``batches``);
- ``timing.n_rounds``, ``n_dropped``, ``n_waited`` from the columnar ``timing.rounds``;
  ``timing.quanta`` from the samples (host and CUDA-event timers); ``rig_noisy`` and
  ``rig_noise`` (``sweep.run.rig_noise``) from the recomputed control and those.

Rows written before a field existed are checked on what they have: a figure absent from
the row, or whose raw data the row lacks, is not recomputed. Not recomputable from a row:
``tflops_frac`` (the row's floor keeps the FLOP ceiling the floor used, not always the
dtype's the fraction used; ``ceilings_disagreements`` checks it against the ceilings row),
``impossible`` (needs the device ceilings), ``host_gaps``, the NVML readings (only their means
are kept: ``sm_mhz`` and ``power_w`` are held to the row's clock record), and the raw samples
themselves: a row forged with samples to match is beyond any recomputation (git shows who
committed it).

``ceilings_disagreements``: a row's ceilings figures (its floor's copy and matmul ceilings,
the ``*_frac`` metrics) against the ceilings row its ``ceilings_ref`` names (ledger.verify.verify).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from harness.vocab.outcomes import RESULT
from harness.jsonsafe import number
from harness.ledger.payloads import (Batches, Floor, FloorCeilings, Measurement, Metrics, Policy, Rounds, Samples,
                                     Stop, StopQuantity, Sustained, config_workload)
from harness.measurement.timing.criteria import PRECISION_REASON, Quantity, row_statistic
from harness.measurement.timing.policy import looks
from harness.measurement.stats import QUANTUM_TICKS_MS, Stats, paired_ratio, quantum, ratio, speedup_ci
from harness.measurement.timing.results import ARM_BASELINE, ARM_CONTROL, arm_name, rig_noise
from harness.workloads import SHIPPED_WORKLOADS, Config, formulas
from harness.vocab.metrics import PROTOCOLS, SUSTAINED
from harness.measurement.clocks import kcycles
from harness.measurement.timing.sustained import rates as sustained_rates
from harness.errors import UserError
from harness.registry import installed_workload

# Relative tolerance for a figure recomputed from the row's float64 samples by the same
# numpy functions that wrote it. The same numpy gives the same bits; another numpy build or
# CPU may sum a mean or interpolate a percentile in another order, a few ulps (1e-16 each)
# off; the shipped ledgers' bootstrap bounds differ from today's recomputation by 1 ulp.
# 1e-12 allows thousands of ulps and is 8 orders below the 4 significant digits reports print,
# so any edit a reader could see is caught.
ROUNDOFF_RTOL = 1e-12
# Rates and fractions: the formulas over ms, a few more correctly rounded operations (ms to
# seconds, the divisions), each half an ulp: still far inside the round-off tolerance.
RATE_RTOL = ROUNDOFF_RTOL


@dataclass(frozen=True)
class Disagreement:
    """A stored figure of a row that its raw data does not give back."""

    field: str          # dotted path in the row, e.g. "metrics.speedup"
    stored: Any
    recomputed: Any
    source: str = "its raw samples give"  # where the recomputed value comes from

    def describe(self) -> str:
        return f"{self.field} stored {_shown(self.stored)}, {self.source} {_shown(self.recomputed)}"


def _shown(v: Any) -> str:
    return f"{v:.10g}" if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v)


def _same(stored: Any, recomputed: Any, rtol: float) -> bool:
    """Equal as row numbers (``jsonsafe.number``: spelled non-finite values; null for a
    non-finite value in rows written before that policy), within ``rtol`` when finite."""
    if isinstance(recomputed, bool) or isinstance(stored, bool):
        return stored is recomputed
    if recomputed is None:
        return stored is None
    try:
        s = number(stored)
    except (TypeError, ValueError):
        return False
    r = float(recomputed)
    if s is None:
        return not math.isfinite(r)  # an older row's null for NaN/inf
    if math.isnan(s) or math.isnan(r):
        return math.isnan(s) and math.isnan(r)
    if math.isinf(s) or math.isinf(r):
        return s == r
    return math.isclose(s, r, rel_tol=rtol, abs_tol=0.0)


def _samples(v: Any) -> list[float] | None:
    """A list of finite numbers, or None when ``v`` is not one."""
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return None
    return [float(x) for x in v] if all(math.isfinite(x) for x in v) else None


class _Audit:
    def __init__(self):
        self.found: list[Disagreement] = []

    def check(self, where: dict, key: str, path: str, value: Any, rtol: float = ROUNDOFF_RTOL,
              source: str = Disagreement.source) -> None:
        """Compare ``where[key]`` with ``value``, only where the row has the field."""
        if isinstance(where, dict) and key in where and not _same(where[key], value, rtol):
            self.found.append(Disagreement(path, where[key], value, source))

    def bad(self, path: str, stored: Any, why: str) -> None:
        self.found.append(Disagreement(path, stored, why))


def recompute(row: dict) -> list[Disagreement]:
    """Every derived figure of a `result` row that its raw data does not give back (empty:
    the row adds up; other kinds and rows without raw samples have nothing to recompute)."""
    if row.kind != RESULT:
        return []
    timing = row.timing
    measured = Measurement.from_row(timing)
    arms = measured.arms if measured is not None else None
    if not isinstance(arms, dict):
        return []
    a = _Audit()
    samples: dict[str, list[float]] = {}
    for name, raw in arms.items():
        arm = Samples.from_row(raw)
        if arm is None or not arm.has("samples_ms"):
            continue
        x = _samples(arm.samples_ms)
        if x is None:
            a.bad(f"timing.arms.{name}.samples_ms", type(arm.samples_ms).__name__, "not a list of finite numbers")
            continue
        samples[name] = x
        st = arm.stats
        if isinstance(st, dict):
            for k, v in Stats.from_samples(x).as_dict().items():
                a.check(st, k, f"timing.arms.{name}.stats.{k}", v)
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    cand = samples.get(arm_name(str(row.candidate)))
    base, ctl = samples.get(ARM_BASELINE), samples.get(ARM_CONTROL)
    try:
        stat = row_statistic(row.policy, timing)
    except ValueError as exc:
        a.bad("timing.stop", measured.stop, str(exc))
        return a.found
    if stat is not None:
        _stop(a, row, timing, samples, stat)
    if base and cand:
        if stat is None:
            sp = ratio(base, cand), *speedup_ci(base, cand)
        else:
            sp = paired_ratio(base[:stat[0]], cand[:stat[0]], stat[1])
        for key, v in zip(("speedup", "speedup_ci_low", "speedup_ci_high"), sp):
            a.check(metrics, key, f"metrics.{key}", v)
        a.check(metrics, "interleaved_ms", "metrics.interleaved_ms", Stats.from_samples(cand).median)
    if base:
        a.check(metrics, "baseline_ms", "metrics.baseline_ms", Stats.from_samples(base).median)
    control = None
    if base and ctl:
        control = ratio(base, ctl) if stat is None else paired_ratio(base[:stat[0]], ctl[:stat[0]])[0]
        a.check(metrics, "control", "metrics.control", control)
        a.check(metrics, "control_ms", "metrics.control_ms", Stats.from_samples(ctl).median)
        a.check(timing, "control_ratio", "timing.control_ratio", control)
        tol = number((Policy.from_row(row.policy) or Policy()).control_tolerance)
        if tol is not None:
            a.check(timing, "control_ok", "timing.control_ok", abs(control - 1.0) <= tol)
    _rates(a, row, metrics, cand)
    _host(a, row, metrics, timing)
    _clock(a, row, metrics, timing)
    _cycles(a, row, metrics, samples)
    _rounds(a, timing)
    _quanta(a, timing, samples, QUANTUM_TICKS_MS, quantum)
    if control is not None:
        _noise(a, row, timing, control, rig_noise)
    return a.found


def _stop(a: _Audit, row: dict, timing: dict, samples: dict, stat: tuple[int, float]) -> None:
    """A statistic-stopped row's ``timing.stop``: its look confidence from the policy, each
    quantity from the samples, ``reached``, and an ``n`` the rule could have stopped at (a look
    whose quantities all met the precision, or at the end every kept round)."""
    n, confidence = stat
    stop, policy = Measurement.from_row(timing).stop, Policy.from_row(row.policy)
    a.check(stop, "confidence", "timing.stop.confidence", confidence)
    quantities = Stop.from_row(stop).quantities
    if not isinstance(quantities, list) or not quantities:
        a.bad("timing.stop.quantities", quantities, "no bar quantity recorded")
        return
    precision = number(policy.precision)
    met = []
    for i, q in enumerate(quantities):
        sq = StopQuantity.from_row(q)
        x = samples.get(sq.numerator) if sq is not None else None
        y = samples.get(sq.denominator) if sq is not None else None
        if sq is None or x is None or y is None or len(x) < n or len(y) < n:
            a.bad(f"timing.stop.quantities.{i}", q, f"names no arm with {n} kept samples")
            continue
        want = Quantity.of(sq.numerator, sq.denominator, x[:n], y[:n], confidence)
        for k in ("ratio", "lo", "hi", "half_width"):
            a.check(q, k, f"timing.stop.quantities.{i}.{k}", getattr(want, k))
        met.append(precision is not None and want.half_width <= precision)
    a.check(stop, "reached", "timing.stop.reached", bool(met) and all(met))
    kept = len(next(iter(samples.values()), []))
    reason = Measurement.from_row(timing).stop_reason
    if reason == PRECISION_REASON:
        schedule = looks(int(policy.min_samples), int(policy.max_samples))
        if n not in schedule or not all(met):
            a.bad("timing.stop.n", n, f"a precision stop at a look of {list(schedule)} where every quantity met "
                                      f"{precision}")
    elif n != kept:
        a.bad("timing.stop.n", n, f"every kept round ({kept}) at a stop for {reason}")


def _rates(a: _Audit, row: dict, metrics: dict, cand: list[float] | None) -> None:
    """``ms`` (the sustained calls' median, or the candidate's) and the rates made of it."""
    ms = None
    sus = row.sustained
    if row.rate_protocol not in (None, *PROTOCOLS):  # renderers name each rate's protocol from it
        a.bad("rate_protocol", row.rate_protocol, f"not a timing protocol ({', '.join(PROTOCOLS)})")
        return
    if row.rate_protocol == SUSTAINED:
        calls = _samples(Sustained.from_row(sus).samples_ms) if isinstance(sus, dict) else None
        if not calls:
            a.bad("sustained.samples_ms", None, "rate_protocol is sustained but no sustained calls are recorded")
            return
        ms = statistics.median(calls)  # as ``Sustained.median_ms``
        a.check(sus, "median_ms", "sustained.median_ms", ms)
        a.check(sus, "n_calls", "sustained.n_calls", len(calls))
    elif cand:
        ms = Stats.from_samples(cand).median
    if ms is None:
        return
    a.check(metrics, "ms", "metrics.ms", ms)
    floor = Floor.from_row(row.floor)
    try:
        r = Metrics.from_row(_row_rates(row.config, floor, ms))  # the rates under their metric names
    except (KeyError, TypeError, ValueError, ZeroDivisionError, UserError):
        a.bad("config", row.config, "no rates computable for this config and ms")
        return
    if r is None:
        return
    for k, v in (("tflops", r.tflops), ("gbps", r.gbps), ("kv_gbps", r.kv_gbps)):
        a.check(metrics, k, f"metrics.{k}", v, RATE_RTOL)
    ceiling = FloorCeilings.from_row(floor.rounds) if floor is not None else None
    copy = number(ceiling.copy_gbps) if ceiling is not None else None
    if copy:
        a.check(metrics, "gbps_frac", "metrics.gbps_frac", r.gbps / copy, RATE_RTOL)
        if r.kv_gbps is not None:
            a.check(metrics, "kv_gbps_frac", "metrics.kv_gbps_frac", r.kv_gbps / copy, RATE_RTOL)


def _row_rates(config: dict, floor, ms: float) -> dict | None:
    """A row's rates at ``ms`` from its workload's formulas: attention's and decode's as their
    ledgers always had them, any other installed workload's (bench's own, a plugin's) through
    ``harness.registry``; None where the workload is not installed here (``rates_unaudited``)."""
    secs = ms * 1e-3
    name = config_workload(config)
    if not isinstance(config, dict) or name in (None, *SHIPPED_WORKLOADS):
        cfg = Config(**config)
        return {"tflops": formulas.flops(cfg) / secs / 1e12, "gbps": formulas.min_bytes(cfg) / secs / 1e9,
                "kv_gbps": formulas.kv_bytes(cfg) / secs / 1e9}
    wl = installed_workload(name)
    if wl is None:
        return None
    return sustained_rates(wl.from_row(config), ms, wl)



def rates_unaudited(row) -> str | None:
    """Why ``row``'s rates cannot be recomputed here (its workload is not installed), or None."""
    if row.kind != RESULT:
        return None
    name = config_workload(row.config)
    if not isinstance(row.config, dict) or name in (None, *SHIPPED_WORKLOADS):
        return None
    return None if installed_workload(name) is not None else f"rates not re-audited: workload {name!r} is not installed"


def _host(a: _Audit, row: dict, metrics: dict, timing: dict) -> None:
    """``timing.host_us`` per arm: the median of the host enqueue times its kept rounds recorded
    (``timing.host_samples_us``, rows since they are kept); ``host_us`` and
    ``baseline_host_us``: the candidate's and the baseline's there."""
    measured = Measurement.from_row(timing)
    per_arm = measured.host_us if isinstance(measured.host_us, dict) else {}
    kept = measured.host_samples_us
    if isinstance(kept, dict):
        for name, values in kept.items():
            x = _samples(values)
            if x is None:
                a.bad(f"timing.host_samples_us.{name}", type(values).__name__, "not a list of finite numbers")
                continue
            a.check(per_arm, name, f"timing.host_us.{name}", statistics.median(x) if x else None)
        missing = sorted(set(per_arm) - set(kept))
        if missing:
            a.bad("timing.host_samples_us", sorted(kept), f"the host times of {', '.join(missing)} too")
    for key, arm in (("host_us", arm_name(str(row.candidate))), ("baseline_host_us", "baseline")):
        if arm in per_arm:
            a.check(metrics, key, f"metrics.{key}", number(per_arm[arm]))


def _clock(a: _Audit, row: dict, metrics: dict, timing: dict) -> None:
    """``sm_mhz`` and ``power_w``: the means of the NVML readings during the calls the rates came
    from, as the row's own clock record holds them (the sustained phase's, else the rounds'
    ``timing.clock``). The readings themselves are not kept: a consistency check, not a
    recomputation."""
    if row.rate_protocol not in (None, *PROTOCOLS):  # ``_rates`` names it: no record to hold them to
        return
    if row.rate_protocol == SUSTAINED:
        held, keys = row.sustained, {"sm_mhz": "sm_mhz", "power_w": "power_w"}
        where = "sustained"
    else:
        measured = Measurement.from_row(timing)
        held, keys = measured.clock, {"sm_mhz": "mean_mhz", "power_w": "power_mean_w"}
        where = "timing.clock"
        if measured.has("clock") and held is None:  # no clocks polled (the CPU): no clock figure
            held = {k: None for k in keys.values()}
    if not isinstance(held, dict):
        return
    for metric, key in keys.items():
        if key in held:
            a.check(metrics, metric, f"metrics.{metric}", number(held[key]), source=f"its {where} record gives")


def _cycles(a: _Audit, row: dict, metrics: dict, samples: dict[str, list[float]]) -> None:
    """Cycles per call from each call's time and the SM clock recorded for its window: every
    arm's over its kept rounds (``timing.arm_clocks``), the sustained calls' over their batches,
    and ``metrics.cycles`` from the row's rate protocol; only where the row records them."""
    measured = Measurement.from_row(row.timing)
    rounds, clocks = Rounds.from_row(measured.rounds), measured.arm_clocks
    per_arm: dict[str, float | None] = {}
    if rounds is not None and isinstance(rounds.sm_mhz, list) and isinstance(rounds.dropped, list):
        dropped = set(rounds.dropped)
        kept = [number(x) for i, x in enumerate(rounds.sm_mhz) if i not in dropped]
        for name, x in samples.items():
            if len(x) != len(kept):
                a.bad(f"timing.arms.{name}.samples_ms", len(x), f"{len(kept)} kept rounds in timing.rounds")
                return
            per_arm[name] = kcycles(list(zip(x, kept)))
            if isinstance(clocks, dict) and isinstance(clocks.get(name), dict):
                a.check(clocks[name], "kcycles", f"timing.arm_clocks.{name}.kcycles", per_arm[name])
    sus = row.sustained
    held = Sustained.from_row(sus)
    sustained = None
    batches = held.batches if held is not None else None
    split = Batches.from_row(batches)
    if split is not None and isinstance(split.calls, list) and isinstance(split.sm_mhz, list):
        calls = _samples(held.samples_ms) or []
        per_call = [number(mhz) for n, mhz in zip(split.calls, split.sm_mhz) for _ in range(_count(n))]
        if len(per_call) != len(calls):
            a.bad("sustained.batches.calls", sum(map(_count, split.calls)), f"{len(calls)} sustained calls")
            return
        sustained = kcycles(list(zip(calls, per_call)))
        a.check(sus, "kcycles", "sustained.kcycles", sustained)
    cand = arm_name(str(row.candidate))
    if row.rate_protocol == SUSTAINED and batches is not None:
        a.check(metrics, "cycles", "metrics.cycles", sustained)
    elif row.rate_protocol != SUSTAINED and cand in per_arm:
        a.check(metrics, "cycles", "metrics.cycles", per_arm[cand])


def _rounds(a: _Audit, timing: dict) -> None:
    """Round counts from the columnar rounds (``Measurement.to_row``)."""
    rounds = Rounds.from_row(Measurement.from_row(timing).rounds)
    if rounds is None or not isinstance(rounds.t0, list):
        return
    a.check(timing, "n_rounds", "timing.n_rounds", len(rounds.t0))
    if isinstance(rounds.dropped, list):
        a.check(timing, "n_dropped", "timing.n_dropped", len(rounds.dropped))
    if isinstance(rounds.waited, dict):
        a.check(timing, "n_waited", "timing.n_waited", len(rounds.waited))


# Scheduler ticks each timer's samples are judged against for quanta (timing/timers.py
# ``ticks_ms``): host timing waits on a run queue and resumes on a tick; CUDA events do not.
def _timer_ticks(timer: Any, host_ticks: tuple) -> tuple | None:
    return {"host": tuple(host_ticks), "cuda_event": ()}.get(timer)


def _quanta(a: _Audit, timing: dict, samples: dict, host_ticks: tuple, quantum) -> None:
    """Which arms' samples sit on a quantum (``Measurement.quanta``), where the row has it."""
    measured = Measurement.from_row(timing)
    ticks = _timer_ticks(measured.timer, host_ticks)
    stored = measured.quanta
    if ticks is None or not isinstance(stored, dict):
        return
    want = {}
    if ticks:
        for name, x in samples.items():
            q = quantum(x, ticks)
            if q is not None:
                want[name] = q.as_dict() | {"why": q.describe()}
    if set(stored) != set(want):
        a.bad("timing.quanta", sorted(stored), f"quantised arms {sorted(want)}")
        return
    for name, q in want.items():
        for k, v in q.items():
            if isinstance(v, str) or v is None:
                if stored[name].get(k) != v:
                    a.bad(f"timing.quanta.{name}.{k}", stored[name].get(k), v)
            else:
                a.check(stored[name], k, f"timing.quanta.{name}.{k}", v)


def _count(v: Any) -> int:
    """A stored count (checked against the rounds by ``_rounds``); 0 when absent or not one."""
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _noise(a: _Audit, row: dict, timing: dict, control: float, rig_noise) -> None:
    """``rig_noisy`` and ``rig_noise`` from the recomputed control, the stored host gaps and
    the (checked) quanta and round counts; an older row's absent fields count as none."""
    policy = Policy.from_row(row.policy) or Policy()
    tol, max_waited = number(policy.control_tolerance), number(policy.max_drop_fraction)
    measured = Measurement.from_row(timing)
    gaps, quanta = measured.host_gaps or {}, measured.quanta or {}
    if tol is None or not isinstance(gaps, dict) or not isinstance(quanta, dict):
        return
    waited = (_count(measured.n_waited), _count(measured.n_rounds))
    why = rig_noise(control, tol, gaps, quanta, waited, 1.0 if max_waited is None else max_waited)
    if row.has("rig_noisy"):
        a.check({"rig_noisy": row.rig_noisy}, "rig_noisy", "rig_noisy", bool(why))
    elif why:  # the verdict reads an absent flag as a clean result
        a.bad("rig_noisy", None, True)
    stored = row.rig_noise
    if isinstance(stored, list) and stored != why:
        a.bad("rig_noise", stored, why)


# Metrics ``recompute`` checks only on rows that keep their raw data (rows written before
# bench kept it hold the figure alone, which verify cannot vouch for): metric -> the timing
# field that holds it.
KEPT_FROM = {"host_us": "host_samples_us", "baseline_host_us": "host_samples_us"}


def unchecked(metric: str, row) -> str | None:
    """Why verify cannot have checked ``metric`` of result ``row`` against its raw data (None:
    it could): the row predates the raw data the figure is recomputed from."""
    kept = KEPT_FROM.get(metric)
    if kept is None or kept in (row.timing or {}):
        return None
    return f"it keeps no timing.{kept} ({metric} was not recomputable when it was written)"


__all__ = ["Disagreement", "KEPT_FROM", "RATE_RTOL", "ROUNDOFF_RTOL", "rates_unaudited", "recompute", "unchecked"]
