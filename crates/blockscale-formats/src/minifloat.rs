//! The one generic codec behind every small floating-point element type.
//!
//! Each element type (E2M1, E2M3, E3M2, E4M3, E5M2, UE4M3) describes itself with a
//! [`Spec`]; [`encode`] and [`decode`] do the work. Encoding rounds to nearest, ties to
//! even, exactly as NVIDIA's conversion functions do (`cuda_fp8.h`, `cuda_fp6.h`,
//! `cuda_fp4.h`), and is branch-free so that slice loops vectorise.

/// Which codes of a format are special.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Specials {
    /// Every code is a finite number (E2M1, E2M3, E3M2).
    None,
    /// "fn" style: the all-ones magnitude is NaN, there is no infinity (E4M3, UE4M3).
    NanOnly,
    /// IEEE style: an all-ones exponent is Inf (mantissa 0) or NaN (E5M2).
    Ieee,
}

/// Parameters of a small binary floating-point format.
pub(crate) trait Spec {
    /// Exponent field width.
    const EXP_BITS: u32;
    /// Mantissa field width.
    const MAN_BITS: u32;
    /// Exponent bias.
    const BIAS: i32;
    /// Whether a sign bit sits above the exponent.
    const SIGNED: bool;
    /// Which codes are special.
    const SPECIALS: Specials;

    /// Width of exponent plus mantissa.
    const MAG_BITS: u32 = Self::EXP_BITS + Self::MAN_BITS;
    /// Magnitude code of the largest finite value.
    const MAX_CODE: u32 = match Self::SPECIALS {
        Specials::None => (1 << Self::MAG_BITS) - 1,
        Specials::NanOnly => (1 << Self::MAG_BITS) - 2,
        Specials::Ieee => (((1 << Self::EXP_BITS) - 2) << Self::MAN_BITS) | ((1 << Self::MAN_BITS) - 1),
    };
    /// Code that NaN inputs produce. NVIDIA's functions return the positive canonical
    /// NaN (all-ones magnitude) where the format has one, and positive MAX otherwise.
    const NAN_CODE: u8 = match Self::SPECIALS {
        Specials::None => Self::MAX_CODE as u8,
        Specials::NanOnly | Specials::Ieee => ((1u32 << Self::MAG_BITS) - 1) as u8,
    };
    /// Magnitude code of a non-saturating overflow: NaN for "fn" formats, Inf for IEEE
    /// ones. Formats without specials only saturate.
    const OVERFLOW_CODE: u32 = match Self::SPECIALS {
        Specials::None => Self::MAX_CODE,
        Specials::NanOnly => (1 << Self::MAG_BITS) - 1,
        Specials::Ieee => ((1 << Self::EXP_BITS) - 1) << Self::MAN_BITS,
    };
}

/// `2^k` as an f32, for the exponents these formats need (`-126 <= k <= 127`).
const fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// Decodes a code to the exact f32 it represents. Bits above the format's width must be
/// zero for signed formats (the element types mask them); for unsigned formats a set bit
/// above the magnitude is an invalid encoding and decodes to NaN.
pub(crate) const fn decode<S: Spec>(code: u8) -> f32 {
    let code = code as u32;
    let mag = code & ((1 << S::MAG_BITS) - 1);
    let high = code >> S::MAG_BITS;
    if !S::SIGNED && high != 0 {
        return f32::NAN;
    }
    let negative = S::SIGNED && (high & 1) == 1;
    let exp = mag >> S::MAN_BITS;
    let man = mag & ((1 << S::MAN_BITS) - 1);
    let exp_all_ones = exp == (1 << S::EXP_BITS) - 1;
    let magnitude = match S::SPECIALS {
        Specials::NanOnly if mag == (1 << S::MAG_BITS) - 1 => f32::NAN,
        Specials::Ieee if exp_all_ones && man != 0 => f32::NAN,
        Specials::Ieee if exp_all_ones => f32::INFINITY,
        _ if exp == 0 => man as f32 * pow2(1 - S::BIAS - S::MAN_BITS as i32),
        _ => f32::from_bits((((exp as i32 - S::BIAS + 127) as u32) << 23) | (man << (23 - S::MAN_BITS))),
    };
    if negative { -magnitude } else { magnitude }
}

