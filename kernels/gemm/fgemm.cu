// FP8 block GEMM on Hopper's FP8 tensor cores (sm_90a): D = act(alpha A B^T + bias) with
// A the FP8 block activations (M x K E4M3, f32 scales per 1 x 128 or 128 x 128) and B the
// FP8 block weights (N x K E4M3, f32 scales per 128 x 128), for small M (the host's
// dispatch rule: crates/blockscale-cuda/src/gemm/fgemm.rs).
//
// Work split, as wgemm.cu: a tile is 128 weight rows by TM activation rows (128, or 64:
// the `_m64` kernel) over a range of 128-element K blocks (K splits when the tiles leave
// SMs idle), one CTA an SM taking tiles gridDim.x apart (persistent). The products are
// computed transposed (swap-AB: the weights are the wgmma's M side, so a warpgroup's 64
// rows lie inside one 128 x 128 scale tile and share its scale). Warpgroup 2 produces: its
// thread 0 loads each block's two tiles (weights 128 x 128 bytes, activations TM x 128)
// with TMA tensor copies, 128-byte swizzled, into a ring of stages (4 for TM = 128, 7 for
// 64; completion counted in bytes on the stage's `full` barrier), while its second warp
// copies the block's TM activation scales and the weight tile's scale beside them with
// cp.async (32 more arrivals on `full`, made by the copies' completion, so that warp
// never waits out a load). Warpgroups 0 and 1 each own 64 weight rows. Per block, four
// `wgmma.m64nTMk32.e4m3.e4m3` with both operands in shared memory sum the block into a
// fresh set of sums (the FP8 tensor cores' short accumulator, 128 of K at most: the
// promotion interval of the format); once its group is done, sums x (weight scale x
// activation scale) is added to the f32 accumulator, one FMA per sum, and the stage is
// released. Blocks go G at a time (4 for TM = 64, 2 for 128), each into its own sums, so
// the tensor cores run the later blocks while the earlier ones are promoted.
//
// Split K: the splits of a tile are one cluster of CTAs (at most 8; the host picks the
// count from how many clusters the GPU holds at once). Each split leaves its sums in its
// shared memory; after a cluster barrier each CTA adds its share of the tile's rows from
// every split, in split order, through distributed shared memory and writes those
// outputs; a second barrier keeps the sums until every peer has read them. No partial
// sums in global memory, no counters, a deterministic result. The epilogue goes through
// TM x 512 bytes of shared memory (alpha, bias, activation, 16-byte stores), as wgemm's.
#include "wgmma.cuh"

namespace bs {
namespace fgemm {

using namespace bs::wgemm;

constexpr uint32_t kTile = 128u * 128u;             // bytes: 128 weight rows x 128 E4M3
[[maybe_unused]] constexpr int kScaleW = 128;       // the weight scale's float in a stage's scale area
// The shape of one configuration: TM activation rows a tile (128, or 64 for small M: the
// `_m64` kernel). A stage: the activation tile (TM x 128 bytes), the weight tile, then
// the TM activation scales and the weight scale (1 KiB keeps the next stage 1024-byte
// aligned, the swizzle's period); as many stages as fit beside the epilogue's sums.
template <int TM>
struct Shape {
    static constexpr uint32_t kActTile = TM * 128u;
    static constexpr uint32_t kStage = kActTile + kTile + 1024u;
    static constexpr uint32_t kSums = TM * BN * 4u;
    static constexpr int kDepth = (int)((227u * 1024u - 1024u - kSums) / kStage);
    static constexpr uint32_t kSmem = kDepth * kStage + kSums + 1024u;
};
static_assert(Shape<128>::kDepth == 4 && Shape<64>::kDepth == 7, "the stage counts fgemm.rs assumes");
static_assert(Shape<64>::kSmem <= 227u * 1024u && Shape<128>::kSmem <= 227u * 1024u, "within Hopper's shared memory");
// Registers a thread after `setmaxnreg`: the consumers keep the accumulator and G sets of
// block sums (TM = 128: 3 x 64 floats; TM = 64: 5 x 32).
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;
static_assert(2 * 128 * kConsumerRegs + 128 * kProducerRegs <= 65536, "within the register file");

// A CUtensorMap: the 128 opaque bytes cuTensorMapEncodeTiled writes.
struct alignas(64) TensorMap {
    unsigned long long words[16];
};

// The 128 x 128-byte box at (k, row) of `map` into shared memory at `dst`, counted on
// `bar`; rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_tile(uint8_t* dst, const TensorMap* map, uint32_t k, uint32_t row, uint64_t* bar,
                                         uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%2, %3}], [%4], %5;" ::"r"(smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(smem_u32(bar)), "l"(policy)
        : "memory");
}

