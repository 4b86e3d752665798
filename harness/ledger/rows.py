"""Typed ledger rows: one class per row kind, each with ``load`` (a dict read from a ledger
file) and ``dump`` (the dict written), so that ``load(d).dump() == d`` for every row ever
written and the hash chain holds across the round trip.

Every reader of a ledger gets these (``ledger.format.read_rows``, ``Ledger.rows``), and
``Ledger.append`` builds one from the fields it is given, so a writer cannot put a field in a
row that no class declares: a misspelt or undeclared field is refused before anything is
written. The values of nested fields (``metrics``, ``timing``, ``env``, ``config``, ``gate``
...) stay the JSON objects they were written as; docs/contracts.md#rows lists them, and
ledger/payloads.py and ledger/line_payloads.py read them as typed objects.

Format history (``schema``, every row's ledger schema, ``ledger.format.LEDGER_SCHEMA``):

- 1: the rows of bench 0.1. Fields added since without a new schema are optional, so rows
  written before they existed still load (their value is None and ``has`` says whether the
  row holds the field): ``code``, ``ceilings_ref``, ``remeasured``, ``coverage``, ``verify``,
  ``floor``, ``rate_protocol``, ``sustained``, ``empty_window``, ``rig_noise``,
  ``tolerance_power``, ``timing_resolution``, ``tolerance_floor``, ``reductio``, ``reopens``,
  ``cost``, and the `integration` row kind (a bench before it refuses such a row as an unknown
  kind) with the verdict's ``integration``; the `profile` row's ``bare`` (the workload's bare
  op's counters beside the kernel's; a bench before it refuses such a row as holding an
  unknown field); the verdict's ``primary_note`` (why a primary
  against a peer, a schema-5 registration's, has no value); the verdict's ``failures`` (a
  NO-GO decided on failures alone); the verdict's ``next_run`` (the between-run variance a bar
  naming ``speedup_next_low`` / ``speedup_next_high`` was decided with: governance/nextrun.py);
  ``replicate`` on outcome and supersedes rows (a row `bench
  replicate` wrote: which instance, which verdict, at which commit, on which stack — a bench
  before it refuses such a row as holding an unknown field, never reads it as the line's own)
  and the verdict's ``replication`` (the per-instance clause values a ``[replication]``
  verdict was combined from).

A row of a newer schema is refused by ``ledger.format.check_schema`` with the fix (upgrade
bench); a row of this schema with a field no class declares is refused here the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from harness.vocab.outcomes import (CEILINGS, CRASHED, INCORRECT, INTEGRATION, PROBE, PROFILE, REGISTERED,
                                         RESULT, SKIPPED, SUPERSEDES, THROTTLED, UNSUPPORTED, VERDICT, is_failure_tag)


class UnknownField(ValueError):
    """A row holds a field its kind's class does not declare (or names no known kind)."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """The fields every row carries: its place in the chain and what produced it."""

    KIND: ClassVar[str] = ""

    schema: int | None = None
    seq: int | None = None
    line: str | None = None
    time: str | None = None
    prev_hash: str | None = None
    hash: str | None = None
    commit: str | None = None  # the code commit the row was produced at
    harness_version: str | None = None
    env: dict | None = None  # the device and host (measurement.device.env_summary)
    # Code packages loaded from an installed distribution (provenance/code.outside_code).
    code: list | None = None
    registration_sha256: str | None = None
    registration_commit: str | None = None
    # The fields the row holds (a field absent from a row reads None; ``has`` tells the two apart).
    present: frozenset = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self):
        if not self.present:  # built in code, not loaded: it holds the fields that were given
            object.__setattr__(self, "present", frozenset(f.name for f in _fields(type(self))
                                                          if getattr(self, f.name) is not None))

    @property
    def kind(self) -> str:
        return self.KIND

    def has(self, name: str) -> bool:
        """Whether the row holds ``name`` (written, possibly as null)."""
        return name in self.present

    def dump(self) -> dict:
        """The row as written: exactly the fields it holds."""
        return {"kind": self.KIND, **{f.name: getattr(self, f.name) for f in _fields(type(self))
                                      if f.name in self.present}}

    def replace(self, **changes) -> "Row":
        """A copy with ``changes`` (which it then holds)."""
        return dataclasses.replace(self, present=self.present | set(changes), **changes)


