// The epilogue activation, chosen at run time (one kernel serves all four), for
// CUTLASS's Sm90Compute node: a compute functor with an `Arguments` member receives
// them as its last operand.
//
// Evaluated in f32 with CUDA's expf / tanhf / erff (a few ulp) and __fdividef for SiLU.
// No IEEE division: its slow path is a function call, which makes ptxas serialize the
// kernel's wgmma instructions (warning C7510).
#pragma once

#include "cutlass/array.h"
#include "cutlass/cutlass.h"

namespace bs {

struct ActivationArgs {
    int kind = 0;  // 0 identity, 1 GELU (tanh), 2 GELU (erf), 3 SiLU: as blockscale's Activation
};

CUTLASS_DEVICE float activation(float x, int kind) {
    switch (kind) {
        case 1: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        case 2: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
        case 3: return __fdividef(x, 1.0f + expf(-x));
        default: return x;
    }
}

template <class T>
struct RuntimeActivation {
    using Arguments = ActivationArgs;
    CUTLASS_DEVICE T operator()(T const& x, Arguments const& a) const { return T(activation(float(x), a.kind)); }
};

template <class T, int N>
struct RuntimeActivation<cutlass::Array<T, N>> {
    using Arguments = ActivationArgs;
    CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x, Arguments const& a) const {
        if (a.kind == 0) return x;
        cutlass::Array<T, N> y;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) y[i] = T(activation(float(x[i]), a.kind));
        return y;
    }
};

}  // namespace bs
