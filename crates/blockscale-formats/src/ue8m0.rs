//! UE8M0 (E8M0): the power-of-two block scale of the MX formats.

use half::{bf16, f16};

use crate::source::bf16_to_f32;

/// UE8M0 (OCP MX "E8M0"), the shared block scale of MXFP4/6/8: eight exponent bits,
/// no sign, no mantissa, bias 127.
///
/// Byte `b` in `0..=254` is exactly `2^(b - 127)`, from 2^-127 (`0x00`, an f32
/// subnormal) to 2^127 (`0xfe`); `0xff` is NaN. There is no zero and no infinity.
///
/// Conversion from a number follows NVIDIA's `__nv_cvt_float_to_e8m0`: the input's
/// *absolute value* is rounded to a power of two in the chosen [`E8M0Rounding`]
/// direction; results below 2^-127 (zero included) clip to 2^-127 (`0x00`); results
/// above 2^127 become 2^127 with [`UE8M0::from_f32`] (`__NV_SATFINITE`) and NaN with
/// [`UE8M0::from_f32_nosat`] (`__NV_NOSAT`); ±Inf does the same as an overflow; NaN
/// becomes `0xff`. Rounding up an f32 subnormal gives 2^-126 (`0x01`) only when the
/// value exceeds 2^-127, since `0x00` already represents 2^-127.
///
/// [`UE8M0::from_f64`] and [`UE8M0::from_f64_nosat`] round the f64's absolute value
/// once, by the same rules (`__nv_cvt_double_to_e8m0`). An f64 can exceed the f32
/// range, which adds one case: rounding toward zero never overflows a finite value
/// (as in IEEE 754), so with [`E8M0Rounding::Zero`] every finite |x| >= 2^127 gives
/// 2^127 (`0xfe`) even without saturation; only ±Inf (and NaN) give `0xff` there.
///
/// To choose a block scale from a block's amax, use [`crate::ScaleRule`].
///
/// ```
/// use blockscale_formats::{E8M0Rounding, UE8M0};
/// assert_eq!(UE8M0::from_f32(1.0, E8M0Rounding::PosInf).to_bits(), 127);
/// assert_eq!(UE8M0::from_f32(1.5, E8M0Rounding::PosInf).to_f32(), 2.0);
/// assert_eq!(UE8M0::from_f32(1.5, E8M0Rounding::Zero).to_f32(), 1.0);
/// assert_eq!(UE8M0::from_f32(0.0, E8M0Rounding::PosInf), UE8M0::MIN);
/// // 2^-10 * (1 + 2^-40) is above 2^-10, but narrowing it to f32 would give 2^-10.
/// let x = 2f64.powi(-10) * (1.0 + 2f64.powi(-40));
/// assert_eq!(UE8M0::from_f64(x, E8M0Rounding::PosInf).exponent(), Some(-9));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct UE8M0(u8);

/// Rounding direction of a conversion to [`UE8M0`], applied to the absolute value.
/// These are the two modes `__nv_cvt_float_to_e8m0` accepts (`cudaRoundZero`,
/// `cudaRoundPosInf`) and that `cvt.{rz,rp}.ue8m0x2` implement.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum E8M0Rounding {
    /// Toward zero: the largest power of two not above |x| (`floor(log2|x|)`).
    Zero,
    /// Toward +Inf: the smallest power of two not below |x| (`ceil(log2|x|)`).
    #[default]
    PosInf,
}

/// The branch-free core of the conversion, shared by the scalar and slice encoders.
#[inline(always)]
pub(crate) fn encode_e8m0(x: f32, rounding: E8M0Rounding, saturate: bool) -> u8 {
    let abs = x.to_bits() & 0x7fff_ffff;
    let exp = abs >> 23;
    let man = abs & 0x7f_ffff;
    let up = match rounding {
        E8M0Rounding::Zero => 0,
        // Byte 0 already is 2^-127 (f32 bits 0x0040_0000): subnormals above it round up.
        E8M0Rounding::PosInf => {
            if exp == 0 {
                (man > 0x40_0000) as u32
            } else {
                (man != 0) as u32
            }
        }
    };
    let byte = exp + up;
    let overflow = if saturate { 0xfe } else { 0xff };
    // exp == 255 is Inf (an overflow) or NaN (always 0xff).
    let byte = if byte >= 255 { overflow } else { byte };
    if abs > 0x7f80_0000 { 0xff } else { byte as u8 }
}

