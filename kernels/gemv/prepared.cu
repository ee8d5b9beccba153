// GEMV on prepared weights: y = act(alpha x W^T + bias) for M <= 16 bf16 or f16
// activation rows, and the gated act0(..W0..) * act1(..W1..) of SwiGLU MLPs, with W in
// the layout `PreparedWeights` writes once at load time (crates/blockscale-cuda/src/
// prepared/layout.rs holds the layout, docs/KERNELS.md "GEMV on prepared weights" the
// design).
//
// What the layout buys. Each warp's weights arrive by bulk copies (lane 0, one per ring
// stage and matrix: a stage is one slab, or two for plain 4-bit weights at M <= 8, whose
// consecutive slabs are contiguous) in a per-warp shared-memory ring; every lane then
// reads its words with one or two 16-byte loads, already in the order of its
// mma.sync m16n8k16 A fragments,
// with each code's bits already where a few bit operations turn them into bf16: E2M1
// takes 8 operations per 32-bit word of eight codes (a mask, two rotations and masks,
// one multiply that gathers the last four codes' bits), INT4 eleven, E4M3 / E5M2 five
// per four codes.
//
// Scales. NVFP4 and MX weights are multiplied by their block scale in bf16 before the
// MMA (one HMUL2 per two weights, which also undoes the decode's power-of-two offset):
// E2M1 x UE4M3 and every MX element x a power of two are exact in bf16 when the scale
// exponents lie in the window `prepare` checks (it falls back otherwise), so the MMA
// sums exact products over all of K with no per-block step. INT4 (f16 scales) and FP8
// block (f32 scales) are not exact in bf16 after scaling: their blocks are summed by
// the MMA and scaled in f32 afterwards (one FMA per block, row and column).
//
// Work split. A CTA (4 warps) owns G groups of 16 weight rows (G = 4 for 4-bit, 2 for
// 6- and 8-bit weights; gated: half the groups from each matrix, the same output rows)
// and a range of K in chunks of 4 slabs of 64; its warps take the chunks in turn and add
// their sums in warp order at the end. gridDim.y splits K further when the row tiles
// leave the GPU or its last wave idle: each CTA writes its partial sums and the last
// one of a tile to arrive (a counter, reset afterwards) adds them in split order and
// runs the epilogue; or, where the plan chooses it (one wave; more than 8 activation
// rows, or from two rows on when the grid is not spread: prepared.rs), the splits of a
// tile are one cluster and add the same sums in the same order through distributed
// shared memory. The sums never depend on timing.
#include "prepared.cuh"

namespace bs {
namespace pgemv {

// ---------------------------------------------------------------------------------------
// The kernel.

template <class T, int MT, bool F16, bool GATED>
__device__ __forceinline__ void gemv(const PgemvParams& p) {
    constexpr int G = T::kG;
    // f16 activations: the post-scaled schemes (INT4, FP8 block) decode to f16 exactly
    // and take them whole on the f16 MMA; the pre-scaled ones split each into two exact
    // bf16 pieces (their scaled weights need bf16's range), two MMAs a fragment.
    constexpr bool H = F16 && !T::kPre;
    constexpr int PIECES = F16 && !H ? 2 : 1;
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int kDepth = depth<MT>();
    __shared__ uint64_t bars[kWarps][kMaxDepth];
    __shared__ uint32_t last_flag;

    // The warp index through a shuffle, so the compiler knows it is the same in every
    // lane: the copy engine takes its addresses in uniform registers, and addresses it
    // cannot prove uniform cost a loop around every copy.
    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    // Gated or not is a template argument (the entry points branch once), so the copy
    // sizes and matrix count are constants in the main loop.
    constexpr bool gated = GATED;
    constexpr int gout = gated ? G / 2 : G;
    // The row tile and K split: blockIdx x and y, or y and x when the splits of a tile
    // are one cluster (clusters run along x; rank = split).
    uint32_t cluster;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(cluster));
    const bool clustered = cluster > 1;
    const uint32_t tile = clustered ? blockIdx.y : blockIdx.x;
    const uint32_t split = clustered ? blockIdx.x : blockIdx.y;
    const uint32_t rg0 = tile * (uint32_t)gout;

