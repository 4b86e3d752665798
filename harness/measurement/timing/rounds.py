"""How rounds run: every arm once per round, in the round orders, on input slots of one global
rotation, through one timer; what runs before each call (lead calls, the caller's refresh of
the call's inputs at scheduled rounds, the caller's prepare, the flush), graph replays in
graph mode, the choice of the spot-checked call, and (with a refresh hook) which content
every call ran on: per slot a content version, per arm the versions it has run on."""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Mapping, NamedTuple

from harness.measurement.timing.hooks import NO_HOOKS, CallHooks
from harness.measurement.timing.orders import round_orders
from harness.measurement.timing.policy import TimingPolicy, l2_flush
from harness.measurement.timing.refresh import MIN_FRESH_CALLS, MIN_SEEN_CALLS, SHAM, RefreshSchedule
from harness.measurement.timing.timers import Timer


class RawRound(NamedTuple):
    """One round as run: its span in the timer's time, the order, each arm's sample (ms)."""

    t0: float
    t1: float
    order: tuple[str, ...]
    samples: dict[str, float]


class RoundRunner:
    """The arms' calls: input slots in one global rotation, what runs before each call (lead
    calls, the caller's prepare, the flush), graph replays, and the spot-checked call."""

    def __init__(self, arms: Mapping[str, Callable[[int], None]], n_slots: int, policy: TimingPolicy,
                 mode: str, device: str, timer: Timer, hooks: CallHooks = NO_HOOKS):
        self.arms, self.names, self.n_slots, self.policy = arms, tuple(arms), n_slots, policy
        self.mode, self.timer, self.hooks = mode, timer, hooks
        # Cold mode: the flush buffer (on a GPU: torch is imported by _pick_timer).
        self.flush: Callable[[], None] | None = None
        if mode == "cold":
            self.flush = l2_flush(device)
        self.orders = round_orders(self.names)
        self.replays = 1                 # calls per sample (graph chains)
        self.slot_counter = 0
        self.graphs: dict[str, tuple] = {}
        self.chains: dict[str, dict[int, Any]] = {}
        self._spot_rng = random.Random(hooks.spot_seed)
        self._spot_seen: dict[str, int] = {}
        self._spot_u = 1.0  # the current measured round's draw, shared by its arms (_spot_draw)
        self._spot_due: dict[str, int | None] = {}  # arm -> the index of its call about to run, if chosen
        self.spot_calls: dict[str, dict[str, int]] = {}
        self.kept: list[int] = []  # measured rounds kept so far (measure sets it after each round)
        # Content refresh (timing/refresh.py): only with a refresh hook; without one nothing
        # below runs and rounds are as before.
        # Shams only where the draw itself disturbs the next call: on the host (caches and
        # predictors, refresh.py). On a GPU the draw runs before the flush (cold) or leaves the
        # new content in L2 (hot, graph), which can only make a first-seen call faster.
        self.schedule = (RefreshSchedule(hooks.refresh_seed, policy.min_samples, policy.max_samples, mode == "graph",
                                         shams=mode == "host") if hooks.refresh is not None else None)
        self.version = [0] * n_slots                      # per slot: 0 = initial, k = refreshes[k-1]'s
        self.refreshes: list[dict] = []                   # round, arm, slot, seed, how
        self.seen: dict[str, set[tuple[int, int]]] = {n: set() for n in self.names}
        self.last_version: dict[str, list[int | None]] = {n: [None] * n_slots for n in self.names}
        self.fresh: dict[str, list[bool]] = {n: [] for n in self.names}  # per measured round
        self.shammed: dict[str, list[bool]] = {n: [] for n in self.names}  # per measured round
        # Per measured round: an input generation (refresh or sham) ran right before the call.
        self.worked: dict[str, list[bool]] = {n: [] for n in self.names}
        self.shams: list[dict] = []                       # round, arm, slot, seed
        self.refresh_checks: dict[str, dict[str, dict[str, int]]] = {}
        self._due: dict[str, tuple[int, str]] = {}        # arm -> (round, how) still to refresh
        self._label: dict[str, bool] = {}                 # arm -> its pending call is first-seen
        self._refreshed: dict[str, str] = {}              # arm -> how its pending call's content came
        self._keep_rng = random.Random(hooks.refresh_seed + 1)
        self._round_refreshed: set[int] = set()           # slots refreshed in the current round
        self._keep_seen: dict[tuple[str, str], int] = {}
        self._keep_u: float | None = None  # the current round's draw for kept calls, shared by its arms

    def release(self) -> None:
        """Drop the graphs and the flush buffer (device memory) once timing is over."""
        self.graphs, self.chains, self.flush = {}, {}, None

    def next_slot(self) -> int:
        # Global slot rotation across arms: consecutive calls never share inputs.
        slot = self.slot_counter % self.n_slots
        self.slot_counter += self.replays
        return slot

    def _sample_slots(self, slot: int) -> list[int]:
        # The slots one sample runs on: a graph chain replays `replays` consecutive ones.
        if self.mode == "graph" and self.chains:
            return [(slot + j) % self.n_slots for j in range(self.replays)]
        return [slot]

    def _saw(self, name: str, slots: list[int]) -> bool:
        """Record that arm ``name`` runs on these slots' current content; whether any of it
        was new to the arm (a first-seen call)."""
        seen, last = self.seen[name], self.last_version[name]
        first = False
        for s in slots:
            key = (s, self.version[s])
            first |= key not in seen
            seen.add(key)
            last[s] = self.version[s]
        return first

    def refresh_pending(self, kept: list[int]) -> bool:
        """Whether the memory judgement could not be made yet over the measured rounds
        ``kept``: a guaranteed refreshed round still to run, or an arm short of first-seen or
        seen calls. The noise stop waits for it (max_samples and the timeout do not)."""
        if self.schedule is None:
            return False
        if self.schedule.pending(len(self.fresh[self.names[0]])):
            return True
        for name in self.names:
            n_fresh = sum(self.judged_fresh(name, i) for i in kept)
            n_seen = sum(self.compared(name, i) for i in kept)
            if n_fresh < MIN_FRESH_CALLS or n_seen < MIN_SEEN_CALLS:
                return True
        return False

    def judged_fresh(self, name: str, i: int) -> bool:
        """Whether arm ``name``'s call of measured round ``i`` is a first-seen call the judgement
        counts: on the host, only one with an input generation right before it, as a seen call
        after a sham has (with several slots, new content reaches an arm's later calls too,
        with no work before them: under a loaded host those ran slower than calls right after
        a generation, and an honest baseline read as remembering)."""
        return self.fresh[name][i] and (self.worked[name][i] or not self.schedule.shams)

    def compared(self, name: str, i: int) -> bool:
        """Whether arm ``name``'s call of measured round ``i`` is a seen call the first-seen
        calls are judged against: not first-seen, and after a sham where shams are made."""
        return not self.fresh[name][i] and (self.shammed[name][i] or not self.schedule.shams)

    def _short(self) -> str | None:
        # Which kind of call some arm lacks to be judged, over the kept measured rounds so far
        # (``kept``, set by measure after each round: a dropped round's calls do not count).
        n = len(self.fresh[self.names[0]])
        kept = [i for i in self.kept if i < n]
        fresh = min(sum(self.judged_fresh(k, i) for i in kept) for k in self.names)
        sham = min(sum(self.compared(k, i) for i in kept) for k in self.names)
        return "fresh" if fresh < MIN_FRESH_CALLS and n else "sham" if sham < MIN_SEEN_CALLS and n else None

    def saw_all(self) -> None:
        """Every arm has run on every slot's current content (graph capture calls each)."""
        if self.schedule is not None:
            for name in self.names:
                self._saw(name, list(range(self.n_slots)))

    def _refresh_slots(self, name: str, slots: list[int], index: int, how: str) -> None:
        if how == SHAM:  # the same work, the content unchanged: the control for the disturbance
            seed = self.schedule.content_seed()
            self.hooks.refresh(slots[0], seed, how)
            self.shams.append({"round": index, "arm": name, "slot": slots[0], "seed": seed})
            self._refreshed[name] = how
            return
        # New content for the call about to run: the caller writes it (in place or into new
        # buffers) from a seed the schedule draws; each slot's version is its refresh's number.
        # A slot already refreshed this round by an earlier arm is refreshed again only if
        # this arm has run on its new content (its lead calls): else that content is new to
        # it too, and one refresh serves the round (one first-seen call per arm, not more).
        wrote = False
        for s in dict.fromkeys(slots):
            if s in self._round_refreshed and (s, self.version[s]) not in self.seen[name]:
                continue
            self._round_refreshed.add(s)
            seed = self.schedule.content_seed()
            self.hooks.refresh(s, seed, how)
            self.refreshes.append({"round": index, "arm": name, "slot": s, "seed": seed, "how": how})
            self.version[s] = len(self.refreshes)
            wrote = True
        if not wrote and self.schedule.shams:
            # The content is new to this arm but was written before an earlier arm's call: the
            # same generation right before this call too (a sham: the content stays), so every
            # judged first-seen call follows the work a seen call after a sham follows.
            seed = self.schedule.content_seed()
            self.hooks.refresh(slots[0], seed, SHAM)
            self.shams.append({"round": index, "arm": name, "slot": slots[0], "seed": seed, "before": "first_seen"})
        self._refreshed[name] = how

    def _before(self, name: str, slot: int) -> Callable[[], None] | None:
        # What runs before a timed call, outside its window: the lead calls, the content
        # refresh (at scheduled rounds: after the leads, so the timed call is the first on the
        # new content), the caller's prepare, then the flush (last, so none of them warms the
        # L2 for the call).
        prep = self.hooks.prepare_of(name)
        lead, flush, fn, n_slots = self.policy.lead_calls, self.flush, self.arms[name], self.n_slots
        track = self.schedule is not None
        if prep is None and not lead and not track and self.hooks.watch is None:
            return flush

        def run() -> None:
            if self.hooks.watch is not None:
                self.hooks.watch(name, self._spot_due.get(name) is not None)
            # lead_calls: untimed and back to back, so the GPU is as busy (as hot, as
            # power-limited) as in a loop of calls; the timed call is still isolated by
            # the hold and its own synchronize. On earlier slots (already timed, not
            # timed again for n_slots calls), so a lead never warms a timed call's inputs.
            for i in range(lead):
                fn((slot - 1 - i) % n_slots)
                if track:
                    self._saw(name, [(slot - 1 - i) % n_slots])
            if track:
                slots = self._sample_slots(slot)
                due = self._due.pop(name, None)  # a re-run (host gap) is not refreshed again
                self._refreshed.pop(name, None)
                if due is not None:
                    self._refresh_slots(name, slots, *due)
                self._label[name] = self._saw(name, slots)  # marked before it runs: it runs next
            if prep is not None:
                prep(slot)
            if flush is not None:
                flush()

        return run

    def call(self, name: str, slot: int) -> tuple[Callable[[], None], Callable[[], None] | None]:
        """(call, before) of arm ``name`` on input slot ``slot``."""
        if self.mode == "graph":
            return (self.chains[name][slot] if self.chains else self.graphs[name][slot]).replay, \
                self._before(name, slot)
        fn = self.arms[name]
        return (lambda: fn(slot)), self._before(name, slot)

    def _spot_draw(self, name: str) -> int | None:
        # Reservoir sampling: the k-th measured call replaces the choice with chance 1/k. Drawn
        # before the call, so the caller's watch knows which call's leftovers it will be asked
        # about; None: not this one. One uniform per round serves every arm (common random
        # numbers): each arm's choice is still uniform over its own measured calls and unknown
        # ahead, and arms with as many calls choose the same round, so on one input slot their
        # checked outputs share one content and one float64 reference (issue 32).
        k = self._spot_seen[name] = self._spot_seen.get(name, 0) + 1
        return k - 1 if self._spot_u * k < 1.0 else None

    def _spot_check(self, name: str, call: int, slot: int) -> None:
        self.hooks.spot[name](slot)
        self.spot_calls[name] = {"call": call, "slot": slot, "version": self.version[slot]}

    def _keep_check(self, name: str, slot: int, index: int, how: str) -> None:
        # Per arm and kind of refresh, one refreshed call's output is kept for the caller's
        # check, chosen as the spot call is (reservoir sampling, its own RNG, one uniform per
        # round shared by the arms: the same refreshed content for all where their counts agree).
        k = self._keep_seen[(name, how)] = self._keep_seen.get((name, how), 0) + 1
        if self._keep_u is None:
            self._keep_u = self._keep_rng.random()
        if self._keep_u * k < 1.0:
            self.hooks.keep_refreshed[name](slot, how)
            self.refresh_checks.setdefault(name, {})[how] = {"round": index, "slot": slot,
                                                             "version": self.version[slot]}

    def round(self, index: int, record: dict[str, list[float]] | None = None,
              host: dict[str, list[float]] | None = None, drain: dict[str, list[float]] | None = None) -> RawRound:
        """Every arm once, in the ``index``-th order. ``record`` collects samples (warm-up);
        ``host`` (measured rounds) collects host enqueue times and drives the spot check;
        ``drain`` collects the device drain after each call (the timer's ``last_drain_s``)."""
        order = self.orders[index % len(self.orders)]
        out: dict[str, float] = {}
        how = self.schedule.at(index, self._short()) if self.schedule is not None and host is not None else None
        if how is not None:
            self._due = {name: (index, how) for name in order}
            self._round_refreshed = set()
        if host is not None and self.hooks.spot:
            self._spot_u = self._spot_rng.random()
        self._keep_u = None
        t0 = self.timer.now_s()
        for name in order:
            if host is not None and self.hooks.spots(name):
                self._spot_due[name] = self._spot_draw(name)
            slot = self.next_slot()
            call, pre = self.call(name, slot)
            # A re-run (host gap) takes later slots: the slot of the call kept is the last taken.
            taken = [slot]

            def again(name=name):
                taken.append(self.next_slot())
                return self.call(name, taken[-1])

            ms = self.timer.time_call(call, arm=name, before=pre, again=again) / self.replays
            out[name] = ms
            if record is not None:
                record[name].append(ms)
            if host is not None:
                host[name].append(getattr(self.timer, "last_host_s", math.nan))
                d = getattr(self.timer, "last_drain_s", None)
                if drain is not None and d is not None:
                    drain[name].append(d)
                if self.schedule is not None:
                    self.fresh[name].append(self._label[name])
                    done = self._refreshed.pop(name, None)
                    self.worked[name].append(done is not None)
                    self.shammed[name].append(done == SHAM)
                    done = None if done == SHAM else done
                    # The kept call ran on the refreshed content only if it was not re-run.
                    if done is not None and len(taken) == 1 and self.hooks.keeps(name):
                        self._keep_check(name, slot, index, done)
                chosen = self._spot_due.pop(name, None)
                if chosen is not None:
                    self._spot_check(name, chosen, taken[-1])
        return RawRound(t0, self.timer.now_s(), order, out)
