"""The user accounts' exact baseline: cublasGemmStridedBatchedEx → standalone softmax → cublasGemmStridedBatchedEx.

The fused-attention campaign's opponent, called directly (cupy's thin cuBLAS bindings on torch's memory and
torch's current stream), not through torch.bmm:

1. S = scale·Q·Kᵀ with ``cublasGemmStridedBatchedEx`` (fp32 accumulation, scale folded
   into alpha), written to HBM in the input dtype — as the accounts' stack wrote S in fp16.
2. ``softmax_rows`` (kernels/softmax_rows.cu, NVRTC through cupy): one block per row,
   row max subtracted, float32 reductions, causal mask applied here, P written in the
   input dtype **in place of S** (same bytes moved as a separate P buffer, half the memory).
3. out = P·V with ``cublasGemmStridedBatchedEx`` (fp32 accumulation) straight into ``out``.

Why a CUDA C++ softmax rather than Triton: the baseline must not need Triton, it stays
the accounts' kind of kernel (a standalone CUDA softmax), and it gives kernels/cuda_raw.py's
NVRTC path a real user.

GQA folds the G query heads of a kv head into the row dimension (``grouped_views``): one
strided batch of B·Hkv GEMMs with G·Nq rows each. Decode is the same stack with Nq = 1
(the GEMMs become GEMV-like strided batches).

Numerics vs the other references (the bf16 2-ULP trap):
* vs ``torch_stack``: both round S and P to the input dtype and accumulate in fp32.
  torch_stack rounds S twice (bmm output, then ``mul_(scale)``); here the scale is applied
  in fp32 inside the GEMM (alpha) and S is rounded once. Agreement is therefore at the
  dtype's rounding level, not bitwise.
* vs the float64 reference and fused kernels (P kept in fp32 registers): the rounding of
  P to fp16/bf16 before PV is an error of the baseline, ~1 unit roundoff of the dtype
  relative; an elementwise test against a baseline must allow for it (the bf16 2-ULP trap).
* float32 inputs: CUBLAS_COMPUTE_32F with CUBLAS_DEFAULT_MATH — no TF32, like torch with
  ``allow_tf32 = False`` (torch's default for matmul).
"""

from __future__ import annotations

import threading

from harness import kernel
from harness.errors import UserError
from .cuda_raw import DTYPE_TAG, load_cu, on_torch_stream, ptr
from .torch_stack import grouped_views

# cudaDataType_t values (library_types.h; a stable ABI, checked against cupy's runtime
# module on first use where cupy defines them).
CUDA_R_32F = 0
CUDA_R_16F = 2
CUDA_R_16BF = 14
CUDA_DTYPE = {"float32": CUDA_R_32F, "float16": CUDA_R_16F, "bfloat16": CUDA_R_16BF}
# cuBLAS workspace we hand to our handle (cublasSetWorkspace): 32 MiB is NVIDIA's
# recommended size on Hopper; without setWorkspace cuBLAS allocates its own of this order.
CUBLAS_WORKSPACE_BYTES = 32 * 1024**2
# Softmax block size: one thread per SOFTMAX_ELEMS_PER_THREAD keys, a power of two in
# [32, 1024] (the block reduction needs whole warps).
SOFTMAX_ELEMS_PER_THREAD = 8
SOFTMAX_MIN_THREADS, SOFTMAX_MAX_THREADS = 32, 512

_LOCK = threading.Lock()
_HANDLES: dict[int, tuple] = {}  # device index -> (cuBLAS handle, workspace tensor or None)


def cublas_stack_bytes(cfg) -> int:
    """S (then P, in place) in the input dtype + the cuBLAS workspace of our handle."""
    return cfg.batch * cfg.heads * cfg.q_len * cfg.seq_len * cfg.elem_bytes + CUBLAS_WORKSPACE_BYTES


def softmax_threads(nk: int) -> int:
    t = SOFTMAX_MIN_THREADS
    while t < SOFTMAX_MAX_THREADS and t * SOFTMAX_ELEMS_PER_THREAD < nk:
        t *= 2
    return t


def _handle(device_index: int):
    """Our own cuBLAS handle per device (cupy's shared one keeps its own math mode)."""
    import torch
    from cupy_backends.cuda.libs import cublas

    with _LOCK:
        if device_index not in _HANDLES:
            _check_dtype_constants()
            import cupy

            with cupy.cuda.Device(device_index):
                h = cublas.create()
                # Default math: tensor cores for fp16/bf16 (fp32 accumulate), none for fp32 (no TF32).
                cublas.setMathMode(h, cublas.CUBLAS_DEFAULT_MATH)
                cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
                ws = None
                if hasattr(cublas, "setWorkspace"):
                    ws = torch.empty(CUBLAS_WORKSPACE_BYTES, dtype=torch.uint8,
                                     device=torch.device("cuda", device_index))
                    cublas.setWorkspace(h, ws.data_ptr(), CUBLAS_WORKSPACE_BYTES)
            _HANDLES[device_index] = (h, ws)
        return _HANDLES[device_index][0]


def _check_dtype_constants() -> None:
    from cupy_backends.cuda.api import runtime

    for name, val in (("CUDA_R_32F", CUDA_R_32F), ("CUDA_R_16F", CUDA_R_16F), ("CUDA_R_16BF", CUDA_R_16BF)):
        theirs = getattr(runtime, name, None)
        if theirs is not None and theirs != val:
            raise RuntimeError(f"cudaDataType {name} is {theirs} in cupy, {val} here: fix kernels/cublas_stack.py")


