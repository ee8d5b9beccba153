//! The `extern "C"` CUTLASS shims (`kernels/cutlass/*.cu`, built by build.rs into a static
//! library): one per kernel family and output type. Each takes a [`BsGemmArgs`], the
//! stream, and either a pointer that receives the workspace size (a query: nothing is
//! launched) or null (a launch). This module is the only place that calls them, through
//! [`Shim`]'s safe [`query`](Shim::query), [`workspace`](Shim::workspace) and
//! [`launch`](Shim::launch).

use std::ffi::{c_int, c_void};

use cudarc::driver::CudaStream;

use crate::CudaError;

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
type ShimFn = unsafe extern "C" fn(*const BsGemmArgs, *mut c_void, *mut u64, *mut c_int) -> c_int;

/// Declares each shim once, with the one signature they share, and [`entry`], which maps
/// a (family, output) pair to it and its name.
macro_rules! shims {
    ($(($family:pat, $out:pat) => $name:ident,)*) => {
        // SAFETY: the entry points the macros of kernels/cutlass/sm90_gemm.cuh and
        // sm120_gemm.cuh define, `int name(const BsGemmArgs*, void* stream, unsigned long
        // long* need, int* cuda_error)`, declared with the same types (BsGemmArgs's layout
        // asserted above).
        unsafe extern "C" {
            $(fn $name(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;)*
        }

        /// The shim for a family and output type and its name; `None` for the
        /// combinations that have no kernel (the sm_120a shims write bf16 only).
        fn entry(family: Family, out: OutKind) -> Option<(ShimFn, &'static str)> {
            use Sm120Kind::*;
            match (family, out) {
                $(($family, $out) => Some(($name as ShimFn, stringify!($name))),)*
                _ => None,
            }
        }
    };
}

shims! {
    (Family::Bf16, OutKind::Bf16) => bs_sm90_gemm_bf16_bf16,
    (Family::Bf16, OutKind::F16) => bs_sm90_gemm_bf16_f16,
    (Family::Bf16, OutKind::F32) => bs_sm90_gemm_bf16_f32,
    (Family::Fp8Block, OutKind::Bf16) => bs_sm90_gemm_fp8_block_bf16,
    (Family::Fp8Block, OutKind::F16) => bs_sm90_gemm_fp8_block_f16,
    (Family::Fp8Block, OutKind::F32) => bs_sm90_gemm_fp8_block_f32,
    (Family::Sm120(Nvfp4), OutKind::Bf16) => bs_sm120_gemm_nvfp4_bf16,
    (Family::Sm120(Mxfp4), OutKind::Bf16) => bs_sm120_gemm_mxfp4_bf16,
    (Family::Sm120(Mxfp8E4m3), OutKind::Bf16) => bs_sm120_gemm_mxfp8_e4m3_bf16,
    (Family::Sm120(Mxfp8E5m2), OutKind::Bf16) => bs_sm120_gemm_mxfp8_e5m2_bf16,
    (Family::Sm120(Mxfp8Mxfp6), OutKind::Bf16) => bs_sm120_gemm_mxfp8_mxfp6_bf16,
    (Family::Sm120(Fp8Block), OutKind::Bf16) => bs_sm120_gemm_fp8_block_bf16,
}

/// The kernel families: two on sm_90a, six on sm_120a.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// sm_90a: bf16 x bf16 (dequantized NVFP4 / MX operands, split activations).
    Bf16,
    /// sm_90a: FP8 E4M3 with 1x128 (A) and 128x128 (B) f32 scales.
    Fp8Block,
    /// sm_120a, block-scaled tensor cores reading blockscale's operands in place.
    Sm120(Sm120Kind),
}

/// The sm_120a kernels: the element types of A and B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sm120Kind {
    /// NVFP4 x NVFP4 (mxf4nvf4, UE4M3 scales per 16).
    Nvfp4,
    /// MXFP4 x MXFP4 (mxf4, UE8M0 scales per 32).
    Mxfp4,
    /// MXFP8 E4M3 x MXFP8 E4M3 (mxf8f6f4).
    Mxfp8E4m3,
    /// MXFP8 E5M2 x MXFP8 E5M2 (mxf8f6f4).
    Mxfp8E5m2,
    /// MXFP8 E4M3 x MXFP6 E2M3 (mxf8f6f4, mixed).
    Mxfp8Mxfp6,
    /// FP8 E4M3 with 1x128 (A) and 128x128 (B) f32 scales, both read K-major.
    Fp8Block,
}

