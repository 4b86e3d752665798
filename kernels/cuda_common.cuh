// Shared helpers for the raw CUDA kernels in kernels/*.cu (compiled by NVRTC through cupy).
//
// No CUDA headers are included: NVRTC does not ship cuda_fp16.h / cuda_bf16.h on every
// install, so 16-bit values travel as raw bits (unsigned short) and are converted with
// PTX instructions (fp16) or bit arithmetic (bf16). DT selects the element type:
// DT_F32 = float, DT_F16 = IEEE half, DT_BF16 = bfloat16.
#pragma once

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <int DT> __device__ __forceinline__ float load_f32(const void* p, long long i);

template <> __device__ __forceinline__ float load_f32<DT_F32>(const void* p, long long i) {
    return static_cast<const float*>(p)[i];
}

template <> __device__ __forceinline__ float load_f32<DT_F16>(const void* p, long long i) {
    unsigned short h = static_cast<const unsigned short*>(p)[i];
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

template <> __device__ __forceinline__ float load_f32<DT_BF16>(const void* p, long long i) {
    // bfloat16 is the top half of a float32.
    return __uint_as_float(static_cast<unsigned int>(static_cast<const unsigned short*>(p)[i]) << 16);
}

template <int DT> __device__ __forceinline__ void store_f32(void* p, long long i, float x);

template <> __device__ __forceinline__ void store_f32<DT_F32>(void* p, long long i, float x) {
    static_cast<float*>(p)[i] = x;
}

template <> __device__ __forceinline__ void store_f32<DT_F16>(void* p, long long i, float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));  // round to nearest even
    static_cast<unsigned short*>(p)[i] = h;
}

template <> __device__ __forceinline__ void store_f32<DT_BF16>(void* p, long long i, float x) {
    // Round to nearest even, as torch's .to(torch.bfloat16) does; NaN stays a (quiet) NaN.
    unsigned int u = __float_as_uint(x);
    unsigned short h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h = static_cast<unsigned short>((u >> 16) | 0x0040u);
    } else {
        h = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    static_cast<unsigned short*>(p)[i] = h;
}

// (m, l) pairs of an online softmax: l = sum exp(x - m). Merging keeps m the max.
__device__ __forceinline__ void merge_max_sum(float& m, float& l, float m2, float l2) {
    float mn = fmaxf(m, m2);
    if (mn == neg_inf()) {  // both empty: nothing seen yet
        return;
    }
    l = l * expf(m - mn) + l2 * expf(m2 - mn);
    m = mn;
}

// Block-wide reductions; blockDim.x must be a multiple of 32 and at most 1024.
// ``scratch`` is __shared__ storage of 32 floats (64 for the pair version); every
// thread receives the result.
__device__ __forceinline__ void block_max_sum(float& m, float& l, float* scratch) {
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float l2 = __shfl_xor_sync(0xffffffffu, l, off);
        merge_max_sum(m, l, m2, l2);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) {
        scratch[warp] = m;
        scratch[32 + warp] = l;
    }
    __syncthreads();
    m = lane < nwarps ? scratch[lane] : neg_inf();
    l = lane < nwarps ? scratch[32 + lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float l2 = __shfl_xor_sync(0xffffffffu, l, off);
        merge_max_sum(m, l, m2, l2);
    }
}

__device__ __forceinline__ float block_max(float x, float* scratch) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < nwarps ? scratch[lane] : neg_inf();
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

__device__ __forceinline__ float block_sum(float x, float* scratch) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < nwarps ? scratch[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}
