// Weight-only GEMM on prepared weights for Hopper (sm_90a): y = act(alpha x W^T + bias)
// with bf16 activations and every scheme, or f16 activations and INT4 / FP8 block (the
// `_f16` kernels: weights decoded to f16), on `wgmma`, warp-specialized. (f16 with NVFP4
// and MX, and SM120, run pgemm.)
//
// Work split. A tile is 128 weight rows (two 4-group units of the layout) by 128
// activation rows over a range of 64-element K slabs (K splits when the tiles leave SMs
// idle: the splits of a tile are one cluster of CTAs, which adds their sums through
// distributed shared memory in split order, wgmma.cuh `store_split`). One CTA an SM takes
// tiles gridDim.x apart (persistent). Warpgroup 2 is the producer: its thread 0 copies
// each slab's codes, scales and activation tile into a ring of six stages with bulk
// copies, completion counted in bytes on the stage's `full` barrier, and refills a stage
// once every consumer thread has arrived on its `empty` barrier, running on into the
// next tile's slabs while the consumers finish one. (Its registers go to the
// consumers: `setmaxnreg` 40 and 232.) Warpgroups 0 and 1 each own one unit (64 weight
// rows): every warp decodes its 16 rows of a slab in registers into the A fragments of
// four k16 steps (the decoders and scale steps of the GEMV, kernels/gemv/prepared.cuh)
// and the warpgroup issues four `wgmma.m64n128k16` with those registers as A and the
// stage's activation tile as B, one commit group a slab. Three register sets keep two
// groups on the tensor cores while the next slab is decoded (`wgmma.wait_group 2`);
// a stage is released once its group is done. INT4 and FP8 block (post-scaled) multiply
// each block (INT4-G32: the two 32-element halves of a slab; the others: 128 elements,
// two slabs) into separate sums and add them to the accumulators times their f32 scales
// once their groups are done. (NVFP4 and MX at M > 128 may take wide tiles of 256
// activation rows instead: `gemm_wide` below.) The epilogue goes through its own 66 KiB
// of shared memory (the 128 x 128 f32 sums, rows padded by 4 floats so the consumers'
// stores do not conflict; alpha, bias, activation, 16-byte stores).
//
// The activation tile. The layout's k16 step q of a slab covers K elements
// 16 t + 4 q + e (t, e < 4): fragment slots 2t, 2t + 1 hold the slab's natural pair
// 8 t + 2 q and slots 2t + 8, 2t + 9 the pair 8 t + 2 q + 1. So 16-byte chunk c of a
// tile row holds the natural pairs c, 8 + c, 16 + c, 24 + c, and k16 step q reads
// chunks 2q and 2q + 1. (INT4-G32's half map: step q covers 32 (q / 2) + 8 t + 4 (q % 2)
// + e, so chunk c holds the natural pairs 16 (c / 4) + c % 4 + 4 t, t < 4; its tiles come
// from `wgemm_acts_half`.) `wgemm_acts` writes every (128-row tile, slab) of the
// activations in that order, 128-byte swizzled (chunk c of row r at 16 (c ^ (r % 8))),
// into the workspace before the GEMM: 16 KiB per tile and slab that one bulk copy brings.
// (That 4-byte permutation is why the activations cannot come straight from a TMA
// tensor copy; 4-byte cp.async from the producer warpgroup measured 3x slower, and a
// TMA copy rewritten in shared memory by the producer's idle warps 1.03-1.5x slower in
// two variants: docs/DECISIONS.md #61.)
#include "../quant/decode.cuh"
#include "wgmma.cuh"

