// What the Hopper wgmma GEMMs share (wgemm.cu: weight-only on prepared weights; fgemm.cu:
// FP8 block pairs): the CTA shape (two consumer warpgroups, one producer warpgroup, 128 x
// 128 output tiles), shared-memory matrix descriptors, the wgmma fences, the consumers'
// barrier, the persistent tile order, the epilogue that writes a tile from its sums in
// shared memory and the split-K reduction across a cluster.
#pragma once

#include "../gemv/prepared.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BS_WGEMM_ARCH 1
#else
#define BS_WGEMM_ARCH 0
#endif

namespace bs {
namespace wgemm {

using namespace bs::pgemv;

constexpr int kConsumerWarps = 8;                      // two warpgroups
constexpr int kThreads = (kConsumerWarps + 4) * 32;    // + the producer warpgroup
constexpr int BN = 128;                                // weight rows per CTA
constexpr int BM = 128;                                // activation rows per CTA
// Floats a row of a tile's f32 sums in shared memory where the layout allows the
// padding: 4 past BN, so the consumers' `put_sums` stores fall on four banks, not one
// (measured 1-6% faster in wgemm.cu's epilogue).
constexpr int kSumsLd = BN + 4;

// Whether `setmaxnreg` can give the producer warpgroup `producer` and the two consumer
// warpgroups `consumer` registers a thread: it moves registers within what the CTA was
// given at launch (kThreads threads at one CTA an SM: 65536 / kThreads each, rounded
// down to a multiple of 8); a consumers' increase beyond that waits forever.
__host__ __device__ constexpr bool regs_fit(int producer, int consumer) {
    return producer * 128 + consumer * kConsumerWarps * 32 <= kThreads * ((65536 / kThreads) & ~7);
}

// Shared-memory matrix descriptor of a K-major, 128-byte-swizzled tile: 8-row groups
// 1024 bytes apart (the stride byte offset); the leading byte offset is unused in this
// mode. Its low word (`desc_lo`) holds the address: an offset of 16 x bytes is + x.
__device__ __forceinline__ uint32_t desc_lo(uint32_t saddr) { return ((saddr & 0x3FFFFu) >> 4) | (1u << 16); }
// The descriptor whose low word is `lo` (tile_desc's high word).
__device__ __forceinline__ uint64_t desc_of(uint32_t lo) {
    return (uint64_t)lo | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
__device__ __forceinline__ uint64_t tile_desc(uint32_t saddr) { return desc_of(desc_lo(saddr)); }


// The dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle's
// period), after checking that the launch gave at least `needed` bytes (the layout with
// its alignment slack).
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw, uint32_t needed) {
    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < needed) __trap();
    return raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u);
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma fence.
template <int J>
__device__ __forceinline__ void fence_acc(float (&d)[J][4]) {
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
}

__device__ __forceinline__ void wg_fence() {
#if BS_WGEMM_ARCH
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if BS_WGEMM_ARCH
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#if BS_WGEMM_ARCH
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void bar_arrive_at(uint32_t saddr) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* bar) { bar_arrive_at(smem_u32(bar)); }
// The ring's barriers, by thread 0, before the CTA's first __syncthreads: `full[s]`
// expects `full_arrivals` per phase (the producers' expect_tx and any other producer
// arrivals; the bytes complete it), `empty[s]` every consumer thread (each releases its
// own reads of the stage; fgemm's pairs: the peer CTA's consumers too).
template <int DEPTH>
__device__ __forceinline__ void init_ring(uint64_t (&full)[DEPTH], uint64_t (&empty)[DEPTH], uint32_t full_arrivals,
                                          uint32_t empty_arrivals = kConsumerWarps * 32) {
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int s = 0; s < DEPTH; ++s) {
        mbar_init(&full[s], full_arrivals);
        mbar_init(&empty[s], empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The consumer warps' barrier (named barrier 1; the producer warpgroup is not part of it).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
}

// The 64 accumulator operands of an m64n128 wgmma, d[16][4].
#define BS_WGMMA_D128(d)                                                                                    \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), \
        "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]),               \
        "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),          \
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]),          \
        "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]),          \
        "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
#define BS_WGMMA_REGS128                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "      \
    "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"

