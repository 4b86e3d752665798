"""New input content during the measured rounds, and the judgement of an arm that answers
from memory (issue 25, item 1: inputs that change between timed calls).

A kernel that keys its outputs by the *content* of its inputs computes honestly on every
new content (each gate case is new) and answers the timing's repeated content from memory.
An output check cannot see it (on new content it is right); its timing can: its calls on
content it has not seen are slower than its calls on content it has. So, at random
measured rounds (``RefreshSchedule``, seeded, recorded), each arm's timed call gets new
content just before it, outside its window (after its lead calls, before the caller's
prepare and the flush): written into the same buffers (in place: a kernel keyed by address
then returns a stale answer, which the caller's check of that call's output catches), or
into newly allocated buffers (new addresses; never in graph mode, whose graphs read the
captured addresses). On the host, at as many other random rounds the caller does the same
work without changing the content (a sham), so that what the work itself disturbs is on
both sides (on a GPU the work cannot slow the next call: no shams). Every sample is labelled
first-seen (a call of this arm on content it had not run on before) or seen, and
``judge_input_memory`` compares first-seen calls with seen calls (after a sham, on the
host: there only first-seen calls with a generation right before them are judged, a sham
where an earlier arm's refresh already wrote the round's content), one-sidedly: an honest kernel's first-seen calls are no slower (new content just
written may even sit in cache, making them faster); a kernel answering from memory's are.

Cost: per refreshed (or sham) round, one input generation per arm, outside the windows; after
timing, the output of one refreshed call per arm and kind is checked against a float64 reference.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from harness.measurement.stats import mann_whitney_u
from harness.vocab.outcomes import REMEMBERS_INPUTS

IN_PLACE, FRESH_BUFFERS, SHAM = "in_place", "fresh_buffers", "sham"
# Refreshed rounds every measurement holds (when max_samples allows), and as many sham rounds:
# the caller does the same work (an input generation) but the content stays. On a host, the
# generation itself slows the call after it (caches and predictors disturbed: honest CPU
# kernels measured 1.1-1.4× slower after a refresh AND after a sham, 1.0× after nothing), so
# first-seen calls are compared with seen calls after a sham, not with undisturbed ones (on a
# GPU no shams are made: the draw runs before the flush, or leaves the new content in L2,
# which can only make a first-seen call faster, so first-seen calls are compared with every
# seen call). Ten of each: complete separation gives p ≈ 9e-5 (stats.mann_whitney_u's normal
# approximation past MWU_EXACT_MAX_N), so a few seen calls slowed by something else (a loaded
# host) still leave p under MEMORY_ALPHA. With six of each only complete separation passed,
# and one slow seen call hid a kernel that remembers (seen on the 2-core host, through the CLI).
REFRESH_MIN_ROUNDS = 10
# The guaranteed rounds (refresh and sham) are drawn among the first max(min_samples,
# REFRESH_SPAN_FACTOR × REFRESH_MIN_ROUNDS) rounds, and the stop's target waits for them: a third
# of that span stays undisturbed; a policy whose max_samples is shorter runs up to
# criteria.REFRESH_EXTRA_ROUNDS past it for the judgement.
REFRESH_SPAN_FACTOR = 3
# After the span, each round is refreshed with this chance (and, independently, shammed): a
# long measurement (up to max_samples rounds) keeps meeting new content at rounds no kernel
# can predict, at ~one input generation per arm every 10 rounds.
REFRESH_PROBABILITY = 0.05
# While an arm lacks first-seen calls or seen calls to be judged (after the span), every round
# is refreshed with this chance and shammed otherwise: both kinds near each other in time.
CATCH_UP_REFRESH_SHARE = 0.5
# Of the refreshes after the span, this share is written in place (an address-keyed cache
# answers stale), the rest into fresh buffers (a cache keyed by address and content misses).
IN_PLACE_SHARE = 0.5
# The judgement: first-seen calls slower than seen calls after a sham by a one-sided
# Mann-Whitney U test at MEMORY_ALPHA AND by a median ratio ≥ 1 + FRESH_SLOWDOWN_TOLERANCE.
# At the minimum counts (10 and 10) the test passes with a few overlapping calls, at a 1-in-1000
# chance for an honest arm before the effect size is even asked; the tolerance keeps what a
# refresh disturbs beyond a sham (a new buffer's first touch) from reading as memory. The
# attack it answers ran 2.8× faster on content it had seen; a memory worth less than 25% is not
# told from the rig's own order effects.
MEMORY_ALPHA = 1e-3
FRESH_SLOWDOWN_TOLERANCE = 0.25
# The effect must also hold near in time: each first-seen call against the median of the
# LOCAL_NEIGHBOURS seen calls nearest to it in round order, and the median of those ratios
# ≥ 1 + FRESH_SLOWDOWN_TOLERANCE. A host whose load changes during the rounds (another process
# starting on the other core) slows whichever calls fall after the change; where the random
# rounds put more first-seen calls there, the pooled comparison reads the load as memory (an
# honest sdpa at 1.55×, p = 0.00053, on the 2-core host running two test processes). Calls a few
# rounds apart share the host's state, so the local ratio is ~1 for an honest kernel under a
# changing load and stays the memory's full factor for a kernel that remembers. Three: one
# neighbour on a slow call would read its noise as the effect; more reach rounds further away.
LOCAL_NEIGHBOURS = 3
# Fewer first-seen calls, or seen calls after a sham (kept rounds): the judgement cannot be
# made, and the row gets no number (fail closed), never a pass.
MIN_FRESH_CALLS = REFRESH_MIN_ROUNDS
MIN_SEEN_CALLS = REFRESH_MIN_ROUNDS
REMEMBERS_TAG = REMEMBERS_INPUTS


class RefreshSchedule:
    """Which measured rounds get new content, and how; reproducible from ``seed``, not
    knowable by a kernel. ``graph``: in place only (captured graphs read fixed addresses)."""

    def __init__(self, seed: int, min_samples: int, max_samples: int, graph: bool, shams: bool = True):
        self.seed, self.graph, self.shams = seed, graph, shams
        self._rng = random.Random(seed)
        self.span = min(max(min_samples, REFRESH_SPAN_FACTOR * REFRESH_MIN_ROUNDS), max_samples)
        n = min(REFRESH_MIN_ROUNDS, self.span // 2)
        rounds = self._rng.sample(range(self.span), 2 * n)
        hows = [IN_PLACE if graph or i % 2 == 0 else FRESH_BUFFERS for i in range(n)]
        self._rng.shuffle(hows)  # both kinds among the guaranteed rounds, in an unknowable order
        self.planned = dict(zip(rounds, hows + [SHAM] * n)) if shams else dict(zip(rounds[:n], hows))

    def at(self, index: int, short: str | None = None) -> str | None:
        """How measured round ``index`` is refreshed (IN_PLACE, FRESH_BUFFERS, SHAM), or None.
        Called once per round, in order (the draws after the span depend on it). ``short``:
        after the span, an arm still lacks first-seen calls ("fresh") or seen calls after a
        sham ("sham") to be judged (with several slots, new content spreads to every arm and
        turns many calls first-seen): while one lacks seen calls, every round is shammed (left
        alone on a GPU); while one lacks first-seen calls, every round is refreshed or shammed
        at random (CATCH_UP_REFRESH_SHARE)."""
        if index < self.span:
            return self.planned.get(index)
        r = self._rng.random()
        if short == "sham":  # seen calls are short: after a sham (host), or after nothing (GPU)
            return SHAM if self.shams else None
        if short == "fresh":
            # Shams among the refreshes: a run of refreshes alone would leave its first-seen
            # calls no seen call near in time, and a host whose load changed after the run
            # would read as memory even against the nearest seen calls (an honest baseline at
            # 2.09×, 1.52× locally, on the 2-core host with every core busy).
            return self._kind() if r < CATCH_UP_REFRESH_SHARE else SHAM if self.shams else None
        if r < REFRESH_PROBABILITY:
            return self._kind()
        # A sham at as many rounds again (a second REFRESH_PROBABILITY slice of the same draw).
        return SHAM if self.shams and r < 2 * REFRESH_PROBABILITY else None

    def _kind(self) -> str:
        return IN_PLACE if self.graph or self._rng.random() < IN_PLACE_SHARE else FRESH_BUFFERS

    def pending(self, rounds_run: int) -> bool:
        """Whether a guaranteed refresh round is still to run after ``rounds_run`` rounds."""
        return bool(self.planned) and max(self.planned) >= rounds_run

    def content_seed(self) -> int:
        """The seed of the next new content: from the schedule's RNG, so recorded by it."""
        return self._rng.getrandbits(62)


