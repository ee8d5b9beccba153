// FP8 blockwise (1x128 x 128x128) -> bf16 GEMM for sm_120a (see sm120_gemm.cuh): both
// operands' f32 scales read in place, K-major.
#include "sm120_gemm.cuh"

BS_SM120_GEMM_SHIM(bs_sm120_gemm_fp8_block_bf16, Fp8BlockwiseGemm, cutlass::bfloat16_t)