namespace bs {
namespace wgemm {

constexpr int kDepth = 6;                              // stages
constexpr int kUnits = 2;                              // layout units (64 rows) per CTA
constexpr int kSets = 3;                               // A register sets: groups in flight + 1
constexpr int kGroups = kUnits * 4;                    // 16-row groups per CTA
static_assert(BN == kGroups * 16, "a CTA's weight rows are its units' groups");
constexpr uint32_t kActTile = BM * 128;                // bytes: BM rows x 64 bf16

template <class T>
__host__ __device__ constexpr uint32_t weight_bytes() {
    return kGroups * (code_slab_bytes<T>() + stage_scale_bytes<T>());
}
// A stage: the activation tile first (1024-byte aligned: the swizzle's period), then
// the weights, rounded up to keep the next stage's tile aligned.
template <class T>
__host__ __device__ constexpr uint32_t stage_bytes() {
    return (kActTile + weight_bytes<T>() + 1023u) / 1024u * 1024u;
}
// Dynamic shared memory: the stages, the epilogue's tile of f32 sums, and the slack
// that aligns the first stage to 1024 bytes.
template <class T>
__host__ __device__ constexpr uint32_t smem_bytes() {
    return kDepth * stage_bytes<T>() + BM * kSumsLd * 4u + 1024u;
}

// D (64 x 128, f32) = A (this warp's 16 rows of 64, registers) x B (128 rows of the
// activation tile at `desc`) + D (`accumulate` != 0) or + 0; bf16 inputs, or f16 (F16).
template <bool F16 = false>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc,
                                              uint32_t accumulate = 1u) {
#if BS_WGEMM_ARCH
    if constexpr (F16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " BS_WGMMA_REGS128
                     : BS_WGMMA_D128(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " BS_WGMMA_REGS128
                     : BS_WGMMA_D128(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
    }
#else
    (void)d;
    (void)a;
    (void)desc;
    (void)accumulate;
    __trap();
#endif
}

// Registers a thread after `setmaxnreg` (the CTA's 384 x 168 registers hold 24 x 128 +
// 240 x 256 or 40 x 128 + 232 x 256: the consumers' increase waits until the producer's
// decrease has freed enough, so a larger producer share hangs the kernel):
// INT4-G32 keeps two sets of block sums besides the accumulators (64 + 2 x 64 + 2 x 16
// fragments), the others one at most.
// Stream-K (sk_piece) runs on the 128-row tiles of every scheme but INT4-G32 (its 24
// producer and 240 consumer registers leave no room for it), in the same 40 / 232 split.
template <class T, int HALVES>
__host__ __device__ constexpr bool stream_k() {
    return HALVES == 1 && !T::kHalfMap;
}
template <class T>
__host__ __device__ constexpr int consumer_regs() {
    return T::kHalfMap ? 240 : 232;
}
template <class T>
__host__ __device__ constexpr int producer_regs() {
    return T::kHalfMap ? 24 : 40;
}

// `v`, kept in a register: the compiler neither recomputes it (a shared address from the
// CTA's id, each time it is used) nor looks through it.
__device__ __forceinline__ uint32_t kept(uint32_t v) {
    asm volatile("mov.b32 %0, %0;" : "+r"(v));
    return v;
}

// A place in a ring of barriers: the slot and its phase parity, counted as they go (no
// division a slab).
struct Ring {
    uint32_t at, phase;
    __device__ __forceinline__ void next(uint32_t size) {
        if (++at == size) {
            at = 0;
            phase ^= 1u;
        }
    }
};

// The producer (one thread): copies each tile's slabs (the activation tile, HALVES
// 128-row tiles of it, then the CTA's units' codes and scales) into the ring of DEPTH
// stages of kStage bytes, a stage once every consumer thread has released it, running
// on into the next tile's slabs while the consumers finish one. (Wide tiles: a half
// wholly past M is not copied; its rows of the stage keep stale values, which reach
// only sums the epilogue does not store.)
template <class T, int DEPTH, uint32_t kStage, int HALVES = 1>
__device__ __forceinline__ void produce(const PgemmParams& p, uint8_t* smem, uint64_t (&full)[DEPTH],
                                        uint64_t (&empty)[DEPTH]) {
    constexpr uint32_t kScaleSlabs = pair_scales<T>() ? 2u : 1u;
    constexpr uint32_t kCode = code_slab_bytes<T>();
    constexpr uint32_t kActs = HALVES * kActTile;
    const uint32_t S = p.slabs;
    // The layout holds whole pairs of units: every tile's units are inside it.
    uint32_t it = 0;  // slabs issued: stage it % DEPTH
    bool waited = false;
    const uint64_t policy = evict_first_policy();
    // One tile's slabs (a whole tile, a K split's or a stream-K segment's).
    auto tile = [&](const Tile& tl) {
        const uint64_t unit0 = (uint64_t)tl.n * kUnits;
        // The 128-row activation tiles of the tile's halves inside M.
        const uint32_t halves = min((uint32_t)HALVES, (p.m - tl.m * HALVES * BM + BM - 1) / BM);
        const uint32_t bytes = weight_bytes<T>() + halves * kActTile;
        const uint8_t* acts =
            reinterpret_cast<const uint8_t*>(p.x) + ((uint64_t)tl.m * HALVES * S + tl.s0) * kActTile;
        auto weights = [&](uint32_t i, uint32_t st) {
            uint8_t* w = smem + st * kStage + kActs;
#pragma unroll
            for (int u = 0; u < kUnits; ++u) {
                const uint8_t* code =
                    reinterpret_cast<const uint8_t*>(p.w) + ((unit0 + u) * S + tl.s0 + i) * kUnit * kCode;
                bulk_copy(w + u * kUnit * kCode, code, kUnit * kCode, &full[st], policy);
                if constexpr (stage_scale_bytes<T>() > 0) {
                    // Both slabs of a pair bring the pair's scales.
                    const uint8_t* sc = p.s + ((unit0 + u) * (S / kScaleSlabs) + (tl.s0 + i) / kScaleSlabs) *
                                                  kUnit * scale_step_bytes<T>();
                    bulk_copy(w + kGroups * kCode + u * kUnit * stage_scale_bytes<T>(), sc,
                              kUnit * stage_scale_bytes<T>(), &full[st], policy);
                }
            }
        };
        auto activations = [&](uint32_t i, uint32_t st) {
            for (uint32_t h = 0; h < halves; ++h) {
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                        smem_u32(smem + st * kStage + h * kActTile)),
                    "l"(acts + ((uint64_t)h * S + i) * kActTile), "r"(kActTile), "r"(smem_u32(&full[st]))
                    : "memory");
            }
        };
        uint32_t i = 0;
        if (!waited) {
            // The first stages' weights before the wait for the kernel that wrote the
            // activation tiles (programmatic dependent launch), their tiles after it.
            const uint32_t first = min(tl.count, (uint32_t)DEPTH);
            for (; i < first; ++i) {
                mbar_expect_tx(&full[i], bytes);
                weights(i, i);
            }
            asm volatile("griddepcontrol.wait;" ::: "memory");
            for (uint32_t j = 0; j < first; ++j) activations(j, j);
            it = first;
            waited = true;
        }
        for (; i < tl.count; ++i, ++it) {
            const uint32_t st = it % DEPTH;
            if (it >= (uint32_t)DEPTH) mbar_wait(&empty[st], ((it / DEPTH) - 1u) & 1u);
            mbar_expect_tx(&full[st], bytes);
            weights(i, st);
            activations(i, st);
        }
    };
    // The whole items, then the stream-K segments, in two loops: in one, the segments'
    // plan (shared memory) would keep the copies' addresses out of uniform registers.
    Tile tl;
    for (uint32_t k = 0; whole_piece<HALVES * BM>(p, k, tl); ++k) tile(tl);
    if constexpr (stream_k<T, HALVES>()) {
        sk_publish<BM>(p);
#pragma unroll 1
        for (uint32_t e = 0; e < 2u; ++e)
            if (sk_piece<BM>(p, e, tl)) tile(tl);
    }
}

// D (64 x 256, f32) += A (this warp's 16 rows of 64, registers) x B (256 rows at `desc`).
__device__ __forceinline__ void wgmma_m64n256(float (&d)[32][4], const uint32_t (&a)[4], uint64_t desc) {
#if BS_WGEMM_ARCH
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " BS_WGMMA_REGS256
                 : BS_WGMMA_D256(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
#else
    (void)d;
    (void)a;
    (void)desc;
    __trap();
#endif
}

// The warps' roles, after the ring's barriers are set up: the producer warpgroup (warps
// kConsumerWarps ..) gives its registers to the consumers (`setmaxnreg`) and its thread
// 0 copies (`produce`, HALVES 128-row activation tiles a stage), running ahead into the
// next tile's slabs while the consumers finish one; the consumers take their
// registers and wait for the kernel that wrote the activation tiles. Returns whether the
// calling thread is a producer one, which is then done (with K split, the consumers'
// cluster barriers wait for the cluster's non-exited threads only: the producers leave
// without arriving).
template <class T, int DEPTH, uint32_t kStage, int HALVES>
__device__ __forceinline__ bool roles(const PgemmParams& p, uint8_t* smem, uint64_t (&full)[DEPTH],
                                      uint64_t (&empty)[DEPTH], int warp, int lane) {
    if constexpr (stream_k<T, HALVES>()) sk_init(p);  // (before init_ring's fence)
    init_ring(full, empty, 1);                         // the producer's expect_tx
    __syncthreads();
    if (warp >= kConsumerWarps) {
#if BS_WGEMM_ARCH
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(producer_regs<T>()) : "memory");
#endif
        if (warp == kConsumerWarps && lane == 0) produce<T, DEPTH, kStage, HALVES>(p, smem, full, empty);
        return true;
    }
#if BS_WGEMM_ARCH
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(consumer_regs<T>()) : "memory");
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
    return false;
}

