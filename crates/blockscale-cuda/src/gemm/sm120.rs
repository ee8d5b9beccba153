//! What the sm_120a tier multiplies, decided from the schemes alone (no device needed,
//! so the rules are unit-tested on any machine): the kernel for a pair, the multiple of
//! K its 16-byte TMA loads need, and the multiple of N its epilogue needs.

use blockscale_formats::{Fp8Tile, ScaleLayout, Scheme};

use crate::ffi::cutlass::{OutKind, Sm120Kind};
use crate::{Arch, CudaError};

/// What the checks need to know of a quantized operand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    pub scheme: Scheme,
    pub k: usize,
    pub scales: ScaleLayout,
}

/// The error for weight-only products, which the tier has no kernel for.
pub(crate) fn weight_only() -> CudaError {
    CudaError::NoGemmKernel {
        arch: Arch::Sm120,
        what: "weight-only GEMM (activations times quantized weights; quantize the activations to MXFP8 or NVFP4 \
               and call gemm)",
    }
}

/// Every check of an sm_120a GEMM that the operands' metadata decides, in the order a
/// user would fix them: the pair, K, the kernel, the output type, the scale layout, K's
/// alignment. Returns the kernel.
pub(crate) fn check(a: Operand, b: Operand, out: OutKind) -> Result<Sm120Kind, CudaError> {
    let arch = Arch::Sm120;
    a.scheme.pairs_with(b.scheme).map_err(|hint| CudaError::UnsupportedPair { a: a.scheme, b: b.scheme, hint })?;
    if a.k != b.k {
        return Err(CudaError::KMismatch { a: a.k, b: b.k });
    }
    let kind = kind(a.scheme, b.scheme).ok_or(CudaError::NoGemmKernel { arch, what: PAIRS })?;
    if out != OutKind::Bf16 {
        return Err(CudaError::NoGemmKernel { arch, what: "f16 or f32 output (the SM120 kernels write bf16)" });
    }
    let swizzled = |o: Operand| o.scales == ScaleLayout::Swizzled128x4;
    if kind != Sm120Kind::Fp8Block && !(swizzled(a) && swizzled(b)) {
        return Err(CudaError::NoGemmKernel {
            arch,
            what: "Linear scales (the SM120 kernels read Swizzled128x4 scales, what quantize writes by default)",
        });
    }
    let multiple = k_multiple(kind);
    if !b.k.is_multiple_of(multiple) {
        return Err(CudaError::KAlignment { k: b.k, multiple });
    }
    Ok(kind)
}

/// The pairs the sm_120a kernels take, for error messages.
pub(crate) const PAIRS: &str = "pairs other than NVFP4 x NVFP4, MXFP4 x MXFP4, MXFP8 x MXFP8 of one element type, \
                                MXFP8 E4M3 x MXFP6 E2M3 and FP8 block x FP8 block 128x128";

/// The sm_120a kernel for `a` x `b`, or `None` when the tier has none.
pub(crate) fn kind(a: Scheme, b: Scheme) -> Option<Sm120Kind> {
    use Scheme::*;
    Some(match (a, b) {
        (NvFp4, NvFp4) => Sm120Kind::Nvfp4,
        (MxFp4, MxFp4) => Sm120Kind::Mxfp4,
        (MxFp8E4M3, MxFp8E4M3) => Sm120Kind::Mxfp8E4m3,
        (MxFp8E5M2, MxFp8E5M2) => Sm120Kind::Mxfp8E5m2,
        (MxFp8E4M3, MxFp6E2M3) => Sm120Kind::Mxfp8Mxfp6,
        (Fp8Block(_), Fp8Block(Fp8Tile::Tile128x128)) => Sm120Kind::Fp8Block,
        _ => return None,
    })
}

/// The multiple of K the kernel's TMA loads need: rows of 16 bytes (32 FP4, 16 FP8
/// elements), 128 elements for an FP6 operand of the mxf8f6f4 kind (CUTLASS's
/// `get_input_alignment_bits`), 128 for FP8 block (its K tile is one scale block).
pub(crate) const fn k_multiple(kind: Sm120Kind) -> usize {
    match kind {
        Sm120Kind::Nvfp4 | Sm120Kind::Mxfp4 => 32,
        Sm120Kind::Mxfp8E4m3 | Sm120Kind::Mxfp8E5m2 => 16,
        Sm120Kind::Mxfp8Mxfp6 | Sm120Kind::Fp8Block => 128,
    }
}

/// The multiple of N the kernel computes: 8 (16-byte bf16 output rows for the TMA
/// epilogue), 128 for FP8 block (CUTLASS's blockwise kernel needs N to be a multiple of
/// B's scale granularity). Rows of B past N are zero copies in the workspace.
pub(crate) const fn n_multiple(kind: Sm120Kind) -> usize {
    match kind {
        Sm120Kind::Fp8Block => 128,
        _ => 8,
    }
}

