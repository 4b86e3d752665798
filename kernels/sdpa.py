"""torch scaled_dot_product_attention, by backend, as candidate kernels.

``sdpa`` lets torch choose; ``sdpa_flash``, ``sdpa_cudnn``, ``sdpa_efficient`` and
``sdpa_math`` pin one backend (an unsupported config raises inside torch, and the sweep
records it as crashed rather than silently falling back to another backend).
"""

from __future__ import annotations

from harness import kernel

_HALF = ("float16", "bfloat16")


def _out_copy_bytes(cfg):
    """SDPA returns a new tensor; copying it into `out` needs one output-sized buffer."""
    return cfg.batch * cfg.heads * cfg.q_len * cfg.head_dim * cfg.elem_bytes


def _call(q, k, v, out, causal, scale, backend):
    import torch.nn.functional as F

    gqa = q.shape[1] != k.shape[1]
    nq, nk = q.shape[2], k.shape[2]
    # SDPA's causal mask is top-left aligned; the harness's is bottom-right. They agree when
    # Nq == Nk; one query row (decode) sees every key either way, so it needs no mask.
    if causal and 1 < nq != nk:
        raise ValueError(f"sdpa: causal with {nq} queries over {nk} keys needs a bottom-right mask")
    kw = dict(is_causal=bool(causal) and nq > 1, scale=scale, enable_gqa=gqa)
    if backend is None:
        res = F.scaled_dot_product_attention(q, k, v, **kw)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend)):
            res = F.scaled_dot_product_attention(q, k, v, **kw)
    # SDPA has no out=: the copy is part of the measured call (one pass over out, small
    # next to attention's N² work; noted in docs/kernels.md).
    out.copy_(res)


def backend_used(q, k, v, *, causal, scale) -> dict:
    """Which backend torch's default dispatch picks for these inputs (the TF32 incident:
    the flag you did not set decides the kernel). Uses torch's private chooser; says so if absent."""
    import torch
    from torch.nn.attention import SDPBackend

    nq = q.shape[2]
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, bool(causal) and nq > 1, scale=scale,
                                         enable_gqa=q.shape[1] != k.shape[1])
    except (AttributeError, RuntimeError, TypeError) as exc:
        return {"backend_used": f"unknown ({type(exc).__name__}: {exc})"}
    names = {int(getattr(SDPBackend, n)): n for n in dir(SDPBackend) if n.isupper()}
    return {"backend_used": names.get(int(choice), str(choice))}


@kernel("sdpa", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        memory=_out_copy_bytes, numerics={"backend": "torch default dispatch"},
        describe=backend_used)
def sdpa(q, k, v, out, *, causal, scale):
    """torch SDPA, default backend selection."""
    _call(q, k, v, out, causal, scale, None)


@kernel("sdpa_flash", workloads=("attention", "decode"), dtypes=_HALF, devices=("cuda",),
        memory=_out_copy_bytes, numerics={"backend": "FLASH_ATTENTION"})
def sdpa_flash(q, k, v, out, *, causal, scale):
    """torch SDPA pinned to the FlashAttention-2 backend."""
    _call(q, k, v, out, causal, scale, "FLASH_ATTENTION")


def _cudnn_supports(cfg):
    # torch 2.11 on the H200: "cudnn SDPA does not support key/value sequence length 1"
    # ("No available kernel"); declared here so the gate skips that boundary shape instead
    # of recording the whole config as crashed.
    if cfg.seq_len < 2:
        return "cuDNN SDPA does not support a key/value sequence length of 1"
    return None


@kernel("sdpa_cudnn", workloads=("attention", "decode"), dtypes=_HALF, devices=("cuda",),
        memory=_out_copy_bytes, numerics={"backend": "CUDNN_ATTENTION"}, supports=_cudnn_supports)
def sdpa_cudnn(q, k, v, out, *, causal, scale):
    """torch SDPA pinned to the cuDNN attention backend."""
    _call(q, k, v, out, causal, scale, "CUDNN_ATTENTION")


@kernel("sdpa_efficient", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        devices=("cuda",), memory=_out_copy_bytes, numerics={"backend": "EFFICIENT_ATTENTION"})
def sdpa_efficient(q, k, v, out, *, causal, scale):
    """torch SDPA pinned to the memory-efficient (xformers-style) backend."""
    _call(q, k, v, out, causal, scale, "EFFICIENT_ATTENTION")


@kernel("sdpa_math", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        memory=lambda cfg: cfg.batch * cfg.heads * cfg.q_len * cfg.seq_len * 4 * 3,
        numerics={"backend": "MATH"})
def sdpa_math(q, k, v, out, *, causal, scale):
    """torch SDPA pinned to the math (unfused) backend."""
    _call(q, k, v, out, causal, scale, "MATH")
