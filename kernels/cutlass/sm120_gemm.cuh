// CUTLASS 4.2 GEMMs for Blackwell GeForce and RTX PRO (sm_120a), instantiated by the
// sm120_*.cu shims next to this file. Two families, one tile configuration each:
//
// - Block-scaled (NVFP4 and MX): the operands exactly as blockscale's quantize writes
//   them, packed elements K-major and one-byte scales in Swizzled128x4, which is
//   CUTLASS's Sm1xxBlkScaledConfig layout (the test `cutlass_scale_layout` checks this
//   offset for offset). The tensor cores apply the scales (OMMA.SF for the FP4 kinds,
//   QMMA.SF for mxf8f6f4).
// - FP8 blockwise: E4M3 with f32 scales per 1 x 128 (A, [M][K/128]) and 128 x 128 (B,
//   [N/128][K/128]), both K-major as blockscale stores them: CUTLASS example 87's kernel.
//
// Both finish with the epilogue of the Hopper shims: D = act(alpha * acc + bias[col]),
// activation chosen at run time, bf16 output.
#pragma once

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"

#include "activation.cuh"
#include "gemm_args.h"
#include "gemm_run.cuh"

namespace bs::sm120 {

using namespace cute;

// One tile configuration: 128 x 128 x 128 with the persistent scheduler, cluster
// 1 x 1 x 1 (GeForce Blackwell has no TMA multicast). Narrower tiles do not build (the
// block-scaled mainloop reads B's scales in 128-row units), and the stream-K scheduler,
// the candidate for small M, spilled 8 bytes per thread (docs/KERNELS.md, "SM120 tier").
using Tile = Shape<_128, _128, _128>;
using Cluster = Shape<_1, _1, _1>;

template <class ElementD, class OpClass>
using FusedEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm120, OpClass, Tile, Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::RowMajor, 16 / sizeof(ElementD),          // no C operand
    ElementD, cutlass::layout::RowMajor, 16 / sizeof(ElementD),
    cutlass::epilogue::collective::EpilogueScheduleAuto,
    cutlass::epilogue::fusion::LinCombPerColBiasEltAct<RuntimeActivation, ElementD, float, float, ElementD, float>>::
    CollectiveOp;

// TMA reads 16-byte units: FP4 and FP8 rows need 32 and 16 elements, FP6 (and FP4 on the
// mxf8f6f4 path) 128.
template <class Element, bool F8F6F4>
constexpr int alignment() {
    return cutlass::detail::get_input_alignment_bits<typename Element::DataType, F8F6F4>() /
           cutlass::sizeof_bits<typename Element::DataType>::value;
}

// A (M x K) times B (N x K), each a CUTLASS block-scaled type (nv_float4_t, mx_float4_t,
// mx_float6_t, mx_float8_t), with the scale tensors in the Sm1xx layout.
template <class ElementA, class ElementB, class ElementD>
struct BlockScaledGemm {
    static constexpr bool f8f6f4 = cutlass::sizeof_bits<typename ElementA::DataType>::value != 4 ||
                                   cutlass::sizeof_bits<typename ElementB::DataType>::value != 4;
    using OpClass = cutlass::arch::OpClassBlockScaledTensorOp;
    using Epi = FusedEpilogue<ElementD, OpClass>;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm120, OpClass,
        ElementA, cutlass::layout::RowMajor, alignment<ElementA, f8f6f4>(),
        ElementB, cutlass::layout::ColumnMajor, alignment<ElementB, f8f6f4>(),
        float, Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        cutlass::gemm::collective::KernelScheduleAuto>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using ScaleConfig = typename Mainloop::Sm1xxBlkScaledConfig;
    using DataA = typename ElementA::DataType;
    using DataB = typename ElementB::DataType;
    using Scale = typename ElementA::ScaleFactorType;

    static bool accepts(const BsGemmArgs&) { return true; }

