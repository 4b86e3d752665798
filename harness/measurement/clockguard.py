"""The clocks the harness times with, taken before any kernel is imported, and the check that
kernel code has not replaced them since (issue 47).

A kernel module is Python in the measuring process: at import, or during a call, it can
rebind ``time.perf_counter_ns``, ``torch.cuda.Event.elapsed_time`` or a name of the harness's
own timing modules, and every reading the harness took through that name would then be
the kernel's (issue 47: a kernel that hid three quarters of its own time read 3.6-4.5x
against an honest 1.23-1.36x). So:

* the harness takes its own references here: the host clocks when ``harness`` is imported
  (the first import of every bench process: driver, spawned workers, Ray actors), torch's
  CUDA event clocks the moment torch itself has been imported (an import hook: a kernel
  module that imports torch runs only after the capture), and ``seal()``, run by
  ``registry.load_kernels`` before any kernel module is imported, snapshots the timing
  modules' globals and classes. The timers call only these references;
* ``check()`` compares, by identity, the public names and those snapshots with what they
  hold now (pointer compares, outside every timed window): the sweep runs it at the start
  of each config, after every checked call (gate, recheck), around the sustained calls, and
  in the rounds through the state-change watch (measurement/leftover.py, which blames the
  arm whose call was in flight): the HOT names before every timed call, everything once per
  round. A replacement refuses rows with the ``clock_tampered`` tag, naming what was
  replaced and by what (module, qualified name, file); ``restore()`` then puts the
  originals back, so the next arm runs in the world it was measured against;
* the timers also read ``independent_ns``, a different clock through a different function
  (CLOCK_BOOTTIME), around every timed window (timers.py ``CallClock``): a reference the
  identity check cannot see being swapped (one swapped for a single read and put back
  before the next check) still cannot make a window read longer or shorter than that clock.

Limits, stated: code in the same process can reach any object, a timer's frame included; a
kernel that edits the harness's private state or frames is out of reach of any in-process
check. What is closed is the route of issue 47 and its neighbours: replacing a clock
function, a timing module's name or class attribute, or torch's event methods, for good or
for one reading.
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass

# The host clock readers of the time module. The harness times with perf_counter(_ns) and
# thread_time_ns; the others are watched too, because a kernel that replaces any clock
# reader has no honest reason to, and the check costs one pointer compare each.
HOST_CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "thread_time", "thread_time_ns",
               "process_time", "process_time_ns", "clock_gettime", "clock_gettime_ns", "time", "time_ns")
_HOST = {name: getattr(time, name) for name in HOST_CLOCKS if hasattr(time, name)}

# The references the timers call (never ``time.X`` looked up at call time).
perf_counter = time.perf_counter
perf_counter_ns = time.perf_counter_ns
thread_time_ns = time.thread_time_ns

# The independent clock: CLOCK_BOOTTIME where Linux has it (CLOCK_MONOTONIC plus time
# suspended, so it runs at perf_counter's rate, NTP slew included, through another clock id
# and another function), else CLOCK_MONOTONIC_RAW (not slewed: a rate that differs by up to
# the kernel's 500 ppm slew limit, timers.CLOCK_RATE_TOLERANCE), else monotonic_ns.
INDEPENDENT_CLOCK = next((n for n in ("CLOCK_BOOTTIME", "CLOCK_MONOTONIC_RAW") if hasattr(time, n)), "monotonic")
independent_ns = (functools.partial(time.clock_gettime_ns, getattr(time, INDEPENDENT_CLOCK))
                  if INDEPENDENT_CLOCK != "monotonic" else time.monotonic_ns)

# The harness modules whose globals and classes decide a timed number: the timers and what
# runs the timed calls and turns their readings into samples, statistics and drains.
# (This module's own are snapshotted when it is imported.)
TIMING_MODULES = ("harness.measurement.timing.timers",
                  "harness.measurement.timing.rounds", "harness.measurement.timing.measure",
                  "harness.measurement.timing.summary", "harness.measurement.timing.sustained",
                  "harness.measurement.timing.results",
                  "harness.measurement.stats", "harness.measurement.leftover")
# torch.cuda's names the CUDA-event timer uses (torch.cuda.Event's own namespace is
# snapshotted whole: record, elapsed_time, synchronize, query, __new__...).
TORCH_CUDA_NAMES = ("Event", "synchronize", "_sleep", "current_stream", "device")
# The names a timed reading goes through call by call — with the public clocks, the "hot"
# ones, compared before every timed call (``check(full=False)``: ~40 pointer compares, 7-9 µs
# on the 2-core host) so the arm whose call replaced one is known; the timing modules' whole
# namespaces are compared once per round and at every boundary (``check()``: ~720, 56-105 µs).
HOT = {"harness.measurement.timing.timers": ("perf_counter", "perf_counter_ns", "thread_time_ns", "independent_ns",
                                             "torch_clocks", "drain_s", "hold_stream", "CallClock", "CallCpu"),
       "harness.measurement.timing.timers.HostTimer": ("time_call", "time_loop", "now_s"),
       "harness.measurement.timing.timers.CudaEventTimer": ("time_call", "time_loop", "now_s"),
       "torch.cuda.Event": ("record", "elapsed_time", "synchronize", "query")}


@dataclass(frozen=True)
class TorchClocks:
    """torch's CUDA timing functions as they were when torch finished importing."""

    Event: type
    record: object
    elapsed_time: object
    synchronize: object          # Event.synchronize
    query: object
    cuda_synchronize: object     # torch.cuda.synchronize
    sleep: object                # torch.cuda._sleep (the hold spin)


