// Split-KV decode attention with the splits merged on chip: a thread-block cluster per
// (batch, kv head), registered as ``cuda_cluster_decode`` by kernels/cuda_cluster_decode.py
// (the design and the measurements are there).
//
// q, out: (B, H, 1, D); k, v: (B, Hkv, L, D), all contiguous; the G = H / Hkv query heads
// of kv head (b, kvh) are rows (b·Hkv + kvh)·G + g of q and out. Grid (C, B·Hkv), cluster
// (C, 1, 1), one CTA of 8 consumer warps + 1 producer warp per SM:
//   * CTA rank r of the cluster owns keys [r·chunk, (r+1)·chunk) of its kv head;
//   * the producer warp streams them tile by tile (BLOCK_N keys of K and of V) with 16-byte
//     cp.async copies into STAGES shared-memory stages, XOR-swizzled so that ldmatrix reads
//     them without bank conflicts, each stage completing on an mbarrier (rows past the last
//     key are zero-filled);
//   * the consumer warps form two warpgroups that take alternate tiles; in a tile each warp
//     owns 16 keys and does FlashAttention-2's inner step on tensor cores (mma.sync
//     m16n8k16, fp32 accumulation): S = q·Kᵀ for the G heads (the 16-row A tile holds the
//     G ≤ 16 query heads, the rest zero), an online softmax on the S fragments, O += P·V
//     with P taken from the S registers;
//   * at the end the warps, then the C CTAs merge their (m, l, acc): the last step reads the
//     other CTAs' shared memory through the cluster (DSMEM), so the splits never go through
//     global memory and no second kernel is launched.
// Numerics: fp32 accumulation, fp32 online softmax in base 2 (log2 e folded into the
// scale), P rounded to the input dtype for the PV product (as FlashAttention and
// triton_decode do), merges in fp32, one rounding of out.
#include "cuda_common.cuh"

#define CD_NWARPS 8                        // consumer warps: two warpgroups of 4
#define CD_THREADS ((CD_NWARPS + 1) * 32)  // + the producer warp
#define CD_BLOCK_N 64                      // keys per tile: 16 per warp of a warpgroup

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return static_cast<unsigned>(a);
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// 16 bytes from global ``src`` to shared ``dst`` (cp.async, through L2 only); ``bytes`` = 0
// reads nothing and writes zeros (the rows past the last key). K/V are read once: evict-first.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, unsigned bytes, unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src), "r"(bytes),
                 "l"(policy)
                 : "memory");
}

// Arrive on mbarrier ``bar`` once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster: stores before it are visible to loads after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// A float of CTA ``rank``'s shared memory at the address ``local`` has in this CTA.
__device__ __forceinline__ float ld_cluster(unsigned local, unsigned rank) {
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// Weight of a partial with running max m in a merge whose max is mx (an empty partial: 0).
__device__ __forceinline__ float weight(float m, float mx) { return m == neg_inf() ? 0.0f : exp2f(m - mx); }

// Byte offset of 16-byte chunk c of row ``row`` in a tile of CH-chunk rows, XOR-swizzled: the
// 8 rows an ldmatrix reads at one chunk land in 8 different 16-byte bank groups.
template <int CH>
__device__ __forceinline__ unsigned swizzle(int row, int c) {
    return static_cast<unsigned>(row * CH * 16 + ((c ^ (row & 7)) << 4));
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}

__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}

