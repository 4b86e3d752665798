"""The kernel registry: a decorator that names a kernel and what it supports.

The public plugin API (``from harness import kernel, KernelSpec``; docs/kernels.md). The
kernels shipped in the repository's ``kernels/`` folder import as ``bench_kernels``
(``harness.KERNELS_PACKAGE``), so an installed bench never claims the top-level name
``kernels`` (Hugging Face's kernel loader's). Discovery has one path, the ``bench.kernels``
entry points: bench's own (pyproject.toml) names ``bench_kernels``, whose every public module
is imported; any other names a module of an installed package.

Contract (docs/kernels.md, docs/workloads.md): a kernel is a destination-passing callable of
its workload (``Workload.call``): ``fn(*inputs, *outputs, **call_kwargs) -> None``. For
attention and decode that is ``fn(q, k, v, out, *, causal, scale)``: q and out are
(B, H, Nq, D), k and v are (B, Hkv, Nk, D) with H a multiple of Hkv (query head h reads kv
head h // (H // Hkv)), all contiguous, on one device, of one dtype. The harness allocates the
outputs (poisoned with NaN before checked calls) and never reads anything the kernel returns.

Workloads are discovered the same way, from ``bench.workloads`` entry points
(``load_workloads``): bench's own name attention and decode (``harness.workloads.shipped``),
gemm_bias_gelu (``harness.workloads.gemm``) and rmsnorm (``harness.workloads.rmsnorm``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, TypedDict, Unpack

from harness import KERNELS_PACKAGE
from harness.errors import UserError
from harness.measurement import clockguard
from harness.provenance.code import distribution_record
from harness.workloads.api import Workload

ENTRY_POINT_GROUP = "bench.kernels"
# bench's own entry point in that group, as pyproject.toml declares it (tests/test_registry.py
# checks they agree): the shipped kernels, the ``kernels/`` folder imported as ``bench_kernels``.
SHIPPED_ENTRY_POINT = ("bench", KERNELS_PACKAGE)
# Workloads come from their own entry-point group (docs/workloads.md): each entry names one
# ``harness.workloads.api.Workload`` object, under the workload's own name. bench's own two, as
# pyproject.toml declares them (tests/test_workload_api.py checks they agree); a checkout run
# without being installed uses these.
WORKLOAD_ENTRY_POINT_GROUP = "bench.workloads"
SHIPPED_WORKLOAD_MODULE = "harness.workloads.shipped"
SHIPPED_WORKLOAD_ENTRY_POINTS = (("attention", f"{SHIPPED_WORKLOAD_MODULE}:ATTENTION"),
                                 ("decode", f"{SHIPPED_WORKLOAD_MODULE}:DECODE"),
                                 ("gemm_bias_gelu", "harness.workloads.gemm:GEMM_BIAS_GELU"),
                                 ("rmsnorm", "harness.workloads.rmsnorm:RMSNORM"))
# A kernel's name: what registrations, bar clauses (``speedup vs "fa4"``), ledger arms
# (``candidate:<name>``) and profiler range filters quote. A Python-identifier-like word (dots
# and dashes allowed after the first character), so no quote, space, '/' or '@' can break any
# of them.
KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# The longest kernel name: far past any real one (the longest shipped is 19 characters), and
# short enough for a table column.
MAX_KERNEL_NAME = 64


@dataclass(frozen=True)
class KernelSpec:
    name: str
    fn: Callable
    workloads: tuple[str, ...]
    dtypes: tuple[str, ...]
    devices: tuple[str, ...]
    source: str
    description: str = ""
    # Extra device bytes the kernel allocates beyond q, k, v and out, as a function of the
    # Config (the VRAM model adds inputs, outputs, reference and flush/rotation buffers).
    memory: Callable | None = None
    # Extra device bytes only the first call per shape allocates, on top of ``memory`` (an
    # autotuner's benchmark buffers): counted in the gate, where a shape is first called.
    first_call_memory: Callable | None = None
    # Python modules the kernel needs at call time (checked without importing heavy code).
    requires: tuple[str, ...] = ()
    # How to get them, as the refusal says it (default: ``pip install <module>``), e.g. an extra.
    install: str = ""
    # device -> None where the kernel can run there, else why not: what ``requires`` cannot
    # say (a GPU architecture it needs). Called once the modules are found.
    available: Callable | None = None
    # cfg -> None if supported, else the reason (e.g. "head_dim 96 not supported").
    supports: Callable | None = None
    # What the kernel fixes about its numerics (compute type, math mode, softmax dtype).
    numerics: dict = field(default_factory=dict)
    # (*inputs, **call_kwargs) -> dict of what the kernel decided at run time for these
    # inputs (e.g. which SDPA backend torch dispatched to); recorded in the result row.
    describe: Callable | None = None
    # The installed package a ``bench.kernels`` entry point loaded it from, as
    # {"name", "version"}; None for kernels of this repository (the commit stamp covers them).
    distribution: dict | None = None

    def details(self, inputs, call_kwargs: dict) -> dict:
        """What the kernel decided for these inputs (``describe``, called as the kernel is:
        ``describe(*inputs, **call_kwargs)``), {} without one."""
        return dict(self.describe(*inputs, **call_kwargs)) if self.describe else {}

    def extra_bytes(self, cfg) -> int:
        return int(self.memory(cfg)) if self.memory else 0

    def first_call_bytes(self, cfg) -> int:
        return int(self.first_call_memory(cfg)) if self.first_call_memory else 0

    def unusable_reason(self, device: str) -> str | None:
        """Why this kernel cannot run on ``device`` here, or None."""
        if device not in self.devices:
            return f"runs on {'/'.join(self.devices)}, not {device}"
        for mod in self.requires:
            if not _module_found(mod):
                return f"needs the Python module '{mod}' ({self.install or f'pip install {mod}'})"
        return self.available(device) if self.available else None

    def config_reason(self, cfg) -> str | None:
        """Why this kernel does not support ``cfg``, or None."""
        if cfg.workload not in self.workloads:
            return f"kernel '{self.name}' has no workload '{cfg.workload}' (has {', '.join(self.workloads)})"
        if cfg.dtype not in self.dtypes:
            return f"kernel '{self.name}' does not support dtype {cfg.dtype} (supports {', '.join(self.dtypes)})"
        return self.supports(cfg) if self.supports else None


def _module_found(mod: str) -> bool:
    """Whether ``mod`` can be imported, without importing it (a dotted name's parents are
    imported by find_spec; a missing parent is "not found", not an error)."""
    try:
        return importlib.util.find_spec(mod) is not None
    except ModuleNotFoundError:
        return False


_REGISTRY: dict[str, KernelSpec] = {}
_LOADED = False


def check_name(name: str, what: str = "kernel name") -> str:
    """``name`` if it has a kernel name's syntax (KERNEL_NAME), else a UserError naming the fix.
    Whether a kernel of that name exists is ``get_kernel``'s question."""
    if not isinstance(name, str) or not KERNEL_NAME.fullmatch(name) or len(name) > MAX_KERNEL_NAME:
        shown = name if len(str(name)) <= MAX_KERNEL_NAME else f"{str(name)[:MAX_KERNEL_NAME]}..."
        raise UserError(f"{what} {ascii(shown)} is not a kernel name (letters, digits, '_', '.' and '-', starting "
                        f"with a letter or '_', at most {MAX_KERNEL_NAME} characters): `bench kernels` lists them")
    return name


