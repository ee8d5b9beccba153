// FP8 block GEMM on Hopper's FP8 tensor cores (sm_90a): D = act(alpha A B^T + bias) with
// A the FP8 block activations (M x K E4M3, f32 scales per 1 x 128 or 128 x 128) and B the
// FP8 block weights (N x K E4M3, f32 scales per 128 x 128), for the small and middle M
// where CUTLASS's blockwise kernel leaves the GPU idle (the host's dispatch rule:
// crates/blockscale-cuda/src/gemm/fgemm.rs).
//
// Work split, as wgemm.cu: a tile is 128 weight rows by 128 activation rows over a range
// of 128-element K blocks (K splits when the tiles leave SMs idle), one CTA an SM taking
// tiles gridDim.x apart (persistent). The products are computed transposed (swap-AB: the
// weights are the wgmma's M side, so a warpgroup's 64 rows lie inside one 128 x 128 scale
// tile and share its scale). Warpgroup 2 produces: its thread 0 loads each block's two
// 128 x 128-byte tiles (weights, activations) with TMA tensor copies, 128-byte swizzled,
// into a ring of four stages (completion counted in bytes on the stage's `full` barrier),
// while its second warp copies the block's 128 activation scales and the weight tile's
// scale beside them with cp.async (32 more arrivals on `full`, made by the copies'
// completion, so that warp never waits out a load). Warpgroups 0 and 1 each own 64 weight
// rows: per block, four `wgmma.m64n128k32.e4m3.e4m3` with both operands in shared memory
// sum the block into `part` (the FP8 tensor cores' short accumulator, 128 of K at most:
// the promotion interval of the format), then part times (weight scale x activation
// scale) is added to the f32 accumulator, one FMA per sum, and the stage is released.
// The two consumer warpgroups interleave on the tensor cores.
//
// Split K: every split writes its partial sums; the last CTA of a tile to finish (an
// arrival counter per tile) adds them in split order and runs the epilogue, so no second
// launch and a deterministic result. The epilogue goes through 64 KiB of shared memory
// (alpha, bias, activation, 16-byte stores), as wgemm's.
#include "wgmma.cuh"