// 4 bytes from global to shared memory, zero-filled past `valid` bytes (0 or 4).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, uint32_t valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(valid) : "memory");
}

__device__ __forceinline__ uint64_t evict_last_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// The 32 accumulator operands of an m64n64 wgmma, d[8][4].
#define BS_WGMMA_D64(d)                                                                                      \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// D (64 x TM, f32) = A (64 weight rows x 32 K at `a`) x B (TM activation rows x 32 K at
// `b`)^T + D (`accumulate` != 0) or + 0, E4M3 inputs, both from shared memory.
template <int TM>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[TM / 8][4], uint64_t a, uint64_t b, uint32_t accumulate) {
#if BS_WGEMM_ARCH
    if constexpr (TM == 128) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
            "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
            "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
            "%62, %63}, %64, %65, p, 1, 1;\n}\n"
            : BS_WGMMA_D128(d)
            : "l"(a), "l"(b), "r"(accumulate));
    } else {
        static_assert(TM == 64, "64 or 128 activation rows a tile");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
            "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
            : BS_WGMMA_D64(d)
            : "l"(a), "l"(b), "r"(accumulate));
    }
#else
    (void)d;
    (void)a;
    (void)b;
    (void)accumulate;
    __trap();
#endif
}

// Every thread of the cluster (those of warps at different places too: the non-aligned
// form): arrive with release, wait with acquire semantics at cluster scope.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Eight f32 at shared address `saddr` of this CTA, read from the same place in CTA `rank`
// of the cluster.
__device__ __forceinline__ void load_peer8(uint32_t saddr, uint32_t rank, float (&v)[8]) {
    uint32_t peer;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(saddr), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "r"(peer)
                 : "memory");
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v[4]), "=f"(v[5]), "=f"(v[6]), "=f"(v[7])
                 : "r"(peer + 16u)
                 : "memory");
}

// wgmma.wait_group n for n known once the caller's loop is unrolled (at most 3).
__device__ __forceinline__ void wg_wait_upto(int n) {
    switch (n) {
        case 0: wg_wait<0>(); break;
        case 1: wg_wait<1>(); break;
        case 2: wg_wait<2>(); break;
        default: wg_wait<3>(); break;
    }
}

template <int TM>
__device__ __forceinline__ void gemm(const FgemmParams& fp, const TensorMap* ta, const TensorMap* tb) {
    using Sh = Shape<TM>;
    constexpr int kDepth = Sh::kDepth;
    constexpr uint32_t kStage = Sh::kStage, kActTile = Sh::kActTile;
    const PgemmParams& p = fp.g;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    __shared__ uint64_t full[kDepth], empty[kDepth];

    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < Sh::kSmem) __trap();
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    float* tile_sums = reinterpret_cast<float*>(smem + kDepth * kStage);

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const uint32_t S = p.slabs;  // K blocks
    const uint32_t tiles_n = (p.n + BN - 1) / BN;
    const uint32_t tiles_nm = tiles_n * ((p.m + TM - 1) / TM);
    const uint32_t tiles = tiles_nm * p.splits;
    // With K split, the splits of a tile are one cluster of consecutive CTAs (rank =
    // split); tile_at's order puts them tiles_nm apart.
    const bool clustered = p.splits > 1;
    auto tile_of = [&](uint32_t t) { return tile_at<TM>(p, clustered ? (t % p.splits) * tiles_nm + t / p.splits : t); };

    init_ring(full, empty, 33);  // the TMA thread's expect_tx and the scale warp's 32 lanes
    __syncthreads();

    if (warp >= kConsumerWarps) {
#if BS_WGEMM_ARCH
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs) : "memory");
#endif
        if (warp == kConsumerWarps && lane == 0) {
            // The tiles. The weights do not depend on the kernel before this one
            // (programmatic dependent launch): the first stages' weight tiles are
            // requested before waiting for it, their activation tiles after.
            const uint64_t weights = evict_first_policy(), acts = evict_last_policy();
            uint32_t it = 0;
            bool waited = false;
#pragma unroll 1
            for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
                const Tile tl = tile_of(t);
                uint32_t i = 0;
                if (!waited) {
                    const uint32_t first = min(tl.count, (uint32_t)kDepth);
                    for (; i < first; ++i) {
                        mbar_expect_tx(&full[i], kActTile + kTile);
                        tma_tile(smem + i * kStage + kActTile, tb, 128u * (tl.s0 + i), BN * tl.n, &full[i], weights);
                    }
                    asm volatile("griddepcontrol.wait;" ::: "memory");
                    for (uint32_t j = 0; j < first; ++j)
                        tma_tile(smem + j * kStage, ta, 128u * (tl.s0 + j), TM * tl.m, &full[j], acts);
                    it = first;
                    waited = true;
                }
#pragma unroll 1
                for (; i < tl.count; ++i, ++it) {
                    const uint32_t st = it % kDepth;
                    if (it >= (uint32_t)kDepth) mbar_wait(&empty[st], ((it / kDepth) - 1u) & 1u);
                    mbar_expect_tx(&full[st], kActTile + kTile);
                    tma_tile(smem + st * kStage + kActTile, tb, 128u * (tl.s0 + i), BN * tl.n, &full[st], weights);
                    tma_tile(smem + st * kStage, ta, 128u * (tl.s0 + i), TM * tl.m, &full[st], acts);
                }
            }
        } else if (warp == kConsumerWarps + 1) {
            // The scales: activation row r's at float r of the stage's scale area (zero
            // past M), the weight tile's at float 128. Copied with cp.async, whose
            // completion arrives on `full` by itself: the warp runs ahead to the next
            // stage instead of waiting out each load's latency.
            asm volatile("griddepcontrol.wait;" ::: "memory");
            uint32_t it = 0;
#pragma unroll 1
            for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
                const Tile tl = tile_of(t);
#pragma unroll 1
                for (uint32_t i = 0; i < tl.count; ++i, ++it) {
                    const uint32_t st = it % kDepth, kb = tl.s0 + i;
                    if (it >= (uint32_t)kDepth) mbar_wait(&empty[st], ((it / kDepth) - 1u) & 1u);
                    float* sc = reinterpret_cast<float*>(smem + st * kStage + kActTile + kTile);
#pragma unroll
                    for (int r = 0; r < TM / 32; ++r) {
                        const uint32_t row = TM * tl.m + (uint32_t)lane + 32u * r;
                        const bool live = row < p.m;
                        const uint32_t src_row = live ? (fp.a_tiles ? row / 128u : row) : 0u;
                        cp_async4(sc + lane + 32 * r, fp.sa + (uint64_t)src_row * S + kb, live ? 4u : 0u);
                    }
                    if (lane == 0) cp_async4(sc + kScaleW, fp.sb + (uint64_t)tl.n * S + kb, 4u);
                    cp_async_arrive(&full[st]);
                }
            }
        }
        // The consumers' two cluster barriers count every thread of the cluster.
        if (clustered) {
            cluster_sync();
            cluster_sync();
        }
        return;
    }

    // The consumers: warpgroup wg owns weight rows 64 wg .. 64 wg + 63 of the tile.