// One tile's slabs for the pre-scaled schemes, `gemm`'s 128-row tiles (J = 16:
// `wgmma.m64n128k16`) or `gemm_wide`'s 256-row ones (J = 32: `m64n256k16`). Per slab:
// wait for its stage (DEPTH stages of kStage bytes, the codes and scales kActs bytes in),
// decode this warp's rows into register set c of SETS, queue the four products as one
// group, wait until at most SETS - 1 groups are pending (the next slab's decode overlaps
// them) and release the stage whose group is done. Shared addresses stay in registers
// (`full0`, `empty0`, `b_lo`: the ring's barriers and the first stage's descriptor low
// word) and the stages are counted as they go (`ring`: the next slab's, `freed`: the next
// to release), so that between groups the consumers issue little besides the decode.
template <class T, int SETS, int DEPTH, uint32_t kStage, uint32_t kActs, int J>
__device__ __forceinline__ void pre_scaled_tile(uint8_t* smem, uint32_t full0, uint32_t empty0, uint32_t b_lo, int gi,
                                                int lane, uint32_t add, uint32_t count, Ring& ring, Ring& freed,
                                                float (&acc)[J][4], uint32_t (&a)[SETS][4][4]) {
    static_assert(J == 16 || J == 32, "m64n128 or m64n256");
    auto step = [&](uint32_t (&ar)[4][4], bool release) {
        mbar_wait_at(full0 + 8u * ring.at, ring.phase);
        Slab<T> d;
        read_stage<T>(smem + ring.at * kStage + kActs, gi, lane, nullptr, d, kGroups);
        uint32_t s0, s1;
        slab_scales<T>(d, add, s0, s1);
#pragma unroll
        for (int q = 0; q < 4; ++q) mma_fragment<T>(d, q, s0, s1, ar[q]);
        const uint32_t bs = b_lo + ring.at * (kStage >> 4);
        fence_acc(acc);
        wg_fence();
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            if constexpr (J == 16) {
                wgmma_m64n128(acc, ar[q], desc_of(bs + 2u * q));
            } else {
                wgmma_m64n256(acc, ar[q], desc_of(bs + 2u * q));
            }
        }
        wg_commit();
        wg_wait<SETS - 1>();
        fence_acc(acc);
        if (release) {
            bar_arrive_at(empty0 + 8u * freed.at);
            freed.next(DEPTH);
        }
        ring.next(DEPTH);
    };
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    uint32_t i = 0;
    for (; i + SETS <= count; i += SETS) {
#pragma unroll
        for (int c = 0; c < SETS; ++c) step(a[c], i + c + 1 >= (uint32_t)SETS);
    }
