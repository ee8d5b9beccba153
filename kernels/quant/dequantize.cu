// Dequantization kernels: every value is (value(code) * block_scale) * post in f32
// (post is NVFP4's decode factor, 1 otherwise), NaN made canonical, then rounded once to
// the output type; the same steps as blockscale-cpu's kernels. One chunk of 8 values per
// thread per grid-stride step. (Also the decode of quantized activations before the
// GEMV and pgemm: the pairs on prepared weights.)

#include "../common/convert.cuh"
#include "../common/params.cuh"
#include "decode.cuh"

namespace bs {

struct F32Out {};
struct F16Out {};
struct BF16Out {};

template <typename Out>
__device__ __forceinline__ void store8(void* base, uint64_t at, const float v[8]);

template <>
__device__ __forceinline__ void store8<F32Out>(void* base, uint64_t at, const float v[8]) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + at);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
}

template <>
__device__ __forceinline__ void store8<F16Out>(void* base, uint64_t at, const float v[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (uint32_t)to_f16_bits(v[2 * i]) | ((uint32_t)to_f16_bits(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <>
__device__ __forceinline__ void store8<BF16Out>(void* base, uint64_t at, const float v[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (uint32_t)to_bf16_bits(v[2 * i]) | ((uint32_t)to_bf16_bits(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename Out, uint32_t S>
__device__ void dequantize_chunks(const DequantParams& p) {
    // Launched as a dependent (programmatic dependent launch): wait for the kernel that
    // wrote the codes, then let the next kernel launch at once (it waits in turn, with
    // griddepcontrol.wait, for this grid to finish before reading what it writes).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const uint32_t chunks_per_row = p.k / 8;
    const uint64_t total = (uint64_t)p.rows * chunks_per_row;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    // (row, chunk) of c, advanced incrementally: no 64-bit division in the loop.
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t row_c = first / chunks_per_row;
    uint32_t chunk = (uint32_t)(first % chunks_per_row);
    const uint64_t stride_rows = stride / chunks_per_row;
    const uint32_t stride_chunks = (uint32_t)(stride % chunks_per_row);
    for (uint64_t c = first; c < total; c += stride) {
        const uint32_t row = (uint32_t)row_c, col = chunk * 8u;
        row_c += stride_rows;
        chunk += stride_chunks;
        if (chunk >= chunks_per_row) {
            chunk -= chunks_per_row;
            row_c += 1;
        }
        float v[8];
        decode8<S>(p, row, col, v);
        store8<Out>(p.out, (uint64_t)row * p.row_stride + col, v);
    }
}

}  // namespace bs

#define BS_DEQUANTIZE(name, scheme)                                                                      \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_f32(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::F32Out, bs::scheme>(p);                                                \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_f16(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::F16Out, bs::scheme>(p);                                                \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##name##_bf16(const bs::DequantParams p) { \
        bs::dequantize_chunks<bs::BF16Out, bs::scheme>(p);                                               \
    }

BS_DEQUANTIZE(nvfp4, NVFP4)
BS_DEQUANTIZE(mxfp4, MXFP4)
BS_DEQUANTIZE(mxfp6_e2m3, MXFP6_E2M3)
BS_DEQUANTIZE(mxfp6_e3m2, MXFP6_E3M2)
BS_DEQUANTIZE(mxfp8_e4m3, MXFP8_E4M3)
BS_DEQUANTIZE(mxfp8_e5m2, MXFP8_E5M2)
BS_DEQUANTIZE(fp8_block_1x128, FP8_BLOCK_1X128)
BS_DEQUANTIZE(fp8_block_128x128, FP8_BLOCK_128X128)
BS_DEQUANTIZE(int4_g32, INT4_G32)
BS_DEQUANTIZE(int4_g128, INT4_G128)
