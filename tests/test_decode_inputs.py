"""kernels/_decode_inputs.decode_dims: the call checks every decode kernel shares (CPU)."""

from __future__ import annotations

import pytest

from bench_kernels._decode_inputs import decode_dims
from harness.errors import UserError

torch = pytest.importorskip("torch")


def _call(b=2, h=8, hkv=2, nq=1, n=37, d=64, dtype=torch.float16):
    q = torch.zeros(b, h, nq, d, dtype=dtype)
    k = torch.zeros(b, hkv, n, d, dtype=dtype)
    return q, k, torch.zeros_like(k), torch.zeros_like(q)


def test_dims_of_a_good_call():
    assert decode_dims("kern", *_call(), head_dims=(64, 128), max_group=4, dtypes=("float16",)) == (2, 8, 2, 37, 64)


@pytest.mark.parametrize("call, limits, message", [
    (dict(nq=2), {}, "kern is a decode kernel: one query token, not 2"),
    (dict(d=96), dict(head_dims=(64, 128)), "kern supports head_dim 64/128, not 96"),
    (dict(h=6, hkv=4), {}, "heads 6 is not a multiple of kv_heads 4"),
    (dict(h=16, hkv=2), dict(max_group=4), "kern: group (heads / kv_heads) 8 > 4"),
    (dict(dtype=torch.float32), dict(dtypes=("float16", "bfloat16")), "kern supports float16/bfloat16, not float32"),
])
def test_each_refusal_names_the_kernel_and_the_limit(call, limits, message):
    with pytest.raises(UserError) as info:
        decode_dims("kern", *_call(**call), **limits)
    assert str(info.value) == message


def test_non_contiguous_tensors_are_refused_unless_allowed():
    q, k, v, out = _call()
    v = v.transpose(2, 3)
    with pytest.raises(UserError, match="kern needs contiguous tensors; v is not"):
        decode_dims("kern", q, k, v, out)
    assert decode_dims("kern", q, k, v, out, contiguous=False)[0] == 2
