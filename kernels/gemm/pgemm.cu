// Weight-only GEMM on prepared weights: y = act(alpha x W^T + bias), x M x K bf16 or f16
// (M beyond the GEMV's 16), W N x K in the layout `PreparedWeights` writes (the GEMV's,
// kernels/gemv/prepared.cuh). Every weight is decoded in registers once per CTA and
// multiplied against all the CTA's activation rows: no pass through global memory, no
// bf16 copy of the weights.
//
// Work split. A CTA (4 warps) owns 128 weight rows (two 4-group units of the layout;
// warp w its groups 2w and 2w + 1, so each activation fragment it loads feeds two MMAs)
// and 64 activation rows, over a range of K slabs (gridDim.z splits K when
// the tiles leave SMs idle; pgemm_reduce then adds the partial sums in split order).
// Per 64-element slab the CTA's stage holds the unit's codes and scales (one bulk copy
// each) and the 64 x 64 activations (cp.async, rows padded to 144 bytes so each lane's
// 32-byte reads are conflict-free); each warp decodes its 16 rows into the A fragments
// of four m16n8k16 MMAs and runs them against every n8 tile of activations.
//
// Scales as in the GEMV: NVFP4 and MX weights are multiplied by their block scale in
// bf16 before the MMA (exact); INT4 and FP8 block sums are scaled in f32 per block of
// one n8 tile (FP8 block: per slab, its 128-element block spanning two slabs).
#include "../gemv/prepared.cuh"

namespace bs {
namespace pgemm {

using namespace bs::pgemv;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kDepth = 4;            // stages
constexpr int kUnits = 2;            // layout units (4 groups, 64 rows) per CTA: 128 weight rows
constexpr int kGroups = kUnits * 4;  // 16-row groups per CTA
constexpr int kWG = kGroups / kWarps;  // groups per warp: each B fragment feeds kWG MMAs
constexpr int BM = 64;               // activation rows per CTA
constexpr uint32_t kActPitch = 144;  // bytes per activation row in a stage (128 + 16)

template <class T>
__host__ __device__ constexpr uint32_t weight_bytes() {
    return kGroups * (code_slab_bytes<T>() + stage_scale_bytes<T>());
}
template <class T>
__host__ __device__ constexpr uint32_t stage_bytes() {
    return weight_bytes<T>() + BM * kActPitch;
}


__device__ __forceinline__ void store_out(const PgemmParams& p, uint32_t m, uint32_t n, float acc) {
    const float v = p.bias ? __fmaf_rn(p.alpha, acc, p.bias[n]) : __fmul_rn(p.alpha, acc);
    gemv_store(p, m, n, activation(v, (int)p.activation));
}

template <class T, bool F16>
__device__ __forceinline__ void pgemm(const PgemmParams& p) {
    constexpr int NT = BM / 8;  // n8 tiles of activations
    // f16 activations: whole on the f16 MMA with f16 fragments for the post-scaled
    // schemes, two exact bf16 pieces for the pre-scaled ones (as the GEMV).
    constexpr bool H = F16 && !T::kPre;
    constexpr int PIECES = F16 && !H ? 2 : 1;
    // n8 tiles whose B fragments are loaded together (fewer for the post-scaled schemes,
    // which keep a block sum per tile besides).
    constexpr int kNB = T::kPre ? 4 : 2;
    constexpr uint32_t kCode = code_slab_bytes<T>();
    constexpr uint32_t kScaleStep = scale_step_bytes<T>();
    constexpr uint32_t kScaleSlabs = pair_scales<T>() ? 2u : 1u;
    constexpr uint32_t kStage = stage_bytes<T>();
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ uint64_t bar[kDepth];
    static_assert(kDepth * kStage >= BM * kGroups * 16 * 4, "the tile's sums fit the ring");

    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < (uint32_t)(kDepth * kStage)) __trap();

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t tile_n = blockIdx.x, tile_m = blockIdx.y;
    const uint32_t S = p.slabs;
    const uint32_t s0 = blockIdx.z * p.slabs_per_split;
    const uint32_t s1 = min(S, s0 + p.slabs_per_split);
    const uint32_t count = s1 > s0 ? s1 - s0 : 0u;

