// What every CUTLASS shim shares: the strides built from BsGemmArgs' leading dimensions
// and the query-or-launch driver around a GemmUniversalAdapter.
#pragma once

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/util/packed_stride.hpp"

#include "gemm_args.h"

// The Rust mirror (crates/blockscale-cuda/src/gemm/cutlass.rs) asserts the same size.
static_assert(sizeof(BsGemmArgs) == 128, "BsGemmArgs layout changed: update gemm/cutlass.rs");

namespace bs {

using namespace cute;

// The strides of row-major A (M x K), K-major B (N x K) and row-major D (M x N) with the
// caller's leading dimensions.
template <class Kernel>
struct Strides {
    typename Kernel::StrideA a;
    typename Kernel::StrideB b;
    typename Kernel::StrideD d;
    explicit Strides(const BsGemmArgs& p)
        : a(cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(p.m, p.k, 1))),
          b(cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(p.n, p.k, 1))),
          d(cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(p.m, p.n, 1))) {
        get<0>(a) = p.lda;
        get<0>(b) = p.ldb;
        get<0>(d) = p.ldd;
    }
};

// Queries (need != null: the workspace size, after can_implement) or runs one GEMM.
template <class G>
int run(const BsGemmArgs* p, cudaStream_t stream, unsigned long long* need, int* cuda_error) {
    using Gemm = typename G::Gemm;
    using Raster = typename Gemm::GemmKernel::TileScheduler::RasterOrderOptions;
    if (!G::accepts(*p)) return BS_GEMM_CANNOT_IMPLEMENT;
    typename Gemm::Arguments args = G::arguments(*p);
    args.epilogue.thread.alpha = p->alpha;
    args.epilogue.thread.bias_ptr = p->bias;
    args.epilogue.thread.activation.kind = p->activation;
    args.hw_info.sm_count = p->sm_count;
    args.scheduler.raster_order = p->raster == 1 ? Raster::AlongM : p->raster == 2 ? Raster::AlongN : Raster::Heuristic;
    args.scheduler.max_swizzle_size = p->swizzle > 0 ? p->swizzle : 1;
    if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return BS_GEMM_CANNOT_IMPLEMENT;
    const size_t bytes = Gemm::get_workspace_size(args);
    if (need) {
        *need = bytes;
        return BS_GEMM_OK;
    }
    if (bytes > p->workspace_bytes) return BS_GEMM_WORKSPACE;
    Gemm gemm;
    if (gemm.initialize(args, p->workspace, stream) != cutlass::Status::kSuccess) {
        cudaError_t e = cudaGetLastError();
        // CUTLASS may have consumed the error: ask whether this GPU has the kernel at all
        // (an sm_120a kernel on a Hopper GPU has no image for it).
        cudaFuncAttributes attributes;
        const cudaError_t image = cudaFuncGetAttributes(&attributes, cutlass::device_kernel<typename Gemm::GemmKernel>);
        if (image != cudaSuccess) {
            cudaGetLastError();
            if (cuda_error) *cuda_error = static_cast<int>(image);
            return BS_GEMM_ARCH;
        }
        if (cuda_error) *cuda_error = static_cast<int>(e);
        return BS_GEMM_INIT;
    }
    const cutlass::Status s = gemm.run(stream);
    const cudaError_t e = cudaGetLastError();
    if (s != cutlass::Status::kSuccess || e != cudaSuccess) {
        if (cuda_error) *cuda_error = static_cast<int>(e);
        return BS_GEMM_LAUNCH;
    }
    return BS_GEMM_OK;
}

}  // namespace bs