/// Rounds a non-NaN f32 magnitude (`bits & 0x7fff_ffff`) to the format's magnitude
/// code, nearest even, without range checks: the result may exceed `MAX_CODE`.
#[inline(always)]
fn round_magnitude<S: Spec>(abs: u32) -> u32 {
    let shift = 23 - S::MAN_BITS;
    // Normal range of the target: round the f32 mantissa to MAN_BITS (ties to even)
    // in the integer domain, then re-bias the exponent.
    let rounded = abs + ((1 << (shift - 1)) - 1) + ((abs >> shift) & 1);
    let normal = (rounded >> shift).wrapping_sub(((127 - S::BIAS) as u32) << S::MAN_BITS);
    // Subnormal range: adding 2^(24 - bias - man), whose ulp is the format's smallest
    // subnormal, makes the FPU round |x| to a multiple of it (ties to even); the low bits
    // of the sum are then the code. A result of 2^MAN_BITS is the smallest normal code,
    // so rounding up across the boundary needs no special case. Flush-to-zero or
    // denormals-are-zero modes cannot change the result: every f32 subnormal rounds to 0.
    let magic = pow2(24 - S::BIAS - S::MAN_BITS as i32);
    let sub = (f32::from_bits(abs) + magic).to_bits().wrapping_sub(magic.to_bits());
    let min_normal = ((127 + 1 - S::BIAS) as u32) << 23;
    if abs < min_normal { sub } else { normal }
}

/// Encodes an f32 with round-to-nearest-even. `saturate` selects NVIDIA's
/// `__NV_SATFINITE` (overflow and infinities become ±MAX) over `__NV_NOSAT` (overflow
/// becomes NaN or ±Inf, whichever the format has). NaN becomes [`Spec::NAN_CODE`].
/// Unsigned formats encode negative numbers (and -0) as +0.
#[inline(always)]
pub(crate) fn encode<S: Spec>(x: f32, saturate: bool) -> u8 {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff;
    let negative = bits >> 31 == 1;
    let mag = round_magnitude::<S>(abs);
    let overflow = if saturate { S::MAX_CODE } else { S::OVERFLOW_CODE };
    let mag = if mag > S::MAX_CODE { overflow } else { mag };
    let code = if S::SIGNED {
        mag | ((negative as u32) << S::MAG_BITS)
    } else if negative {
        0
    } else {
        mag
    };
    if abs > 0x7f80_0000 { S::NAN_CODE } else { code as u8 }
}

/// Bits of an f64's fraction field.
const F64_FRAC: u64 = (1 << 52) - 1;
/// Bits of +Inf as an f64 (the largest non-NaN magnitude).
const F64_INF: u64 = 0x7ff0_0000_0000_0000;

/// Rounds a non-NaN f64 magnitude (`bits & !(1 << 63)`) once to the format's magnitude
/// code, to nearest even or (`toward_zero`) by truncation, without range checks: the
/// result may exceed `MAX_CODE` (+Inf gives a code far above it).
///
/// Integer arithmetic only, so the result does not depend on the FPU's rounding mode.
/// The f32 encoder above keeps its own (vectorisable) form; this one serves the f64
/// inputs and every round-toward-zero conversion (an f32, f16 or bf16 widens to f64
/// exactly, as NVIDIA's host functions widen it).
const fn round_magnitude_f64<S: Spec>(abs: u64, toward_zero: bool) -> u64 {
    let biased = (abs >> 52) as i32;
    // Biased f64 exponent of the format's smallest normal value, 2^(1 - bias).
    let min_normal = 1023 + 1 - S::BIAS;
    if biased >= min_normal {
        // Normal range of the target: keep MAN_BITS of the f64 fraction, rounding the
        // rest away (nearest even, or dropping it), then re-bias the exponent. A carry
        // out of the fraction moves to the next binade, as it should.
        let shift = 52 - S::MAN_BITS;
        let kept = if toward_zero { abs } else { abs + (1 << (shift - 1)) - 1 + ((abs >> shift) & 1) };
        (kept >> shift) - (((1023 - S::BIAS) as u64) << S::MAN_BITS)
    } else {
        // Subnormal range of the target: the code counts multiples of its smallest
        // subnormal 2^(1 - bias - man). |x| = sig * 2^(e - 1075) (e = 1 for f64
        // subnormals), so the code is sig / 2^s, rounded, with s >= 53 - MAN_BITS.
        // Shifting by at most 63 keeps the arithmetic in range and still gives 0 for
        // everything below half the smallest subnormal. A result of 2^MAN_BITS is the
        // smallest normal code.
        let sig = (abs & F64_FRAC) | (((biased != 0) as u64) << 52);
        let e = if biased == 0 { 1 } else { biased };
        let s = 1075 + 1 - S::BIAS - S::MAN_BITS as i32 - e;
        let s = if s > 63 { 63 } else { s as u32 };
        if toward_zero { sig >> s } else { (sig + (1 << (s - 1)) - 1 + ((sig >> s) & 1)) >> s }
    }
}