namespace bs {
namespace fgemm {

using namespace bs::wgemm;

constexpr int kDepth = 4;                           // stages
constexpr uint32_t kTile = 128u * 128u;             // bytes: 128 rows x 128 E4M3
// A stage: the activation tile, the weight tile, then 128 activation scales and the
// weight scale (1 KiB keeps the next stage 1024-byte aligned, the swizzle's period).
constexpr uint32_t kStage = 2u * kTile + 1024u;
constexpr uint32_t kSmem = kDepth * kStage + BM * BN * 4u + 1024u;
static_assert(kSmem <= 227u * 1024u, "within Hopper's shared memory per CTA");
// Registers a thread after `setmaxnreg`: the consumers keep two 64-float sets (acc,
// part); the producers' loops need more than wgemm's single copying thread.
constexpr int kConsumerRegs = 216;
constexpr int kProducerRegs = 56;
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

// D (64 x 128, f32) = A (64 weight rows x 32 K at `a`) x B (128 activation rows x 32 K at
// `b`)^T + D (`accumulate` != 0) or + 0, E4M3 inputs, both from shared memory.
__device__ __forceinline__ void wgmma_e4m3(float (&d)[16][4], uint64_t a, uint64_t b, uint32_t accumulate) {
#if BS_WGEMM_ARCH
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
        "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
        "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : BS_WGMMA_D128(d)
        : "l"(a), "l"(b), "r"(accumulate));
#else
    (void)d;
    (void)a;
    (void)b;
    (void)accumulate;
    __trap();
#endif
}

__device__ __forceinline__ void gemm(const FgemmParams& fp, const TensorMap* ta, const TensorMap* tb) {
    const PgemmParams& p = fp.g;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    __shared__ uint64_t full[kDepth], empty[kDepth];
    __shared__ uint32_t last_flag;

    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < kSmem) __trap();
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    float* tile_sums = reinterpret_cast<float*>(smem + kDepth * kStage);

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const uint32_t S = p.slabs;  // K blocks
    const uint32_t tiles_n = (p.n + BN - 1) / BN;
    const uint32_t tiles = tiles_n * ((p.m + BM - 1) / BM) * p.splits;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < kDepth; ++s) {
            // `full`: the TMA thread's expect_tx and the scale warp's 32 lanes; `empty`:
            // every consumer thread.
            mbar_init(&full[s], 33);
            mbar_init(&empty[s], kConsumerWarps * 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
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
                const Tile tl = tile_at(p, t);
                uint32_t i = 0;
                if (!waited) {
                    const uint32_t first = min(tl.count, (uint32_t)kDepth);
                    for (; i < first; ++i) {
                        mbar_expect_tx(&full[i], 2u * kTile);
                        tma_tile(smem + i * kStage + kTile, tb, 128u * (tl.s0 + i), BN * tl.n, &full[i], weights);
                    }
                    asm volatile("griddepcontrol.wait;" ::: "memory");
                    for (uint32_t j = 0; j < first; ++j)
                        tma_tile(smem + j * kStage, ta, 128u * (tl.s0 + j), BM * tl.m, &full[j], acts);
                    it = first;
                    waited = true;
                }
#pragma unroll 1
                for (; i < tl.count; ++i, ++it) {
                    const uint32_t st = it % kDepth;
                    if (it >= (uint32_t)kDepth) mbar_wait(&empty[st], ((it / kDepth) - 1u) & 1u);
                    mbar_expect_tx(&full[st], 2u * kTile);
                    tma_tile(smem + st * kStage + kTile, tb, 128u * (tl.s0 + i), BN * tl.n, &full[st], weights);
                    tma_tile(smem + st * kStage, ta, 128u * (tl.s0 + i), BM * tl.m, &full[st], acts);
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
                const Tile tl = tile_at(p, t);
#pragma unroll 1
                for (uint32_t i = 0; i < tl.count; ++i, ++it) {
                    const uint32_t st = it % kDepth, kb = tl.s0 + i;
                    if (it >= (uint32_t)kDepth) mbar_wait(&empty[st], ((it / kDepth) - 1u) & 1u);
                    float* sc = reinterpret_cast<float*>(smem + st * kStage + 2u * kTile);
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const uint32_t row = BM * tl.m + (uint32_t)lane + 32u * r;
                        const bool live = row < p.m;
                        const uint32_t src_row = live ? (fp.a_tiles ? row / 128u : row) : 0u;
                        cp_async4(sc + lane + 32 * r, fp.sa + (uint64_t)src_row * S + kb, live ? 4u : 0u);
                    }
                    if (lane == 0) cp_async4(sc + 128, fp.sb + (uint64_t)tl.n * S + kb, 4u);
                    cp_async_arrive(&full[st]);
                }
            }
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
    float acc[16][4], part[16][4];
    uint32_t it = 0;  // blocks consumed, as the producers count them

    // Block n: wait for its stage, sum it into `part`, then add part times the scales to
    // acc and release the stage.
    auto block = [&](uint32_t n) {
        const uint32_t st = n % kDepth;
        mbar_wait(&full[st], (n / kDepth) & 1u);
        const uint32_t base = smem_u32(smem + st * kStage);
        fence_acc(part);
        wg_fence();
#pragma unroll
        for (int q = 0; q < 4; ++q)
            wgmma_e4m3(part, tile_desc(base + kTile + 8192u * wg + 32u * q), tile_desc(base + 32u * q), q > 0);
        wg_commit();
        wg_wait<0>();
        fence_acc(part);
        const float* sc = reinterpret_cast<const float*>(smem + st * kStage + 2u * kTile);
        const float w = sc[128];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const float2 a = *reinterpret_cast<const float2*>(sc + 8 * j + 2 * tq);
            const float s0 = __fmul_rn(w, a.x), s1 = __fmul_rn(w, a.y);
            acc[j][0] = __fmaf_rn(part[j][0], s0, acc[j][0]);
            acc[j][1] = __fmaf_rn(part[j][1], s1, acc[j][1]);
            acc[j][2] = __fmaf_rn(part[j][2], s0, acc[j][2]);
            acc[j][3] = __fmaf_rn(part[j][3], s1, acc[j][3]);
        }
        bar_arrive(&empty[st]);
    };

    for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const Tile tl = tile_at(p, t);
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
        for (uint32_t i = 0; i < tl.count; ++i, ++it) block(it);

        // The tile's sums through shared memory ([activation row][weight row]), once
        // every consumer is done with the previous tile's.
        if (t + gridDim.x >= tiles) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        consumers_sync();
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int nl = 64 * wg + 16 * wi + g + 8 * (c >> 1);
                const int ml = 8 * j + 2 * tq + (c & 1);
                tile_sums[ml * BN + nl] = acc[j][c];
            }
        consumers_sync();
        const uint32_t n0 = (uint32_t)BN * tl.n, m0 = (uint32_t)BM * tl.m;
        const int act = (int)p.activation;
        if (p.splits == 1) {
            switch (act) {
                case 1: store_tile<1>(p, tile_sums, m0, n0, 0); break;
                case 2: store_tile<2>(p, tile_sums, m0, n0, 0); break;
                case 3: store_tile<3>(p, tile_sums, m0, n0, 0); break;
                default: store_tile<0>(p, tile_sums, m0, n0, 0); break;
            }
            continue;
        }
        // Split K: this split's partial sums, then the tile's last CTA adds them all.
        // The consumers' barrier orders every thread's stores before thread 0's fence,
        // whose cumulativity publishes them at GPU scope before its arrival on the counter;
        // the last CTA's thread 0 fences again after seeing the count, and the barrier
        // orders its threads' reads after that.
        store_tile<-1>(p, tile_sums, m0, n0, tl.split);
        consumers_sync();
        const uint32_t counter = tl.m * tiles_n + tl.n;
        if (threadIdx.x == 0) {
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            last_flag = atomicAdd(fp.counters + counter, 1u) == p.splits - 1u ? 1u : 0u;
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
        }
        consumers_sync();
        if (last_flag) {
            switch (act) {
                case 1: reduce_tile<1>(p, m0, n0); break;
                case 2: reduce_tile<2>(p, m0, n0); break;
                case 3: reduce_tile<3>(p, m0, n0); break;
                default: reduce_tile<0>(p, m0, n0); break;
            }
            if (threadIdx.x == 0) fp.counters[counter] = 0u;
        }
    }
}

}  // namespace fgemm
}  // namespace bs

using bs::FgemmParams;

extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1)
    fgemm_fp8_block(const __grid_constant__ FgemmParams p, const __grid_constant__ bs::fgemm::TensorMap ta,
                    const __grid_constant__ bs::fgemm::TensorMap tb) {
#if BS_WGEMM_ARCH
    bs::fgemm::gemm(p, &ta, &tb);
#else
    // sm_120a has no wgmma: a stub the host never launches there (fgemm.rs `applies`).
    (void)p;
    (void)ta;
    (void)tb;
    __trap();
#endif
}
