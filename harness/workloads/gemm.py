"""``gemm_bias_gelu``: a linear layer and its activation, out = gelu(x · wᵀ + bias).

The fusion ladder's workload (issue 50): unfused it crosses HBM five times (x and w read,
the GEMM's result written, read back for the bias and again for GELU, out written), fused
once. Layout is torch.nn.Linear's, what a kernel engineer porting an MLP up-projection
holds: x (m, k) row-major, w (n, k) row-major (the weight's rows are output features, so
both operands are K-contiguous: the "TN" GEMM cuBLAS prefers), bias (n,), out (m, n).
GELU is an axis: ``exact`` (0.5·z·(1 + erf(z/√2)), torch's default) or ``tanh`` (the
approximation cuBLASLt's epilogue and GPT-2 use). Kernels are ``fn(x, w, bias, out, *, gelu)``.

Tolerances (docs/workloads.md#gemm_bias_gelu-tolerances derives them): a half-precision
output is dominated by its own roundings, not by K; float32's by the K-term fp32 sum.
"""

from __future__ import annotations

import hashlib
import math

from harness.workloads import DTYPES
from harness.workloads.api import Axis, Tensor, Workload, positive

GELU_KINDS = ("exact", "tanh")
# torch.nn.functional.gelu's name for each GELU kind.
TORCH_APPROXIMATE = {"exact": "none", "tanh": "tanh"}
# large_rows: every LARGE_ROW_EVERY-th row of x times LARGE_ROW_SCALE, so its pre-activations
# reach ±80 (the normal draw's are ~N(0, 2)): GELU's tails, where a naive tanh (e^{2u}
# ratios) overflows to NaN and an erf-free approximation's error is largest.
LARGE_ROW_EVERY = 4
LARGE_ROW_SCALE = 16.0
# bias_dominated: every other column's bias times BIAS_SCALE (±~100 at the extremes): the
# output is the bias's GELU there, so a dropped, doubled or transposed bias is gross.
BIAS_SCALE = 32.0
# Boundary shapes the gate also checks: one row (the GEMV of decode), and every dimension a
# prime past the usual tile sizes (16 to 128), so partial M, N and K tiles are all exercised.
BOUNDARY_ROWS = 1
BOUNDARY_SHAPE = (67, 131, 197)
# last_k_slice: the canary drops the last CANARY_K_SLICE terms of every dot product (one
# BLOCK_K tile of a K loop whose tail iteration is skipped).
CANARY_K_SLICE = 32
# FLOPs per output element beyond the GEMM's 2k: the bias add. GELU's transcendental is not
# counted, as attention's exp is not.
EPILOGUE_FLOPS = 1
# float64 temporaries of the reference per output element: x·wᵀ, + bias, gelu.
REFERENCE_OUT_COPIES = 3
# Default tolerances (atol, rtol), derived in docs/workloads.md#gemm_bias_gelu-tolerances.
GEMM_TOLERANCES = {"float16": (1e-2, 1e-2), "bfloat16": (8e-2, 6e-2), "float32": (1e-4, 1e-4)}
# Rows of x (and out) the canaries are judged on: out's rows are independent, so a canary on
# CANARY_ROWS rows at the point's n and k is that canary on those rows of the whole point.
CANARY_ROWS = 64


def _seed(cfg, seed: int, family: str) -> int:
    """The draw's seed: (seed, family, shape), not the dtype or GELU kind, so every dtype and
    both GELUs round one float32 draw."""
    text = f"gemm_bias_gelu|{seed}|{family}|{cfg.m}|{cfg.n}|{cfg.k}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def gelu64(z, kind: str):
    """GELU of a float64 tensor: the exact erf form or the tanh approximation."""
    import torch

    return torch.nn.functional.gelu(z, approximate=TORCH_APPROXIMATE[kind])


