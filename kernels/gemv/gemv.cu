// GEMV for decode: y = act(alpha x W^T + bias), x M x K (M <= 16, bf16 or f16), W N x K
// in any weight scheme, read once from memory whatever M is; the gated variant reads two
// matrices in the same pass and writes act0(..W0..) * act1(..W1..) (SwiGLU).
//
// Work split. A CTA of 4 warps owns 16 G consecutive weight rows (G 16-row groups: 4
// for 4-bit weights, 2 for 6- and 8-bit, so a step moves the same bytes) and a range of
// K; its warps take that range's 128-element steps in turn and add their sums at the
// end in a fixed order. When the row tiles leave the GPU, or its last wave, mostly idle
// (gemv.rs, Plan), gridDim.y splits K further: each CTA writes its partial sums and
// gemv_reduce adds them in split order. Nothing uses atomics, so results do not depend
// on timing.
//
// Data path. Each warp streams its steps through a 3-stage cp.async ring in shared
// memory (16-byte copies of the weight rows, 8-byte ones for FP6 and rows not 16-byte
// aligned, 4-byte copies of the raw scales; rows past N and columns past K are
// zero-filled). Per step the warp decodes its scales to f32
// once, then multiplies on the tensor cores with mma.sync m16n8k16 bf16: the weights
// are the A operand (16 rows per MMA), the activations the B operand (8 rows; a second
// MMA for rows 8..15). Every element of every scheme is exact in bf16 (the block scale
// is not applied to it), so each MMA sums exact products in f32; each block's sum is
// then multiplied by its f32 scale and added to an f32 accumulator (one FMA). f16
// activations are split into two bf16 pieces whose sum is exact (two MMAs).
//
// Fragments. Lane (g, t) of an MMA holds 4 elements of weight rows g and g + 8 for its
// k-slots {2t, 2t+1, 2t+8, 2t+9}; any order of K inside one MMA is fine as long as the
// activations use the same one, so each lane takes 4 consecutive elements: elements
// (U/4) t .. (U/4) t + U/4 - 1 of a U-element block (U = 16 for NVFP4, else 32; FP8
// 128-element blocks are four 32-element units with the same scale). 4-bit pairs are
// decoded as (e0, e2), (e1, e3), and the activation pairs are permuted to match.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../common/activation.cuh"
#include "../common/convert.cuh"
#include "../common/gemv_epilogue.cuh"
#include "../common/mma.cuh"
#include "../common/params.cuh"

namespace bs {
namespace gemv {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;
constexpr int kStepK = 128;

enum class Elem { E2M1, Int4, E4M3, E5M2, E2M3, E3M2 };
enum class Scale { Ue4m3, Ue8m0, F16, F32 };

// SB: K elements per scale (U, except FP8 block and INT4-G128: 128).
template <Elem E, Scale S, int BITS, int U, int SB = U>
struct Traits {
    static constexpr Elem kElem = E;
    static constexpr Scale kScale = S;
    static constexpr int kBits = BITS;
    static constexpr int kU = U;                         // K elements per scaled unit
    static constexpr int kUps = kStepK / U;              // units per step
    static constexpr int kMmas = U / 16;                 // MMAs per unit
    static constexpr int kG = BITS == 4 ? 4 : 2;         // 16-row groups per warp
    static constexpr int kRows = 16 * kG;                // weight rows per CTA
    static constexpr int kRowBytes = kStepK * BITS / 8;  // one row's bytes per step
    static constexpr int kUnitBytes = U * BITS / 8;
    static constexpr int kLaneBytes = kUnitBytes / 4;    // one lane's bytes per unit and row
    // Row pitch in shared memory: 16-byte aligned, and no bank conflicts for the lanes'
    // fragment reads (2/4-byte reads: 20 words per row; 8-byte reads: 40; FP6 reads
    // three 2-byte pieces and lives with a few conflicts).
    static constexpr int kPitch = BITS == 4 ? 80 : BITS == 8 ? 160 : 112;
    static constexpr int kSsize = S == Scale::F16 ? 2 : S == Scale::F32 ? 4 : 1;
    static constexpr int kUnitsPerScale = SB / U;
    static constexpr int kCps = kUps / kUnitsPerScale;  // scale columns per row and step
    // A stage's scale bytes per row: whole 4-byte words. INT4-G128's one f16 a step
    // (kHalfWord) sits in the word's low or high half, as its address is 4-byte aligned
    // or not: the copy takes the aligned word around it.
    static constexpr bool kHalfWord = kCps * kSsize < 4;
    static constexpr int kScaleBytes = kHalfWord ? 4 : kCps * kSsize;
    static constexpr bool kEvenOdd = BITS == 4;          // pairs (e0, e2), (e1, e3)
    static constexpr int kStage = kRows * kPitch + kRows * kScaleBytes;
    static constexpr int kDecoded = kRows * kUps * 4;   // f32 scales of one step
    static constexpr int kWarpBytes = kStages * kStage + kDecoded;
    static_assert(kStage % 16 == 0 && kScaleBytes % 4 == 0, "stage layout");
};

using TNvfp4 = Traits<Elem::E2M1, Scale::Ue4m3, 4, 16>;
using TMxfp4 = Traits<Elem::E2M1, Scale::Ue8m0, 4, 32>;
using TInt4 = Traits<Elem::Int4, Scale::F16, 4, 32>;
using TInt4G128 = Traits<Elem::Int4, Scale::F16, 4, 32, 128>;
using TMxfp6E2m3 = Traits<Elem::E2M3, Scale::Ue8m0, 6, 32>;
using TMxfp6E3m2 = Traits<Elem::E3M2, Scale::Ue8m0, 6, 32>;
using TMxfp8E4m3 = Traits<Elem::E4M3, Scale::Ue8m0, 8, 32>;
using TMxfp8E5m2 = Traits<Elem::E5M2, Scale::Ue8m0, 8, 32>;
using TFp8Block = Traits<Elem::E4M3, Scale::F32, 8, 32, 128>;

// ---------------------------------------------------------------------------------------
// Small wrappers.

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, uint32_t valid) {
    // Copies `valid` bytes (0..BYTES) and zero-fills the rest.
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid));
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(valid));
    }
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------------------------------
// Element decoding: exact bf16 values, two per register (low half = first element).