class KernelOptions(TypedDict, total=False):
    """``@kernel``'s optional keywords, each a ``KernelSpec`` field of the same name."""

    devices: tuple[str, ...] | list[str]
    memory: Callable | None
    first_call_memory: Callable | None
    requires: tuple[str, ...] | list[str]
    install: str
    available: Callable | None
    supports: Callable | None
    numerics: dict | None
    describe: Callable | None
    description: str


# What ``@kernel`` fills in for an option not given.
KERNEL_DEFAULTS: KernelOptions = {"devices": ("cpu", "cuda"), "requires": (), "install": "", "description": ""}


def kernel(name: str, *, workloads, dtypes, **options: Unpack[KernelOptions]):
    """Register ``fn`` as a kernel under ``name``; a second kernel with the same name is an error.

    ``options``: the optional ``KernelSpec`` fields (``KernelOptions``); any other keyword is
    refused, so a misspelt one (``require=``) never registers a kernel without it."""

    check_name(name, "@kernel")
    unknown = sorted(set(options) - set(KernelOptions.__annotations__))
    if unknown:
        raise UserError(f"@kernel {name!r}: unknown option {', '.join(map(repr, unknown))} (known: workloads, dtypes, "
                        f"{', '.join(KernelOptions.__annotations__)}): see docs/kernels.md")
    given: dict = {**KERNEL_DEFAULTS, **options}

    def wrap(fn):
        src = inspect.getsourcefile(fn) or "<unknown>"
        if name in _REGISTRY and _REGISTRY[name].source != src:
            raise UserError(f"kernel '{name}' is registered twice ({_REGISTRY[name].source} and {src}): rename one")
        spec = KernelSpec(name=name, fn=fn, workloads=tuple(workloads), dtypes=tuple(dtypes), source=src, **given)
        _REGISTRY[name] = replace(
            spec, devices=tuple(spec.devices), requires=tuple(spec.requires), numerics=dict(spec.numerics or {}),
            description=spec.description or (inspect.getdoc(fn) or "").split("\n")[0])
        return fn

    return wrap


