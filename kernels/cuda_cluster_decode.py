"""Split-KV decode attention in CUDA C++ with the splits merged on chip (``decode_cluster.cu``).

Why a second decode kernel: at small batch (B·Hkv ≪ SMs) triton_decode must cut each kv
head's keys into splits to fill the GPU, and then pays for a second launch that merges the
splits' float32 partials through global memory. Here each (batch, kv head) is one
thread-block *cluster* of C CTAs, one CTA per SM, and the C partials are merged through
distributed shared memory at the end of the same kernel: one launch, no scratch, no
partials in global memory. It measured slower than triton_decode at every batch
(docs/measurement.md#small-batches-the-splits-merged-on-chip--cuda_cluster_decode-a8c3a21): a cluster must
fit one GPC, so few clusters of a useful size are resident at once, and one CTA alone cannot stream a kv head at full bandwidth.

* ``plan``: C is the largest size ≤ MAX_CLUSTER with B·Hkv·C ≤ SMs whose B·Hkv clusters
  the driver says can be resident at once (cuOccupancyMaxActiveClusters), so the grid is
  one wave (C = 1 when none fits or B·Hkv·2 > SMs: then each CTA streams a whole kv head).
* Each CTA streams its keys through a PIPELINE_BYTES ring of shared-memory stages that a
  producer warp keeps full with 16-byte ``cp.async`` copies (XOR-swizzled for ldmatrix;
  rows past the last key zero-filled), each stage completing on an mbarrier.
* Two warpgroups take alternate tiles; each warp does FlashAttention-2's step for 16 keys on
  tensor cores (``mma.sync`` m16n8k16): the G ≤ MAX_GROUP query heads of the kv head are
  the rows of one 16-row A tile.

Numerics: fp32 accumulation, fp32 online softmax (exp2, log2 e folded into the scale), P
rounded to the input dtype for PV (as triton_decode and FlashAttention), merges in fp32,
one rounding of out. CUDA only (NVRTC through cupy; clusters and distributed shared memory
need sm_90+).
"""

from __future__ import annotations

import threading

from harness import kernel
from harness.errors import UserError
from ._decode_inputs import decode_dims
from .cuda_raw import DTYPE_TAG, load_cu, on_torch_stream, ptr