@dataclass(frozen=True)
class Tamper:
    """One replaced name: ``name`` (as a user would spell it) and what holds it now."""

    name: str
    now: str

    def describe(self) -> str:
        return f"{self.name} {self.now}"


_MISSING = object()


# Keys Python itself adds to a namespace on first read (a class's or module's empty
# ``__annotations__``, made when inspect or typing asks for it): never a replacement.
LAZY_KEYS = frozenset({"__annotations__"})


class _Namespace:
    """A snapshot of one namespace (a module's globals or a class's attributes), compared by
    identity: the same keys, in the same order, holding the same objects."""

    hot = False  # whole namespaces: once per round (the hot names are also single _Names)

    def __init__(self, label: str, owner, ns):
        self.label, self.owner, self.ns = label, owner, ns
        self._take()

    def _take(self) -> None:
        self.items = tuple(self.ns.items())  # holds the originals: their ids cannot be reused
        self.keys = tuple(k for k, _ in self.items)
        self.ids = tuple(id(v) for _, v in self.items)

    def intact(self) -> bool:
        ns = self.ns
        return len(ns) == len(self.ids) and tuple(map(id, ns.values())) == self.ids and tuple(ns) == self.keys

    def changes(self) -> list[Tamper]:
        ns, out = self.ns, []
        for k, v in self.items:
            now = ns.get(k, _MISSING)
            if now is not v:
                out.append(Tamper(f"{self.label}.{k}", "removed" if now is _MISSING else f"replaced by {origin(now)}"))
        snap = dict(self.items)
        added = [k for k in ns if k not in snap]
        out += [Tamper(f"{self.label}.{k}", f"added ({origin(ns[k])})") for k in added if k not in LAZY_KEYS]
        if not out and added:  # only Python's own lazy keys: the snapshot takes them
            self._take()
        return out

    def restore(self) -> None:
        snap = dict(self.items)
        if isinstance(self.owner, type):  # a class's namespace is read-only: through setattr
            for k in [k for k in self.ns if k not in snap]:
                delattr(self.owner, k)
            for k, v in self.items:
                if self.ns.get(k, _MISSING) is not v:
                    setattr(self.owner, k, v)
        else:
            for k in [k for k in self.ns if k not in snap]:
                del self.ns[k]
            for k, v in self.items:
                if self.ns.get(k, _MISSING) is not v:
                    self.ns[k] = v
        if not self.intact():  # the originals, all of them; a key put back came last: its order
            self._take()


