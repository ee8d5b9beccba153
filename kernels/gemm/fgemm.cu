// Block-scaled FP8 GEMM on Hopper's FP8 tensor cores (sm_90a): D = act(alpha A B^T + bias)
// with A the FP8 block activations (M x K E4M3, f32 scales per 1 x 128 or 128 x 128) and B
// the FP8 block weights (N x K E4M3, f32 scales per 128 x 128), or (the `fgemm_mx_*`
// kernels) MXFP8 x MXFP8 (E4M3 or E5M2 on either side, UE8M0 scales per 32), for small M
// (the host's dispatch rule: crates/blockscale-cuda/src/gemm/fgemm.rs).
//
// MX differs from FP8 block in the scales only: each 32 of K is its own `wgmma` into a
// fresh set of sums, promoted with its two scales (the weight row's and the activation
// row's: a product per sum, as no two sums of a thread share both); the producer
// warpgroup's second warp copies the scale bytes into the stage (cp.async, counted on
// `landed`), its third and fourth write the activations' as f32, and each consumer thread
// decodes its two weight rows' bytes.
//
// Work split, as wgemm.cu: a tile is 128 weight rows by TM activation rows (128, or 64:
// the `_m64` kernel) over a range of 128-element K blocks (K splits when the tiles leave
// SMs idle), one CTA an SM taking tiles gridDim.x apart (persistent). The products are
// computed transposed (swap-AB: the weights are the wgmma's M side, so a warpgroup's 64
// rows lie inside one 128 x 128 scale tile and share its scale). Warpgroup 2 produces: its
// thread 0 loads each block's two tiles (weights 128 x 128 bytes, activations TM x 128)
// with TMA tensor copies, 128-byte swizzled, into a ring of stages (5 for TM = 128, 7 for
// 64; completion counted in bytes on the stage's `full` barrier), while its second warp
// copies the block's TM activation scales and the weight tile's scale beside them with
// cp.async (arrivals on the stage's `landed` barrier, made by the copies' completion, so
// that warp never waits out a load) and its last two warps multiply each activation
// scale by the weight scale in place once they have landed (64 more arrivals on
// `full`). Warpgroups 0 and 1 each own 64 weight rows. Per block, four
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
// sums in global memory, no counters, a deterministic result; a split's sums lie over the
// ring, idle once its one tile is done.
//
// Epilogue: each consumer warpgroup applies alpha and bias to its 64 x TM sums in
// registers, writes them as bf16 or f16 with `stmatrix.trans` (a fragment's 8 x 8 block
// transposed: 16 bytes of one output row a lane) into its box of the staging area, and
// one thread queues a TMA store of the box (clipped at M and N by the tensor map) and
// goes on to the next tile: the stores drain while the next tile's products run, and the
// box is reused once the store has read it. Other outputs (f32, rows not 16-byte
// aligned, an activation other than the identity) go through the staging area as f32,
// 64 activation rows at a time (alpha, bias, activation, 16-byte stores, as wgemm's).
//
// Pairs (`pair` != 0): two CTAs of a cluster take the same weight tile for two activation
// tiles (M tiles 2j and 2j + 1; a last odd one pairs with a tile of zeros past M, whose
// outputs are not written), and each copies half of the weight tile (its 64 rows) into
// both CTAs' stages with one multicast TMA copy: every weight byte crosses L2 once for
// 2 TM activation rows, as with 128-row tiles, without a K split's reduction. A stage is
// refilled once the consumers of both CTAs have released it (each consumer arrives on
// its own CTA's `empty` barrier and on the peer's). The host pairs tiles only where it
// does not split K.

#include "wgmma.cuh"