@dataclass(frozen=True)
class InputMemory:
    """One arm's first-seen calls against its seen calls after a sham (kept rounds), and the
    judgement on them."""

    n_fresh: int
    n_seen: int
    fresh_median_ms: float
    seen_median_ms: float
    u: float                # Mann-Whitney U of the first-seen samples
    p_value: float          # one-sided: first-seen slower
    local_ratio: float      # median over first-seen calls of call / median of its nearest seen calls
    judged: bool            # enough calls of each kind to judge
    remembers: bool
    reason: str | None      # why remembers, or why it could not be judged; None otherwise

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {
            "alpha": MEMORY_ALPHA, "tolerance": FRESH_SLOWDOWN_TOLERANCE, "neighbours": LOCAL_NEIGHBOURS}


def local_ratio(fresh: list[tuple[int, float]], seen: list[tuple[int, float]]) -> float:
    """Median over first-seen calls ``(round, ms)`` of the call's time over the median of the
    LOCAL_NEIGHBOURS seen calls nearest in round order (ties: the earlier round): the effect
    measured among calls that share the host's state (LOCAL_NEIGHBOURS)."""
    import statistics

    ratios = []
    for i, t in fresh:
        near = sorted(seen, key=lambda s: (abs(s[0] - i), s[0]))[:LOCAL_NEIGHBOURS]
        m = statistics.median(ms for _, ms in near)
        ratios.append(t / m if m > 0 else (math.inf if t > 0 else 1.0))
    return statistics.median(ratios) if ratios else math.nan


