// The prepared weight layout on the device (crates/blockscale-cuda/src/prepared/), shared
// by the GEMV (prepared.cu) and the weight-only GEMM (kernels/gemm/pgemm.cu): the schemes'
// traits, the decoding of a lane's words into mma.m16n8k16 A fragments, the scale steps,
// and the shared-memory ring's copies and barriers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../common/activation.cuh"
#include "../common/convert.cuh"
#include "../common/gemv_epilogue.cuh"
#include "../common/mma.cuh"
#include "../common/params.cuh"

namespace bs {
namespace pgemv {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kSlabK = 64;   // K elements per slab: four m16n8k16 MMAs
constexpr int kChunk = 4;    // slabs per chunk (the warps' unit of work)
constexpr int kMaxDepth = 4; // stages of a warp's ring in shared memory, at most
// Timeline probes (docs/probes/fixed_cost.cu) define BS_PROBE_MARK(i) to record when a
// CTA passes point i; the library's build leaves it empty.
#ifndef BS_PROBE_MARK
#define BS_PROBE_MARK(i)
#endif

// Stages per warp: 4 for M <= 8, 3 for M <= 16 (whose stages carry twice the
// activations), so four CTAs fit an SM's shared memory either way.
template <int MT>
__host__ __device__ constexpr int depth() {
    return MT == 1 ? 4 : 3;
}

enum class Dec { E2M1, Int4, E4M3, E5M2, E2M3, E3M2 };
// Ue4m3 / Ue8m0: pre-scaled (bf16 HMUL2); the others post-scaled in f32.
enum class Sc { Ue4m3, Ue8m0, F16G32, F16G128, F32T128, F32R128 };

template <Dec D, Sc S>
struct Traits {
    static constexpr Dec kDec = D;
    static constexpr Sc kSc = S;
    static constexpr int kBits = D == Dec::E2M1 || D == Dec::Int4 ? 4 : (D == Dec::E2M3 || D == Dec::E3M2 ? 6 : 8);
    // 32-bit words per lane per slab (32 codes per lane per slab).
    static constexpr int kWords = kBits;
    static constexpr int kG = kBits == 4 ? 4 : 2;
    static constexpr bool kPre = S == Sc::Ue4m3 || S == Sc::Ue8m0;
    // INT4-G32 blocks are half a slab: each MMA's 16 K slots must lie in one block.
    static constexpr bool kHalfMap = S == Sc::F16G32;
    // Post-scaled blocks span this many slabs (G32: each slab holds two blocks).
    static constexpr int kBlockSlabs = S == Sc::F16G32 ? 1 : 2;
    // Scale bytes per lane per slab (pre-scaled: two one-byte scales) or per block pair.
    static constexpr int kScaleWords = S == Sc::F16G32 || S == Sc::F32R128 ? 2 : 1;
};

using TNvfp4 = Traits<Dec::E2M1, Sc::Ue4m3>;
using TMxfp4 = Traits<Dec::E2M1, Sc::Ue8m0>;
using TMxfp6E2m3 = Traits<Dec::E2M3, Sc::Ue8m0>;
using TMxfp6E3m2 = Traits<Dec::E3M2, Sc::Ue8m0>;
using TMxfp8E4m3 = Traits<Dec::E4M3, Sc::Ue8m0>;
using TMxfp8E5m2 = Traits<Dec::E5M2, Sc::Ue8m0>;
using TFp8T128 = Traits<Dec::E4M3, Sc::F32T128>;
using TFp8R128 = Traits<Dec::E4M3, Sc::F32R128>;
using TInt4G32 = Traits<Dec::Int4, Sc::F16G32>;
using TInt4G128 = Traits<Dec::Int4, Sc::F16G128>;

// ---------------------------------------------------------------------------------------
// Small wrappers.

__device__ __forceinline__ uint32_t rotr(uint32_t w, int r) { return __funnelshift_r(w, w, r); }

// ---------------------------------------------------------------------------------------
// Decoding: the bit operations prepared/layout.rs inverts (its tests run the same
// operations on the host). Each returns bf16 pairs whose value is the code's value times a fixed power
// of two (E2M1 and E2M3 2^-126, E3M2 2^-124, E4M3 2^-120, E5M2 2^-112; INT4 8 (c - 8)
// after the subtraction), the low half holding the first code of the pair.

// E2M1 to (sign 15, e1 e0 m at 8:6) per half: four registers from one word.
constexpr uint32_t kE2m1Mask = 0x81C081C0u;
__device__ __forceinline__ void dec_e2m1(uint32_t w, uint32_t (&r)[4]) {
    r[0] = w & kE2m1Mask;
    r[1] = rotr(w, 3) & kE2m1Mask;
    r[2] = rotr(w, 6) & kE2m1Mask;
    // The last four codes sit in bits {0,1,3,4,16,17,19,20}: one multiply puts copies
    // shifted by 2, 7 and 12 side by side (they never overlap, so nothing carries).
    r[3] = ((w & 0x001B001Bu) * 0x1084u) & kE2m1Mask;
}

// Offset-8 INT4 to bf16 128 + 8c (code at mantissa bits 6:3), then minus 192: 8 (c - 8).
// Three operations a register (rotation, mask-and-exponent, subtraction).
__device__ __forceinline__ void dec_int4(uint32_t w, uint32_t (&r)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = sub_bf16x2(and_or<0x00780078u, 0x43004300u>(rotr(w, 4 * i)), 0x43404340u);
}

// E4M3 to (sign 15, magnitude 10:4), E5M2 to (sign 15, magnitude 11:5): two registers
// from one word.
template <Dec D>
__device__ __forceinline__ void dec_fp8(uint32_t w, uint32_t& r0, uint32_t& r1) {
    if constexpr (D == Dec::E4M3) {
        r0 = w & 0x87F087F0u;
        r1 = (rotr(w, 4) & 0x80808080u) | (rotr(w, 8) & 0x07700770u);
    } else {
        r0 = w & 0x8FE08FE0u;
        r1 = (rotr(w, 5) & 0x80808080u) | (rotr(w, 8) & 0x0F600F60u);
    }
}

// FP6 as a 4-bit plane (sign and the top three magnitude bits, placed like E2M1 for
// E2M3) and a 2-bit plane (the low two mantissa bits): four registers' top parts from a
// plane-A word, eight registers' low bits from a plane-B word (rotations by 2k).
template <Dec D>
__device__ __forceinline__ void dec_fp6_a(uint32_t w, uint32_t (&r)[4]) {
    if constexpr (D == Dec::E2M3) {
        dec_e2m1(w, r);
    } else {
        // E3M2: sign 15, e2 e1 e0 at 9:7. Two registers by a mask (one after a rotation),
        // two by a multiply that gathers eight bits with two shifts each (the copies
        // never overlap, so nothing carries): nine operations for four registers.
        constexpr uint32_t m = 0x83808380u;
        r[0] = w & m;
        r[1] = rotr(w, 3) & m;
        r[2] = ((w & 0x40584058u) * 0x22u) & m;
        r[3] = ((w & 0x20232023u) * 0x104u) & m;
    }
}

// The plane-B bits of register k (0..7) of a plane-B word: E2M3 m1 m0 at 5:4, E3M2 at 6:5.
template <Dec D>
__device__ __forceinline__ uint32_t dec_fp6_b(uint32_t a, uint32_t wb, int k) {
    constexpr uint32_t mb = D == Dec::E2M3 ? 0x00300030u : 0x00600060u;
    return a | (rotr(wb, 2 * k) & mb);
}

// ---------------------------------------------------------------------------------------
// Loads.

// One slab of one row group for one lane: its weight words, then its scale words.
template <class T>
struct Slab {
    uint32_t w[T::kWords + T::kScaleWords];
};

// Bytes of one slab of one row group: codes, and scales (pair-based scales: per pair).
template <class T>
__host__ __device__ constexpr uint32_t code_slab_bytes() {
    return 32u * 4u * T::kWords;
}
template <class T>
__host__ __device__ constexpr uint32_t scale_step_bytes() {
    return T::kSc == Sc::Ue4m3     ? 64u
           : T::kSc == Sc::Ue8m0   ? 32u
           : T::kSc == Sc::F16G32  ? 64u
           : T::kSc == Sc::F16G128 ? 32u
           : T::kSc == Sc::F32T128 ? 4u
                                   : 64u;
}
template <class T>
__host__ __device__ constexpr bool pair_scales() {
    return T::kSc == Sc::F16G128 || T::kSc == Sc::F32T128 || T::kSc == Sc::F32R128;
}
// Scale bytes a stage holds per group (FP8 128x128's 4-byte tile scale is read from
// global memory instead: bulk copies move multiples of 16 bytes).
template <class T>
__host__ __device__ constexpr uint32_t stage_scale_bytes() {
    return T::kSc == Sc::F32T128 ? 0u : scale_step_bytes<T>();
}
// Scale sets a stage of SPS slabs holds: one per slab, or one for a slab pair's shared
// scales.
template <class T, int SPS>
__host__ __device__ constexpr int stage_scale_sets() {
    return pair_scales<T>() ? 1 : SPS;
}
// The weight part of one stage of a warp's ring, SPS slabs (the GEMV's two-slab stages)
// or one: G groups' codes for each slab, then their scales (what the bulk copies bring).
template <class T, int SPS = 1>
__host__ __device__ constexpr uint32_t weight_stage_bytes() {
    return T::kG * (SPS * code_slab_bytes<T>() + stage_scale_sets<T, SPS>() * stage_scale_bytes<T>());
}
// A whole stage: the weights, then the activations' B fragments, 32 bytes a lane per n8
// tile (written by each lane's own cp.async, zero past M and K).
template <class T, int MT>
__host__ __device__ constexpr uint32_t stage_bytes() {
    return weight_stage_bytes<T>() + MT * 32u * 32u;
}

// The lane's byte offset inside a slab's scales.
template <class T>
__device__ __forceinline__ uint32_t scale_lane_offset(int lane) {
    const int g = lane >> 2, t = lane & 3;
    switch (T::kSc) {
        case Sc::Ue4m3: return 2u * lane;
        case Sc::Ue8m0: return 2u * (g * 2 + (t >> 1));
        case Sc::F16G32: return 8u * g;
        case Sc::F16G128: return 4u * g;
        case Sc::F32T128: return 0u;
        default: return 8u * g;
    }
}

// ---------------------------------------------------------------------------------------
// The ring: bulk copies (the copy engine's 1-D form) into shared memory, one mbarrier per
// stage. Lane 0 issues a stage's copies; every lane waits on its barrier.

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Every thread of the cluster (those of warps at different places too: the non-aligned
// form): arrive with release, wait with acquire semantics at cluster scope.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The f32 at shared address `saddr` of this CTA, read from the same place in CTA `rank`
// of the cluster.
__device__ __forceinline__ float load_peer(uint32_t saddr, uint32_t rank) {
    uint32_t peer;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(saddr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(peer) : "memory");
    return v;
}

// A stage's barrier expecting `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// 16 bytes from global to shared memory, zero-filled past `valid` bytes (0 or 16),
// through L1: the CTAs on one SM read the same activations (their warps take the same
// K chunks of different row tiles).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(valid)
                 : "memory");
}
// One arrival on `bar` once this lane's earlier cp.asyncs have landed.
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
// The weights are read once: they go through L2 marked evict-first, so the activations
// and scales every CTA shares stay there.
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
        : "memory");
}
// Waits until the barrier at shared address `saddr` has completed the phase of parity
// `phase`.
__device__ __forceinline__ void mbar_wait_at(uint32_t saddr, uint32_t phase) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n"
        "}\n" ::"r"(saddr),
        "r"(phase)
        : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) { mbar_wait_at(smem_u32(bar), phase); }

