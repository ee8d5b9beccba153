// Quantization kernels for every scheme, and the NVFP4 per-tensor amax reduction.
//
// One thread quantizes a unit of consecutive values of a row per step of a grid-stride
// loop: a whole NVFP4 block (16 values) or a 32-value MX / INT4 block, loaded with 16-byte
// vector loads and stored with one 8- or 16-byte store. An FP8 1x128 block is 4 units on
// 4 adjacent lanes that reduce the block amax with shuffles. The scale steps are the
// same scalar operations as the CPU's `scale.rs`. FP8 128x128 tiles get one CTA per
// tile, which reads the tile twice: once for the amax, once (from cache) to encode.
//
// Exactness: no fused multiply-add (-fmad=false and explicit _rn intrinsics), no flush
// to zero, IEEE division and reciprocal. See docs/KERNELS.md.

#include <float.h>

#include "../common/convert.cuh"
#include "../common/params.cuh"

namespace bs {

// Input element types.
struct F32In {};
struct F16In {};
struct BF16In {};

// One 16-bit input element (bf16 or f16) widened exactly to f32.
__device__ __forceinline__ float widen16(BF16In, uint32_t bits) { return float_of(bits << 16); }
__device__ __forceinline__ float widen16(F16In, uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }

// Eight consecutive input elements from element `at` on, exactly as f32 (bf16 and f16
// here, f32 below).
template <typename In>
__device__ __forceinline__ void load8(const void* base, uint64_t at, float y[8]) {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + at);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        y[2 * i] = widen16(In{}, w[i] & 0xffffu);
        y[2 * i + 1] = widen16(In{}, w[i] >> 16);
    }
}

template <>
__device__ __forceinline__ void load8<F32In>(const void* base, uint64_t at, float y[8]) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + at);
    const float4 a = p[0], b = p[1];
    y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w;
    y[4] = b.x; y[5] = b.y; y[6] = b.z; y[7] = b.w;
}

__device__ __forceinline__ uint32_t amax_bits8(const float y[8]) {
    uint32_t a = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) a = max(a, bits_of(y[i]) & 0x7fffffffu);
    return a;
}

// Records the first NaN/Inf of a chunk: *bad keeps the largest ~flat_index, so it ends
// holding ~(smallest flat index row * k + col), and 0 (its initial value) means none.
__device__ __forceinline__ void record_bad(unsigned long long* bad, const float y[8], uint64_t flat) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if ((bits_of(y[i]) & 0x7fffffffu) >= 0x7f800000u) {
            atomicMax(bad, ~(unsigned long long)(flat + i));
            return;
        }
    }
}

__device__ __forceinline__ void scale8(float y[8], float f, bool divide) {
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = divide ? __fdiv_rn(y[i], f) : __fmul_rn(y[i], f);
}

constexpr float C6 = 0.16666667163372039795f;  // RN(1/6), bits 0x3e2aaaab

// NVFP4 block scale byte and element multiplier (scale.rs `nvfp4`). `rcp` is the
// table of correctly rounded reciprocals of every UE4M3 value (scale.rs `UE4M3_RCP`).
__device__ __forceinline__ void nvfp4_scale(float amax, float g, uint32_t recipe, const float* rcp, uint32_t& sf,
                                            float& mult) {
    if (recipe == 0) {
        sf = ue4m3_of_nonnegative(__fmul_rn(g, __fmul_rn(amax, C6)));
        mult = sf != 0u ? fminf(__fmul_rn(g, rcp[sf]), FLT_MAX) : 0.0f;
    } else if (amax == 0.0f) {
        sf = 0u;
        mult = 0.0f;
    } else {
        sf = ue4m3_of_nonnegative(fminf(__fmul_rn(amax, __fmul_rn(g, C6)), FLT_MAX));
        mult = fminf(__frcp_rn(__fmul_rn(decode_finite<E4M3>(sf), __frcp_rn(g))), FLT_MAX);
    }
}