class _Names:
    """Single attributes of an object: of those the harness does not own (the time module,
    torch.cuda) only the named ones are compared, so a library's own lazy attributes never read
    as tampering; of the timing modules', the HOT ones, compared before every timed call."""

    hot = True  # what every timed reading goes through

    def __init__(self, label: str, owner, originals: dict):
        self.label, self.owner, self.originals = label, owner, dict(originals)
        self._pairs = tuple(self.originals.items())

    def intact(self) -> bool:
        owner = self.owner
        return all(getattr(owner, k, _MISSING) is v for k, v in self._pairs)

    def changes(self) -> list[Tamper]:
        out = []
        for k, v in self._pairs:
            now = getattr(self.owner, k, _MISSING)
            if now is not v:
                out.append(Tamper(f"{self.label}.{k}", "removed" if now is _MISSING else f"replaced by {origin(now)}"))
        return out

    def restore(self) -> None:
        for k, v in self._pairs:
            if getattr(self.owner, k, _MISSING) is not v:
                setattr(self.owner, k, v)


# What check() compares: the host clocks from the start; torch's and the timing modules' as
# they are taken. _STATE holds the rest of this module's mutable state (rebinding its names
# would read as tampering with this very module).
_WATCHED: list = [_Names("time", time, _HOST)]
_STATE: dict = {"torch": None, "late_torch": None, "sealed": False, "found": ()}


def origin(obj) -> str:
    """What ``obj`` is and where it was defined, for a rejection's reason: ``module.qualname
    (file)`` of a function, a method's function, or a callable object's class."""
    fn = getattr(obj, "__func__", obj)
    if not callable(fn) and not isinstance(fn, type):
        return f"a {type(obj).__name__} ({obj!r:.60})"
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    mod = getattr(target, "__module__", None) or "?"
    code = getattr(target, "__code__", None)
    where = code.co_filename if code is not None else getattr(sys.modules.get(mod), "__file__", None)
    return f"{mod}.{getattr(target, '__qualname__', type(target).__name__)}" + (f" ({where})" if where else "")


def torch_clocks() -> TorchClocks:
    """torch's CUDA timing functions as taken when torch was imported. If torch got imported
    past the hook (a kernel removed it from sys.meta_path first), they are taken now and
    ``check()`` reports that for good: they cannot be vouched for."""
    clocks = _STATE["torch"]
    if clocks is None:
        if "torch" not in sys.modules:
            raise RuntimeError("torch is not imported: there are no CUDA event clocks to take")
        _STATE["late_torch"] = Tamper("torch", "was imported past the harness's import hook (removed from "
                                               "sys.meta_path): its CUDA event clocks were taken after kernel "
                                               "code could have replaced them")
        _take_torch(sys.modules["torch"])
        clocks = _STATE["torch"]
    return clocks


def _take_torch(torch) -> None:
    """Take torch.cuda's timing functions and snapshot the Event class (right after torch's
    own import, before the importer's next line runs)."""
    if _STATE["torch"] is not None:
        return
    cuda = torch.cuda
    ev = cuda.Event
    _STATE["torch"] = TorchClocks(Event=ev, record=ev.record, elapsed_time=ev.elapsed_time,
                                  synchronize=ev.synchronize, query=ev.query,
                                  cuda_synchronize=cuda.synchronize, sleep=cuda._sleep)
    _WATCHED.append(_Names("torch.cuda", cuda, {n: getattr(cuda, n) for n in TORCH_CUDA_NAMES if hasattr(cuda, n)}))
    _watch(_Namespace("torch.cuda.Event", ev, vars(ev)))