    // The launch must give the shared memory this instantiation lays out (prepared.rs
    // mirrors the size; a mismatch would be silent corruption, so it is a fault).
    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < (uint32_t)(kWarps * depth<MT>() * stage_bytes<T, MT>())) __trap();
    // When the whole grid is resident at once, the next kernel on the stream may launch
    // now: its CTAs take the free slots and stream their own weights in while this one
    // runs (it waits for this grid before reading anything this one writes). With more
    // than a wave the trigger stays after the main loop (the dependent launches only
    // once every CTA here has reached it, so an early one would act in the last wave
    // only; not measured).
    if (p.early_dependents) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

    // This warp's chunks: first + warp, first + warp + 4, ... below last.
    const uint32_t first = split * p.chunks_per_split;
    const uint32_t last = min(p.chunks, first + p.chunks_per_split);
    const int count = first + warp < last ? (int)((last - first - warp + kWarps - 1) / kWarps) : 0;
    const uint32_t slab0 = (first + warp) * kChunk;  // the first chunk's first slab

    // Per matrix: the run of this CTA's row groups (gm of them from row group rg0 on),
    // at slab0; per group: the scale bias.
    constexpr uint32_t kCode = code_slab_bytes<T>();
    constexpr uint32_t kScaleStep = scale_step_bytes<T>();
    constexpr uint32_t kScaleSlabs = pair_scales<T>() ? 2u : 1u;
    constexpr int mats = gated ? 2 : 1;
    constexpr uint32_t gm = (uint32_t)gout;
    MatPtr mp[2];
#pragma unroll
    for (int mat = 0; mat < 2; ++mat) {
        const uint64_t unit = rg0 / kUnit, within = rg0 % kUnit;
        const uint64_t steps = p.slabs / kScaleSlabs;
        mp[mat].w = reinterpret_cast<const uint8_t*>(p.w[mat]) + ((unit * p.slabs + slab0) * kUnit + within) * kCode;
        mp[mat].s = p.s[mat] + ((unit * steps + slab0 / kScaleSlabs) * kUnit + within) * kScaleStep;
    }
    uint32_t add[G];
#pragma unroll
    for (int gi = 0; gi < G; ++gi) add[gi] = p.scale_add[gated && gi >= G / 2 ? 1 : 0];
    // The lane's activation rows (g and g + 8), from element 0; past M, any readable
    // address (nothing is read from it).
    const unsigned short* xrow[MT];
    bool xlive[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const uint32_t m = (uint32_t)(g + 8 * mt);
        xlive[mt] = m < p.m;
        const unsigned short* row = reinterpret_cast<const unsigned short*>(p.x) + (xlive[mt] ? (uint64_t)m * p.x_stride : 0u);
        // One register pair for the row's address, so each copy adds only its element
        // index to it (the compiler would otherwise rebuild it from p.x every slab).
        asm("mov.b64 %0, %1;" : "=l"(xrow[mt]) : "l"(row));
    }
    uint32_t k_chunk = slab0 * kSlabK;
    // Per chunk of this warp the pointers move on by kWarps chunks.
    constexpr uint32_t kNextCode = kWarps * kChunk * kUnit * kCode;
    constexpr uint32_t kNextScale = kWarps * kChunk / kScaleSlabs * kUnit * kScaleStep;
    constexpr uint32_t kNextX = kWarps * kChunk * kSlabK;