/// The code an f64 NaN becomes, as NVIDIA's double conversions give it: formats
/// without NaN give +MAX (`__nv_cvt_double_to_fp4/fp6`); `__nv_cvt_double_to_fp8`
/// keeps the NaN's sign, and for E5M2 also the top two bits of its payload with the
/// quiet bit set (`0x7e | payload`, so `0x7e` or `0x7f`). Unsigned formats (UE4M3,
/// no NVIDIA conversion) give their positive NaN, as from f32.
const fn nan_code_f64<S: Spec>(bits: u64) -> u8 {
    let sign = ((bits >> 63) as u8) << S::MAG_BITS;
    match S::SPECIALS {
        Specials::None => S::NAN_CODE,
        _ if !S::SIGNED => S::NAN_CODE,
        Specials::NanOnly => S::NAN_CODE | sign,
        Specials::Ieee => {
            let quiet = 1 << (S::MAN_BITS - 1);
            let payload = (bits >> (52 - S::MAN_BITS)) as u32 & ((1 << S::MAN_BITS) - 1);
            (S::OVERFLOW_CODE | quiet | payload) as u8 | sign
        }
    }
}

/// Encodes an f64 with one rounding from its exact value: to nearest even, or toward
/// zero (`toward_zero`, NVIDIA's `cudaRoundZero`). `saturate` as in [`encode`]
/// (overflow and infinities become ±MAX, else the format's overflow code); NaN as
/// [`nan_code_f64`]. Unsigned formats encode negative numbers (and -0) as +0.
pub(crate) const fn encode_f64<S: Spec>(x: f64, saturate: bool, toward_zero: bool) -> u8 {
    let bits = x.to_bits();
    let abs = bits & !(1 << 63);
    if abs > F64_INF {
        return nan_code_f64::<S>(bits);
    }
    let negative = bits >> 63 == 1;
    let mag = round_magnitude_f64::<S>(abs, toward_zero);
    let overflow = if saturate { S::MAX_CODE } else { S::OVERFLOW_CODE };
    let mag = if mag > S::MAX_CODE as u64 { overflow } else { mag as u32 };
    let code = if S::SIGNED {
        mag | ((negative as u32) << S::MAG_BITS)
    } else if negative {
        0
    } else {
        mag
    };
    code as u8
}