@dataclass(frozen=True, kw_only=True)
class RegisteredRow(Row):
    """A line's first row: the registration it holds the line to, and what register checked."""

    KIND: ClassVar[str] = REGISTERED
    registration: dict | None = None  # Registration.summary() and its repository-relative path
    n_configs: int | None = None
    amends: str | None = None
    tolerance_floor: dict | None = None  # governance/power.tolerance_floor
    tolerance_power: dict | None = None  # governance/power.tolerance_power
    timing_resolution: dict | None = None  # governance/power.timing_resolution
    reductio: dict | None = None  # governance/reductio.at_register
    reopens: dict | None = None  # the earlier, uncommitted-verdict ledger this one replaces


@dataclass(frozen=True, kw_only=True)
class OutcomeRow(Row):
    """What happened to one (config, candidate) pair at one sweep. It declares every outcome
    kind's fields, so a reader asks any outcome row for any of them (None: not held); each
    kind's class names the ones its rows may hold (``HOLDS``), and ``load`` refuses others."""

    HOLDS: ClassVar[frozenset] = frozenset()

    config: dict | None = None
    config_key: str | None = None
    candidate: str | None = None
    baseline: str | None = None
    role: str | None = None  # "baseline" on the baseline's own rows, "candidate" on a check's rejection
    reason: str | None = None
    ceilings_ref: dict | None = None  # {"seq", "hash"} of the ceilings row used
    kernel_sources: dict | None = None  # per role: path, sha256, distribution
    # Measured (result; what a rejection or a cut-short timing measured before it stopped).
    metrics: dict | None = None  # vocab/metrics.py's table
    timing: dict | None = None  # measurement/timing Measurement.to_row(): raw samples per arm
    policy: dict | None = None  # the registration's [timing]
    empty_window: dict | None = None
    rate_protocol: str | None = None
    sustained: dict | None = None
    rig_noisy: bool | None = None
    rig_noise: list | None = None
    impossible: str | None = None  # why the result is faster than the device can go
    floor: dict | None = None
    memory: dict | None = None
    gate: dict | None = None  # per role: the correctness gate's summary
    numerics: dict | None = None
    kernel_numerics: dict | None = None
    kernel_details: dict | None = None
    # Rejected, not measured, crashed.
    tag: str | None = None  # the check that failed (outcomes.rejection_tag)
    predicted_bytes: int | None = None
    available_bytes: int | None = None
    memory_breakdown: dict | None = None
    undersampled: bool | None = None
    traceback: str | None = None
    fault: dict | None = None  # a worker's fault: in which phase, its last output
    # The harness's own time on the config (pipeline/phase.py Account.as_row): the same for
    # every row of one config.
    cost: dict | None = None
    # A replicate's row (`bench replicate`, registration/replication.py): {of, closing_commit, at,
    # instance, stack}; absent from the line's own rows.
    replicate: dict | None = None

    @property
    def pair(self) -> tuple[str, str]:
        return self.config_key, self.candidate

    @property
    def is_baseline(self) -> bool:
        return self.role == "baseline"


_PAIR = frozenset({"config", "config_key", "candidate", "baseline", "role", "reason", "ceilings_ref",
                   "kernel_sources", "cost", "replicate"})


@dataclass(frozen=True, kw_only=True)
class ResultRow(OutcomeRow):
    """A measured pair: metrics, raw samples and CI, the control."""

    KIND: ClassVar[str] = RESULT
    HOLDS: ClassVar[frozenset] = _PAIR | {"metrics", "timing", "policy", "empty_window", "rate_protocol", "sustained",
                                          "rig_noisy", "rig_noise", "impossible", "floor", "memory", "gate",
                                          "numerics", "kernel_numerics", "kernel_details"}