    // The CTA's units (kUnits x 4 groups) at slab s0: unit u of the layout holds its 4
    // groups side by side per slab.
    const uint64_t unit0 = (uint64_t)tile_n * kUnits;
    auto code_of = [&](int u, uint32_t slab) {
        return reinterpret_cast<const uint8_t*>(p.w) + ((unit0 + u) * S + slab) * kUnit * kCode;
    };
    auto scale_of = [&](int u, uint32_t slab) {
        return p.s + ((unit0 + u) * (S / kScaleSlabs) + slab / kScaleSlabs) * kUnit * kScaleStep;
    };
    const uint32_t m0 = tile_m * BM;

    if (threadIdx.x == 0) {
#pragma unroll
        // Arrivals per phase: thread 0's expect_tx and every thread's cp.async arrival.
        for (int s = 0; s < kDepth; ++s) mbar_init(&bar[s], kThreads + 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    // Slab i of the range into stage st: thread 0 the weights (per unit: codes, scales),
    // every thread its share of the activations (zero past M and K).
    auto issue_weights = [&](uint32_t i, uint32_t st) {
        if (threadIdx.x != 0) return;
        const uint64_t policy = evict_first_policy();
        uint8_t* stage = smem + st * kStage;
        mbar_expect_tx(&bar[st], weight_bytes<T>());
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
            bulk_copy(stage + u * kUnit * kCode, code_of(u, s0 + i), kUnit * kCode, &bar[st], policy);
            if constexpr (stage_scale_bytes<T>() > 0) {
                bulk_copy(stage + kGroups * kCode + u * kUnit * stage_scale_bytes<T>(), scale_of(u, s0 + i),
                          kUnit * stage_scale_bytes<T>(), &bar[st], policy);
            }
        }
    };
    auto issue_acts = [&](uint32_t i, uint32_t st) {
        uint8_t* acts = smem + st * kStage + weight_bytes<T>();
        const uint32_t k0 = (s0 + i) * kSlabK;
#pragma unroll
        for (int c = threadIdx.x; c < BM * 8; c += kThreads) {
            const uint32_t row = (uint32_t)c / 8, piece = (uint32_t)c % 8;
            const uint32_t m = m0 + row, k = k0 + piece * 8;
            const bool ok = m < p.m && k < p.k;
            const unsigned short* src = reinterpret_cast<const unsigned short*>(p.x) + (uint64_t)m * p.x_stride + k;
            cp_async16(acts + row * kActPitch + piece * 16, ok ? (const void*)src : p.x, ok ? 16u : 0u);
        }
        cp_async_arrive(&bar[st]);
    };

#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
        if ((uint32_t)s < count) issue_weights((uint32_t)s, (uint32_t)s);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
        if ((uint32_t)s < count) issue_acts((uint32_t)s, (uint32_t)s);
    }

    const uint32_t add = p.scale_add;
    float acc[kWG][NT][4];
#pragma unroll
    for (int w = 0; w < kWG; ++w)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[w][nt][j] = 0.0f;

