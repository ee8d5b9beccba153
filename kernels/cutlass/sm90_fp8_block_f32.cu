// FP8 blockwise (1x128 x 128x128) -> f32 GEMM for sm_90a (see sm90_gemm.cuh).
// config 0: 128x128 tiles, A's scales M-major; 1: 64x128 ping-pong, A's scales K-major.
#include "sm90_gemm.cuh"

BS_SM90_GEMM_SHIM(bs_sm90_gemm_fp8_block_f32, Fp8BlockwiseGemm, float, Fp8Small, Fp8Large)
