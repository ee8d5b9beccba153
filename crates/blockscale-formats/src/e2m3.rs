//! E2M3: the FP6 element of MXFP6 (E2M3 flavour).

use crate::minifloat::{minifloat, minifloat_rz};

minifloat! {
    /// E2M3, a 6-bit float (OCP MX v1.0 "FP6 E2M3").
    ///
    /// Bit layout `s.ee.mmm` in bits 5..0 of the byte (bits 7..6 zero, as `cvt` and the
    /// `kind::f8f6f4` MMA containers hold it): exponent bias 1, max ±7.5, smallest normal
    /// 1.0, smallest subnormal 0.125. No infinity and no NaN.
    ///
    /// Conversion rounds to nearest, ties to even, and saturates: |x| > 7.5 and ±Inf become
    /// ±7.5; NaN becomes +7.5 (code `0x1f`), as NVIDIA's `__nv_cvt_float_to_fp6` does.
    /// Negative values that round to zero keep their sign (code `0x20`). There is no
    /// non-saturating variant (NVIDIA has none).
    ///
    /// - [`E2M3::from_f64`] rounds once from the f64 value (`__nv_cvt_double_to_fp6`),
    ///   with the same saturation and NaN rule.
    /// - [`E2M3::from_f32_rz`] (and `from_f16_rz`, `from_bf16_rz`, `from_f64_rz`) round
    ///   toward zero instead (`cudaRoundZero`): the magnitude is truncated to the next
    ///   code at or below it, |x| >= 7.5 and ±Inf give ±7.5, NaN gives +7.5.
    ///
    /// In memory four codes pack into three bytes; see [`crate::pack`].
    pub struct E2M3: exp 2, man 3, bias 1, signed, None, mask 0x3f
}
minifloat_rz!(E2M3, E2M3);
