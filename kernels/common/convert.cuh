// Device twins of blockscale-formats: element encoders and decoders, UE4M3 / UE8M0
// scales and the UE8M0 scale rules. Every function computes exactly what its Rust
// counterpart computes (same integer steps, same IEEE operations with explicit
// round-to-nearest intrinsics, no fused multiply-add), so CPU and GPU bytes agree.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace bs {

__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ float float_of(uint32_t b) { return __uint_as_float(b); }
__device__ __forceinline__ uint32_t sign_of(float y) { return bits_of(y) >> 31; }

// A saturating small float: mantissa bits, exponent bias, largest finite magnitude
// code, the code NaN gives, and where the sign bit sits.
template <int MAN, int BIAS, uint32_t MAX_CODE, uint32_t NAN_CODE, int SIGN_SHIFT>
struct Mini {
    static constexpr int man = MAN;
    static constexpr int bias = BIAS;
    static constexpr uint32_t max_code = MAX_CODE;
    static constexpr uint32_t nan_code = NAN_CODE;
    static constexpr int sign_shift = SIGN_SHIFT;
};

using E2M1 = Mini<1, 1, 0x7, 0x7, 3>;
using E2M3 = Mini<3, 1, 0x1f, 0x1f, 5>;
using E3M2 = Mini<2, 3, 0x1f, 0x1f, 5>;
using E4M3 = Mini<3, 7, 0x7e, 0x7f, 7>;
using E5M2 = Mini<2, 15, 0x7b, 0x7f, 7>;

// Round-to-nearest-even, saturating encode (blockscale-formats `minifloat::encode`):
// the normal range rounds the f32 mantissa in the integer domain; the subnormal range
// lets the FPU round |x| + 2^(24 - bias - man), whose ulp is the smallest subnormal.
template <typename F>
__device__ __forceinline__ uint32_t encode_sw(float x) {
    const uint32_t bits = bits_of(x);
    const uint32_t abs = bits & 0x7fffffffu;
    constexpr int shift = 23 - F::man;
    const uint32_t rounded = abs + ((1u << (shift - 1)) - 1u) + ((abs >> shift) & 1u);
    const uint32_t normal = (rounded >> shift) - ((uint32_t)(127 - F::bias) << F::man);
    const float magic = float_of((uint32_t)(127 + 24 - F::bias - F::man) << 23);
    const uint32_t sub = bits_of(__fadd_rn(float_of(abs), magic)) - bits_of(magic);
    constexpr uint32_t min_normal = (uint32_t)(127 + 1 - F::bias) << 23;
    uint32_t mag = abs < min_normal ? sub : normal;
    mag = mag > F::max_code ? F::max_code : mag;
    const uint32_t code = mag | ((bits >> 31) << F::sign_shift);
    return abs > 0x7f800000u ? F::nan_code : code;
}

// The value of a magnitude-and-sign code of a small float without specials in the
// magnitude (E2M1, E2M3, E3M2, and E4M3/E5M2 below their special codes): the code's
// exponent and mantissa fields placed in an f32 and scaled by 2^(127 - bias), which is
// exact for normals and subnormals alike.
template <typename F>
__device__ __forceinline__ float decode_finite(uint32_t code) {
    const uint32_t mag = code & ((1u << F::sign_shift) - 1u);
    const float v = __fmul_rn(float_of(mag << (23 - F::man)), float_of((uint32_t)(127 + 127 - F::bias) << 23));
    return float_of(bits_of(v) | (((code >> F::sign_shift) & 1u) << 31));
}

__device__ __forceinline__ float decode_e4m3(uint32_t code) {
    // 0x7f / 0xff are NaN; decoding them is left to the caller's NaN canonicalisation.
    return (code & 0x7fu) == 0x7fu ? __uint_as_float(0x7fc00000u) : decode_finite<E4M3>(code);
}

__device__ __forceinline__ float decode_e5m2(uint32_t code) {
    const uint32_t mag = code & 0x7fu;
    if (mag >= 0x7cu) {
        const float s = mag == 0x7cu ? __uint_as_float(0x7f800000u) : __uint_as_float(0x7fc00000u);
        return float_of(bits_of(s) | ((code & 0x80u) << 24));
    }
    return decode_finite<E5M2>(code);
}