// Where a matrix's run of this CTA's row groups starts, at the warp's first slab: codes
// and scales. The layout keeps 4 row groups side by side per slab (UNIT_GROUPS in
// prepared.rs), so a CTA's groups of one matrix are one contiguous run per slab.
struct MatPtr {
    const uint8_t* w;
    const uint8_t* s;
};

constexpr uint32_t kUnit = 4;  // row groups stored side by side (prepared.rs UNIT_GROUPS)

// Lane 0: queues slabs `s` .. `s + SPS - 1` (counted from the matrix pointers' slab, an
// even one) of the CTA's groups (`gm` per matrix, `mats` matrices) into `stage`,
// completing on `bar`. Two slabs a stage (SPS = 2) need the CTA's groups to be a whole
// unit of one matrix: the layout then keeps consecutive slabs' codes, and scales,
// contiguous, so each takes one copy.
template <class T, int SPS = 1>
__device__ __forceinline__ void issue_stage(const MatPtr (&mp)[2], int mats, uint32_t gm, int s, uint8_t* stage,
                                            uint64_t* bar, uint32_t next_code, uint32_t next_scale, uint64_t policy) {
    // A group's codes and scales in the stage (SPS slabs' worth).
    constexpr uint32_t kCodes = SPS * code_slab_bytes<T>();
    constexpr uint32_t kScales = stage_scale_sets<T, SPS>() * stage_scale_bytes<T>();
    mbar_expect_tx(bar, weight_stage_bytes<T, SPS>());
    // Slabs past the chunk (s >= kChunk) are the next chunk's, kWarps chunks on.
    const bool next = s >= kChunk;
    const int sl = next ? s - kChunk : s;
#pragma unroll
    for (int mat = 0; mat < 2; ++mat) {
        if (mat >= mats) break;
        const uint8_t* w = mp[mat].w + (next ? next_code : 0u) + sl * kUnit * code_slab_bytes<T>();
        bulk_copy(stage + mat * gm * kCodes, w, gm * kCodes, bar, policy);
        if constexpr (kScales > 0) {
            const uint8_t* sc = mp[mat].s + (next ? next_scale : 0u) +
                                (pair_scales<T>() ? sl / 2 : sl) * kUnit * scale_step_bytes<T>();
            bulk_copy(stage + T::kG * kCodes + mat * gm * kScales, sc, gm * kScales, bar, policy);
        }
    }
}

