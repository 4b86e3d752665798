"""The row vocabulary: every ledger row kind, which settle a (config, candidate) pair, which
the sweep measures again, and where a row was measured. The sweep, its plan, the verdict
and the reports all read these; none restates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from harness.vocab.devices import NOT_RECORDED, STACK_FIELDS, model, stack
from harness.vocab.devices import instance_key
from harness.vocab.payload import Payload

# Outcome kinds: what happened to one (config, candidate) pair at one sweep.
RESULT = "result"  # measured: metrics, raw samples, CI, control
INCORRECT = "incorrect"  # failed a correctness check (gate, timed output, recheck, empty window)
CRASHED = "crashed"  # raised, ran out of memory, or took its worker down
SKIPPED = "skipped"  # not measured: memory short, timing cut short, or its baseline failed
THROTTLED = "throttled"  # clocks dropped in too many rounds (or could not be verified)
UNSUPPORTED = "unsupported"  # the kernel cannot run this config or device
# The other row kinds.
REGISTERED = "registered"
VERDICT = "verdict"
SUPERSEDES = "supersedes"
CEILINGS = "ceilings"
PROFILE = "profile"
PROBE = "probe"  # one commit measured by `bench bisect` (ledger/_bisect.jsonl)
INTEGRATION = "integration"  # one candidate's model step against the baseline's (commands/integration.py)

# The field that marks an outcome (or supersedes) row as a replicate's (`bench replicate`,
# registration/replication.py): {of, closing_commit, at, instance, stack}.
REPLICATE = "replicate"

# Every row kind the ledger accepts (a row of another kind is refused at append time).
ROW_KINDS = (REGISTERED, RESULT, SKIPPED, INCORRECT, THROTTLED, CRASHED, VERDICT, SUPERSEDES, CEILINGS, UNSUPPORTED,
             PROFILE, PROBE, INTEGRATION)
# Kinds that settle a (config, candidate): the sweep has decided what happened to it.
OUTCOME_KINDS = (RESULT, INCORRECT, SKIPPED, THROTTLED, CRASHED, UNSUPPORTED)
# Outcomes the bar counts as failed pairs.
FAILING_KINDS = (INCORRECT, CRASHED)
# Outcomes that measured nothing: the bar cannot see these pairs at all.
MISSING_KINDS = (SKIPPED, UNSUPPORTED, THROTTLED)

# Failure tags: what a check of one call found (measurement/correctness runs the checks).
FAILURE_TAGS = {
    "mismatch": "output differs from the float64 reference beyond atol + rtol·|ref|",
    "unwritten": "output elements still hold the NaN poison after the call",
    "nonfinite": "output has inf/NaN (not the poison) where the reference is finite",
    "stale_mismatch": "a later call (fresh buffers after the reference, or inputs rewritten in "
                      "place) fails or disagrees with the first: state carried across calls",
    "input_mutated": "the kernel wrote into q, k or v",
    "degenerate": "output unchanged when the inputs changed, or constant along a whole axis",
    "exception": "the kernel raised",
    "side_stream": "output written while the caller's stream was held, or after it had finished the call: "
                   "work on another stream",
    "left_running": "the call returned with work still running: device work on another stream, or host "
                    "threads or child processes still using the CPU (measurement/leftover.py)",
    "numerics_changed": "the call changed global state the harness pins (numeric flags, thread counts, "
                        "CPU affinity) for whoever runs next",
    "clock_tampered": "a clock the harness times with was replaced (time.perf_counter_ns, torch.cuda.Event's "
                      "methods, the timing modules' names), or a timer's windows disagree with an independent "
                      "clock or with the thread's CPU time (measurement/clockguard.py)",
}
# The tag of a replaced or lying clock, for the checks that name it.
CLOCK_TAMPERED = "clock_tampered"
# Tags a check after timing gives a candidate as they are (never phase-prefixed).
EMPTY_WINDOW = "empty_window"  # its timed window held no more than an empty call's (timing/empty.py)
REMEMBERS_INPUTS = "remembers_inputs"  # it answers from memory of inputs it saw (timing/refresh.py)
PAIR_TAGS = (EMPTY_WINDOW, REMEMBERS_INPUTS)

# Rejection tags. An incorrect row's ``tag`` names the check that failed (the gate's own tags,
# e.g. "stale_mismatch"); a check after timing prefixes it with the phase that caught it.
CAUGHT_TIMED = "timed"  # a timed call's output, or what the timed calls left behind
CAUGHT_RANDOM_CALL = "random_call"  # the randomly chosen timed call's output
CAUGHT_REFRESHED = "refreshed"  # an output checked against content refreshed since it ran
CAUGHT_SUSTAINED = "sustained"  # the sustained-rate calls' output
CAUGHT_RECHECK = "recheck"  # fresh inputs in the timed buffers, after timing
REJECTION_PHASES = (CAUGHT_TIMED, CAUGHT_RANDOM_CALL, CAUGHT_REFRESHED, CAUGHT_SUSTAINED, CAUGHT_RECHECK)


def is_failure_tag(tag: str) -> bool:
    """Whether ``tag`` is one an incorrect row may carry: a check's (FAILURE_TAGS), one of
    PAIR_TAGS, or a check's prefixed with the phase that caught it (``rejection_tag``)."""
    if tag in FAILURE_TAGS or tag in PAIR_TAGS:
        return True
    return any(tag.startswith(f"{p}_") and tag[len(p) + 1:] in FAILURE_TAGS for p in REJECTION_PHASES)