/// Implements the methods every minifloat element type shares. The type must be a
/// `#[repr(transparent)]` tuple struct over `u8`.
macro_rules! minifloat_type {
    ($T:ident, $spec:ty, $mask:expr, $name:expr) => {
        impl $T {
            /// Code width in bits.
            pub const BITS: u32 = ($mask as u8).count_ones();
            /// Mantissa (fraction) bits.
            pub const MANTISSA_BITS: u32 = <$spec as $crate::minifloat::Spec>::MAN_BITS;
            /// Number of distinct codes (`2^bits`).
            pub const CODES: usize = 1 << Self::BITS;

            /// Decoded value of every code, indexed by code.
            pub const TABLE: [f32; Self::CODES] = {
                let mut table = [0.0f32; Self::CODES];
                let mut i = 0;
                while i < Self::CODES {
                    table[i] = $crate::minifloat::decode::<$spec>(i as u8);
                    i += 1;
                }
                table
            };

            /// Wraps raw bits. Bits outside the format's width are cleared.
            #[inline]
            pub const fn from_bits(bits: u8) -> Self {
                Self(bits & $mask)
            }

            /// The raw bits (the format's width, in the low bits of the byte).
            #[inline]
            pub const fn to_bits(self) -> u8 {
                self.0
            }

            /// The exact value of this code as an f32.
            #[inline]
            pub const fn to_f32(self) -> f32 {
                Self::TABLE[self.0 as usize]
            }

            /// The exact value of this code as an f16 (every code is representable).
            #[inline]
            pub fn to_f16(self) -> half::f16 {
                half::f16::from_f32(self.to_f32())
            }

            /// The exact value of this code as a bf16 (every code is representable).
            #[inline]
            pub fn to_bf16(self) -> half::bf16 {
                half::bf16::from_f32(self.to_f32())
            }

            /// Whether this code is a NaN.
            #[inline]
            pub const fn is_nan(self) -> bool {
                self.to_f32().is_nan()
            }

            /// Converts an f32 with round-to-nearest-even and `satfinite` saturation:
            /// out-of-range values and infinities become ±MAX. This is NVIDIA's default
            /// (`__NV_SATFINITE`, `cvt.rn.satfinite`). See the type's documentation for NaN.
            #[inline]
            pub fn from_f32(x: f32) -> Self {
                Self($crate::minifloat::encode::<$spec>(x, true))
            }

            /// Converts an f16 exactly as [`Self::from_f32`] converts its (exact) f32 value.
            #[inline]
            pub fn from_f16(x: half::f16) -> Self {
                Self::from_f32(x.to_f32())
            }

            /// Converts a bf16 exactly as [`Self::from_f32`] converts its (exact) f32 value.
            #[inline]
            pub fn from_bf16(x: half::bf16) -> Self {
                Self::from_f32($crate::source::bf16_to_f32(x))
            }

            /// Converts an f64 with round-to-nearest-even and `satfinite` saturation,
            /// rounding once from the f64 value (`__nv_cvt_double_to_*`).
            /// `Self::from_f32(x as f32)` would round twice and can differ near a
            /// rounding midpoint. See the type's documentation for NaN.
            #[inline]
            pub const fn from_f64(x: f64) -> Self {
                Self($crate::minifloat::encode_f64::<$spec>(x, true, false))
            }
        }

        impl core::fmt::Display for $T {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(&self.to_f32(), f)
            }
        }

        impl core::fmt::Debug for $T {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!($name, "({:#04x} = {})"), self.0, self.to_f32())
            }
        }
    };
}
pub(crate) use minifloat_type;