// c += A·B for one m16n8k16 tile: A 16×16 (4 registers of 2 elements), B 16×8 (2), c fp32.
template <int DT>
__device__ __forceinline__ void mma16816(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
    if constexpr (DT == DT_F16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// Two floats rounded (to nearest even) into one register of two 16-bit elements, lo first.
template <int DT>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if constexpr (DT == DT_F16) {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}


template <int DT, int D, int G, int C, int STAGES>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(CD_THREADS, 1)
    cluster_decode(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                   const unsigned short* __restrict__ v, void* __restrict__ out, int L, int chunk, float qk_scale) {
    constexpr int RB = D * 2;                         // bytes per K/V row
    constexpr int CH = RB / 16;                       // 16-byte chunks per row
    constexpr int TILE_BYTES = CD_BLOCK_N * RB;       // one K (or V) tile
    constexpr int NT = D / 8;                         // n8 tiles of the output (PV)
    constexpr int KS = D / 16;                        // k16 steps of q·Kᵀ
    constexpr int HR = G > 8 ? 2 : 1;                 // fragment rows per thread that hold heads
    constexpr int WROW = G * (D + 2);                 // one warp's (m, l, acc) for G heads
    static_assert(G >= 1 && G <= 16, "the A tile holds at most 16 query heads");
    // The warps' states reuse the stages once every tile is consumed.
    constexpr int REGION0 = STAGES * 2 * TILE_BYTES > CD_NWARPS * WROW * 4 ? STAGES * 2 * TILE_BYTES
                                                                           : CD_NWARPS * WROW * 4;
    extern __shared__ __align__(128) unsigned char smem[];
    float* wstate = reinterpret_cast<float*>(smem);                          // [NWARPS][WROW], after the loop
    float* cstate = reinterpret_cast<float*>(smem + REGION0);                // [G] m, [G] l, [G][D] acc
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(cstate + G * (D + 2));  // full, empty

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rank = C > 1 ? static_cast<int>(cluster_rank()) : 0;
    const long long pair = blockIdx.y;
    const int start = rank * chunk;
    const int end = min(start + chunk, L);
    const int ntiles = start < end ? (end - start + CD_BLOCK_N - 1) / CD_BLOCK_N : 0;
    const unsigned tiles0 = smem_addr(smem);
    const unsigned full0 = smem_addr(bars), empty0 = full0 + 8 * STAGES;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 32);       // each producer lane's cp.async arrival
            mbar_init(empty0 + 8 * s, 4);       // one arrival per warp of the consuming warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CD_NWARPS) {  // producer: the warp copies each tile in 16-byte chunks
        unsigned long long policy;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        const unsigned short* kb = k + (pair * L + start) * D;
        const unsigned short* vb = v + (pair * L + start) * D;
        for (int t = 0; t < ntiles; ++t) {
            const int s = t % STAGES;
            if (t >= STAGES) mbar_wait(empty0 + 8 * s, ((t / STAGES) - 1) & 1);
            const int rows = min(CD_BLOCK_N, end - start - t * CD_BLOCK_N);
            const unsigned dst = tiles0 + s * 2 * TILE_BYTES;
#pragma unroll 4
            for (int i = lane; i < CD_BLOCK_N * CH; i += 32) {
                const int row = i / CH, c = i % CH;
                // Rows past the last key: zero-filled (a clamped, readable address, 0 bytes).
                const int src_row = row < rows ? row : rows - 1;
                const unsigned bytes = row < rows ? 16u : 0u;
                const long long off = (static_cast<long long>(t) * CD_BLOCK_N + src_row) * D + c * 8;
                const unsigned at = dst + swizzle<CH>(row, c);
                cp_async16(at, kb + off, bytes, policy);
                cp_async16(at + TILE_BYTES, vb + off, bytes, policy);
            }
            cp_async_arrive(full0 + 8 * s);
        }
    } else {  // consumers
        const int wg = warp >> 2, w4 = warp & 3;
        const int r = lane >> 2, cq = lane & 3;   // fragment row (head) and column pair
        // q as the A operand (rows r and r + 8 = heads; columns 2·cq, +1 and +8 of each k16 step).
        unsigned qa[KS][4];
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int head = r + 8 * h;
                const unsigned* qrow = reinterpret_cast<const unsigned*>(q + (pair * G + head) * D + ks * 16 + 2 * cq);
                qa[ks][h] = head < G ? qrow[0] : 0u;      // a0 (row r), a1 (row r + 8)
                qa[ks][2 + h] = head < G ? qrow[4] : 0u;  // a2, a3: columns + 8
            }
        float m[HR], l[HR], acc[NT][4];
#pragma unroll
        for (int h = 0; h < HR; ++h) {
            m[h] = neg_inf();
            l[h] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
        // ldmatrix row addresses: lane i names row i % 8 of 8×8 matrix i / 8.
        const int mi = lane >> 3, ri = lane & 7;
        const int k_row = 16 * w4 + (mi >> 1) * 8 + ri, k_c = mi & 1;   // K: keys +0/+8, dims +0/+8
        const int v_row = 16 * w4 + (mi & 1) * 8 + ri, v_c = mi >> 1;   // V: keys +0/+8, dims +0/+8
        for (int t = wg; t < ntiles; t += 2) {
            const int s = t % STAGES;
            const int rows = min(CD_BLOCK_N, end - start - t * CD_BLOCK_N);
            const unsigned kt = tiles0 + s * 2 * TILE_BYTES, vt = kt + TILE_BYTES;
            mbar_wait(full0 + 8 * s, (t / STAGES) & 1);
            float sc[2][4];
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) sc[j][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                unsigned b0, b1, b2, b3;
                ldsm_x4(kt + swizzle<CH>(k_row, 2 * ks + k_c), b0, b1, b2, b3);
                mma16816<DT>(sc[0], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
                mma16816<DT>(sc[1], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b2, b3);
            }
            // sc[j][e]: head r + 8·(e / 2), key 16·w4 + 8·j + 2·cq + e % 2 of the tile.
            unsigned pa[4];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (h >= HR) {
                    pa[h] = pa[2 + h] = 0u;  // rows 8-15 hold no head
                    continue;
                }
                float mx = m[h];
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int key = 16 * w4 + 8 * j + 2 * cq + e;
                        float& x = sc[j][2 * h + e];
                        x = key < rows ? x * qk_scale : neg_inf();
                        mx = fmaxf(mx, x);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float alpha = mx == neg_inf() ? 1.0f : exp2f(m[h] - mx);
                m[h] = mx;
                float ps = 0.0f;
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = sc[j][2 * h + e];
                        x = x == neg_inf() ? 0.0f : exp2f(x - mx);
                        ps += x;
                    }
                l[h] = l[h] * alpha + ps;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    acc[j][2 * h] *= alpha;
                    acc[j][2 * h + 1] *= alpha;
                }
                pa[h] = pack2<DT>(sc[0][2 * h], sc[0][2 * h + 1]);      // a0 / a1: keys 0-7
                pa[2 + h] = pack2<DT>(sc[1][2 * h], sc[1][2 * h + 1]);  // a2 / a3: keys 8-15
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned b0, b1, b2, b3;
                ldsm_x4_t(vt + swizzle<CH>(v_row, j + v_c), b0, b1, b2, b3);
                mma16816<DT>(acc[j], pa[0], pa[1], pa[2], pa[3], b0, b1);
                mma16816<DT>(acc[j + 1], pa[0], pa[1], pa[2], pa[3], b2, b3);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * s);  // this warp is done with stage s
        }
        // Every consumer warp is past its last tile (and every copy issued has landed, as each
        // was waited for): the stages are free for the warps' states.
        asm volatile("bar.sync 1, %0;" ::"n"(CD_NWARPS * 32) : "memory");
        // This warp's state: l summed over the 4 lanes of a row; m is already row-wide.
        float* w = wstate + warp * WROW;
