// A deliberately naive decode attention kernel: the bring-your-own-CUDA example
// (registered as ``cuda_naive_decode`` by kernels/cuda_raw.py). Correct, and slow on
// purpose: each thread reads whole K rows (uncoalesced) and the scores make a round trip
// through global memory. It shows the plumbing, not a design.
//
// q, out: (B, H, 1, D); k, v: (B, Hkv, L, D), all contiguous; query head h reads kv head
// h / (H / Hkv). One block per query head (b, h):
//   1. s_j = scale * q . k_j for every key j, into the float32 row scores[b*H + h, :];
//   2. m = max_j s_j (block reduction); p_j = exp(s_j - m) in place; l = sum_j p_j;
//   3. out[d] = sum_j p_j v_j[d] / l, thread d reading V coalesced along d.
// float32 throughout; the output is rounded once to the input dtype.
#include "cuda_common.cuh"

#define NAIVE_MAX_D 256  // q lives in shared memory as float32

template <int DT>
__global__ void naive_decode(const void* q, const void* k, const void* v, void* out, float* scores,
                             int H, int Hkv, int L, int D, float scale) {
    __shared__ float qs[NAIVE_MAX_D];
    __shared__ float scratch[32];
    const long long bh = blockIdx.x;
    const int b = static_cast<int>(bh / H), h = static_cast<int>(bh % H);
    const int kvh = h / (H / Hkv);
    const long long kv_base = (static_cast<long long>(b) * Hkv + kvh) * static_cast<long long>(L) * D;
    float* srow = scores + bh * static_cast<long long>(L);

    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = load_f32<DT>(q, bh * D + d);
    __syncthreads();

    float m = neg_inf();
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        float acc = 0.0f;
        const long long kr = kv_base + static_cast<long long>(j) * D;
        for (int d = 0; d < D; ++d) acc += qs[d] * load_f32<DT>(k, kr + d);
        acc *= scale;
        srow[j] = acc;
        m = fmaxf(m, acc);
    }
    m = block_max(m, scratch);

    float l = 0.0f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {  // each thread revisits its own j
        const float p = expf(srow[j] - m);
        srow[j] = p;
        l += p;
    }
    l = block_sum(l, scratch);  // its barriers also publish srow to the whole block

    const float inv = 1.0f / l;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < L; ++j) o += srow[j] * load_f32<DT>(v, kv_base + static_cast<long long>(j) * D + d);
        store_f32<DT>(out, bh * D + d, o * inv);
    }
}

template __global__ void naive_decode<DT_F32>(const void*, const void*, const void*, void*, float*, int, int, int, int, float);
template __global__ void naive_decode<DT_F16>(const void*, const void*, const void*, void*, float*, int, int, int, int, float);
template __global__ void naive_decode<DT_BF16>(const void*, const void*, const void*, void*, float*, int, int, int, int, float);