#if BS_WGEMM_ARCH
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs) : "memory");
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int wg = warp >> 2, wi = warp & 3;
    const int g = lane >> 2, tq = lane & 3;
    constexpr int J = TM / 8;  // 8-column groups of a warpgroup's 64 x TM sums
    // Blocks a turn, each into its own sums: 4 of 32 registers for 64-row tiles, 2 of 64
    // for 128-row ones.
    constexpr int G = TM == 64 ? 4 : 2;
    float acc[J][4], part[G][J][4];
    uint32_t it = 0;  // blocks consumed, as the producers count them

    // Block n: wait for its stage and queue its four products into `part` as one group.
    auto issue = [&](uint32_t n, float (&sums)[J][4]) {
        const uint32_t st = n % kDepth;
        mbar_wait(&full[st], (n / kDepth) & 1u);
        const uint32_t base = smem_u32(smem + st * kStage);
        fence_acc(sums);
        wg_fence();
#pragma unroll
        for (int q = 0; q < 4; ++q)
            wgmma_e4m3<TM>(sums, tile_desc(base + kActTile + 8192u * wg + 32u * q), tile_desc(base + 32u * q), q > 0);
        wg_commit();
    };
    // Block n's sums, once its group is done: acc += part x (weight scale x activation
    // scale), then its stage is released.
    auto promote = [&](uint32_t n, float (&sums)[J][4]) {
        fence_acc(sums);
        const uint32_t st = n % kDepth;
        const float* sc = reinterpret_cast<const float*>(smem + st * kStage + kActTile + kTile);
        const float w = sc[kScaleW];
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const float2 a = *reinterpret_cast<const float2*>(sc + 8 * j + 2 * tq);
            const float s0 = __fmul_rn(w, a.x), s1 = __fmul_rn(w, a.y);
            acc[j][0] = __fmaf_rn(sums[j][0], s0, acc[j][0]);
            acc[j][1] = __fmaf_rn(sums[j][1], s1, acc[j][1]);
            acc[j][2] = __fmaf_rn(sums[j][2], s0, acc[j][2]);
            acc[j][3] = __fmaf_rn(sums[j][3], s1, acc[j][3]);
        }
        bar_arrive(&empty[st]);
    };

    for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const Tile tl = tile_of(t);
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
        // Blocks G at a time, each into its own sums: the later blocks' groups run while
        // the earlier ones' sums are promoted. (The pipeline is closed at the end of each
        // turn: reading sums while a group of other sums is in flight across the loop's
        // back edge makes ptxas serialize every wgmma, C7514.) The last count % G blocks
        // one at a time.
        const uint32_t first = it, count = tl.count;
        uint32_t i = 0;
        for (; i + G <= count; i += G) {
#pragma unroll
            for (int b = 0; b < G; ++b) issue(first + i + b, part[b]);
#pragma unroll
            for (int b = 0; b < G; ++b) {
                wg_wait_upto(G - 1 - b);
                promote(first + i + b, part[b]);
            }
        }
        for (; i < count; ++i) {
            issue(first + i, part[0]);
            wg_wait<0>();
            promote(first + i, part[0]);
        }
        it = first + count;

        // The tile's sums through shared memory ([activation row][weight row]), once
        // every consumer is done with the previous tile's.
        if (t + gridDim.x >= tiles) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        consumers_sync();
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int nl = 64 * wg + 16 * wi + g + 8 * (c >> 1);
                const int ml = 8 * j + 2 * tq + (c & 1);
                tile_sums[ml * BN + nl] = acc[j][c];
            }
        consumers_sync();
        const uint32_t n0 = (uint32_t)BN * tl.n, m0 = (uint32_t)TM * tl.m;
        const int act = (int)p.activation;
        if (!clustered) {
            switch (act) {
                case 1: store_tile<1, TM>(p, tile_sums, m0, n0, 0); break;
                case 2: store_tile<2, TM>(p, tile_sums, m0, n0, 0); break;
                case 3: store_tile<3, TM>(p, tile_sums, m0, n0, 0); break;
                default: store_tile<0, TM>(p, tile_sums, m0, n0, 0); break;
            }
            continue;
        }
        // Split K: once every split's sums are in its shared memory, CTA `split` of the
        // cluster adds its share of the tile's rows from all of them through distributed
        // shared memory, in split order, and writes those outputs; the second barrier
        // keeps each CTA's sums in place until every peer has read them.
        cluster_sync();
        const uint32_t share = (TM / 8u + p.splits - 1u) / p.splits * 8u;
        const uint32_t r0 = min((uint32_t)TM, tl.split * share), r1 = min((uint32_t)TM, r0 + share);
        auto peers = [&](uint32_t r, uint32_t col, float (&v)[8]) {
            const uint32_t at = smem_u32(tile_sums + r * BN + col);
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = 0.0f;
            // kB splits' sums loaded before any is added (as registers allow).
            constexpr uint32_t kB = TM == 64 ? 4u : 2u;
            for (uint32_t sp0 = 0; sp0 < p.splits; sp0 += kB) {
                float w[kB][8];
#pragma unroll
                for (uint32_t b = 0; b < kB; ++b)
                    if (sp0 + b < p.splits) load_peer8(at, sp0 + b, w[b]);
#pragma unroll
                for (uint32_t b = 0; b < kB; ++b)
                    if (sp0 + b < p.splits) {
#pragma unroll
                        for (int e = 0; e < 8; ++e) v[e] = __fadd_rn(v[e], w[b][e]);
                    }
            }
        };
        switch (act) {
            case 1: store_rows<1, TM>(p, m0, n0, 0, peers, r0, r1); break;
            case 2: store_rows<2, TM>(p, m0, n0, 0, peers, r0, r1); break;
            case 3: store_rows<3, TM>(p, m0, n0, 0, peers, r0, r1); break;
            default: store_rows<0, TM>(p, m0, n0, 0, peers, r0, r1); break;
        }
        cluster_sync();
    }
}

}  // namespace fgemm
}  // namespace bs

using bs::FgemmParams;

// One kernel per tile height: 128 activation rows a tile, or 64 (`_m64`, small M).
#if BS_WGEMM_ARCH
#define BS_FGEMM_BODY(TM) bs::fgemm::gemm<TM>(p, &ta, &tb);
#else
// sm_120a has no wgmma: a stub the host never launches there (fgemm.rs `applies`).
#define BS_FGEMM_BODY(TM) \
    (void)p;              \
    (void)ta;             \
    (void)tb;             \
    __trap();
#endif
#define BS_FGEMM(name, TM)                                                                                        \
    extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1)                                        \
        name(const __grid_constant__ FgemmParams p, const __grid_constant__ bs::fgemm::TensorMap ta,            \
             const __grid_constant__ bs::fgemm::TensorMap tb) {                                                 \
        BS_FGEMM_BODY(TM)                                                                                       \
    }

BS_FGEMM(fgemm_fp8_block, 128)
BS_FGEMM(fgemm_fp8_block_m64, 64)
