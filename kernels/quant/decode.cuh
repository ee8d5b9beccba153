// Reading a quantized matrix in its checkpoint layout, eight values at a time: each
// block's decoded scale and its codes' values (exact f32). The
// dequantize kernels and the wgmma GEMM's tiling of quantized activations
// (kernels/gemm/wgemm.cu) share them, so both decode the same bits the same way.
#pragma once

#include "../common/convert.cuh"
#include "../common/params.cuh"

namespace bs {

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

// The eight values at (row, col .. col + 7), col a multiple of 8: value(code) times the
// block scale times `p.post`, each product rounded in f32 (no FMA), NaN made canonical.
template <uint32_t S>
__device__ __forceinline__ void decode8(const DequantParams& p, uint32_t row, uint32_t col, float v[8]) {
    load_values<S>(p, row, col, v);
    const float s = block_scale<S>(p, row, col / block_of(S));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float x = __fmul_rn(__fmul_rn(v[i], s), p.post);
        v[i] = x != x ? float_of(0x7fc00000u) : x;
    }
}

}  // namespace bs
