// Row softmax of the cuBLAS stack (kernels/cublas_stack.py): the seeds' standalone
// softmax kernel between the two strided-batched GEMMs.
//
// S holds scale * Q K^T, row-major, one row of ``nk`` scores per (batch, kv head, group
// member, query) in the input dtype. One block per row: an online (max, sum-of-exp) pass
// in float32 over the visible keys, a block reduction, then a second pass writing
// P = exp(s - max) / sum in place of S (in the input dtype; masked keys get exactly 0).
// In place is safe: a row belongs to one block, and every read of the first pass happens
// before the block barrier inside the reduction, before any thread writes.
//
// Causal masking (bottom-right aligned, as torch_stack): query i of ``nq`` sees keys
// j <= i + (nk - nq); the row index modulo nq is the query index because the GQA fold
// puts G*nq consecutive rows, query-minor, per (batch, kv head).
#include "cuda_common.cuh"

template <int DT>
__global__ void softmax_rows(void* s, int nq, int nk, int causal) {
    __shared__ float scratch[64];
    const long long row = blockIdx.x;
    const long long base = row * static_cast<long long>(nk);
    int limit = nk;
    if (causal) {
        const int i = static_cast<int>(row % nq);
        limit = min(nk, i + (nk - nq) + 1);
    }

    float m = neg_inf(), l = 0.0f;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) {
        const float x = load_f32<DT>(s, base + j);
        if (x > m) {
            l = l * expf(m - x) + 1.0f;
            m = x;
        } else {
            l += expf(x - m);
        }
    }
    block_max_sum(m, l, scratch);

    const float inv = 1.0f / l;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float p = j < limit ? expf(load_f32<DT>(s, base + j) - m) * inv : 0.0f;
        store_f32<DT>(s, base + j, p);
    }
}

// Explicit instantiations, named from Python as "softmax_rows<0>" etc. (name_expressions).
template __global__ void softmax_rows<DT_F32>(void*, int, int, int);
template __global__ void softmax_rows<DT_F16>(void*, int, int, int);
template __global__ void softmax_rows<DT_BF16>(void*, int, int, int);