// The same for m64n256 (wide tiles), d[32][4]: operands %0 .. %127, A %128 .. %131, B
// descriptor %132.
#define BS_WGMMA_D256(d) \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
    "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
    "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
    "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
    "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
    "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
    "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
    "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
    "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), \
    "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
    "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), \
    "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
    "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), \
    "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
    "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), \
    "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
    "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), \
    "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), \
    "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), \
    "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
    "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), \
    "+f"(d[31][2]), "+f"(d[31][3])
#define BS_WGMMA_REGS256 \
    "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
    "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
    "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, " \
    "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, " \
    "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"


// The tile's outputs from its f32 sums, which `sums(r, col, v)` puts into v[0..8) for
// activation row m0 + r and weight rows col .. col + 8 (relative to n0), for the tile's
// rows r_begin .. r_end (all ROWS by default): consumer thread
// c takes 8 consecutive weight rows (8 (c % 16) ..) of activation rows c / 16, c / 16 +
// 16, ...: the bias read once, the outputs written 16 bytes at a time where the row
// allows (elementwise at the edges or an odd stride). ACT: the activation (as
// bs::activation), or -1 for the split-K partial sums of split `split`.
template <int ACT, int ROWS, class Sums>
__device__ __forceinline__ void store_rows(const PgemmParams& p, uint32_t m0, uint32_t n0, uint32_t split,
                                           Sums&& sums, uint32_t r_begin = 0, uint32_t r_end = ROWS) {
    constexpr int kColGroups = BN / 8;
    constexpr int kRowStep = kConsumerWarps * 32 / kColGroups;
    const int cg = threadIdx.x % kColGroups;
    const uint32_t n = n0 + 8u * cg;
    if (n >= p.n) return;
    const uint32_t valid = min(8u, p.n - n);
    float bias[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) bias[e] = ACT >= 0 && p.bias && (uint32_t)e < valid ? p.bias[n + e] : 0.0f;
    const uint64_t plane = (uint64_t)p.m * p.n;
    for (uint32_t r = r_begin + threadIdx.x / kColGroups; r < r_end && m0 + r < p.m; r += kRowStep) {
        const uint32_t m = m0 + r;
        float v[8];
        sums(r, 8u * cg, v);
        if constexpr (ACT < 0) {
            float* dst = p.partial + (uint64_t)split * plane + (uint64_t)m * p.n + n;
            if (valid == 8 && ((uintptr_t)dst & 15) == 0) {
                reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
                reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
            } else {
                for (uint32_t e = 0; e < valid; ++e) dst[e] = v[e];
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float y = p.bias ? __fmaf_rn(p.alpha, v[e], bias[e]) : __fmul_rn(p.alpha, v[e]);
                v[e] = activation(y, ACT);
            }
            // 16-byte stores where the row allows; elementwise (gemv_store) at the edges.
            const uint64_t i = (uint64_t)m * p.out_stride + n;
            const uint32_t bytes = p.out_kind == 2 ? 4u : 2u;
            uint8_t* dst = reinterpret_cast<uint8_t*>(p.out) + i * bytes;
            if (valid < 8 || ((uintptr_t)dst & 15) != 0) {
                for (uint32_t e = 0; e < valid; ++e) gemv_store(p, m, n + e, v[e]);
            } else if (p.out_kind == 2) {
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = v[e] != v[e] ? __uint_as_float(0x7fc00000u) : v[e];
                reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
                reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
            } else {
                uint32_t h[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) h[e] = p.out_kind == 0 ? to_bf16_bits(v[e]) : to_f16_bits(v[e]);
                *reinterpret_cast<uint4*>(dst) =
                    make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
            }
        }
    }
}

// A consumer thread's swapped-product sums acc[j][c] (weight rows 16 w + g and + 8 of
// consumer warp w, activation rows 8 j + 2 tq and + 1) for j in [j0, j1) into `sums`
// ([activation row - 8 j0][weight row], rows LD floats apart: BN + 4 puts the four tq of
// a store on different banks, BN on the same one, a 4-way conflict).
template <int J, int LD = BN>
__device__ __forceinline__ void put_sums(float* sums, const float (&acc)[J][4], int j0 = 0, int j1 = J) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        if (j < j0 || j >= j1) continue;
#pragma unroll
        for (int c = 0; c < 4; ++c) sums[(8 * (j - j0) + 2 * tq + (c & 1)) * LD + 16 * warp + g + 8 * (c >> 1)] = acc[j][c];
    }
}