def rejection_tag(phase: str, tag: str) -> str:
    """The tag of a rejection that check ``tag`` made at ``phase`` (one of REJECTION_PHASES)."""
    if phase not in REJECTION_PHASES:
        raise ValueError(f"unknown rejection phase {phase!r}: one of {', '.join(REJECTION_PHASES)}")
    if tag not in FAILURE_TAGS:
        raise ValueError(f"unknown failure tag {tag!r}: one of {', '.join(FAILURE_TAGS)}")
    return f"{phase}_{tag}"


def transient(row) -> bool:
    """An outcome worth measuring again: clocks throttled, memory short, timing cut short."""
    return row.kind == THROTTLED or (row.kind == SKIPPED and (row.has("predicted_bytes") or bool(row.undersampled)))


def unusable(row, *, include_noisy: bool) -> bool:
    """An outcome the verdict cannot decide on that a new measurement at the same commit could
    settle: a rig-noisy result (unless the line counts those), a skipped or throttled pair.
    ``bench sweep --remeasure`` measures these again. Not a failure (a finding is never
    re-rolled: crashed pairs are retried only with ``--retry-crashed``), not an impossible
    result (a failed pair), not unsupported (the kernel says it cannot run there)."""
    if row.is_baseline:
        return False
    if row.kind == RESULT:
        return bool(row.rig_noisy) and not row.impossible and not include_noisy
    return row.kind in (SKIPPED, THROTTLED)


def kernel_failed(row) -> bool:
    """A final failure of the candidate kernel itself, which no new measurement at the same
    commit changes: incorrect, crashed, or a result faster than the device can go
    (``impossible``). Not the rig's (rig-noisy, skipped, throttled: ``unusable``, measured
    again), not the baseline's (its own row: the line's tolerance or baseline is wrong), and
    not unsupported (the kernel says it cannot run there: never measured)."""
    if row.is_baseline:
        return False
    return row.kind in FAILING_KINDS or (row.kind == RESULT and bool(row.impossible))


def remeasurable(row, *, include_noisy: bool) -> bool:
    """Whether a sweep may supersede ``row`` with a new measurement at the commit and device it
    was measured at: what ``--remeasure`` re-runs, a crashed pair (``--retry-crashed``), or a
    baseline's own row (re-run with its config). A decided outcome never is (ledger.verify.verify)."""
    return unusable(row, include_noisy=include_noisy) or row.kind == CRASHED or row.is_baseline


RIG_NOISY_STATE, IMPOSSIBLE_STATE = "rig-noisy", "impossible"


def state_of(row) -> str:
    """An outcome row's state in one word, as the verdict sees it: its kind, or 'rig-noisy' /
    'impossible' for a result flagged so."""
    if row.kind == RESULT and row.impossible:
        return IMPOSSIBLE_STATE
    if row.kind == RESULT and row.rig_noisy:
        return RIG_NOISY_STATE
    return row.kind


def decided(row: dict, *, include_noisy: bool) -> bool:
    """Whether the bar sees a pair's outcome as a decided row (a measured result, or a failure)."""
    if row.role == "baseline":
        return False
    if row.kind in FAILING_KINDS:
        return True
    if row.kind == RESULT:
        return bool(row.impossible) or include_noisy or not row.rig_noisy
    return False


def coverage(deciding, *, include_noisy: bool) -> dict:
    """How many registered pairs the bar decides on, and which it cannot (rig-noisy left out,
    never measured, or behind a failed baseline)."""
    undecided = [f"{r.candidate} @ {r.config_key} ({state_of(r)})"
                 for r in deciding if not decided(r, include_noisy=include_noisy)]
    n = len(deciding)
    return {"pairs": n, "decided": n - len(undecided), "fraction": (n - len(undecided)) / n if n else 0.0,
            "undecided": undecided}


