"""The float64 attention reference, computed in bounded chunks.

Every candidate is judged against this, so it is deliberately plain: S = (Q·scale)Kᵀ in
float64, mask, softmax (subtract the row max, exp, normalize), times V, on the same device as
the inputs. It never materializes the full (Nq, Nk) score matrix of a whole batch: the query
rows of one kv head's group are one batch entry, and chunks of such entries (or, for long
sequences, of one entry's rows) are sized so the float64 scratch stays under
REFERENCE_CHUNK_BYTES, so seq_len 32k fits on a GPU next to the kernel's buffers and on a
small CPU machine alike, while short sequences run as a few batched GEMMs instead of one
small GEMM per head (the harness's own cost: issue 32).
"""

from __future__ import annotations

# float64 scratch (scores, probabilities, mask, query and output rows) per chunk. 256 MiB
# keeps the 32k-token causal reference to ~1k-row blocks (a few hundred float64 GEMMs of
# useful size on a GPU) while staying small next to the inputs and the float64 output itself.
REFERENCE_CHUNK_BYTES = 256 * 2**20
# On a CPU the chunks are smaller: a chunk's scores are re-read by each pass of the softmax,
# and at 256 MiB batched pairs no longer sit in cache (a 2-core host: 1.2 s per seq_len 1024
# reference at 32 MiB, 2.0-2.6 s at 64-256 MiB).
CPU_REFERENCE_CHUNK_BYTES = 32 * 2**20


def _row_bytes(nk: int, d: int) -> int:
    """Scratch per query row: a float64 score row and its softmax, a bool mask row, float64
    q and o rows."""
    return nk * (8 + 8 + 1) + 2 * 8 * d


def _kv_bytes(nk: int, d: int) -> int:
    """One kv head's K and V in float64."""
    return 2 * 8 * nk * d


def plan_chunks(group: int, nq: int, nk: int, d: int, chunk_bytes: int = REFERENCE_CHUNK_BYTES,
                pairs: int = 1) -> tuple[int, int, int]:
    """(kv heads per chunk, query heads per chunk, query rows per chunk) so one chunk's
    scratch fits chunk_bytes; ``pairs``: the (batch, kv head) pairs there are.

    When a whole group of query heads fits (decode, short prefill), several (batch, kv head)
    pairs go in one batched GEMM, their float64 K and V counted in the chunk; otherwise one
    pair at a time, whole heads of its group where they fit, else one head in row blocks.
    """
    row = _row_bytes(nk, d)
    rows = max(1, chunk_bytes // row)
    if rows < nq:
        return 1, 1, rows
    heads = max(1, min(group, rows // nq))
    if heads < group:
        return 1, heads, nq
    per_pair = group * nq * row + _kv_bytes(nk, d)
    return max(1, min(pairs, chunk_bytes // per_pair)), group, nq


def reference_bytes(cfg, chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> int:
    """Peak device bytes of ``reference`` for ``cfg``: the float64 output, one kv head's K and
    V in float64 (several pairs' are inside the chunk), and one chunk's scratch (the VRAM
    model adds this to the kernel's)."""
    nq, nk, d = cfg.q_len, cfg.seq_len, cfg.head_dim
    pairs, heads, rows = plan_chunks(cfg.group, nq, nk, d, chunk_bytes, cfg.batch * (cfg.heads // cfg.group))
    out = 8 * cfg.batch * cfg.heads * nq * d
    return out + pairs * (_kv_bytes(nk, d) + heads * rows * _row_bytes(nk, d))


def _attend(q64, k64, v64, mask):
    """softmax(q64·k64ᵀ [masked]) · v64 for batched float64 blocks; q64 already scaled."""
    import torch

    s = torch.matmul(q64, k64.transpose(-1, -2))
    if mask is not None:
        s.masked_fill_(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    del s
    return torch.matmul(p, v64)


def reference(q, k, v, *, causal: bool, scale: float, chunk_bytes: int | None = None):
    """softmax(q·kᵀ·scale [+ bottom-right causal mask]) · v in float64, on q's device.

    q (B, H, Nq, D), k/v (B, Hkv, Nk, D); query head h reads kv head h // (H // Hkv). Causal
    is bottom-right aligned: query i sees keys j <= i + (Nk - Nq), so decode's single query
    sees the whole cache. Inputs are only read (cast chunk by chunk). ``chunk_bytes``:
    REFERENCE_CHUNK_BYTES on a GPU (what the VRAM model counts), CPU_REFERENCE_CHUNK_BYTES on a CPU.
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
    if chunk_bytes is None:
        chunk_bytes = CPU_REFERENCE_CHUNK_BYTES if q.device.type == "cpu" else REFERENCE_CHUNK_BYTES
    g = h // hkv
    off = nk - nq
    n_pairs = b * hkv
    pairs, heads, rows = plan_chunks(g, nq, nk, d, chunk_bytes, n_pairs)
    f64 = torch.float64
    dev = q.device
    out = torch.empty(b, h, nq, d, dtype=f64, device=dev)
    # (batch, kv head) pairs as one batch dimension; a pair's query heads are its group.
    qp = q.reshape(n_pairs, g, nq, d)
    kp, vp = k.reshape(n_pairs, nk, d), v.reshape(n_pairs, nk, d)
    op = out.view(n_pairs, g, nq, d)
    keys = torch.arange(nk, device=dev)

    def mask(i0: int, i1: int, kmax: int):
        # Query row i sees keys j <= i + off (bottom-right aligned).
        return keys[:kmax][None, :] > (torch.arange(i0, i1, device=dev) + off)[:, None] if causal else None

    if heads == g and rows == nq:
        # Whole groups fit: several pairs per batched GEMM, one mask for all of them.
        m = mask(0, nq, nk)
        m = None if m is None else m.repeat(g, 1)  # (g·Nq, Nk): the group's rows, head by head
        for p0 in range(0, n_pairs, pairs):
            p1 = min(p0 + pairs, n_pairs)
            q64 = qp[p0:p1].to(f64).mul_(scale).reshape(p1 - p0, g * nq, d)
            o = _attend(q64, kp[p0:p1].to(f64), vp[p0:p1].to(f64), m)
            op[p0:p1] = o.view(p1 - p0, g, nq, d)
            del q64, o
        return out
    for pi in range(n_pairs):
        k64, v64 = kp[pi].to(f64), vp[pi].to(f64)
        for h0 in range(0, g, heads):
            h1 = min(h0 + heads, g)
            for i0 in range(0, nq, rows):
                i1 = min(i0 + rows, nq)
                # Keys past the last visible one for this block are never read.
                kmax = min(nk, i1 + off) if causal else nk
                q64 = qp[pi, h0:h1, i0:i1].to(f64).mul_(scale)
                op[pi, h0:h1, i0:i1] = _attend(q64, k64[:kmax], v64[:kmax], mask(i0, i1, kmax))
                del q64
        del k64, v64
    return out
