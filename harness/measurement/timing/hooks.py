"""``CallHooks``: what the caller runs around each timed call, outside its window.

``measure`` takes one ``CallHooks`` (``hooks=``) instead of loose callables; every field is
optional, and a measurement without one runs no hook at all (its rounds are as before any
existed). Per arm (``prepare``, ``spot``, ``keep_refreshed``: name -> hook) or for all arms
(``refresh``, ``watch``). In the order they run around arm ``name``'s timed call on ``slot``:

- ``watch(name, spot)``: first, ahead of the arm's lead calls: whatever the process looks
  like then (global state, host threads) is what the previous arm's calls left, leads
  included, so the caller can blame the right arm. ``spot`` is true before the call
  ``spot[name]`` will run after (drawn before the call).
- ``refresh(slot, seed, how)``: at rounds of a seeded schedule (``refresh_seed``;
  timing/refresh.py), after the lead calls, writes new content (drawn from ``seed``) into
  input slot ``slot``: ``how`` "in_place" (same buffers) or "fresh_buffers" (new tensors
  replacing the slot's; never in graph mode), or "sham" (the same work, the content kept).
- ``prepare[name](slot)``: the sweep poisons the arm's output there, so no call can skip its
  work by finding the last answer still in place.
- (the timed call)
- ``spot[name](slot)``: right after one of the arm's measured calls, chosen uniformly at
  random among all of them (reservoir sampling, ``random.Random(spot_seed)``, one uniform
  per round shared by the arms: arms with as many calls choose the same round, and on one
  slot the same content): the sweep copies that call's output there and checks it after
  timing, so a kernel right only on some calls cannot count on which are checked. It may
  run more than once (each later choice replaces the earlier); the last is the one.
- ``keep_refreshed[name](slot, how)``: right after one refreshed call per arm and ``how``
  (reservoir sampling, one uniform per round shared by the arms; the last call is the
  one), so the caller can check that its output matches the new content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

SlotHook = Callable[[int], None]


@dataclass(frozen=True)
class CallHooks:
    """The caller's hooks around every timed call (module docstring); None: not run."""

    prepare: Mapping[str, SlotHook] | None = None
    spot: Mapping[str, SlotHook] | None = None
    spot_seed: int = 0
    refresh: Callable[[int, int, str], None] | None = None
    keep_refreshed: Mapping[str, Callable[[int, str], None]] | None = None
    refresh_seed: int = 0
    watch: Callable[[str, bool], None] | None = None

    def prepare_of(self, name: str) -> SlotHook | None:
        """Arm ``name``'s prepare hook, or None."""
        return self.prepare.get(name) if self.prepare else None

    def spots(self, name: str) -> bool:
        """Whether arm ``name`` has a spot hook (its measured calls are drawn among)."""
        return self.spot is not None and name in self.spot

    def keeps(self, name: str) -> bool:
        """Whether arm ``name`` keeps the output of a refreshed call."""
        return self.keep_refreshed is not None and name in self.keep_refreshed


NO_HOOKS = CallHooks()

__all__ = ["CallHooks", "NO_HOOKS", "SlotHook"]
