"""Typed payloads of a line's own rows (ledger/payloads.py holds the outcome rows' and the
class they all derive from): the registered row's ``registration`` and the checks register
made (tolerance floor and power, timing resolution, reductio), the verdict's clauses,
coverage, ``measured_at``, integration steps and replication, a re-open's ``reopens`` and a
replicate's ``replicate``. Each has ``from_row`` and ``dump`` as in ledger/payloads.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.ledger.payloads import Payload, each
from harness.vocab.outcomes import Coverage, MeasuredAt, Replicate

# vocab/outcomes.py's (the streams, coverage and places read them there), re-exported beside the line's payloads
__all__ = ["Coverage", "MeasuredAt", "Replicate"]


@dataclass(frozen=True, kw_only=True)
class IntegrationStep(Payload):
    """One entry of a verdict's ``integration`` (governance/verdict.py ``integration_summary``):
    a candidate's measured step gain beside the one its probe predicted."""

    seq: Any = None
    candidate: Any = None
    correct: Any = None
    rig_noisy: Any = None
    throttled: Any = None
    step_gain: Any = None
    step_gain_predicted: Any = None
    probe_factor: Any = None
    op_share: Any = None
    op_share_used: Any = None
    probe_source: Any = None


@dataclass(frozen=True, kw_only=True)
class Clause(Payload):
    """One clause of a verdict's bar (or of its [verify]): its text, value, comparison and outcome."""

    text: Any = None
    value: Any = None
    op: Any = None
    threshold: Any = None
    passed: Any = None
    n: Any = None
    note: Any = None
    n_failed: Any = None  # a [verify] clause's: the rows that failed it


@dataclass(frozen=True, kw_only=True)
class RegistrationSummary(Payload):
    """The registered row's ``registration`` (registration/schema.py ``Registration.summary``)."""

    line: Any = None
    path: Any = None
    sha256: Any = None
    schema: Any = None
    hypothesis: Any = None
    workload: Any = None
    candidates: Any = None
    baseline: Any = None
    amends: Any = None
    grid: Any = None
    atol: Any = None
    rtol: Any = None
    seeds: Any = None
    families: Any = None
    min_pass_rate: Any = None
    timing: Any = None
    numerics: Any = None
    go: Any = None
    prediction: Any = None
    primary: Any = None
    include_noisy: Any = None
    allow_missing: Any = None
    min_coverage: Any = None
    accept_weak: Any = None
    verify: Any = None
    mixed_devices: Any = None
    beyond_ceiling_ok: Any = None
    integration: Any = None
    replication: Any = None


@dataclass(frozen=True, kw_only=True)
class Replication(Payload):
    """A registration's ``[replication]`` (the rule), and on a verdict row the rule with each
    instance's clause values it was combined from (registration/replication.py ``combined``)."""

    instances: Any = None
    combine: Any = None
    per_instance: Any = None

    @property
    def instance_values(self) -> list["InstanceValues"]:
        return each(InstanceValues, self.per_instance)


@dataclass(frozen=True, kw_only=True)
class InstanceValues(Payload):
    """One instance's reading of the bar in a verdict's ``replication``."""

    instance: Any = None
    original: Any = None
    decided_on: Any = None
    clauses: Any = None
    primary_value: Any = None
    passed: Any = None


@dataclass(frozen=True, kw_only=True)
class ToleranceFloor(Payload):
    """One dtype's entry of a registered row's ``tolerance_floor`` (governance/power.py): the
    atol the reference rounded to that dtype needs, or why it was not checked."""

    dtype: Any = None
    point: Any = None
    atol: Any = None
    rtol: Any = None
    need_atol: Any = None
    need_rtol: Any = None
    passed: Any = None
    configs: Any = None
    seeds: Any = None
    magnitude: Any = None
    worst: Any = None
    unchecked: Any = None

    @property
    def worst_element(self) -> "WorstElement | None":
        return WorstElement.from_row(self.worst)


@dataclass(frozen=True, kw_only=True)
class WorstElement(Payload):
    """A ``tolerance_floor`` entry's ``worst`` (measurement/feasible.py): the deciding element —
    where it is, its float64 reference and nearest representable value, the error, half a ULP
    there, the bound it is held to and its ratio to the bound."""

    config: Any = None
    seed: Any = None
    family: Any = None
    output: Any = None  # which output of a several-output workload (absent: the first)
    index: Any = None
    ref: Any = None
    nearest: Any = None
    err: Any = None
    half_ulp: Any = None
    bound: Any = None
    ratio: Any = None


@dataclass(frozen=True, kw_only=True)
class CanaryCheck(Payload):
    """One canary check of a registered row's ``tolerance_power``: whether the tolerance rejects it."""

    canary: Any = None
    dtype: Any = None
    point: Any = None
    atol: Any = None
    rtol: Any = None
    reject_atol: Any = None
    reject_rtol: Any = None
    rejected: Any = None
    worst_ratio: Any = None


@dataclass(frozen=True, kw_only=True)
class TolerancePower(Payload):
    """A registered row's ``tolerance_power`` (governance/power.py): the canaries, the weak ones
    waived, the precision downgrades seen."""

    canaries: Any = None
    accepted_weak: Any = None
    downgrades: Any = None
    subset: Any = None

    @property
    def checks(self) -> list[CanaryCheck]:
        return each(CanaryCheck, self.canaries)