/// Bytes of one packed row of `k` elements of `b`'s scheme.
pub(crate) fn row_bytes(kind: Sm120Kind, k: usize) -> usize {
    match kind {
        Sm120Kind::Nvfp4 | Sm120Kind::Mxfp4 => k / 2,
        Sm120Kind::Mxfp8Mxfp6 => k * 3 / 4,
        Sm120Kind::Mxfp8E4m3 | Sm120Kind::Mxfp8E5m2 | Sm120Kind::Fp8Block => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(scheme: Scheme, k: usize) -> Operand {
        let scales = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
            ScaleLayout::Swizzled128x4
        } else {
            ScaleLayout::Linear
        };
        Operand { scheme, k, scales }
    }

    #[test]
    fn the_checks_refuse_with_the_error_a_user_can_act_on() {
        use Scheme::*;
        let bf16 = OutKind::Bf16;
        assert_eq!(check(op(NvFp4, 256), op(NvFp4, 256), bf16).unwrap(), Sm120Kind::Nvfp4);
        assert_eq!(
            check(op(Fp8Block(Fp8Tile::Tile128x128), 256), op(Fp8Block(Fp8Tile::Tile128x128), 256), bf16).unwrap(),
            Sm120Kind::Fp8Block
        );
        assert!(matches!(check(op(NvFp4, 256), op(MxFp4, 256), bf16), Err(CudaError::UnsupportedPair { .. })));
        assert!(matches!(check(op(NvFp4, 256), op(NvFp4, 512), bf16), Err(CudaError::KMismatch { a: 256, b: 512 })));
        // Multiplies on the CPU, but the tier has no kernel for it.
        let err = check(op(MxFp6E2M3, 256), op(MxFp8E4M3, 256), bf16).unwrap_err();
        assert!(matches!(err, CudaError::NoGemmKernel { arch: Arch::Sm120, .. }), "{err}");
        assert!(err.to_string().contains("MXFP8 E4M3 x MXFP6 E2M3"), "{err}");
        for out in [OutKind::F16, OutKind::F32] {
            let err = check(op(NvFp4, 256), op(NvFp4, 256), out).unwrap_err();
            assert!(err.to_string().contains("bf16"), "{err}");
        }
        let mut linear = op(MxFp4, 256);
        linear.scales = ScaleLayout::Linear;
        let err = check(op(MxFp4, 256), linear, bf16).unwrap_err();
        assert!(err.to_string().contains("Swizzled128x4"), "{err}");
        // K a multiple of the block but not of what TMA needs.
        assert!(matches!(
            check(op(NvFp4, 48), op(NvFp4, 48), bf16),
            Err(CudaError::KAlignment { k: 48, multiple: 32 })
        ));
        assert!(matches!(
            check(op(MxFp8E4M3, 224), op(MxFp6E2M3, 224), bf16),
            Err(CudaError::KAlignment { k: 224, multiple: 128 })
        ));
        assert!(weight_only().to_string().contains("weight-only"));
    }

    #[test]
    fn every_pair_that_multiplies_has_a_kernel_or_a_reason() {
        let mut served = 0;
        for a in Scheme::ALL {
            for b in Scheme::ALL {
                let pairs = a.pairs_with(b).is_ok();
                match kind(a, b) {
                    // A kernel only for pairs the CPU multiplies too.
                    Some(_) => {
                        assert!(pairs, "{a:?} x {b:?} has an sm_120a kernel but does not multiply");
                        served += 1;
                    }
                    None => assert!(
                        !pairs || !matches!((a, b), (Scheme::NvFp4, Scheme::NvFp4) | (Scheme::MxFp4, Scheme::MxFp4)),
                        "{a:?} x {b:?}"
                    ),
                }
            }
        }
        // NVFP4, MXFP4, both MXFP8, MXFP8 x MXFP6, FP8 block (two activation tilings).
        assert_eq!(served, 7);
    }

    #[test]
    fn k_and_n_multiples_give_16_byte_rows() {
        for kind in Sm120Kind::ALL {
            assert!(row_bytes(kind, k_multiple(kind)).is_multiple_of(16), "{kind:?}");
            assert!((n_multiple(kind) * 2).is_multiple_of(16), "{kind:?}");
        }
        assert_eq!(row_bytes(Sm120Kind::Mxfp8Mxfp6, 256), 192);
    }
}

#[cfg(test)]
mod shim_tests {
    //! The shims' `can_implement` and workspace queries run on the host: no GPU needed.
    //! These pin the sm_120a rules above, which the Rust side enforces before any launch,
    //! to what CUTLASS itself accepts (the shims: `ffi/cutlass.rs`).

    use std::ffi::c_int;

    use super::*;
    use crate::ffi::cutlass::{BsGemmArgs, CANNOT_IMPLEMENT, Family, OK, Shim, status_name};

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
        let shim = Shim::of(Family::Sm120(kind), OutKind::Bf16).expect("every sm_120a kind writes bf16");
        let (status, need, _) = shim.query(args);
        (status, need)
    }

    #[test]
    fn sm120_shims_accept_what_the_rust_rules_allow() {
        for kind in Sm120Kind::ALL {
            let (k, n) = (4 * k_multiple(kind) as i32, 2 * n_multiple(kind) as i32);
            for m in [1, 33, 128, 4097] {
                let (status, _) = query(kind, &args(m, n, k));
                assert_eq!(status, OK, "{kind:?} M={m} N={n} K={k}");
            }
            // Ragged M is the kernel's business (TMA fills the tile with zeros).
            assert_eq!(query(kind, &args(33, n + n_multiple(kind) as i32, k)).0, OK, "{kind:?}");
        }
    }

    #[test]
    fn sm120_shims_refuse_k_and_n_the_rust_rules_refuse() {
        for kind in Sm120Kind::ALL {
            let (k, n) = (k_multiple(kind) as i32, n_multiple(kind) as i32);
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
        let shim = Shim::of(Family::Sm120(Sm120Kind::Nvfp4), OutKind::Bf16).unwrap();
        // Every pointer is a live allocation of the size the arguments describe (A, B: 128
        // x 256 FP4; both scale tensors one 128 x 16 swizzled tile; D 128 x 128 bf16; 1 MiB
        // workspace), all on `stream`, which stays alive past the call.
        match shim.launch(stream, &p) {
            Err(CudaError::Cutlass { status, cuda, .. }) => {
                assert_eq!(status, status_name(6), "CUDA error {cuda}");
                assert_ne!(cuda, 0, "the CUDA error (no kernel image) is reported");
            }
            other => panic!("expected the no-kernel-image status, got {other:?}"),
        }
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
