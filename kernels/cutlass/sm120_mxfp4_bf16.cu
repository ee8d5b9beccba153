// MXFP4 x MXFP4 -> bf16 GEMM for sm_120a (see sm120_gemm.cuh): the mxf4 kind, UE8M0
// scales per 32 of K.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_mxfp4_bf16, Mxfp4, cutlass::bfloat16_t)