// The lane's words of group `gi` from a slab's codes at `codes` and its scales at
// `scales` (apart in the GEMV's two-slab stages; FP8 128x128: the tile scale from global
// memory, `tile_scale` at the slab's pair).
template <class T>
__device__ __forceinline__ void read_slab(const uint8_t* codes, const uint8_t* scales, int gi, int lane,
                                          const uint8_t* tile_scale, Slab<T>& d) {
    constexpr int W = T::kWords;
    constexpr uint32_t kCode = code_slab_bytes<T>();
    const uint8_t* c = codes + gi * kCode;
    const uint4 a = *reinterpret_cast<const uint4*>(c + 16 * lane);
    d.w[0] = a.x;
    d.w[1] = a.y;
    d.w[2] = a.z;
    d.w[3] = a.w;
    if constexpr (W == 8) {
        const uint4 b = *reinterpret_cast<const uint4*>(c + 512 + 16 * lane);
        d.w[4] = b.x;
        d.w[5] = b.y;
        d.w[6] = b.z;
        d.w[7] = b.w;
    } else if constexpr (W == 6) {
        const uint2 b = *reinterpret_cast<const uint2*>(c + 512 + 8 * lane);
        d.w[4] = b.x;
        d.w[5] = b.y;
    }
    const uint8_t* sc = scales + gi * stage_scale_bytes<T>() + scale_lane_offset<T>(lane);
    if constexpr (T::kSc == Sc::Ue4m3 || T::kSc == Sc::Ue8m0) {
        d.w[W] = *reinterpret_cast<const uint16_t*>(sc);
    } else if constexpr (T::kSc == Sc::F32T128) {
        d.w[W] = __ldg(reinterpret_cast<const uint32_t*>(tile_scale));
    } else if constexpr (T::kScaleWords == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(sc);
        d.w[W] = v.x;
        d.w[W + 1] = v.y;
    } else {
        d.w[W] = *reinterpret_cast<const uint32_t*>(sc);
    }
}
// The same from a landed stage holding `groups` groups' codes, then their scales.
template <class T>
__device__ __forceinline__ void read_stage(const uint8_t* stage, int gi, int lane, const uint8_t* tile_scale,
                                           Slab<T>& d, int groups = T::kG) {
    read_slab<T>(stage, stage + groups * code_slab_bytes<T>(), gi, lane, tile_scale, d);
}