#pragma unroll
    for (int c = 0; c < SETS - 1; ++c) {
        if (i + c < count) step(a[c], i + c + 1 >= (uint32_t)SETS);
    }
    wg_wait<0>();
    fence_acc(acc);
    // The tile's last stages, whose groups the loop did not wait for.
    for (uint32_t r = min(count, (uint32_t)SETS - 1u); r > 0; --r) {
        bar_arrive_at(empty0 + 8u * freed.at);
        freed.next(DEPTH);
    }
}

// The tile's outputs (the CTA's last work lets the next kernel launch) from the
// accumulators of its 8 J activation rows, R rows a round through shared memory
// (`sums`, [activation row][weight row]): once every consumer is done with the previous
// round's sums, the round's are put there and written out, with K split this CTA's
// share of them added across the cluster (store_split). Rounds wholly past M are
// skipped (the same for every consumer thread of the cluster). Stream-K (work_at): a
// later K range of a tile leaves its sums in its partial slot and counts itself in the
// tile's counter (one release after the consumers' barrier); the tile's first range
// waits (acquire) until all have, adds them in K order and writes the tile.
template <int J, uint32_t R, int ROWS, bool SK>
__device__ __forceinline__ void finish_tile(const PgemmParams& p, uint32_t k, const Tile& work, float* sums,
                                            float (&acc)[J][4]) {
    static_assert((8 * J) % R == 0 && R % 8 == 0, "whole rounds of whole 8-row steps");
    // With stream-K, the work's tile again from k alone (kept: the main loop carries no
    // more of it); without, the loop's (`work`), the last turn the one a grid further
    // would pass the items.
    Tile tl = work;
    if constexpr (SK) {
        work_at<ROWS, SK>(p, kept(k), tl);
    } else {
        tl.sk = -1;
        tl.last = blockIdx.x + (k + 1u) * gridDim.x >= work_items<ROWS>(p);
    }
    if (tl.last) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (tl.sk == 1) {
        float* part = sk_partial<J * 4>(p, tl.slot);
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) __stcg(part + (4 * j + c) * (kConsumerWarps * 32), acc[j][c]);
        consumers_sync();
        if (threadIdx.x == 0) {
            uint32_t done;
            asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                         : "=r"(done)
                         : "l"(p.counters + tl.sk_tile)
                         : "memory");
            (void)done;
        }
        return;
    }
    if (tl.sk == 0) {
        if (threadIdx.x == 0) {
            uint32_t arrived = 0;
            for (;;) {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(arrived) : "l"(p.counters + tl.sk_tile) : "memory");
                if (arrived >= tl.parts) break;
                __nanosleep(64);
            }
            // Every part has arrived: the counter is done with until the next launch.
            p.counters[tl.sk_tile] = 0u;
        }
        consumers_sync();
        const uint32_t first = tl.slot;  // the tile's first slot (work_at)
        for (uint32_t q = 0; q < tl.parts; ++q) {
            const float* part = sk_partial<J * 4>(p, first + q);
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[j][c] = __fadd_rn(acc[j][c], __ldcg(part + (4 * j + c) * (kConsumerWarps * 32)));
        }
    }
    const uint32_t n0 = (uint32_t)BN * tl.n;
#pragma unroll 1
    for (uint32_t h = 0; h < 8u * J / R; ++h) {
        const uint32_t m0 = 8u * J * tl.m + h * R;
        if (m0 >= p.m) break;
        consumers_sync();
        put_sums<J, kSumsLd>(sums, acc, h * (R / 8), (h + 1) * (R / 8));
        consumers_sync();
        BS_PROBE_MARK(2);
        if (tl.splits > 1) {
            store_split<R, 1u, kSumsLd>(p, sums, m0, n0, tl.split, tl.splits, (int)p.activation);
            continue;
        }
        switch ((int)p.activation) {
            case 1: store_tile<1, R, kSumsLd>(p, sums, m0, n0, 0); break;
            case 2: store_tile<2, R, kSumsLd>(p, sums, m0, n0, 0); break;
            case 3: store_tile<3, R, kSumsLd>(p, sums, m0, n0, 0); break;
            default: store_tile<0, R, kSumsLd>(p, sums, m0, n0, 0); break;
        }
    }
}