// store_rows from the tile's sums in shared memory ([activation row][weight row], rows LD
// floats apart), for tiles of ROWS activation rows: rows r_begin .. r_end, `sums` holding
// them from r_begin.
template <int ACT, int ROWS = BM, int LD = BN>
__device__ __forceinline__ void store_tile(const PgemmParams& p, const float* sums, uint32_t m0, uint32_t n0,
                                           uint32_t split, uint32_t r_begin = 0, uint32_t r_end = ROWS) {
    store_rows<ACT, ROWS>(
        p, m0, n0, split,
        [&](uint32_t r, uint32_t col, float (&v)[8]) {
            const float* at = sums + (r - r_begin) * LD + col;
            const float4 lo = *reinterpret_cast<const float4*>(at);
            const float4 hi = *reinterpret_cast<const float4*>(at + 4);
            v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        },
        r_begin, r_end);
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

// Split K across a cluster (its CTAs are the `splits` splits of one tile, rank = split):
// once every split's sums are in its shared memory (`sums`, [activation row][weight row]),
// CTA `split` adds its share of the tile's rows from all of them through distributed
// shared memory, in split order, and writes those outputs with activation `act`; the
// second barrier keeps each CTA's sums in place until every peer has read them. Every
// consumer thread of the cluster calls it; the cluster's other threads arrive on the
// same two barriers (cluster_sync twice) or have exited (a cluster barrier waits for
// the non-exited threads only). KB peers' sums are loaded before any is added (as the
// caller's registers allow).
template <int ROWS, uint32_t KB, int LD = BN>
__device__ __forceinline__ void store_split(const PgemmParams& p, const float* sums, uint32_t m0, uint32_t n0,
                                            uint32_t split, uint32_t splits, int act) {
    cluster_sync();
    BS_PROBE_MARK(3);
    const uint32_t share = (ROWS / 8u + splits - 1u) / splits * 8u;
    const uint32_t r0 = min((uint32_t)ROWS, split * share), r1 = min((uint32_t)ROWS, r0 + share);
    auto peers = [&](uint32_t r, uint32_t col, float (&v)[8]) {
        const uint32_t at = smem_u32(sums + r * LD + col);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = 0.0f;
        for (uint32_t sp0 = 0; sp0 < splits; sp0 += KB) {
            float w[KB][8];
#pragma unroll
            for (uint32_t b = 0; b < KB; ++b)
                if (sp0 + b < splits) load_peer8(at, sp0 + b, w[b]);
#pragma unroll
            for (uint32_t b = 0; b < KB; ++b)
                if (sp0 + b < splits) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] = __fadd_rn(v[e], w[b][e]);
                }
        }
    };
    switch (act) {
        case 1: store_rows<1, ROWS>(p, m0, n0, 0, peers, r0, r1); break;
        case 2: store_rows<2, ROWS>(p, m0, n0, 0, peers, r0, r1); break;
        case 3: store_rows<3, ROWS>(p, m0, n0, 0, peers, r0, r1); break;
        default: store_rows<0, ROWS>(p, m0, n0, 0, peers, r0, r1); break;
    }
    BS_PROBE_MARK(4);
    cluster_sync();
}