#pragma unroll
        for (int h = 0; h < HR; ++h) {
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
            l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
            const int head = r + 8 * h;
            if (head < G) {
                if (cq == 0) {
                    w[head] = m[h];
                    w[G + head] = l[h];
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    w[2 * G + head * D + 8 * j + 2 * cq] = acc[j][2 * h];
                    w[2 * G + head * D + 8 * j + 2 * cq + 1] = acc[j][2 * h + 1];
                }
            }
        }
    }
    __syncthreads();
    // Merge the warps: this CTA's (m, l, unnormalized acc) per head into cstate.
    for (int i = threadIdx.x; i < G * D; i += CD_THREADS) {
        const int g = i / D;
        float mx = neg_inf();
        for (int w = 0; w < CD_NWARPS; ++w) mx = fmaxf(mx, wstate[w * WROW + g]);
        float num = 0.0f, den = 0.0f;
        for (int w = 0; w < CD_NWARPS; ++w) {
            const float a = weight(wstate[w * WROW + g], mx);
            num += a * wstate[w * WROW + 2 * G + i];
            den += a * wstate[w * WROW + G + g];
        }
        cstate[2 * G + i] = num;
        if (i % D == 0) {
            cstate[g] = mx;
            cstate[G + g] = den;
        }
    }
    if constexpr (C == 1) {
        __syncthreads();
        for (int i = threadIdx.x; i < G * D; i += CD_THREADS)
            store_f32<DT>(out, pair * G * D + i, cstate[2 * G + i] / cstate[G + i / D]);
    } else {
        // Merge the cluster: rank r writes outputs [r·PER, (r+1)·PER) from every CTA's cstate.
        cluster_sync();
        constexpr int PER = (G * D + C - 1) / C;
        const unsigned base = smem_addr(cstate);
        for (int i = rank * PER + threadIdx.x; i < min((rank + 1) * PER, G * D); i += CD_THREADS) {
            const int g = i / D;
            float ms[C];
            float mx = neg_inf();
#pragma unroll
            for (int c = 0; c < C; ++c) {
                ms[c] = ld_cluster(base + 4 * g, c);
                mx = fmaxf(mx, ms[c]);
            }
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (int c = 0; c < C; ++c) {
                const float a = weight(ms[c], mx);
                num += a * ld_cluster(base + 4 * (2 * G + i), c);
                den += a * ld_cluster(base + 4 * (G + g), c);
            }
            store_f32<DT>(out, pair * G * D + i, num / den);
        }
        cluster_sync();  // no CTA leaves while another still reads its shared memory
    }
}
