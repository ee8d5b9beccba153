// Dequantization kernels: every value is (value(code) * block_scale) * post in f32
// (post is NVFP4's decode factor, 1 otherwise), NaN made canonical, then rounded once to
// the output type; the same steps as blockscale-cpu's kernels. One chunk of 8 values per
// thread per grid-stride step.

#include "../common/convert.cuh"
#include "../common/params.cuh"

namespace bs {

struct F32Out {};
struct F16Out {};
struct BF16Out {};

template <typename Out>
__device__ __forceinline__ void store8(void* base, uint64_t at, const float v[8]);

template <>
__device__ __forceinline__ void store8<F32Out>(void* base, uint64_t at, const float v[8]) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + at);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
}

template <>
__device__ __forceinline__ void store8<F16Out>(void* base, uint64_t at, const float v[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (uint32_t)to_f16_bits(v[2 * i]) | ((uint32_t)to_f16_bits(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <>
__device__ __forceinline__ void store8<BF16Out>(void* base, uint64_t at, const float v[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (uint32_t)to_bf16_bits(v[2 * i]) | ((uint32_t)to_bf16_bits(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <uint32_t S>
struct DequantTraits;
template <> struct DequantTraits<NVFP4> { static constexpr uint32_t block = 16; };
template <> struct DequantTraits<MXFP4> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<MXFP6_E2M3> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<MXFP6_E3M2> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<MXFP8_E4M3> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<MXFP8_E5M2> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<FP8_BLOCK_1X128> { static constexpr uint32_t block = 128; };
template <> struct DequantTraits<FP8_BLOCK_128X128> { static constexpr uint32_t block = 128; };
template <> struct DequantTraits<INT4_G32> { static constexpr uint32_t block = 32; };
template <> struct DequantTraits<INT4_G128> { static constexpr uint32_t block = 128; };

// The decoded scale of (row, block).
template <uint32_t S>
__device__ __forceinline__ float block_scale(const DequantParams& p, uint32_t row, uint32_t blk) {
    if constexpr (S == NVFP4) {
        return decode_ue4m3(static_cast<const uint8_t*>(p.scales)[scale_offset(p.swizzled, row, blk, p.scale_cols)]);
    } else if constexpr (S == FP8_BLOCK_1X128) {
        return static_cast<const float*>(p.scales)[(uint64_t)row * p.scale_cols + blk];
    } else if constexpr (S == FP8_BLOCK_128X128) {
        return static_cast<const float*>(p.scales)[(uint64_t)(row / 128u) * p.scale_cols + blk];
    } else if constexpr (is_int4(S)) {
        return __half2float(__ushort_as_half(static_cast<const uint16_t*>(p.scales)[(uint64_t)row * p.scale_cols + blk]));
    } else {
        return decode_ue8m0(static_cast<const uint8_t*>(p.scales)[scale_offset(p.swizzled, row, blk, p.scale_cols)]);
    }
}

// The code values of one chunk.
template <uint32_t S>
__device__ __forceinline__ void load_values(const DequantParams& p, uint32_t row, uint32_t col, float v[8]) {
    const uint8_t* data = p.data;
    if constexpr (S == NVFP4 || S == MXFP4) {
        const uint32_t w = reinterpret_cast<const uint32_t*>(data)[word_index(p.interleaved, p.rows, p.k, row, col)];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = decode_finite<E2M1>((w >> (4 * i)) & 0xfu);
    } else if constexpr (is_int4(S)) {
        const uint32_t w = reinterpret_cast<const uint32_t*>(data)[word_index(p.interleaved, p.rows, p.k, row, col)];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)((int)((w >> (4 * i)) & 0xfu) - 8);
    } else if constexpr (S == MXFP6_E2M3 || S == MXFP6_E3M2) {
        const uint16_t* d = reinterpret_cast<const uint16_t*>(data + (uint64_t)row * (p.k / 4 * 3) + col / 4 * 3);
        const uint64_t packed = (uint64_t)d[0] | ((uint64_t)d[1] << 16) | ((uint64_t)d[2] << 32);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t c = (uint32_t)(packed >> (6 * i)) & 0x3fu;
            v[i] = S == MXFP6_E2M3 ? decode_finite<E2M3>(c) : decode_finite<E3M2>(c);
        }
    } else {
        const uint64_t w = *reinterpret_cast<const uint64_t*>(data + (uint64_t)row * p.k + col);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t c = (uint32_t)(w >> (8 * i)) & 0xffu;
            v[i] = S == MXFP8_E5M2 ? decode_e5m2(c) : decode_e4m3(c);
        }
    }
}

template <typename Out, uint32_t S>
__device__ void dequantize_chunks(const DequantParams& p) {
    constexpr uint32_t block = DequantTraits<S>::block;
    const uint32_t chunks_per_row = p.k / 8;
    const uint64_t total = (uint64_t)p.rows * chunks_per_row;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    // (row, chunk) of c, advanced incrementally: no 64-bit division in the loop.
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t row_c = first / chunks_per_row;
    uint32_t chunk = (uint32_t)(first % chunks_per_row);
    const uint64_t stride_rows = stride / chunks_per_row;
    const uint32_t stride_chunks = (uint32_t)(stride % chunks_per_row);
    for (uint64_t c = first; c < total; c += stride) {
        const uint32_t row = (uint32_t)row_c, col = chunk * 8u;
        row_c += stride_rows;
        chunk += stride_chunks;
        if (chunk >= chunks_per_row) {
            chunk -= chunks_per_row;
            row_c += 1;
        }
        float v[8];
        load_values<S>(p, row, col, v);
        const float s = block_scale<S>(p, row, col / block);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float x = __fmul_rn(__fmul_rn(v[i], s), p.post);
            v[i] = x != x ? float_of(0x7fc00000u) : x;
        }
        store8<Out>(p.out, (uint64_t)row * p.row_stride + col, v);
    }
}

}  // namespace bs

#define BS_DEQUANTIZE(name, scheme)                                                                      \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_f32(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::F32Out, bs::scheme>(p);                                                \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_f16(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::F16Out, bs::scheme>(p);                                                \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_bf16(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::BF16Out, bs::scheme>(p);                                               \
    }

BS_DEQUANTIZE(nvfp4, NVFP4)
BS_DEQUANTIZE(mxfp4, MXFP4)
BS_DEQUANTIZE(mxfp6_e2m3, MXFP6_E2M3)
BS_DEQUANTIZE(mxfp6_e3m2, MXFP6_E3M2)
BS_DEQUANTIZE(mxfp8_e4m3, MXFP8_E4M3)
BS_DEQUANTIZE(mxfp8_e5m2, MXFP8_E5M2)
BS_DEQUANTIZE(fp8_block_1x128, FP8_BLOCK_1X128)
BS_DEQUANTIZE(fp8_block_128x128, FP8_BLOCK_128X128)
BS_DEQUANTIZE(int4_g32, INT4_G32)
BS_DEQUANTIZE(int4_g128, INT4_G128)