// The UE4M3 byte of a non-negative x (E4M3, round to nearest even, saturating): the
// hardware conversion from sm_89 on, the software encoder before.
__device__ __forceinline__ uint32_t ue4m3_of_nonnegative(float x) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
    unsigned short h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
    return (uint32_t)h & 0xffu;
#else
    return encode_sw<E4M3>(x);
#endif
}

// UE4M3 (an E4M3 byte with the sign bit 0): bytes >= 0x80 are invalid and decode to
// NaN, as do 0x7f.
__device__ __forceinline__ float decode_ue4m3(uint32_t b) {
    return (b >= 0x7fu) ? __uint_as_float(0x7fc00000u) : decode_finite<E4M3>(b);
}

// UE8M0: 2^(b - 127); byte 0 is the f32 subnormal 2^-127; 0xff is NaN.
__device__ __forceinline__ float decode_ue8m0(uint32_t b) {
    return b == 0u ? float_of(0x00400000u) : b == 0xffu ? float_of(0x7fc00000u) : float_of(b << 23);
}

// The exact reciprocal 2^(127 - b) of a UE8M0 scale; NaN for 0xff.
__device__ __forceinline__ float recip_ue8m0(uint32_t b) {
    return b == 0xffu ? float_of(0x7fc00000u) : b == 254u ? float_of(0x00400000u) : float_of((254u - b) << 23);
}

// __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf) on |x| (formats'
// `encode_e8m0` with PosInf and saturation).
__device__ __forceinline__ uint32_t ue8m0_rp_satfinite(float x) {
    const uint32_t abs = bits_of(x) & 0x7fffffffu;
    const uint32_t exp = abs >> 23;
    const uint32_t man = abs & 0x7fffffu;
    const uint32_t up = exp == 0u ? (man > 0x400000u ? 1u : 0u) : (man != 0u ? 1u : 0u);
    uint32_t byte = exp + up;
    byte = byte >= 255u ? 0xfeu : byte;
    return abs > 0x7f800000u ? 0xffu : byte;
}

// The UE8M0 scale rules of blockscale-formats `ScaleRule` (0 Rceil, 1 Floor, 2 Ceil,
// 3 Even). `max_recip` is RN(1/max), `emax` the element's largest power of two,
// `mbits` its mantissa width.
__device__ __forceinline__ uint32_t exponent_rule(uint32_t bits, int bump, int emax) {
    if (bits >= 0x7f800000u) return 0xffu;
    int unbiased = (int)(bits >> 23) - 127 + bump - emax;
    unbiased = unbiased < -127 ? -127 : (unbiased > 128 ? 128 : unbiased);
    return (uint32_t)(unbiased + 127);
}

__device__ __forceinline__ uint32_t select_ue8m0(uint32_t rule, uint32_t amax_bits, float max_recip, int emax, int mbits) {
    const uint32_t bits = amax_bits & 0x7fffffffu;
    switch (rule) {
        case 0: return ue8m0_rp_satfinite(__fmul_rn(float_of(bits), max_recip));
        case 1: return exponent_rule(bits, 0, emax);
        case 2: return exponent_rule(bits, (bits & 0x7fffffu) != 0u ? 1 : 0, emax);
        default: {
            if (bits > 0x7f800000u) return 0xffu;
            const uint32_t half = 1u << (23 - mbits - 1);
            return exponent_rule((bits + half) & 0xff800000u, 0, emax);
        }
    }
}

// Element conversion of 8 values. On sm_120a the hardware conversions run (with the
// sign of a rounded-to-zero result fixed to the input's, as the CPU keeps it); on
// earlier targets FP4 and FP6 use the exact software encoder. FP8 uses the hardware
// conversion from sm_89 on.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1200)
#define BS_HW_FP4 1
#else
#define BS_HW_FP4 0
#endif