template <class T, bool F16>
__device__ __forceinline__ void gemm(const PgemmParams& p) {
    static_assert(regs_fit(producer_regs<T>(), consumer_regs<T>()), "within the registers the CTA holds (else a hang)");
    static_assert(!F16 || !T::kPre, "f16 activations: the post-scaled schemes (their weights are exact in f16)");
    // INT4-G128 and FP8 block: scales per slab pair (128 K); the others per slab.
    constexpr uint32_t kScaleSlabs = pair_scales<T>() ? 2u : 1u;
    constexpr uint32_t kStage = stage_bytes<T>();
    extern __shared__ __align__(128) uint8_t smem_raw[];
    __shared__ uint64_t full[kDepth], empty[kDepth];
    uint8_t* smem = aligned_smem(smem_raw, smem_bytes<T>());
    // The tile's sums for the epilogue, after the ring (the producer fills the ring with
    // the next tile's slabs meanwhile).
    float* tile_sums = reinterpret_cast<float*>(smem + kDepth * kStage);

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const uint32_t S = p.slabs;
    // With K split, the splits of a tile are one cluster of consecutive CTAs (rank =
    // split, tile_at's order; the grid is one CTA per tile and split); with a split tail,
    // the grid is persistent in clusters of two.

    if (roles<T, kDepth, kStage, 1>(p, smem, full, empty, warp, lane)) return;
    BS_PROBE_MARK(0);
    // The consumers: warpgroup wg owns unit wg, warp wi of it the unit's group wi.
    const int wg = warp >> 2, wi = warp & 3;
    const int gi = 4 * wg + wi;
    const uint32_t add = p.scale_add;
    float acc[16][4];
    uint32_t it = 0;  // slabs consumed, as the producer counts them

    // Slab n's stage in shared memory (the activation tile first).
    auto stage_addr = [&](uint32_t n) { return smem_u32(smem + (n % kDepth) * kStage); };
    // Waits for slab n's stage and decodes this warp's rows of it into the A fragments
    // `ar`; returns the slab's words, whose scale words the post-scaled schemes read.
    // `ts`: FP8 128x128's tile scale in global memory (else unused).
    auto decode = [&](uint32_t n, const uint8_t* ts, uint32_t (&ar)[4][4]) {
        const uint32_t st = n % kDepth;
        mbar_wait(&full[st], (n / kDepth) & 1u);
        Slab<T> d;
        read_stage<T>(smem + st * kStage + kActTile, gi, lane, ts, d, kGroups);
        uint32_t sp0, sp1;
        slab_scales<T>(d, add, sp0, sp1);
#pragma unroll
        for (int q = 0; q < 4; ++q) a_fragment<T, F16>(d, q, sp0, sp1, ar[q]);
        return d;
    };

    // INT4-G32 (24 producer registers, 240 consumer ones) never takes stream-K.
    constexpr bool SK = stream_k<T, 1>();
    auto finish = [&](uint32_t k, const Tile& tl) { finish_tile<16, BM, BM, SK>(p, k, tl, tile_sums, acc); };
    auto clear = [&](float (&d)[16][4]) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) d[j][c] = 0.0f;
    };

    if constexpr (T::kPre) {
        const uint32_t full0 = kept(smem_u32(full)), empty0 = kept(smem_u32(empty));
        const uint32_t b_lo = kept(desc_lo(smem_u32(smem)));
        uint32_t a[kSets][4][4];
        Ring ring{}, freed{};  // the next slab's stage; the next stage to release
        Tile tl;
        for (uint32_t k = 0; work_piece<BM, SK>(p, k, tl); ++k) {
            pre_scaled_tile<T, kSets, kDepth, kStage, kActTile>(smem, full0, empty0, b_lo, gi, lane, add,
                                                                kept(tl.count), ring, freed, acc, a);
            BS_PROBE_MARK(1);
            finish(k, tl);
            BS_PROBE_MARK(5);
        }
    } else if constexpr (T::kHalfMap) {
        // INT4-G32: a slab holds two 32-element blocks, k16 steps 0-1 and 2-3 (the
        // layout's half map). Each slab's steps go into two block sums da and db (their
        // first products replacing the contents), and once the slab's group is done
        // both are added to acc times their f32 scales, block 0 first. The next slab
        // decodes while the group runs.
        float da[16][4], db[16][4];
        uint32_t a[2][4][4];
        float f[2][4];  // per register set: block 0 rows g, g + 8, block 1 rows g, g + 8
        auto load = [&](uint32_t n, uint32_t (&ar)[4][4], float (&fs)[4]) {
            const Slab<T> d = decode(n, nullptr, ar);
            post_scales<T>(d, 0, fs[0], fs[1]);
            post_scales<T>(d, 1, fs[2], fs[3]);
        };
        // Slab n (decoded in `ar`, scales `fs`): its group, the next slab's decode
        // (`next`), the wait, the stage's release and the scale step.
        auto slab = [&](uint32_t n, const uint32_t (&ar)[4][4], const float (&fs)[4], auto&& next) {
            const uint32_t base = stage_addr(n);
            wg_fence();
            wgmma_m64n128<F16>(da, ar[0], tile_desc(base), 0u);
            wgmma_m64n128<F16>(da, ar[1], tile_desc(base + 32u));
            wgmma_m64n128<F16>(db, ar[2], tile_desc(base + 64u), 0u);
            wgmma_m64n128<F16>(db, ar[3], tile_desc(base + 96u));
            wg_commit();
            next();
            wg_wait<0>();
            fence_acc(da);
            fence_acc(db);
            bar_arrive(&empty[n % kDepth]);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                acc[j][0] = __fmaf_rn(db[j][0], fs[2], __fmaf_rn(da[j][0], fs[0], acc[j][0]));
                acc[j][1] = __fmaf_rn(db[j][1], fs[2], __fmaf_rn(da[j][1], fs[0], acc[j][1]));
                acc[j][2] = __fmaf_rn(db[j][2], fs[3], __fmaf_rn(da[j][2], fs[1], acc[j][2]));
                acc[j][3] = __fmaf_rn(db[j][3], fs[3], __fmaf_rn(da[j][3], fs[1], acc[j][3]));
            }
        };
        Tile tl;
        for (uint32_t k = 0; work_piece<BM, false>(p, k, tl); ++k) {
            clear(acc);
            const uint32_t first = it;
            // A tile's K range is an even number of slabs (the layout pads K to 4, the
            // host splits at even slabs): two a turn, by register set.
            if (tl.count > 0) load(first, a[0], f[0]);
            for (uint32_t i = 0; i < tl.count; i += 2) {
                slab(first + i, a[0], f[0], [&] { load(first + i + 1, a[1], f[1]); });
                slab(first + i + 1, a[1], f[1], [&] {
                    if (i + 2 < tl.count) load(first + i + 2, a[0], f[0]);
                });
            }
            it = first + tl.count;
            finish(k, tl);
        }
    } else {
        // INT4-G128 and FP8 block: each 128-element block (two slabs; a tile's K range
        // holds whole blocks, the layout's slabs and the splits being even) is multiplied
        // into `dt` (its first product replacing dt's contents), then added to acc times
        // its scales in f32, as the GEMV does. The next block's first slab is decoded
        // while the block's second group runs.
        float dt[16][4];
        uint32_t a[2][4][4];
        float f0 = 0.0f, f1 = 0.0f;
        // Slab x of the tile (counted from `first`, the tile's first slab in `it` terms):
        // wait for its stage and decode it into `ar`; the second slab of a block also
        // takes the block's scales of rows g and g + 8.
        auto load = [&](uint32_t first, const Tile& tl, uint32_t x, uint32_t (&ar)[4][4], bool second) {
            const uint8_t* ts = nullptr;
            if constexpr (T::kSc == Sc::F32T128) {
                // The 128 x 128 tile scale from global memory (the stage holds none).
                ts = p.s + (((uint64_t)tl.n * kUnits + wg) * (S / kScaleSlabs) + (tl.s0 + x) / kScaleSlabs) * kUnit *
                               scale_step_bytes<T>() +
                     wi * scale_step_bytes<T>();
            }
            const Slab<T> d = decode(first + x, ts, ar);
            if (second) post_scales<T>(d, 0, f0, f1);
        };
        auto issue = [&](uint32_t n, const uint32_t (&ar)[4][4], bool fresh) {
            const uint32_t base = stage_addr(n);
            fence_acc(dt);
            wg_fence();
#pragma unroll
            for (int q = 0; q < 4; ++q) wgmma_m64n128<F16>(dt, ar[q], tile_desc(base + 32u * q), fresh && q == 0 ? 0u : 1u);
            wg_commit();
        };
        Tile tl;
        for (uint32_t k = 0; work_piece<BM, SK>(p, k, tl); ++k) {
            clear(acc);
            const uint32_t first = it;
            if (tl.count > 0) load(first, tl, 0, a[0], false);
            for (uint32_t i = 0; i < tl.count; i += 2) {
                issue(first + i, a[0], true);
                load(first, tl, i + 1, a[1], true);
                issue(first + i + 1, a[1], false);
                // The first group done: its stage is free, and a[0] takes the next block.
                wg_wait<1>();
                fence_acc(dt);
                bar_arrive(&empty[(first + i) % kDepth]);
                if (i + 2 < tl.count) load(first, tl, i + 2, a[0], false);
                wg_wait<0>();
                fence_acc(dt);
                bar_arrive(&empty[(first + i + 1) % kDepth]);
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    acc[j][0] = __fmaf_rn(dt[j][0], f0, acc[j][0]);
                    acc[j][1] = __fmaf_rn(dt[j][1], f0, acc[j][1]);
                    acc[j][2] = __fmaf_rn(dt[j][2], f1, acc[j][2]);
                    acc[j][3] = __fmaf_rn(dt[j][3], f1, acc[j][3]);
                }
            }
            it = first + tl.count;
            finish(k, tl);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Wide tiles: the pre-scaled schemes (NVFP4, MX) with bf16 activations at M > 128. A
// tile is 128 weight rows by 256 activation rows: every warp's decode of a slab feeds
// four `wgmma.m64n256k16`, so the decode and the loop's other instructions, which the
// consumers issue between groups at a cost in tensor time (DECISIONS #64), are spent
// once per 256 activation rows instead of 128, and the activation tile read by both
// consumers costs the same shared-memory bandwidth per product as before. The
// accumulators take 128 registers a thread; the epilogue goes through shared memory 64
// activation rows at a time (33 KiB), which leaves room for 4-5 stages of 37-41 KiB.

// A register sets of the wide loop: one group in flight while the next slab decodes (a
// third set, with the 128 accumulators, is more than ptxas will keep the wgmma pipeline
// in: it serializes the products, C7512).
constexpr int kWideSets = 2;
constexpr int BMW = 2 * BM;               // activation rows of a wide tile
constexpr uint32_t kSumRows = 64;         // activation rows a round of the wide epilogue
constexpr uint32_t kSmemLimit = 232448u;  // sm_90's dynamic shared memory a CTA (227 KiB)

// A wide stage: the two 128-row activation tiles, then the weights, rounded up to 1 KiB.
template <class T>
__host__ __device__ constexpr uint32_t wide_stage_bytes() {
    return (2u * kActTile + weight_bytes<T>() + 1023u) / 1024u * 1024u;
}
__host__ __device__ constexpr uint32_t wide_fixed_bytes() { return kSumRows * kSumsLd * 4u + 1024u; }
// Stages: as many as fit, up to kDepth (NVFP4 and MXFP4 five, MXFP6 and MXFP8 four).
template <class T>
__host__ __device__ constexpr int wide_depth() {
    return (kSmemLimit - wide_fixed_bytes()) / wide_stage_bytes<T>() < (uint32_t)kDepth
               ? (int)((kSmemLimit - wide_fixed_bytes()) / wide_stage_bytes<T>())
               : kDepth;
}
template <class T>
__host__ __device__ constexpr uint32_t wide_smem_bytes() {
    return wide_depth<T>() * wide_stage_bytes<T>() + wide_fixed_bytes();
}

template <class T>
__device__ __forceinline__ void gemm_wide(const PgemmParams& p) {
    static_assert(T::kPre, "the pre-scaled schemes (the others keep separate block sums)");
    static_assert(regs_fit(producer_regs<T>(), consumer_regs<T>()), "within the registers the CTA holds (else a hang)");
    constexpr int D = wide_depth<T>();
    static_assert(D >= 4, "a ring of at least four stages");
    constexpr uint32_t kStage = wide_stage_bytes<T>();
    extern __shared__ __align__(128) uint8_t smem_raw[];
    __shared__ uint64_t full[D], empty[D];
    uint8_t* smem = aligned_smem(smem_raw, wide_smem_bytes<T>());
    float* tile_sums = reinterpret_cast<float*>(smem + D * kStage);

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    if (roles<T, D, kStage, 2>(p, smem, full, empty, warp, lane)) return;
    // The consumers: `gemm`'s pre-scaled loop (pre_scaled_tile) with m64n256 products.
    const int gi = 4 * (warp >> 2) + (warp & 3);
    const uint32_t add = p.scale_add;
    const uint32_t full0 = kept(smem_u32(full)), empty0 = kept(smem_u32(empty));
    const uint32_t b_lo = kept(desc_lo(smem_u32(smem)));
    float acc[32][4];
    uint32_t a[kWideSets][4][4];
    Ring ring{}, freed{};  // the next slab's stage; the next stage to release
    Tile tl;
    for (uint32_t k = 0; work_piece<BMW, false>(p, k, tl); ++k) {
        pre_scaled_tile<T, kWideSets, D, kStage, 2u * kActTile>(smem, full0, empty0, b_lo, gi, lane, add,
                                                                 kept(tl.count), ring, freed, acc, a);
        finish_tile<32, kSumRows, BMW, false>(p, k, tl, tile_sums, acc);
    }
}

// The activation tiles: eight lanes per (row, slab), lane c reading the slab's 16-byte
// chunk c of the row (zero past M and K) and writing the tile's chunk c, swizzled, whose
// word t is natural pair 8 t + c: word c % 4 of chunk 2 t + c / 4, fetched from the lane
// that read it (HALF, INT4-G32's order: pair 16 (c / 4) + c % 4 + 4 t, word c % 4 of
// chunk 4 (c / 4) + t). `load(row, k)` gives the eight bf16 activations of row `row` from
// K element `k` (inside M and K); p.out: the tiles, [M tile][slab][128 rows][128 B]. The
// grid covers whole warps of the work.
template <bool HALF, class Load>
__device__ __forceinline__ void acts(const PgemmParams& p, Load load) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    // The GEMM that reads the tiles may launch at once: its CTAs take SMs as this grid's
    // leave and queue their first weights, then wait for this grid to finish.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const uint32_t S = p.slabs;
    const uint64_t rows = (uint64_t)(p.m + BM - 1) / BM * BM;
    const uint64_t items = rows * S * 8u;
    const uint32_t c = threadIdx.x & 7u;
    const int base = (int)(threadIdx.x & 24u);  // the group's first lane
    const uint32_t lane = threadIdx.x & 31u;
    // The loop runs while any lane of the warp has work (the shuffles need all 32); a
    // group of eight is wholly inside or past the work (items is a multiple of 8).
    for (uint64_t it = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; it - lane < items;
         it += (uint64_t)gridDim.x * blockDim.x) {
        const bool live = it < items;
        const uint64_t rs = it / 8u;
        const uint32_t row = (uint32_t)(rs / S), slab = (uint32_t)(rs % S);
        const uint32_t k = slab * kSlabK + 8u * c;
        // K is a multiple of the schemes' blocks (16 or 32): a chunk of 8 lies wholly
        // inside or past it.
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (live && row < p.m && k < p.k) v = load(row, k);
        uint32_t out[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int src = base + (HALF ? 4 * (int)(c >> 2) + t : 2 * t + (int)(c >> 2));
            const uint32_t w0 = __shfl_sync(0xffffffffu, v.x, src), w1 = __shfl_sync(0xffffffffu, v.y, src);
            const uint32_t w2 = __shfl_sync(0xffffffffu, v.z, src), w3 = __shfl_sync(0xffffffffu, v.w, src);
            const uint32_t word = c & 3u;
            out[t] = word == 0 ? w0 : word == 1 ? w1 : word == 2 ? w2 : w3;
        }
        if (live) {
            const uint64_t tile_row = ((uint64_t)(row / BM) * S + slab) * BM + row % BM;
            uint8_t* dst = reinterpret_cast<uint8_t*>(p.out) + tile_row * 128u + 16u * (c ^ (row % 8u));
            *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
        }
    }
}

