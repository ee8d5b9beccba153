// CUTLASS 4.2 GEMMs for Hopper (sm_90a), instantiated by the sm90_*.cu shims next to
// this file. Two families, each with a large-tile and a small-M configuration:
//
// - BF16: A and B bf16 (blockscale writes them: NVFP4 / MX operands dequantized
//   exactly, activations split into bf16 pieces), TMA warp-specialized cooperative
//   kernel, f32 accumulation.
// - FP8 blockwise: A and B E4M3 with f32 scales per 1 x 128 (A) and 128 x 128 (B), the
//   kernel of CUTLASS example 67 (promotion of the tensor-core partial sums into f32
//   with the scales once per 128 of K).
//
// Both finish with the same fused epilogue: D = act(alpha * acc + bias[col]) with the
// activation chosen at run time (RuntimeActivation), written with TMA.
#pragma once

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"

#include "activation.cuh"
#include "gemm_args.h"
#include "gemm_run.cuh"

namespace bs::sm90 {

using namespace cute;

// Tile configurations (measured on an H100: docs/KERNELS.md, "GEMM tiles").
struct Bf16Large {
    using Tile = Shape<_128, _256, _64>;
    using Cluster = Shape<_2, _1, _1>;
    using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
    using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct Bf16Small {
    using Tile = Shape<_128, _128, _64>;
    using Cluster = Shape<_2, _1, _1>;
    using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
    using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct Fp8Large {
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
    using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
    static constexpr bool sfa_mn_major = true;
};
struct Fp8Small {
    using Tile = Shape<_64, _128, _128>;
    using Cluster = Shape<_1, _1, _1>;
    using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise;
    using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
    static constexpr bool sfa_mn_major = false;
};

template <class ElementD, class Config>
using FusedEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::Tile, typename Config::Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::RowMajor, 16 / sizeof(ElementD),          // no C operand
    ElementD, cutlass::layout::RowMajor, 16 / sizeof(ElementD),
    typename Config::Epilogue,
    cutlass::epilogue::fusion::LinCombPerColBiasEltAct<RuntimeActivation, ElementD, float, float, ElementD, float>>::
    CollectiveOp;

template <class ElementD, class Config>
struct Bf16Gemm {
    using Epi = FusedEpilogue<ElementD, Config>;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
        cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
        cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8,
        float, typename Config::Tile, typename Config::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        typename Config::Kernel>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    static bool accepts(const BsGemmArgs&) { return true; }

    static typename Gemm::Arguments arguments(const BsGemmArgs& p) {
        const Strides<Kernel> st(p);
        typename Gemm::Arguments args{
            cutlass::gemm::GemmUniversalMode::kGemm,
            {p.m, p.n, p.k, 1},
            {static_cast<const cutlass::bfloat16_t*>(p.a), st.a, static_cast<const cutlass::bfloat16_t*>(p.b), st.b},
            {{}, nullptr, st.d, static_cast<ElementD*>(p.d), st.d}};
        return args;
    }
};

template <class ElementD, class Config>
struct Fp8BlockwiseGemm {
    using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<
        1, 128, 128, Config::sfa_mn_major ? cute::GMMA::Major::MN : cute::GMMA::Major::K, cute::GMMA::Major::K>;
    using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
    using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
    using Epi = FusedEpilogue<ElementD, Config>;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
        cutlass::float_e4m3_t, cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, 16,
        cutlass::float_e4m3_t, cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, 16,
        float, typename Config::Tile, typename Config::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        typename Config::Kernel>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    // A's scales must be in the layout this configuration reads.
    static bool accepts(const BsGemmArgs& p) { return (p.sfa_mn_major != 0) == Config::sfa_mn_major; }

    static typename Gemm::Arguments arguments(const BsGemmArgs& p) {
        const Strides<Kernel> st(p);
        auto lsfa = ScaleConfig::tile_atom_to_shape_SFA(make_shape(p.m, p.n, p.k, 1));
        auto lsfb = ScaleConfig::tile_atom_to_shape_SFB(make_shape(p.m, p.n, p.k, 1));
        typename Gemm::Arguments args{
            cutlass::gemm::GemmUniversalMode::kGemm,
            {p.m, p.n, p.k, 1},
            {static_cast<const cutlass::float_e4m3_t*>(p.a), st.a, static_cast<const cutlass::float_e4m3_t*>(p.b), st.b,
             p.sfa, lsfa, p.sfb, lsfb},
            {{}, nullptr, st.d, static_cast<ElementD*>(p.d), st.d}};
        return args;
    }
};

}  // namespace bs::sm90

// One extern "C" entry point per (family, output type): `config` picks the tiles.
#if defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#define BS_SM90_GEMM_SHIM(name, Family, ElementD, Small, Large)                                                      \
    extern "C" int name(const BsGemmArgs* p, void* stream, unsigned long long* need, int* cuda_error) {              \
        switch (p->config) {                                                                                         \
            case 0: return bs::run<bs::sm90::Family<ElementD, bs::sm90::Large>>(                                     \
                p, static_cast<cudaStream_t>(stream), need, cuda_error);                                             \
            case 1: return bs::run<bs::sm90::Family<ElementD, bs::sm90::Small>>(                                     \
                p, static_cast<cudaStream_t>(stream), need, cuda_error);                                             \
            default: return BS_GEMM_CONFIG;                                                                          \
        }                                                                                                            \
    }
#else
#define BS_SM90_GEMM_SHIM(name, Family, ElementD, Small, Large)                                                      \
    extern "C" int name(const BsGemmArgs*, void*, unsigned long long*, int*) { return BS_GEMM_ARCH; }
#endif