/// The f64 conversion: `__nv_cvt_double_to_e8m0`'s result, computed from the f64's
/// exponent field directly (NVIDIA rounds to an f32 with a sticky bit first, which is
/// the same thing).
#[inline]
const fn encode_e8m0_f64(x: f64, rounding: E8M0Rounding, saturate: bool) -> u8 {
    let abs = x.to_bits() & !(1 << 63);
    let overflow = if saturate { 0xfe } else { 0xff };
    if abs > 0x7ff0_0000_0000_0000 {
        return 0xff;
    }
    if abs == 0x7ff0_0000_0000_0000 {
        return overflow;
    }
    let biased = (abs >> 52) as i32;
    // Zero and the f64 subnormals (below 2^-1022) clip to 2^-127 in either direction.
    if biased == 0 {
        return 0;
    }
    // floor(log2 |x|), and ceil(log2 |x|) unless |x| is a power of two.
    let floor = biased - 1023;
    let exact = abs & ((1 << 52) - 1) == 0;
    let (k, finite_overflow) = match rounding {
        E8M0Rounding::Zero => (floor, 0xfe),
        E8M0Rounding::PosInf => (if exact { floor } else { floor + 1 }, overflow),
    };
    if k < -127 {
        0
    } else if k > 127 {
        finite_overflow
    } else {
        (k + 127) as u8
    }
}

impl UE8M0 {
    /// 2^-127, the smallest scale (byte `0x00`).
    pub const MIN: Self = Self(0x00);
    /// 1.0 (byte `0x7f`).
    pub const ONE: Self = Self(0x7f);
    /// 2^127, the largest scale (byte `0xfe`).
    pub const MAX: Self = Self(0xfe);
    /// NaN (byte `0xff`).
    pub const NAN: Self = Self(0xff);
    /// Exponent bias.
    pub const BIAS: i32 = 127;

    /// Decoded value of every byte, indexed by byte.
    pub const TABLE: [f32; 256] = {
        let mut table = [0.0f32; 256];
        let mut i = 0;
        while i < 256 {
            table[i] = Self(i as u8).to_f32();
            i += 1;
        }
        table
    };

    /// Wraps a raw byte.
    #[inline]
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// The raw byte.
    #[inline]
    pub const fn to_bits(self) -> u8 {
        self.0
    }

    /// The scale `2^exponent`, or `None` if `exponent` is outside `-127..=127`.
    #[inline]
    pub const fn from_exponent(exponent: i32) -> Option<Self> {
        if exponent >= -127 && exponent <= 127 { Some(Self((exponent + 127) as u8)) } else { None }
    }

    /// The unbiased exponent (`byte - 127`), or `None` for NaN.
    #[inline]
    pub const fn exponent(self) -> Option<i32> {
        if self.0 == 0xff { None } else { Some(self.0 as i32 - 127) }
    }

    /// Whether this is the NaN byte `0xff`.
    #[inline]
    pub const fn is_nan(self) -> bool {
        self.0 == 0xff
    }

    /// The exact value `2^(b - 127)` (2^-127 is an f32 subnormal); NaN for `0xff`.
    ///
    /// Branch-free, so that loops over many codes vectorise: the byte is the f32
    /// exponent field, and bytes 0 (giving the subnormal `0x0040_0000`) and 0xff (giving
    /// the quiet NaN `0x7fc0_0000`, `f32::NAN`) also set mantissa bit 22.
    #[inline]
    pub const fn to_f32(self) -> f32 {
        let edge = (self.0.wrapping_add(1) <= 1) as u32;
        f32::from_bits((self.0 as u32) << 23 | edge << 22)
    }