namespace bs {
namespace fgemm {

using namespace bs::wgemm;

constexpr uint32_t kTile = 128u * 128u;             // bytes: 128 weight rows x 128 FP8 elements
[[maybe_unused]] constexpr int kScaleW = 128;       // FP8 block: the weight scale's float in a stage's scale area
constexpr uint32_t kConverters = 64;                // the producer warpgroup's warps 2-3 convert scales

// The pair's formats. FP8 block: E4M3 x E4M3, one f32 scale a 128 x 128 weight tile and
// one a 1 x 128 (or 128 x 128) activation block, promoted every 128 of K. MX: E4M3 or
// E5M2 elements (W: the weights', A: the activations'; 0 E4M3, 1 E5M2), a UE8M0 scale
// every 32 of K on both sides, promoted every 32.
struct Fp8Block {
    static constexpr bool kMx = false;
    static constexpr int kW = 0, kA = 0;
};
template <int W, int A>
struct Mx {
    static constexpr bool kMx = true;
    static constexpr int kW = W, kA = A;
};
// By (activation, weight) element types, as the kernels are named.
using MxE4m3E4m3 = Mx<0, 0>;
using MxE5m2E5m2 = Mx<1, 1>;
using MxE4m3E5m2 = Mx<1, 0>;
using MxE5m2E4m3 = Mx<0, 1>;

// The epilogue's staging area after the ring: the tile's outputs as 16-bit values for the
// TMA store (two boxes of TM rows x 64 weight rows, one a consumer warpgroup, 128-byte
// swizzled), or, where the output cannot be stored by TMA, 64 activation rows of f32
// sums at a time.
constexpr uint32_t kStaging = 32u * 1024u;
// (A split's sums over the ring take rows of kSumsLd floats; the staging area keeps rows
// of BN: its size sets the stage counts.)

// The shape of one configuration: TM activation rows a tile (128, or 64 for small M: the
// `_m64` kernels). A stage: the activation tile (TM x 128 bytes), the weight tile, then
// the scales. FP8 block: the TM activation scales and the weight scale (1 KiB). MX: the
// activations' four 32-element blocks' scales as f32 ([q][TM]), then the block's scale
// bytes as they arrive ([TM][4] activations, [128][4] weights). A multiple of 1 KiB keeps
// the next stage 1024-byte aligned (the swizzle's period). As many stages as fit beside
// the epilogue's staging area (kStaging) and 1 KiB of alignment slack.
template <int TM, bool MX>
struct Shape {
    static constexpr uint32_t kActTile = TM * 128u;
    static constexpr uint32_t kActFloats = TM * 16u;
    static constexpr uint32_t kScales = MX ? (kActFloats + (TM + 128u) * 4u + 1023u) / 1024u * 1024u : 1024u;
    static constexpr uint32_t kStage = kActTile + kTile + kScales;
    static constexpr int kDepth = (int)((227u * 1024u - 1024u - kStaging) / kStage);
    static constexpr uint32_t kSmem = kDepth * kStage + kStaging + 1024u;
    // K split (one tile a CTA, the ring idle after it): the tile's f32 sums over the ring.
    static_assert(kDepth * kStage >= TM * kSumsLd * 4u, "a split's sums fit over the ring");
};
static_assert(Shape<128, false>::kDepth == 5 && Shape<64, false>::kDepth == 7, "the stage counts fgemm.rs assumes");
static_assert(Shape<128, true>::kDepth == 5 && Shape<64, true>::kDepth == 7, "the stage counts fgemm.rs assumes");
static_assert(Shape<64, false>::kSmem <= 227u * 1024u && Shape<128, false>::kSmem <= 227u * 1024u &&
                  Shape<64, true>::kSmem <= 227u * 1024u && Shape<128, true>::kSmem <= 227u * 1024u,
              "within Hopper's shared memory");
static_assert(Shape<64, true>::kScales == 2048u && Shape<128, true>::kScales == 3072u, "the scale areas fgemm.rs assumes");
// Registers a thread after `setmaxnreg`: the consumers keep the accumulator and G sets of
// block sums (TM = 128: 3 x 64 floats; TM = 64: 5 x 32).
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;
static_assert(regs_fit(kProducerRegs, kConsumerRegs), "within the registers the CTA holds (else a hang)");

// One arrival on the barrier at `bar`'s place in CTA `rank` of the cluster. (This plain
// form and the plain try_wait on the other side, as CUTLASS's pipelines use them: with
// `.release.cluster` arrivals and an `.acquire.cluster` wait the pairs ran 2.3x slower.)
__device__ __forceinline__ void bar_arrive_peer(uint64_t* bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [r];\n}" ::"r"(smem_u32(bar)),
        "r"(rank)
        : "memory");
}

// A CUtensorMap: the 128 opaque bytes cuTensorMapEncodeTiled writes.
struct alignas(64) TensorMap {
    unsigned long long words[16];
};

// The box at (k, row) of `map` into the same place of the shared memory of every CTA in
// `mask` (this one included), each copy counted on that CTA's `bar` at the same offset.
__device__ __forceinline__ void tma_tile_multicast(uint8_t* dst, const TensorMap* map, uint32_t k, uint32_t row,
                                                   uint64_t* bar, uint16_t mask, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;" ::"r"(smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(smem_u32(bar)), "h"(mask), "l"(policy)
        : "memory");
}

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

