"""Typed payloads: one class per nested object a ledger row carries (a result's ``timing``
and its arms' samples, ``metrics``, the ``gate``, ``sustained``, ``cost``, a profile's
launches ...; a line's own rows' — the registration, register's checks, the verdict's clauses
— are in ledger/line_payloads.py), each with ``from_row`` (the object as read) and ``dump``
(the object as written), so that ``from_row(d).dump() == d``.

``from_row`` is as tolerant as the readers it replaced: a field an older schema did not
write reads its default (None unless the class says otherwise), a field no class declares is
kept for ``dump``, and an object that is not a JSON object (absent, null) gives None. Readers
outside the ledger's row and payload modules read these attributes, never string keys
(tests/test_payload_reads.py counts them). The base class, ``Payload``, is vocab/payload.py's, so
that modules below ledger/ type what they read the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.measurement.correctness.figures import ErrorFigures
from harness.measurement.counters import COUNTERS, LAUNCH_METRICS
from harness.measurement.numerics import NumericState
from harness.workloads import Config
from harness.vocab.metrics import METRICS, STEP_METRICS
from harness.vocab.outcomes import CRASHED, INCORRECT, SKIPPED
from harness.vocab.payload import Payload, by_role, each

__all__ = ["Payload", "by_role", "each"]  # the base and helpers, re-exported for the payload modules above vocab/


def _table_class(name: str, doc: str, names) -> Any:  # a class made at import: its fields are unknown to mypy
    """A payload class with one field per name of a table the harness extends by adding a name."""
    return dataclasses.make_dataclass(
        name, [(n, Any, field(default=None)) for n in dict.fromkeys(names)], bases=(Payload,), frozen=True,
        kw_only=True, namespace={"__doc__": doc, "__module__": __name__})


# A row's ``metrics``: one field per metric of vocab/metrics.py's table (the kernel's and the
# model step's), so a metric added there is a field here.
Metrics = _table_class("Metrics", "A row's metrics, each of vocab/metrics.py's table (None: not held).",
                       (m.name for m in (*METRICS, *STEP_METRICS)))


# A row's ``config`` (workloads.Config.as_dict) and ``numerics`` (the global numeric flags it
# ran under: measurement/numerics.py NumericState): one field per field of those classes.
ConfigFields = _table_class("ConfigFields", "A row's config: the workload's shape and dtype.",
                            (f.name for f in dataclasses.fields(Config)))


def config_workload(config) -> str | None:
    """The workload a row's config names (None: none recorded, as in attention's oldest rows)."""
    fields = ConfigFields.from_row(config)
    name = None if fields is None else fields.workload
    return name if isinstance(name, str) else None


Numerics = _table_class("Numerics", "A row's numerics: the global numeric flags it ran under.",
                        (f.name for f in dataclasses.fields(NumericState)))


@dataclass(frozen=True, kw_only=True)
class Stats(Payload):
    """One arm's summary statistics (measurement/stats.py ``Stats.as_dict``)."""

    n: Any = None
    median: Any = None
    min: Any = None
    max: Any = None
    mean: Any = None
    p20: Any = None
    p80: Any = None
    iqr: Any = None
    rel_noise: Any = None
    median_lo: Any = None
    median_hi: Any = None


@dataclass(frozen=True, kw_only=True)
class Samples(Payload):
    """One arm of a measurement: its statistics and raw samples, kept and dropped."""

    stats: Any = None
    samples_ms: Any = None
    dropped_samples_ms: Any = None

    @property
    def summary(self) -> Stats | None:
        return Stats.from_row(self.stats)


@dataclass(frozen=True, kw_only=True)
class Clock(Payload):
    """The SM clock over the timed rounds (measurement/clocks.py ``ClockSummary.as_dict``), or
    one arm's own clock and cycles (``arm_clocks``)."""

    source: Any = None
    reference_mhz: Any = None
    reference_clean: Any = None
    min_mhz: Any = None
    mean_mhz: Any = None
    max_mhz: Any = None
    max_clock_mhz: Any = None
    app_clock_mhz: Any = None
    poll_hz: Any = None
    n_readings: Any = None
    dropped_rounds: Any = None
    drop_reasons: Any = None
    mem_min_mhz: Any = None
    mem_max_mhz: Any = None
    temp_min_c: Any = None
    temp_max_c: Any = None
    power_min_w: Any = None
    power_max_w: Any = None
    power_mean_w: Any = None
    kcycles: Any = None


