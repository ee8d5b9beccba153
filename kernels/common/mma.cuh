// The small pieces both GEMVs and the weight-only GEMM build their decoders and products
// from: a byte permute, a masked OR in one operation, bf16x2 multiply and subtract
// (round to nearest), the m16n8k16 bf16 and f16 MMAs with f32 accumulation, and f16
// activations split into exact bf16 pieces.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace bs {

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
// (x & MASK) | BITS as one LOP3. Written in C++, ptxas keeps both constants as
// immediates and, a LOP3 taking one, emits two; here it puts one in a register once
// (the INT4 decoders: a quarter fewer instructions a weight).
template <uint32_t MASK, uint32_t BITS>
__device__ __forceinline__ uint32_t and_or(uint32_t x) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "n"(BITS));
    return r;
}

// d = a OP b on packed pairs, rounded to nearest: mul_bf16x2, sub_bf16x2, mul_f16x2,
// sub_f16x2.
#define BS_PAIR_OP(name, instr)                                              \
    __device__ __forceinline__ uint32_t name(uint32_t a, uint32_t b) {       \
        uint32_t d;                                                          \
        asm(instr " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));                \
        return d;                                                            \
    }
BS_PAIR_OP(mul_bf16x2, "mul.rn.bf16x2")
BS_PAIR_OP(sub_bf16x2, "sub.rn.bf16x2")
BS_PAIR_OP(mul_f16x2, "mul.rn.f16x2")
BS_PAIR_OP(sub_f16x2, "sub.rn.f16x2")
#undef BS_PAIR_OP

// D += A B: m16n8k16, bf16 inputs, f32 accumulation.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B: m16n8k16, f16 inputs, f32 accumulation.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B on the bf16 MMA, or on the f16 one (F16: f16 fragments and activations).
template <bool F16>
__device__ __forceinline__ void mma_as(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (F16) {
        mma_f16(d, a, b0, b1);
    } else {
        mma(d, a, b0, b1);
    }
}

// f16 pair to two bf16 pairs whose sum is the f16 values exactly (an infinity goes
// whole into `hi`, so Inf stays Inf rather than Inf + NaN).
__device__ __forceinline__ void split_f16x2(uint32_t h, uint32_t& hi, uint32_t& lo) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    const float2 bf = __bfloat1622float2(b);
    const float lx = isinf(bf.x) ? 0.0f : __fsub_rn(f.x, bf.x);
    const float ly = isinf(bf.y) ? 0.0f : __fsub_rn(f.y, bf.y);
    const __nv_bfloat162 l = __floats2bfloat162_rn(lx, ly);
    hi = *reinterpret_cast<const uint32_t*>(&b);
    lo = *reinterpret_cast<const uint32_t*>(&l);
}

// Eight words of activations (16 elements) as MMA B-fragment registers: bf16 as they
// are (or f16 ones for the f16 MMA), f16 (F16, PIECES 2) split into the exact bf16
// pieces of split_f16x2.
template <bool F16, int PIECES>
__device__ __forceinline__ void act_fragments(const uint4 lo, const uint4 hi, uint32_t (&b)[PIECES][8]) {
    const uint32_t x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        if constexpr (F16) {
            split_f16x2(x[r], b[0][r], b[PIECES - 1][r]);
        } else {
            b[0][r] = x[r];
        }
    }
}

}  // namespace bs