    uint32_t st = 0, phase = 0;
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t* stage = smem + st * kStage;
        mbar_wait(&bar[st], phase);
        // This warp's kWG groups: words, scales, A fragments of the slab's four MMAs.
        uint32_t a[kWG][4][4];
        float f0[kWG][2], f1[kWG][2];
#pragma unroll
        for (int w = 0; w < kWG; ++w) {
            const int gi = kWG * warp + w;  // the group in the CTA: unit gi / 4, slot gi % 4
            Slab<T> d;
            const uint8_t* ts = nullptr;
            if constexpr (T::kSc == Sc::F32T128) ts = scale_of(gi / 4, s0 + i) + (gi % 4) * kScaleStep;
            read_stage<T>(stage, gi, lane, ts, d, kGroups);
            uint32_t sp0, sp1;
            slab_scales<T>(d, add, sp0, sp1);
#pragma unroll
            for (int q = 0; q < 4; ++q) a_fragment<T, H>(d, q, sp0, sp1, a[w][q]);
            f0[w][0] = f0[w][1] = f1[w][0] = f1[w][1] = 0.0f;
            if constexpr (!T::kPre) {
                post_scales<T>(d, 0, f0[w][0], f1[w][0]);
                if constexpr (T::kHalfMap) post_scales<T>(d, 1, f0[w][1], f1[w][1]);
            }
        }
        const uint8_t* acts = stage + weight_bytes<T>();
#pragma unroll
        for (int nb = 0; nb < NT; nb += kNB) {
            uint32_t b[kNB][PIECES][8];
#pragma unroll
            for (int u = 0; u < kNB; ++u) {
                // The lane's activations of row 8 nt + g: 16 consecutive elements (INT4-G32:
                // 8 in each 32-block), registers 2q and 2q + 1 the B fragment of MMA q.
                const uint8_t* row = acts + ((nb + u) * 8 + g) * kActPitch;
                const uint4 lo = *reinterpret_cast<const uint4*>(row + (T::kHalfMap ? 16 : 32) * t);
                const uint4 hi = *reinterpret_cast<const uint4*>(row + (T::kHalfMap ? 64 + 16 * t : 32 * t + 16));
                act_fragments<F16 && !H, PIECES>(lo, hi, b[u]);
            }
            if constexpr (T::kPre) {
#pragma unroll
                for (int q = 0; q < 4; ++q)
#pragma unroll
                    for (int pc = 0; pc < PIECES; ++pc)
#pragma unroll
                        for (int w = 0; w < kWG; ++w)
#pragma unroll
                            for (int u = 0; u < kNB; ++u) mma(acc[w][nb + u], a[w][q], b[u][pc][2 * q], b[u][pc][2 * q + 1]);
            } else {
                // Each scaled block's sum of each n8 tile, then one FMA per value.
                float dt[kWG][kNB][4];
#pragma unroll
                for (int w = 0; w < kWG; ++w)
#pragma unroll
                    for (int u = 0; u < kNB; ++u) dt[w][u][0] = dt[w][u][1] = dt[w][u][2] = dt[w][u][3] = 0.0f;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
#pragma unroll
                    for (int pc = 0; pc < PIECES; ++pc)
#pragma unroll
                        for (int w = 0; w < kWG; ++w)
#pragma unroll
                            for (int u = 0; u < kNB; ++u)
                                mma_as<H>(dt[w][u], a[w][q], b[u][pc][2 * q], b[u][pc][2 * q + 1]);
                    if (q == 3 || (T::kHalfMap && q == 1)) {
                        const int blk = T::kHalfMap ? q / 2 : 0;
#pragma unroll
                        for (int w = 0; w < kWG; ++w)
#pragma unroll
                            for (int u = 0; u < kNB; ++u) {
                                float* c = acc[w][nb + u];
                                c[0] = __fmaf_rn(dt[w][u][0], f0[w][blk], c[0]);
                                c[1] = __fmaf_rn(dt[w][u][1], f0[w][blk], c[1]);
                                c[2] = __fmaf_rn(dt[w][u][2], f1[w][blk], c[2]);
                                c[3] = __fmaf_rn(dt[w][u][3], f1[w][blk], c[3]);
                                dt[w][u][0] = dt[w][u][1] = dt[w][u][2] = dt[w][u][3] = 0.0f;
                            }
                    }
                }
            }
        }
        // Every warp has read the stage: refill it with the slab kDepth on.
        __syncthreads();
        if (i + kDepth < count) {
            issue_weights(i + kDepth, st);
            issue_acts(i + kDepth, st);
        }
        if (++st == (uint32_t)kDepth) {
            st = 0;
            phase ^= 1u;
        }
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