class TorchImportHook:
    """On sys.meta_path: finds ``torch`` as the finders after it would, and takes its clocks
    as soon as its module has run (``_take_torch``)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torch" or _STATE["torch"] is not None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _take_torch(module)

        spec.loader.exec_module = exec_module  # this loader instance serves this import only
        return spec


def seal() -> None:
    """Snapshot the timing modules' globals and classes (importing them). Run before any
    kernel module is imported (registry.load_kernels); later calls change nothing."""
    if _STATE["sealed"]:
        return
    import importlib

    for name in TIMING_MODULES:
        _watch_module(importlib.import_module(name))
    _STATE["sealed"] = True


def _watch_module(mod) -> None:
    """Snapshot a module's globals and the attributes of every class it defines."""
    name = mod.__name__
    _watch(_Namespace(name, mod, vars(mod)))
    for attr, value in list(vars(mod).items()):
        if isinstance(value, type) and value.__module__ == name:
            _watch(_Namespace(f"{name}.{attr}", value, vars(value)))


def _watch(ns: _Namespace) -> None:
    """Watch a whole namespace, and its HOT names on their own."""
    _WATCHED.append(ns)
    if ns.label in HOT:
        _WATCHED.append(_Names(ns.label, ns.owner, {k: ns.ns[k] for k in HOT[ns.label]}))


def intact(full: bool = True) -> bool:
    """Every watched name (``full``; else the hot ones) still holds its original: pointer compares."""
    return all(w.intact() for w in _WATCHED if full or w.hot) and _STATE["late_torch"] is None


def check(full: bool = True) -> tuple[Tamper, ...]:
    """What was replaced since the originals were taken (empty: nothing): among every watched
    name, or (``full`` false) the hot ones only (HOT: what a timed reading goes through)."""
    if "torch" in sys.modules and _STATE["torch"] is None:
        torch_clocks()  # records that torch came in past the hook
    if intact(full):
        return ()
    out = [t for w in _WATCHED if full or w.hot for t in w.changes()]
    if _STATE["late_torch"] is not None:
        out.append(_STATE["late_torch"])
    return tuple(dict.fromkeys(out))  # a hot name is in its whole namespace too


def restore() -> None:
    """Put every original back (after a replacement was found and blamed)."""
    for w in _WATCHED:
        w.restore()


def describe(found) -> str:
    """A rejection's reason: what was replaced, and by what."""
    return "; ".join(t.describe() for t in found)


def keep(found) -> None:
    """Record replacements found with no kernel call in flight (at import, by a thread, or
    left by an earlier config) for the rest of this process, so every later config is refused
    too (the code that made them is still loaded), and put the originals back."""
    _STATE["found"] = tuple(dict.fromkeys(_STATE["found"] + tuple(found)))
    restore()


def before_config() -> tuple[Tamper, ...]:
    """At the start of a config (or wherever no kernel call is in flight): what is replaced now
    is ``keep``'s; every replacement on this process's record."""
    found = check()
    if found:
        keep(found)
    return _STATE["found"]


def forget() -> None:
    """Drop the kept record and put the originals back (a test that tampered on purpose ends so)."""
    restore()
    _STATE["found"] = ()


__all__ = ["HOST_CLOCKS", "INDEPENDENT_CLOCK", "TIMING_MODULES", "Tamper", "TorchClocks", "TorchImportHook",
           "before_config", "check", "describe", "forget", "independent_ns", "intact", "keep", "origin", "perf_counter",
           "perf_counter_ns", "restore", "seal", "thread_time_ns", "torch_clocks"]

if not any(getattr(f, "__name__", None) == "TorchImportHook" for f in sys.meta_path):
    sys.meta_path.insert(0, TorchImportHook)
if "torch" in sys.modules:  # imported before harness: nothing of the kernels' has run yet
    _take_torch(sys.modules["torch"])
_watch_module(sys.modules[__name__])