// bf16 activations: p.x, M x K with row stride p.x_stride.
template <bool HALF>
__device__ __forceinline__ void acts_bf16(const PgemmParams& p) {
    acts<HALF>(p, [&](uint32_t row, uint32_t k) {
        const uint16_t* x = reinterpret_cast<const uint16_t*>(p.x);
        return *reinterpret_cast<const uint4*>(x + (uint64_t)row * p.x_stride + k);
    });
}

// Quantized activations (NVFP4 or MX, `a`: M x K in their checkpoint layout) for the
// pairs on prepared weights: each value decoded as the dequantize kernels do (value
// times block scale, a.post = 1) and rounded once to bf16, which is exact for NVFP4
// and MX elements whose scaled value lies in bf16's range.
template <uint32_t S>
__device__ __forceinline__ void acts_quantized(const DequantParams& a, const PgemmParams& p) {
    acts<false>(p, [&](uint32_t row, uint32_t k) {
        float v[8];
        decode8<S>(a, row, k, v);
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = (uint32_t)to_bf16_bits(v[2 * i]) | ((uint32_t)to_bf16_bits(v[2 * i + 1]) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    });
}

}  // namespace wgemm
}  // namespace bs

using bs::DequantParams;
using bs::PgemmParams;

extern "C" __global__ void __launch_bounds__(256) wgemm_acts(const PgemmParams p) { bs::wgemm::acts_bf16<false>(p); }
extern "C" __global__ void __launch_bounds__(256) wgemm_acts_half(const PgemmParams p) {
    bs::wgemm::acts_bf16<true>(p);
}
#define BS_WGEMM_ACTS(name, scheme)                                                                  \
    extern "C" __global__ void __launch_bounds__(256) wgemm_acts_##name(const DequantParams a,       \
                                                                        const PgemmParams p) {      \
        bs::wgemm::acts_quantized<bs::scheme>(a, p);                                                 \
    }