// Which tile work item t (a CTA's turns are items gridDim.x apart) takes, and its K
// range. Tiles go in groups of kGroupM activation tiles; in a group the activation tile
// turns fastest, so the CTAs running at once share weight tiles (read from DRAM once per
// group rather than once per activation tile) and the group's activation tiles stay in
// L2. With K split, the splits of a tile are consecutive items (one cluster: rank =
// split). With a split tail (p.tail > 0, p.splits = 1; the host plans it where the last
// wave is at most half full): the last p.tail tiles are two items each, the K halves
// (tiles_n x tiles_m - p.tail is a multiple of the grid, which is of clusters of two, so
// a tail tile's halves are the two CTAs of one cluster in their last turn).
struct Tile {
    uint32_t n, m, split, splits, s0, count;
    // Stream-K (work_at): -1 a whole tile or a split's, 0 the first K range of a tile
    // whose later ranges `parts` other CTAs add to it, 1 one of those later ranges (its
    // partial sums to slot `slot`); `sk_tile` the tile among the stream-K ones. `last`:
    // the CTA's last work.
    int sk;
    uint32_t parts, slot, sk_tile;
    bool last;
};
constexpr uint32_t kGroupM = 8;
// (TAIL = false: a kernel that never takes a split tail, fgemm, compiles without it.)
template <int ROWS = BM, bool TAIL = true>
__device__ __forceinline__ Tile tile_at(const PgemmParams& p, uint32_t t) {
    const uint32_t tiles_n = (p.n + BN - 1) / BN, tiles_m = (p.m + ROWS - 1) / ROWS;
    const uint32_t head = tiles_n * tiles_m - (TAIL ? p.tail : 0u);  // the tiles of one item each split
    Tile r;
    uint32_t tile, per;
    if (TAIL && t >= head * p.splits) {
        const uint32_t u = t - head * p.splits;
        r.split = u & 1u;
        r.splits = 2u;
        tile = head + u / 2u;
        per = p.slabs / 2u;  // the layout's slabs are a multiple of 4: even halves
    } else {
        r.split = t % p.splits;
        r.splits = p.splits;
        tile = t / p.splits;
        per = p.slabs_per_split;
    }
    const uint32_t span = kGroupM * tiles_n, first = tile / span * kGroupM;
    const uint32_t rows = min(tiles_m - first, kGroupM), in = tile % span;
    r.m = first + in % rows;
    r.n = in / rows;
    r.s0 = r.split * per;
    const uint32_t s1 = r.split + 1u == r.splits ? p.slabs : min(p.slabs, r.s0 + per);
    r.count = s1 > r.s0 ? s1 - r.s0 : 0u;
    return r;
}

// Work items of the persistent grid: every tile's splits, and the tail's second halves
// (with stream-K, the tiles before the stream-K ones).
template <int ROWS = BM>
__device__ __forceinline__ uint32_t work_items(const PgemmParams& p) {
    return (p.n + BN - 1) / BN * ((p.m + ROWS - 1) / ROWS) * p.splits + p.tail - p.sk_tiles;
}

// The CTA's stream-K segments (sk_setup): the whole items before them, then per segment
// (at most two) its tile among the stream-K ones, K range, role and partial slot (Tile).
// `ready` completes its first phase once the plan is written (sk_publish).
struct SkPlan {
    uint64_t ready;
    uint32_t items;
    uint32_t x[2], s0[2], count[2], parts[2], slot[2];
    int sk[2];
};
__device__ __forceinline__ SkPlan& sk_plan() {
    __shared__ SkPlan plan;
    return plan;
}

// Stream-K (p.sk_tiles = R > 0, p.splits = 1, p.tail = 0; the items before are a whole
// number of waves): the last R tiles' slabs, tile after tile, in ranges of p.sk_slabs
// (even, at most a tile's) a CTA, CTA b taking [b U, (b + 1) U) as one or two segments
// (split where a tile ends). The CTA whose range holds a tile's first slab finishes the
// tile, after adding the partial sums of the CTAs holding its later slabs (those are
// their first segments, so no CTA waits on one that waits on it). Segments are even
// slab counts, so block pairs never straddle them. One thread works the CTA's segments
// out once (the divisions would otherwise hold registers in every turn of the producer's
// and consumers' loops) into shared memory: sk_publish.
template <int ROWS = BM>
__device__ __forceinline__ void sk_setup(const PgemmParams& p) {
    SkPlan& sp = sk_plan();
    sp.items = work_items<ROWS>(p);
    const uint32_t S = p.slabs, U = p.sk_slabs, total = p.sk_tiles * S;
    const uint32_t lo = blockIdx.x * U, hi = min(lo + U, total);
    for (int e = 0; e < 2; ++e) {
        const uint32_t a = e == 0 ? lo : (lo / S + 1u) * S;
        sp.count[e] = 0;
        if (a >= hi) continue;
        const uint32_t x = a / S, b = min(hi, (x + 1u) * S);
        sp.x[e] = x;
        sp.s0[e] = a - x * S;
        sp.count[e] = b - a;
        // The tile's CTAs: `owner` (its first slab) .. `final` (its last); their partial
        // slots, after the owner's, from x C on (C = ceil(S / U) bounds a tile's later
        // ranges).
        const uint32_t owner = x * S / U, final = ((x + 1u) * S - 1u) / U;
        const uint32_t slot0 = x * ((S + U - 1u) / U);
        if (a == x * S) {
            sp.parts[e] = final - owner;
            sp.sk[e] = final > owner ? 0 : -1;
            sp.slot[e] = slot0;
        } else {
            sp.parts[e] = 0;
            sp.sk[e] = 1;
            sp.slot[e] = slot0 + (blockIdx.x - owner - 1u);
        }
    }
}