    /// The exact reciprocal `2^(127 - b)`: multiplying by it is exactly dividing by the
    /// scale (both are one correctly rounded operation on the same real number).
    /// NaN for `0xff`.
    #[inline]
    pub const fn recip_f32(self) -> f32 {
        match self.0 {
            0xff => f32::NAN,
            254 => f32::from_bits(0x0040_0000),
            b => f32::from_bits((254 - b as u32) << 23),
        }
    }

    /// The exact value as a bf16 (every scale, 2^-127 included, is a bf16).
    #[inline]
    pub fn to_bf16(self) -> bf16 {
        bf16::from_f32(self.to_f32())
    }

    /// Converts with `__NV_SATFINITE`: overflow and ±Inf give 2^127. See the type docs.
    #[inline]
    pub fn from_f32(x: f32, rounding: E8M0Rounding) -> Self {
        Self(encode_e8m0(x, rounding, true))
    }

    /// Converts with `__NV_NOSAT`: overflow and ±Inf give NaN. See the type docs.
    #[inline]
    pub fn from_f32_nosat(x: f32, rounding: E8M0Rounding) -> Self {
        Self(encode_e8m0(x, rounding, false))
    }

    /// Converts an f64 with `__NV_SATFINITE`, rounding |x| once
    /// (`__nv_cvt_double_to_e8m0`): overflow and ±Inf give 2^127. See the type docs.
    #[inline]
    pub const fn from_f64(x: f64, rounding: E8M0Rounding) -> Self {
        Self(encode_e8m0_f64(x, rounding, true))
    }

    /// Converts an f64 with `__NV_NOSAT`, rounding |x| once: ±Inf gives NaN, and so does
    /// a finite overflow when rounding toward +Inf (toward zero, a finite value gives at
    /// most 2^127). See the type docs.
    #[inline]
    pub const fn from_f64_nosat(x: f64, rounding: E8M0Rounding) -> Self {
        Self(encode_e8m0_f64(x, rounding, false))
    }

    /// [`Self::from_f32`] of the f16's exact value.
    #[inline]
    pub fn from_f16(x: f16, rounding: E8M0Rounding) -> Self {
        Self::from_f32(x.to_f32(), rounding)
    }

    /// [`Self::from_f32_nosat`] of the f16's exact value.
    #[inline]
    pub fn from_f16_nosat(x: f16, rounding: E8M0Rounding) -> Self {
        Self::from_f32_nosat(x.to_f32(), rounding)
    }

    /// [`Self::from_f32`] of the bf16's exact value.
    #[inline]
    pub fn from_bf16(x: bf16, rounding: E8M0Rounding) -> Self {
        Self::from_f32(bf16_to_f32(x), rounding)
    }

    /// [`Self::from_f32_nosat`] of the bf16's exact value.
    #[inline]
    pub fn from_bf16_nosat(x: bf16, rounding: E8M0Rounding) -> Self {
        Self::from_f32_nosat(bf16_to_f32(x), rounding)
    }
}

impl core::fmt::Display for UE8M0 {
    /// `2^e` (or `NaN`), honouring width and alignment.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let Some(e) = self.exponent() else { return f.pad("NaN") };
        // "2^-127" is the longest form: format into a small buffer, then pad.
        let mut buf = [0u8; 8];
        let mut len = 0;
        for b in b"2^".iter().copied().chain((e < 0).then_some(b'-')) {
            buf[len] = b;
            len += 1;
        }
        let digits = e.unsigned_abs();
        for d in [100, 10, 1] {
            if digits >= d || d == 1 {
                buf[len] = b'0' + (digits / d % 10) as u8;
                len += 1;
            }
        }
        f.pad(core::str::from_utf8(&buf[..len]).unwrap_or("?"))
    }
}

impl core::fmt::Debug for UE8M0 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "UE8M0({:#04x} = {})", self.0, self)
    }
}
