// Does a warpgroup's own ALU work overlap its wgmma? A probe (docs/DECISIONS.md #64).
//
// Built and run by hand on the Hopper machine (not part of the library build):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o wgmma_overlap wgmma_overlap.cu && ./wgmma_overlap
//
// One CTA an SM, two consumer warpgroups, each issuing per turn one group of four
// m64n128k16 bf16 wgmma (the `wgmma` weight-only kernel's slab) and, between groups,
// WORK units of ALU work: per unit and thread, three dependent integer instructions on
// each of 16 registers (48 instructions; the NVFP4 decode is about one unit). Modes:
//   0  register A (RS), the work decodes the next A registers (as wgemm.cu does)
//   1  register A fixed, the work goes into a sink (no dependency of the wgmma on it)
//   2  shared-memory A (SS), the work goes into a sink
//   3  register A fixed, the same work done by a third warpgroup that issues no wgmma
//   4  as 0, the two warpgroups taking turns to issue (named barriers: "ping-pong")
// SETS register sets of A, WAITN groups left in flight after each commit.
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

__device__ __forceinline__ uint64_t desc(uint32_t saddr) {  // K-major, 128-byte swizzle
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}
__device__ __forceinline__ void mma_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void mma_ss(float (&d)[16][4], uint64_t da, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(da), "l"(db));
}
template <int N>
__device__ __forceinline__ void wait_groups() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_acc(float (&d)[16][4]) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
}

template <int SETS, int WAITN, int WORK, int MODE>
__global__ void __launch_bounds__(384) probe(float* out, int iters) {
    extern __shared__ __align__(1024) unsigned char sm[];
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(sm)[i] = 0x3c003c00u ^ (i & 7);
    __syncthreads();
    const uint32_t lane = threadIdx.x & 31;
    const int wg = threadIdx.x / 128;
    uint32_t sink = 0;
    if (wg == 2) {
        if constexpr (MODE == 3) {
            uint32_t x[16];
            for (int r = 0; r < 16; ++r) x[r] = threadIdx.x * 7 + r;
            for (int it = 0; it < iters; ++it)
#pragma unroll
                for (int r = 0; r < 16; ++r)
#pragma unroll
                    for (int i = 0; i < WORK; ++i) x[r] = (x[r] ^ (x[r] >> 3)) + 0x01230123u;
            for (int r = 0; r < 16; ++r) sink ^= x[r];
            out[blockIdx.x * blockDim.x + threadIdx.x] = (float)sink;
        }
        return;
    }
    float d[16][4];
    for (int j = 0; j < 16; ++j)
        for (int c = 0; c < 4; ++c) d[j][c] = 0.f;
    uint32_t a[SETS][4][4];
    auto work = [&](int it, uint32_t (&ar)[4][4]) {
        const uint4 v = *reinterpret_cast<const uint4*>(sm + 32768 + (((uint32_t)it * 512u + lane * 16u) & 16383u));
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                uint32_t x = w[q] >> (4 * r);
#pragma unroll
                for (int i = 0; i < WORK; ++i) x = (x ^ (x >> 3)) + 0x01230123u;
                if (MODE == 0 || MODE == 4)
                    ar[q][r] = (x & 0x00ff00ffu) | 0x3c003c00u;
                else if (MODE != 3)
                    sink ^= x;
            }
    };
    auto step = [&](int it, uint32_t (&ar)[4][4], uint32_t (&next)[4][4]) {
        if (MODE == 4) asm volatile("bar.sync %0, 256;" ::"r"(2 + wg) : "memory");
        fence_acc(d);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const uint64_t db = desc(base + (uint32_t)(it & 1) * 16384u + 32u * q);
            if (MODE == 2)
                mma_ss(d, desc(base + 49152u + 8192u * wg + 32u * q), db);
            else
                mma_rs(d, ar[q], db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        if (MODE == 4) asm volatile("bar.arrive %0, 256;" ::"r"(3 - wg) : "memory");
        wait_groups<WAITN>();
        fence_acc(d);
        if (MODE != 3) work(it + 1, next);
    };
    for (int s = 0; s < SETS; ++s) work(0, a[s]);
    if (MODE == 4 && wg == 1) asm volatile("bar.arrive 2, 256;" ::: "memory");
    for (int it = 0; it < iters; it += SETS) {
#pragma unroll
        for (int s = 0; s < SETS; ++s) step(it + s, a[s], a[(s + 1) % SETS]);
    }
    wait_groups<0>();
    if (MODE == 4 && wg == 0) asm volatile("bar.sync 2, 256;" ::: "memory");
    float s = 0.f;
    for (int j = 0; j < 16; ++j)
        for (int c = 0; c < 4; ++c) s += d[j][c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s + (float)sink;
}

int main() {
    typedef void (*Kernel)(float*, int);
    struct Variant {
        const char* name;
        Kernel k;
    } variants[] = {
        {"RS, decode in the consumers, work 0", probe<3, 2, 0, 0>},
        {"RS, decode in the consumers, work 1", probe<3, 2, 1, 0>},
        {"RS, decode in the consumers, work 2", probe<3, 2, 2, 0>},
        {"RS, decode in the consumers, work 4", probe<3, 2, 4, 0>},
        {"RS, A fixed, work into a sink, 2", probe<3, 2, 2, 1>},
        {"SS, work into a sink, 0", probe<3, 2, 0, 2>},
        {"SS, work into a sink, 2", probe<3, 2, 2, 2>},
        {"RS, work by a third warpgroup, 2", probe<3, 2, 2, 3>},
        {"RS, work by a third warpgroup, 4", probe<3, 2, 4, 3>},
        {"RS, ping-pong, 2 groups in flight, work 2", probe<3, 2, 2, 4>},
        {"RS, ping-pong, wait for own group, work 2", probe<2, 0, 2, 4>},
    };
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float* out = nullptr;
    cudaMalloc(&out, (size_t)sms * 384 * sizeof(float));
    const int iters = 12000;
    for (auto& v : variants) {
        cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024);
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        v.k<<<sms, 384, 120 * 1024>>>(out, 120);  // warm-up
        cudaEventRecord(a);
        v.k<<<sms, 384, 120 * 1024>>>(out, iters);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0.f;
        cudaEventElapsedTime(&ms, a, b);
        const double flop = (double)sms * iters * 2 * 4 * 64.0 * 128 * 16 * 2;
        printf("%-45s %7.3f ms %7.1f TFLOP/s\n", v.name, ms, flop / ms / 1e9);
        if (cudaGetLastError() != cudaSuccess) return 1;
    }
    return 0;
}
