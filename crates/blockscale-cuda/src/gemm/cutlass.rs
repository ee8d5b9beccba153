//! The `extern "C"` CUTLASS shims (`kernels/cutlass/*.cu`, built by build.rs into a static
//! library): one per kernel family and output type. Each takes a [`BsGemmArgs`], the
//! stream, and either a pointer that receives the workspace size (a query: nothing is
//! launched) or null (a launch). This module is the only place that calls them.

use std::ffi::{c_int, c_void};

/// `BsGemmArgs` of `kernels/cutlass/gemm_args.h`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BsGemmArgs {
    pub a: u64,
    pub b: u64,
    pub sfa: u64,
    pub sfb: u64,
    pub d: u64,
    pub bias: u64,
    pub workspace: u64,
    pub workspace_bytes: u64,
    pub lda: i64,
    pub ldb: i64,
    pub ldd: i64,
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub sm_count: c_int,
    pub alpha: f32,
    pub activation: c_int,
    pub config: c_int,
    pub sfa_mn_major: c_int,
    pub raster: c_int,
    pub swizzle: c_int,
}

// 11 eight-byte fields and 10 four-byte ones (nvcc gives the C struct the same layout).
const _: () = assert!(size_of::<BsGemmArgs>() == 128 && align_of::<BsGemmArgs>() == 8);

/// A shim's signature.
pub(crate) type Shim = unsafe extern "C" fn(*const BsGemmArgs, *mut c_void, *mut u64, *mut c_int) -> c_int;

unsafe extern "C" {
    fn bs_sm90_gemm_bf16_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm90_gemm_bf16_f16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm90_gemm_bf16_f32(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm90_gemm_fp8_block_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm90_gemm_fp8_block_f16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm90_gemm_fp8_block_f32(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
}

/// The kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// bf16 x bf16 (dequantized NVFP4 / MX operands, split activations).
    Bf16,
    /// FP8 E4M3 with 1x128 (A) and 128x128 (B) f32 scales.
    Fp8Block,
}

/// The output element, by size: 2 bytes bf16 or f16 (told apart by `is_bf16`), 4 f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutKind {
    Bf16,
    F16,
    F32,
}

/// The shim for a family and output type, with its name for error messages.
pub(crate) fn shim(family: Family, out: OutKind) -> (Shim, &'static str) {
    match (family, out) {
        (Family::Bf16, OutKind::Bf16) => (bs_sm90_gemm_bf16_bf16, "bs_sm90_gemm_bf16_bf16"),
        (Family::Bf16, OutKind::F16) => (bs_sm90_gemm_bf16_f16, "bs_sm90_gemm_bf16_f16"),
        (Family::Bf16, OutKind::F32) => (bs_sm90_gemm_bf16_f32, "bs_sm90_gemm_bf16_f32"),
        (Family::Fp8Block, OutKind::Bf16) => (bs_sm90_gemm_fp8_block_bf16, "bs_sm90_gemm_fp8_block_bf16"),
        (Family::Fp8Block, OutKind::F16) => (bs_sm90_gemm_fp8_block_f16, "bs_sm90_gemm_fp8_block_f16"),
        (Family::Fp8Block, OutKind::F32) => (bs_sm90_gemm_fp8_block_f32, "bs_sm90_gemm_fp8_block_f32"),
    }
}

/// Status codes of `gemm_args.h`.
pub(crate) const OK: c_int = 0;
/// CUTLASS's `can_implement` refused.
pub(crate) const CANNOT_IMPLEMENT: c_int = 1;
/// The workspace is smaller than the query said.
pub(crate) const WORKSPACE: c_int = 2;

/// What a status code means, for error messages.
pub(crate) fn status_name(status: c_int) -> &'static str {
    match status {
        OK => "ok",
        CANNOT_IMPLEMENT => "CUTLASS cannot implement these arguments",
        WORKSPACE => "workspace too small",
        3 => "CUTLASS initialization failed",
        4 => "the kernel launch failed",
        5 => "no such tile configuration",
        6 => "the library was built without this architecture's kernels",
        _ => "unknown status",
    }
}
