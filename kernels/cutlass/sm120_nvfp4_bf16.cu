// NVFP4 x NVFP4 -> bf16 GEMM for sm_120a (see sm120_gemm.cuh): the mxf4nvf4 kind, UE4M3
// scales per 16 of K.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_nvfp4_bf16, Nvfp4, cutlass::bfloat16_t)