// Two E2M1 codes at bits 3:0 and 19:16 (the rest zero): sign to bit 15, magnitude
// (e1 e0 m) to bits 8:6, which reads as the value times 2^-126 (subnormal for e = 0).
__device__ __forceinline__ uint32_t e2m1x2(uint32_t v) {
    return mul_bf16x2((v * 0x1040u) & 0x81C081C0u, 0x7E807E80u);  // * 2^126
}

// Offset-8 INT4 codes at bits 3:0 and 19:16 of `v` (other bits ignored): bf16 128 + c,
// minus 136.
__device__ __forceinline__ uint32_t int4x2(uint32_t v) {
    return sub_bf16x2(and_or<0x000F000Fu, 0x43004300u>(v), 0x43084308u);
}

// Two E2M3 codes at bits 5:0 and 21:16: sign to 15, magnitude to 8:4, times 2^126.
__device__ __forceinline__ uint32_t e2m3x2(uint32_t v) {
    return mul_bf16x2((v * 0x0410u) & 0x81F081F0u, 0x7E807E80u);
}

// Two E3M2 codes at bits 5:0 and 21:16: sign to 15, magnitude to 9:5, times 2^124.
__device__ __forceinline__ uint32_t e3m2x2(uint32_t v) {
    return mul_bf16x2(((v & 0x001F001Fu) << 5) | ((v & 0x00200020u) << 10), 0x7D807D80u);
}

// Two FP8 codes at bits 15:8 and 31:24: sign in place, magnitude to 10:4 (E4M3, times
// 2^120) or 11:5 (E5M2, times 2^112).
template <Elem E>
__device__ __forceinline__ uint32_t fp8x2(uint32_t v) {
    if constexpr (E == Elem::E4M3) {
        return mul_bf16x2((v & 0x80008000u) | ((v >> 4) & 0x07F007F0u), 0x7B807B80u);
    } else {
        return mul_bf16x2((v & 0x80008000u) | ((v >> 3) & 0x0FE00FE0u), 0x77807780u);
    }
}

// The special codes the shifts above do not know: E4M3 0x7f / 0xff (NaN), E5M2 Inf and
// NaN. Rare (quantize never writes them), so checked per word and fixed slowly.
template <Elem E>
__device__ __forceinline__ void fp8_specials(uint32_t w, uint32_t& lo, uint32_t& hi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t b = (w >> (8 * j)) & 0xFFu;
        const uint32_t mag = b & 0x7Fu;
        uint32_t half;
        if (E == Elem::E4M3) {
            if (mag != 0x7Fu) continue;
            half = 0x7FC0u;
        } else {
            if (mag < 0x7Cu) continue;
            half = mag == 0x7Cu ? (0x7F80u | ((b & 0x80u) << 8)) : 0x7FC0u;
        }
        uint32_t& r = j < 2 ? lo : hi;
        const int shift = (j & 1) * 16;
        r = (r & ~(0xFFFFu << shift)) | (half << shift);
    }
}