// Encodes 8 values of an FP8 128x128 tile (x / s, E4M3) and stores their 8 bytes.
__device__ __forceinline__ void encode_store_tile8(const QuantParams& p, uint32_t row, uint32_t col, float y[8], float s) {
    uint64_t codes = 0;
    if (s != 0.0f && s == s) {
        scale8(y, s, true);
        codes = encode8_bytes<E4M3>(y);
    }
    *reinterpret_cast<uint64_t*>(p.data + (uint64_t)row * p.k + col) = codes;
}

// Scale step of one unit: the block's scale (written by the group's first lane) and the
// element factor. `a` is the block amax bit pattern.
template <uint32_t S>
__device__ __forceinline__ float block_factor(const QuantParams& p, const float* rcp, uint32_t row, uint32_t col, uint32_t a,
                                             bool leader) {
    constexpr uint32_t block = block_of(S);
    const bool bad = a >= 0x7f800000u;
    const uint32_t blk = col / block;
    const float amax = float_of(a);
    float f;
    if constexpr (S == NVFP4) {
        uint32_t sf;
        if (bad) {
            sf = 0x7fu;
            f = float_of(0x7fc00000u);
        } else {
            nvfp4_scale(amax, p.global_encode, p.recipe, rcp, sf, f);
        }
        if (leader) static_cast<uint8_t*>(p.scales)[scale_offset(p.swizzled, row, blk, p.scale_cols)] = (uint8_t)sf;
    } else if constexpr (S == FP8_BLOCK_1X128) {
        const float s = bad ? float_of(0x7fc00000u) : __fdiv_rn(amax, 448.0f);
        f = s;
        if (leader) static_cast<float*>(p.scales)[(uint64_t)row * p.scale_cols + blk] = s;
    } else if constexpr (is_int4(S)) {
        uint16_t s16;
        if (bad) {
            s16 = 0x7e00u;
            f = float_of(0x7fc00000u);
        } else {
            s16 = __half_as_ushort(__float2half_rn(__fdiv_rn(amax, 7.0f)));
            if (s16 == 0x7c00u) s16 = 0x7bffu;  // saturate +Inf to f16::MAX
            f = __half2float(__ushort_as_half(s16));
        }
        if (leader) static_cast<uint16_t*>(p.scales)[(uint64_t)row * p.scale_cols + blk] = s16;
    } else {
        const uint32_t byte = bad ? 0xffu : select_ue8m0(p.rule, a, p.max_recip, p.emax, p.mbits);
        f = recip_ue8m0(byte);
        if (leader) static_cast<uint8_t*>(p.scales)[scale_offset(p.swizzled, row, blk, p.scale_cols)] = (uint8_t)byte;
    }
    return f;
}

