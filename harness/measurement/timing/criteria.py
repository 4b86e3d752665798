"""Stop criteria: when the interleaved rounds have measured enough (``[timing] stop``).

``measure`` asks its criterion after every measured round (``Criterion.stop``, given the rounds
so far as ``Progress``) and, at the end, for what the row keeps of the decision
(``Criterion.record``). Every criterion has the same fixed maximum: ``max_samples`` rounds that
count (rounds dropped because a call waited on a run queue do not, up to
``WAIT_MAX_ROUNDS_FACTOR`` × max_samples rounds in all; ``REFRESH_EXTRA_ROUNDS`` more while the
content check still lacks the calls to judge), else the timeout. Before it, the target, after
``min_samples`` kept rounds and ``min_time_ms`` of measured time and once the content check
has its calls (``RoundRunner.refresh_pending``):

- ``NoiseStop`` (``stop = "noise"``, every line before schema 6): every arm's ``rel_noise`` ≤
  ``noise_target`` (stop reason "noise_target").
- ``StatisticStop`` (``stop = "statistic"``, schema 6): every bar quantity of the config known
  to ``precision`` (reason "precision"). The quantities are ratios paired within rounds
  (``stats.paired_ratio``: the median of the per-round ratios and its order-statistic CI):
  each candidate's speedup (baseline over candidate), the control (baseline over control) and
  each speedup over a peer a bar clause names (peer over candidate). A clock swing common to a
  round cancels in them, where it widens each arm's own median. It looks only at a fixed
  geometric schedule of kept-round counts (``policy.looks``: min_samples, doubling, below
  max_samples), each look's interval at confidence 1 − alpha/K (``policy.look_confidence``; K
  counts the end too), so by Bonferroni the interval the row reports, from whichever look or
  the end, covers its ratio with probability ≥ 1 − alpha
  (docs/measurement.md#stopping-on-the-registered-statistic). A look takes the first n kept
  rounds among those whose clocks are judged (their drop is final: a later reading cannot
  change them), so the row's figures, taken over its first n kept rounds, are the look's.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from harness.measurement.stats import half_width, paired_ratio, rel_noise
from harness.measurement.timing.policy import DEFAULT_STOP, look_confidence, looks
from harness.measurement.timing.refresh import REFRESH_MIN_ROUNDS
from harness.measurement.timing.results import ARM_BASELINE, ARM_CANDIDATE, ARM_CONTROL, arm_name
from harness.vocab.payload import Payload

if TYPE_CHECKING:
    from harness.measurement.timing.policy import TimingPolicy

# Rounds past max_samples a measurement may run while the content check (timing/refresh.py)
# still lacks the calls to judge an arm (rounds dropped for clocks or waits took some): every
# one of them is shammed, or (first-seen calls short) refreshed or shammed half and half
# (refresh.CATCH_UP_REFRESH_SHARE), so four times the minimum covers both kinds short and a
# few more drops.
# Without them the row would have no number (fail closed) although the protocol's own rounds
# were fine.
REFRESH_EXTRA_ROUNDS = 4 * REFRESH_MIN_ROUNDS
# Rounds dropped for a wait are not samples, so max_samples does not count them; on a host
# loaded for good the measurement still stops at this many times max_samples (plus the
# content check's REFRESH_EXTRA_ROUNDS), or at its timeout.
WAIT_MAX_ROUNDS_FACTOR = 4

STATISTIC = "statistic"
NOISE_REASON, PRECISION_REASON = "noise_target", "precision"


@dataclass(frozen=True)
class Progress:
    """The measured rounds so far, as a criterion sees them after one more."""

    samples: Mapping[str, Sequence[float]]  # per arm, every measured round's sample (index: round)
    kept: Sequence[int]   # kept rounds, ascending; a round whose clocks are not judged yet counts
    judged: int           # rounds 0 .. judged-1 have their final drop verdict
    rounds: int           # measured rounds
    counted: int          # measured rounds max_samples counts (not dropped for a wait)
    pending: bool         # the content check still lacks calls to judge an arm
    min_time_met: bool    # min_time_ms of measured time has passed
    timed_out: bool       # measure()'s deadline has passed


@dataclass(frozen=True)
class Quantity:
    """One bar quantity: the paired ratio numerator/denominator over a look's rounds, its
    interval at the look's confidence, and that interval's relative half-width."""

    numerator: str
    denominator: str
    ratio: float
    lo: float
    hi: float
    half_width: float

    @classmethod
    def of(cls, numerator: str, denominator: str, x: Sequence[float], y: Sequence[float],
           confidence: float) -> "Quantity":
        r, lo, hi = paired_ratio(x, y, confidence)
        return cls(numerator, denominator, r, lo, hi, half_width(r, lo, hi))

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class StopRecord:
    """What the statistic stop decided on, kept in the row (``timing.stop``): the row's bar
    quantities are these, over its first ``n`` kept rounds at ``confidence``. ``reached``:
    every quantity within ``precision`` (a stop at max_samples or the timeout may not be);
    ``taken``: each look evaluated, (n, the widest quantity's half-width)."""

    precision: float
    alpha: float
    looks: tuple[int, ...]
    confidence: float
    n: int
    reached: bool
    quantities: tuple[Quantity, ...]
    taken: tuple[tuple[int, float], ...]

    def as_dict(self) -> dict:
        return {"rule": STATISTIC, "precision": self.precision, "alpha": self.alpha, "looks": list(self.looks),
                "k": len(self.looks) + 1, "confidence": self.confidence, "n": self.n, "reached": self.reached,
                "quantities": [q.as_dict() for q in self.quantities], "taken": [list(t) for t in self.taken]}


class Criterion(ABC):
    """The fixed maximum every criterion has; a subclass says when its target is met."""

    reason: str

    def __init__(self, policy: TimingPolicy):
        self.policy = policy

    def stop(self, p: Progress) -> str | None:
        """Why the rounds stop after this one (the target, "max_samples", "timeout"), or None."""
        pol = self.policy
        if len(p.kept) >= pol.min_samples and p.min_time_met and not p.pending and self.reached(p):
            return self.reason
        if (p.counted >= pol.max_samples + (REFRESH_EXTRA_ROUNDS if p.pending else 0)
                or p.rounds >= WAIT_MAX_ROUNDS_FACTOR * pol.max_samples + REFRESH_EXTRA_ROUNDS):
            return "max_samples"
        if p.timed_out:
            return "timeout"
        return None

    @abstractmethod
    def reached(self, p: Progress) -> bool:
        """Whether the target is met (asked only once the common conditions hold)."""

    def record(self, kept: Mapping[str, Sequence[float]], reason: str | None) -> StopRecord | None:
        """What the row keeps of the decision, given every arm's final kept samples."""
        return None


class NoiseStop(Criterion):
    """Every arm's median to ``noise_target`` (``rel_noise``: the relative half-width of its
    95% CI), over the rounds kept so far."""

    reason = NOISE_REASON

    def __init__(self, policy: TimingPolicy, names: Sequence[str]):
        super().__init__(policy)
        self.names = tuple(names)

    def reached(self, p: Progress) -> bool:
        return all(rel_noise([p.samples[n][i] for i in p.kept]) <= self.policy.noise_target for n in self.names)


class StatisticStop(Criterion):
    """Every bar quantity (``pairs``: (numerator arm, denominator arm)) to ``precision``, looked
    at on the policy's schedule only (module docstring)."""

    reason = PRECISION_REASON

    def __init__(self, policy: TimingPolicy, pairs: Sequence[tuple[str, str]]):
        if policy.stop != STATISTIC:
            raise ValueError(f"StatisticStop needs a policy with stop = {STATISTIC!r}, got {policy.stop!r}")
        if not pairs:
            raise ValueError("the statistic stop needs at least one bar quantity (a pair of arms)")
        super().__init__(policy)
        self.pairs = tuple(dict.fromkeys(tuple(p) for p in pairs))
        self.looks = looks(policy.min_samples, policy.max_samples)
        self.confidence = look_confidence(policy.alpha, len(self.looks))
        self.taken: dict[int, tuple[Quantity, ...]] = {}  # look n -> its quantities (final once taken)
        self.stopped_at: int | None = None

    def quantities(self, kept: Mapping[str, Sequence[float]], n: int) -> tuple[Quantity, ...]:
        """Every bar quantity over the first ``n`` of the arms' kept samples."""
        return tuple(Quantity.of(a, b, kept[a][:n], kept[b][:n], self.confidence) for a, b in self.pairs)

    def precise(self, qs: Sequence[Quantity]) -> bool:
        return all(q.half_width <= self.policy.precision for q in qs)

    def reached(self, p: Progress) -> bool:
        """At the latest look the judged kept rounds allow (each evaluated once: its rounds are
        final), whether every quantity is within precision."""
        final = bisect.bisect_left(p.kept, p.judged)  # kept rounds whose drop is final
        due = bisect.bisect_right(self.looks, final)
        if not due:
            return False
        n = self.looks[due - 1]
        if n not in self.taken:
            rows = p.kept[:n]
            arms = {a for pair in self.pairs for a in pair}
            self.taken[n] = self.quantities({a: [p.samples[a][i] for i in rows] for a in arms}, n)
        if self.precise(self.taken[n]):
            self.stopped_at = n
            return True
        return False

    def record(self, kept: Mapping[str, Sequence[float]], reason: str | None) -> StopRecord:
        """The stopping look's quantities, or at the end (max_samples, timeout) those over every
        kept round: the end's own interval, one of the K."""
        n = self.stopped_at if reason == self.reason else min((len(kept[a]) for p in self.pairs for a in p), default=0)
        qs = self.quantities(kept, n)
        taken = tuple((k, max(q.half_width for q in v)) for k, v in sorted(self.taken.items()))
        return StopRecord(self.policy.precision, self.policy.alpha, self.looks, self.confidence, n, self.precise(qs),
                          qs, taken)


def bar_pairs(names: Sequence[str], peers: Sequence[tuple[str, str]] = ()) -> tuple[tuple[str, str], ...]:
    """The bar quantities of a config's arms: each candidate's speedup (baseline, candidate),
    the control (baseline, control) and the ``peers`` (peer arm, candidate arm) the bar names."""
    if ARM_BASELINE not in names:
        raise ValueError(f"the statistic stop needs a {ARM_BASELINE!r} arm to pair with, got {', '.join(names)}")
    cands = [n for n in names if n == ARM_CANDIDATE or n.startswith(arm_name(""))]
    pairs = [(ARM_BASELINE, c) for c in cands] + ([(ARM_BASELINE, ARM_CONTROL)] if ARM_CONTROL in names else [])
    for p, c in peers:
        if p not in names or c not in names:
            raise ValueError(f"peer quantity {p}/{c} names an arm not timed ({', '.join(names)})")
        pairs.append((p, c))
    return tuple(pairs)


def criterion_for(policy: TimingPolicy, names: Sequence[str], peers: Sequence[tuple[str, str]] = ()) -> Criterion:
    """The criterion ``policy`` registers for arms ``names`` (``peers``: the statistic stop's
    peer quantities, (peer arm, candidate arm))."""
    if policy.stop == STATISTIC:
        return StatisticStop(policy, bar_pairs(names, peers))
    return NoiseStop(policy, names)


def row_statistic(policy: Any, timing: Any) -> tuple[int, float] | None:
    """(n, confidence) a result row's bar quantities are taken at, measured under the statistic
    stop: its first n kept rounds (``timing.stop.n``) at the confidence its policy gives each
    look; None for a noise-stopped row (every row before schema 6). ValueError when the row
    says statistic but its record cannot say which rounds."""
    pol = _StatisticPolicy.from_row(policy)
    if pol is None or pol.stop != STATISTIC:
        return None
    held = _StatisticTiming.from_row(timing)
    stop = _StopRounds.from_row(held.stop) if held is not None else None
    n = stop.n if stop is not None else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"a statistic-stopped row needs timing.stop.n, a count of kept rounds, got {n!r}")
    lacks = [k for k in ("alpha", "min_samples", "max_samples") if not pol.has(k)]
    if lacks:
        raise ValueError(f"a statistic-stopped row's policy lacks alpha, min_samples or max_samples: {lacks[0]!r}")
    try:
        confidence = look_confidence(float(pol.alpha), len(looks(int(pol.min_samples), int(pol.max_samples))))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a statistic-stopped row's policy lacks alpha, min_samples or max_samples: {exc}") from exc
    return n, confidence


# The fields of a row's ``policy`` and ``timing`` the statistic stop's reading takes (measurement/
# sits below ledger/: read here through these, not through ledger/payloads.py's Policy and Measurement).

@dataclass(frozen=True, kw_only=True)
class _StatisticPolicy(Payload):
    stop: Any = DEFAULT_STOP  # a noise-stopped policy (every row before schema 6) leaves it out
    alpha: Any = None
    min_samples: Any = None
    max_samples: Any = None


@dataclass(frozen=True, kw_only=True)
class _StatisticTiming(Payload):
    stop: Any = None  # StopRecord.as_dict: the rule, its looks and the kept rounds it stopped at


@dataclass(frozen=True, kw_only=True)
class _StopRounds(Payload):
    n: Any = None


__all__ = ["Criterion", "NOISE_REASON", "NoiseStop", "PRECISION_REASON", "Progress", "Quantity",
           "REFRESH_EXTRA_ROUNDS", "STATISTIC", "StatisticStop", "StopRecord", "WAIT_MAX_ROUNDS_FACTOR", "bar_pairs",
           "criterion_for", "row_statistic"]
