"""How rounds run: every arm once per round, in the round orders, on input slots of one global
rotation, through one timer; what runs before each call (lead calls, the caller's prepare, the
flush), graph replays in graph mode, and the choice of the spot-checked call."""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Mapping, NamedTuple

from harness.measurement.timing.orders import round_orders
from harness.measurement.timing.policy import TimingPolicy, l2_flush
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
                 mode: str, device: str, timer: Timer, prepare: Mapping[str, Callable[[int], None]] | None,
                 spot: Mapping[str, Callable[[int], None]] | None, spot_seed: int):
        self.arms, self.names, self.n_slots, self.policy = arms, tuple(arms), n_slots, policy
        self.mode, self.timer, self.prepare, self.spot, self.spot_seed = mode, timer, prepare, spot, spot_seed
        # Cold mode: the flush buffer (on a GPU: torch is imported by _pick_timer).
        self.flush: Callable[[], None] | None = None
        if mode == "cold":
            self.flush = l2_flush(device)
        self.orders = round_orders(self.names)
        self.replays = 1                 # calls per sample (graph chains)
        self.slot_counter = 0
        self.graphs: dict[str, tuple] = {}
        self.chains: dict[str, dict[int, Any]] = {}
        self._spot_rng = random.Random(spot_seed)
        self._spot_seen: dict[str, int] = {}
        self.spot_calls: dict[str, dict[str, int]] = {}

    def release(self) -> None:
        """Drop the graphs and the flush buffer (device memory) once timing is over."""
        self.graphs, self.chains, self.flush = {}, {}, None

    def next_slot(self) -> int:
        # Global slot rotation across arms: consecutive calls never share inputs.
        slot = self.slot_counter % self.n_slots
        self.slot_counter += self.replays
        return slot

    def _before(self, name: str, slot: int) -> Callable[[], None] | None:
        # What runs before a timed call, outside its window: the lead calls, the caller's
        # prepare, then the flush (last, so neither warms the L2 for the call).
        prep = self.prepare.get(name) if self.prepare else None
        lead, flush, fn, n_slots = self.policy.lead_calls, self.flush, self.arms[name], self.n_slots
        if prep is None and not lead:
            return flush

        def run() -> None:
            # lead_calls: untimed and back to back, so the GPU is as busy (as hot, as
            # power-limited) as in a loop of calls; the timed call is still isolated by
            # the hold and its own synchronize. On earlier slots (already timed, not
            # timed again for n_slots calls), so a lead never warms a timed call's inputs.
            for i in range(lead):
                fn((slot - 1 - i) % n_slots)
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

    def _spot_check(self, name: str, slot: int) -> None:
        # Reservoir sampling: the k-th measured call replaces the choice with chance 1/k.
        k = self._spot_seen[name] = self._spot_seen.get(name, 0) + 1
        if self._spot_rng.random() * k < 1.0:
            self.spot[name](slot)
            self.spot_calls[name] = {"call": k - 1, "slot": slot}

    def round(self, index: int, record: dict[str, list[float]] | None = None,
              host: dict[str, list[float]] | None = None, drain: dict[str, list[float]] | None = None) -> RawRound:
        """Every arm once, in the ``index``-th order. ``record`` collects samples (warm-up);
        ``host`` (measured rounds) collects host enqueue times and drives the spot check;
        ``drain`` collects the device drain after each call (the timer's ``last_drain_s``)."""
        order = self.orders[index % len(self.orders)]
        out: dict[str, float] = {}
        t0 = self.timer.now_s()
        for name in order:
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
                if self.spot and name in self.spot:
                    self._spot_check(name, taken[-1])
        return RawRound(t0, self.timer.now_s(), order, out)
