//! E5M2: the IEEE-style FP8 element (`float8_e5m2`).

use crate::minifloat::{minifloat, minifloat_nosat};

minifloat! {
    /// E5M2, the IEEE-like FP8 format (`torch.float8_e5m2`, NVIDIA's `__nv_fp8_e5m2`).
    ///
    /// Bit layout `s.eeeee.mm`: exponent bias 15, max ±57344 (`0x7b`), smallest normal
    /// 2^-14 (`0x04`), smallest subnormal 2^-16 (`0x01`). Exponent all ones is ±Inf
    /// (`0x7c` / `0xfc`) with a zero mantissa and NaN otherwise.
    ///
    /// - [`E5M2::from_f32`] (`__NV_SATFINITE`): round to nearest even; values that round
    ///   past 57344 and ±Inf become ±57344.
    /// - [`E5M2::from_f32_nosat`] (`__NV_NOSAT`): IEEE behaviour: values that round past
    ///   57344 (|x| >= 61440) and ±Inf become ±Inf.
    /// - NaN input becomes `0x7f` in both modes, whatever its sign, as NVIDIA's functions do.
    /// - Negative values that round to zero keep their sign (`0x80`).
    /// - [`E5M2::from_f64`] and [`E5M2::from_f64_nosat`] round once from the f64 value
    ///   (`__nv_cvt_double_to_fp8`) with the same saturation rules. NaN follows NVIDIA's
    ///   double conversion, which differs from its float one: an f64 NaN keeps its sign
    ///   and the top two bits of its fraction with the quiet bit forced on, so it becomes
    ///   `0x7e | b` (`0xfe | b` if negative) where `b` is bit 50 of the f64, the
    ///   fraction's second bit; `f64::NAN` gives `0x7e`. (The float conversion makes every
    ///   NaN `0x7fff_ffff` first, hence `0x7f` from f32.)
    pub struct E5M2: exp 5, man 2, bias 15, signed, Ieee, mask 0xff
}
minifloat_nosat!(E5M2, E5M2);
