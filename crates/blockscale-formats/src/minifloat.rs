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

/// Implements the methods every minifloat element type shares. The type must be a
/// `#[repr(transparent)]` tuple struct over `u8`.
macro_rules! minifloat_type {
    ($T:ident, $spec:ty, $mask:expr, $name:literal) => {
        impl $T {
            /// Number of distinct codes (`2^bits`).
            pub const CODES: usize = 1 << ($mask as u8).count_ones();

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
        }
    };
}
pub(crate) use minifloat_nosat;
