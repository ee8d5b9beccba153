// MXFP8 E5M2 x MXFP8 E5M2 -> bf16 GEMM for sm_120a (see sm120_gemm.cuh): the mxf8f6f4
// kind. E2M1 and E3M2 operands paired with E5M2 also run here after widening.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_mxfp8_e5m2_bf16, Mxfp8E5m2, cutlass::bfloat16_t)
