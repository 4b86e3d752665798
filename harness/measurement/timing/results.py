"""What ``measure`` returns: frozen rounds, per-arm raw samples, and the whole ``Measurement``
with its ledger form (``to_row``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.jsonsafe import jsonable
from harness.measurement.clocks import ClockSummary, kcycles
from harness.measurement.stats import DEFAULT_CONFIDENCE, Stats, paired_ratio, ratio, speedup_ci
from harness.measurement.timing.policy import TimingPolicy
from harness.measurement.timing.refresh import InputMemory

ARM_CANDIDATE, ARM_BASELINE, ARM_CONTROL = "candidate", "baseline", "control"


def arm_name(kernel: str) -> str:
    """Candidate arms are prefixed so no kernel name can collide with 'baseline'/'control'."""
    return f"candidate:{kernel}"


def rig_noise(control: float, tolerance: float, host_gaps: dict, quanta: dict | None = None,
              waited: tuple[int, int] = (0, 0), max_waited: float = 1.0) -> list[str]:
    """Why the rig could not vouch for a result's timing (empty: it could): the control arm
    (the baseline timed twice) off by more than the tolerance, samples kept that may
    include host launch gaps (the host outlasted the timer's longest hold), or an arm whose
    samples sit on a scheduler or timer quantum (``Measurement.quanta``: whole ticks, not
    the call; both arms quantise alike, so the control cannot see it)."""
    why = []
    if not abs(control - 1.0) <= tolerance:  # a NaN control is noise too
        why.append(f"control {control:.4f} outside 1 ± {tolerance:g}")
    kept = {arm: c.get("kept", 0) for arm, c in host_gaps.items() if c.get("kept", 0)}
    if kept:
        why.append("samples that may include host launch gaps: " + ", ".join(f"{a} {n}" for a, n in kept.items()))
    for arm, q in (quanta or {}).items():
        why.append(f"{arm}: {q['why']}")
    n_waited, n_rounds = waited
    if n_rounds and n_waited / n_rounds > max_waited:
        why.append(f"{n_waited} of {n_rounds} rounds dropped because a call waited on a run queue (a loaded host: "
                   f"more than {max_waited:.0%})")
    return why


STOP_REASONS = ("noise_target", "precision", "max_samples", "timeout")


@dataclass(frozen=True)
class Round:
    """One interleaved round: when it ran, in which order, each arm's sample (ms), its clocks;
    ``waited``: the arms whose call waited on a run queue (descheduled: the round is dropped)."""

    index: int
    t0: float
    t1: float
    order: tuple[str, ...]
    samples: dict[str, float]          # never mutated
    min_sm_mhz: float | None = None
    dropped: bool = False
    drop_reasons: tuple[str, ...] = ()
    waited: tuple[str, ...] = ()
    # Mean SM and memory clocks of the readings attributed to the round (ClockMonitor.during):
    # the clock each of its calls ran at, for their cycles (``Measurement.arm_clocks``).
    sm_mhz: float | None = None
    mem_mhz: float | None = None


@dataclass(frozen=True)
class ArmClock:
    """One arm's cycles per call over its kept calls (``clocks.kcycles``: each call's time × its
    round's SM clock) and the mean SM and memory clocks of those rounds."""

    kcycles: float | None
    sm_mhz: float | None
    mem_mhz: float | None
    n: int  # kept calls whose round has a clock

    def as_dict(self) -> dict:
        return {"kcycles": self.kcycles, "sm_mhz": self.sm_mhz, "mem_mhz": self.mem_mhz, "n": self.n}


@dataclass(frozen=True)
class ArmResult:
    """Raw samples (ms) of one arm: kept rounds, dropped rounds, and stats of the kept ones."""

    name: str
    samples: tuple[float, ...]
    dropped_samples: tuple[float, ...]
    stats: Stats

    @classmethod
    def build(cls, name: str, samples: Sequence[float], dropped: Sequence[float]) -> "ArmResult":
        s = tuple(float(x) for x in samples)
        return cls(name, s, tuple(float(x) for x in dropped), Stats.from_samples(s))


@dataclass(frozen=True)
class RefreshRecord:
    """The content refresh of one measurement (timing/refresh.py): every refresh, which
    content each arm's outputs came from, and per arm the first-seen against seen figures."""

    seed: int                                   # the schedule's (rounds, kinds, content seeds)
    span: int                                   # guaranteed refreshed rounds fall before this round
    refreshes: tuple[dict, ...]                 # round, arm, slot, seed, how; version k = refreshes[k-1]
    shams: tuple[dict, ...]                     # round, arm, slot, seed: the same work, content kept
    #                                             ("before": "first_seen": before a first-seen call
    #                                             whose content an earlier arm's refresh wrote)
    fresh_rounds: dict[str, tuple[int, ...]]    # per arm: measured rounds whose first-seen call is judged
    sham_rounds: dict[str, tuple[int, ...]]     # per arm: rounds whose call was seen, after a sham
    last_versions: dict[str, tuple[int | None, ...]]  # per arm and slot: the version its last call ran on
    checks: dict[str, dict[str, dict[str, int]]]  # per arm and how: the refreshed call kept (round, slot, version)
    memory: dict[str, InputMemory]
    note: str | None = None

    def content_seed(self, slot_seed: int, version: int) -> int:
        """The seed slot content ``version`` was drawn from (0: the slot's initial ``slot_seed``)."""
        return slot_seed if version == 0 else self.refreshes[version - 1]["seed"]

    def as_dict(self) -> dict:
        return {"seed": self.seed, "span": self.span, "n_refreshed_rounds": len({r["round"] for r in self.refreshes}),
                "refreshes": [dict(r) for r in self.refreshes], "shams": [dict(r) for r in self.shams],
                "fresh_rounds": {n: list(v) for n, v in self.fresh_rounds.items()},
                "sham_rounds": {n: list(v) for n, v in self.sham_rounds.items()},
                "last_versions": {n: list(v) for n, v in self.last_versions.items()}, "checks": self.checks,
                "memory": {n: m.as_dict() for n, m in self.memory.items()}, "note": self.note}


@dataclass(frozen=True)
class Measurement:
    """Everything one ``measure`` call observed. Statistics are derived from the raw samples."""

    arms: dict[str, ArmResult]         # never mutated; insertion order = arm order
    rounds: tuple[Round, ...]
    stop_reason: str | None
    mode: str                          # requested
    effective_mode: str                # "host" on the CPU
    n_slots: int
    graph_replays: int                 # K replays per sample (1 outside graph mode)
    timer: str
    policy: TimingPolicy
    warmup_rounds: int
    warmup_extensions: int
    elapsed_s: float
    clock: ClockSummary | None
    clock_note: str | None             # why clocks are missing/doubtful: surface it as a warning
    timing_note: str | None            # e.g. the CPU degrade
    throttled: bool
    throttle_note: str | None = None
    # CUDA-event timer: per arm, calls of the measured rounds re-run because the host had not
    # enqueued them when the hold ended, and samples kept with a possible host gap.
    host_gaps: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per arm: median host time (µs) of enqueuing one timed call, over the kept rounds, and
    # those host times themselves, in round order (the row keeps both: verify recomputes the one
    # from the other).
    host_us: dict[str, float | None] = field(default_factory=dict)
    host_samples_us: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # The random timed call whose output the caller checks (``spot``): per arm, its index
    # among the arm's measured calls and its input slot; the seed that chose it.
    spot_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    spot_seed: int | None = None
    # Per arm (device timers only): seconds a device-wide synchronize took after each measured
    # call, once the call's own stream had finished (work left on another stream shows here).
    drain_s: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # Host timing: per arm, median CPU time per kept call ("cpu_ms": the calling thread;
    # "process_cpu_ms": all threads, schedstat), median run-queue wait of kept calls
    # ("wait_ms"), calls that waited ("waited", of "calls" measured); how waits were seen.
    cpu: dict[str, dict] = field(default_factory=dict)
    wait_source: str | None = None
    # Per arm whose kept samples sit on a scheduler or timer quantum: ``stats.Quantum`` as a
    # dict plus "why". Such a row is rig-noisy (pipeline/rates.py), never a clean result.
    quanta: dict[str, dict] = field(default_factory=dict)
    # With a refresh hook: new content at random rounds and the memory judgement; else None.
    refresh: RefreshRecord | None = None
    # Per arm whose timed calls cannot be believed: its windows disagree with the independent
    # clock, or its thread's CPU time exceeds its wall time (measure._clock_check; issue 47).
    # The sweep refuses such an arm (tag clock_tampered). ``clock_check``: the evidence per arm.
    clock_faults: dict[str, str] = field(default_factory=dict)
    clock_check: dict[str, dict] = field(default_factory=dict)
    # Under the statistic stop (timing/criteria.py): the look its bar quantities come from;
    # None under the noise stop.
    stop: Any = None  # a timing/criteria.py StopRecord, or None (criteria imports this module)

    @property
    def n_dropped(self) -> int:
        return sum(r.dropped for r in self.rounds)

    @property
    def n_waited(self) -> int:
        """Rounds dropped because a call waited on a run queue (some may also be clock drops)."""
        return sum(bool(r.waited) for r in self.rounds)

    def speedup(self, candidate: str = ARM_CANDIDATE, baseline: str = ARM_BASELINE,
                confidence: float | None = None) -> tuple[float, float, float]:
        """(ratio, lo, hi): baseline median / candidate median with its paired bootstrap CI (95%
        unless ``confidence``); under the statistic stop, the registered statistic: the median
        of the per-round ratios over the stop's rounds with its interval at the stop's
        confidence (``StopRecord``), the very interval the stop judged."""
        b, c = self.arms[baseline].samples, self.arms[candidate].samples
        if not b or not c:
            return math.nan, math.nan, math.nan
        if self.stop is not None:
            n = self.stop.n
            return paired_ratio(b[:n], c[:n], self.stop.confidence if confidence is None else confidence)
        lo, hi = speedup_ci(b, c, confidence=DEFAULT_CONFIDENCE if confidence is None else confidence)
        return ratio(b, c), lo, hi

    @property
    def control_ratio(self) -> float | None:
        """baseline median / control median (the same function twice: should be 1); under the
        statistic stop, the median of the per-round ratios over the stop's rounds."""
        if ARM_CONTROL not in self.arms or ARM_BASELINE not in self.arms:
            return None
        b, c = self.arms[ARM_BASELINE].samples, self.arms[ARM_CONTROL].samples
        if not b or not c:
            return None
        if self.stop is not None:
            return paired_ratio(b[:self.stop.n], c[:self.stop.n])[0]
        return ratio(b, c)

    def rig_noise_of(self, arm: str) -> list[str]:
        """``rig_noise`` for one candidate arm's row, under this measurement's policy: the
        control, host gaps, the quanta of that arm, the baseline and the control (another
        candidate's are its own row's), and the rounds dropped for a run queue."""
        control = self.control_ratio
        mine = (arm, ARM_BASELINE, ARM_CONTROL)
        return rig_noise(math.nan if control is None else control, self.policy.control_tolerance, self.host_gaps,
                         {a: q for a, q in self.quanta.items() if a in mine}, (self.n_waited, len(self.rounds)),
                         self.policy.max_drop_fraction)

    @property
    def arm_clocks(self) -> dict[str, ArmClock] | None:
        """Per arm, its cycles per call and clocks over its kept rounds; None where no clock was
        monitored (the CPU has no SM clock: ``clock_note`` says so)."""
        if self.clock is None:
            return None
        kept = [r for r in self.rounds if not r.dropped]
        out = {}
        for n in self.arms:
            sm = [r.sm_mhz for r in kept if r.sm_mhz is not None]
            mem = [r.mem_mhz for r in kept if r.mem_mhz is not None]
            out[n] = ArmClock(kcycles([(r.samples[n], r.sm_mhz) for r in kept]), sum(sm) / len(sm) if sm else None,
                              sum(mem) / len(mem) if mem else None, len(sm))
        return out

    @property
    def control_ok(self) -> bool | None:
        r = self.control_ratio
        return None if r is None else abs(r - 1.0) <= self.policy.control_tolerance

    def to_row(self, *, include_rounds: bool = True) -> dict:
        """Strict-JSON record for the ledger (``harness.jsonsafe``)."""
        row: dict[str, Any] = {
            "mode": self.mode, "effective_mode": self.effective_mode, "timer": self.timer,
            "n_slots": self.n_slots, "graph_replays": self.graph_replays, "stop_reason": self.stop_reason,
            "n_rounds": len(self.rounds), "n_dropped": self.n_dropped, "n_waited": self.n_waited,
            "throttled": self.throttled,
            "throttle_note": self.throttle_note, "warmup_rounds": self.warmup_rounds,
            "warmup_extensions": self.warmup_extensions, "elapsed_s": self.elapsed_s,
            "timing_note": self.timing_note, "clock_note": self.clock_note, "policy": self.policy.as_dict(),
            "arms": {name: {"stats": a.stats.as_dict(), "samples_ms": list(a.samples),
                            "dropped_samples_ms": list(a.dropped_samples)} for name, a in self.arms.items()},
            "clock": self.clock.as_dict() if self.clock else None,
            "arm_clocks": {n: c.as_dict() for n, c in clocks.items()} if (clocks := self.arm_clocks) else None,
            "control_ratio": self.control_ratio, "control_ok": self.control_ok, "host_gaps": self.host_gaps,
            "host_us": self.host_us, "host_samples_us": {n: list(v) for n, v in self.host_samples_us.items()},
            "spot_calls": self.spot_calls, "spot_seed": self.spot_seed,
            "drain_us": {n: [d * 1e6 for d in v] for n, v in self.drain_s.items()},
            "cpu": self.cpu, "wait_source": self.wait_source, "quanta": self.quanta,
            "refresh": self.refresh.as_dict() if self.refresh is not None else None,
            "clock_faults": self.clock_faults, "clock_check": self.clock_check,
        }
        if self.stop is not None:  # a noise-stopped row reads as before the statistic stop
            row["stop"] = self.stop.as_dict()
        if include_rounds:  # columnar: compact for thousands of rounds
            row["rounds"] = {
                "t0": [r.t0 for r in self.rounds], "t1": [r.t1 for r in self.rounds],
                "first": [r.order[0] for r in self.rounds],
                "min_sm_mhz": [r.min_sm_mhz for r in self.rounds],
                "sm_mhz": [r.sm_mhz for r in self.rounds], "mem_mhz": [r.mem_mhz for r in self.rounds],
                "dropped": [r.index for r in self.rounds if r.dropped],
                "drop_reasons": {str(r.index): list(r.drop_reasons) for r in self.rounds if r.dropped},
                "waited": {str(r.index): list(r.waited) for r in self.rounds if r.waited},
            }
        return jsonable(row)