// Encodes and stores one unit of V*8 values scaled by factor f: one 8-byte (NVFP4) or
// 16-byte (MXFP4, INT4) store, V / 2 16-byte stores (FP8) or three 8-byte stores (FP6).
template <uint32_t S, int V>
__device__ __forceinline__ void encode_unit(const QuantParams& p, uint32_t row, uint32_t col, float (&y)[V][8], float f) {
    const bool zero = (f == 0.0f) || (f != f);
    uint8_t* data = p.data;
    if constexpr (S == NVFP4 || S == MXFP4 || is_int4(S)) {
        uint32_t w[V];
#pragma unroll
        for (int v = 0; v < V; v++) {
            if (zero) {
                w[v] = is_int4(S) ? 0x88888888u : 0u;
            } else if constexpr (is_int4(S)) {
                scale8(y[v], f, true);
                w[v] = encode8_int4(y[v]);
            } else {
                scale8(y[v], f, false);
                w[v] = encode8_e2m1(y[v]);
            }
        }
        uint32_t* dst = reinterpret_cast<uint32_t*>(data) + word_index(p.interleaved, p.rows, p.k, row, col);
        if constexpr (V == 4) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            static_assert(V == 2, "E2M1 units are 16 or 32 values");
            *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
        }
    } else if constexpr (S == MXFP6_E2M3 || S == MXFP6_E3M2) {
        static_assert(V == 4, "FP6 units are 32 values");
        uint64_t packed[3] = {0, 0, 0};
#pragma unroll
        for (int v = 0; v < V; v++) {
            uint64_t codes = 0;
            if (!zero) {
                scale8(y[v], f, false);
                codes = S == MXFP6_E2M3 ? encode8_bytes<E2M3>(y[v]) : encode8_bytes<E3M2>(y[v]);
            }
            // 8 codes = 48 bits at bit 48v of the unit's 192-bit stream.
            uint64_t bits48 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) bits48 |= ((codes >> (8 * i)) & 0x3fu) << (6 * i);
            const int at = 48 * v;
            packed[at / 64] |= bits48 << (at % 64);
            if (at % 64 > 16) packed[at / 64 + 1] |= bits48 >> (64 - at % 64);
        }
        uint64_t* dst = reinterpret_cast<uint64_t*>(data + (uint64_t)row * (p.k / 4 * 3) + col / 4 * 3);
        dst[0] = packed[0];
        dst[1] = packed[1];
        dst[2] = packed[2];
    } else {
        uint64_t c[V];
#pragma unroll
        for (int v = 0; v < V; v++) {
            c[v] = 0;
            if (!zero) {
                constexpr bool divide = S == FP8_BLOCK_1X128 || S == FP8_BLOCK_128X128;
                scale8(y[v], f, divide);
                c[v] = S == MXFP8_E5M2 ? encode8_bytes<E5M2>(y[v]) : encode8_bytes<E4M3>(y[v]);
            }
        }
        uint4* dst = reinterpret_cast<uint4*>(data + (uint64_t)row * p.k + col);
#pragma unroll
        for (int v = 0; v < V; v += 2) {
            dst[v / 2] = make_uint4((uint32_t)c[v], (uint32_t)(c[v] >> 32), (uint32_t)c[v + 1], (uint32_t)(c[v + 1] >> 32));
        }
    }
}

// The (row, unit) of a grid-stride loop over rows x units_per_row units, advanced by
// additions: no 64-bit division inside the loop.
struct UnitWalker {
    uint64_t row;
    uint32_t unit;
    uint64_t stride_rows;
    uint32_t stride_units;
    uint32_t units_per_row;

    __device__ __forceinline__ UnitWalker(uint64_t first, uint64_t stride, uint32_t per_row)
        : row(first / per_row),
          unit((uint32_t)(first % per_row)),
          stride_rows(stride / per_row),
          stride_units((uint32_t)(stride % per_row)),
          units_per_row(per_row) {}

    __device__ __forceinline__ void advance() {
        row += stride_rows;
        unit += stride_units;
        if (unit >= units_per_row) {
            unit -= units_per_row;
            row += 1;
        }
    }
};

// One thread quantizes a unit of 16 (NVFP4) or 32 consecutive values of a row per step
// of a grid-stride loop: a whole scale block, except FP8 1x128 blocks, which are 4 units
// of 4 adjacent lanes that reduce the block amax with shuffles.
template <typename In, uint32_t S>
__device__ void quantize_units(const QuantParams& p) {
    constexpr uint32_t block = block_of(S);
    constexpr uint32_t unit = block < 32 ? block : 32;
    constexpr uint32_t group = block / unit;
    constexpr int V = unit / 8;
    __shared__ float rcp[128];
    if constexpr (S == NVFP4) {
        if (threadIdx.x < 128u) {
            const uint32_t b = threadIdx.x;
            rcp[b] = (b == 0u || b == 0x7fu) ? 0.0f : __frcp_rn(decode_finite<E4M3>(b));
        }
        __syncthreads();
    }
    const uint32_t units_per_row = p.k / unit;
    const uint64_t total = (uint64_t)p.rows * units_per_row;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint32_t lane = threadIdx.x & 31u;
    const bool leader = (lane % group) == 0u;
    UnitWalker at((uint64_t)blockIdx.x * blockDim.x + threadIdx.x, stride, units_per_row);
    for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c - (group > 1 ? lane : 0u) < total; c += stride) {
        // With groups, whole warps iterate together (the condition is the warp's first
        // unit) so every lane takes part in the shuffles; units past the end are idle.
        const bool active = c < total;
        const uint32_t row = (uint32_t)at.row, col = at.unit * unit;
        at.advance();
        float y[V][8];
        uint32_t a = 0;
#pragma unroll
        for (int v = 0; v < V; v++) {
            if (active) {
                load8<In>(p.input, (uint64_t)row * p.row_stride + col + 8 * v, y[v]);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) y[v][i] = 0.0f;
            }
            a = max(a, amax_bits8(y[v]));
        }