template <Elem E>
__device__ __forceinline__ bool fp8_has_specials(uint32_t w) {
    if constexpr (E == Elem::E4M3) {
        return (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0u;
    } else {
        return (((w & 0x7C7C7C7Cu) + 0x04040404u) & 0x80808080u) != 0u;
    }
}

// A lane's bytes of one unit of one row (kLaneBytes of them) from shared memory.
template <class T>
__device__ __forceinline__ void read_lane(const uint8_t* p, uint32_t (&r)[2]) {
    if constexpr (T::kLaneBytes == 2) {
        r[0] = *reinterpret_cast<const uint16_t*>(p);
        r[1] = 0;
    } else if constexpr (T::kLaneBytes == 4) {
        r[0] = *reinterpret_cast<const uint32_t*>(p);
        r[1] = 0;
    } else if constexpr (T::kLaneBytes == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        r[0] = v.x;
        r[1] = v.y;
    } else {  // 6 bytes of FP6: 2-byte aligned
        const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
        r[0] = (uint32_t)h[0] | ((uint32_t)h[1] << 16);
        r[1] = h[2];
    }
}

// Elements 4i .. 4i + 3 of the lane's unit as two bf16 pairs: `lo` for k-slots 2t, 2t+1,
// `hi` for 2t+8, 2t+9. 4-bit: (e0, e2) and (e1, e3); others: (e0, e1) and (e2, e3).
template <class T>
__device__ __forceinline__ void decode(const uint32_t (&r)[2], int i, uint32_t& lo, uint32_t& hi) {
    if constexpr (T::kBits == 4) {
        // Bytes (e1 e0) and (e3 e2) of the halfword to bits 7:0 and 23:16.
        const uint32_t v = prmt(r[0], 0u, i == 0 ? 0x4140u : 0x4342u);
        if constexpr (T::kElem == Elem::E2M1) {
            lo = e2m1x2(v & 0x000F000Fu);
            hi = mul_bf16x2(((v & 0x00F000F0u) * 0x104u) & 0x81C081C0u, 0x7E807E80u);
        } else {
            lo = int4x2(v);
            hi = int4x2(v >> 4);
        }
    } else if constexpr (T::kBits == 8) {
        const uint32_t w = r[i];
        lo = fp8x2<T::kElem>(prmt(w, 0u, 0x1404u));
        hi = fp8x2<T::kElem>(prmt(w, 0u, 0x3424u));
        if (__builtin_expect(fp8_has_specials<T::kElem>(w), 0)) fp8_specials<T::kElem>(w, lo, hi);
    } else {
        // Codes 4i .. 4i + 3 of the lane's eight (48 bits, code j at bits 6j .. 6j + 5).
        const uint32_t g = i == 0 ? r[0] : ((r[0] >> 24) | (r[1] << 8));
        const uint32_t p01 = (g & 0x3Fu) | ((g << 10) & 0x3F0000u);
        const uint32_t p23 = ((g >> 12) & 0x3Fu) | ((g >> 2) & 0x3F0000u);
        if constexpr (T::kElem == Elem::E2M3) {
            lo = e2m3x2(p01);
            hi = e2m3x2(p23);
        } else {
            lo = e3m2x2(p01);
            hi = e3m2x2(p23);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Activations.

// One step's activations of row `m` for lane t: per unit u, the lane's U/4 elements
// starting at step * 128 + u U + t U/4, as bf16/f16 pairs: 16 registers (zeros past M or K).
template <class T>
__device__ __forceinline__ void load_x(const GemvParams& p, int step, int m, int t, uint32_t (&x)[16]) {
    const unsigned short* row = reinterpret_cast<const unsigned short*>(p.x) + (uint64_t)m * p.x_stride;
    constexpr int kLen = T::kU / 4;  // elements per unit and lane: 4 or 8
#pragma unroll
    for (int u = 0; u < T::kUps; ++u) {
        const uint32_t k0 = (uint32_t)step * kStepK + u * T::kU + t * kLen;
        const bool ok = (uint32_t)m < p.m && k0 < p.k;
        if constexpr (kLen == 4) {
            uint2 v = make_uint2(0u, 0u);
            if (ok) v = __ldg(reinterpret_cast<const uint2*>(row + k0));
            x[2 * u] = v.x;
            x[2 * u + 1] = v.y;
        } else {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (ok) v = __ldg(reinterpret_cast<const uint4*>(row + k0));
            x[4 * u] = v.x;
            x[4 * u + 1] = v.y;
            x[4 * u + 2] = v.z;
            x[4 * u + 3] = v.w;
        }
    }
}

// The B fragments of one unit: [piece][mma][register].
template <class T>
__device__ __forceinline__ void make_b(const uint32_t* x, bool f16, uint32_t (&b)[2][T::kMmas][2]) {
#pragma unroll
    for (int i = 0; i < T::kMmas; ++i) {
        uint32_t pa[2], pb[2];
        if (f16) {
            split_f16x2(x[2 * i], pa[0], pa[1]);
            split_f16x2(x[2 * i + 1], pb[0], pb[1]);
        } else {
            pa[0] = x[2 * i];
            pb[0] = x[2 * i + 1];
            pa[1] = pb[1] = 0u;
        }
#pragma unroll
        for (int pc = 0; pc < 2; ++pc) {
            if (T::kEvenOdd) {
                b[pc][i][0] = prmt(pa[pc], pb[pc], 0x5410u);  // (x0, x2)
                b[pc][i][1] = prmt(pa[pc], pb[pc], 0x7632u);  // (x1, x3)
            } else {
                b[pc][i][0] = pa[pc];
                b[pc][i][1] = pb[pc];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The copy of one step into a stage.

// Weight row `r` of the CTA's 16 G (gated: the first 8 G are matrix 0, the rest matrix
// 1, both for the same output rows).
template <class T>
__device__ __forceinline__ void row_of(const GemvParams& p, int rowbase, int r, int& mat, uint32_t& row) {
    mat = (p.gated && r >= T::kRows / 2) ? 1 : 0;
    row = (uint32_t)rowbase + (uint32_t)(p.gated ? r % (T::kRows / 2) : r);
}

// The slow path's weight copies, 8 bytes at a time: FP6 (96-byte row steps) and rows not
// 16-byte aligned (NVFP4 with K = 16 mod 32). Everything else, the block-interleaved
// layout included (K a multiple of 32: aligned rows), takes FastCopies.
template <class T>
__device__ __forceinline__ void issue_weights(const GemvParams& p, uint32_t stage, int step, int rowbase, int lane) {
    constexpr int kCh = 8;
    constexpr int kPieces = T::kRowBytes / kCh;
    const uint64_t row_bytes = (uint64_t)p.k * T::kBits / 8;
#pragma unroll 4
    for (int c = lane; c < T::kRows * kPieces; c += 32) {
        const int r = c / kPieces, piece = c % kPieces;
        int mat;
        uint32_t row;
        row_of<T>(p, rowbase, r, mat, row);
        const uint8_t* src = p.w[mat];
        uint32_t valid = 0;
        const uint64_t off = (uint64_t)step * T::kRowBytes + (uint64_t)piece * kCh;
        if (row < p.n && off < row_bytes) {
            src += (uint64_t)row * row_bytes + off;
            valid = (uint32_t)min((uint64_t)kCh, row_bytes - off);
        }
        cp_async<kCh>(stage + r * T::kPitch + piece * kCh, src, valid);
    }
}

// The byte offset of scale (row, col) in the weights' scale array: FP8 block f32 (one
// row per 128 with 128x128 tiles), INT4 f16, or UE4M3 / UE8M0 bytes, linear or swizzled.
template <class T>
__device__ __forceinline__ uint64_t scale_byte(const GemvParams& p, uint32_t row, uint32_t col) {
    if (T::kScale == Scale::F32) return ((uint64_t)(p.tiles ? row / 128u : row) * p.scale_cols + col) * 4u;
    if (T::kScale == Scale::F16) return ((uint64_t)row * p.scale_cols + col) * 2u;
    return p.swizzled ? swizzled_offset(row, col, p.scale_cols) : (uint64_t)row * p.scale_cols + col;
}

template <class T>
__device__ __forceinline__ void issue_scales(const GemvParams& p, uint8_t* stage, int step, int rowbase, int lane) {
    constexpr int kChunks = T::kScaleBytes / 4;
    constexpr int kPerChunk = T::kHalfWord ? 1 : 4 / T::kSsize;  // scale columns per 4-byte chunk
    uint8_t* raw = stage + T::kRows * T::kPitch;
    for (int c = lane; c < T::kRows * kChunks; c += 32) {
        const int r = c / kChunks, j = c % kChunks;
        int mat;
        uint32_t row;
        row_of<T>(p, rowbase, r, mat, row);
        const uint32_t col = (uint32_t)step * T::kCps + (uint32_t)j * kPerChunk;
        const uint8_t* base = reinterpret_cast<const uint8_t*>(p.s[mat]);
        uint64_t off = 0;
        uint32_t valid = 0;
        if (row < p.n && col < p.scale_cols) {
            valid = min((uint32_t)kPerChunk, p.scale_cols - col) * T::kSsize;
            off = scale_byte<T>(p, row, col);
        }
        uint8_t* dst = raw + r * T::kScaleBytes + 4 * j;
        if ((off & 3u) == 0u) {
            cp_async<4>(smem_u32(dst), base + off, valid);
        } else {
            // Linear scales whose rows are not a multiple of 4 bytes: byte by byte.
            uint32_t word = 0;
            for (uint32_t b = 0; b < valid; ++b) word |= (uint32_t)__ldg(base + off + b) << (8 * b);
            // kHalfWord: the half decode_scales reads, as the aligned word would hold it.
            if (T::kHalfWord) word <<= 8u * ((uint32_t)reinterpret_cast<uintptr_t>(base + off) & 2u);
            *reinterpret_cast<uint32_t*>(dst) = word;
        }
    }
}

// The lane's share of every step's copies, worked out once per kernel: when a step's row
// bytes split into a power of two of 16-byte pieces (4- and 8-bit weights with 16-byte
// aligned rows) and its scales into a power of two of 4-byte chunks, each lane copies
// the same piece of rows a fixed distance apart at every step, from addresses that move
// by a fixed stride per step. (FP6 and unaligned rows take issue_step below.)
template <class T>
struct FastCopies {
    static constexpr int kPieces = T::kRowBytes / 16;
    static constexpr int kW = T::kRows * kPieces / 32;   // weight copies per lane and step
    static constexpr int kWApart = 32 / kPieces;         // rows between a lane's copies
    static constexpr int kChunks = T::kScaleBytes / 4;
    static constexpr int kS = T::kRows * kChunks / 32;   // scale copies per lane and step
    static constexpr int kSApart = 32 / kChunks;
    static constexpr int kPerChunk = T::kHalfWord ? 1 : 4 / T::kSsize;  // scale columns per chunk
    static constexpr int kCps = T::kCps;
    static constexpr bool kUsable = (kPieces & (kPieces - 1)) == 0 && T::kRowBytes % 16 == 0 && kPieces <= 32 &&
                                    kChunks >= 1 && (kChunks & (kChunks - 1)) == 0 && kS >= 1;

    const uint8_t* w0;     // the lane's piece of matrix 0 at step 0
    const uint8_t* w1;     // of matrix 1 (gated), else matrix 0
    // 32-bit sizes: gemv.rs keeps K below 2^28, so a row and 8 rows' bytes fit.
    uint32_t w_row;        // bytes between the lane's consecutive copies' rows
    uint32_t w_step;       // bytes per step
    int32_t w_rem;         // bytes from the lane's piece to the end of the row at step 0
    uint32_t w_ok;         // bit i: copy i's row is below N
    uint32_t w_dst;        // the lane's first piece in a stage
    const uint8_t* s[kS];  // the lane's scale chunks at step 0
    uint32_t s_step;
    int32_t s_rem;         // scale columns from the lane's chunk to the end of the row
    uint32_t s_ok, s_aligned;
    uint32_t s_dst;
    bool gated;
    const uint8_t* safe_w;  // a valid address for copies of nothing
    const uint8_t* safe_s;

    __device__ __forceinline__ FastCopies(const GemvParams& p, int rowbase, int lane) {
        const bool inter = T::kBits == 4 && p.interleaved;
        gated = p.gated != 0;
        safe_w = p.w[0];
        safe_s = reinterpret_cast<const uint8_t*>(p.s[0]);
        const uint64_t row_bytes = (uint64_t)p.k * T::kBits / 8;
        const int piece = lane % kPieces, r0 = lane / kPieces;
        const uint64_t row0 = (uint64_t)rowbase + r0;
        const uint64_t at = inter ? ((uint64_t)piece * p.n + row0) * 16u : row0 * row_bytes + piece * 16u;
        w0 = p.w[0] + at;
        w1 = (gated ? p.w[1] : p.w[0]) + at;
        w_row = (uint32_t)(inter ? 16u : row_bytes) * kWApart;
        w_step = inter ? 64u * p.n : (uint32_t)T::kRowBytes;
        w_rem = inter ? ((int32_t)(p.k / 32u) - piece) * 16 : (int32_t)row_bytes - piece * 16;
        w_ok = 0;
#pragma unroll
        for (int i = 0; i < kW; ++i) {
            const int r = r0 + i * kWApart;
            const uint32_t row = (uint32_t)rowbase + (uint32_t)(gated ? r % (T::kRows / 2) : r);
            w_ok |= (row < p.n ? 1u : 0u) << i;
        }
        w_dst = (uint32_t)(r0 * T::kPitch + piece * 16);

        const int j = lane % kChunks, rs0 = lane / kChunks;
        const uint32_t col = (uint32_t)(j * kPerChunk);
        s_ok = s_aligned = 0;
#pragma unroll
        for (int i = 0; i < kS; ++i) {
            const int r = rs0 + i * kSApart;
            const int mat = (gated && r >= T::kRows / 2) ? 1 : 0;
            const uint32_t row = (uint32_t)rowbase + (uint32_t)(r - mat * (T::kRows / 2));
            const uint64_t off = scale_byte<T>(p, row, col);
            s[i] = reinterpret_cast<const uint8_t*>(p.s[mat]) + off;
            s_ok |= (row < p.n ? 1u : 0u) << i;
            s_aligned |= ((off & 3u) == 0u ? 1u : 0u) << i;
        }
        s_step = T::kScale == Scale::F32   ? kCps * 4u
                 : T::kScale == Scale::F16 ? kCps * 2u
                 : p.swizzled              ? (kCps / 4) * 512u
                                           : (uint32_t)kCps;
        s_rem = (int32_t)(p.scale_cols - col);
        s_dst = (uint32_t)(T::kRows * T::kPitch + rs0 * T::kScaleBytes + 4 * j);
    }

    __device__ __forceinline__ void issue(uint8_t* stage, int step) const {
        const uint32_t base = smem_u32(stage);
        const int32_t rem = w_rem - step * T::kRowBytes;
        const uint32_t v = rem <= 0 ? 0u : (uint32_t)min(rem, 16);
        const uint64_t off = (uint64_t)step * w_step;
#pragma unroll
        for (int i = 0; i < kW; ++i) {
            // Gated: the second half of the copies reads matrix 1 for the same rows.
            const bool second = i >= kW / 2;
            const uint8_t* src = (second && gated ? w1 + (uint64_t)(i - kW / 2) * w_row : w0 + (uint64_t)i * w_row) + off;
            const uint32_t valid = (w_ok >> i) & 1u ? v : 0u;
            cp_async<16>(base + w_dst + i * kWApart * T::kPitch, valid ? src : safe_w, valid);
        }
        const int32_t cols = s_rem - step * kCps;
        const uint32_t sv = cols <= 0 ? 0u : (uint32_t)min(cols, kPerChunk) * T::kSsize;
        const uint64_t soff = (uint64_t)step * s_step;
#pragma unroll
        for (int i = 0; i < kS; ++i) {
            const uint32_t valid = (s_ok >> i) & 1u ? sv : 0u;
            const uint8_t* src = s[i] + soff;
            uint8_t* dst = stage + s_dst + i * kSApart * T::kScaleBytes;
            if constexpr (T::kHalfWord) {
                // The aligned word holding the scale: from 2 bytes before it (the row's
                // previous scale, or the one before the row) when it is the high half.
                const uint32_t high = (uint32_t)reinterpret_cast<uintptr_t>(src) & 2u;
                cp_async<4>(smem_u32(dst), valid ? src - high : safe_s, valid ? valid + high : 0u);
            } else if ((s_aligned >> i) & 1u) {
                cp_async<4>(smem_u32(dst), valid ? src : safe_s, valid);
            } else {
                uint32_t word = 0;
                for (uint32_t b = 0; b < valid; ++b) word |= (uint32_t)__ldg(src + b) << (8 * b);
                *reinterpret_cast<uint32_t*>(dst) = word;
            }
        }
    }
};

template <class T>
__device__ __forceinline__ void issue_step(const GemvParams& p, uint8_t* stage, int step, int rowbase, int lane) {
    issue_weights<T>(p, smem_u32(stage), step, rowbase, lane);
    issue_scales<T>(p, stage, step, rowbase, lane);
}

// The step's scales as f32, [row][unit], decoded once per warp, four units per lane and
// pass (one 4- or 8-byte shared load, one 16-byte store).
template <class T>
__device__ __forceinline__ void decode_scales(const GemvParams& p, const uint8_t* stage, float* dec, int step, int rowbase,
                                              int lane) {
    static_assert(T::kUps % 4 == 0, "four units per pass");
    constexpr int kQuads = T::kUps / 4;  // per row
    const uint8_t* raw = stage + T::kRows * T::kPitch;
    for (int q = lane; q < T::kRows * kQuads; q += 32) {
        const int r = q / kQuads, u4 = q % kQuads;
        const uint8_t* s = raw + r * T::kScaleBytes;
        float4 v;
        if constexpr (T::kScale == Scale::Ue4m3 || T::kScale == Scale::Ue8m0) {
            const uint32_t b = *reinterpret_cast<const uint32_t*>(s + 4 * u4);
            float f[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t byte = (b >> (8 * i)) & 0xFFu;
                f[i] = T::kScale == Scale::Ue4m3 ? decode_ue4m3(byte) : decode_ue8m0(byte);
            }
            v = make_float4(f[0], f[1], f[2], f[3]);
        } else if constexpr (T::kScale == Scale::F16 && T::kHalfWord) {
            // INT4-G128: one f16 for the step's four units, in the half its address picks.
            int mat;
            uint32_t row;
            row_of<T>(p, rowbase, r, mat, row);
            const uint8_t* at = reinterpret_cast<const uint8_t*>(p.s[mat]) + scale_byte<T>(p, row, (uint32_t)step * T::kCps);
            const uint32_t half = (uint32_t)reinterpret_cast<uintptr_t>(at) & 2u;
            const float f = __half2float(*reinterpret_cast<const __half*>(s + half));
            v = make_float4(f, f, f, f);
        } else if constexpr (T::kScale == Scale::F16) {
            const uint2 h = *reinterpret_cast<const uint2*>(s + 8 * u4);
            const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
            const float2 c = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
            v = make_float4(a.x, a.y, c.x, c.y);
        } else {
            // FP8 block: one f32 scale for the step's four 32-element units.
            const float f = reinterpret_cast<const float*>(s)[u4];
            v = make_float4(f, f, f, f);
        }
        *reinterpret_cast<float4*>(dec + r * T::kUps + 4 * u4) = v;
    }
}

// ---------------------------------------------------------------------------------------
// The kernel.

// ACT: the activation type, kBf16 or kF16 compiled in, or kAnyAct read from p.act_f16
// (the M <= 16 kernels, where two compiled-in variants would need more registers than
// fit without spilling).
enum Act { kBf16, kF16, kAnyAct };

template <class T, bool M16, Act ACT>
__device__ __forceinline__ void gemv(const GemvParams& p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int G = T::kG;
    constexpr int kJ = M16 ? 8 : 4;  // accumulators per lane and group
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gm = lane / 4, t = lane % 4;
    const int rowbase = blockIdx.x * (p.gated ? T::kRows / 2 : T::kRows);
    const bool f16 = ACT == kAnyAct ? p.act_f16 != 0 : ACT == kF16;

    // The launch must give the shared memory this instantiation lays out (gemv.rs
    // mirrors the sizes; a mismatch would be silent corruption, so it is a fault).
    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (dynamic_smem < (uint32_t)(kWarps * T::kWarpBytes)) __trap();

    uint8_t* mine = smem + warp * T::kWarpBytes;
    float* dec = reinterpret_cast<float*>(mine + kStages * T::kStage);
    using Fast = FastCopies<T>;
    // The slow path (issue_step) has no block-interleaved addressing: 4-bit weights must
    // always be able to take FastCopies.
    static_assert(T::kBits == 6 || Fast::kUsable, "4- and 8-bit weights need FastCopies");
    // 16-byte pieces need 16-byte aligned rows (gemv.rs sets ch16; the interleaved layout
    // always has them).
    Fast copies(p, rowbase, lane);
    auto issue = [&](uint8_t* stage, int step) {
        if constexpr (Fast::kUsable) {
            if (p.ch16) {
                copies.issue(stage, step);
                return;
            }
        }
        issue_step<T>(p, stage, step, rowbase, lane);
    };

    // This CTA's steps, taken by its warps in turn.
    const int steps = (int)((p.k + kStepK - 1) / kStepK);
    const int first = (int)(blockIdx.y * p.steps_per_split);
    const int last = min(steps, first + (int)p.steps_per_split);
    const int count = first + warp < last ? (last - first - warp + kWarps - 1) / kWarps : 0;

    float acc[G][kJ];
#pragma unroll
    for (int gi = 0; gi < G; ++gi)
#pragma unroll
        for (int j = 0; j < kJ; ++j) acc[gi][j] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < count) issue(mine + s * T::kStage, first + warp + s * kWarps);
        cp_commit();
    }

    for (int it = 0; it < count; ++it) {
        // M <= 8: the step's activations first, so their global-load latency overlaps
        // the wait for the weights and the scale decoding below (with 16 rows that many
        // registers live across it would spill; they load after).
        const int step = first + warp + it * kWarps;
        uint32_t x[16], x8[16];
        if constexpr (!M16) load_x<T>(p, step, gm, t, x);

        cp_wait<kStages - 2>();
        __syncwarp();
        {
            const int ahead = it + kStages - 1;
            if (ahead < count) {
                issue(mine + (ahead % kStages) * T::kStage, first + warp + ahead * kWarps);
            }
            cp_commit();
        }
        const uint8_t* stage = mine + (it % kStages) * T::kStage;
        decode_scales<T>(p, stage, dec, step, rowbase, lane);
        __syncwarp();

        if constexpr (M16) {
            load_x<T>(p, step, gm, t, x);
            load_x<T>(p, step, gm + 8, t, x8);
        }

#pragma unroll
        for (int u = 0; u < T::kUps; ++u) {
            uint32_t b[2][T::kMmas][2], b8[2][T::kMmas][2];
            make_b<T>(x + u * 2 * T::kMmas, f16, b);
            if (M16) make_b<T>(x8 + u * 2 * T::kMmas, f16, b8);
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                const uint8_t* r0 = stage + (16 * gi + gm) * T::kPitch + u * T::kUnitBytes + t * T::kLaneBytes;
                uint32_t w0[2], w8[2];
                read_lane<T>(r0, w0);
                read_lane<T>(r0 + 8 * T::kPitch, w8);
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float d8[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int i = 0; i < T::kMmas; ++i) {
                    uint32_t a[4];
                    decode<T>(w0, i, a[0], a[2]);
                    decode<T>(w8, i, a[1], a[3]);
                    mma(d, a, b[0][i][0], b[0][i][1]);
                    if (f16) mma(d, a, b[1][i][0], b[1][i][1]);
                    if (M16) {
                        mma(d8, a, b8[0][i][0], b8[0][i][1]);
                        if (f16) mma(d8, a, b8[1][i][0], b8[1][i][1]);
                    }
                }
                const float s0 = dec[(16 * gi + gm) * T::kUps + u];
                const float s1 = dec[(16 * gi + gm + 8) * T::kUps + u];
                acc[gi][0] = __fmaf_rn(d[0], s0, acc[gi][0]);
                acc[gi][1] = __fmaf_rn(d[1], s0, acc[gi][1]);
                acc[gi][2] = __fmaf_rn(d[2], s1, acc[gi][2]);
                acc[gi][3] = __fmaf_rn(d[3], s1, acc[gi][3]);
                if (M16) {
                    acc[gi][4] = __fmaf_rn(d8[0], s0, acc[gi][4]);
                    acc[gi][5] = __fmaf_rn(d8[1], s0, acc[gi][5]);
                    acc[gi][6] = __fmaf_rn(d8[2], s1, acc[gi][6]);
                    acc[gi][7] = __fmaf_rn(d8[3], s1, acc[gi][7]);
                }
            }
        }
        __syncwarp();
    }
    cp_wait<0>();
    __syncthreads();

    // The warps' sums, added in warp order: red[warp][group][lane][j].
    constexpr int kEntries = G * 32 * kJ;
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int gi = 0; gi < G; ++gi)
#pragma unroll
        for (int j = 0; j < kJ; ++j) red[warp * kEntries + (gi * 32 + lane) * kJ + j] = acc[gi][j];
    __syncthreads();

    const int groups_out = p.gated ? G / 2 : G;
    for (int e = threadIdx.x; e < groups_out * 32 * kJ; e += kThreads) {
        const int gi = e / (32 * kJ), l = (e / kJ) % 32, j = e % kJ;
        float v0 = 0.0f, v1 = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            v0 = __fadd_rn(v0, red[w * kEntries + e]);
            if (p.gated) v1 = __fadd_rn(v1, red[w * kEntries + e + (G / 2) * 32 * kJ]);
        }
        // D fragment (j & 3): rows g, g + 8 of the group; columns (activation rows) 2t, 2t + 1.
        const uint32_t n = (uint32_t)rowbase + 16u * gi + (uint32_t)(l / 4) + 8u * ((j & 3) >> 1);
        const uint32_t m = 2u * (uint32_t)(l % 4) + (uint32_t)(j & 1) + 8u * (uint32_t)(j >> 2);
        if (n >= p.n || m >= p.m) continue;
        if (p.splits == 1) {
            gemv_write_output(p, m, n, v0, v1);
        } else {
            const uint32_t mats = p.gated ? 2u : 1u;
            const uint64_t plane = (uint64_t)p.m * p.n;
            float* part = p.partial + (uint64_t)blockIdx.y * mats * plane + (uint64_t)m * p.n + n;
            part[0] = v0;
            if (p.gated) part[plane] = v1;
        }
    }
}

}  // namespace gemv
}  // namespace bs

using bs::GemvParams;

// Per scheme: M <= 8 rows of bf16 (`gemv_{name}`) or f16 (`_f16`), and M <= 16 rows of
// either (`_m16`). ptxas left to itself spills the M <= 8 kernels at 128 registers: 168
// keeps the bf16 one spill-free at three CTAs per SM (the shared memory allows no more),
// the f16 one (two bf16 pieces per activation) takes up to 232 and two CTAs per SM.
#define BS_GEMV(name, traits)                                                                    \
    extern "C" __global__ void __maxnreg__(168) gemv_##name(const GemvParams p) {                \
        bs::gemv::gemv<bs::gemv::traits, false, bs::gemv::kBf16>(p);                             \
    }                                                                                            \
    extern "C" __global__ void __maxnreg__(232) gemv_##name##_f16(const GemvParams p) {          \
        bs::gemv::gemv<bs::gemv::traits, false, bs::gemv::kF16>(p);                              \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(bs::gemv::kThreads) gemv_##name##_m16(const GemvParams p) { \
        bs::gemv::gemv<bs::gemv::traits, true, bs::gemv::kAnyAct>(p);                            \
    }