// The CTA's k-th whole item (tile_at's order, gridDim.x apart; with stream-K, those
// before the stream-K tiles); false past them.
template <int ROWS = BM>
__device__ __forceinline__ bool whole_piece(const PgemmParams& p, uint32_t k, Tile& r) {
    const uint32_t t = blockIdx.x + k * gridDim.x;
    if (t >= work_items<ROWS>(p)) return false;
    r = tile_at<ROWS>(p, t);
    r.sk = -1;
    return true;
}

// The stream-K plan, worked out off the CTA's critical path: thread 0 readies its
// barrier before the CTA's first __syncthreads (sk_init); the producer, its whole items'
// copies queued (the ring's stages ahead of the consumers), works the plan out (a dozen
// divisions: about half a microsecond that, before the CTA's first barrier, every CTA
// waited for) and arrives (release); sk_piece waits for it (acquire). Nothing waits
// when p.sk_tiles = 0.
__device__ __forceinline__ void sk_init(const PgemmParams& p) {
    if (threadIdx.x == 0 && p.sk_tiles > 0) mbar_init(&sk_plan().ready, 1);
}
template <int ROWS = BM>
__device__ __forceinline__ void sk_publish(const PgemmParams& p) {
    if (p.sk_tiles == 0) return;
    sk_setup<ROWS>(p);
    bar_arrive(&sk_plan().ready);
}

// The CTA's stream-K segment e (0 or 1; sk_setup); false if it has none.
template <int ROWS = BM>
__device__ __forceinline__ bool sk_piece(const PgemmParams& p, uint32_t e, Tile& r) {
    if (p.sk_tiles == 0 || e > 1u) return false;
    SkPlan& sp = sk_plan();
    mbar_wait(&sp.ready, 0);
    if (sp.count[e] == 0) return false;
    const uint32_t x = sp.x[e];
    r = tile_at<ROWS>(p, sp.items + x);  // (m, n) in tile_at's order; K below
    r.split = 0;
    r.splits = 1;
    r.s0 = sp.s0[e];
    r.count = sp.count[e];
    r.sk_tile = x;
    r.sk = sp.sk[e];
    r.parts = sp.parts[e];
    r.slot = sp.slot[e];
    return true;
}

// The CTA's k-th work: its whole items, then (SK) its stream-K segments. Returns false
// past the CTA's work. (The producer walks the two kinds in two loops instead: its
// copies then take their addresses from uniform registers, moved there once a tile.)
template <int ROWS = BM, bool SK = true>
__device__ __forceinline__ bool work_piece(const PgemmParams& p, uint32_t k, Tile& r) {
    if (whole_piece<ROWS>(p, k, r)) return true;
    // (The whole turns, items / gridDim.x: the items are whole waves with stream-K.)
    if constexpr (SK) return p.sk_tiles > 0 && sk_piece<ROWS>(p, k - work_items<ROWS>(p) / gridDim.x, r);
    return false;
}
template <int ROWS = BM, bool SK = true>
__device__ __forceinline__ bool work_at(const PgemmParams& p, uint32_t k, Tile& r) {
    if (!work_piece<ROWS, SK>(p, k, r)) return false;
    Tile next;
    r.last = !work_piece<ROWS, SK>(p, k + 1u, next);
    return true;
}

// A stream-K partial: this consumer thread's V accumulators at slot `slot` of p.partial,
// [slot][value][consumer thread], so a warp's stores and loads are 128 bytes.
template <int V>
__device__ __forceinline__ float* sk_partial(const PgemmParams& p, uint32_t slot) {
    return p.partial + (uint64_t)slot * V * (kConsumerWarps * 32) + threadIdx.x;
}

}  // namespace wgemm
}  // namespace bs
