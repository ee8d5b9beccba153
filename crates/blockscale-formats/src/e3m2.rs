//! E3M2: the FP6 element of MXFP6 (E3M2 flavour).

use crate::minifloat::{minifloat, minifloat_rz};

minifloat! {
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
    pub struct E3M2: exp 3, man 2, bias 3, signed, None, mask 0x3f
}
minifloat_rz!(E3M2, E3M2);