def outcome_key(row) -> tuple[str, str]:
    return row.config_key, row.candidate


@dataclass(frozen=True, kw_only=True)
class Coverage(Payload):
    """A verdict's ``coverage`` (``coverage``, with the registration's floor): how many
    registered pairs it decided on."""

    pairs: Any = None
    decided: Any = None
    undecided: Any = None
    fraction: Any = None
    min_coverage: Any = None


@dataclass(frozen=True, kw_only=True)
class MeasuredAt(Payload):
    """A verdict's ``measured_at``: the commit, device and GPU its rows were measured at, and
    the software stack."""

    commit: Any = None
    device: Any = None
    gpu: Any = None
    stack: Any = None


@dataclass(frozen=True, kw_only=True)
class CodePackage(Payload):
    """One entry of a row's ``code``: a code package loaded from an installed distribution
    (provenance/code.py ``outside_code``)."""

    package: Any = None
    name: Any = None
    version: Any = None
    editable: Any = None
    files: Any = None
    sha256: Any = None


@dataclass(frozen=True, kw_only=True)
class Replicate(Payload):
    """A replicate's row (`bench replicate`): which verdict, at which commit, on which instance and stack."""

    of: Any = None
    closing_commit: Any = None
    at: Any = None
    instance: Any = None
    stack: Any = None


def measured_on(row, any_gpu: bool = False) -> tuple:
    """Where a row was measured: (commit, device, GPU name, code). Resume and the verdict key
    rows by it: one verdict, one such key; ``any_gpu`` (a line registered with ``[bar]
    mixed_devices``) leaves the GPU name out. ``code`` names the installed distributions the
    code packages came from where the repository does not hold them (None: it holds them)."""
    return measured_at(row.commit, row.env, row.code, any_gpu)


def measured_at(commit: str | None, env: dict | None, code, any_gpu: bool = False) -> tuple:
    """``measured_on`` of the rows a command stamps with ``commit``, ``env`` and ``code``."""
    named = ", ".join(f"{p.name} {p.version} ({str(p.sha256)[:12]})"
                      for p in (CodePackage.from_row(c) for c in code or ())) or None
    device, gpu = model(env or {})
    return commit, device, None if any_gpu else gpu, named


def places(rows: Iterable, any_gpu: bool = False) -> list[tuple[tuple, dict]]:
    """Where ``rows`` were measured, one (``measured_on``, software stack) per place, sorted:
    rows of one commit, device and code differ in place where they differ in a version of
    devices.STACK_FIELDS (torch, CUDA, cuDNN, Triton, cupy, driver). A field one row never
    recorded (rows written before it was) is no difference: only fields recorded with two
    values split rows, and a row without such a field shows it NOT_RECORDED. The stack is the
    place's first row's."""
    rows = list(rows)
    stacks = [stack(r.env or {}) for r in rows]
    differ = [f for f in STACK_FIELDS if len({repr(s[f]) for s in stacks if f in s}) > 1]
    out: dict = {}
    for r, s in zip(rows, stacks):
        where = measured_on(r, any_gpu)
        out.setdefault((where, tuple(repr(s.get(f, NOT_RECORDED)) for f in differ)),
                       (where, {**s, **{f: s.get(f, NOT_RECORDED) for f in differ}}))
    return [out[k] for k in sorted(out, key=str)]


def superseded_by(rows: Iterable) -> dict[int, int]:
    """seq of each row a ``supersedes`` row names → the seq of the first one naming it."""
    out: dict[int, int] = {}
    for r in rows:
        if r.kind == SUPERSEDES:
            for s in r.supersedes or []:
                out.setdefault(s, r.seq)
    return out


def current_rows(rows: Iterable) -> list:
    """Rows (ledger/rows.py) not named by any ``supersedes`` row."""
    rows = list(rows)
    gone = superseded_by(rows)
    return [r for r in rows if r.seq not in gone]


def is_replicate(row) -> bool:
    """A row `bench replicate` wrote (it carries ``replicate``: which instance, which verdict):
    beside the line's own rows, never one of them."""
    return getattr(row, REPLICATE, None) is not None


def current_outcomes(rows) -> list:
    """The current (not superseded) outcome rows of the line's own sweeps, in ledger order:
    what resume, the verdict, compare, route and bisect read. Replicate rows (``is_replicate``)
    are never among them: a replication goes beside the verdict and never alters it."""
    return [r for r in current_rows(rows) if r.kind in OUTCOME_KINDS and not is_replicate(r)]