// Every lane: queues its activations of the slab whose first element is `k0` into
// `xs`, the 1 KiB of eight rows: its eight bf16/f16 pairs (registers 2q and 2q + 1 the B
// fragment of MMA q) as two 16-byte halves, at 16 x lane and 512 + 16 x lane, so that
// each half is one conflict-free 16-byte shared load a warp (contiguous 32 bytes a lane
// made each load two-way conflicted). `row`: the lane's activation row (element 0), or
// any readable address when `live` is false (past M), which zero-fills both halves, as
// the halves past K are. Arrives on `bar` when they land.
template <class T>
__device__ __forceinline__ void issue_x(const unsigned short* row, bool live, uint32_t k0, uint32_t k, int t, int lane,
                                        uint8_t* xs) {
    // Natural order: the lane's 16 consecutive elements; INT4-G32: 8 in each 32-block.
    const uint32_t o0 = k0 + (T::kHalfMap ? 8u : 16u) * t;
    const uint32_t o1 = o0 + (T::kHalfMap ? 32u : 8u);
    const bool v0 = live && o0 < k, v1 = live && o1 < k;
    // An element index of 0 where nothing is read keeps the address inside the row.
    cp_async16(xs + 16 * lane, row + (v0 ? o0 : 0u), v0 ? 16u : 0u);
    cp_async16(xs + 512 + 16 * lane, row + (v1 ? o1 : 0u), v1 ? 16u : 0u);
}