// Four 8 x 8 blocks of 16-bit values stored transposed: register r_i of lane l holds
// block i's row l / 4, columns 2 (l % 4) and + 1; lanes 8 i .. 8 i + 7 give the shared
// addresses of the stored block i's rows (16 bytes each).
__device__ __forceinline__ void stmatrix_trans4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// The box at `src` (shared memory) into the tensor at (x, y) of `map`, as a bulk group.
__device__ __forceinline__ void tma_store(const TensorMap* map, uint32_t x, uint32_t y, const uint8_t* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(x), "r"(y), "r"(smem_u32(src))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// This thread's bulk stores have read their shared memory (READ) or completed.
template <bool READ>
__device__ __forceinline__ void tma_store_wait() {
    if constexpr (READ)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Consumer warpgroup wg's barrier (named barriers 2 and 3).
__device__ __forceinline__ void warpgroup_sync(int wg) {
    asm volatile("bar.sync %0, 128;" ::"r"(2 + wg) : "memory");
}

// The 32 accumulator operands of an m64n64 wgmma, d[8][4].
#define BS_WGMMA_D64(d)                                                                                      \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// The operand lists of an m64n128 / m64n64 wgmma with D in %0.., then a, b, the accumulate flag.
#define BS_FGEMM_REGS128                                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "   \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "    \
    "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "    \
    "%62, %63}, %64, %65, p, 1, 1;\n}\n"
#define BS_FGEMM_REGS64                                                                                        \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "   \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
// One wgmma of the given element types ("e4m3.e5m2": weights E4M3, activations E5M2).
#define BS_FGEMM_MMA(TM, types)                                                                        \
    if constexpr (TM == 128) {                                                                         \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                      \
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32." types " " BS_FGEMM_REGS128          \
                     : BS_WGMMA_D128(d)                                                                \
                     : "l"(a), "l"(b), "r"(accumulate));                                               \
    } else {                                                                                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                     "wgmma.mma_async.sync.aligned.m64n64k32.f32." types " " BS_FGEMM_REGS64            \
                     : BS_WGMMA_D64(d)                                                                 \
                     : "l"(a), "l"(b), "r"(accumulate));                                               \
    }

// D (64 x TM, f32) = A (64 weight rows x 32 K at `a`, FP8 type W) x B (TM activation rows
// x 32 K at `b`, type A)^T + D (`accumulate` != 0) or + 0, both from shared memory; types
// 0 E4M3, 1 E5M2.
template <int TM, int W, int A>
__device__ __forceinline__ void wgmma_fp8(float (&d)[TM / 8][4], uint64_t a, uint64_t b, uint32_t accumulate) {
    static_assert(TM == 64 || TM == 128, "64 or 128 activation rows a tile");
#if BS_WGEMM_ARCH
    if constexpr (W == 0 && A == 0) {
        BS_FGEMM_MMA(TM, "e4m3.e4m3")
    } else if constexpr (W == 0 && A == 1) {
        BS_FGEMM_MMA(TM, "e4m3.e5m2")
    } else if constexpr (W == 1 && A == 0) {
        BS_FGEMM_MMA(TM, "e5m2.e4m3")
    } else {
        BS_FGEMM_MMA(TM, "e5m2.e5m2")
    }
#else
    (void)d;
    (void)a;
    (void)b;
    (void)accumulate;
    __trap();
#endif
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

// UE8M0 byte b as f32 without a branch: 2^(b - 127); byte 0 is the subnormal 2^-127 and
// 0xff NaN (bit 22 set on the 0 and inf patterns b << 23 gives), as decode_ue8m0.
__device__ __forceinline__ float ue8m0_select(uint32_t b) {
    const uint32_t special = ((b + 1u) & 0xffu) < 2u;
    return __uint_as_float((b << 23) | (special << 22));
}

// The byte of MX scale column `col` (a multiple of 4: four consecutive columns are four
// bytes, in either layout) of row `row`, in `fp`'s layout for that operand.
__device__ __forceinline__ uint64_t mx_scale_offset(uint32_t row, uint32_t col, uint32_t cols, bool swizzled) {
    return swizzled ? swizzled_offset(row, col, cols) : (uint64_t)row * cols + col;
}

// Consumer warpgroup wg's outputs of a tile (its 64 weight rows from n0 + 64 wg, TM
// activation rows from m0) from its sums (a thread's: weight rows 16 wi + g and + 8,
// activation rows 8 j + 2 tq and + 1), alpha and bias applied (the identity activation:
// the others take store_staged, whose loop keeps the kernel's code small), as bf16
// (KIND 0) or f16 (1) in `box` ([activation row][64 weight rows], 128-byte swizzled as
// the tensor map reads it), then one TMA store of the box by the warpgroup's first
// thread, which first waits until its previous store has read the box.
template <int KIND, int TM>
__device__ __forceinline__ void store_box(const PgemmParams& p, const TensorMap* td, const float (&acc)[TM / 8][4],
                                          uint8_t* box, uint32_t m0, uint32_t n0, int wg) {
    const uint32_t lane = threadIdx.x & 31u, wi = (threadIdx.x >> 5) & 3u;
    const bool leader = (threadIdx.x & 127u) == 0;
    if (leader) tma_store_wait<true>();
    warpgroup_sync(wg);
    const uint32_t n = n0 + 64u * wg + 16u * wi + (lane >> 2);
    // Without a bias, alpha x v + (-0) is alpha x v exactly (store_rows' product).
    float bias[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) bias[h] = p.bias && n + 8u * h < p.n ? p.bias[n + 8u * h] : -0.0f;
    auto out = [&](float v, int h) -> uint32_t {
        const float y = __fmaf_rn(p.alpha, v, bias[h]);
        return KIND == 0 ? to_bf16_bits(y) : to_f16_bits(y);
    };
    // stmatrix block i of step j: activation rows 8 (j + i / 2) .., weight rows
    // 16 wi + 8 (i % 2) .. (16-byte chunk c of the box's 128-byte rows); lane l gives the
    // address of row l % 8 of block l / 8.
    const uint32_t blk = lane >> 3, base = smem_u32(box);
#pragma unroll
    for (int j = 0; j < TM / 8; j += 2) {
        uint32_t r[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int jj = j + (i >> 1), h = i & 1;
            r[i] = out(acc[jj][2 * h], h) | out(acc[jj][2 * h + 1], h) << 16;
        }
        const uint32_t m = 8u * (j + (blk >> 1)) + (lane & 7u), c = 2u * wi + (blk & 1u);
        stmatrix_trans4(base + m * 128u + ((c ^ (m & 7u)) << 4), r);
    }
    // The writes, made by the generic proxy, before the TMA (async proxy) reads them.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    warpgroup_sync(wg);
    if (leader && m0 < p.m) tma_store(td, n0 + 64u * wg, m0, box);
}

// A tile's outputs through `staging` as f32 sums ([activation row][weight row]), 64
// activation rows at a time (alpha, bias, activation, 16-byte stores: store_rows).
template <int TM>
__device__ __forceinline__ void store_staged(const PgemmParams& p, const float (&acc)[TM / 8][4], float* staging,
                                             uint32_t m0, uint32_t n0, int act) {
#pragma unroll
    for (int h = 0; h < TM / 64; ++h) {
        // Once every consumer is done with the staging's previous rows.
        consumers_sync();
        put_sums(staging, acc, 8 * h, 8 * h + 8);
        consumers_sync();
        const uint32_t r0 = 64u * h, r1 = r0 + 64u;
        switch (act) {
            case 1: store_tile<1, TM>(p, staging, m0, n0, 0, r0, r1); break;
            case 2: store_tile<2, TM>(p, staging, m0, n0, 0, r0, r1); break;
            case 3: store_tile<3, TM>(p, staging, m0, n0, 0, r0, r1); break;
            default: store_tile<0, TM>(p, staging, m0, n0, 0, r0, r1); break;
        }
    }
}

template <int TM, class F>
__device__ __forceinline__ void gemm(const FgemmParams& fp, const TensorMap* ta, const TensorMap* tb,
                                     const TensorMap* td) {
    using Sh = Shape<TM, F::kMx>;
    constexpr int kDepth = Sh::kDepth;
    constexpr uint32_t kStage = Sh::kStage, kActTile = Sh::kActTile;
    const PgemmParams& p = fp.g;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    __shared__ uint64_t full[kDepth], empty[kDepth];

    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < Sh::kSmem) __trap();
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t* staging = smem + kDepth * kStage;

    const int warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 5), 0);
    const int lane = threadIdx.x & 31;
    const uint32_t S = p.slabs;  // K blocks
    const uint32_t tiles_n = (p.n + BN - 1) / BN;
    const bool paired = fp.pair != 0;
    // Pairs take M tiles two at a time (a last odd one with a tile past M).
    const uint32_t tiles_m = ((p.m + TM - 1) / TM + (paired ? 1u : 0u)) & (paired ? ~1u : ~0u);
    const uint32_t tiles = tiles_n * tiles_m * p.splits;
    // With K split, the splits of a tile are one cluster of consecutive CTAs (rank =
    // split, tile_at's order). Pairs (never split) are clusters of two consecutive CTAs
    // (rank = half; the grid is even, so every turn t of a CTA has t % 2 = half) taking
    // M tiles 2j + half of the same weight tile.
    const bool clustered = p.splits > 1;
    const uint32_t half = paired ? blockIdx.x & 1u : 0u;
    auto tile_of = [&](uint32_t t) {
        if (!paired) return tile_at<TM, false>(p, t);
        Tile r;
        r.split = 0;
        r.splits = 1;
        r.n = (t >> 1) % tiles_n;
        r.m = 2u * ((t >> 1) / tiles_n % (tiles_m / 2u)) + (t & 1u);
        r.s0 = 0;
        r.count = p.slabs;
        return r;
    };
    // The producers' walk over the CTA's blocks: body(it, tile, i) for block i of each of
    // its tiles, `it` counting blocks as the ring does.
    auto each_block = [&](auto&& body) {
        uint32_t it = 0;
#pragma unroll 1
        for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
            const Tile tl = tile_of(t);
#pragma unroll 1
            for (uint32_t i = 0; i < tl.count; ++i, ++it) body(it, tl, i);
        }
    };
    // Waits until the consumers have released the stage block `it` refills.
    // (Pairs: the consumers of both CTAs; the peer's producer writes into this stage.)
    auto wait_free = [&](uint32_t it) {
        if (it < (uint32_t)kDepth) return;
        mbar_wait(&empty[it % kDepth], ((it / kDepth) - 1u) & 1u);
    };
    // A stage's scale area (after its two tiles).
    auto scale_area = [&](uint32_t st) { return smem + st * kStage + kActTile + kTile; };

    // Each stage's scales landed (the copying warp's 32 lanes).
    __shared__ uint64_t landed[kDepth];
    if (threadIdx.x == 0)
        for (int s = 0; s < kDepth; ++s) mbar_init(&landed[s], 32);
    // The TMA thread's expect_tx and the converters.
    init_ring(full, empty, 1 + kConverters, kConsumerWarps * (paired ? 64 : 32));
    __syncthreads();
    // Pairs: the peer's barriers are initialized before anything arrives on them.
    if (paired) cluster_sync();

    if (warp >= kConsumerWarps) {
#if BS_WGEMM_ARCH
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs) : "memory");
#endif
        if (warp == kConsumerWarps && lane == 0) {
            // The tiles. The weights do not depend on the kernel before this one
            // (programmatic dependent launch): the first stages' weight tiles are
            // requested before waiting for it, their activation tiles after.
            const uint64_t weights = evict_first_policy(), acts = evict_last_policy();
            // The weight tile of block i: whole, or (pairs) this CTA's half into both CTAs.
            constexpr uint16_t mask = 3;  // both CTAs of the pair
            auto weight_tile = [&](uint32_t st, const Tile& tl, uint32_t i) {
                uint8_t* dst = smem + st * kStage + kActTile;
                if (paired)
                    tma_tile_multicast(dst + 8192u * half, tb, 128u * (tl.s0 + i), BN * tl.n + 64u * half, &full[st],
                                       mask, weights);
                else
                    tma_tile(dst, tb, 128u * (tl.s0 + i), BN * tl.n, &full[st], weights);
            };
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
                        weight_tile(i, tl, i);
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
                    wait_free(it);
                    mbar_expect_tx(&full[st], kActTile + kTile);
                    weight_tile(st, tl, i);
                    tma_tile(smem + st * kStage, ta, 128u * (tl.s0 + i), TM * tl.m, &full[st], acts);
                }
            }
        } else if (warp == kConsumerWarps + 1 && F::kMx) {
            if constexpr (F::kMx) {
                // MX scale bytes: once a stage is free, each block's four bytes of each of
                // the tile's TM activation rows and 128 weight rows (lane l takes rows l,
                // l + 32, ...: activations first; rows past M or N read as byte 0) are
                // copied with cp.async into the stage's byte areas, their completion
                // counted on `landed` (the warp runs ahead as the TMA thread does).
                asm volatile("griddepcontrol.wait;" ::: "memory");
                constexpr uint32_t kAll = TM + 128;
                each_block([&](uint32_t it, const Tile& tl, uint32_t i) {
                    const uint32_t st = it % kDepth, col = 4u * (tl.s0 + i);
                    wait_free(it);
                    uint8_t* dst = scale_area(st) + Sh::kActFloats;
#pragma unroll 2
                    for (uint32_t at = lane; at < kAll; at += 32u) {
                        const bool act = at < (uint32_t)TM;
                        const uint32_t row = act ? TM * tl.m + at : BN * tl.n + (at - TM);
                        const bool live = row < (act ? p.m : p.n);
                        const bool swizzled = (fp.swizzled >> (act ? 0 : 1)) & 1u;
                        const uint8_t* src = static_cast<const uint8_t*>(act ? fp.sa : fp.sb);
                        const uint64_t off = live ? mx_scale_offset(row, col, fp.scale_cols, swizzled) : 0u;
                        cp_async4(dst + 4u * at, src + off, live ? 4u : 0u);
                    }
                    cp_async_arrive(&landed[st]);
                });
            }
        } else if (warp > kConsumerWarps + 1 && !F::kMx) {
            // FP8 block: each activation row's scale times the weight tile's, once a block
            // (the consumers' promotion then needs no product of its own: the same f32
            // product it took before), by the last two warps once the block's scales have
            // landed; then the stage's arrival.
            const uint32_t me = threadIdx.x - (kConsumerWarps + 2) * 32;
            each_block([&](uint32_t it, const Tile&, uint32_t) {
                const uint32_t st = it % kDepth;
                mbar_wait(&landed[st], (it / kDepth) & 1u);
                float* sc = reinterpret_cast<float*>(scale_area(st));
                const float w = sc[kScaleW];
#pragma unroll
                for (uint32_t at = me; at < (uint32_t)TM; at += kConverters) sc[at] = __fmul_rn(w, sc[at]);
                bar_arrive(&full[st]);
            });
        } else if (warp > kConsumerWarps + 1) {
            if constexpr (F::kMx) {
                // MX activation scales as f32 ([q][TM]; one conversion a row instead of one
                // in every consumer thread that reads it), by the last two warps once a
                // block's bytes have landed; then the stage's arrival. The consumers decode
                // their two weight rows' bytes themselves.
                const uint32_t me = threadIdx.x - (kConsumerWarps + 2) * 32;
                each_block([&](uint32_t it, const Tile&, uint32_t) {
                    const uint32_t st = it % kDepth;
                    mbar_wait(&landed[st], (it / kDepth) & 1u);
                    const uint8_t* src = scale_area(st) + Sh::kActFloats;
                    float* dst = reinterpret_cast<float*>(scale_area(st));
#pragma unroll
                    for (uint32_t at = me; at < (uint32_t)TM; at += kConverters) {
                        const uint32_t v = *reinterpret_cast<const uint32_t*>(src + 4u * at);
#pragma unroll
                        for (uint32_t q = 0; q < 4; ++q) dst[q * TM + at] = ue8m0_select((v >> (8u * q)) & 0xffu);
                    }
                    bar_arrive(&full[st]);
                });
            }
        } else if (warp == kConsumerWarps + 1) {
            // The scales: activation row r's at float r of the stage's scale area (zero
            // past M), the weight tile's at float 128. Copied with cp.async, whose
            // completion arrives on `landed` by itself (for the converters): the warp
            // runs ahead to the next stage instead of waiting out each load's latency.
            asm volatile("griddepcontrol.wait;" ::: "memory");
            const float* sa = static_cast<const float*>(fp.sa);
            const float* sb = static_cast<const float*>(fp.sb);
            each_block([&](uint32_t it, const Tile& tl, uint32_t i) {
                const uint32_t st = it % kDepth, kb = tl.s0 + i;
                wait_free(it);
                float* sc = reinterpret_cast<float*>(scale_area(st));
#pragma unroll
                for (int r = 0; r < TM / 32; ++r) {
                    const uint32_t row = TM * tl.m + (uint32_t)lane + 32u * r;
                    const bool live = row < p.m;
                    const uint32_t src_row = live ? (fp.a_tiles ? row / 128u : row) : 0u;
                    cp_async4(sc + lane + 32 * r, sa + (uint64_t)src_row * S + kb, live ? 4u : 0u);
                }
                if (lane == 0) cp_async4(sc + kScaleW, sb + (uint64_t)tl.n * S + kb, 4u);
                cp_async_arrive(&landed[st]);
            });
        }
        // The consumers' cluster barriers (two with K split, one for pairs) count every
        // thread of the cluster.
        if (clustered) {
            cluster_sync();
            cluster_sync();
        }
        if (paired) cluster_sync();
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
    // The unit of promotion: a block of 128 (FP8 block: four products, one scale) or a
    // quarter of one (MX: one product, its own scales). Units a turn, each into its own
    // sums: 4 of 32 registers for 64-row tiles, 2 of 64 for 128-row ones.
    constexpr uint32_t U = F::kMx ? 4u : 1u;
    constexpr int G = TM == 64 ? 4 : 2;
    static_assert(!F::kMx || U % G == 0, "MX turns end at block ends");
    float acc[J][4], part[G][J][4];
    uint32_t it = 0;  // blocks consumed, as the producers count them

    // Unit u: wait for its stage (at a block's first unit) and queue its products into
    // `sums` as one group.
    auto issue = [&](uint32_t u, float (&sums)[J][4]) {
        const uint32_t n = u / U, q = u % U, st = n % kDepth;
        if (q == 0) mbar_wait(&full[st], (n / kDepth) & 1u);
        const uint32_t base = smem_u32(smem + st * kStage);
        fence_acc(sums);
        wg_fence();
        if constexpr (F::kMx) {
            wgmma_fp8<TM, F::kW, F::kA>(sums, tile_desc(base + kActTile + 8192u * wg + 32u * q),
                                        tile_desc(base + 32u * q), 0u);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k)
                wgmma_fp8<TM, 0, 0>(sums, tile_desc(base + kActTile + 8192u * wg + 32u * k), tile_desc(base + 32u * k),
                                    k > 0);
        }
        wg_commit();
    };
    // Unit u's sums, once its group is done: acc += sums x (weight scale x activation
    // scale), that product formed by the converters for FP8 block; a block's stage is
    // released after its last unit.
    auto promote = [&](uint32_t u, float (&sums)[J][4]) {
        fence_acc(sums);
        const uint32_t n = u / U, q = u % U, st = n % kDepth;
        const float* sc = reinterpret_cast<const float*>(scale_area(st));
        if constexpr (F::kMx) {
            const uint8_t* ws = reinterpret_cast<const uint8_t*>(sc) + Sh::kActFloats + 4u * (TM + 64 * wg + 16 * wi + g) + q;
            const float w0 = ue8m0_select(ws[0]), w1 = ue8m0_select(ws[32]);
            const float* as = sc + TM * q;
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const float2 a = *reinterpret_cast<const float2*>(as + 8 * j + 2 * tq);
                acc[j][0] = __fmaf_rn(sums[j][0], __fmul_rn(w0, a.x), acc[j][0]);
                acc[j][1] = __fmaf_rn(sums[j][1], __fmul_rn(w0, a.y), acc[j][1]);
                acc[j][2] = __fmaf_rn(sums[j][2], __fmul_rn(w1, a.x), acc[j][2]);
                acc[j][3] = __fmaf_rn(sums[j][3], __fmul_rn(w1, a.y), acc[j][3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const float2 a = *reinterpret_cast<const float2*>(sc + 8 * j + 2 * tq);
                acc[j][0] = __fmaf_rn(sums[j][0], a.x, acc[j][0]);
                acc[j][1] = __fmaf_rn(sums[j][1], a.y, acc[j][1]);
                acc[j][2] = __fmaf_rn(sums[j][2], a.x, acc[j][2]);
                acc[j][3] = __fmaf_rn(sums[j][3], a.y, acc[j][3]);
            }
        }
        if (q == U - 1) {
            bar_arrive(&empty[st]);
            if (paired) bar_arrive_peer(&empty[st], half ^ 1u);
        }
    };

    for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const Tile tl = tile_of(t);
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
        // Units G at a time, each into its own sums: the later units' groups run while
        // the earlier ones' sums are promoted. (The pipeline is closed at the end of each
        // turn: reading sums while a group of other sums is in flight across the loop's
        // back edge makes ptxas serialize every wgmma, C7514.) The last count % G units
        // one at a time (FP8 block; MX tiles hold whole turns).
        const uint32_t first = it, count = tl.count;
        const uint32_t u0 = first * U, units = count * U;
        uint32_t i = 0;
        for (; i + G <= units; i += G) {
#pragma unroll
            for (int b = 0; b < G; ++b) issue(u0 + i + b, part[b]);
#pragma unroll
            for (int b = 0; b < G; ++b) {
                wg_wait_upto(G - 1 - b);
                promote(u0 + i + b, part[b]);
            }
        }
        for (; i < units; ++i) {
            issue(u0 + i, part[0]);
            wg_wait<0>();
            promote(u0 + i, part[0]);
        }
        it = first + count;

        if (t + gridDim.x >= tiles) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        const uint32_t n0 = (uint32_t)BN * tl.n, m0 = (uint32_t)TM * tl.m;
        const int act = (int)p.activation;
        if (clustered) {
            // The split's sums over the ring ([activation row][weight row], rows of
            // kSumsLd floats; every stage consumed, none refilled: one tile a CTA), for its
            // cluster to add.
            float* tile_sums = reinterpret_cast<float*>(smem);
            consumers_sync();
            put_sums<TM / 8, kSumsLd>(tile_sums, acc);
            consumers_sync();
            store_split<TM, TM == 64 ? 4u : 2u, kSumsLd>(p, tile_sums, m0, n0, tl.split, p.splits, act);
        } else if (fp.store_map) {
            uint8_t* box = staging + (uint32_t)wg * (TM * 128u);
            if (p.out_kind == 0)
                store_box<0, TM>(p, td, acc, box, m0, n0, wg);
            else
                store_box<1, TM>(p, td, acc, box, m0, n0, wg);
        } else {
            store_staged<TM>(p, acc, reinterpret_cast<float*>(staging), m0, n0, act);
        }
    }
    // The last TMA stores complete before the CTA leaves.
    if (fp.store_map && (threadIdx.x & 127u) == 0) tma_store_wait<false>();
    // Pairs: no CTA leaves while its peer may still arrive on its barriers.
    if (paired) cluster_sync();
}

}  // namespace fgemm
}  // namespace bs

