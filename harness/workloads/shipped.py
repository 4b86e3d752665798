"""bench's own workloads, attention and decode, as workload objects (docs/workloads.md).

Both delegate to the code that always implemented them: ``Config`` (their grid point, whose
key the existing ledgers hold), ``workloads.formulas``, ``workloads.inputs``,
``measurement.reference``, ``measurement.canaries`` and ``measurement.feasible``. bench's
own ``bench.workloads`` entry points (pyproject.toml) name the two objects below.
"""

from __future__ import annotations

import itertools

from harness.errors import UserError
from harness.workloads import DTYPES, Config, formulas
from harness.workloads import inputs as attention_inputs
from harness.workloads.api import Axis, Tensor, Workload, positive
from harness.measurement import canaries, feasible
from harness.measurement.correctness.figures import DEFAULT_TOLERANCES
from harness.measurement.reference import reference, reference_bytes

# [grid] may give the size as `tokens` instead of `batch`: each config's batch is tokens / seq_len.
TOKENS_KEY = "tokens"
# The output's dimensions, as the gate's "exactly constant along the ... axis" names them.
OUT_DIMS = ("batch", "head", "query row", "head_dim")


class AttentionWorkload(Workload):
    """Attention: q (batch, heads, q_len, head_dim), k and v (batch, kv_heads, seq_len,
    head_dim), out like q; ``fn(q, k, v, out, *, causal, scale)``."""

    name = "attention"
    description = "prefill attention: softmax(q·kᵀ·scale [causal]) · v, grouped-query when kv_heads < heads"
    axes = (
        Axis("batch", int, check=positive, description="sequences"),
        Axis("heads", int, check=positive, description="query heads"),
        Axis("kv_heads", int, check=positive, description="key/value heads (default: heads)"),
        Axis("seq_len", int, check=positive, description="tokens per sequence (keys; queries too in prefill)"),
        Axis("head_dim", int, check=positive),
        Axis("dtype", str, choices=DTYPES),
        Axis("causal", bool, description="bottom-right aligned causal mask"),
    )
    size_axis = "seq_len"
    # A fused-attention prefill sweep, to be widened once the line works.
    example_grid = {"batch": [1], "heads": [16], "kv_heads": [16], "seq_len": [1024, 4096], "head_dim": [128],
                    "dtype": ["float16"], "causal": [False, True]}
    families = attention_inputs.FAMILIES
    default_families = attention_inputs.DEFAULT_FAMILIES
    canaries = canaries.CANARIES
    tolerances = DEFAULT_TOLERANCES
    output_bound = "a convex combination of V rows: |out| <= max|V|"

    @property
    def grid_keys(self) -> set[str]:
        return {*self.axis_names, TOKENS_KEY}

    def check_point(self, values: dict) -> str | None:
        h, kv = values["heads"], values["kv_heads"]
        if kv > h or h % kv:
            return f"heads {h} is not a multiple of kv_heads {kv}: each kv head must serve a whole group of query heads"
        return None

    def make_config(self, values: dict) -> Config:
        return Config(self.name, **values)

    def expand_grid(self, grid: dict) -> tuple[list, dict]:
        """Attention's [grid]: ``batch`` or ``tokens``, kv_heads defaulting to heads, causal to false."""
        undeclared = sorted(set(grid) - self.grid_keys)
        if undeclared:
            raise UserError(f"[grid] {', '.join(undeclared)}: not an axis of workload '{self.name}' (its axes: "
                            f"{', '.join(sorted(self.grid_keys))}) — drop it or register another workload")
        if ("batch" in grid) == (TOKENS_KEY in grid):
            raise UserError("[grid] needs 'batch' or 'tokens' (batch = tokens / seq_len at each seq_len), not "
                            + ("both" if "batch" in grid else "neither"))
        for key in ("heads", "seq_len", "head_dim", "dtype"):
            if key not in grid:
                raise UserError(f"[grid] needs '{key}'")
        axis = {a.name: a for a in self.axes}
        size = "batch" if "batch" in grid else TOKENS_KEY
        sizes = Axis(size, int, check=positive).values(grid[size])
        heads = axis["heads"].values(grid["heads"])
        kv_heads = axis["kv_heads"].values(grid["kv_heads"]) if "kv_heads" in grid else None
        seq_lens, head_dims, dtypes = (axis[k].values(grid[k]) for k in ("seq_len", "head_dim", "dtype"))
        causal = axis["causal"].values(grid.get("causal", [False]))
        why = self.check_causal(causal)
        if why:
            raise UserError(f"[grid] {why}")
        configs = []
        for b, h, kv, n, d, dt, c in itertools.product(sizes, heads, kv_heads or [None], seq_lens, head_dims,
                                                       dtypes, causal):
            if size == TOKENS_KEY:
                if b % n:
                    raise UserError(f"[grid] tokens {b} is not a multiple of seq_len {n}: each config's batch is "
                                    f"tokens / seq_len — give seq_len values that divide it")
                b //= n
            kv = h if kv is None else kv
            why = self.check_point({"heads": h, "kv_heads": kv})
            if why:
                raise UserError(f"[grid] {why}")
            configs.append(Config(self.name, b, h, kv, n, d, dt, c))
        # The grid as the ledger's registered row shows it, in [grid]'s order.
        table = {size: sizes, "heads": heads, "kv_heads": kv_heads or "= heads", "seq_len": seq_lens,
                 "head_dim": head_dims, "dtype": dtypes, "causal": causal}
        return configs, table

    def check_causal(self, values) -> str | None:
        """Why these causal settings mean nothing for this workload, or None."""
        return None

    def from_row(self, config: dict) -> Config:
        return Config(**config)

    # -- tensors, draws and the reference ---------------------------------------------------
    def inputs(self, cfg) -> tuple[Tensor, ...]:
        return (Tensor("q", lambda c: c.shapes()[0]), Tensor("k", lambda c: c.shapes()[1]),
                Tensor("v", lambda c: c.shapes()[1]))

    def outputs(self, cfg) -> tuple[Tensor, ...]:
        return (Tensor("out", lambda c: c.shapes()[2], dims=OUT_DIMS),)

    def make_inputs(self, cfg, seed: int, family: str = "normal", device: str = "cpu") -> tuple:
        return attention_inputs.make_inputs(cfg, seed, family, device)

    def fill_inputs(self, cfg, inputs, seed: int, family: str = "normal") -> None:
        q, k, v = inputs
        attention_inputs.fill_inputs_(q, k, v, cfg, seed, family)

    def generation_bytes(self, cfg, device: str = "cpu") -> int:
        return attention_inputs.generation_bytes(cfg, device)

    def boundary_configs(self, cfg) -> list:
        return attention_inputs.boundary_configs(cfg)

    def reference(self, cfg, inputs) -> tuple:
        q, k, v = inputs
        return (reference(q, k, v, causal=cfg.causal, scale=cfg.scale),)

    def call_kwargs(self, cfg) -> dict:
        return {"causal": cfg.causal, "scale": cfg.scale}

    # -- work and memory ---------------------------------------------------------------------
    def flops(self, cfg) -> float:
        return formulas.flops(cfg)

    def min_read_bytes(self, cfg) -> float:
        return formulas.min_read_bytes(cfg)

    def min_bytes(self, cfg) -> float:
        return formulas.min_bytes(cfg)

    def kv_bytes(self, cfg) -> float:
        return formulas.kv_bytes(cfg)

    def reference_bytes(self, cfg) -> int:
        return reference_bytes(cfg)

    # -- the tolerance: its floor and its power ------------------------------------------------
    def input_elems(self, cfg) -> int:
        return feasible.input_elems(cfg)

    def floor_configs(self, point, baseline) -> tuple[list, str | None]:
        case, why = feasible.gate_config(point, baseline)
        return ([case] if case is not None else []), why

    def floor_references(self, cfg, seed: int, family: str, drawn: dict) -> tuple:
        return feasible.attention_references(cfg, seed, family, drawn)

    def check_canaries(self, configs, *, atol: dict, rtol: dict, seed: int, families, names=None) -> list:
        return canaries.check(configs, atol=atol, rtol=rtol, seed=seed, families=families, names=names)

    def downgrade_names(self, dtypes) -> tuple[str, ...]:
        return canaries.downgrade_names(dtypes)

    def downgrades(self, checks) -> dict:
        return canaries.downgrades(checks)

    def canary_subset(self, seed: int) -> str:
        return f"batch 1, one KV head, seed {seed}, up to {canaries.CANARY_ROWS} query rows per view"


class DecodeWorkload(AttentionWorkload):
    """Decode: one query token per sequence against a KV cache of ``seq_len`` tokens."""

    name = "decode"
    description = "decode attention: one query token per sequence against a KV cache of seq_len tokens"
    size_axis = "seq_len"
    # A decode step over a long cache.
    example_grid = {"batch": [16], "heads": [32], "kv_heads": [8], "seq_len": [8192, 32768], "head_dim": [128],
                    "dtype": ["float16"], "causal": [False]}

    def check_causal(self, values) -> str | None:
        if True in values:
            return "causal = true has no meaning for decode (one query attends to the whole cache)"
        return None


ATTENTION = AttentionWorkload()
DECODE = DecodeWorkload()