@dataclass(frozen=True, kw_only=True)
class Measurement(Payload):
    """A result's ``timing`` (measurement/timing ``Measurement.to_row``): the interleaved
    rounds' protocol, each arm's samples, the clock, the control and the stop."""

    mode: Any = None
    effective_mode: Any = None
    timer: Any = None
    n_slots: Any = None
    graph_replays: Any = None
    stop_reason: Any = None
    n_rounds: Any = None
    n_dropped: Any = None
    n_waited: Any = None
    throttled: Any = None
    throttle_note: Any = None
    warmup_rounds: Any = None
    warmup_extensions: Any = None
    elapsed_s: Any = None
    timing_note: Any = None
    clock_note: Any = None
    policy: Any = None
    arms: Any = None
    clock: Any = None
    arm_clocks: Any = None
    control_ratio: Any = None
    control_ok: Any = None
    host_gaps: Any = None
    host_us: Any = None
    host_samples_us: Any = None
    spot_calls: Any = None
    spot_seed: Any = None
    drain_us: Any = None
    cpu: Any = None
    wait_source: Any = None
    quanta: Any = None
    refresh: Any = None
    clock_faults: Any = None
    clock_check: Any = None
    stop: Any = None
    rounds: Any = None

    def arm(self, name: str) -> Samples | None:
        """Arm ``name``'s samples; None where the measurement has no such arm."""
        return Samples.from_row(self.arms.get(name)) if isinstance(self.arms, Mapping) else None

    def arm_clock(self, name: str) -> Clock | None:
        """Arm ``name``'s own clock and cycles; None where the row has none."""
        return Clock.from_row(self.arm_clocks.get(name)) if isinstance(self.arm_clocks, Mapping) else None

    @property
    def clock_summary(self) -> Clock | None:
        return Clock.from_row(self.clock)


@dataclass(frozen=True, kw_only=True)
class Rounds(Payload):
    """A measurement's interleaved rounds, columnar (``Measurement.to_row``'s ``rounds``)."""

    t0: Any = None
    t1: Any = None
    first: Any = None
    min_sm_mhz: Any = None
    sm_mhz: Any = None
    mem_mhz: Any = None
    dropped: Any = None
    drop_reasons: Any = None
    waited: Any = None


@dataclass(frozen=True, kw_only=True)
class Stop(Payload):
    """A statistic-stopped measurement's ``stop`` (measurement/timing/criteria.py ``StopRecord``)."""

    rule: Any = None
    precision: Any = None
    alpha: Any = None
    looks: Any = None
    k: Any = None
    confidence: Any = None
    n: Any = None
    reached: Any = None
    quantities: Any = None
    taken: Any = None


@dataclass(frozen=True, kw_only=True)
class StopQuantity(Payload):
    """One bar quantity of a ``stop``: its arms' names and its ratio and interval (criteria.py ``Quantity``)."""

    numerator: Any = None
    denominator: Any = None
    ratio: Any = None
    lo: Any = None
    hi: Any = None
    half_width: Any = None


@dataclass(frozen=True, kw_only=True)
class Batches(Payload):
    """The sustained phase's batches: calls per batch and each batch's clocks."""

    calls: Any = None
    sm_mhz: Any = None
    mem_mhz: Any = None


@dataclass(frozen=True, kw_only=True)
class Floor(Payload):
    """A result's ``floor``: the ceilings each protocol's rates were held to, and the margin."""

    calls: Any = None
    margin: Any = None
    rounds: Any = None
    sustained: Any = None


