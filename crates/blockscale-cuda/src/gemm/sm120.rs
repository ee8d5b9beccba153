//! What the sm_120a tier multiplies, decided from the schemes alone (no device needed,
//! so the rules are unit-tested on any machine): the kernel for a pair, the multiple of
//! K its 16-byte TMA loads need, and the multiple of N its epilogue needs.

use blockscale_formats::{Fp8Tile, ScaleLayout, Scheme};

use super::cutlass::{OutKind, Sm120Kind};
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
