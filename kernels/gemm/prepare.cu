// GEMM operand preparation for the tensor-core GEMMs (kernels/cutlass/): activations
// split into exact bf16 pieces, FP8 activation scales rewritten for the blockwise
// kernel, and the staged output copied to a row stride TMA cannot write. The block-scaled
// operands themselves go through the dequantize kernels (kernels/quant/dequantize.cu)
// with post = 1, which write element x block scale, exact in bf16 for NVFP4 and MX.

#include "../common/convert.cuh"
#include "../common/params.cuh"

namespace bs {

template <typename T> __device__ __forceinline__ float load_f32(const void* p, uint64_t i);
template <> __device__ __forceinline__ float load_f32<float>(const void* p, uint64_t i) {
    return static_cast<const float*>(p)[i];
}
template <> __device__ __forceinline__ float load_f32<__half>(const void* p, uint64_t i) {
    return __half2float(static_cast<const __half*>(p)[i]);
}
template <> __device__ __forceinline__ float load_f32<__nv_bfloat16>(const void* p, uint64_t i) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// x = h + m + l exactly, each a bf16: h is x with its low 16 bits cleared, m is the rest
// with its low 16 bits cleared, l what is left. Each difference is exact in f32 (it only
// drops leading bits), clearing bits never overflows, and what is left after two cuts of
// a 24-bit significand has at most 8 significant bits, so l is exact unless it falls
// below bf16's smallest subnormal (|x| < 2^-110; then it is rounded to nearest). f16
// needs two pieces (11 bits), bf16 one. A non-finite x keeps its value in h and zeros
// elsewhere, so the products stay IEEE (inf * 0 = NaN, inf * w = inf).
__device__ __forceinline__ void split3(float x, uint16_t out[3]) {
    if (!isfinite(x)) {
        out[0] = to_bf16_bits(x);
        out[1] = out[2] = 0;
        return;
    }
    const uint32_t hb = bits_of(x) & 0xffff0000u;
    const float r = __fsub_rn(x, float_of(hb));
    const uint32_t mb = bits_of(r) & 0xffff0000u;
    const float l = __fsub_rn(r, float_of(mb));
    out[0] = (uint16_t)(hb >> 16);
    out[1] = (uint16_t)(mb >> 16);
    out[2] = __bfloat16_as_ushort(__float2bfloat16_rn(l));
}

// One thread per 8 consecutive values of a row (K is a multiple of 8), grid-stride.
template <typename T>
__device__ void split(const SplitParams& p) {
    const uint32_t chunks = p.k / 8u;
    const uint64_t total = (uint64_t)p.rows * chunks;
    for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c < total;
         c += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t row = c / chunks;
        const uint32_t col = (uint32_t)(c % chunks) * 8u;
        uint16_t piece[3][8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint16_t s[3];
            split3(load_f32<T>(p.x, row * p.x_stride + col + i), s);
            piece[0][i] = s[0];
            piece[1][i] = s[1];
            piece[2][i] = s[2];
        }
        uint16_t* out = static_cast<uint16_t*>(p.out) + row * p.out_stride + col;
        // Unrolled over the 3 possible pieces so that `piece` stays in registers.
#pragma unroll
        for (uint32_t q = 0; q < 3; q++) {
            if (q >= p.pieces) break;
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; i++) w[i] = (uint32_t)piece[q][2 * i] | ((uint32_t)piece[q][2 * i + 1] << 16);
            *reinterpret_cast<uint4*>(out + (uint64_t)q * p.k) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

template <typename T>
__device__ void copy_rows(const CopyParams& p) {
    const uint64_t total = (uint64_t)p.rows * p.cols;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t r = i / p.cols, c = i % p.cols;
        static_cast<T*>(p.dst)[r * p.dst_stride + c] = static_cast<const T*>(p.src)[r * p.src_stride + c];
    }
}

}  // namespace bs

extern "C" __global__ void __launch_bounds__(256) gemm_split_f32(const bs::SplitParams p) { bs::split<float>(p); }
extern "C" __global__ void __launch_bounds__(256) gemm_split_f16(const bs::SplitParams p) { bs::split<__half>(p); }
extern "C" __global__ void __launch_bounds__(256) gemm_split_bf16(const bs::SplitParams p) {
    bs::split<__nv_bfloat16>(p);
}

extern "C" __global__ void __launch_bounds__(256) gemm_copy_out_f32(const bs::CopyParams p) { bs::copy_rows<float>(p); }
extern "C" __global__ void __launch_bounds__(256) gemm_copy_out_f16(const bs::CopyParams p) {
    bs::copy_rows<uint16_t>(p);
}
extern "C" __global__ void __launch_bounds__(256) gemm_copy_out_bf16(const bs::CopyParams p) {
    bs::copy_rows<uint16_t>(p);
}

extern "C" __global__ void __launch_bounds__(256) gemm_fp8_scales(const bs::Fp8ScaleParams p) {
    const uint64_t total = (uint64_t)p.rows * p.kb;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        // Walk in destination order, so that a warp's stores are coalesced (its loads,
        // strided by K/128 floats, are served from L1/L2: the whole grid is small).
        const uint32_t r = p.mn_major ? (uint32_t)(i % p.rows) : (uint32_t)(i / p.kb);
        const uint32_t c = p.mn_major ? (uint32_t)(i / p.rows) : (uint32_t)(i % p.kb);
        p.dst[i] = p.src[(uint64_t)(p.tiles ? r / 128u : r) * p.kb + c];
    }
}
