// The epilogue activation of every GPU product (the CUTLASS GEMMs through
// kernels/cutlass/activation.cuh, and the GEMVs), chosen at run time.
//
// Evaluated in f32 with CUDA's expf / tanhf / erff (a few ulp) and __fdividef for SiLU.
// No IEEE division: its slow path is a function call, which makes ptxas serialize the
// GEMMs' wgmma instructions (warning C7510). docs/KERNELS.md bounds the error.
#pragma once

namespace bs {

// 0 identity, 1 GELU (tanh), 2 GELU (erf), 3 SiLU: as blockscale's `Activation`.
__device__ __forceinline__ float activation(float x, int kind) {
    switch (kind) {
        case 1: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        case 2: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
        case 3: return __fdividef(x, 1.0f + expf(-x));
        default: return x;
    }
}

}  // namespace bs
