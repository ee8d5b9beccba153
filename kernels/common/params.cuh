// Kernel parameter structs, mirrored by #[repr(C)] structs in
// crates/blockscale-cuda/src/ffi/params.rs (which asserts the same sizes): field for
// field, except that the Rust side nests the run rows (n), k, scale_cols, swizzled,
// interleaved of QuantParams, DequantParams and GemvParams as one MatrixFields (five
// 4-byte fields, the same bytes).
#pragma once

#include <stdint.h>

namespace bs {

// Scheme codes of the kernels' templates (CUDA only: the host picks a kernel by name,
// crates/blockscale-cuda/src/ffi/names.rs `scheme_name`).
enum SchemeCode : uint32_t {
    NVFP4 = 0,
    MXFP4 = 1,
    MXFP6_E2M3 = 2,
    MXFP6_E3M2 = 3,
    MXFP8_E4M3 = 4,
    MXFP8_E5M2 = 5,
    FP8_BLOCK_1X128 = 6,
    FP8_BLOCK_128X128 = 7,
    INT4_G32 = 8,
    INT4_G128 = 9,
};

// INT4 in groups of 32 or 128 along K (offset-8 codes, f16 scales).
__host__ __device__ constexpr bool is_int4(uint32_t s) { return s == INT4_G32 || s == INT4_G128; }

// Elements per block along K: 16 (NVFP4), 128 (FP8 block, INT4-G128), 32 otherwise.
__host__ __device__ constexpr uint32_t block_of(uint32_t s) {
    return s == NVFP4 ? 16u : (s == FP8_BLOCK_1X128 || s == FP8_BLOCK_128X128 || s == INT4_G128) ? 128u : 32u;
}

struct QuantParams {
    const void* input;        // rows x k values, row stride `row_stride` elements
    uint8_t* data;            // packed codes (row-major, or block-interleaved for INT4)
    void* scales;             // u8 (UE4M3 / UE8M0), f32 (FP8 block) or u16 (f16, INT4)
    unsigned long long* bad;  // ~(min flat index row * k + col) of a NaN/Inf seen, 0 if none
    unsigned long long row_stride;
    uint32_t rows;
    uint32_t k;
    uint32_t scale_cols;      // k / block
    uint32_t swizzled;        // scale layout: 0 linear, 1 Swizzled128x4
    uint32_t interleaved;     // INT4 data layout: 0 row-major, 1 block-interleaved
    uint32_t rule;            // MX ScaleRule: 0 Rceil, 1 Floor, 2 Ceil, 3 Even
    uint32_t recipe;          // NVFP4: 0 LightX2V, 1 TransformerEngine
    float global_encode;      // NVFP4 per-tensor encode scale g
    float max_recip;          // MX: RN(1 / element max)
    int32_t emax;             // MX: element's largest power of two
    int32_t mbits;            // MX: element mantissa bits
    uint32_t pad;
};

struct DequantParams {
    const uint8_t* data;
    const void* scales;
    void* out;                // rows x k outputs, row stride `row_stride` elements
    unsigned long long row_stride;
    uint32_t rows;
    uint32_t k;
    uint32_t scale_cols;
    uint32_t swizzled;
    uint32_t interleaved;
    float post;               // NVFP4 decode factor, 1 otherwise
};

struct AmaxParams {
    const void* input;
    unsigned int* amax_bits;  // atomicMax of finite |x| bit patterns
    unsigned long long* bad;  // ~(min flat index) of a NaN/Inf, 0 if none
    unsigned long long row_stride;
    uint32_t rows;
    uint32_t k;
};

// GEMM operand preparation (kernels/gemm/prepare.cu).

// Activations x (rows x k, any element stride) written as `pieces` bf16 matrices side by
// side: out[r * out_stride + p * k + c] = piece p of x[r, c] (their sum is x exactly).
struct SplitParams {
    const void* x;
    void* out;
    unsigned long long x_stride;    // elements
    unsigned long long out_stride;  // bf16 elements
    uint32_t rows;
    uint32_t k;
    uint32_t pieces;                // 1 (bf16), 2 (f16) or 3 (f32)
    uint32_t pad;
};

// A rows x cols matrix copied between row strides (the GEMM's staged output).
struct CopyParams {
    const void* src;
    void* dst;
    unsigned long long src_stride;  // elements
    unsigned long long dst_stride;  // elements
    uint32_t rows;
    uint32_t cols;
};

// FP8 1x128 / 128x128 activation scales rewritten as one f32 per row and 128 of K,
// K-major ([rows][kb]) or M-major ([kb][rows]).
struct Fp8ScaleParams {
    const float* src;
    float* dst;
    uint32_t rows;
    uint32_t kb;                    // K / 128
    uint32_t tiles;                 // source holds one scale per 128 rows (128x128 tiles)
    uint32_t mn_major;              // destination [kb][rows]
};

// GEMV (kernels/gemv/gemv.cu): y = act(alpha x W^T + bias) for M <= 16 activation rows,
// or the gated y = act0(alpha0 x W0^T + bias0) * act1(alpha1 x W1^T + bias1).
struct GemvParams {
    const void* x;                  // M x K bf16 or f16, row stride x_stride elements
    const uint8_t* w[2];            // packed weights (N x K): [0] the plain or gate matrix, [1] up
    const void* s[2];               // their block scales
    const float* bias[2];           // N f32 each, or null
    void* out;                      // M x N outputs, row stride out_stride elements
    float* partial;                 // split-K partial sums [split][mats][M][N] (splits > 1)
    unsigned long long x_stride;    // elements
    unsigned long long out_stride;  // elements
    float alpha[2];
    uint32_t m;
    uint32_t n;
    uint32_t k;
    uint32_t scale_cols;            // scale columns (K / block)
    uint32_t swizzled;              // scale layout: 0 linear, 1 Swizzled128x4
    uint32_t interleaved;           // 4-bit data layout: 0 row-major, 1 block-interleaved
    uint32_t tiles;                 // FP8 block: one scale per 128 rows (128x128), else per row (1x128)
    uint32_t act_f16;               // activations are f16 (else bf16)
    uint32_t out_kind;              // 0 bf16, 1 f16, 2 f32
    uint32_t activation[2];         // per matrix, as bs::activation
    uint32_t gated;                 // 1: two matrices, y = first * second
    uint32_t splits;                // CTAs along K (gridDim.y)
    uint32_t steps_per_split;       // 128-element K steps per split
    uint32_t ch16;                  // weight rows 16-byte aligned: 16-byte copies, else 8
    uint32_t pad;
};

// GEMV on prepared weights (kernels/gemv/prepared.cu; the layout in
// crates/blockscale-cuda/src/prepared/layout.rs): y = act(alpha x W^T + bias) for M <= 16,
// or the gated product of two matrices.
struct PgemvParams {
    const void* x;                  // M x K bf16 or f16, row stride x_stride elements
    const uint32_t* w[2];           // prepared codes: [0] the plain or gate matrix, [1] up
    const uint8_t* s[2];            // their prepared scales
    const float* bias[2];           // N f32 each, or null
    void* out;                      // M x N outputs, row stride out_stride elements
    float* partial;                 // split-K partial sums [split][mats][M][N] (splits > 1)
    unsigned int* counters;         // per row tile, zero between launches (splits > 1)
    unsigned long long x_stride;    // elements
    unsigned long long out_stride;  // elements
    float alpha[2];                 // the epilogue's alpha times the layout's power of two
    uint32_t scale_add[2];          // pre-scaled schemes: bf16 exponent bias of the scales, both halves
    uint32_t m;
    uint32_t n;
    uint32_t k;
    uint32_t slabs;                 // 64-element K slabs of the layout (a multiple of 4)
    uint32_t chunks;                // slabs / 4
    uint32_t out_kind;              // 0 bf16, 1 f16, 2 f32
    uint32_t activation[2];         // per matrix, as bs::activation
    uint32_t gated;                 // 1: two matrices, y = first * second
    uint32_t splits;                // CTAs along K (gridDim.y)
    uint32_t chunks_per_split;
    uint32_t early_dependents;      // 1: the grid is one wave; dependents may launch from the start
};

// Weight-only GEMM on prepared weights (kernels/gemm/pgemm.cu): y = act(alpha x W^T + bias).
struct PgemmParams {
    const void* x;                  // M x K bf16 or f16, row stride x_stride elements
    const uint32_t* w;              // prepared codes
    const uint8_t* s;               // prepared scales
    const float* bias;              // N f32, or null
    void* out;                      // M x N outputs, row stride out_stride elements
    float* partial;                 // split-K partial sums [split][M][N] (splits > 1); wgemm: stream-K's
    unsigned int* counters;         // wgemm stream-K: per stream-K tile, zero between launches
    unsigned long long x_stride;    // elements
    unsigned long long out_stride;  // elements
    float alpha;                    // the epilogue's alpha times the layout's power of two
    uint32_t scale_add;             // pre-scaled schemes: bf16 exponent bias of the scales, both halves
    uint32_t m;
    uint32_t n;
    uint32_t k;
    uint32_t slabs;                 // 64-element K slabs of the layout
    uint32_t out_kind;              // 0 bf16, 1 f16, 2 f32
    uint32_t activation;            // as bs::activation
    uint32_t splits;                // CTAs along K (gridDim.z)
    uint32_t slabs_per_split;       // a multiple of 2
    uint32_t tail;                  // wgemm: last tiles split in two K halves (splits = 1), else 0
    uint32_t sk_tiles;              // wgemm: last tiles spread over the grid by slabs (stream-K), else 0
    uint32_t sk_slabs;              // wgemm stream-K: slabs a CTA (even)
};

// Block-scaled FP8 pair GEMM on Hopper's FP8 tensor cores (kernels/gemm/fgemm.cu): A (M x K
// activations) times B (N x K weights), FP8 block (E4M3, A's scales per 1x128 or
// 128x128, B's per 128x128) or MXFP8 (E4M3 or E5M2, UE8M0 scales per 32 on both sides),
// both read by TMA through the tensor maps passed beside these parameters (and, with
// store_map, the outputs stored through the third). `g` as for
// wgemm: slabs and slabs_per_split count 128-element K blocks (g.splits > 1: the splits of
// a tile are one cluster); x, w, s, partial, scale_add unused.
struct FgemmParams {
    PgemmParams g;
    const void* sa;                 // A's scales: FP8 block f32 [M][K/128] or [ceil(M/128)][K/128]
                                    // (a_tiles); MX bytes [M][scale_cols] or Swizzled128x4
    const void* sb;                 // B's scales: FP8 block f32 [ceil(N/128)][K/128]; MX as A's
    uint32_t a_tiles;               // FP8 block: A's scales per 128-row tile
    uint32_t scale_cols;            // MX: scale columns of a row (K / 32)
    uint32_t swizzled;              // MX: bit 0 A's scales Swizzled128x4, bit 1 B's
    uint32_t pair;                  // pairs of M tiles share each weight tile (multicast; fgemm.cu)
    uint32_t store_map;             // the outputs are stored by TMA through the third tensor map
};

// Index of scale (row, col) in the Swizzled128x4 layout with `cols` logical columns.
__device__ __forceinline__ uint64_t swizzled_offset(uint32_t row, uint32_t col, uint32_t cols) {
    const uint64_t k_tiles = (cols + 3u) / 4u;
    return (uint64_t)(row / 128u) * k_tiles * 512u + (uint64_t)(col / 4u) * 512u + (row % 32u) * 16u +
           ((row % 128u) / 32u) * 4u + (col % 4u);
}

// The u32 word holding the 8 four-bit codes of (row, col .. col + 8): row-major, or the
// block-interleaved [k/32, rows, 4] layout (word w of K-block kb of row r at
// (kb * rows + r) * 4 + w).
__device__ __forceinline__ uint64_t word_index(uint32_t interleaved, uint32_t rows, uint32_t k, uint32_t row, uint32_t col) {
    return interleaved ? ((uint64_t)(col / 32u) * rows + row) * 4u + (col % 32u) / 8u : (uint64_t)row * (k / 8u) + col / 8u;
}

__device__ __forceinline__ uint64_t scale_offset(uint32_t swizzled, uint32_t row, uint32_t col, uint32_t cols) {
    return swizzled ? swizzled_offset(row, col, cols) : (uint64_t)row * cols + col;
}

}  // namespace bs

// The Rust mirrors (crates/blockscale-cuda/src/params.rs) assert the same sizes.
static_assert(sizeof(bs::QuantParams) == 88, "QuantParams layout changed: update params.rs");
static_assert(sizeof(bs::DequantParams) == 56, "DequantParams layout changed: update params.rs");
static_assert(sizeof(bs::AmaxParams) == 40, "AmaxParams layout changed: update params.rs");
static_assert(sizeof(bs::SplitParams) == 48, "SplitParams layout changed: update params.rs");
static_assert(sizeof(bs::CopyParams) == 40, "CopyParams layout changed: update params.rs");
static_assert(sizeof(bs::Fp8ScaleParams) == 32, "Fp8ScaleParams layout changed: update params.rs");
static_assert(sizeof(bs::GemvParams) == 160, "GemvParams layout changed: update params.rs");
static_assert(sizeof(bs::PgemvParams) == 160, "PgemvParams layout changed: update params.rs");
static_assert(sizeof(bs::PgemmParams) == 128, "PgemmParams layout changed: update params.rs");
static_assert(sizeof(bs::FgemmParams) == 168, "FgemmParams layout changed: update params.rs");
