"""Capture and pin the global numeric state that decides which kernels torch runs.

TF32 for matmul/cuDNN, reduced-precision reductions, cuDNN autotuning/determinism and
the SDPA backend switches are process-global: two arms timed under different settings
are different experiments (a TF32 matmul is a different kernel). The harness captures
the state each arm ran under and pins it from the registration's ``[numerics]`` table;
the sweep never times a kernel whose call moved it (``diff`` of the state before and after).

Flags torch does not have in this version read as None and cannot be pinned.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Mapping

from harness.errors import UserError

PRECISIONS = ("highest", "high", "medium")


def _resolver(path: str) -> Callable[[], Any]:
    """The object at ``torch.PATH``, looked up on first use and kept: the state is read every
    timed and checked call (issue 32: the walk cost ~0.2 s per config), and the owners
    (modules, torch's flag accessors, its functions) read torch's C++ state however a kernel
    rebinds the Python names. A path this torch lacks raises AttributeError every time."""
    kept: list = []

    def resolve():
        if kept:
            return kept[0]
        import torch

        o = torch
        for part in path.split("."):
            o = getattr(o, part)
        kept.append(o)
        return o

    return resolve


def _attr(path: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Getter/setter for a plain attribute flag such as ``backends.cudnn.benchmark``."""
    obj = _resolver(path.rsplit(".", 1)[0])

    name = path.rsplit(".", 1)[1]
    return (lambda: getattr(obj(), name)), (lambda v: setattr(obj(), name, v))


def _fn(get: str, set_: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Getter/setter for a flag behind torch functions (``torch.backends.cuda.flash_sdp_enabled``)."""
    getter, setter = _resolver(get), _resolver(set_)
    return (lambda: getter()()), (lambda v: setter()(v))


def _deterministic() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    def get():
        import torch

        return torch.are_deterministic_algorithms_enabled()

    def set_(v):
        import torch

        # Keep whatever warn_only mode is set: only the on/off switch is pinned.
        torch.use_deterministic_algorithms(v, warn_only=torch.is_deterministic_algorithms_warn_only_enabled())

    return get, set_


def _affinity() -> tuple[Callable[[], Any], Callable[[Any], None] | None]:
    import os

    if not hasattr(os, "sched_getaffinity"):  # not Linux: no affinity to read
        return (lambda: None), None

    def get():
        return tuple(sorted(os.sched_getaffinity(0)))

    def set_(v):
        os.sched_setaffinity(0, v)

    return get, set_


def _precision() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    def get():
        import torch

        return torch.get_float32_matmul_precision()

    def set_(v):
        import torch

        torch.set_float32_matmul_precision(v)

    return get, set_


# name -> (torch spelling shown to users, getter, setter). Order matters when applying:
# float32_matmul_precision is set before allow_tf32 because torch couples them
# (allow_tf32 is exactly "precision != highest"; setting it rewrites the precision).
_FLAGS: dict[str, tuple[str, tuple[Callable[[], Any], Callable[[Any], None]]]] = {
    "float32_matmul_precision": ("torch.set_float32_matmul_precision()", _precision()),
    "allow_tf32": ("torch.backends.cuda.matmul.allow_tf32", _attr("backends.cuda.matmul.allow_tf32")),
    "cudnn_allow_tf32": ("torch.backends.cudnn.allow_tf32", _attr("backends.cudnn.allow_tf32")),
    "cudnn_enabled": ("torch.backends.cudnn.enabled", _attr("backends.cudnn.enabled")),
    "cudnn_benchmark": ("torch.backends.cudnn.benchmark", _attr("backends.cudnn.benchmark")),
    "cudnn_deterministic": ("torch.backends.cudnn.deterministic", _attr("backends.cudnn.deterministic")),
    "allow_fp16_reduced_precision_reduction": (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        _attr("backends.cuda.matmul.allow_fp16_reduced_precision_reduction")),
    "allow_bf16_reduced_precision_reduction": (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        _attr("backends.cuda.matmul.allow_bf16_reduced_precision_reduction")),
    "allow_fp16_accumulation": ("torch.backends.cuda.matmul.allow_fp16_accumulation",
                                _attr("backends.cuda.matmul.allow_fp16_accumulation")),
    "flash_sdp": ("torch.backends.cuda.enable_flash_sdp()",
                  _fn("backends.cuda.flash_sdp_enabled", "backends.cuda.enable_flash_sdp")),
    "mem_efficient_sdp": ("torch.backends.cuda.enable_mem_efficient_sdp()",
                          _fn("backends.cuda.mem_efficient_sdp_enabled", "backends.cuda.enable_mem_efficient_sdp")),
    "math_sdp": ("torch.backends.cuda.enable_math_sdp()",
                 _fn("backends.cuda.math_sdp_enabled", "backends.cuda.enable_math_sdp")),
    "cudnn_sdp": ("torch.backends.cuda.enable_cudnn_sdp()",
                  _fn("backends.cuda.cudnn_sdp_enabled", "backends.cuda.enable_cudnn_sdp")),
    "math_sdp_fp16_bf16_reduction": (
        "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp()",
        _fn("backends.cuda.fp16_bf16_reduction_math_sdp_allowed", "backends.cuda.allow_fp16_bf16_reduction_math_sdp")),
    "deterministic_algorithms": ("torch.use_deterministic_algorithms()", _deterministic()),
    # Host state that changes how fast the next arm runs on the CPU (a kernel that leaves one
    # thread, or one core, to whoever runs next reads faster than it is). Recorded and checked
    # like the flags; a registration may pin num_threads, never the other two.
    "num_threads": ("torch.set_num_threads()", _fn("get_num_threads", "set_num_threads")),
    # No setter: torch refuses set_num_interop_threads once any parallel work has run, so the
    # harness cannot restore it either; it is recorded and checked, never pinned.
    "num_interop_threads": ("torch.set_num_interop_threads()", (_fn("get_num_interop_threads", "set_num_interop_threads")[0], None)),
    "cpu_affinity": ("os.sched_setaffinity()", _affinity()),
}
# Read and checked, but a registration cannot pin them (no setter that works mid-process, or
# a machine-specific value a registration must not name).
CAPTURE_ONLY = frozenset({"num_interop_threads", "cpu_affinity"})


@dataclass(frozen=True)
class NumericState:
    """The global numeric flags (None: this torch has no such flag)."""

    float32_matmul_precision: str
    allow_tf32: bool
    cudnn_allow_tf32: bool
    cudnn_enabled: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    allow_fp16_reduced_precision_reduction: bool
    allow_bf16_reduced_precision_reduction: bool
    allow_fp16_accumulation: bool | None
    flash_sdp: bool
    mem_efficient_sdp: bool
    math_sdp: bool
    cudnn_sdp: bool | None
    math_sdp_fp16_bf16_reduction: bool | None
    deterministic_algorithms: bool
    num_threads: int | None = None
    num_interop_threads: int | None = None
    cpu_affinity: tuple[int, ...] | None = None

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NumericState":
        """A full state from ``as_dict()`` output (e.g. a ledger row); unknown keys are an error."""
        unknown = set(d) - set(_FLAGS)
        if unknown:
            raise UserError(f"unknown numerics flag(s) {', '.join(sorted(unknown))}: valid are {', '.join(_FLAGS)}")
        # JSON has no tuple: an affinity read back from a row is a list.
        return cls(**{name: tuple(d[name]) if isinstance(d.get(name), list) else d.get(name) for name in _FLAGS})

    @classmethod
    def from_registration(cls, mapping: Mapping[str, Any], base: "NumericState | None" = None) -> "NumericState":
        """``base`` (default: the current state) with the registration's [numerics] pinned.

        Unknown names and ill-typed values are a UserError naming the key. allow_tf32 and
        float32_matmul_precision are one torch setting: giving one derives the other,
        giving both inconsistently is an error.
        """
        pinned = _validate(mapping)
        d = (base or capture()).as_dict()
        d.update(pinned)
        if "float32_matmul_precision" in pinned and "allow_tf32" not in pinned:
            d["allow_tf32"] = pinned["float32_matmul_precision"] != "highest"
        elif "allow_tf32" in pinned and "float32_matmul_precision" not in pinned:
            if pinned["allow_tf32"] != (d["float32_matmul_precision"] != "highest"):
                d["float32_matmul_precision"] = "high" if pinned["allow_tf32"] else "highest"
        return cls(**d)


@dataclass(frozen=True)
class NumericPins:
    """A registration's [numerics]: the flags it pins, validated. The state a config runs
    under is these pins over the measuring process's own state (``state()``), taken there."""

    flags: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_registration(cls, mapping: Mapping[str, Any]) -> "NumericPins":
        """Unknown names and ill-typed values are a UserError naming the key."""
        return cls(tuple(_validate(mapping).items()))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.flags)

    def state(self, base: NumericState | None = None) -> NumericState:
        """``base`` (default: this process's current state) with these flags pinned."""
        return NumericState.from_registration(self.as_dict(), base)


def _validate(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and value types of a (partial) [numerics] mapping."""
    if not isinstance(mapping, Mapping):
        raise UserError(f"[numerics] must be a table of flag = value, got {type(mapping).__name__}")
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if key not in _FLAGS:
            raise UserError(f"unknown numerics flag '{key}' in the registration's [numerics]: "
                            f"valid flags are {', '.join(_FLAGS)}")
        if key in CAPTURE_ONLY:
            raise UserError(f"[numerics] {key} cannot be pinned by a registration: it is recorded and checked "
                            f"after every call (a kernel that changes it is never timed); remove it")
        if key == "num_threads":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"[numerics] num_threads = {value!r}: must be a whole number >= 1")
        elif key == "float32_matmul_precision":
            if value not in PRECISIONS:
                raise UserError(f"[numerics] float32_matmul_precision = {value!r}: must be one of "
                                f"{', '.join(repr(p) for p in PRECISIONS)}")
        elif not isinstance(value, bool):
            raise UserError(f"[numerics] {key} = {value!r}: must be true or false")
        out[key] = value
    if "allow_tf32" in out and "float32_matmul_precision" in out:
        if out["allow_tf32"] != (out["float32_matmul_precision"] != "highest"):
            raise UserError(
                f"[numerics] allow_tf32 = {out['allow_tf32']} contradicts float32_matmul_precision = "
                f"{out['float32_matmul_precision']!r} (torch couples them: allow_tf32 means precision != "
                f"'highest'): drop one of the two")
    return out


def _read(name: str) -> Any:
    get = _FLAGS[name][1][0]
    try:
        return get()
    except AttributeError:
        return None  # this torch has no such flag
    except RuntimeError as exc:
        # torch >= 2.9 refuses the legacy getters once the new fp32_precision API was used:
        # record that as a state of its own, so a kernel that switches APIs is still caught.
        return f"unreadable: {str(exc).splitlines()[0]}"


def capture() -> NumericState:
    """The current global numeric state."""
    return NumericState(**{name: _read(name) for name in _FLAGS})


def _set(values: Mapping[str, Any]) -> None:
    for name in _FLAGS:  # _FLAGS order: precision before allow_tf32
        if name not in values or values[name] is None:
            continue
        if _read(name) == values[name]:
            # Already in force: re-setting allow_tf32 would rewrite a 'medium' precision to
            # 'high', and torch's deterministic switch imports torch._inductor on first use
            # (seconds per process).
            continue
        setter = _FLAGS[name][1][1]
        if setter is None:
            # Not settable (interop threads once parallel work ran): `apply` reports it as not
            # taken when asked, and a kernel that moved it is caught by `diff`.
            continue
        try:
            setter(values[name])
        except AttributeError as exc:
            raise UserError(f"this torch has no {_FLAGS[name][0]}: remove '{name}' from [numerics]") from exc


@contextmanager
def apply(state: NumericState | Mapping[str, Any]) -> Iterator[NumericState]:
    """Pin ``state`` (full, or a partial [numerics] mapping) for the block; restore afterwards.

    Yields the state actually in force, after checking torch took every requested value.
    """
    wanted = ({k: v for k, v in state.as_dict().items() if v is not None} if isinstance(state, NumericState)
              else _validate(state))
    before = capture()
    try:
        _set(wanted)
        now = capture()
        wrong = [f"{k}: asked {v!r}, torch reports {getattr(now, k)!r}"
                 for k, v in wanted.items() if getattr(now, k) != v]
        if wrong:
            raise UserError(f"could not pin numerics ({'; '.join(wrong)}): fix the registration's [numerics]")
        yield now
    finally:
        _set({k: v for k, v in before.as_dict().items() if v is not None})


def pin(state: NumericState) -> None:
    """Set ``state`` again (after a call moved it), so the next call runs under the pinned state."""
    _set({k: v for k, v in state.as_dict().items() if v is not None})


def diff(a: NumericState, b: NumericState) -> dict[str, tuple[Any, Any]]:
    """Flags that differ: name -> (value in a, value in b)."""
    return {f.name: (getattr(a, f.name), getattr(b, f.name))
            for f in fields(NumericState) if getattr(a, f.name) != getattr(b, f.name)}


def describe(moved: Mapping[str, tuple[Any, Any]]) -> str:
    """``diff``'s output in words: ``name: before → after`` for each flag moved."""
    return ", ".join(f"{name}: {a} → {b}" for name, (a, b) in moved.items())


FLAG_NAMES = tuple(_FLAGS)

__all__ = ["CAPTURE_ONLY", "FLAG_NAMES", "NumericState", "PRECISIONS", "apply", "capture", "describe", "diff", "pin"]
