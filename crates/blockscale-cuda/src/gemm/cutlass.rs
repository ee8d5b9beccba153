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
    fn bs_sm120_gemm_nvfp4_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm120_gemm_mxfp4_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm120_gemm_mxfp8_e4m3_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm120_gemm_mxfp8_e5m2_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm120_gemm_mxfp8_mxfp6_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
    fn bs_sm120_gemm_fp8_block_bf16(a: *const BsGemmArgs, s: *mut c_void, need: *mut u64, err: *mut c_int) -> c_int;
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

/// The shim for a family and output type, with its name for error messages; `None` for
/// the combinations that have no kernel (the sm_120a shims write bf16 only).
pub(crate) fn shim(family: Family, out: OutKind) -> Option<(Shim, &'static str)> {
    use Sm120Kind::*;
    Some(match (family, out) {
        (Family::Bf16, OutKind::Bf16) => (bs_sm90_gemm_bf16_bf16, "bs_sm90_gemm_bf16_bf16"),
        (Family::Bf16, OutKind::F16) => (bs_sm90_gemm_bf16_f16, "bs_sm90_gemm_bf16_f16"),
        (Family::Bf16, OutKind::F32) => (bs_sm90_gemm_bf16_f32, "bs_sm90_gemm_bf16_f32"),
        (Family::Fp8Block, OutKind::Bf16) => (bs_sm90_gemm_fp8_block_bf16, "bs_sm90_gemm_fp8_block_bf16"),
        (Family::Fp8Block, OutKind::F16) => (bs_sm90_gemm_fp8_block_f16, "bs_sm90_gemm_fp8_block_f16"),
        (Family::Fp8Block, OutKind::F32) => (bs_sm90_gemm_fp8_block_f32, "bs_sm90_gemm_fp8_block_f32"),
        (Family::Sm120(Nvfp4), OutKind::Bf16) => (bs_sm120_gemm_nvfp4_bf16, "bs_sm120_gemm_nvfp4_bf16"),
        (Family::Sm120(Mxfp4), OutKind::Bf16) => (bs_sm120_gemm_mxfp4_bf16, "bs_sm120_gemm_mxfp4_bf16"),
        (Family::Sm120(Mxfp8E4m3), OutKind::Bf16) => (bs_sm120_gemm_mxfp8_e4m3_bf16, "bs_sm120_gemm_mxfp8_e4m3_bf16"),
        (Family::Sm120(Mxfp8E5m2), OutKind::Bf16) => (bs_sm120_gemm_mxfp8_e5m2_bf16, "bs_sm120_gemm_mxfp8_e5m2_bf16"),
        (Family::Sm120(Mxfp8Mxfp6), OutKind::Bf16) => {
            (bs_sm120_gemm_mxfp8_mxfp6_bf16, "bs_sm120_gemm_mxfp8_mxfp6_bf16")
        }
        (Family::Sm120(Fp8Block), OutKind::Bf16) => (bs_sm120_gemm_fp8_block_bf16, "bs_sm120_gemm_fp8_block_bf16"),
        (Family::Sm120(_), _) => return None,
    })
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

#[cfg(test)]
mod tests {
    //! The shims' `can_implement` and workspace queries run on the host: no GPU needed.
    //! These pin the sm_120a rules the Rust side enforces before any launch
    //! (`gemm/sm120.rs`) to what CUTLASS itself accepts.

    use super::*;
    use crate::gemm::sm120;

    fn args(m: i32, n: i32, k: i32) -> BsGemmArgs {
        BsGemmArgs {
            a: 0,
            b: 0,
            sfa: 0,
            sfb: 0,
            d: 0,
            bias: 0,
            workspace: 0,
            workspace_bytes: 0,
            lda: k as i64,
            ldb: k as i64,
            ldd: n as i64,
            m,
            n,
            k,
            sm_count: 170,
            alpha: 1.0,
            activation: 0,
            config: 0,
            sfa_mn_major: 0,
            raster: 0,
            swizzle: 1,
        }
    }

    /// The query's status and workspace size.
    fn query(kind: Sm120Kind, args: &BsGemmArgs) -> (c_int, u64) {
        let (shim, _) = shim(Family::Sm120(kind), OutKind::Bf16).expect("every sm_120a kind writes bf16");
        let (mut need, mut cuda) = (0u64, 0 as c_int);
        // SAFETY: a query (non-null `need`): the shim builds CUTLASS's host-side arguments
        // from the sizes in `args` and calls can_implement / get_workspace_size; no device
        // memory is touched and nothing is launched.
        let status = unsafe { shim(args, std::ptr::null_mut(), &mut need, &mut cuda) };
        (status, need)
    }

    #[test]
    fn sm120_shims_accept_what_the_rust_rules_allow() {
        for kind in Sm120Kind::ALL {
            let (k, n) = (4 * sm120::k_multiple(kind) as i32, 2 * sm120::n_multiple(kind) as i32);
            for m in [1, 33, 128, 4097] {
                let (status, _) = query(kind, &args(m, n, k));
                assert_eq!(status, OK, "{kind:?} M={m} N={n} K={k}");
            }
            // Ragged M is the kernel's business (TMA fills the tile with zeros).
            assert_eq!(query(kind, &args(33, n + sm120::n_multiple(kind) as i32, k)).0, OK, "{kind:?}");
        }
    }

    #[test]
    fn sm120_shims_refuse_k_and_n_the_rust_rules_refuse() {
        for kind in Sm120Kind::ALL {
            let (k, n) = (sm120::k_multiple(kind) as i32, sm120::n_multiple(kind) as i32);
            // K one scale block short of the multiple (16 for NVFP4, 32 for MX, 128 FP8 block
            // has no smaller block): CUTLASS refuses it, as the Rust side does first.
            let block = match kind {
                Sm120Kind::Nvfp4 => 16,
                Sm120Kind::Fp8Block => 64,
                _ => 8,
            };
            assert_eq!(query(kind, &args(64, n, 2 * k + block)).0, CANNOT_IMPLEMENT, "{kind:?} K={}", 2 * k + block);
            // N not a multiple of what the kernel computes: 8 for the TMA epilogue's
            // 16-byte rows, 128 for FP8 block's scale granularity.
            assert_eq!(query(kind, &args(64, n + 4, 2 * k)).0, CANNOT_IMPLEMENT, "{kind:?} N={}", n + 4);
        }
    }

    #[test]
    fn sm120_shims_refuse_configs_and_scale_majors_they_do_not_have() {
        let mut a = args(128, 128, 256);
        a.config = 1;
        assert_eq!(query(Sm120Kind::Nvfp4, &a).0, 5, "one tile configuration only");
        let mut a = args(128, 128, 256);
        a.sfa_mn_major = 1;
        assert_eq!(query(Sm120Kind::Fp8Block, &a).0, CANNOT_IMPLEMENT, "A's FP8 scales are read K-major");
    }

    /// On a GPU that is not SM120 (the H100 of the GPU bundle), launching an sm_120a shim
    /// anyway is a status the wrapper turns into a typed error, not a crash, and the
    /// device stays usable. (The wrapper never does this: it dispatches by compute
    /// capability; this pins what would happen if it did.) Skips without a GPU.
    #[test]
    fn sm120_shim_on_another_gpu_fails_cleanly() {
        let dev = match crate::Device::new(0) {
            Ok(d) if d.arch() != crate::Arch::Sm120 => d,
            Ok(_) => return eprintln!("SKIPPED: this is an SM120 device"),
            Err(e) => {
                assert!(std::env::var("BLOCKSCALE_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU: {e}");
                return eprintln!("SKIPPED: no GPU ({e})");
            }
        };
        use cudarc::driver::DevicePtrMut;
        let stream = dev.stream();
        let (m, n, k) = (128usize, 128usize, 256usize);
        let mut a = stream.alloc_zeros::<u8>(m * k / 2).unwrap();
        let mut b = stream.alloc_zeros::<u8>(n * k / 2).unwrap();
        let mut sf = stream.alloc_zeros::<u8>(128 * 16).unwrap();
        let mut d = stream.alloc_zeros::<u16>(m * n).unwrap();
        let mut ws = stream.alloc_zeros::<u8>(1 << 20).unwrap();
        let mut p = args(m as i32, n as i32, k as i32);
        p.a = a.device_ptr_mut(stream).0;
        p.b = b.device_ptr_mut(stream).0;
        p.sfa = sf.device_ptr_mut(stream).0;
        p.sfb = p.sfa;
        p.d = d.device_ptr_mut(stream).0;
        p.workspace = ws.device_ptr_mut(stream).0;
        p.workspace_bytes = 1 << 20;
        p.sm_count = dev.sm_count() as c_int;
        let (shim, _) = shim(Family::Sm120(Sm120Kind::Nvfp4), OutKind::Bf16).unwrap();
        dev.context().bind_to_thread().unwrap();
        let mut cuda = 0 as c_int;
        // SAFETY: every pointer is a live allocation of the size the arguments describe
        // (A, B: 128 x 256 FP4; both scale tensors one 128 x 16 swizzled tile; D 128 x 128
        // bf16; 1 MiB workspace), all on `stream`, which stays alive past the call.
        let status = unsafe { shim(&p, stream.cu_stream() as *mut c_void, std::ptr::null_mut(), &mut cuda) };
        assert_eq!(status, 6, "status {status} ({}), CUDA error {cuda}", status_name(status));
        assert_ne!(cuda, 0, "the CUDA error (no kernel image) is reported");
        stream.synchronize().expect("the device is still usable");
        let back = stream.clone_dtoh(&d).unwrap();
        assert!(back.iter().all(|&v| v == 0), "nothing was written");
    }

    #[test]
    fn sm120_workspace_query_is_small_and_grows_with_nothing_unexpected() {
        for kind in Sm120Kind::ALL {
            let (status, need) = query(kind, &args(4096, 4096, 4096));
            assert_eq!(status, OK, "{kind:?}");
            // The persistent scheduler's workspace is a few bytes per SM at most.
            assert!(need < 1 << 20, "{kind:?}: {need} bytes");
        }
    }
}
