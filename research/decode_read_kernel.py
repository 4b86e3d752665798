"""Triton helpers of research/explore_decode_splits.py --floor and --timeline (imported on
first use: triton is slow to import)."""

import triton
import triton.language as tl


@triton.jit
def globaltimer():
    """The GPU's global nanosecond timer (the same on every SM)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def read_sum(K, V, Out, per, total, BLOCK: tl.constexpr):
    """Sum K and V elements [pid·per, +per) into Out[pid]: a read of both, nothing else."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * per
    end = tl.minimum(start + per, total)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(start, end, BLOCK):
        m = i + offs < end
        acc += tl.load(K + i + offs, mask=m, other=0.0).to(tl.float32)
        acc += tl.load(V + i + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(Out + pid, tl.sum(acc, 0))


@triton.jit
def stamp(Stamps, i):
    """Stamps[i] = %globaltimer (ns), to frame a timeline."""
    tl.store(Stamps + i, globaltimer())