    static typename Gemm::Arguments arguments(const BsGemmArgs& p) {
        const Strides<Kernel> st(p);
        auto shape = make_shape(p.m, p.n, p.k, 1);
        typename Gemm::Arguments args{
            cutlass::gemm::GemmUniversalMode::kGemm,
            {p.m, p.n, p.k, 1},
            {static_cast<const DataA*>(p.a), st.a, static_cast<const DataB*>(p.b), st.b,
             reinterpret_cast<const Scale*>(p.sfa), ScaleConfig::tile_atom_to_shape_SFA(shape),
             reinterpret_cast<const Scale*>(p.sfb), ScaleConfig::tile_atom_to_shape_SFB(shape)},
            {{}, nullptr, st.d, static_cast<ElementD*>(p.d), st.d}};
        return args;
    }
};

template <class ElementD>
struct Fp8BlockwiseGemm {
    using ScaleConfig = cutlass::detail::Sm120BlockwiseScaleConfig<1, 128, 128, UMMA::Major::K, UMMA::Major::K>;
    using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
    using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
    using OpClass = cutlass::arch::OpClassTensorOp;
    using Epi = FusedEpilogue<ElementD, OpClass>;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm120, OpClass,
        cutlass::float_e4m3_t, cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, 16,
        cutlass::float_e4m3_t, cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, 16,
        float, Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        cutlass::gemm::collective::KernelScheduleAuto>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    // A's scales are read in place, K-major ([M][K/128]).
    static bool accepts(const BsGemmArgs& p) { return p.sfa_mn_major == 0; }

    static typename Gemm::Arguments arguments(const BsGemmArgs& p) {
        const Strides<Kernel> st(p);
        auto shape = make_shape(p.m, p.n, p.k, 1);
        typename Gemm::Arguments args{
            cutlass::gemm::GemmUniversalMode::kGemm,
            {p.m, p.n, p.k, 1},
            {static_cast<const cutlass::float_e4m3_t*>(p.a), st.a, static_cast<const cutlass::float_e4m3_t*>(p.b), st.b,
             p.sfa, ScaleConfig::tile_atom_to_shape_SFA(shape), p.sfb, ScaleConfig::tile_atom_to_shape_SFB(shape)},
            {{}, nullptr, st.d, static_cast<ElementD*>(p.d), st.d}};
        return args;
    }
};

template <class ElementD>
using Nvfp4 = BlockScaledGemm<cutlass::nv_float4_t<cutlass::float_e2m1_t>, cutlass::nv_float4_t<cutlass::float_e2m1_t>,
                              ElementD>;
template <class ElementD>
using Mxfp4 = BlockScaledGemm<cutlass::mx_float4_t<cutlass::float_e2m1_t>, cutlass::mx_float4_t<cutlass::float_e2m1_t>,
                              ElementD>;
template <class ElementD>
using Mxfp8E4m3 = BlockScaledGemm<cutlass::mx_float8_t<cutlass::float_e4m3_t>,
                                  cutlass::mx_float8_t<cutlass::float_e4m3_t>, ElementD>;
template <class ElementD>
using Mxfp8E5m2 = BlockScaledGemm<cutlass::mx_float8_t<cutlass::float_e5m2_t>,
                                  cutlass::mx_float8_t<cutlass::float_e5m2_t>, ElementD>;
template <class ElementD>
using Mxfp8E4m3Mxfp6E2m3 = BlockScaledGemm<cutlass::mx_float8_t<cutlass::float_e4m3_t>,
                                           cutlass::mx_float6_t<cutlass::float_e2m3_t>, ElementD>;

}  // namespace bs::sm120

// One extern "C" entry point per (family, output type); `config` must be 0.
#if defined(CUTLASS_ARCH_MMA_SM120_SUPPORTED)
#define BS_SM120_GEMM_SHIM(name, Family, ElementD)                                                                   \
    extern "C" int name(const BsGemmArgs* p, void* stream, unsigned long long* need, int* cuda_error) {              \
        if (p->config != 0) return BS_GEMM_CONFIG;                                                                   \
        return bs::run<bs::sm120::Family<ElementD>>(p, static_cast<cudaStream_t>(stream), need, cuda_error);         \
    }
#else
#define BS_SM120_GEMM_SHIM(name, Family, ElementD)                                                                   \
    extern "C" int name(const BsGemmArgs*, void*, unsigned long long*, int*) { return BS_GEMM_ARCH; }
#endif
