// BF16 x BF16 -> bf16 GEMM for sm_90a (see sm90_gemm.cuh). config 0: 128x256 tiles, 1: 128x128.
#include "sm90_gemm.cuh"

BS_SM90_GEMM_SHIM(bs_sm90_gemm_bf16_bf16, Bf16Gemm, cutlass::bfloat16_t, Bf16Small, Bf16Large)
