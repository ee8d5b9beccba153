// The argument block of every CUTLASS GEMM shim in this folder, mirrored by
// crates/blockscale-cuda/src/gemm/cutlass.rs (which asserts the same size). Plain C:
// the Rust side passes a pointer to it.
//
// D[i, j] = act(alpha * sum_k A[i, k] * B[j, k] + bias[j]), A row-major (M x K, row
// stride lda elements), B row-major (N x K, "K-major", row stride ldb), D row-major
// (M x N, row stride ldd).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct BsGemmArgs {
    const void* a;
    const void* b;
    // FP8 blockwise only: A's scales (one per row and 128 of K) and B's (one per
    // 128 x 128 tile). `sfa_mn_major` says whether A's are stored [K/128][M] (1) or
    // [M][K/128] (0); B's are always [ceil(N/128)][K/128].
    const float* sfa;
    const float* sfb;
    void* d;
    const float* bias;  // N values, or null for none
    void* workspace;
    unsigned long long workspace_bytes;
    long long lda;
    long long ldb;
    long long ldd;
    int m;
    int n;
    int k;
    int sm_count;
    float alpha;
    int activation;  // 0 identity, 1 GELU (tanh), 2 GELU (erf), 3 SiLU
    int config;      // tile configuration (see each shim); -1 picks by shape
    int sfa_mn_major;
    int raster;      // 0 heuristic, 1 along M, 2 along N
    int swizzle;     // CTA rasterization swizzle (1, 2, 4, 8); 0 picks 1
} BsGemmArgs;

// Status codes of the shims.
enum {
    BS_GEMM_OK = 0,
    BS_GEMM_CANNOT_IMPLEMENT = 1,  // CUTLASS's can_implement refused the arguments
    BS_GEMM_WORKSPACE = 2,         // workspace too small (workspace_bytes < needed)
    BS_GEMM_INIT = 3,              // CUTLASS's initialize failed
    BS_GEMM_LAUNCH = 4,            // the launch failed (cudaGetLastError is reported)
    BS_GEMM_CONFIG = 5,            // no such tile configuration
    BS_GEMM_ARCH = 6               // no kernel for this GPU's architecture (built without it, or another GPU)
};

#ifdef __cplusplus
}
#endif