@dataclass(frozen=True, kw_only=True)
class IncorrectRow(OutcomeRow):
    """A pair that failed a correctness check; ``tag`` names it (outcomes.rejection_tag)."""

    KIND: ClassVar[str] = INCORRECT
    HOLDS: ClassVar[frozenset] = _PAIR | {"tag", "gate", "timing", "sustained", "empty_window"}

    def __post_init__(self) -> None:
        super().__post_init__()
        # Written or read, a tag names a check of the vocabulary (vocab/outcomes.py): a report
        # or verdict explains a rejection by its tag, and an unknown one explains nothing.
        if self.tag is not None and not is_failure_tag(self.tag):
            raise UnknownField(f"an incorrect row's tag {self.tag!r} is no failure tag (vocab/outcomes.py)")


@dataclass(frozen=True, kw_only=True)
class SkippedRow(OutcomeRow):
    """A pair not measured: memory short, timing cut short, not judgeable, or its baseline failed."""

    KIND: ClassVar[str] = SKIPPED
    HOLDS: ClassVar[frozenset] = _PAIR | {"predicted_bytes", "available_bytes", "memory_breakdown", "undersampled",
                                          "timing", "policy", "memory", "floor", "gate"}


@dataclass(frozen=True, kw_only=True)
class ThrottledRow(OutcomeRow):
    """A pair whose clocks dropped in too many rounds (or could not be verified)."""

    KIND: ClassVar[str] = THROTTLED
    HOLDS: ClassVar[frozenset] = _PAIR | {"undersampled", "timing", "policy", "memory"}


@dataclass(frozen=True, kw_only=True)
class CrashedRow(OutcomeRow):
    """A pair whose kernel raised (in the gate: ``tag`` exception, ``gate``), ran out of memory, or
    took its worker down (``fault``)."""

    KIND: ClassVar[str] = CRASHED
    HOLDS: ClassVar[frozenset] = _PAIR | {"traceback", "fault", "predicted_bytes", "tag", "gate"}


@dataclass(frozen=True, kw_only=True)
class UnsupportedRow(OutcomeRow):
    """A pair the kernel says it cannot run (``reason``)."""

    KIND: ClassVar[str] = UNSUPPORTED
    HOLDS: ClassVar[frozenset] = _PAIR


@dataclass(frozen=True, kw_only=True)
class SupersedesRow(Row):
    """Rows of one config a re-run replaces (``supersedes``: their seqs), and why."""

    KIND: ClassVar[str] = SUPERSEDES
    config_key: str | None = None
    supersedes: list | None = None
    reason: str | None = None
    replicate: dict | None = None  # a replicate's re-run: it supersedes only that replicate's rows


@dataclass(frozen=True, kw_only=True)
class ProfileRow(Row):
    """One kernel's hardware counters at one config (commands/profile.py)."""

    KIND: ClassVar[str] = PROFILE
    config: dict | None = None
    config_key: str | None = None
    candidate: str | None = None
    role: str | None = None
    gate: Any = None  # the gate's summary, or the seq of the sweep row whose gate it passed
    launches: list | None = None
    counters: dict | None = None
    formulas: dict | None = None
    l2_bytes: int | None = None
    impossible: str | None = None
    output_check: dict | None = None
    correct: bool | None = None
    error: str | None = None
    ncu: dict | None = None
    bare: dict | None = None  # the workload's bare op at the config, where [verify] names its counters

    @property
    def pair(self) -> tuple[str, str]:
        return self.config_key, self.candidate


