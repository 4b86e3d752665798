"""Work a kernel leaves running after its call returns: device work on another stream, host
threads, child processes.

A kernel that returns with work still running is timed short, and whoever runs next pays for
it (issue 25: the baseline read 3.87 ms against its true 1.21 ms behind such a kernel). The
device half is decided by how long a device-wide synchronize takes once the caller's stream
has finished the call: on an idle device it returns at once, so a long one means some other
stream still had work. The harness drains the device this way after every timed call (outside
the timed window), so the next arm never runs beside left-over work, and judges each arm's
drain times. The host half looks for Python threads and child processes that the call started
and that still use the CPU after it returned.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable

from harness.measurement import clockguard
from harness.measurement.clockguard import perf_counter
from harness.measurement.correctness.results import CLOCK_TAMPERED
from harness.measurement.numerics import capture, describe, diff, pin

# A device-wide synchronize after the caller's stream is done: on the H200, over 300 idle
# calls, p50 11 µs, p99 24 µs, max 42 µs (research/drain_probe.py;
# docs/measurement.md#what-a-timed-number-has-been-through).
# Longer than this, the device was still running something the call left behind.
DRAIN_LIMIT_S = 100e-6
# A checked call whose drain exceeds DRAIN_LIMIT_S is called once more on the same inputs:
# left-over work is named only when this many calls in a row leave it (host jitter repeats rarely).
DRAIN_CONFIRM_CALLS = 2
# Timed calls: an arm leaves work when more than this share of its measured calls drained
# longer than DRAIN_LIMIT_S (an honest arm on the H200: 0 of 300), or when its median drain
# exceeds the baseline's by more than DRAIN_MARGIN_S (work left on every call, however short;
# the honest arms' medians differ by < 1 µs).
DRAIN_MAX_SHARE = 0.05
DRAIN_MARGIN_S = 25e-6
# A share of long drains over DRAIN_MAX_SHARE is confirmed before it is blamed: the arm is
# called again as many times as the rounds measured it (at least DRAIN_CONFIRM_MIN_CALLS, at
# most DRAIN_CONFIRM_MAX_CALLS; same timer, hold and drain, outside the rounds) and named when
# the timed and confirming calls together are over the share. Host jitter (a profiled H200
# sweep: 2 of 36 honest timed calls at 0.2-0.46 ms) repeats rarely, as in the gate's
# DRAIN_CONFIRM_CALLS; a kernel that leaves work on more than twice the share of its timed
# calls is named however it behaves when called again, and one that leaves it on fewer
# cannot move its median (the median-drain rule needs no confirmation).
DRAIN_CONFIRM_MIN_CALLS = 20
DRAIN_CONFIRM_MAX_CALLS = 64
# Host: how long a new thread or child process is watched once the call has returned, and how
# much CPU it may use in that time (a thread's exit path takes microseconds; a thread left
# computing uses most of a core even on a loaded machine).
HOST_WATCH_S = 0.01
HOST_CPU_LIMIT_S = 1e-3


def drain_s(device) -> float:
    """Seconds a device-wide synchronize takes now (call it once the caller's stream is done).

    Timed around the CUDA runtime's own ``cudaDeviceSynchronize`` called with the GIL held:
    ``torch.cuda.synchronize`` releases the GIL and must win it back from the process's other
    threads (the clock monitor's polls) before it can return, which read on the H200 as drains
    of 100-340 µs after an 11 ms cuBLAS call with nothing left running (26 µs median without
    the monitor, 9 µs with the GIL held: docs/benchmarks-log.md#device-runs-of-2026-12-02-issue-25).
    Where the runtime cannot be found, torch's synchronize times it."""
    import torch

    sync = _cudart_sync()
    with torch.cuda.device(device):
        t0 = perf_counter()
        if sync is None:
            torch.cuda.synchronize()
        else:
            rc = sync()
            if rc != 0:
                torch.cuda.synchronize()  # raises torch's error for the failed call (a faulted context)
                raise RuntimeError(f"cudaDeviceSynchronize returned CUDA error {rc}")
        return perf_counter() - t0


@functools.lru_cache(maxsize=1)
def _cudart_sync():
    """``cudaDeviceSynchronize`` of the CUDA runtime this process has loaded (torch's), bound
    with ``ctypes.PyDLL`` so the call keeps the GIL; None where it cannot be found."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/libcudart.so" in line}
    except OSError:
        return None
    if len(paths) != 1:
        # None, or several runtimes (another library's own copy): which one torch's current
        # device lives in cannot be told, so torch's synchronize does it.
        return None
    try:
        fn = ctypes.PyDLL(paths.pop()).cudaDeviceSynchronize
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


@dataclass(frozen=True)
class HostSnapshot:
    """The Python threads and child processes alive at one moment."""

    threads: frozenset[int]
    children: frozenset[int]


def _children() -> frozenset[int]:
    """Child process ids of this process (all its threads' children; Linux /proc)."""
    pids: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc: multiprocessing's own children are all that can be seen
        import multiprocessing

        return frozenset(p.pid for p in multiprocessing.active_children() if p.pid)
    for tid in tasks:
        # Raw reads (no Python file object): a snapshot reads every thread's file, before and
        # after each checked call (issue 32: ~0.7 ms per snapshot through open() on the H200).
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY)
        except OSError:  # the thread has exited
            continue
        try:
            data = b""
            while chunk := os.read(fd, 4096):
                data += chunk
        except OSError:
            continue
        finally:
            os.close(fd)
        pids.update(int(x) for x in data.split())
    return frozenset(pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def host_snapshot() -> HostSnapshot:
    """What runs on the host now: take it right before a call."""
    return HostSnapshot(frozenset(t.ident for t in threading.enumerate() if t.ident is not None), _children())


def _cpu_ns(path: str) -> int | None:
    """CPU time (ns) of a thread or process from its schedstat, or None when it is gone or unreadable."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def host_leftovers(before: HostSnapshot) -> str | None:
    """Why the call just returned left host work running, or None.

    New Python threads and child processes still alive are watched for HOST_WATCH_S; those that
    use more than HOST_CPU_LIMIT_S of CPU in that time are work the call left running (an idle
    pool thread the kernel created uses none). Costs nothing when the call started nothing.
    """
    threads = [t for t in threading.enumerate() if t.ident not in before.threads and t.is_alive()]
    children = sorted(_children() - before.children)
    if not threads and not children:
        return None
    # key -> (who, schedstat path, still alive?); keyed by id: threads may share a name
    watched = {("thread", t.native_id): (f"thread '{t.name}'", f"/proc/self/task/{t.native_id}/schedstat", t.is_alive)
               for t in threads}
    watched.update({("child", pid): (f"child process {pid}", f"/proc/{pid}/schedstat", lambda pid=pid: _alive(pid))
                    for pid in children})
    start = {key: _cpu_ns(path) for key, (_, path, _) in watched.items()}
    time.sleep(HOST_WATCH_S)
    busy = []
    for key, (who, path, alive) in watched.items():
        t0, t1 = start[key], _cpu_ns(path)
        if t0 is None:
            # No schedstat (not Linux): alive after the watch is all that can be told (fail closed).
            if alive():
                busy.append(f"{who} is alive {HOST_WATCH_S * 1e3:.0f} ms after the call (CPU time unreadable here)")
        elif t1 is not None and t1 - t0 > HOST_CPU_LIMIT_S * 1e9:
            busy.append(f"{who} used {(t1 - t0) / 1e6:.1f} ms of CPU in the {HOST_WATCH_S * 1e3:.0f} ms after the call")
    if not busy:
        return None
    return "the call returned with host work still running: " + "; ".join(busy)


def n_long(drains: list[float]) -> int:
    """How many of ``drains`` exceed DRAIN_LIMIT_S."""
    return sum(d > DRAIN_LIMIT_S for d in drains)


def _long_drains(drains: list[float]) -> tuple[str, str] | None:
    """(how many of how many, the longest) where the share of ``drains`` over DRAIN_LIMIT_S
    exceeds DRAIN_MAX_SHARE, else None."""
    long = n_long(drains)
    if long <= DRAIN_MAX_SHARE * len(drains):
        return None
    return f"{long} of {len(drains)}", f"longest {max(drains) * 1e6:.0f} µs"


def confirm_calls(n_timed: int) -> int:
    """How many calls confirm a share of long drains found over ``n_timed`` timed calls."""
    return min(max(n_timed, DRAIN_CONFIRM_MIN_CALLS), DRAIN_CONFIRM_MAX_CALLS)


def timed_leftover(drains: dict[str, list[float]], arm: str, baseline: str,
                   confirm: Callable[[str, int], list[float]] | None = None) -> str | None:
    """Why ``arm``'s timed calls left device work running (from each measured call's drain, in
    seconds), or None. Judged against DRAIN_LIMIT_S and against the baseline's drains.
    ``confirm(arm, n)``, where given, calls the arm n more times and returns their drains: a
    share of long drains is then named only when the timed and confirming calls together are
    over DRAIN_MAX_SHARE."""
    mine, base = drains.get(arm) or [], drains.get(baseline) or []
    if not mine:
        return None
    why = []
    long = _long_drains(mine)
    if long is not None:
        share = (f"{long[0]} timed calls left the device busy for more than {DRAIN_LIMIT_S * 1e6:.0f} µs after "
                 f"the caller's stream had finished ({long[1]}; at most {DRAIN_MAX_SHARE:.0%} may)")
        if confirm is None:
            why.append(share)
        else:
            again = confirm(arm, confirm_calls(len(mine)))
            if _long_drains(mine + again) is not None:
                why.append(f"{share}, and {n_long(again)} of {len(again)} calls made again to confirm did "
                           f"(together over {DRAIN_MAX_SHARE:.0%})")
    if base:
        m, b = statistics.median(mine), statistics.median(base)
        if m - b > DRAIN_MARGIN_S:
            why.append(f"its median drain after a call is {m * 1e6:.1f} µs against the baseline's "
                       f"{b * 1e6:.1f} µs (more than {DRAIN_MARGIN_S * 1e6:.0f} µs apart)")
    if not why:
        return None
    return "work left running on another stream after its timed calls: " + "; ".join(why)


class TimedWatch:
    """What timed calls leave behind, watched outside their windows: ``before(arm)`` runs before
    each timed call (the sweep's prepare hook), ``after(arm)`` after the random call chosen for
    the output check (the spot hook).

    ``before`` compares the global state with the pinned one, and the clocks the harness times
    with against their originals (clockguard): a change is blamed on the arm of the previous
    timed call and set back at once, so the next arm never runs under it (a clock replaced
    where no call can be blamed, ``None``'s, refuses every arm). Before the chosen call it also
    notes the host threads and child processes alive, against which ``after`` looks for host
    work that call left running. Device work left on another stream is in the timer's drains.
    """

    def __init__(self, pinned):
        self.pinned = pinned
        self.last: str | None = None
        self.moved: dict[str, dict] = {}
        self.tampered: dict[str | None, str] = {}  # arm (None: no single call's) -> what it replaced
        self._round: set[str] = set()  # arms called since the last full clock check
        self.host: dict[str, str] = {}
        # Per arm whose share of long timed drains was confirmed by calls made again: how many
        # calls, how many drained long, and their drains (µs), named or not (rows keep it).
        self.confirmed: dict[str, dict] = {}
        self._snaps: dict[str, HostSnapshot] = {}

    def before(self, arm: str, spot: bool = True) -> None:
        """Before each timed call of ``arm``; ``spot``: the call whose output is checked, the
        one ``after`` will be asked about (its host snapshot is taken: reading every thread's
        children costs ~0.7 ms, issue 32). The clocks' hot names are compared before every
        call, the timing modules whole once per round (an arm called again: a new round)."""
        new_round = arm in self._round
        if new_round:
            self._round.clear()
        self._round.add(arm)
        self.settle(full=new_round)
        if spot:
            self._snaps[arm] = host_snapshot()
        self.last = arm

    def settle(self, full: bool = True) -> None:
        """Blame a state change or a replaced hot clock name on the last arm called and set it
        back (also once the rounds are over, for the last call); with ``full``, the rest of
        the timing modules' names too, whose replacement no single call is blamed for: it
        refuses every arm."""
        found = clockguard.check(full=False)
        if found:
            self.tampered.setdefault(self.last, clockguard.describe(found))
            if self.last is None:  # no call in flight: on this process's record (clockguard.keep)
                clockguard.keep(found)
            else:
                clockguard.restore()
        found = clockguard.check() if full else ()
        if found:
            self.tampered.setdefault(None, clockguard.describe(found))
            clockguard.restore()
        moved = diff(self.pinned, capture())
        if moved:
            if self.last is not None:
                self.moved.setdefault(self.last, moved)
            pin(self.pinned)

    def after(self, arm: str) -> None:
        snap = self._snaps.get(arm)
        why = host_leftovers(snap) if snap is not None else None
        if why is not None:
            self.host.setdefault(arm, why)

    def failure(self, arm: str, drains: dict[str, list[float]], baseline: str,
                confirm: Callable[[str, int], list[float]] | None = None,
                clocks: dict[str, str] | None = None) -> tuple[str, str] | None:
        """(tag, reason) of what ``arm``'s timed calls left behind, or None. ``confirm``: as
        ``timed_leftover``'s; its calls are watched as the timed ones were (a state change
        they make is blamed on the arm and set back). ``clocks``: per arm, why its timed
        windows disagree with the independent clock (``Measurement.clock_faults``)."""
        tampered = self._tampered(arm)
        if tampered:
            return tampered
        if clocks and arm in clocks:
            return CLOCK_TAMPERED, f"its timed calls disagree with an independent clock: {clocks[arm]}"
        moved = self._moved(arm)
        if moved:
            return moved
        if arm in self.host:
            return "left_running", f"a timed call (the one chosen at random): {self.host[arm]}"

        def watched(name: str, n: int) -> list[float]:
            self.settle()
            self.last = name
            try:
                again = confirm(name, n)
            finally:
                self.settle()
            self.confirmed[name] = {"calls": len(again), "long": n_long(again),
                                    "drain_us": [d * 1e6 for d in again]}
            return again

        why = timed_leftover(drains, arm, baseline, watched if confirm is not None else None)
        moved = self._tampered(arm) or self._moved(arm)
        if moved:
            return moved
        return ("left_running", why) if why else None

    def _tampered(self, arm: str) -> tuple[str, str] | None:
        if arm in self.tampered:
            return CLOCK_TAMPERED, (f"a timed call replaced the clocks the harness times with: "
                                    f"{self.tampered[arm]}")
        if None in self.tampered:
            return CLOCK_TAMPERED, (f"the clocks the harness times with were replaced where no single arm's call "
                                    f"can be blamed (before the timed calls, or found at a round's full check): "
                                    f"{self.tampered[None]}")
        return None

    def _moved(self, arm: str) -> tuple[str, str] | None:
        if arm not in self.moved:
            return None

        return "numerics_changed", (f"a timed call changed global state for whoever runs next "
                                    f"({describe(self.moved[arm])})")
