// MXFP8 E4M3 (activations) x MXFP6 E2M3 (weights) -> bf16 GEMM for sm_120a (see
// sm120_gemm.cuh): the mixed mxf8f6f4 kind, B read as packed 6-bit codes.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_mxfp8_mxfp6_bf16, Mxfp8E4m3Mxfp6E2m3, cutlass::bfloat16_t)