@dataclass(frozen=True, kw_only=True)
class IntegrationRow(Row):
    """One candidate's model step against the baseline's (commands/integration.py): its float64
    check, the step metrics (metrics.STEP_METRICS; None unless it passed and was timed), the
    calls timed at the hook, the probe it is set beside, and an Amdahl violation."""

    KIND: ClassVar[str] = INTEGRATION
    candidate: str | None = None
    baseline: str | None = None
    step: str | None = None
    dtype: str | None = None
    correct: bool | None = None
    gate: dict | None = None
    metrics: dict | None = None
    timing: dict | None = None
    insitu: dict | None = None
    probe: dict | None = None
    op_share_used: dict | None = None
    amdahl_violated: dict | None = None
    throttled: bool | None = None
    rig_noisy: bool | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class VerdictRow(Row):
    """A line's closing row: GO or NO-GO, and the numbers behind it."""

    KIND: ClassVar[str] = VERDICT
    outcome: str | None = None
    go: str | None = None
    clauses: list | None = None
    primary: str | None = None
    primary_value: float | None = None
    primary_note: str | None = None  # why a primary against a peer has no value (bar.uncompared_note)
    verify: list | None = None
    prediction: float | None = None
    prediction_error: float | None = None
    n_rows: int | None = None
    n_correct: int | None = None
    excluded: dict | None = None
    decided_on: list | None = None
    remeasured: list | None = None
    coverage: dict | None = None
    measured_at: dict | None = None
    integration: list | None = None  # per candidate: measured and predicted step gain (commands/integration.py)
    # A NO-GO decided on failures alone (every pair the bar decides on failed its kernel:
    # outcomes.kernel_failed): each pair's row, state and the reason it carries.
    failures: list | None = None
    # Where the bar names the next-run interval (issue 48): the between-run variance it was read
    # with (measurement.nextrun.BetweenRun.as_dict: tau, source, basis, n, estimate, level, floor).
    next_run: dict | None = None
    # A line registered with [replication]: the rule, and each instance's clause values and bar
    # (registration/replication.py ``combined``).
    replication: dict | None = None


@dataclass(frozen=True, kw_only=True)
class CeilingsRow(Row):
    """A device's measured copy bandwidth and matmul rate (commands/ceilings.py)."""

    KIND: ClassVar[str] = CEILINGS
    device: str | None = None
    fingerprint: dict | None = None
    copy_gbps: dict | None = None
    matmul_tflops: dict | None = None
    method: dict | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeRow(Row):
    """One commit measured by `bench bisect` (commands/bisect.py), in ``ledger/_bisect.jsonl``:
    ``commit`` is the commit it measured (its own code ran the probe), ``bisect`` the run it
    belongs to, the pooled speedup and CI, and what the bisect decided of the commit."""

    KIND: ClassVar[str] = PROBE
    bisect: dict | None = None  # the run: line, config_key, candidate, baseline, good, bad, by (commit), started
    config_key: str | None = None
    role: str | None = None  # good end | bad end | probe
    subject: str | None = None  # the probed commit's subject line
    speedup: float | None = None  # pooled over ``samples``'s measurements (baseline median / candidate median)
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    samples: dict | None = None  # n rounds pooled, each measurement's figures, attempts, why some gave none
    gate: dict | None = None  # per role: whether the float64 gate passed (None: not reached)
    decision: str | None = None  # good | bad | unclear | skip (governance/bisect.py)
    reason: str | None = None


ROW_CLASSES: Mapping[str, type[Row]] = {c.KIND: c for c in (
    RegisteredRow, ResultRow, IncorrectRow, SkippedRow, ThrottledRow, CrashedRow, UnsupportedRow, SupersedesRow,
    ProfileRow, VerdictRow, CeilingsRow, ProbeRow, IntegrationRow)}
_FIELDS: dict[type, tuple] = {}


def _fields(cls: type) -> tuple:
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple(f for f in dataclasses.fields(cls) if f.name != "present")
    return _FIELDS[cls]


def _holds(cls: type) -> frozenset:
    """The fields a row of ``cls``'s kind may hold."""
    own = {f.name for f in _fields(cls)}
    if issubclass(cls, OutcomeRow):
        return frozenset(own - {f.name for f in _fields(OutcomeRow)} | {f.name for f in _fields(Row)} | cls.HOLDS)
    return frozenset(own)


def load(d: Mapping) -> Row:
    """The typed row of ``d`` (a row as read or about to be written). Raises UnknownField for a
    kind no class defines or a field its class does not declare: readers turn that into the
    one-line refusal with the fix, writers into a bug report."""
    kind = d.get("kind")
    cls = ROW_CLASSES.get(kind)
    if cls is None:
        raise UnknownField(f"row kind {kind!r} is not one of {', '.join(ROW_CLASSES)}")
    names = _holds(cls)
    unknown = sorted(k for k in d if k != "kind" and k not in names)
    if unknown:
        raise UnknownField(f"a {kind} row has field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} that "
                           f"this bench does not know")
    return cls(**{k: v for k, v in d.items() if k != "kind"}, present=frozenset(k for k in d if k != "kind"))
