// MXFP8 E4M3 x MXFP8 E4M3 -> bf16 GEMM for sm_120a (see sm120_gemm.cuh): the mxf8f6f4
// kind. MX pairs whose elements embed exactly in E4M3 (E2M1, E2M3, E3M2) also run here
// after their elements are widened.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_mxfp8_e4m3_bf16, Mxfp8E4m3, cutlass::bfloat16_t)