    // Plain 4-bit weights (the CTA's groups one whole unit of the layout) with an even
    // ring take two slabs a stage: one bulk copy for both slabs' codes, one for their
    // scales, one barrier and one wait, halving the bookkeeping a slab.
    constexpr int SPS = !gated && G == (int)kUnit && kDepth % 2 == 0 ? 2 : 1;
    constexpr int kStages = kDepth / SPS;
    constexpr uint32_t kStage = SPS * stage_bytes<T, MT>();
    constexpr uint32_t kWeights = weight_stage_bytes<T, SPS>();
    uint8_t* ring = smem + warp * kDepth * stage_bytes<T, MT>();
    uint64_t* bar = bars[warp];
    if (lane == 0) {
#pragma unroll
        // Arrivals per phase: lane 0's expect_tx, and every lane's cp.async arrival.
        for (int s = 0; s < kStages; ++s) mbar_init(&bar[s], 33);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncwarp();

    float acc[G][MT][4], dt[G][MT][4];
#pragma unroll
    for (int gi = 0; gi < G; ++gi)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[gi][mt][j] = dt[gi][mt][j] = 0.0f;

    // Lane 0 queues a stage's weights; every lane its activations. `s`: the slab counted
    // from the current chunk's first (4 and on: the warp's next chunk).
    const uint64_t policy = evict_first_policy();
    auto issue_weights = [&](int s, uint32_t st) {
        if (lane == 0) {
            issue_stage<T, SPS>(mp, mats, gm, s, ring + st * kStage, &bar[st], kNextCode, kNextScale, policy);
        }
    };
    auto issue_acts = [&](int s, uint32_t st) {
        // Slabs past the chunk (s >= kChunk) are the warp's next chunk's, kWarps chunks on.
        const uint32_t k0 = k_chunk + (s >= kChunk ? kNextX + (uint32_t)(s - kChunk) * kSlabK : (uint32_t)s * kSlabK);
        uint8_t* stage = ring + st * kStage;
#pragma unroll
        for (int h = 0; h < SPS; ++h) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                issue_x<T>(xrow[mt], xlive[mt], k0 + h * kSlabK, p.k, t, lane, stage + kWeights + (h * MT + mt) * 1024);
            }
        }
        cp_async_arrive(&bar[st]);
    };
    // The weights do not depend on earlier kernels (prepared once, never written by a
    // GEMV): with programmatic dependent launch their first stages stream in while the
    // previous kernel on the stream finishes. Activations, partial sums and outputs wait
    // for it (griddepcontrol.wait returns at once without that launch attribute).
    if (count > 0) {
#pragma unroll
        for (int s = 0; s < kDepth; s += SPS) issue_weights(s, (uint32_t)(s / SPS));
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    BS_PROBE_MARK(0);
    if (count > 0) {
#pragma unroll
        for (int s = 0; s < kDepth; s += SPS) issue_acts(s, (uint32_t)(s / SPS));
    }
    // FP8 128x128: each group's tile scale (4 bytes a group and slab pair), read from
    // global memory.
    const uint8_t* tile_scale[G];
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
        const bool up = gated && gi >= G / 2;
        tile_scale[gi] = (up ? mp[1].s : mp[0].s) + (gi - (up ? gout : 0)) * kScaleStep;
    }

    // The stage being consumed and its barrier phase: each stage, once read, is refilled
    // with the slabs kDepth on.
    uint32_t st = 0, phase = 0;
    for (int ci = 0; ci < count; ++ci) {
        const bool more = ci + 1 < count;
#pragma unroll
        for (int s0 = 0; s0 < kChunk; s0 += SPS) {
            const uint8_t* stage = ring + st * kStage;
            mbar_wait(&bar[st], phase);
#pragma unroll
            for (int h = 0; h < SPS; ++h) {
                const int s = s0 + h;
                uint32_t b[MT][PIECES][8];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const uint4* xs = reinterpret_cast<const uint4*>(stage + kWeights + (h * MT + mt) * 1024);
                    const uint4 lo = xs[lane], hi = xs[32 + lane];
                    act_fragments<F16 && !H, PIECES>(lo, hi, b[mt]);
                }
                // Slab h's codes, and its scales (a pair's shared scales: the stage's one set).
                const uint8_t* codes = stage + h * G * kCode;
                const uint8_t* scales =
                    stage + SPS * G * kCode + (stage_scale_sets<T, SPS>() == 1 ? 0 : h) * G * stage_scale_bytes<T>();
#pragma unroll
                for (int gi = 0; gi < G; ++gi) {
                    Slab<T> d;
                    read_slab<T>(codes, scales, gi, lane, tile_scale[gi] + (s / 2) * kUnit * kScaleStep, d);
                    slab_product<T, MT, PIECES, H>(d, b, add[gi], (s & 1) != 0, acc[gi], dt[gi]);
                }
            }
            // Every lane has read the stage: refill it with the slabs kDepth on.
            __syncwarp();
            if (s0 + kDepth < kChunk || more) {
                issue_weights(s0 + kDepth, st);
                issue_acts(s0 + kDepth, st);
            }
            if (++st == (uint32_t)kStages) {
                st = 0;
                phase ^= 1u;
            }
        }