impl Sm120Kind {
    /// Every sm_120a kernel.
    #[cfg(test)]
    pub(crate) const ALL: [Self; 6] =
        [Self::Nvfp4, Self::Mxfp4, Self::Mxfp8E4m3, Self::Mxfp8E5m2, Self::Mxfp8Mxfp6, Self::Fp8Block];
}

/// The output element, by size: 2 bytes bf16 or f16 (told apart by `is_bf16`), 4 f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutKind {
    Bf16,
    F16,
    F32,
}

/// One CUTLASS GEMM: a shim and its name (for error messages).
#[derive(Clone, Copy)]
pub(crate) struct Shim {
    entry: ShimFn,
    name: &'static str,
}

impl Shim {
    /// The shim for a family and output type; `None` for the combinations that have no
    /// kernel (the sm_120a shims write bf16 only).
    pub(crate) fn of(family: Family, out: OutKind) -> Option<Self> {
        let (entry, name) = entry(family, out)?;
        Some(Self { entry, name })
    }

    /// Asks the shim whether CUTLASS can run `args` and how much workspace it needs:
    /// (the status, the workspace bytes, the CUDA error). Reads the sizes and strides in
    /// `args` only, never its addresses; nothing is launched, no GPU is needed.
    pub(crate) fn query(self, args: &BsGemmArgs) -> (c_int, u64, c_int) {
        let (mut need, mut cuda) = (0u64, 0 as c_int);
        // SAFETY: a query (non-null `need`): the shim builds CUTLASS's host-side arguments
        // from the sizes and strides in `args` (no pointer in it is dereferenced, nothing
        // is launched) and writes the workspace size to `need` and any CUDA error to
        // `cuda`, both live locals.
        let status = unsafe { (self.entry)(args, std::ptr::null_mut(), &mut need, &mut cuda) };
        (status, need, cuda)
    }

    /// The workspace bytes CUTLASS needs for `args` (its tile scheduler's).
    ///
    /// # Errors
    /// [`CudaError::Cutlass`] when the shim refuses the arguments.
    pub(crate) fn workspace(self, args: &BsGemmArgs) -> Result<u64, CudaError> {
        let (status, need, cuda) = self.query(args);
        self.check(status, cuda)?;
        Ok(need)
    }

    /// Queues the GEMM `args` describes on `stream`, binding its context to this thread
    /// first.
    ///
    /// Safe to call inside the crate under the launch contract of the [`ffi`](super)
    /// module: every address in `args` covers what the GEMM reads or writes (operands,
    /// scales, output, bias, and `workspace_bytes` of workspace at least what
    /// [`Self::workspace`] gave), its buffer's guard held until this returns.
    ///
    /// # Errors
    /// [`CudaError::Driver`] when the context cannot be bound, [`CudaError::Cutlass`]
    /// when the shim refuses the arguments or the launch fails.
    pub(crate) fn launch(self, stream: &CudaStream, args: &BsGemmArgs) -> Result<(), CudaError> {
        stream.context().bind_to_thread().map_err(CudaError::driver("binding the context to this thread"))?;
        let mut cuda = 0 as c_int;
        // SAFETY: the launch contract: every address in `args` was checked for the extent
        // the kernel reads or writes and stays valid, its guard ordering the GEMM after
        // the buffers' earlier uses; the stream is alive for the call, which only queues
        // work on it; `cuda` is a live local.
        let status = unsafe { (self.entry)(args, stream.cu_stream() as *mut c_void, std::ptr::null_mut(), &mut cuda) };
        self.check(status, cuda)
    }

    /// The typed error for a status other than [`OK`].
    fn check(self, status: c_int, cuda: c_int) -> Result<(), CudaError> {
        if status != OK {
            return Err(CudaError::Cutlass { kernel: self.name, status: status_name(status), cuda });
        }
        Ok(())
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
        6 => "no kernel image for this GPU's architecture",
        _ => "unknown status",
    }
}