def kernel_entry_points() -> list:
    """Every ``bench.kernels`` entry point, bench's own (the shipped kernels) first.

    bench's own comes from the installed metadata; where that holds none — a checkout run
    without being installed, or installed before bench declared it — it is the one
    pyproject.toml declares (``SHIPPED_ENTRY_POINT``), so the shipped kernels are always found,
    and found beside the ``harness`` that is running (``harness.SourceOnlyFinder``)."""
    from importlib.metadata import EntryPoint, entry_points

    found = list(entry_points(group=ENTRY_POINT_GROUP))
    own = [ep for ep in found if ep.value == KERNELS_PACKAGE]
    name, value = SHIPPED_ENTRY_POINT
    return [own[0] if own else EntryPoint(name, value, ENTRY_POINT_GROUP),
            *(ep for ep in found if ep.value != KERNELS_PACKAGE)]


def load_kernels() -> dict[str, KernelSpec]:
    """Load every ``bench.kernels`` entry point (``kernel_entry_points``): bench's own imports
    every public module of the shipped kernels (the ``kernels/`` folder, imported as
    ``bench_kernels``), any other the module it names.

    A module that fails to import is a UserError naming the file, an entry point that fails
    to load one naming it: a broken kernel must never be silently dropped from a sweep.
    """
    global _LOADED
    if not _LOADED:
        # The timing modules' names and classes as the harness wrote them, before any kernel
        # code runs: a kernel that rebinds one is caught (measurement/clockguard.py).
        clockguard.seal()
        for ep in kernel_entry_points():
            before = set(_REGISTRY)
            own = ep.value == KERNELS_PACKAGE
            try:
                loaded = ep.load()
            except Exception as exc:
                fix = (f"{KERNELS_PACKAGE} is the kernels/ folder beside harness/, with no __init__.py (delete one "
                       f"there), or an installed bench's {KERNELS_PACKAGE}/ (reinstall bench)") if own else \
                    "fix or uninstall that package"
                raise UserError(f"kernel entry point '{ep.name}' ({ep.value}) failed to load: "
                                f"{type(exc).__name__}: {exc} — {fix}") from exc
            if own:
                _load_modules(loaded)  # bench's own code: its commit stamp (or `code` record) covers it
            else:
                _mark_distribution(ep, before)
        _LOADED = True
    return dict(_REGISTRY)


def _load_modules(pkg) -> None:
    """Import every public module of the package ``pkg`` (a name starting with ``_`` is not)."""
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"{pkg.__name__}.{info.name}")
        except UserError:
            raise
        except Exception as exc:
            path = getattr(info.module_finder, "path", pkg.__path__[0])
            raise UserError(f"kernel module {path}/{info.name}.py failed to import: "
                            f"{type(exc).__name__}: {exc} — fix or remove that file") from exc