#pragma unroll
        for (int mat = 0; mat < 2; ++mat) {
            mp[mat].w += kNextCode;
            mp[mat].s += kNextScale;
        }
#pragma unroll
        for (int gi = 0; gi < G; ++gi) tile_scale[gi] += kNextScale;
        k_chunk += kNextX;
    }
    // The next kernel on the stream may start launching (its own weights do not depend
    // on this one; it waits for this grid before touching anything this one writes).
    BS_PROBE_MARK(1);
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    __syncthreads();  // every warp's copies have landed and been read: smem is free
    static_assert((kWarps + 2) * G * MT * 32 * 4 * 4 <= kWarps * kDepth * stage_bytes<T, MT>(),
                  "the reduction and the clustered splits' sums fit the ring");

    // The warps' sums, added in warp order (in the ring's shared memory).
    auto red = reinterpret_cast<float(*)[G][MT][32][4]>(smem);
#pragma unroll
    for (int gi = 0; gi < G; ++gi)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < 4; ++j) red[warp][gi][mt][lane][j] = acc[gi][mt][j];
    __syncthreads();
    BS_PROBE_MARK(2);

    const uint32_t planes = (uint32_t)mats;
    const uint64_t plane = (uint64_t)p.m * p.n;
    const int outputs = gout * MT * 32 * 4;
    // Clustered splits: this CTA's sums (then the up matrix's), for the peers to read.
    float* sums = reinterpret_cast<float*>(smem) + kWarps * G * MT * 32 * 4;
    // D fragment j of lane l: weight rows l/4 and l/4 + 8 of the group, activation rows
    // 2 (l%4) + {0,1}.
    auto row_of = [&](int e) {
        const int gi = e / (MT * 128), l = (e / 4) % 32, j = e % 4;
        return 16u * (rg0 + (uint32_t)gi) + (uint32_t)(l / 4) + 8u * (uint32_t)(j >> 1);
    };
    auto col_of = [&](int e) {
        const int mt = (e / 128) % MT, l = (e / 4) % 32, j = e % 4;
        return 8u * (uint32_t)mt + 2u * (uint32_t)(l % 4) + (uint32_t)(j & 1);
    };
    for (int e = threadIdx.x; e < outputs; e += kThreads) {
        const int gi = e / (MT * 128), mt = (e / 128) % MT, l = (e / 4) % 32, j = e % 4;
        float v0 = 0.0f, v1 = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            v0 = __fadd_rn(v0, red[w][gi][mt][l][j]);
            if (gated) v1 = __fadd_rn(v1, red[w][gi + G / 2][mt][l][j]);
        }
        if (clustered) {
            sums[e] = v0;
            if (gated) sums[outputs + e] = v1;
            continue;
        }
        const uint32_t n = row_of(e), m = col_of(e);
        if (n >= p.n || m >= p.m) continue;
        if (p.splits == 1) {
            gemv_write_output(p, m, n, v0, v1);
        } else {
            float* part = p.partial + (uint64_t)split * planes * plane + (uint64_t)m * p.n + n;
            part[0] = v0;
            if (gated) part[plane] = v1;
        }
    }
    BS_PROBE_MARK(3);
    if (p.splits == 1) return;

    if (clustered) {
        // The splits of this tile are the cluster: once every CTA's sums are in its shared
        // memory, CTA `split` adds its share of the outputs from all of them in split
        // order (the order of the partials below: the same sums, bit for bit) through
        // distributed shared memory, and none leaves before every peer has read it.
        cluster_sync();
        const int share = (outputs + (int)cluster - 1) / (int)cluster;
        const int e1 = min(outputs, ((int)split + 1) * share);
        for (int e = (int)split * share + threadIdx.x; e < e1; e += kThreads) {
            const uint32_t n = row_of(e), m = col_of(e);
            if (n >= p.n || m >= p.m) continue;
            float v0 = 0.0f, v1 = 0.0f;
            for (uint32_t sp = 0; sp < cluster; ++sp) {
                v0 = __fadd_rn(v0, load_peer(smem_u32(sums + e), sp));
                if (gated) v1 = __fadd_rn(v1, load_peer(smem_u32(sums + outputs + e), sp));
            }
            gemv_write_output(p, m, n, v0, v1);
        }
        cluster_sync();
        return;
    }

    // Split K: the last CTA of this row tile to finish adds the partials in split order.
    // The CTA barrier orders every thread's partials before thread 0's release (a
    // release is cumulative), the count's acquire orders the last CTA's reads after
    // every other CTA's release, and the second barrier hands that on to its threads:
    // one fence a CTA instead of one a thread.
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t done;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(done) : "l"(p.counters + tile) : "memory");
        last_flag = done == p.splits - 1 ? 1u : 0u;
    }
    __syncthreads();
    BS_PROBE_MARK(4);
    if (!last_flag) return;
    BS_PROBE_MARK(5);
    const uint32_t row0 = 16u * rg0;
    const uint32_t rows = min(p.n, row0 + 16u * (uint32_t)gout) - min(p.n, row0);
    for (uint32_t e = threadIdx.x; e < rows * p.m; e += kThreads) {
        const uint32_t m = e / rows, n = row0 + e % rows;
        float v0 = 0.0f, v1 = 0.0f;
        for (uint32_t sp = 0; sp < p.splits; ++sp) {
            const float* part = p.partial + (uint64_t)sp * planes * plane + (uint64_t)m * p.n + n;
            v0 = __fadd_rn(v0, __ldcg(part));
            if (gated) v1 = __fadd_rn(v1, __ldcg(part + plane));
        }
        gemv_write_output(p, m, n, v0, v1);
    }
    BS_PROBE_MARK(6);
    if (threadIdx.x == 0) p.counters[tile] = 0u;
}