    // The tile's sums through shared memory (the ring is free once every warp is past
    // its last stage): [activation row][weight row], so that the epilogue's loop below
    // (one instance of the activation code, not one per register) reads and writes
    // consecutive weight rows.
    __syncthreads();
    float* tile_sums = reinterpret_cast<float*>(smem);
    constexpr int kRowsN = kGroups * 16;
#pragma unroll
    for (int w = 0; w < kWG; ++w)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int nl = 16 * (kWG * warp + w) + g + 8 * (j >> 1);
                const int ml = 8 * nt + 2 * t + (j & 1);
                tile_sums[ml * kRowsN + nl] = acc[w][nt][j];
            }
    __syncthreads();
    const uint32_t n0 = (uint32_t)kRowsN * tile_n;
    const uint64_t plane = (uint64_t)p.m * p.n;
    if (p.splits == 1) {
        for (int e = threadIdx.x; e < BM * kRowsN; e += kThreads) {
            const uint32_t m = m0 + (uint32_t)(e / kRowsN), n = n0 + (uint32_t)(e % kRowsN);
            if (m < p.m && n < p.n) store_out(p, m, n, tile_sums[e]);
        }
        return;
    }
    // Split K: partial sums [split][M][N], added in split order by pgemm_reduce.
    for (int e = threadIdx.x; e < BM * kRowsN; e += kThreads) {
        const uint32_t m = m0 + (uint32_t)(e / kRowsN), n = n0 + (uint32_t)(e % kRowsN);
        if (m < p.m && n < p.n) p.partial[(uint64_t)blockIdx.z * plane + (uint64_t)m * p.n + n] = tile_sums[e];
    }
}

}  // namespace pgemm
}  // namespace bs

using bs::PgemmParams;

namespace bs {
namespace pgemm {
// CTAs an SM for the bf16 kernels: four for the pre-scaled 4-bit schemes (128 registers;
// their 55 KiB of shared memory lets four fit, which also puts N = 28672 x M = 128 in
// one wave on an H100: 448 tiles, 528 slots; 250 -> 223 us), three for the pre-scaled 6-
// and 8-bit ones (shared memory allows no more), two for INT4 and FP8 block, which keep
// block sums besides (INT4-G128 fits 168 registers, but three CTAs measured slower:
// 280 -> 296 us at that shape). sm_120a keeps three and two: its ~100 KiB of shared
// memory an SM holds one CTA whatever the bound, and 128 registers would spill there.
template <class T>
constexpr int min_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    return T::kPre ? 3 : 2;
#else
    return T::kPre ? (T::kBits == 4 ? 4 : 3) : 2;
#endif
}
}  // namespace pgemm
}  // namespace bs

// Per scheme: bf16 or f16 (`_f16`) activations; the f16 variants (two pieces of each
// activation for the pre-scaled schemes, the f16 MMA for INT4 and FP8 block) take two
// CTAs an SM.
#define BS_PGEMM(name, traits)                                                                           \
    extern "C" __global__ void __launch_bounds__(bs::pgemm::kThreads, bs::pgemm::min_blocks<bs::pgemv::traits>()) \
        pgemm_##name(const PgemmParams p) {                                                              \
        bs::pgemm::pgemm<bs::pgemv::traits, false>(p);                                                   \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(bs::pgemm::kThreads, 2)                                                  \
        pgemm_##name##_f16(const PgemmParams p) {                                                        \
        bs::pgemm::pgemm<bs::pgemv::traits, true>(p);                                                    \
    }

