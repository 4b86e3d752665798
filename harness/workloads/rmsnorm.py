"""``rmsnorm``: root-mean-square normalisation of each row, optionally after a residual add.

out = s / sqrt(mean(s²) + eps) · weight, per row of s (tokens, hidden), eps RMSNORM_EPS
(LLaMA's). With ``residual = true`` it is the fused add-RMSNorm of a transformer block
(vLLM's fused_add_rms_norm, TensorRT-LLM's): s = x + residual, and the kernel writes two
outputs, out and the updated residual s (what the next block adds to), so the call is
``fn(x, weight, residual, out, residual_out, *, eps)``; without, ``fn(x, weight, out, *, eps)``.
The harness's destination passing allocates ``residual_out`` instead of updating
``residual`` in place, as those kernels do: a kernel must not write its inputs.

The reference normalises the exact float64 sum; a kernel that normalises the sum rounded to
the dtype (as vLLM's does) is within half a unit of it per element, inside the tolerance.
RMSNorm is memory-bound (4 FLOPs per element against 2 to 4 bytes each way): its bar is
bandwidth against the copy ceiling.
"""

from __future__ import annotations

import hashlib

from harness.workloads import DTYPES
from harness.workloads.api import Axis, Tensor, Workload, positive

# Added to the mean square before the square root: LLaMA's and most checkpoints' value.
RMSNORM_EPS = 1e-6
# weight ~ WEIGHT_MEAN + WEIGHT_SPREAD·N(0, 1): trained norm weights sit near 1, and a spread
# makes a dropped weight visible.
WEIGHT_MEAN = 1.0
WEIGHT_SPREAD = 0.5
# large_rows: every LARGE_ROW_EVERY-th row times LARGE_ROW_SCALE: its squares (to ~1.6e7)
# overflow float16 (max 65504), so a kernel that squares in the dtype writes inf or 0.
LARGE_ROW_EVERY = 4
LARGE_ROW_SCALE = 1024.0
# tiny_rows: every TINY_ROW_EVERY-th row times TINY_ROW_SCALE: its mean square (~1e-6) is
# eps's size, so eps dropped or added outside the square root is gross there.
TINY_ROW_EVERY = 4
TINY_ROW_SCALE = 2.0 ** -10
# outlier_channel: column OUTLIER_COLUMN (mod hidden) times OUTLIER_SCALE: the "massive
# activation" channel of LLMs, which dominates every row's mean square.
OUTLIER_COLUMN = 7
OUTLIER_SCALE = 256.0
# Boundary shapes the gate also checks: one token, and a row width that is no power of two
# and no multiple of any block (a partial last block).
BOUNDARY_TOKENS = 1
BOUNDARY_SHAPE = (5, 67)
# FLOPs per element: square and add (the mean square), scale by the reciprocal root, times
# the weight; the residual add is one more.
FLOPS_PER_ELEM = 4
RESIDUAL_FLOPS_PER_ELEM = 1
# float64 temporaries of the reference per element: s, s², the normalised row, out.
REFERENCE_COPIES = 4
# Default tolerances (atol, rtol), derived in docs/workloads.md#rmsnorm-tolerances: about
# four half-ULPs of the dtype relative, for a baseline that rounds twice (the normalised row,
# then the weight product, as Hugging Face's LlamaRMSNorm does).
# Rows the canaries are judged on: rows are independent, so a canary on CANARY_TOKENS rows at
# the point's hidden is that canary on those rows of the whole point.
CANARY_TOKENS = 64
RMSNORM_TOLERANCES = {"float16": (1e-3, 4e-3), "bfloat16": (8e-3, 3e-2), "float32": (1e-5, 1e-5)}