// ---------------------------------------------------------------------------------------
// One slab of one row group: decode, scale, multiply.

// The A fragment of MMA q (rows g and g + 8; k slots 2t, 2t+1 in a[0]/a[1], 2t+8, 2t+9
// in a[2]/a[3]) from the slab's words, as exact bf16 times the decode's power of two.
template <class T>
__device__ __forceinline__ void fragment(const Slab<T>& d, int q, uint32_t (&a)[4]) {
    if constexpr (T::kDec == Dec::E2M1) {
        dec_e2m1(d.w[q], a);
    } else if constexpr (T::kDec == Dec::Int4) {
        dec_int4(d.w[q], a);
    } else if constexpr (T::kDec == Dec::E4M3 || T::kDec == Dec::E5M2) {
        dec_fp8<T::kDec>(d.w[2 * q], a[0], a[2]);
        dec_fp8<T::kDec>(d.w[2 * q + 1], a[1], a[3]);
    } else {
        uint32_t r[4];
        dec_fp6_a<T::kDec>(d.w[q], r);
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = dec_fp6_b<T::kDec>(r[i], d.w[4 + q / 2], (q % 2) * 4 + i);
    }
}

// Pre-scaled schemes: the bf16 pair (s', s') for row g (h = 0) or g + 8 (h = 1) of the
// slab, s' the scale times the power of two that cancels the decode's and the layout's
// offset: the scale byte placed in the exponent field (UE8M0) or exponent and mantissa
// (UE4M3) of both halves, plus the bias `add` (exact for the codes prepare admits).
template <class T>
__device__ __forceinline__ uint32_t scale_pair(uint32_t sw, int h, uint32_t add) {
    const uint32_t v = prmt(sw, 0u, h ? 0x4141u : 0x4040u);  // the byte in both halves
    return v * (T::kSc == Sc::Ue4m3 ? 16u : 128u) + add;
}

// Post-scaled schemes: the f32 scales of rows g and g + 8 for block `b` of the slab's
// scale words (INT4-G32: b = 0, 1 within the slab; the others: the slab pair's block).
template <class T>
__device__ __forceinline__ void post_scales(const Slab<T>& d, int b, float& s0, float& s1) {
    constexpr int W = T::kWords;
    if constexpr (T::kSc == Sc::F16G32 || T::kSc == Sc::F16G128) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&d.w[W + b]));
        s0 = f.x;
        s1 = f.y;
    } else if constexpr (T::kSc == Sc::F32T128) {
        s0 = s1 = __uint_as_float(d.w[W]);
    } else {
        s0 = __uint_as_float(d.w[W]);
        s1 = __uint_as_float(d.w[W + 1]);
    }
}

template <int MT>
__device__ __forceinline__ void add_scaled(float (&acc)[MT][4], float (&dt)[MT][4], float s0, float s1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        acc[mt][0] = __fmaf_rn(dt[mt][0], s0, acc[mt][0]);
        acc[mt][1] = __fmaf_rn(dt[mt][1], s0, acc[mt][1]);
        acc[mt][2] = __fmaf_rn(dt[mt][2], s1, acc[mt][2]);
        acc[mt][3] = __fmaf_rn(dt[mt][3], s1, acc[mt][3]);
#pragma unroll
        for (int j = 0; j < 4; ++j) dt[mt][j] = 0.0f;
    }
}

// The bf16 scale pairs of a pre-scaled slab (rows g and g + 8); zero for the others.
template <class T>
__device__ __forceinline__ void slab_scales(const Slab<T>& d, uint32_t add, uint32_t& s0, uint32_t& s1) {
    s0 = s1 = 0;
    if constexpr (T::kPre) {
        s0 = scale_pair<T>(d.w[T::kWords], 0, add);
        s1 = scale_pair<T>(d.w[T::kWords], 1, add);
    }
}

