"""The checks every decode kernel makes on its call, in one place.

A kernel is called only for configs its ``supports`` accepted, so these fire when a kernel
is called directly (tests, explorations, a serving loop); each names the kernel and the
fix, as a UserError.
"""

from __future__ import annotations

from harness.errors import UserError


def decode_dims(kernel: str, q, k, v, out, *, head_dims=None, max_group=None, dtypes=None,
                contiguous: bool = True) -> tuple[int, int, int, int, int]:
    """(B, H, Hkv, L, D) of a decode call: one query token, H a multiple of Hkv, and where
    given, a head_dim in ``head_dims``, at most ``max_group`` query heads per kv head, a
    dtype in ``dtypes`` and contiguous q, k, v, out."""
    b, h, nq, d = q.shape
    hkv, seq_len = k.shape[1], k.shape[2]
    if nq != 1:
        raise UserError(f"{kernel} is a decode kernel: one query token, not {nq}")
    if head_dims is not None and d not in head_dims:
        raise UserError(f"{kernel} supports head_dim {'/'.join(map(str, head_dims))}, not {d}")
    if h % hkv:
        raise UserError(f"heads {h} is not a multiple of kv_heads {hkv}")
    if max_group is not None and h // hkv > max_group:
        raise UserError(f"{kernel}: group (heads / kv_heads) {h // hkv} > {max_group}")
    dtype = str(q.dtype).removeprefix("torch.")
    if dtypes is not None and dtype not in dtypes:
        raise UserError(f"{kernel} supports {'/'.join(dtypes)}, not {dtype}")
    if contiguous:
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            if not t.is_contiguous():
                raise UserError(f"{kernel} needs contiguous tensors; {name} is not")
    return b, h, hkv, seq_len, d