def judge_input_memory(fresh_calls: list[tuple[int, float]], seen_calls: list[tuple[int, float]],
                       shams: bool = True) -> InputMemory:
    """Whether an arm answers from memory: its first-seen samples ``(round, ms)`` reliably
    slower than its seen ones (after a sham where ``shams``: on the host; module docstring),
    pooled and near in time (LOCAL_NEIGHBOURS). Too few of either: not judged, with why."""
    import statistics

    fresh, seen = [ms for _, ms in fresh_calls], [ms for _, ms in seen_calls]
    nf, ns = len(fresh), len(seen)
    seen_as = "after a sham refresh" if shams else "(no refresh before them)"
    same_work = " after the same work (a sham refresh;" if shams else " (no refresh before them;"
    fm = statistics.median(fresh) if fresh else math.nan
    sm = statistics.median(seen) if seen else math.nan
    if nf < MIN_FRESH_CALLS or ns < MIN_SEEN_CALLS:
        return InputMemory(nf, ns, fm, sm, math.nan, math.nan, math.nan, False, False,
                           f"{nf} calls on new content and {ns} on content already seen {seen_as} (kept rounds): the test "
                           f"needs ≥ {MIN_FRESH_CALLS} and ≥ {MIN_SEEN_CALLS}, so whether the kernel answers "
                           f"from memory of its inputs could not be judged (raise [timing] max_samples or "
                           f"timeout_s)")
    u, p = mann_whitney_u(fresh, seen, "greater")
    slower = fm >= (1.0 + FRESH_SLOWDOWN_TOLERANCE) * sm  # holds for sm == 0 < fm too
    local = local_ratio(fresh_calls, seen_calls)
    remembers = p < MEMORY_ALPHA and slower and local >= 1.0 + FRESH_SLOWDOWN_TOLERANCE
    reason = None
    if remembers:
        reason = (f"its first calls on new content take {fm * 1e3:.4g} µs (median of {nf}) against "
                  f"{sm * 1e3:.4g} µs on content it has already seen{same_work} median of {ns}): {fm / sm if sm > 0 else math.inf:.2f}× "
                  f"(≥ 1 + {FRESH_SLOWDOWN_TOLERANCE:g}; {local:.2f}× against the {LOCAL_NEIGHBOURS} seen calls "
                  f"nearest each), one-sided Mann-Whitney U = {u:g}, p = {p:.2g} < "
                  f"{MEMORY_ALPHA:g}: it answers repeated inputs from memory, so its timing is not its work's")
    return InputMemory(nf, ns, fm, sm, u, p, local, True, remembers, reason)