def _seed(cfg, seed: int, family: str) -> int:
    """The draw's seed: (seed, family, shape), not the dtype nor the residual flag, so every
    dtype rounds one float32 draw and x is the same with or without a residual."""
    text = f"rmsnorm|{seed}|{family}|{cfg.tokens}|{cfg.hidden}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def rmsnorm64(s, weight, eps: float = RMSNORM_EPS, *, inside: bool = True):
    """RMSNorm of float64 rows ``s``: eps inside the square root, or (a canary) after it."""
    import torch

    ms = s.pow(2).mean(-1, keepdim=True)
    return s / (torch.sqrt(ms + eps) if inside else torch.sqrt(ms) + eps) * weight


class RMSNorm(Workload):
    """out = rmsnorm(x [+ residual]) · weight per row; with a residual also residual_out = x + residual."""

    name = "rmsnorm"
    description = "RMSNorm of each row (eps 1e-6), optionally fused with the residual add (two outputs)"
    axes = (
        Axis("tokens", int, check=positive, description="rows"),
        Axis("hidden", int, check=positive, description="row width"),
        Axis("dtype", str, choices=DTYPES),
        Axis("residual", bool, description="fused add-RMSNorm: s = x + residual, residual_out = s"),
    )
    size_axis = "tokens"
    # A sweep of tokens at a 4096-wide row (a residual line's two outputs are refused at register
    # until the gate judges several outputs per call).
    example_grid = {"tokens": [1024, 4096], "hidden": [4096], "dtype": ["float16"], "residual": [False]}
    families = {
        "normal": f"x (and residual) standard normal, weight {WEIGHT_MEAN:g} + {WEIGHT_SPREAD:g}·N(0, 1)",
        "large_rows": f"as normal, every {LARGE_ROW_EVERY}th row times {LARGE_ROW_SCALE:g}: squares overflow float16",
        "tiny_rows": f"as normal, every {TINY_ROW_EVERY}th row times 2^-10: mean square ~ eps",
        "outlier_channel": f"as normal, column {OUTLIER_COLUMN} (mod hidden) times {OUTLIER_SCALE:g}",
    }
    default_families = ("normal", "large_rows", "tiny_rows", "outlier_channel")
    canaries = {
        "eps_dropped": "no eps under the square root",
        "eps_outside_sqrt": "eps added after the square root: s / (sqrt(mean s²) + eps)",
        "weight_dropped": "the weight never multiplied",
        "residual_not_added": "x normalised without the residual (residual lines only)",
        "residual_out_stale": "residual_out left as the old residual (residual lines only)",
    }
    tolerances = RMSNORM_TOLERANCES
    output_bound = "|out| <= sqrt(hidden)·|weight|: no element exceeds the row's root mean square times sqrt(hidden)"

    def inputs(self, cfg) -> tuple[Tensor, ...]:
        rows = Tensor("x", lambda c: (c.tokens, c.hidden))
        weight = Tensor("weight", lambda c: (c.hidden,))
        return (rows, weight, Tensor("residual", lambda c: (c.tokens, c.hidden))) if cfg.residual else (rows, weight)

    def outputs(self, cfg) -> tuple[Tensor, ...]:
        out = Tensor("out", lambda c: (c.tokens, c.hidden))
        return (out, Tensor("residual_out", lambda c: (c.tokens, c.hidden))) if cfg.residual else (out,)

    def make_inputs(self, cfg, seed: int, family: str = "normal", device: str = "cpu") -> tuple:
        import torch

        gen = torch.Generator().manual_seed(_seed(cfg, seed, family))
        x = torch.randn(cfg.tokens, cfg.hidden, generator=gen)  # float32, rounded once to the dtype
        weight = WEIGHT_MEAN + WEIGHT_SPREAD * torch.randn(cfg.hidden, generator=gen)
        residual = torch.randn(cfg.tokens, cfg.hidden, generator=gen)
        for t in (x, residual):
            if family == "large_rows":
                t[::LARGE_ROW_EVERY] *= LARGE_ROW_SCALE
            elif family == "tiny_rows":
                t[::TINY_ROW_EVERY] *= TINY_ROW_SCALE
            elif family == "outlier_channel":
                t[:, OUTLIER_COLUMN % cfg.hidden] *= OUTLIER_SCALE
        dt = getattr(torch, cfg.dtype)
        drawn = (x, weight, residual) if cfg.residual else (x, weight)
        return tuple(t.to(dt).to(device) for t in drawn)

    def boundary_configs(self, cfg) -> list:
        tokens, hidden = BOUNDARY_SHAPE
        shapes = [cfg.replace(tokens=BOUNDARY_TOKENS), cfg.replace(tokens=tokens, hidden=hidden)]
        return [c for c in dict.fromkeys(shapes) if c != cfg]

    def reference(self, cfg, inputs) -> tuple:
        import torch

        x, weight, *rest = (t.to(torch.float64) for t in inputs)
        s = x + rest[0] if cfg.residual else x
        out = rmsnorm64(s, weight)
        return (out, s) if cfg.residual else (out,)

    def call_kwargs(self, cfg) -> dict:
        return {"eps": RMSNORM_EPS}

    # -- the bare op: the rows' own traffic, what a memory-bound norm should cost no more than ----
    # Each (tokens, hidden) input read once and each output written once, by copies: x into
    # out, and with a residual also residual into residual_out (two copies, not x + residual: an
    # add then a copy would read s twice). The weight (hidden elements) is left out: it is L2's.
    bare_name = "out.copy_(x) [; residual_out.copy_(residual)]"

    def bare_outputs(self, cfg) -> tuple[Tensor, ...]:
        return self.outputs(cfg)

    def bare_op(self, cfg, inputs, outputs) -> None:
        x, _weight, *rest = inputs
        outputs[0].copy_(x)
        if cfg.residual:
            outputs[1].copy_(rest[0])

    def bare_reference(self, cfg, inputs) -> tuple:
        import torch

        x, _weight, *rest = (t.to(torch.float64) for t in inputs)
        return (x, rest[0]) if cfg.residual else (x,)

    def flops(self, cfg) -> float:
        per = FLOPS_PER_ELEM + (RESIDUAL_FLOPS_PER_ELEM if cfg.residual else 0)
        return float(per * cfg.tokens * cfg.hidden)

    def reference_bytes(self, cfg) -> int:
        """float64 copies of the inputs and outputs, and REFERENCE_COPIES row-sized temporaries."""
        elems = cfg.tokens * cfg.hidden
        return 8 * (elems * ((2 if cfg.residual else 1) + REFERENCE_COPIES) + cfg.hidden)

    # -- canaries ---------------------------------------------------------------------------
    def check_canaries(self, configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list:
        """The canaries at each point with tokens cut to CANARY_TOKENS (hidden as registered)."""
        cut = list(dict.fromkeys(c.replace(tokens=min(c.tokens, CANARY_TOKENS)) for c in configs))
        return super().check_canaries(cut, atol=atol, rtol=rtol, seed=seed, families=families, names=names)

    def canary_subset(self, seed: int) -> str:
        return f"at most {CANARY_TOKENS} rows of the smallest and largest point of each dtype, seed {seed}"

    def canary_applies(self, name: str, cfg) -> bool:
        if name.startswith("residual_"):
            return cfg.residual
        return name in self.canaries

    def canary(self, name: str, cfg, inputs) -> tuple | None:
        x, weight, *rest = inputs
        s = x + rest[0] if cfg.residual else x
        if name == "eps_dropped":
            out = rmsnorm64(s, weight, 0.0)
        elif name == "eps_outside_sqrt":
            out = rmsnorm64(s, weight, inside=False)
        elif name == "weight_dropped":
            out = rmsnorm64(s, 1.0)
        elif name == "residual_not_added" and cfg.residual:
            out = rmsnorm64(x, weight)
        elif name == "residual_out_stale" and cfg.residual:
            return (rmsnorm64(s, weight), rest[0])
        else:
            return None
        return (out, s) if cfg.residual else (out,)


RMSNORM = RMSNorm()