using bs::FgemmParams;

// One kernel per format and tile height: 128 activation rows a tile, or 64 (`_m64`,
// small M). MX kernels are named for (activation, weight) element types.
#if BS_WGEMM_ARCH
#define BS_FGEMM_BODY(TM, F) bs::fgemm::gemm<TM, F>(p, &ta, &tb, &td);
#else
// sm_120a has no wgmma: a stub the host never launches there (fgemm.rs `applies`).
#define BS_FGEMM_BODY(TM, F) \
    (void)p;                 \
    (void)ta;                \
    (void)tb;                \
    (void)td;                \
    __trap();
#endif
#define BS_FGEMM(name, TM, F)                                                                                     \
    extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1)                                        \
        name(const __grid_constant__ FgemmParams p, const __grid_constant__ bs::fgemm::TensorMap ta,            \
             const __grid_constant__ bs::fgemm::TensorMap tb, const __grid_constant__ bs::fgemm::TensorMap td) { \
        BS_FGEMM_BODY(TM, F)                                                                                   \
    }

BS_FGEMM(fgemm_fp8_block, 128, bs::fgemm::Fp8Block)
BS_FGEMM(fgemm_fp8_block_m64, 64, bs::fgemm::Fp8Block)
BS_FGEMM(fgemm_mx_e4m3_e4m3, 128, bs::fgemm::MxE4m3E4m3)
BS_FGEMM(fgemm_mx_e4m3_e4m3_m64, 64, bs::fgemm::MxE4m3E4m3)
BS_FGEMM(fgemm_mx_e5m2_e5m2, 128, bs::fgemm::MxE5m2E5m2)
BS_FGEMM(fgemm_mx_e5m2_e5m2_m64, 64, bs::fgemm::MxE5m2E5m2)
BS_FGEMM(fgemm_mx_e4m3_e5m2, 128, bs::fgemm::MxE4m3E5m2)
BS_FGEMM(fgemm_mx_e4m3_e5m2_m64, 64, bs::fgemm::MxE4m3E5m2)
BS_FGEMM(fgemm_mx_e5m2_e4m3, 128, bs::fgemm::MxE5m2E4m3)
BS_FGEMM(fgemm_mx_e5m2_e4m3_m64, 64, bs::fgemm::MxE5m2E4m3)
