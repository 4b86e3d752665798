"""The attention hook a model step calls, so the harness chooses the kernel behind it.

A line's ``[integration] step = "module:function"`` names a *step factory*::

    def step(device: str, dtype: "torch.dtype") -> Callable[[], torch.Tensor]

It builds its model and inputs once (seeded: two calls build the same model), on ``device``
in ``dtype``, and returns a function that runs one step and returns its output. Every
attention of the model goes through ``attention(q, k, v, causal=..., scale=...)`` below
(q (B, H, N, D), k and v (B, Hkv, N, D), as a kernel takes them). The harness runs the step
inside ``use_kernel(fn)``, fn a registered kernel's ``fn(q, k, v, out, *, causal, scale)``;
outside any ``use_kernel`` the hook computes plain softmax attention, so the model runs on
its own too. ``use_kernel(fn, timer=CallTimer(device))`` also times each call at the hook
(commands/integration.py: the probe → in-situ factor).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable
from harness.measurement.timing.timers import CudaEventTimer, HostTimer
from harness.measurement.reference import reference
from harness.errors import UserError

_active: list = []  # (kernel fn, CallTimer or None); the innermost use_kernel is the last


@dataclass
class CallTimer:
    """Time of each hook call and the shape each call had. On CUDA it is the harness's own
    kernel timer (timing.timers.CudaEventTimer: the stream held while the host enqueues the
    call, CUDA events around it), so a call's in-situ time is device time as the step's and
    the probe's are; a host timer with the device synchronized around each call read the
    launch and synchronize latency of a small step's calls as attention (a measured op share
    of 2.8 of the step on the H200). On the CPU: the kernel arms' host timer (timing.timers.HostTimer)."""

    device: str
    ms: list[float] = field(default_factory=list)
    shapes: list[tuple] = field(default_factory=list)
    _timer: object = field(default=None, repr=False)

    @property
    def what(self) -> str:
        """The timer, in words, for the row that records its times."""
        return ("CUDA events around each call, the stream held while the host enqueues it"
                if self.device.startswith("cuda") else "host perf_counter_ns")

    def time(self, fn: Callable[[], None], shape: tuple) -> None:
        """Run ``fn`` (one hook call) and record its time and shape."""
        if self._timer is None:
            self._timer = CudaEventTimer(self.device) if self.device.startswith("cuda") else HostTimer()
        self.ms.append(self._timer.time_call(fn, arm="hook"))
        self.shapes.append(shape)


@contextlib.contextmanager
def use_kernel(fn: Callable, *, timer: CallTimer | None = None):
    """Route the hook's calls to kernel ``fn`` (destination-passing) while the block runs."""
    _active.append((fn, timer))
    try:
        yield
    finally:
        _active.pop()


def plain_attention(q, k, v, out, *, causal: bool, scale: float) -> None:
    """softmax(q·kᵀ·scale [+ bottom-right causal mask]) · v in q's dtype, grouped heads
    repeated: the hook's attention outside ``use_kernel``."""
    import torch

    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq).logical_not()
        s = s.masked_fill(mask, float("-inf"))
    out.copy_(torch.matmul(torch.softmax(s, dim=-1), v))


def reference_attention(q, k, v, out, *, causal: bool, scale: float) -> None:
    """The harness's float64 reference attention (measurement/reference.py) as a kernel: the
    step run in float64 through it is what the step's output is checked against."""
    out.copy_(reference(q, k, v, causal=causal, scale=scale))


def attention(q, k, v, *, causal: bool = False, scale: float | None = None):
    """Attention of q (B, H, N, D) over k, v (B, Hkv, Nk, D) by the kernel the harness chose."""
    import torch

    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    fn, timer = _active[-1] if _active else (plain_attention, None)
    out = torch.empty_like(q)
    if timer is None:
        fn(q, k, v, out, causal=causal, scale=scale)
    else:
        shape = (*q.shape, k.shape[1], str(q.dtype).removeprefix("torch."), bool(causal))
        timer.time(lambda: fn(q, k, v, out, causal=causal, scale=scale), shape)
    return out


def load_step(ref: str) -> Callable:
    """The step factory ``module:function`` names (imported from the repository or the
    installed packages); a UserError naming the fix when it is not there."""
    import importlib

    module, _, name = ref.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise UserError(f"[integration] step {ref!r}: cannot import {module} ({exc}): commit the module in the "
                        f"repository, or fix the name") from exc
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise UserError(f"[integration] step {ref!r}: {module} has no function {name}: fix the name")
    return fn
