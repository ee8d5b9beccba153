//! E2M1: the 4-bit float of NVFP4 and MXFP4.

use crate::minifloat::{minifloat, minifloat_rz};

minifloat! {
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
    pub struct E2M1: exp 2, man 1, bias 1, signed, None, mask 0x0f
}
minifloat_rz!(E2M1, E2M1);