class GemmBiasGelu(Workload):
    """out (m, n) = gelu(x (m, k) · w (n, k)ᵀ + bias (n,)), one dtype; ``fn(x, w, bias, out, *, gelu)``."""

    name = "gemm_bias_gelu"
    description = "linear layer + GELU: out = gelu(x·wᵀ + bias), x (m,k), w (n,k) as nn.Linear's weight"
    axes = (
        Axis("m", int, check=positive, description="rows of x and out (tokens)"),
        Axis("n", int, check=positive, description="output features: rows of w, columns of out"),
        Axis("k", int, check=positive, description="input features: the reduction"),
        Axis("dtype", str, choices=DTYPES),
        Axis("gelu", str, choices=GELU_KINDS, description="exact (erf) or tanh approximation"),
    )
    size_axis = "m"
    # A sweep of M at a fixed 1024 × 1024 weight: small enough for a CPU, to be widened to the
    # seeds' 4096 × 4096 × 4096 on a GPU.
    example_grid = {"m": [256, 1024], "n": [1024], "k": [1024], "dtype": ["float16"], "gelu": ["exact"]}
    families = {
        "normal": "x standard normal, w normal with variance 1/k (pre-activations ~N(0, 2)), bias standard normal",
        "large_rows": f"as normal, every {LARGE_ROW_EVERY}th row of x times {LARGE_ROW_SCALE:g}: GELU's tails",
        "bias_dominated": f"as normal, every other column's bias times {BIAS_SCALE:g}: the bias decides the output",
    }
    default_families = ("normal", "large_rows", "bias_dominated")
    canaries = {
        "bias_dropped": "the bias never added",
        "bias_twice": "the bias added twice",
        "last_k_slice": f"the last {CANARY_K_SLICE} terms of every dot product dropped (a K loop's tail tile)",
        "gelu_swapped": "the other GELU (tanh for exact, exact for tanh): seen in float32 only",
    }
    tolerances = GEMM_TOLERANCES
    output_bound = "gelu(z) lies between min(z, 0) - 0.17 and max(z, 0): |out| <= |x·wᵀ + bias|"

    def inputs(self, cfg) -> tuple[Tensor, ...]:
        return (Tensor("x", lambda c: (c.m, c.k)), Tensor("w", lambda c: (c.n, c.k)),
                Tensor("bias", lambda c: (c.n,)))

    def outputs(self, cfg) -> tuple[Tensor, ...]:
        return (Tensor("out", lambda c: (c.m, c.n)),)

    def make_inputs(self, cfg, seed: int, family: str = "normal", device: str = "cpu") -> tuple:
        import torch

        gen = torch.Generator().manual_seed(_seed(cfg, seed, family))
        x = torch.randn(cfg.m, cfg.k, generator=gen)  # float32, rounded once to the dtype
        w = torch.randn(cfg.n, cfg.k, generator=gen) / math.sqrt(cfg.k)
        bias = torch.randn(cfg.n, generator=gen)
        if family == "large_rows":
            x[::LARGE_ROW_EVERY] *= LARGE_ROW_SCALE
        elif family == "bias_dominated":
            bias[::2] *= BIAS_SCALE
        dt = getattr(torch, cfg.dtype)
        return tuple(t.to(dt).to(device) for t in (x, w, bias))

    def boundary_configs(self, cfg) -> list:
        m, n, k = BOUNDARY_SHAPE
        shapes = [cfg.replace(m=BOUNDARY_ROWS), cfg.replace(m=m, n=n, k=k)]
        return [c for c in dict.fromkeys(shapes) if c != cfg]

    def reference(self, cfg, inputs) -> tuple:
        import torch

        x, w, bias = (t.to(torch.float64) for t in inputs)
        return (gelu64(torch.addmm(bias, x, w.t()), cfg.gelu),)

    def call_kwargs(self, cfg) -> dict:
        return {"gelu": cfg.gelu}

    # -- the bare op: the GEMM alone, what a fused epilogue should cost no more than -------------
    bare_name = "torch.matmul(x, w.t(), out=c)"

    def bare_outputs(self, cfg) -> tuple[Tensor, ...]:
        return (Tensor("c", lambda c: (c.m, c.n)),)

    def bare_op(self, cfg, inputs, outputs) -> None:
        """x · wᵀ into c (cuBLAS on CUDA): reads x and w, writes c once; no bias, no GELU."""
        import torch

        x, w, _bias = inputs
        (c,) = outputs
        torch.matmul(x, w.t(), out=c)

    def bare_reference(self, cfg, inputs) -> tuple:
        import torch

        x, w, _bias = (t.to(torch.float64) for t in inputs)
        return (x @ w.t(),)

    def flops(self, cfg) -> float:
        """2·m·n·k for the GEMM's multiply-adds, plus the bias add per output element."""
        return 2.0 * cfg.m * cfg.n * cfg.k + EPILOGUE_FLOPS * cfg.m * cfg.n

    def reference_bytes(self, cfg) -> int:
        """float64 copies of x, w and bias, and REFERENCE_OUT_COPIES float64 (m, n) temporaries."""
        return 8 * (cfg.m * cfg.k + cfg.n * cfg.k + cfg.n + REFERENCE_OUT_COPIES * cfg.m * cfg.n)

    # -- canaries ---------------------------------------------------------------------------
    def check_canaries(self, configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list:
        """The canaries at each point with m cut to CANARY_ROWS (n and k as registered: the K
        canary's size depends on k), so a 16384-row point is not referenced in float64 whole."""
        cut = list(dict.fromkeys(c.replace(m=min(c.m, CANARY_ROWS)) for c in configs))
        return super().check_canaries(cut, atol=atol, rtol=rtol, seed=seed, families=families, names=names)

    def canary_subset(self, seed: int) -> str:
        return f"at most {CANARY_ROWS} rows of the smallest and largest point of each dtype, seed {seed}"

    def canary_applies(self, name: str, cfg) -> bool:
        # The two GELUs differ by at most ~5e-4 (at |z| near 2), below a half-precision
        # output's own rounding error once the tolerance covers the baseline's three
        # roundings: no float16 or bfloat16 tolerance a baseline can pass sees the swap
        # (docs/workloads.md#gemm_bias_gelu-tolerances).
        if name == "gelu_swapped":
            return cfg.dtype == "float32"
        if name == "last_k_slice":
            return cfg.k > 1
        return name in self.canaries

    def canary(self, name: str, cfg, inputs) -> tuple | None:
        import torch

        x, w, bias = inputs
        if name == "bias_dropped":
            return (gelu64(x @ w.t(), cfg.gelu),)
        if name == "bias_twice":
            return (gelu64(torch.addmm(2 * bias, x, w.t()), cfg.gelu),)
        if name == "last_k_slice":
            if cfg.k < 2:
                return None
            kept = cfg.k - min(CANARY_K_SLICE, cfg.k - 1)
            return (gelu64(torch.addmm(bias, x[:, :kept], w[:, :kept].t()), cfg.gelu),)
        if name == "gelu_swapped":
            other = next(g for g in GELU_KINDS if g != cfg.gelu)
            return (gelu64(torch.addmm(bias, x, w.t()), other),)
        return None


GEMM_BIAS_GELU = GemmBiasGelu()