@dataclass(frozen=True, kw_only=True)
class FloorCeilings(Payload):
    """One protocol's physical floor in a ``floor`` (measurement/floor.py ``Floor.as_dict``): the
    ceilings used (copy bandwidth, matmul rate), the bytes and FLOPs of a call, and the floor."""

    mode: Any = None
    min_bytes: Any = None
    held_bytes: Any = None
    cache_bytes: Any = None
    cache_source: Any = None
    copy_gbps: Any = None
    bytes_floor_ms: Any = None
    flops: Any = None
    matmul_tflops: Any = None
    flops_floor_ms: Any = None
    floor_ms: Any = None
    margin: Any = None
    limit_ms: Any = None


@dataclass(frozen=True, kw_only=True)
class Sustained(Payload):
    """The candidate's back-to-back phase (measurement/timing/sustained.py ``Sustained.as_dict``)."""

    arm: Any = None
    mode: Any = None  # held by rows an older bench wrote
    flush: Any = None
    timer: Any = None
    warm_s: Any = None
    n_calls: Any = None
    median_ms: Any = None
    samples_ms: Any = None
    last_slot: Any = None
    sm_mhz: Any = None
    power_w: Any = None
    mem_mhz: Any = None
    reasons: Any = None
    clock_note: Any = None
    clock_fault: Any = None
    clock_check: Any = None
    kcycles: Any = None
    batches: Any = None


@dataclass(frozen=True, kw_only=True)
class GateCheck(Payload):
    """One check of the gate (its worst, or a failing one): what it ran and its error figures."""

    tag: Any = None
    reason: Any = None
    config: Any = None
    seed: Any = None
    family: Any = None
    figures: Any = None


# A gate check's error figures: one field per field of measurement/correctness/figures.py
# ``ErrorFigures`` (the worst element's output and reference, its distance against the tolerance).
Figures = _table_class("Figures", "A gate check's error figures (correctness/figures.py ErrorFigures.as_dict).",
                       (f.name for f in dataclasses.fields(ErrorFigures)))


@dataclass(frozen=True, kw_only=True)
class Gate(Payload):
    """One kernel's correctness gate (measurement/correctness/results.py ``GateResult.to_row``)."""

    kernel: Any = None
    config: Any = None
    passed: Any = None
    pass_rate: Any = None
    n_seeds: Any = None
    n_seeds_passed: Any = None
    min_pass_rate: Any = None
    seeds: Any = None
    families: Any = None
    boundary_configs: Any = None
    skipped_configs: Any = None
    atol: Any = None
    rtol: Any = None
    tag: Any = None
    reason: Any = None
    tags: Any = None
    n_checks: Any = None
    n_failed: Any = None
    reference_seconds: Any = None
    gate_seconds: Any = None
    reused: Any = None
    worst: Any = None
    failures: Any = None
    failures_left_out: Any = None

    @property
    def worst_check(self) -> GateCheck | None:
        return GateCheck.from_row(self.worst)

    @property
    def failing(self) -> list[GateCheck]:
        return each(GateCheck, self.failures)


@dataclass(frozen=True, kw_only=True)
class Policy(Payload):
    """A result's ``policy``: the registration's [timing] it was measured under
    (measurement/timing/policy.py ``TimingPolicy.as_dict``; a noise-stopped one leaves out the
    statistic stop's keys)."""

    mode: Any = None
    warmup_ms: Any = None
    min_samples: Any = None
    max_samples: Any = None
    min_time_ms: Any = None
    noise_target: Any = None
    timeout_s: Any = None
    throttle_threshold: Any = None
    max_drop_fraction: Any = None
    control_tolerance: Any = None
    graph_replays: Any = None
    lead_calls: Any = None
    watchdog_s: Any = None
    stop: Any = None
    precision: Any = None
    alpha: Any = None


# A `profile` row's launches (measurement/counters.py ``Launch.as_dict``: which kernel, then its
# counters under the names ``LAUNCH_METRICS`` maps ncu's to) and its per-call totals
# (``counters.per_call``): one field per name of those tables, so extending a table extends these.
Launch = _table_class("Launch", "One kernel launch of a `profile` row: its kernel, grid, block and counters.",
                      ("id", "kernel", "grid", "block", "nvtx", *LAUNCH_METRICS))