/// Declares a minifloat element type from its facts: the doc comment, the field widths,
/// the exponent bias, signedness, which codes are special, and the mask of the code bits.
/// Generates the type, its [`Spec`], the shared methods ([`minifloat_type`]) and the
/// constants, each derived from the facts (the format's tests check them against the
/// codes the specs list).
macro_rules! minifloat {
    (
        $(#[$meta:meta])*
        pub struct $T:ident: exp $e:literal, man $m:literal, bias $b:literal, $sign:ident, $specials:ident, mask $mask:literal
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $T(u8);

        impl $crate::minifloat::Spec for $T {
            const EXP_BITS: u32 = $e;
            const MAN_BITS: u32 = $m;
            const BIAS: i32 = $b;
            const SIGNED: bool = $crate::minifloat::minifloat!(@signed $sign);
            const SPECIALS: $crate::minifloat::Specials = $crate::minifloat::Specials::$specials;
        }

        $crate::minifloat::minifloat_type!($T, $T, $mask, stringify!($T));

        impl $T {
            /// +0.
            pub const ZERO: Self = Self(0);
            /// 1.0 (the biased exponent of 2^0, a zero mantissa).
            pub const ONE: Self = Self((<$T as $crate::minifloat::Spec>::BIAS as u8) << $m);
            /// Largest finite value.
            pub const MAX: Self = Self(<$T as $crate::minifloat::Spec>::MAX_CODE as u8);
            /// Smallest positive normal value.
            pub const MIN_POSITIVE: Self = Self(1 << $m);
            /// Smallest positive subnormal value.
            pub const MIN_POSITIVE_SUBNORMAL: Self = Self(1);
            /// Largest finite value as f32.
            pub const MAX_F32: f32 = $crate::minifloat::decode::<$T>(Self::MAX.0);
            $crate::minifloat::minifloat!(@sign $sign);
            $crate::minifloat::minifloat!(@specials $specials);
        }
    };
    (@signed signed) => { true };
    (@signed unsigned) => { false };
    (@sign signed) => {
        /// Most negative finite value.
        pub const MIN: Self = Self(Self::MAX.0 | (1 << <Self as $crate::minifloat::Spec>::MAG_BITS));
    };
    (@sign unsigned) => {};
    (@specials None) => {};
    (@specials NanOnly) => {
        /// The NaN that conversions produce.
        pub const NAN: Self = Self(<Self as $crate::minifloat::Spec>::NAN_CODE);
    };
    (@specials Ieee) => {
        /// The NaN that conversions produce.
        pub const NAN: Self = Self(<Self as $crate::minifloat::Spec>::NAN_CODE);
        /// +Inf.
        pub const INFINITY: Self = Self(<Self as $crate::minifloat::Spec>::OVERFLOW_CODE as u8);
        /// -Inf.
        pub const NEG_INFINITY: Self = Self(Self::INFINITY.0 | (1 << <Self as $crate::minifloat::Spec>::MAG_BITS));
    };
}
pub(crate) use minifloat;

/// Adds the non-saturating constructors NVIDIA offers for formats with NaN or Inf.
macro_rules! minifloat_nosat {
    ($T:ident, $spec:ty) => {
        impl $T {
            /// Converts an f32 with round-to-nearest-even and no saturation
            /// (`__NV_NOSAT`): values that round past MAX, and infinities, become the
            /// format's overflow code (see the type's documentation).
            #[inline]
            pub fn from_f32_nosat(x: f32) -> Self {
                Self($crate::minifloat::encode::<$spec>(x, false))
            }

            /// [`Self::from_f32_nosat`] of the f16's exact value.
            #[inline]
            pub fn from_f16_nosat(x: half::f16) -> Self {
                Self::from_f32_nosat(x.to_f32())
            }

            /// [`Self::from_f32_nosat`] of the bf16's exact value.
            #[inline]
            pub fn from_bf16_nosat(x: half::bf16) -> Self {
                Self::from_f32_nosat($crate::source::bf16_to_f32(x))
            }

            /// Converts an f64 with round-to-nearest-even and no saturation
            /// (`__nv_cvt_double_to_fp8(x, __NV_NOSAT, ..)`), rounding once from the f64
            /// value. See the type's documentation for overflow and NaN.
            #[inline]
            pub const fn from_f64_nosat(x: f64) -> Self {
                Self($crate::minifloat::encode_f64::<$spec>(x, false, false))
            }
        }
    };
}
pub(crate) use minifloat_nosat;

/// Adds the round-toward-zero constructors NVIDIA offers for FP4 and FP6
/// (`cudaRoundZero`), all saturating: these formats have no Inf or NaN.
macro_rules! minifloat_rz {
    ($T:ident, $spec:ty) => {
        impl $T {
            /// Converts an f32 rounding toward zero (truncating the magnitude) with
            /// `satfinite` saturation: NVIDIA's `cudaRoundZero` mode. Out-of-range values
            /// and infinities become ±MAX; NaN becomes +MAX.
            #[inline]
            pub const fn from_f32_rz(x: f32) -> Self {
                // f32 -> f64 is exact, as in NVIDIA's host function.
                Self::from_f64_rz(x as f64)
            }

            /// [`Self::from_f32_rz`] of the f16's exact value.
            #[inline]
            pub fn from_f16_rz(x: half::f16) -> Self {
                Self::from_f32_rz(x.to_f32())
            }

            /// [`Self::from_f32_rz`] of the bf16's exact value.
            #[inline]
            pub fn from_bf16_rz(x: half::bf16) -> Self {
                Self::from_f32_rz($crate::source::bf16_to_f32(x))
            }

            /// Converts an f64 rounding toward zero once from its value, with `satfinite`
            /// saturation (`cudaRoundZero`); as [`Self::from_f32_rz`] otherwise.
            #[inline]
            pub const fn from_f64_rz(x: f64) -> Self {
                Self($crate::minifloat::encode_f64::<$spec>(x, true, true))
            }
        }
    };
}
pub(crate) use minifloat_rz;