@dataclass(frozen=True, kw_only=True)
class TimingResolution(Payload):
    """A registered row's ``timing_resolution`` (governance/power.py): the smallest speedup the
    line can resolve, and from which control spread."""

    mode: Any = None
    resolvable_speedup: Any = None
    devices: Any = None
    control_tolerance: Any = None
    warnings: Any = None


@dataclass(frozen=True, kw_only=True)
class ResolvedDevice(Payload):
    """One GPU's entry of a ``timing_resolution``'s ``devices``: the result rows read, the
    control's spread used (at most the tolerance) and the one observed."""

    n: Any = None
    spread: Any = None
    observed_spread: Any = None


@dataclass(frozen=True, kw_only=True)
class ReductioDevice(Payload):
    """A device a registered bar was (or could not be) checked against (governance/reductio.py)."""

    device: Any = None
    kind: Any = None
    ceilings_ref: Any = None
    baseline_times: Any = None
    why: Any = None


@dataclass(frozen=True, kw_only=True)
class AmdahlCeiling(Payload):
    """The reductio's Amdahl ceiling of an [integration] line: the op's share and its source."""

    op_share: Any = None
    op_share_source: Any = None
    ceiling: Any = None


@dataclass(frozen=True, kw_only=True)
class Reductio(Payload):
    """A registered row's ``reductio`` (governance/reductio.py ``at_register``)."""

    checked: Any = None
    not_checked: Any = None
    note: Any = None
    waived: Any = None
    amdahl: Any = None
    beyond_ceiling_ok: Any = None


@dataclass(frozen=True, kw_only=True)
class Reopens(Payload):
    """The earlier, uncommitted-verdict ledger a registered row replaces."""

    commit: Any = None
    rows: Any = None
    last_hash: Any = None


@dataclass(frozen=True, kw_only=True)
class StepCheck(Payload):
    """One kernel's step against the float64 step in an integration row's ``gate``
    (commands/integration.py ``_close``): whether it passed, and why not."""

    ok: Any = None
    max_abs_err: Any = None
    finite: Any = None
    why: Any = None


@dataclass(frozen=True, kw_only=True)
class InSitu(Payload):
    """One kernel's hook calls timed inside the step, in an integration row's ``insitu``."""

    call_ms: Any = None
    calls_per_step: Any = None
    op_ms_per_step: Any = None
    steps: Any = None


@dataclass(frozen=True, kw_only=True)
class Probe(Payload):
    """An integration row's ``probe``: the kernel grid's result the step gain is set beside
    (the row at the step's attention shape, else the grid's geomean speedup)."""

    config_key: Any = None
    source: Any = None
    speedup: Any = None
    ms: Any = None
    baseline_ms: Any = None
    baseline_factor: Any = None


@dataclass(frozen=True, kw_only=True)
class Failure(Payload):
    """One entry of a verdict's ``failures`` (governance/verdict.py ``failed_alone``): a pair the
    bar decides on whose kernel failed, and how."""

    seq: Any = None
    config_key: Any = None
    candidate: Any = None
    state: Any = None
    tag: Any = None
    reason: Any = None


@dataclass(frozen=True, kw_only=True)
class ArmSamples(Payload):
    """A probe's raw interleaved samples (ms, round by round) of the baseline and the candidate."""

    baseline: Any = None
    candidate: Any = None

    @property
    def rounds(self) -> int:
        """The rounds both arms hold (the paired ones where they pair up)."""
        return min(len(self.baseline), len(self.candidate))


@dataclass(frozen=True, kw_only=True)
class ProbeAnswer(Payload):
    """What `bench probe` answers (commands/probe.py, one JSON object on stdout): the commit
    that ran, where its code came from, the outcome, and for a result its speedup, CI and raw
    samples; `bench bisect` reads it, and a `probe` row keeps its ``env`` and ``gate``."""

    probe: Any = None  # the answer's format (commands/probe.py PROBE_FORMAT)
    commit: Any = None
    harness_version: Any = None
    code_root: Any = None
    config_key: Any = None
    candidate: Any = None
    baseline: Any = None
    env: Any = None
    outcome: Any = None
    reason: Any = None
    tag: Any = None
    gate: Any = None
    transient: Any = None
    speedup: Any = None
    ci: Any = None
    control: Any = None
    rig_noisy: Any = None
    samples: Any = None

    @property
    def arms(self) -> ArmSamples:
        """The raw samples (a result's answer holds them; any other answer's arms hold none)."""
        return ArmSamples.from_row(self.samples) or ArmSamples(baseline=[], candidate=[])


@dataclass(frozen=True, kw_only=True)
class BisectRun(Payload):
    """A `probe` row's ``bisect``: the run it belongs to (commands/bisect.py)."""

    line: Any = None
    config_key: Any = None
    candidate: Any = None
    baseline: Any = None
    good: Any = None
    bad: Any = None
    by: Any = None  # the commit the bisect ran from
    started: Any = None
    budget: Any = None
    threshold: Any = None
