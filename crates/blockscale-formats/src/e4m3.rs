//! E4M3 ("fn"): the FP8 element of MXFP8, DeepSeek-style FP8 blocks and `float8_e4m3fn`.

use crate::minifloat::{minifloat, minifloat_nosat};

minifloat! {
    /// E4M3 in its "fn" flavour (finite, one NaN per sign), as `torch.float8_e4m3fn`, the
    /// OCP FP8 spec and NVIDIA's `__nv_fp8_e4m3` define it.
    ///
    /// Bit layout `s.eeee.mmm`: exponent bias 7, max ±448 (`0x7e`), smallest normal 2^-6
    /// (`0x08`), smallest subnormal 2^-9 (`0x01`). `0x7f` and `0xff` are NaN; there is no
    /// infinity.
    ///
    /// - [`E4M3::from_f32`] (`__NV_SATFINITE`): round to nearest even; values that round
    ///   past 448 and ±Inf become ±448.
    /// - [`E4M3::from_f32_nosat`] (`__NV_NOSAT`): round to nearest even; values that round
    ///   past 448 (|x| > 464; 464 itself ties down to 448) and ±Inf become NaN with the
    ///   input's sign (`0x7f` / `0xff`).
    /// - NaN input becomes `0x7f` in both modes, whatever its sign, as NVIDIA's functions do.
    /// - Negative values that round to zero keep their sign (`0x80`).
    /// - [`E4M3::from_f64`] and [`E4M3::from_f64_nosat`] round once from the f64 value
    ///   (`__nv_cvt_double_to_fp8`) with the same saturation rules. NaN follows NVIDIA's
    ///   double conversion, which differs from its float one: an f64 NaN keeps its sign
    ///   (`0x7f` / `0xff`). (The float conversion makes every NaN positive first.)
    pub struct E4M3: exp 4, man 3, bias 7, signed, NanOnly, mask 0xff
}
minifloat_nosat!(E4M3, E4M3);
