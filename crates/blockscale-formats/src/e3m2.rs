//! E3M2: the FP6 element of MXFP6 (E3M2 flavour).

use crate::minifloat::{Spec, Specials, minifloat_rz, minifloat_type};

/// E3M2, a 6-bit float (OCP MX v1.0 "FP6 E3M2").
///
/// Bit layout `s.eee.mm` in bits 5..0 of the byte (bits 7..6 zero): exponent bias 3,
/// max ±28, smallest normal 0.25, smallest subnormal 0.0625. No infinity and no NaN.
///
/// Conversion rounds to nearest, ties to even, and saturates: |x| > 28 and ±Inf become
/// ±28; NaN becomes +28 (code `0x1f`), as NVIDIA's `__nv_cvt_float_to_fp6` does.
/// Negative values that round to zero keep their sign (code `0x20`). There is no
/// non-saturating variant (NVIDIA has none).
///
/// - [`E3M2::from_f64`] rounds once from the f64 value (`__nv_cvt_double_to_fp6`),
///   with the same saturation and NaN rule.
/// - [`E3M2::from_f32_rz`] (and `from_f16_rz`, `from_bf16_rz`, `from_f64_rz`) round
///   toward zero instead (`cudaRoundZero`): the magnitude is truncated to the next
///   code at or below it, |x| >= 28 and ±Inf give ±28, NaN gives +28.
///
/// In memory four codes pack into three bytes; see [`crate::pack`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct E3M2(u8);

pub(crate) struct E3M2Spec;
impl Spec for E3M2Spec {
    const EXP_BITS: u32 = 3;
    const MAN_BITS: u32 = 2;
    const BIAS: i32 = 3;
    const SIGNED: bool = true;
    const SPECIALS: Specials = Specials::None;
}

minifloat_type!(E3M2, E3M2Spec, 0x3f, "E3M2");
minifloat_rz!(E3M2, E3M2Spec);

impl E3M2 {
    /// +0.
    pub const ZERO: Self = Self(0x00);
    /// 1.0.
    pub const ONE: Self = Self(0x0c);
    /// Largest finite value, 28.
    pub const MAX: Self = Self(0x1f);
    /// Most negative value, -28.
    pub const MIN: Self = Self(0x3f);
    /// Smallest positive normal value, 0.25.
    pub const MIN_POSITIVE: Self = Self(0x04);
    /// Smallest positive subnormal value, 0.0625.
    pub const MIN_POSITIVE_SUBNORMAL: Self = Self(0x01);
    /// Largest finite value as f32.
    pub const MAX_F32: f32 = 28.0;
}
