"""The float64 attention reference, computed in bounded chunks.

Every candidate is judged against this, so it is deliberately plain: S = QKᵀ·scale in
float64, mask, subtract the row max, exp, normalize, times V, on the same device as the
inputs. It never materializes the full (Nq, Nk) score matrix: queries are processed in
blocks of (query heads of one kv head) × (query rows) sized so the float64 scratch stays
under REFERENCE_CHUNK_BYTES, so seq_len 32k fits on a GPU next to the kernel's buffers and
on a small CPU machine alike.
"""

from __future__ import annotations

# float64 scratch (scores, mask, query and output rows) per chunk. 256 MiB keeps the
# 32k-token causal reference to ~1k-row blocks (a few hundred float64 GEMMs of useful size
# on a GPU) while staying small next to the inputs and the float64 output itself.
REFERENCE_CHUNK_BYTES = 256 * 2**20


def _row_bytes(nk: int, d: int) -> int:
    """Scratch per query row: a float64 score row, its bool mask row, float64 q and o rows."""
    return nk * (8 + 1) + 2 * 8 * d


def plan_chunks(group: int, nq: int, nk: int, d: int, chunk_bytes: int = REFERENCE_CHUNK_BYTES):
    """(query heads per chunk, query rows per chunk) so one chunk's scratch fits chunk_bytes.

    Whole heads are batched when a head's rows fit (decode: the whole GQA group in one
    GEMM); otherwise one head at a time in row blocks.
    """
    rows = max(1, chunk_bytes // _row_bytes(nk, d))
    if rows >= nq:
        return max(1, min(group, rows // nq)), nq
    return 1, rows


def reference_bytes(cfg, chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> int:
    """Peak device bytes of ``reference`` for ``cfg``: the float64 output, one kv head's K and
    V in float64, and one chunk's scratch (the VRAM model adds this to the kernel's)."""
    nq, nk, d = cfg.q_len, cfg.seq_len, cfg.head_dim
    heads, rows = plan_chunks(cfg.group, nq, nk, d, chunk_bytes)
    out = 8 * cfg.batch * cfg.heads * nq * d
    kv = 2 * 8 * nk * d
    return out + kv + heads * rows * _row_bytes(nk, d)


def reference(q, k, v, *, causal: bool, scale: float, chunk_bytes: int = REFERENCE_CHUNK_BYTES):
    """softmax(q·kᵀ·scale [+ bottom-right causal mask]) · v in float64, on q's device.

    q (B, H, Nq, D), k/v (B, Hkv, Nk, D); query head h reads kv head h // (H // Hkv). Causal
    is bottom-right aligned: query i sees keys j <= i + (Nk - Nq), so decode's single query
    sees the whole cache. Inputs are only read (cast chunk by chunk).
    """
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"reference needs q (B,H,Nq,D) and k, v (B,Hkv,Nk,D); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or h % hkv:
        raise ValueError(f"q {tuple(q.shape)} does not match k/v {tuple(k.shape)} (H must be a multiple of Hkv)")
    if causal and nq > nk:
        raise ValueError(f"causal attention with more queries ({nq}) than keys ({nk}) leaves rows with no key")
    g = h // hkv
    off = nk - nq
    heads, rows = plan_chunks(g, nq, nk, d, chunk_bytes)
    f64 = torch.float64
    out = torch.empty(b, h, nq, d, dtype=f64, device=q.device)
    keys = torch.arange(nk, device=q.device)
    for bi in range(b):
        for kv in range(hkv):
            k64 = k[bi, kv].to(f64)
            v64 = v[bi, kv].to(f64)
            for h0 in range(kv * g, (kv + 1) * g, heads):
                h1 = min(h0 + heads, (kv + 1) * g)
                for i0 in range(0, nq, rows):
                    i1 = min(i0 + rows, nq)
                    # Keys past the last visible one for this block are never read.
                    kmax = min(nk, i1 + off) if causal else nk
                    s = torch.matmul(q[bi, h0:h1, i0:i1].to(f64), k64[:kmax].T)
                    s.mul_(scale)
                    if causal:
                        qi = torch.arange(i0, i1, device=q.device) + off
                        s.masked_fill_(keys[:kmax][None, :] > qi[:, None], float("-inf"))
                    s.sub_(s.amax(dim=-1, keepdim=True)).exp_()
                    denom = s.sum(dim=-1, keepdim=True)
                    o = torch.matmul(s, v64[:kmax])
                    del s
                    out[bi, h0:h1, i0:i1] = o.div_(denom)
                    del o
            del k64, v64
    return out