BS_GEMV(nvfp4, TNvfp4)
BS_GEMV(mxfp4, TMxfp4)
BS_GEMV(int4_g32, TInt4)
BS_GEMV(int4_g128, TInt4G128)
BS_GEMV(mxfp6_e2m3, TMxfp6E2m3)
BS_GEMV(mxfp6_e3m2, TMxfp6E3m2)
BS_GEMV(mxfp8_e4m3, TMxfp8E4m3)
BS_GEMV(mxfp8_e5m2, TMxfp8E5m2)
BS_GEMV(fp8_block, TFp8Block)

// The split-K sums added in split order, then the epilogue: one thread per output.
extern "C" __global__ void gemv_reduce(const GemvParams p) {
    const uint64_t plane = (uint64_t)p.m * p.n;
    const uint32_t mats = p.gated ? 2u : 1u;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (uint64_t)gridDim.x * blockDim.x) {
        float v0 = 0.0f, v1 = 0.0f;
        for (uint32_t s = 0; s < p.splits; ++s) {
            const float* part = p.partial + (uint64_t)s * mats * plane + i;
            v0 = __fadd_rn(v0, part[0]);
            if (p.gated) v1 = __fadd_rn(v1, part[plane]);
        }
        bs::gemv_write_output(p, (uint32_t)(i / p.n), (uint32_t)(i % p.n), v0, v1);
    }
}
