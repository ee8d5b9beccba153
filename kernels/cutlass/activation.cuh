// The epilogue activation, chosen at run time (one kernel serves all four), for
// CUTLASS's Sm90Compute node: a compute functor with an `Arguments` member receives
// them as its last operand. The function itself is kernels/common/activation.cuh,
// shared with the GEMVs.
#pragma once

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "../common/activation.cuh"

namespace bs {

struct ActivationArgs {
    int kind = 0;  // 0 identity, 1 GELU (tanh), 2 GELU (erf), 3 SiLU: as blockscale's Activation
};

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