BS_WGEMM_ACTS(nvfp4, NVFP4)
BS_WGEMM_ACTS(mxfp4, MXFP4)
BS_WGEMM_ACTS(mxfp6_e2m3, MXFP6_E2M3)
BS_WGEMM_ACTS(mxfp6_e3m2, MXFP6_E3M2)
BS_WGEMM_ACTS(mxfp8_e4m3, MXFP8_E4M3)
BS_WGEMM_ACTS(mxfp8_e5m2, MXFP8_E5M2)

// The tile kernels' bodies exist for sm_90a only: sm_120a has no wgmma, and the host
// never launches them there (gemm/prepared.rs `uses_wgmma`). A stub keeps the symbol,
// so both architectures' fatbins list the same kernels, and spares ptxas the bodies
// (a minute of every build).
#if BS_WGEMM_ARCH
#define BS_WGEMM_BODY(...) __VA_ARGS__(p);
#else
#define BS_WGEMM_BODY(...) \
    (void)p;               \
    __trap();
#endif
#define BS_WGEMM(name, traits)                                                                                  \
    extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1) wgemm_##name(const PgemmParams p) {    \
        BS_WGEMM_BODY(bs::wgemm::gemm<bs::pgemv::traits, false>)                                                \
    }
// f16 activations (the post-scaled schemes).
#define BS_WGEMM_F16(name, traits)                                                                                 \
    extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1) wgemm_##name##_f16(const PgemmParams p) { \
        BS_WGEMM_BODY(bs::wgemm::gemm<bs::pgemv::traits, true>)                                                    \
    }

