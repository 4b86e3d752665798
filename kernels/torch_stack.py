"""The torch 3-kernel stack: bmm (QKᵀ) → softmax → bmm (PV).

On CUDA, ``torch.bmm`` calls cuBLAS's strided-batched GEMM, so this is the user
accounts' baseline expressed through torch. It differs from ``cublas_stack`` (the direct cuBLAS
call) in one documented way: the softmax runs in float32 and P is rounded to the input
dtype before PV — the reference-style rounding of the bf16 2-ULP trap.

S is rounded to the input dtype once: the scale rides in the GEMM's alpha (baddbmm with
beta=0), as in the cuBLAS stack, instead of a second rounding by a separate multiply.
"""

from __future__ import annotations

from harness import kernel


def stack_bytes(cfg) -> int:
    """S in the input dtype + P in float32 live together, + the causal mask (1 byte/elem)."""
    n2 = cfg.batch * cfg.heads * cfg.q_len * cfg.seq_len
    mask = cfg.q_len * cfg.seq_len if cfg.causal else 0
    return n2 * (cfg.elem_bytes + 4) + mask


def grouped_views(q, k, v, out):
    """Views that fold the GQA group into the row dimension, so both GEMMs stay strided-batched.

    q (B, H, Nq, D) → (B·Hkv, G·Nq, D): query head h = kv·G + g reads kv head kv. No copies.
    """
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    g = h // hkv
    return (q.reshape(b * hkv, g * nq, d), k.reshape(b * hkv, nk, d), v.reshape(b * hkv, nk, d),
            out.view(b * hkv, g * nq, d), g)


@kernel("torch_stack", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        memory=stack_bytes, numerics={"gemm": "torch.bmm (cuBLAS strided-batched on CUDA)",
                                       "softmax": "float32, P rounded to input dtype"})
def torch_stack(q, k, v, out, *, causal, scale):
    """bmm → softmax(float32) → bmm, S materialized in memory (torch baseline)."""
    import torch

    q3, k3, v3, o3, g = grouped_views(q, k, v, out)
    nq, nk = q.shape[2], k.shape[2]
    s = torch.empty(q3.shape[0], q3.shape[1], nk, dtype=q.dtype, device=q.device)
    s.baddbmm_(q3, k3.transpose(1, 2), beta=0.0, alpha=scale)  # beta=0: s's old contents are ignored
    if causal:
        # Query i sees keys j <= i + (nk - nq) (bottom-right aligned, equal lengths in prefill).
        mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).triu_(nk - nq + 1)
        s.view(-1, g, nq, nk).masked_fill_(mask, float("-inf"))
        del mask
    p32 = torch.softmax(s, dim=-1, dtype=torch.float32)
    del s
    p = p32.to(q.dtype)
    del p32
    torch.bmm(p, v3, out=o3)