BS_PGEMM(nvfp4, TNvfp4)
BS_PGEMM(mxfp4, TMxfp4)
BS_PGEMM(mxfp6_e2m3, TMxfp6E2m3)
BS_PGEMM(mxfp6_e3m2, TMxfp6E3m2)
BS_PGEMM(mxfp8_e4m3, TMxfp8E4m3)
BS_PGEMM(mxfp8_e5m2, TMxfp8E5m2)
BS_PGEMM(fp8_block_128x128, TFp8T128)
BS_PGEMM(fp8_block_1x128, TFp8R128)
BS_PGEMM(int4_g32, TInt4G32)
BS_PGEMM(int4_g128, TInt4G128)

// The split-K partial sums added in split order, then the epilogue: one thread per
// output (a second launch, which every SM shares, rather than one CTA per tile).
extern "C" __global__ void pgemm_reduce(const PgemmParams p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const uint64_t plane = (uint64_t)p.m * p.n;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (uint64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (uint32_t sp = 0; sp < p.splits; ++sp) v = __fadd_rn(v, p.partial[sp * plane + i]);
        bs::pgemm::store_out(p, (uint32_t)(i / p.n), (uint32_t)(i % p.n), v);
    }
}

namespace bs {
namespace pgemm {

// Prepared weights back to bf16 (row-major, row stride p.out_stride elements, at p.out),
// for the large-M products that run CUTLASS's BF16 GEMM on them: one warp per (row
// group, slab), the lane's words decoded as the GEMV and GEMM decode them, the 16 x 64
// tile gathered in shared memory and written out a row (128 bytes) at a time. Pre-scaled
// schemes write w x scale x 2^-c exactly (the GEMM's alpha carries 2^c); INT4 and FP8
// block write w x scale rounded once from f32 to bf16.
constexpr int kDequantWarps = 8;
constexpr int kTilePitch = 72;  // bf16 elements per row of a warp's tile (64 + 8: no bank conflicts)

template <class T>
__device__ __forceinline__ void dequant(const PgemmParams& p) {
    __shared__ __align__(16) uint16_t tiles[kDequantWarps][16 * kTilePitch];
    uint16_t* tile = tiles[threadIdx.x / 32];
    constexpr int W = T::kWords;
    constexpr uint32_t kCode = code_slab_bytes<T>();
    constexpr uint32_t kScaleStep = scale_step_bytes<T>();
    constexpr uint32_t kScaleSlabs = pair_scales<T>() ? 2u : 1u;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t groups = (p.n + 15) / 16, kslabs = (p.k + kSlabK - 1) / kSlabK;
    const uint64_t jobs = (uint64_t)groups * kslabs;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    for (uint64_t job = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; job < jobs; job += warps) {
        const uint32_t rg = (uint32_t)(job / kslabs), slab = (uint32_t)(job % kslabs);
        const uint8_t* blk = reinterpret_cast<const uint8_t*>(p.w) +
                             (((uint64_t)(rg / kUnit) * p.slabs + slab) * kUnit + rg % kUnit) * kCode;
        Slab<T> d;
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(blk + 16 * lane));
        d.w[0] = a.x;
        d.w[1] = a.y;
        d.w[2] = a.z;
        d.w[3] = a.w;
        if constexpr (W == 8) {
            const uint4 b = __ldg(reinterpret_cast<const uint4*>(blk + 512 + 16 * lane));
            d.w[4] = b.x;
            d.w[5] = b.y;
            d.w[6] = b.z;
            d.w[7] = b.w;
        } else if constexpr (W == 6) {
            const uint2 b = __ldg(reinterpret_cast<const uint2*>(blk + 512 + 8 * lane));
            d.w[4] = b.x;
            d.w[5] = b.y;
        }
        const uint8_t* sc = p.s + (((uint64_t)(rg / kUnit) * (p.slabs / kScaleSlabs) + slab / kScaleSlabs) * kUnit +
                                   rg % kUnit) * kScaleStep;
        if constexpr (T::kSc == Sc::Ue4m3 || T::kSc == Sc::Ue8m0) {
            d.w[W] = __ldg(reinterpret_cast<const uint16_t*>(sc + scale_lane_offset<T>(lane)));
        } else if constexpr (T::kScaleWords == 2) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(sc + scale_lane_offset<T>(lane)));
            d.w[W] = v.x;
            d.w[W + 1] = v.y;
        } else {
            d.w[W] = __ldg(reinterpret_cast<const uint32_t*>(sc + scale_lane_offset<T>(lane)));
        }
        uint32_t sp0 = 0, sp1 = 0;
        float f0[2] = {0.0f, 0.0f}, f1[2] = {0.0f, 0.0f};
        if constexpr (T::kPre) {
            sp0 = scale_pair<T>(d.w[W], 0, p.scale_add);
            sp1 = scale_pair<T>(d.w[W], 1, p.scale_add);
        } else {
            post_scales<T>(d, 0, f0[0], f1[0]);
            if constexpr (T::kHalfMap) post_scales<T>(d, 1, f0[1], f1[1]);
        }
        // INT4 decodes to 8 (c - 8), FP8 to the element x 2^-120 / 2^-112.
        constexpr float kPost = T::kDec == Dec::Int4 ? 0.125f : (T::kDec == Dec::E4M3 ? 0x1p120f : 0x1p112f);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t r[4];
            fragment<T>(d, q, r);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t row = 16u * rg + (uint32_t)g + 8u * (uint32_t)(i & 1);
                const uint32_t k = slab * kSlabK + (T::kHalfMap ? 32u * (q / 2) + 8u * t + 4u * (q % 2) : 16u * t + 4u * q) +
                                   2u * (uint32_t)(i >> 1);
                uint32_t v;
                if constexpr (T::kPre) {
                    v = mul_bf16x2(r[i], (i & 1) ? sp1 : sp0);
                } else {
                    const float s = (i & 1) ? f1[T::kHalfMap ? q / 2 : 0] : f0[T::kHalfMap ? q / 2 : 0];
                    const float2 w = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r[i]));
                    const __nv_bfloat162 o =
                        __floats2bfloat162_rn(__fmul_rn(__fmul_rn(w.x, kPost), s), __fmul_rn(__fmul_rn(w.y, kPost), s));
                    v = *reinterpret_cast<const uint32_t*>(&o);
                }
                const uint32_t kl = k - slab * kSlabK;
                *reinterpret_cast<uint32_t*>(tile + (row - 16u * rg) * kTilePitch + kl) = v;
            }
        }
        __syncwarp();
        // Row r of the tile, 16 bytes a lane: four rows per pass.
