//! E2M1: the 4-bit float of NVFP4 and MXFP4.

use crate::minifloat::{Spec, Specials, minifloat_rz, minifloat_type};

/// E2M1, the 4-bit element of NVFP4 and MXFP4 (OCP MX v1.0 "FP4").
///
/// Bit layout `s.ee.m` in the low nibble of the byte: sign bit 3, exponent bits 2..1
/// (bias 1), mantissa bit 0. Values: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; exponent 0 holds
/// the subnormal 0.5. No infinity and no NaN: every one of the 16 codes is a number.
///
/// Conversion ([`E2M1::from_f32`]) rounds to nearest, ties to even, and saturates
/// (`satfinite`): |x| > 6 and ±Inf become ±6. NaN becomes +6 (code `0x7`), as
/// NVIDIA's `__nv_cvt_float_to_fp4` and `cvt.rn.satfinite.e2m1x2.f32` do. Negative
/// values that round to zero keep their sign (code `0x8`). NVIDIA has no
/// non-saturating E2M1 conversion, so neither do we.
///
/// - [`E2M1::from_f64`] rounds once from the f64 value (`__nv_cvt_double_to_fp4`),
///   with the same saturation and NaN rule.
/// - [`E2M1::from_f32_rz`] (and `from_f16_rz`, `from_bf16_rz`, `from_f64_rz`) round
///   toward zero instead (`cudaRoundZero`): the magnitude is truncated to the next
///   code at or below it, |x| >= 6 and ±Inf give ±6, NaN gives +6.
///
/// Two codes pack into a byte with the even-indexed element in the low nibble; see
/// [`crate::pack`].
///
/// ```
/// use blockscale_formats::E2M1;
/// assert_eq!(E2M1::from_f32(2.5).to_f32(), 2.0); // tie -> even mantissa
/// assert_eq!(E2M1::from_f32(2.6).to_f32(), 3.0);
/// assert_eq!(E2M1::from_f32(100.0), E2M1::MAX);
/// assert_eq!(E2M1::from_f32(f32::NAN), E2M1::MAX);
/// assert_eq!(E2M1::from_f32_rz(2.9).to_f32(), 2.0); // toward zero
/// assert_eq!(E2M1::from_f32_rz(-5.9).to_f32(), -4.0);
/// // 1.25 + 2^-40 is above the tie between 1 and 1.5; narrowing it to f32 first
/// // would land on the tie and round to 1.
/// assert_eq!(E2M1::from_f64(1.25 + 2f64.powi(-40)).to_f32(), 1.5);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct E2M1(u8);

pub(crate) struct E2M1Spec;
impl Spec for E2M1Spec {
    const EXP_BITS: u32 = 2;
    const MAN_BITS: u32 = 1;
    const BIAS: i32 = 1;
    const SIGNED: bool = true;
    const SPECIALS: Specials = Specials::None;
}

minifloat_type!(E2M1, E2M1Spec, 0x0f, "E2M1");
minifloat_rz!(E2M1, E2M1Spec);

impl E2M1 {
    /// +0.
    pub const ZERO: Self = Self(0x0);
    /// 1.0.
    pub const ONE: Self = Self(0x2);
    /// Largest finite value, 6.0.
    pub const MAX: Self = Self(0x7);
    /// Most negative value, -6.0.
    pub const MIN: Self = Self(0xf);
    /// Smallest positive normal value, 1.0.
    pub const MIN_POSITIVE: Self = Self(0x2);
    /// Smallest positive subnormal value, 0.5.
    pub const MIN_POSITIVE_SUBNORMAL: Self = Self(0x1);
    /// Largest finite value as f32.
    pub const MAX_F32: f32 = 6.0;
}