def latest_outcomes(rows) -> dict[tuple[str, str], object]:
    """The last current outcome row per (config, candidate) of the line's own sweeps."""
    return {outcome_key(r): r for r in current_outcomes(rows)}


def stream(replicate: dict | None) -> tuple | None:
    """Which rows one run extends: None for the line's own sweeps, else a replicate's (the
    verdict row it replicates — None before the verdict — and its device instance)."""
    rep = Replicate.from_row(replicate)
    if rep is None:
        return None
    return rep.of, instance_key(rep.instance or {})


def stream_outcomes(rows, replicate: dict | None = None) -> list:
    """The current outcome rows of one stream (``stream``): the line's own (``current_outcomes``),
    or one replicate's — the rows `bench replicate` wrote for the same verdict on the same
    instance — in ledger order."""
    if replicate is None:
        return current_outcomes(rows)
    key = stream(replicate)
    return [r for r in current_rows(rows) if r.kind in OUTCOME_KINDS and is_replicate(r)
            and stream(r.replicate) == key]


@dataclass(frozen=True, kw_only=True)
class RowState(Payload):
    """A row's seq and state in a verdict's ``remeasured`` entry."""

    seq: Any = None
    state: Any = None


@dataclass(frozen=True, kw_only=True)
class Remeasured(Payload):
    """A verdict row's ``remeasured`` entry (``Remeasure.as_row``), as written."""

    config_key: Any = None
    candidate: Any = None
    replaced: Any = None
    current: Any = None

    @property
    def superseded(self) -> list[RowState]:
        return [RowState.from_row(x) for x in self.replaced]

    @property
    def standing(self) -> RowState:
        return RowState.from_row(self.current)


@dataclass(frozen=True)
class Remeasure:
    """A (config, candidate) measured again at the commit and device it was measured at: the
    outcome rows the new measurement superseded and the row that stands."""

    config_key: str
    candidate: str
    replaced: tuple[tuple[int, str], ...]  # (seq, state) of each superseded row, oldest first
    current: tuple[int, str]  # (seq, state) of the row that stands

    def describe(self) -> str:
        was = ", ".join(f"{state} (row {seq})" for seq, state in self.replaced)
        return f"{self.candidate} @ {self.config_key}: {was} → {self.current[1]} (row {self.current[0]})"

    @classmethod
    def from_row(cls, d: dict) -> "Remeasure":
        """Back from ``as_row`` (a verdict row's ``remeasured`` entry)."""
        e = Remeasured.from_row(d)
        return cls(e.config_key, e.candidate, tuple((x.seq, x.state) for x in e.superseded),
                   (e.standing.seq, e.standing.state))

    def as_row(self) -> dict:
        return {"config_key": self.config_key, "candidate": self.candidate,
                "replaced": [{"seq": seq, "state": state} for seq, state in self.replaced],
                "current": {"seq": self.current[0], "state": self.current[1]}}


def remeasures(rows) -> tuple[Remeasure, ...]:
    """Every candidate pair whose standing outcome replaced earlier outcomes of that pair
    measured at the same commit on the same device (a re-measure, not a re-sweep at a newer
    commit), in ledger order of the standing row."""
    # Any ledger verifies: an outcome row lacking its pair's fields is nobody's re-measure.
    rows = [r for r in rows if r.kind not in OUTCOME_KINDS or (r.config_key is not None and r.candidate is not None)]
    gone = superseded_by(rows)
    out = []
    for pair, now in sorted(latest_outcomes(rows).items(), key=lambda kv: kv[1].seq):
        if now.is_baseline:
            continue
        replaced = tuple((r.seq, state_of(r)) for r in rows
                         if r.kind in OUTCOME_KINDS and not is_replicate(r) and r.seq in gone and r.seq < now.seq
                         and outcome_key(r) == pair and measured_on(r) == measured_on(now))
        if replaced:
            out.append(Remeasure(pair[0], pair[1], replaced, (now.seq, state_of(now))))
    return tuple(out)


def resweeps(rows) -> int:
    """Outcome rows superseded by a sweep at another commit or device (a re-sweep of newer
    code, not a re-measure): what the line's current outcomes replaced from earlier sweeps."""
    rows = list(rows)
    by_seq = {r.seq: r for r in rows}
    return sum(1 for old, new in superseded_by(rows).items()
               if old in by_seq and by_seq[old].kind in OUTCOME_KINDS and not is_replicate(by_seq[old])
               and (new not in by_seq or measured_on(by_seq[old]) != measured_on(by_seq[new])))