// The E2M1 code of a non-NaN y in a few float and integer operations: clamp |y| into
// [1, 8] to find its binade e (0..3), add 2^(e + 22), whose ulp 2^(e - 1) is the E2M1
// grid step there (0.5 below 1 as well), so the FPU rounds to the grid, ties to even;
// the low bits of the sum count grid steps, and 2e + steps is the code (saturated at 7).
// Equal to encode_sw<E2M1> for every non-NaN f32 (crates/blockscale-cuda's tests sweep
// all of them through a Rust copy). NaN never reaches it: a block holding NaN is
// poisoned and writes zero codes.
__device__ __forceinline__ uint32_t encode_e2m1_fast(float y) {
    const float a = fabsf(y);
    const float c = fmaxf(fminf(a, 8.0f), 1.0f);
    const uint32_t magic = (bits_of(c) & 0x7f800000u) + (22u << 23);
    const uint32_t steps = bits_of(__fadd_rn(a, float_of(magic))) - magic;
    const uint32_t code = min(steps + (magic >> 22) - 298u, 7u);
    return code | (sign_of(y) << 3);
}

// Eight E2M1 codes, two per byte, even element in the low nibble (a u32, little-endian).
__device__ __forceinline__ uint32_t encode8_e2m1(const float y[8]) {
#if BS_HW_FP4
    uint32_t r;
    asm("{\n .reg .b8 b0, b1, b2, b3;\n"
        " cvt.rn.satfinite.e2m1x2.f32 b0, %2, %1;\n"
        " cvt.rn.satfinite.e2m1x2.f32 b1, %4, %3;\n"
        " cvt.rn.satfinite.e2m1x2.f32 b2, %6, %5;\n"
        " cvt.rn.satfinite.e2m1x2.f32 b3, %8, %7;\n"
        " mov.b32 %0, {b0, b1, b2, b3};\n}"
        : "=r"(r)
        : "f"(y[0]), "f"(y[1]), "f"(y[2]), "f"(y[3]), "f"(y[4]), "f"(y[5]), "f"(y[6]), "f"(y[7]));
    uint32_t signs = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) signs |= sign_of(y[i]) << (4 * i + 3);
    return r | signs;
#else
    uint32_t r = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) r |= encode_e2m1_fast(y[i]) << (4 * i);
    return r;
#endif
}

// Eight one-byte codes (E2M3, E3M2, E4M3, E5M2) as a u64, element i in byte i.
template <typename F>
__device__ __forceinline__ uint64_t encode8_bytes(const float y[8]) {
    uint64_t r = 0;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        uint32_t pair;
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
        if constexpr (F::sign_shift == 7) {
            unsigned short h;
            if constexpr (F::bias == 7) {
                asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(y[i + 1]), "f"(y[i]));
            } else {
                asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(y[i + 1]), "f"(y[i]));
            }
            pair = (uint32_t)h | (sign_of(y[i]) << 7) | (sign_of(y[i + 1]) << 15);
        } else
#endif
#if BS_HW_FP4
        if constexpr (F::sign_shift == 5) {
            unsigned short h;
            if constexpr (F::bias == 1) {
                asm("cvt.rn.satfinite.e2m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(y[i + 1]), "f"(y[i]));
            } else {
                asm("cvt.rn.satfinite.e3m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(y[i + 1]), "f"(y[i]));
            }
            pair = (uint32_t)h | (sign_of(y[i]) << 5) | (sign_of(y[i + 1]) << 13);
        } else
#endif
        {
            pair = encode_sw<F>(y[i]) | (encode_sw<F>(y[i + 1]) << 8);
        }
        r |= (uint64_t)pair << (8 * i);
    }
    return r;
}

// Eight offset-8 INT4 codes, element i in bits 4i..4i+3: clamp(rne(y), -8, 7) + 8,
// with blockscale-formats `Int4::from_f32`'s clamp to [-9, 8] before rounding.
__device__ __forceinline__ uint32_t encode8_int4(const float y[8]) {
    uint32_t r = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float c = fminf(fmaxf(y[i], -9.0f), 8.0f);
        int v = __float2int_rn(c);
        v = v < -8 ? -8 : (v > 7 ? 7 : v);
        r |= (uint32_t)(v + 8) << (4 * i);
    }
    return r;
}

// f32 to the output types, rounding to nearest even; NaN is written canonical (the
// caller canonicalises f32 NaN to 0x7fc00000 first).
__device__ __forceinline__ uint16_t to_bf16_bits(float x) {
    return x != x ? (uint16_t)0x7fc0u : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ uint16_t to_f16_bits(float x) {
    return x != x ? (uint16_t)0x7e00u : __half_as_ushort(__float2half_rn(x));
}

}  // namespace bs