// The kernel bodies: one for plain weights, one for the gated pair.
template <class T, int MT, bool F16>
__device__ __forceinline__ void entry(const PgemvParams& p) {
    if (p.gated != 0) {
        gemv<T, MT, F16, true>(p);
    } else {
        gemv<T, MT, F16, false>(p);
    }
}

}  // namespace pgemv
}  // namespace bs

using bs::PgemvParams;

// Per scheme: M <= 8 rows of bf16 (`pgemv_{name}`) or f16 (`_f16`), M <= 16 of bf16
// (`_m16`) or f16 (`_m16_f16`).
#define BS_PGEMV(name, traits)                                                                        \
    extern "C" __global__ void __launch_bounds__(bs::pgemv::kThreads, 3) pgemv_##name(const PgemvParams p) { \
        bs::pgemv::entry<bs::pgemv::traits, 1, false>(p);                                             \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(bs::pgemv::kThreads, 2) pgemv_##name##_f16(const PgemvParams p) { \
        bs::pgemv::entry<bs::pgemv::traits, 1, true>(p);                                              \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(bs::pgemv::kThreads, 2) pgemv_##name##_m16(const PgemvParams p) { \
        bs::pgemv::entry<bs::pgemv::traits, 2, false>(p);                                             \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(bs::pgemv::kThreads, 1) pgemv_##name##_m16_f16(const PgemvParams p) { \
        bs::pgemv::entry<bs::pgemv::traits, 2, true>(p);                                              \
    }

BS_PGEMV(nvfp4, TNvfp4)
BS_PGEMV(mxfp4, TMxfp4)
BS_PGEMV(mxfp6_e2m3, TMxfp6E2m3)
BS_PGEMV(mxfp6_e3m2, TMxfp6E3m2)
BS_PGEMV(mxfp8_e4m3, TMxfp8E4m3)
BS_PGEMV(mxfp8_e5m2, TMxfp8E5m2)
BS_PGEMV(fp8_block_128x128, TFp8T128)
BS_PGEMV(fp8_block_1x128, TFp8R128)
BS_PGEMV(int4_g32, TInt4G32)
BS_PGEMV(int4_g128, TInt4G128)