// Wide tiles (the pre-scaled schemes at M > 128).
#define BS_WGEMM_WIDE(name, traits)                                                                                 \
    extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1) wgemm_##name##_wide(const PgemmParams p) { \
        BS_WGEMM_BODY(bs::wgemm::gemm_wide<bs::pgemv::traits>)                                                      \
    }

BS_WGEMM(nvfp4, TNvfp4)
BS_WGEMM(mxfp4, TMxfp4)
BS_WGEMM(mxfp6_e2m3, TMxfp6E2m3)
BS_WGEMM(mxfp6_e3m2, TMxfp6E3m2)
BS_WGEMM(mxfp8_e4m3, TMxfp8E4m3)
BS_WGEMM(mxfp8_e5m2, TMxfp8E5m2)
BS_WGEMM(fp8_block_128x128, TFp8T128)
BS_WGEMM(fp8_block_1x128, TFp8R128)
BS_WGEMM(int4_g32, TInt4G32)
BS_WGEMM(int4_g128, TInt4G128)
BS_WGEMM_F16(fp8_block_128x128, TFp8T128)
BS_WGEMM_F16(fp8_block_1x128, TFp8R128)
BS_WGEMM_F16(int4_g32, TInt4G32)
BS_WGEMM_F16(int4_g128, TInt4G128)
BS_WGEMM_WIDE(nvfp4, TNvfp4)
BS_WGEMM_WIDE(mxfp4, TMxfp4)
BS_WGEMM_WIDE(mxfp6_e2m3, TMxfp6E2m3)
BS_WGEMM_WIDE(mxfp6_e3m2, TMxfp6E3m2)
BS_WGEMM_WIDE(mxfp8_e4m3, TMxfp8E4m3)
BS_WGEMM_WIDE(mxfp8_e5m2, TMxfp8E5m2)