#pragma unroll
        for (uint32_t off = 1; off < group; off <<= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, off));
        if (!active) continue;
        if (a >= 0x7f800000u) {
#pragma unroll
            for (int v = 0; v < V; v++) record_bad(p.bad, y[v], (uint64_t)row * p.k + col + 8 * v);
        }
        const float f = block_factor<S>(p, rcp, row, col, a, leader);
        encode_unit<S, V>(p, row, col, y, f);
    }
}

// Threads per CTA of the FP8 128x128 tile kernel (crates/blockscale-cuda/src/quantize.rs
// launches the same number).
constexpr uint32_t TILE_THREADS = 256;
constexpr uint32_t TILE_CHUNKS = 128u * 16u / TILE_THREADS;  // chunks of 8 per thread

// FP8 128x128 tiles: one CTA per tile. A first pass reduces the tile amax (registers,
// shuffles, one shared word per warp); a second pass reloads the tile, now in L1/L2,
// and encodes it. Holding the tile in registers instead would cap occupancy at two
// CTAs per SM.
template <typename In>
__device__ void quantize_tiles(const QuantParams& p) {
    __shared__ uint32_t warp_max[TILE_THREADS / 32u];
    const uint32_t tile_row = blockIdx.y, tile_col = blockIdx.x;
    const uint32_t r0 = tile_row * 128u, c0 = tile_col * 128u;
    uint32_t a = 0;
#pragma unroll
    for (uint32_t j = 0; j < TILE_CHUNKS; j++) {
        const uint32_t chunk = threadIdx.x + TILE_THREADS * j;  // 2048 chunks: 128 rows x 16
        const uint32_t row = r0 + chunk / 16u, col = c0 + (chunk % 16u) * 8u;
        if (row < p.rows) {
            float y[8];
            load8<In>(p.input, (uint64_t)row * p.row_stride + col, y);
            const uint32_t ca = amax_bits8(y);
            if (ca >= 0x7f800000u) record_bad(p.bad, y, (uint64_t)row * p.k + col);
            a = max(a, ca);
        }
    }
#pragma unroll
    for (uint32_t off = 16; off > 0; off >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, off));
    if ((threadIdx.x & 31u) == 0u) warp_max[threadIdx.x / 32u] = a;
    __syncthreads();
    a = warp_max[0];
#pragma unroll
    for (uint32_t w = 1; w < TILE_THREADS / 32u; w++) a = max(a, warp_max[w]);
    const float s = a >= 0x7f800000u ? float_of(0x7fc00000u) : __fdiv_rn(float_of(a), 448.0f);
    if (threadIdx.x == 0) static_cast<float*>(p.scales)[(uint64_t)tile_row * p.scale_cols + tile_col] = s;
#pragma unroll
    for (uint32_t j = 0; j < TILE_CHUNKS; j++) {
        const uint32_t chunk = threadIdx.x + TILE_THREADS * j;
        const uint32_t row = r0 + chunk / 16u, col = c0 + (chunk % 16u) * 8u;
        if (row < p.rows) {
            float y[8];
            load8<In>(p.input, (uint64_t)row * p.row_stride + col, y);
            encode_store_tile8(p, row, col, y, s);
        }
    }
}