Counters = _table_class("Counters", "A `profile` row's per-call counters over its launches.", COUNTERS)


@dataclass(frozen=True, kw_only=True)
class OutputCheck(Payload):
    """A `profile` row's ``output_check``: whether the profiled call's output passed, and why not."""

    passed: Any = None
    reason: Any = None


@dataclass(frozen=True, kw_only=True)
class Bare(Payload):
    """A `profile` row's ``bare`` (commands/profile.py ``bare_payload``): the workload's bare op
    profiled at the row's config — its launches and counters, or why it has none."""

    op: Any = None
    launches: Any = None
    counters: Any = None
    output_check: Any = None
    correct: Any = None
    error: Any = None
    outside_range: Any = None


@dataclass(frozen=True, kw_only=True)
class GateAnswer(Payload):
    """A `gate` job's answer (pipeline/gate.py ``gate_job``), which `bench profile` runs before it
    profiles a kernel: the gate's summary (a profile row's ``gate``), whether it passed, and why not."""

    gate: Any = None
    passed: Any = None
    tag: Any = None
    reason: Any = None


@dataclass(frozen=True, kw_only=True)
class OpShare(Payload):
    """An `integration` row's ``op_share_used``: the op's share of the step, and where it came from."""

    value: Any = None
    source: Any = None


@dataclass(frozen=True, kw_only=True)
class Amdahl(Payload):
    """An `integration` row's ``amdahl_violated``: a measured gain above the op's share allows."""

    gain: Any = None
    op_share: Any = None
    inverted_share: Any = None


@dataclass(frozen=True, kw_only=True)
class Cost(Payload):
    """The harness's own time on a config (pipeline/phase.py ``Account.as_row``)."""

    seconds: Any = None
    per_kernel: Any = None
    of_which: Any = None
    total: Any = None


@dataclass(frozen=True, kw_only=True)
class Env(Payload):
    """A row's ``env``: the device and host it was produced on (measurement/device.py ``env_summary``)."""

    device: Any = None
    python: Any = None
    platform: Any = None
    host: Any = None
    cpu_count: Any = None
    torch: Any = None
    triton: Any = None
    cupy: Any = None
    triton_interpret: Any = None
    cuda_alloc_conf: Any = None
    cuda: Any = None
    gpu: Any = None
    capability: Any = None
    sm_count: Any = None
    gpu_memory_bytes: Any = None
    cudnn: Any = None
    driver: Any = None
    gpu_index: Any = None
    gpu_uuid: Any = None
    gpu_serial: Any = None
    l2_bytes: Any = None


@dataclass(frozen=True, kw_only=True)
class KernelSource(Payload):
    """Which file one role's kernel came from (pipeline/rows.py ``kernel_source``)."""

    path: Any = None
    sha256: Any = None
    distribution: Any = None


@dataclass(frozen=True, kw_only=True)
class CeilingsRef(Payload):
    """Which ceilings row an outcome row used: its seq and chain hash."""

    seq: Any = None
    hash: Any = None


# The rejections: a pair refused by a check (``incorrect``), not measured (``skipped``) or
# whose kernel failed (``crashed``). One constructor each, so every stage writes a rejection's
# fields the same way; ``base`` is the pair's shared fields (pipeline/rows.py ``base_row``).

def incorrect(base: Mapping, *, tag: str, reason: str, role: str = "candidate", **fields) -> tuple[str, dict]:
    """An ``incorrect`` row's kind and payload: the check ``tag`` failed, ``reason`` says how."""
    return INCORRECT, {**base, "role": role, "tag": tag, "reason": reason, **fields}


def skipped(base: Mapping, *, reason: str, **fields) -> tuple[str, dict]:
    """A ``skipped`` row's kind and payload: the pair was not measured, ``reason`` says why."""
    return SKIPPED, {**base, "reason": reason, **fields}


def crashed(base: Mapping, *, reason: str, **fields) -> tuple[str, dict]:
    """A ``crashed`` row's kind and payload: the kernel raised or took its worker down."""
    return CRASHED, {**base, "reason": reason, **fields}