def _gemm(cublas, handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
          beta, c, ldc, stride_c, batch, cuda_dtype):
    """One cublasGemmStridedBatchedEx, column-major, fp32 compute, host alpha/beta."""
    cublas.gemmStridedBatchedEx(
        handle, transa, transb, m, n, k,
        alpha.ctypes.data, a, cuda_dtype, lda, stride_a,
        b, cuda_dtype, ldb, stride_b,
        beta.ctypes.data, c, cuda_dtype, ldc, stride_c,
        batch, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)


NUMERICS = {"gemm": "cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT",
            "math_mode": "CUBLAS_DEFAULT_MATH (no TF32 for float32)",
            "scale": "alpha of the QK^T GEMM (fp32), S rounded once",
            "S": "input dtype, in HBM", "softmax": "float32, max-subtracted, one block per row",
            "P": "input dtype, in place of S"}


@kernel("cublas_stack", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        devices=("cuda",), requires=("cupy",), memory=cublas_stack_bytes,
        numerics=NUMERICS)
def cublas_stack(q, k, v, out, *, causal, scale):
    """cuBLAS strided-batched QKᵀ → CUDA softmax (S in HBM) → cuBLAS PV: the accounts' baseline."""
    import numpy as np
    import torch
    from cupy_backends.cuda.libs import cublas

    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in CUDA_DTYPE:
        raise UserError(f"cublas_stack does not support {dtype}")
    q3, k3, v3, o3, g = grouped_views(q, k, v, out)
    batch, rows, d = q3.shape          # batch = B·Hkv, rows = G·Nq
    nq, nk = q.shape[2], k.shape[2]
    if nq > nk:
        raise UserError(f"cublas_stack: {nq} queries against {nk} keys (need Nq <= Nk)")
    cuda_dtype = CUDA_DTYPE[dtype]
    dev = q.device.index
    handle = _handle(dev)
    name = f"softmax_rows<{DTYPE_TAG[dtype]}>"
    softmax = load_cu("softmax_rows.cu", (name,), dev)[name]
    # S, then P in place: (batch, rows, nk) row-major.
    s = torch.empty((batch, rows, nk), dtype=q.dtype, device=q.device)
    alpha_s = np.array(scale, dtype=np.float32)
    one = np.array(1.0, dtype=np.float32)
    zero = np.array(0.0, dtype=np.float32)

    with on_torch_stream(q.device) as stream:
        cublas.setStream(handle, stream.ptr)
        # --- GEMM 1: S = scale · Q Kᵀ ---------------------------------------------------
        # cuBLAS is column-major: a row-major (r, c) array with leading stride c IS the
        # column-major (c, r) array, i.e. its transpose. So we compute the column-major
        # Sᵀ (nk × rows, ld nk), which is row-major S (rows × nk):
        #   Sᵀ = K · Qᵀ.
        #   A = K (nk × d): memory holds row-major K = column-major Kᵀ (d × nk, ld d),
        #       so op(A) = transpose → transa = T, lda = d.
        #   B = Qᵀ (d × rows): memory holds row-major Q = column-major Qᵀ (d × rows, ld d)
        #       as is → transb = N, ldb = d.
        #   m = nk, n = rows, k = d; ldc = nk.
        _gemm(cublas, handle, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, nk, rows, d,
              alpha_s, k3.data_ptr(), d, nk * d,
              q3.data_ptr(), d, rows * d,
              zero, s.data_ptr(), nk, rows * nk, batch, cuda_dtype)
        # --- softmax over each row of S, P written in place ---------------------------
        softmax((batch * rows,), (softmax_threads(nk),),
                (ptr(s), np.int32(nq), np.int32(nk), np.int32(1 if causal else 0)))
        # --- GEMM 2: out = P · V ----------------------------------------------------------
        # Column-major outᵀ (d × rows, ld d) = Vᵀ · Pᵀ:
        #   A = Vᵀ (d × nk): row-major V = column-major Vᵀ (ld d) as is → transa = N, lda = d.
        #   B = Pᵀ (nk × rows): row-major P = column-major Pᵀ (ld nk) as is → transb = N, ldb = nk.
        #   m = d, n = rows, k = nk; C = o3 (row-major rows × d = column-major outᵀ), ldc = d.
        _gemm(cublas, handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, d, rows, nk,
              one, v3.data_ptr(), d, nk * d,
              s.data_ptr(), nk, rows * nk,
              zero, o3.data_ptr(), d, rows * d, batch, cuda_dtype)
    # torch's caching allocator frees S stream-ordered: reuse waits for the GEMM above.
    del s


@kernel("cublas_stack_aa", workloads=("attention", "decode"), dtypes=("float16", "bfloat16", "float32"),
        devices=("cuda",), requires=("cupy",), memory=cublas_stack_bytes,
        numerics=NUMERICS)
def cublas_stack_aa(q, k, v, out, *, causal, scale):
    """The cuBLAS stack under a second name: the candidate of an A/A line (baseline against
    itself through the whole pipeline), whose bar must come out NO-GO with every CI on 1.0."""
    cublas_stack(q, k, v, out, causal=causal, scale=scale)
