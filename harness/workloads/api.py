"""The workload API: what a kernel computes, declared once (docs/workloads.md).

A workload says everything the harness needs to judge and time a kernel of it without
knowing what it computes: its grid axes, its input and output tensors as functions of a
config, how inputs are drawn per seed (with its adversarial families), a float64 reference,
its FLOPs and bytes per call, its device memory, default tolerances per dtype, the canaries
(hollow variants) that show a tolerance can fail, the kernel call contract, and optionally a
bare op (the core computation its kernels should cost no more than, for ``[verify]``'s
``bare_<counter>``). bench's own workloads (attention, decode: ``harness.workloads.shipped``)
and a user's (a ``bench.workloads`` entry point, ``harness.registry.load_workloads``) are the
same kind of object.

The call contract is destination-passing: the harness allocates the outputs (and poisons
them with NaN before checked calls), then calls ``fn(*inputs, *outputs, **call_kwargs(cfg))``;
a kernel writes its outputs in place and anything it returns is never read.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from harness.errors import UserError
from harness.workloads import DTYPE_BYTES
from harness.measurement import canaries as canary_checks
from harness.measurement import feasible
from harness.measurement.correctness.figures import DEFAULT_TOLERANCES, compare
from harness.vocab.metrics import LEDGER_NAMES, NAMES as METRIC_NAMES, PARAM_NAMES, STEP_NAMES

# A workload's or axis's name: what a registration's `workload =` and [grid] keys say, and a
# config key's fields. No '/' or space: config keys are '/'-joined and tables split on spaces.
WORKLOAD_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# Axis value types a registration's TOML can hold.
AXIS_TYPES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
# The layouts a tensor can declare: the harness allocates and draws contiguous buffers only.
LAYOUTS = ("contiguous",)
# The dtypes a workload's `dtype` axis may take: those the gate can round a reference to.
WORKLOAD_DTYPES = ("float16", "bfloat16", "float32")
# Names an axis may not take: a bar reads a name as a metric first (vocab/metrics.py), and every
# row carries these fields whatever its workload.
RESERVED_AXIS_NAMES = frozenset(METRIC_NAMES) | frozenset(PARAM_NAMES) | frozenset(LEDGER_NAMES) | frozenset(STEP_NAMES) \
    | {"workload", "candidate", "correct"}
# Characters a string axis value may not hold: they would split a config key or a table cell.
KEY_BREAKING = ("/", " ", "=")


def _name_ok(name) -> bool:
    return isinstance(name, str) and bool(name) and name[0].isalpha() and set(name) <= WORKLOAD_NAME_CHARS


@dataclass(frozen=True)
class Axis:
    """One grid axis: its name, the type of its values, and what a value must satisfy
    (``choices``, and ``check``: value -> None, or why not)."""

    name: str
    type: type
    choices: tuple = ()
    check: Callable | None = None
    description: str = ""

    def _wrong_type(self, value) -> bool:
        if self.type is float:  # a TOML integer is a number too
            return not isinstance(value, (int, float)) or isinstance(value, bool)
        return not isinstance(value, self.type) or (self.type is int and isinstance(value, bool))

    def reason(self, value) -> str | None:
        """Why ``value`` is no value of this axis, or None."""
        if self._wrong_type(value):
            return f"is not {AXIS_TYPES.get(self.type, self.type.__name__)}"
        if self.choices and value not in self.choices:
            return f"unknown {self.name} (known: {', '.join(map(str, self.choices))})"
        if self.type is str and any(c in value for c in KEY_BREAKING):
            return f"holds one of {' '.join(map(repr, KEY_BREAKING))}, which would split the config key"
        return self.check(value) if self.check else None

    def refusal(self, value) -> str | None:
        """The [grid] refusal of ``value``, or None: ``[grid] cols = 'x' is not an integer``,
        ``[grid] cols = 0: must be > 0``."""
        why = self.reason(value)
        if why is None:
            return None
        return f"[grid] {self.name} = {value!r} {why}" if self._wrong_type(value) else \
            f"[grid] {self.name} = {value!r}: {why}"

    def values(self, raw) -> list:
        """A [grid] entry (one value or a list) as this axis's list of values; UserError naming
        the entry and what is wrong with it."""
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise UserError(f"[grid] {self.name} is empty: give at least one value")
        for v in values:
            if (refused := self.refusal(v)) is not None:
                raise UserError(refused)
        if len(set(values)) != len(values):
            raise UserError(f"[grid] {self.name} lists a value twice: {values}")
        return list(values)


def positive(v) -> str | None:
    """An Axis check: the value must be > 0 (a size)."""
    return None if v > 0 else "must be > 0"


@dataclass(frozen=True)
class Tensor:
    """One input or output of a workload: its shape and dtype as functions of a config
    (dtype by default the config's ``dtype`` axis), and its layout (``LAYOUTS``)."""

    name: str
    shape: Callable
    dtype: Callable | None = None
    layout: str = "contiguous"
    # What each dimension is, as the gate's "exactly constant along the ... axis" names it
    # (default: "dim i").
    dims: tuple[str, ...] = ()
    # An output's own tolerance, dtype -> (atol, rtol), judged instead of the line's where the
    # output is exact or far looser than the others (an output that is a rounded sum need not
    # share a normalised one's bound); None: the line's. Inputs ignore it. Not hashed (a dict).
    tolerances: dict | None = field(default=None, hash=False)

    def shape_of(self, cfg) -> tuple[int, ...]:
        return tuple(int(n) for n in self.shape(cfg))

    def dtype_of(self, cfg) -> str:
        return self.dtype(cfg) if self.dtype else cfg.dtype

    def nbytes(self, cfg) -> int:
        return math.prod(self.shape_of(cfg)) * DTYPE_BYTES[self.dtype_of(cfg)]


@dataclass(frozen=True)
class GridPoint:
    """One point of a plugin workload's grid: its axis values, read as attributes
    (``cfg.rows``); bench's own workloads use ``harness.workloads.Config``."""

    workload: str
    values: tuple = ()  # ((axis, value), ...) in the workload's axis order

    def __getattr__(self, name):
        # Only axis names: dunder and private lookups (pickle's among them) stay AttributeError.
        values = self.__dict__.get("values", ())
        if not name.startswith("_"):
            for axis, value in values:
                if axis == name:
                    return value
        raise AttributeError(f"workload '{self.__dict__.get('workload')}' has no axis {name!r}")

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def axes(self) -> dict:
        return dict(self.values)

    def key(self) -> str:
        """``workload/axis=value/...`` in axis order: stable, and readable as a table cell."""
        return "/".join([self.workload, *(f"{a}={_key_value(v)}" for a, v in self.values)])

    def as_dict(self) -> dict:
        return {"workload": self.workload, **dict(self.values)}

    def replace(self, **changes) -> GridPoint:
        unknown = set(changes) - {a for a, _ in self.values}
        if unknown:
            raise UserError(f"workload '{self.workload}' has no axis {', '.join(sorted(unknown))}")
        return GridPoint(self.workload, tuple((a, changes.get(a, v)) for a, v in self.values))


def _key_value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


class Workload:
    """What a kernel computes. Subclass it, set the class attributes, implement ``inputs``,
    ``outputs``, ``make_inputs``, ``reference`` and ``flops``; the rest has defaults
    (docs/workloads.md walks one through)."""

    name: str = ""
    description: str = ""
    # The grid axes, in config-key order; one must be ``dtype`` (tolerances are per dtype).
    axes: tuple[Axis, ...] = ()
    # The axis the plots and `bench route` read as the workload's size.
    size_axis: str = ""
    # Example values per axis (axis -> list): the grid `bench new` writes where a flag leaves an
    # axis out, small enough to register and sweep anywhere. An axis without one takes its first
    # choice (false for a bool); any other needs `bench new --grid AXIS=VALUES`.
    example_grid: dict = {}
    # Input families: name -> what it draws; the gate runs ``default_families`` unless a
    # registration names others.
    families: dict = {"normal": "every input standard normal"}
    default_families: tuple[str, ...] = ("normal",)
    # The family timed calls, the content refresh and the recheck after timing draw from.
    timing_family: str = "normal"
    # Canaries: name -> the bug it models; `bench register` refuses a tolerance one passes.
    canaries: dict = {}
    # dtype -> (atol, rtol): the tolerances a line starts from; `bench register` still checks the floor.
    tolerances: dict = DEFAULT_TOLERANCES
    # Why the output's magnitude is bounded, as the tolerance floor's refusal says it.
    output_bound: str = ""

    # -- the grid --------------------------------------------------------------------------
    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def grid_keys(self) -> set[str]:
        """The keys a registration's [grid] may hold."""
        return set(self.axis_names)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return next(a.choices for a in self.axes if a.name == "dtype")

    def check_point(self, values: dict) -> str | None:
        """Why this combination of axis values is no valid point (a rule across axes), or None."""
        return None

    def config(self, values: dict):
        """The config of ``values`` (axis name -> value); UserError on an undeclared or missing
        axis, or a value the axis refuses."""
        undeclared = sorted(set(values) - {"workload", *self.axis_names})
        if undeclared:
            raise UserError(f"[grid] {', '.join(undeclared)}: not an axis of workload '{self.name}' (its axes: "
                            f"{', '.join(self.axis_names)}) — drop it or register another workload")
        missing = [a for a in self.axis_names if a not in values]
        if missing:
            raise UserError(f"[grid] needs '{missing[0]}' (workload '{self.name}' has axes "
                            f"{', '.join(self.axis_names)})")
        for axis in self.axes:
            if (refused := axis.refusal(values[axis.name])) is not None:
                raise UserError(refused)
        why = self.check_point(values)
        if why:
            raise UserError(f"[grid] {why}")
        return self.make_config({a: values[a] for a in self.axis_names})

    def make_config(self, values: dict):
        """The config object of already checked axis values (in axis order)."""
        return GridPoint(self.name, tuple(values.items()))

    def from_row(self, config: dict):
        """The config a row's ``config`` dict records."""
        return self.config(config)

    def expand_grid(self, grid: dict) -> tuple[list, dict]:
        """(the configs, the grid as the registration records it) of a [grid] table: the
        product of every axis's values, in axis order."""
        undeclared = sorted(set(grid) - self.grid_keys)
        if undeclared:
            raise UserError(f"[grid] {', '.join(undeclared)}: not an axis of workload '{self.name}' (its axes: "
                            f"{', '.join(self.axis_names)}) — drop it or register another workload")
        for name in self.axis_names:
            if name not in grid:
                raise UserError(f"[grid] needs '{name}' (workload '{self.name}' has axes {', '.join(self.axis_names)})")
        table = {a.name: a.values(grid[a.name]) for a in self.axes}
        configs = []
        for combo in itertools.product(*table.values()):
            values = dict(zip(table, combo))
            why = self.check_point(values)
            if why:
                raise UserError(f"[grid] {why}")
            configs.append(self.make_config(values))
        return configs, table

    # -- tensors, draws and the reference ---------------------------------------------------
    def inputs(self, cfg) -> tuple[Tensor, ...]:
        raise NotImplementedError(f"workload '{self.name}' declares no inputs")

    def outputs(self, cfg) -> tuple[Tensor, ...]:
        raise NotImplementedError(f"workload '{self.name}' declares no outputs")

    def make_inputs(self, cfg, seed: int, family: str = "normal", device: str = "cpu") -> tuple:
        """Fresh inputs of ``cfg`` for (seed, family), identical on every device."""
        raise NotImplementedError(f"workload '{self.name}' has no make_inputs")

    def fill_inputs(self, cfg, inputs, seed: int, family: str = "normal") -> None:
        """Write make_inputs' values for (seed, family) into the existing ``inputs`` (same
        buffers, same addresses): the content refresh and the recheck after timing, where a
        kernel that remembers results by pointer must see new content at the old address."""
        fresh = self.make_inputs(cfg, seed, family, str(inputs[0].device))
        for t, new in zip(inputs, fresh):
            if tuple(t.shape) != tuple(new.shape):
                raise ValueError(f"input of shape {tuple(t.shape)}: {cfg.key()} draws {tuple(new.shape)}")
            t.copy_(new)

    def generation_bytes(self, cfg, device: str = "cpu") -> int:
        """Peak device scratch of drawing ``cfg``'s inputs on ``device`` beside the inputs
        themselves (the VRAM model adds it): by default a fresh input set and a float32 draw
        of the largest input (``fill_inputs`` copies from a fresh ``make_inputs``)."""
        return self.input_bytes(cfg) + 4 * self.input_elems(cfg)

    def boundary_configs(self, cfg) -> list:
        """Small extra configs the gate also checks (partial tiles, one element)."""
        return []

    def reference(self, cfg, inputs) -> tuple:
        """The float64 outputs of ``inputs`` (one tensor per output, in order)."""
        raise NotImplementedError(f"workload '{self.name}' has no reference")

    def allocate_outputs(self, cfg, device: str = "cpu") -> tuple:
        """Empty output buffers as the harness allocates them (it poisons them before checked calls)."""
        import torch

        return tuple(torch.empty(t.shape_of(cfg), dtype=getattr(torch, t.dtype_of(cfg)), device=device)
                     for t in self.outputs(cfg))

    def output_tolerances(self, cfg, atol: float, rtol: float) -> tuple[tuple[float, float], ...]:
        """(atol, rtol) per output of ``cfg``, in order: an output's own (``Tensor.tolerances``
        at the config's dtype) or else the line's ``atol``/``rtol``."""
        return tuple(t.tolerances[cfg.dtype] if t.tolerances and cfg.dtype in t.tolerances else (atol, rtol)
                     for t in self.outputs(cfg))

    def call_kwargs(self, cfg) -> dict:
        """The keyword arguments every kernel of this workload is called with."""
        return {}

    def call(self, fn, inputs, outputs, cfg) -> None:
        """Call a kernel the contract's way; what it returns is dropped, never read."""
        fn(*inputs, *outputs, **self.call_kwargs(cfg))

    # -- work and memory ---------------------------------------------------------------------
    def flops(self, cfg) -> float:
        raise NotImplementedError(f"workload '{self.name}' has no flops")

    def min_read_bytes(self, cfg) -> float:
        """Fewest bytes any correct kernel must read: every input once."""
        return float(sum(t.nbytes(cfg) for t in self.inputs(cfg)))

    def min_bytes(self, cfg) -> float:
        """Fewest bytes any kernel must move: every input read and every output written once."""
        return self.min_read_bytes(cfg) + float(sum(t.nbytes(cfg) for t in self.outputs(cfg)))

    def kv_bytes(self, cfg) -> float | None:
        """Bytes of the operand a call streams, for the ``kv_gbps`` rate (attention's K and V
        cache), or None: a workload without one reports that rate as not measured."""
        return None

    def input_elems(self, cfg) -> int:
        """Elements of the largest input: what drawing and referencing it costs."""
        return max(math.prod(t.shape_of(cfg)) for t in self.inputs(cfg))

    def input_bytes(self, cfg) -> int:
        return sum(t.nbytes(cfg) for t in self.inputs(cfg))

    def output_bytes(self, cfg) -> int:
        return sum(t.nbytes(cfg) for t in self.outputs(cfg))

    def reference_bytes(self, cfg) -> int:
        """Peak device bytes of the float64 reference: by default a float64 copy of every input
        and every output."""
        return sum(8 * math.prod(t.shape_of(cfg)) for t in (*self.inputs(cfg), *self.outputs(cfg)))

    # -- the tolerance: its floor and its power ------------------------------------------------
    def floor_configs(self, point, baseline) -> tuple[list, str | None]:
        """(the configs the gate checks at ``point`` for ``baseline`` that a float64 reference
        can be computed for at register, None), or ([], why none can): where the tolerance
        floor is checked. Every one of them: a seed passes the gate only if it passes all, so
        a refusal stays exact, and a trivially exact case (one column) cannot hide the rest."""
        gated = [c for c in (point, *self.boundary_configs(point))
                 if baseline.config_reason(c) is None and self.input_elems(c) <= feasible.FLOOR_MAX_ELEMS]
        if not gated:
            return [], (f"no config the gate checks at {point.key()} has at most {feasible.FLOOR_MAX_ELEMS} "
                        f"elements per input: too large for a float64 reference at register")
        return gated, None

    def floor_references(self, cfg, seed: int, family: str, drawn: dict) -> tuple:
        """The float64 reference outputs the gate judges at (cfg, seed, family): drawn in
        float32 once per shape and rounded to each dtype, as the gate's inputs are."""
        return feasible.references_of(self, cfg, seed, family, drawn)

    def check_canaries(self, configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list:
        """Every canary at the smallest and largest grid point of each dtype
        (``measurement.canaries.check_workload``)."""
        return canary_checks.check_workload(self, configs, atol=atol, rtol=rtol, seed=seed, families=families,
                                            names=names)

    def canary_applies(self, name: str, cfg) -> bool:
        """Whether canary ``name`` is checked at ``cfg``: False where no tolerance of the dtype can
        see it (say why, in the workload's docs), or where it has no meaning (a bias canary of a
        config without one). A canary checked and passed is refused; one not checked is not."""
        return True

    def canary(self, name: str, cfg, inputs) -> tuple | None:
        """The float64 outputs of canary ``name`` (the reference bent the way the bug bends
        it) on float64 ``inputs``, or None where it means nothing at ``cfg``."""
        raise NotImplementedError(f"workload '{self.name}' declares canary {name!r} but does not compute it")

    def downgrade_names(self, dtypes) -> tuple[str, ...]:
        """Lower precisions the tolerance-power report checks inside the line's dtypes."""
        return ()

    def downgrades(self, checks) -> dict:
        return {}

    def canary_subset(self, seed: int) -> str:
        """What the canary report says it ran on."""
        return f"the smallest and largest point of each dtype, seed {seed}"

    # -- the bare op: the core computation a kernel should cost no more than -------------------
    # What it computes, as a profile row records it (``torch.matmul(x, w.t())``); "" declares
    # none. A [verify] clause naming ``bare_<counter>`` compares a kernel's counters with this
    # op's, profiled at the same config on the same inputs (docs/workloads.md#the-bare-op).
    bare_name: str = ""

    @property
    def has_bare_op(self) -> bool:
        return bool(self.bare_name)

    def bare_outputs(self, cfg) -> tuple[Tensor, ...]:
        """The bare op's outputs (the harness allocates and poisons them, as a kernel's)."""
        raise NotImplementedError(f"workload '{self.name}' declares no bare op")

    def bare_op(self, cfg, inputs, outputs) -> None:
        """Run the bare op on the workload's ``inputs``, writing ``outputs`` in place."""
        raise NotImplementedError(f"workload '{self.name}' declares no bare op")

    def bare_reference(self, cfg, inputs) -> tuple:
        """The bare op's float64 outputs (one tensor per bare output, in order)."""
        raise NotImplementedError(f"workload '{self.name}' declares no bare op")

    def allocate_bare_outputs(self, cfg, device: str = "cpu") -> tuple:
        """Empty bare-op output buffers, allocated as a kernel's outputs are (``allocate_outputs``)."""
        import torch

        return tuple(torch.empty(t.shape_of(cfg), dtype=getattr(torch, t.dtype_of(cfg)), device=device)
                     for t in self.bare_outputs(cfg))

    def bare_check(self, cfg, inputs, outputs, *, atol: float, rtol: float) -> str | None:
        """Why the bare op's ``outputs`` fail the gate's float64 compare against ``bare_reference``
        on ``inputs`` (unwritten, non-finite or out of tolerance), or None: counters of an op
        that computed something else measure nothing."""
        refs = self.bare_reference(cfg, tuple(inputs))
        if len(refs) != len(outputs):
            return f"bare_reference gave {len(refs)} outputs for {len(outputs)} bare outputs"
        for t, out, ref in zip(self.bare_outputs(cfg), outputs, refs):
            fig = compare(out, ref, atol=atol, rtol=rtol, dtype=cfg.dtype)
            if fig.n_unwritten or fig.n_nonfinite or not fig.passed:
                return f"bare op ({self.bare_name}) output {t.name}: {fig.summary()}"
        return None

    # -- the declaration itself -----------------------------------------------------------------
    def validate(self) -> None:
        """UserError naming what is wrong with this declaration (bench checks every workload it loads)."""
        where = f"workload {self.name!r} ({type(self).__module__}.{type(self).__qualname__})"
        if not _name_ok(self.name):
            raise UserError(f"{where}: its name must be lower-case letters, digits and '_', starting with a letter")
        names = [a.name for a in self.axes]
        if not names or len(set(names)) != len(names) or not all(_name_ok(n) for n in names):
            raise UserError(f"{where}: axes must be distinct lower-case names (has {names})")
        taken = [n for n in names if n in RESERVED_AXIS_NAMES]
        if taken:
            raise UserError(f"{where}: axis {taken[0]!r} is a metric or a field every row carries: a bar could not "
                            f"filter on it — rename the axis")
        if "dtype" not in names:
            raise UserError(f"{where}: needs a 'dtype' axis (tolerances are per dtype)")
        bad = [d for d in self.dtypes if d not in WORKLOAD_DTYPES]
        if not self.dtypes or bad:
            raise UserError(f"{where}: its dtype axis must list choices among {', '.join(WORKLOAD_DTYPES)}")
        missing = [d for d in self.dtypes if d not in self.tolerances]
        if missing:
            raise UserError(f"{where}: no default tolerance for dtype {missing[0]}: add it to `tolerances`")
        if not self.families or not set(self.default_families) <= set(self.families) or not self.default_families:
            raise UserError(f"{where}: default_families must be a non-empty subset of its families")
        if self.timing_family not in self.families:
            raise UserError(f"{where}: timing_family {self.timing_family!r} is not one of its families")
        if self.size_axis and self.size_axis not in names:
            raise UserError(f"{where}: size_axis {self.size_axis!r} is not one of its axes")
        if self.bare_name:
            undeclared = [m for m in ("bare_outputs", "bare_op", "bare_reference")
                          if getattr(type(self), m) is getattr(Workload, m)]
            if undeclared:
                raise UserError(f"{where}: declares bare_name {self.bare_name!r} but not {undeclared[0]}: a bare op "
                                f"needs bare_outputs, bare_op and bare_reference")
        by_name = {a.name: a for a in self.axes}
        for axis, values in self.example_grid.items():
            if axis not in by_name:
                raise UserError(f"{where}: example_grid names {axis!r}, which is not one of its axes")
            if not isinstance(values, list) or not values or \
                    any(by_name[axis].reason(v) is not None for v in values):
                raise UserError(f"{where}: example_grid {axis!r} must be a non-empty list of the axis's values")