HEAD_DIMS = (64, 128)
# Query heads per kv head: the rows of one m16n8k16 A tile.
MAX_GROUP = 16
# Keys per tile (CD_BLOCK_N in decode_cluster.cu): 16 per warp of a warpgroup.
BLOCK_N = 64
# Threads per CTA: 8 consumer warps (two warpgroups) + 1 producer warp (CD_THREADS).
THREADS = 288
NUM_CONSUMER_WARPS = (THREADS // 32) - 1
# Shared memory for K/V stages per CTA (one CTA per SM): 6 stages of a 64-key K+V tile at
# D=128, 12 at D=64. At the ~32 GB/s per SM that full HBM bandwidth asks for and ~1-2 µs of
# load latency, 32-64 KB in flight would do; the rest absorbs uneven arrival.
PIPELINE_BYTES = 192 * 1024
# Largest cluster: 16 CTAs is Hopper's non-portable maximum (8 is portable); 8 kv heads × 16
# would cover 128 of 132 SMs, if 8 such clusters fit at once (``resident_clusters`` says).
MAX_CLUSTER = 16
PORTABLE_CLUSTER = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # cuda.h CUfunction_attribute
LOG2E = 1.4426950408889634


def plan(pairs: int, seq_len: int, sms: int, co_resident) -> tuple[int, int]:
    """(cluster size C, keys per CTA) for B·Hkv = ``pairs`` kv heads.

    C: the largest size ≤ MAX_CLUSTER with pairs·C ≤ sms for which ``co_resident(C)`` says
    all ``pairs`` clusters fit on the GPU at once; else 1 (a CTA per kv head). A cluster's
    CTAs must share one GPC, so the GPU's GPC sizes, not its SM count, decide (a cluster
    beyond those resident runs as a second wave). Any size works (the merge splits the G·D outputs over the C ranks).
    Keys per CTA: whole tiles, so every CTA but the last of a cluster streams full tiles.
    """
    if seq_len < 1:
        raise UserError(f"cuda_cluster_decode needs at least one key, not seq_len={seq_len}")
    c = next((c for c in range(min(MAX_CLUSTER, sms // max(pairs, 1)), 1, -1) if co_resident(c)), 1)
    tiles = -(-seq_len // BLOCK_N)
    chunk = -(-tiles // c) * BLOCK_N
    return c, chunk


def pipeline_stages(head_dim: int) -> int:
    """K+V tiles of BLOCK_N keys that fit PIPELINE_BYTES."""
    return PIPELINE_BYTES // (2 * BLOCK_N * head_dim * 2)


def smem_bytes(head_dim: int, group: int, stages: int) -> int:
    """Dynamic shared memory of one CTA (the layout at the top of cluster_decode): the stages
    (which the warps' merge states reuse after the loop), the CTA's state, the mbarriers."""
    stage_bytes = stages * 2 * BLOCK_N * head_dim * 2
    warp_states = NUM_CONSUMER_WARPS * group * (head_dim + 2) * 4
    return max(stage_bytes, warp_states) + group * (head_dim + 2) * 4 + 2 * 8 * stages


def _supports(cfg):
    if cfg.head_dim not in HEAD_DIMS:
        return f"cuda_cluster_decode supports head_dim {'/'.join(map(str, HEAD_DIMS))}, not {cfg.head_dim}"
    if cfg.group > MAX_GROUP:
        return (f"cuda_cluster_decode puts a kv head's query heads in one 16-row tensor-core tile: "
                f"group (heads / kv_heads) <= {MAX_GROUP}, not {cfg.group}")
    return None


_LOCK = threading.Lock()
_READY: dict = {}  # (name, device index) -> kernel with its attributes set
_MAX_ACTIVE: dict = {}  # (device index, kernel name) -> max_active_clusters()


def _kernel(name: str, device_index: int, cluster: int, smem: int):
    """The compiled kernel, its shared-memory limit raised (and non-portable clusters allowed) once."""
    key = (name, device_index)
    fn = _READY.get(key)
    if fn is not None:
        return fn
    import cupy

    with _LOCK:
        fn = load_cu("decode_cluster.cu", (name,), device_index)[name]
        with cupy.cuda.Device(device_index):
            driver = cupy.cuda.driver
            driver.funcSetAttribute(fn.kernel.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            if cluster > PORTABLE_CLUSTER:
                driver.funcSetAttribute(fn.kernel.ptr, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        _READY[key] = fn
    return fn


def _kernel_name(tag: int, d: int, g: int, cluster: int, stages: int) -> str:
    return f"cluster_decode<{tag},{d},{g},{cluster},{stages}>"


def max_active_clusters(fn, cluster: int, smem: int, device_index: int) -> int:
    """How many clusters of ``fn`` (cluster size fixed at compile time) the GPU holds at once:
    the driver's cuOccupancyMaxActiveClusters (cupy does not wrap it), through ctypes."""
    import ctypes

    import cupy

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig (cuda.h)
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]

    lib = ctypes.CDLL("libcuda.so.1")
    cfg = LaunchConfig((cluster, 1, 1), (THREADS, 1, 1), smem, None, None, 0)
    n = ctypes.c_int(0)
    with cupy.cuda.Device(device_index):
        rc = lib.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(fn.kernel.ptr), ctypes.byref(cfg))
    if rc != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed with CUresult {rc} (cluster size {cluster})")
    return n.value


def resident_clusters(device_index: int, cluster: int, head_dim: int, group: int, dtype: str = "float16") -> int:
    """How many clusters of ``cluster`` CTAs this kernel (at ``head_dim``, ``group``) can have
    resident at once on a GPU: the driver's answer, each size compiled once and cached."""
    stages = pipeline_stages(head_dim)
    smem = smem_bytes(head_dim, group, stages)
    name = _kernel_name(DTYPE_TAG[dtype], head_dim, group, cluster, stages)
    key = (device_index, name)
    if key not in _MAX_ACTIVE:
        _MAX_ACTIVE[key] = max_active_clusters(_kernel(name, device_index, cluster, smem), cluster, smem,
                                               device_index)
    return _MAX_ACTIVE[key]


def _co_resident(index: int, pairs: int, d: int, g: int, dtype: str):
    """co_resident(C) for plan(): can ``pairs`` clusters of C CTAs be resident at once?"""
    return lambda c: resident_clusters(index, c, d, g, dtype) >= pairs


@kernel("cuda_cluster_decode", workloads=("decode",), dtypes=("float16", "bfloat16"), devices=("cuda",),
        requires=("cupy",), supports=_supports,
        numerics={"dots": "mma.sync m16n8k16, fp32 accumulation", "softmax": "fp32 online (exp2)",
                  "P": "rounded to input dtype for the PV product",
                  "combine": "fp32 through cluster shared memory, one rounding of out"})
def cuda_cluster_decode(q, k, v, out, *, causal, scale):
    """Split-KV decode in CUDA C++: one cluster per kv head, splits merged in shared memory."""
    import numpy as np
    import torch

    b, h, hkv, seq_len, d = decode_dims("cuda_cluster_decode", q, k, v, out, head_dims=HEAD_DIMS,
                                        max_group=MAX_GROUP, dtypes=("float16", "bfloat16"))
    dtype = str(q.dtype).removeprefix("torch.")
    # Decode is never masked: the one query is the newest token and sees the whole cache.
    del causal
    g = h // hkv
    tag = DTYPE_TAG[dtype]
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    stages = pipeline_stages(d)
    smem = smem_bytes(d, g, stages)
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    cluster, chunk = plan(b * hkv, seq_len, sms, _co_resident(index, b * hkv, d, g, dtype))
    fn = _kernel(_kernel_name(tag, d, g, cluster, stages), index, cluster, smem)
    with on_torch_stream(q.device):
        fn((cluster, b * hkv), (THREADS,),
           (ptr(q), ptr(k), ptr(v), ptr(out), np.int32(seq_len), np.int32(chunk), np.float32(scale * LOG2E)),
           shared_mem=smem)