// The A fragment of MMA q as the MMA takes it: pre-scaled schemes times their block
// scale pair (exact), FP8 block with the decode's 2^-120 / 2^-112 undone (exact), INT4
// as decoded.
template <class T>
__device__ __forceinline__ void mma_fragment(const Slab<T>& d, int q, uint32_t s0, uint32_t s1, uint32_t (&a)[4]) {
    fragment<T>(d, q, a);
    if constexpr (T::kPre) {
        a[0] = mul_bf16x2(a[0], s0);
        a[1] = mul_bf16x2(a[1], s1);
        a[2] = mul_bf16x2(a[2], s0);
        a[3] = mul_bf16x2(a[3], s1);
    } else if constexpr (T::kDec == Dec::E4M3 || T::kDec == Dec::E5M2) {
        constexpr uint32_t c = T::kDec == Dec::E4M3 ? 0x7B807B80u : 0x77807780u;
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = mul_bf16x2(a[i], c);
    }
}

// The A fragment of MMA (k16 step) q as f16 (f16 activations; INT4 and FP8 E4M3, which scale
// in f32): INT4 as 8 (c - 8) from 1024 + 8 c, E4M3 moved from its bf16 place (sign 15,
// magnitude 10:4) to f16's (magnitude 13:7: the element times 2^-8, subnormals too) and
// multiplied by 2^8. Exact, and the same values as the bf16 fragments.
template <class T>
__device__ __forceinline__ void f16_fragment(const Slab<T>& d, int q, uint32_t (&a)[4]) {
    static_assert(T::kDec == Dec::Int4 || T::kDec == Dec::E4M3, "f16 fragments: INT4 and FP8 block");
    if constexpr (T::kDec == Dec::Int4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            a[i] = sub_f16x2(and_or<0x00780078u, 0x64006400u>(rotr(d.w[q], 4 * i)), 0x64406440u);
        }
    } else {
        uint32_t r[4];
        fragment<T>(d, q, r);
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = mul_f16x2((r[i] & 0x80008000u) | ((r[i] << 3) & 0x3F803F80u), 0x5C005C00u);
    }
}

// The A fragment of step q for bf16 (mma_fragment) or f16 (F16) activations.
template <class T, bool F16>
__device__ __forceinline__ void a_fragment(const Slab<T>& d, int q, uint32_t s0, uint32_t s1, uint32_t (&a)[4]) {
    if constexpr (F16) {
        f16_fragment<T>(d, q, a);
    } else {
        mma_fragment<T>(d, q, s0, s1, a);
    }
}

// Multiplies one slab of one row group into acc (pre-scaled) or through dt (post).
// `b`: the B fragments, [n8 tile][piece][8 registers]; `odd`: the slab's index is odd
// (post-scaled blocks of two slabs end there). H: f16 activations as they are (one
// piece) times f16 fragments on the f16 MMA (the post-scaled schemes).
template <class T, int MT, int PIECES, bool H = false>
__device__ __forceinline__ void slab_product(const Slab<T>& d, const uint32_t (&b)[MT][PIECES][8], uint32_t add,
                                             bool odd, float (&acc)[MT][4], float (&dt)[MT][4]) {
    static_assert(!H || (!T::kPre && PIECES == 1), "the f16 MMA takes the post-scaled schemes' whole f16 activations");
    uint32_t s0, s1;
    slab_scales<T>(d, add, s0, s1);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        uint32_t a[4];
        a_fragment<T, H>(d, q, s0, s1, a);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int pc = 0; pc < PIECES; ++pc) {
                if constexpr (T::kPre) {
                    mma(acc[mt], a, b[mt][pc][2 * q], b[mt][pc][2 * q + 1]);
                } else {
                    mma_as<H>(dt[mt], a, b[mt][pc][2 * q], b[mt][pc][2 * q + 1]);
                }
            }
        }
        if constexpr (T::kHalfMap) {
            if (q == 1 || q == 3) {
                float f0, f1;
                post_scales<T>(d, q / 2, f0, f1);
                add_scaled<MT>(acc, dt, f0, f1);
            }
        }
    }
    if constexpr (!T::kPre && !T::kHalfMap) {
        if (odd) {
            float f0, f1;
            post_scales<T>(d, 0, f0, f1);
            add_scaled<MT>(acc, dt, f0, f1);
        }
    }
}

}  // namespace pgemv
}  // namespace bs