def _mark_distribution(ep, before: set) -> None:
    """Name the package (and version) behind each kernel an entry point registered: no
    commit of this repository covers its code, so every row using it says where it came from."""
    dist = ep.dist
    if dist is None:
        raise UserError(f"kernel entry point '{ep.name}' ({ep.value}) belongs to no installed distribution: "
                        f"bench cannot record which package version its kernels came from — reinstall that package")
    import sys

    top = ep.module.partition(".")[0]
    where = Path(sys.modules[top].__file__).resolve()
    # A regular install: every file it installed (its other modules too); editable: the package.
    origin = distribution_record(dist, None, where)
    module = ep.module
    for name, spec in _REGISTRY.items():
        mod = getattr(spec.fn, "__module__", "") or ""
        if name not in before or mod == module or mod.startswith(module + "."):
            _REGISTRY[name] = replace(spec, distribution=origin)


def workload_for(spec: KernelSpec, workload: str) -> None:
    """UserError unless kernel ``spec`` is declared for ``workload``: a kernel registered for
    another workload would be called with inputs it was never written for."""
    if workload not in spec.workloads:
        raise UserError(f"kernel '{spec.name}' has no workload '{workload}' (has {', '.join(spec.workloads)}): "
                        f"name a kernel declared for {workload} (`bench kernels` lists them), or add {workload!r} "
                        f"to its @kernel(workloads=...) once it implements that workload's call")


_WORKLOADS: dict[str, Workload] = {}


def workload_entry_points() -> list:
    """Every ``bench.workloads`` entry point, bench's own (attention, decode, gemm_bias_gelu,
    rmsnorm) first; without installed metadata for them (a checkout run without being
    installed, or installed before bench declared one) the ones pyproject.toml declares
    (``SHIPPED_WORKLOAD_ENTRY_POINTS``)."""
    from importlib.metadata import EntryPoint, entry_points

    shipped = dict(SHIPPED_WORKLOAD_ENTRY_POINTS)
    found = list(entry_points(group=WORKLOAD_ENTRY_POINT_GROUP))
    own = {ep.name: ep for ep in found if shipped.get(ep.name) == ep.value}
    return [*(own.get(name) or EntryPoint(name, value, WORKLOAD_ENTRY_POINT_GROUP)
              for name, value in SHIPPED_WORKLOAD_ENTRY_POINTS),
            *(ep for ep in found if shipped.get(ep.name) != ep.value)]


def load_workloads() -> dict[str, Workload]:
    """Every workload its ``bench.workloads`` entry point names, checked (``Workload.validate``).
    An entry point that fails to load, names no Workload object, or names one under another
    name, and two workloads of one name, are UserErrors naming the entry point: a workload
    is never silently dropped or replaced."""
    if not _WORKLOADS:
        loaded: dict[str, Workload] = {}
        for ep in workload_entry_points():
            where = f"workload entry point '{ep.name}' ({ep.value})"
            try:
                wl = ep.load()
            except Exception as exc:
                raise UserError(f"{where} failed to load: {type(exc).__name__}: {exc} — fix or uninstall that "
                                f"package") from exc
            if not isinstance(wl, Workload):
                raise UserError(f"{where} names a {type(wl).__name__}, not a harness.workloads.api.Workload "
                                f"instance — point it at the workload object (docs/workloads.md)")
            if wl.name != ep.name:
                raise UserError(f"{where} names workload {wl.name!r}: name the entry point after its workload")
            if wl.name in loaded:
                raise UserError(f"{where}: a workload named {wl.name!r} is already declared — rename one")
            wl.validate()
            loaded[wl.name] = wl
        _WORKLOADS.update(loaded)
    return dict(_WORKLOADS)


def get_workload(name) -> Workload:
    """The workload ``name``; UserError naming the known ones and how to add one."""
    workloads = load_workloads()
    if not isinstance(name, str) or name not in workloads:
        raise UserError(f"unknown workload {name!r} (known: {', '.join(workloads)}): install the package that "
                        f"declares it (a `bench.workloads` entry point: docs/workloads.md), or name a known one")
    return workloads[name]


def installed_workload(name) -> Workload | None:
    """The workload ``name`` if it is installed here, else None (a row of a plugin this machine
    lacks: its readers say what they could not do without it)."""
    workloads = load_workloads()
    return workloads[name] if isinstance(name, str) and name in workloads else None


def get_kernel(name: str) -> KernelSpec:
    kernels = load_kernels()
    if name not in kernels:
        raise UserError(f"unknown kernel '{name}': `bench kernels` lists the available ones "
                        f"({', '.join(sorted(kernels))})")
    return kernels[name]
