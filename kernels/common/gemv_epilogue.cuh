// The GEMVs' epilogue (kernels/gemv/gemv.cu and prepared.cu): alpha and bias in one FMA,
// the activation in f32, the gated product, one rounding to the output type.
#pragma once

#include <stdint.h>

#include "activation.cuh"
#include "convert.cuh"

namespace bs {

// P: GemvParams or PgemvParams (the same epilogue fields).
template <class P>
__device__ __forceinline__ float gemv_finish(const P& p, int mat, float acc, uint32_t n) {
    const float* bias = p.bias[mat];
    const float v = bias ? __fmaf_rn(p.alpha[mat], acc, bias[n]) : __fmul_rn(p.alpha[mat], acc);
    return activation(v, (int)p.activation[mat]);
}

// Also the weight-only GEMM's store (kernels/gemm/pgemm.cu: PgemmParams).
template <class P>
__device__ __forceinline__ void gemv_store(const P& p, uint32_t m, uint32_t n, float v) {
    const uint64_t i = (uint64_t)m * p.out_stride + n;
    if (p.out_kind == 0) {
        reinterpret_cast<uint16_t*>(p.out)[i] = to_bf16_bits(v);
    } else if (p.out_kind == 1) {
        reinterpret_cast<uint16_t*>(p.out)[i] = to_f16_bits(v);
    } else {
        reinterpret_cast<float*>(p.out)[i] = v != v ? __uint_as_float(0x7fc00000u) : v;
    }
}

// The output (m, n) from the sums of matrix 0 (and 1 when gated).
template <class P>
__device__ __forceinline__ void gemv_write_output(const P& p, uint32_t m, uint32_t n, float a0, float a1) {
    float v = gemv_finish(p, 0, a0, n);
    if (p.gated) v = __fmul_rn(v, gemv_finish(p, 1, a1, n));
    gemv_store(p, m, n, v);
}

}  // namespace bs
