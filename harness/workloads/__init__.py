"""Workloads: what a config is, how much work it is, and its inputs.

The workload API (api.py: ``Workload``, its axes and tensors) is what every workload declares;
bench's own two (shipped.py) are these, their code here and in measurement/:
``attention``: prefill-style attention, q/k/v of shape (batch, heads, seq_len, head_dim),
k/v with ``kv_heads`` heads (grouped-query attention when kv_heads < heads).
``decode``: one query token per sequence against a KV cache of ``seq_len`` tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

DTYPES = ("float16", "bfloat16", "float32")
# The workloads whose grid point is a ``Config`` (shipped.py): their rows' config dicts load as one.
SHIPPED_WORKLOADS = ("attention", "decode")
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def dtype_name(dtype) -> str:
    """The dtype's name as the tables key it: "float16" for torch.float16 or for "float16"."""
    return str(dtype).replace("torch.", "")


def with_dtype(cfg, dtype: str):
    """``cfg`` at another dtype: a plugin workload's GridPoint (its ``replace``) or a Config."""
    return cfg.replace(dtype=dtype) if hasattr(cfg, "replace") else replace(cfg, dtype=dtype)


@dataclass(frozen=True)
class Config:
    """One point of a registered shape grid."""

    workload: str
    batch: int
    heads: int
    kv_heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool

    @property
    def q_len(self) -> int:
        """Query tokens per sequence: seq_len for attention, 1 for decode."""
        return 1 if self.workload == "decode" else self.seq_len

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def scale(self) -> float:
        return self.head_dim ** -0.5

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def key(self) -> str:
        """Stable id of this config, used for resume and for joining rows."""
        return (f"{self.workload}/b{self.batch}/h{self.heads}/kv{self.kv_heads}/n{self.seq_len}"
                f"/d{self.head_dim}/{self.dtype}/{'causal' if self.causal else 'full'}")

    def as_dict(self) -> dict:
        return asdict(self)

    def axes(self) -> dict:
        """The workload's axes and their values here (``harness.workloads.api``): every field but the workload."""
        return {k: v for k, v in asdict(self).items() if k != "workload"}

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(q/out shape, k/v shape, ...) in the (batch, heads, tokens, head_dim) layout."""
        qs = (self.batch, self.heads, self.q_len, self.head_dim)
        ks = (self.batch, self.kv_heads, self.seq_len, self.head_dim)
        return qs, ks, qs