// Largest finite |x| (as bits, via atomicMax) and the first NaN/Inf of the input, one
// unit of 16 values (an NVFP4 block) per thread per step.
template <typename In>
__device__ void amax_units(const AmaxParams& p) {
    const uint32_t units_per_row = p.k / 16u;
    const uint64_t total = (uint64_t)p.rows * units_per_row;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    UnitWalker at(first, stride, units_per_row);
    uint32_t m = 0;
    for (uint64_t c = first; c < total; c += stride) {
        const uint32_t row = (uint32_t)at.row, col = at.unit * 16u;
        at.advance();
        float y[2][8];
        load8<In>(p.input, (uint64_t)row * p.row_stride + col, y[0]);
        load8<In>(p.input, (uint64_t)row * p.row_stride + col + 8u, y[1]);
#pragma unroll
        for (int v = 0; v < 2; v++) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t b = bits_of(y[v][i]) & 0x7fffffffu;
                if (b < 0x7f800000u) m = max(m, b);
            }
        }
        if (max(amax_bits8(y[0]), amax_bits8(y[1])) >= 0x7f800000u) {
            record_bad(p.bad, y[0], (uint64_t)row * p.k + col);
            record_bad(p.bad, y[1], (uint64_t)row * p.k + col + 8u);
        }
    }
#pragma unroll
    for (uint32_t off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31u) == 0u && m != 0u) atomicMax(p.amax_bits, m);
}

}  // namespace bs

#define BS_QUANTIZE(name, scheme)                                                                    \
    extern "C" __global__ void __launch_bounds__(256) quantize_##name##_f32(const bs::QuantParams p) { \
        bs::quantize_units<bs::F32In, bs::scheme>(p);                                               \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(256) quantize_##name##_f16(const bs::QuantParams p) { \
        bs::quantize_units<bs::F16In, bs::scheme>(p);                                               \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(256) quantize_##name##_bf16(const bs::QuantParams p) { \
        bs::quantize_units<bs::BF16In, bs::scheme>(p);                                              \
    }

BS_QUANTIZE(nvfp4, NVFP4)
BS_QUANTIZE(mxfp4, MXFP4)
BS_QUANTIZE(mxfp6_e2m3, MXFP6_E2M3)
BS_QUANTIZE(mxfp6_e3m2, MXFP6_E3M2)
BS_QUANTIZE(mxfp8_e4m3, MXFP8_E4M3)
BS_QUANTIZE(mxfp8_e5m2, MXFP8_E5M2)
BS_QUANTIZE(fp8_block_1x128, FP8_BLOCK_1X128)
BS_QUANTIZE(int4_g32, INT4_G32)
BS_QUANTIZE(int4_g128, INT4_G128)

extern "C" __global__ void __launch_bounds__(bs::TILE_THREADS) quantize_fp8_block_128x128_f32(const bs::QuantParams p) {
    bs::quantize_tiles<bs::F32In>(p);
}
extern "C" __global__ void __launch_bounds__(bs::TILE_THREADS) quantize_fp8_block_128x128_f16(const bs::QuantParams p) {
    bs::quantize_tiles<bs::F16In>(p);
}
extern "C" __global__ void __launch_bounds__(bs::TILE_THREADS) quantize_fp8_block_128x128_bf16(const bs::QuantParams p) {
    bs::quantize_tiles<bs::BF16In>(p);
}

extern "C" __global__ void __launch_bounds__(256) amax_f32(const bs::AmaxParams p) { bs::amax_units<bs::F32In>(p); }
extern "C" __global__ void __launch_bounds__(256) amax_f16(const bs::AmaxParams p) { bs::amax_units<bs::F16In>(p); }
extern "C" __global__ void __launch_bounds__(256) amax_bf16(const bs::AmaxParams p) { bs::amax_units<bs::BF16In>(p); }