#pragma unroll
        for (int pass = 0; pass < 4; ++pass) {
            const uint32_t r = 4u * pass + (uint32_t)lane / 8, c = 8u * ((uint32_t)lane % 8);
            const uint32_t row = 16u * rg + r, k = slab * kSlabK + c;
            if (row < p.n && k < p.k) {
                *reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(p.out) + (uint64_t)row * p.out_stride + k) =
                    *reinterpret_cast<const uint4*>(tile + r * kTilePitch + c);
            }
        }
        __syncwarp();
    }
}

}  // namespace pgemm
}  // namespace bs

#define BS_PDEQUANT(name, traits)                                                                    \
    extern "C" __global__ void pgemm_dequant_##name(const PgemmParams p) { bs::pgemm::dequant<bs::pgemv::traits>(p); }

BS_PDEQUANT(nvfp4, TNvfp4)
BS_PDEQUANT(mxfp4, TMxfp4)
BS_PDEQUANT(mxfp6_e2m3, TMxfp6E2m3)
BS_PDEQUANT(mxfp6_e3m2, TMxfp6E3m2)
BS_PDEQUANT(mxfp8_e4m3, TMxfp8E4m3)
BS_PDEQUANT(mxfp8_e5m2, TMxfp8E5m2)
BS_PDEQUANT(fp8_block_128x128, TFp8T128)
BS_PDEQUANT(fp8_block_1x128, TFp8R128)
BS_PDEQUANT(int4_g32, TInt4G32)
BS_PDEQUANT(int4_g128, TInt4G128)
