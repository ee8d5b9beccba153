//! Element formats as data ([`ElementFormat`]) and as types ([`Element`]).

use crate::{E2M1, E2M3, E3M2, E4M3, E5M2, Int4, UE4M3};

/// The element (payload) format of a scheme, as a value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ElementFormat {
    /// 4-bit float, max 6 ([`E2M1`]).
    E2M1,
    /// 6-bit float, max 7.5 ([`E2M3`]).
    E2M3,
    /// 6-bit float, max 28 ([`E3M2`]).
    E3M2,
    /// 8-bit float, max 448 ([`E4M3`]).
    E4M3,
    /// 8-bit float, max 57344 ([`E5M2`]).
    E5M2,
    /// 4-bit integer, -8..=7 ([`Int4`]).
    Int4,
}

/// Evaluates `$e` with `$T` naming the element type of format `$f`: each fact about a
/// format is read from its own type.
#[rustfmt::skip]
macro_rules! with_type {
    ($f:expr, |$T:ident| $e:expr) => {
        match $f {
            ElementFormat::E2M1 => { type $T = E2M1; $e }
            ElementFormat::E2M3 => { type $T = E2M3; $e }
            ElementFormat::E3M2 => { type $T = E3M2; $e }
            ElementFormat::E4M3 => { type $T = E4M3; $e }
            ElementFormat::E5M2 => { type $T = E5M2; $e }
            ElementFormat::Int4 => { type $T = Int4; $e }
        }
    };
}

impl ElementFormat {
    /// Every element format.
    pub const ALL: [Self; 6] = [Self::E2M1, Self::E2M3, Self::E3M2, Self::E4M3, Self::E5M2, Self::Int4];

    /// Storage width in bits.
    pub const fn bits(self) -> u32 {
        with_type!(self, |T| T::BITS)
    }

    /// Largest finite magnitude (for Int4, the largest positive value, 7).
    pub const fn max(self) -> f32 {
        with_type!(self, |T| T::MAX_F32)
    }

    /// `1 / max` rounded to the nearest f32: the constant quantizers multiply a block's
    /// amax by (for E2M1 this is `0.16666666666666666f`, bits `0x3e2aaaab`).
    pub const fn max_recip(self) -> f32 {
        1.0 / self.max()
    }

    /// Exponent of the largest power of two not above [`Self::max`] (the OCP MX
    /// `emax_elem`): 2 for E2M1, E2M3 and Int4, 4 for E3M2, 8 for E4M3, 15 for E5M2.
    pub const fn emax(self) -> i32 {
        // The max is a normal f32: its exponent field, unbiased.
        ((self.max().to_bits() >> 23) & 0xff) as i32 - 127
    }

    /// Mantissa (fraction) bits. For Int4 this is 2: 7 = 1.11b x 2^2.
    pub const fn mantissa_bits(self) -> u32 {
        with_type!(self, |T| T::MANTISSA_BITS)
    }

    /// Lower-case name (`"e2m1"`, ..., `"int4"`).
    pub const fn name(self) -> &'static str {
        with_type!(self, |T| <T as Element>::NAME)
    }

    /// The decoded value of every code, indexed by code (Int4: two's complement).
    pub fn table(self) -> &'static [f32] {
        with_type!(self, |T| &T::TABLE)
    }
}

impl core::fmt::Display for ElementFormat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::E2M1 {}
    impl Sealed for crate::E2M3 {}
    impl Sealed for crate::E3M2 {}
    impl Sealed for crate::E4M3 {}
    impl Sealed for crate::E5M2 {}
    impl Sealed for crate::UE4M3 {}
    impl Sealed for crate::Int4 {}
}

/// An element type with a saturating conversion from f32: the generic face of
/// [`E2M1`], [`E2M3`], [`E3M2`], [`E4M3`], [`E5M2`], [`UE4M3`] and [`Int4`], used by
/// the slice encoders in [`crate::slice`].
pub trait Element: Copy + PartialEq + core::fmt::Debug + sealed::Sealed {
    /// The format's name.
    const NAME: &'static str;
    /// Code width in bits.
    const BITS: u32;
    /// The type's saturating, round-to-nearest-even conversion (`from_f32`).
    fn encode(x: f32) -> Self;
    /// The exact value (`to_f32`).
    fn decode(self) -> f32;
    /// The raw code (`to_bits`; two's complement for Int4).
    fn bits(self) -> u8;
    /// From a raw code (`from_bits`).
    fn with_bits(bits: u8) -> Self;
}

macro_rules! impl_element {
    ($T:ident, $name:literal) => {
        impl Element for $T {
            const NAME: &'static str = $name;
            const BITS: u32 = $T::BITS;
            #[inline(always)]
            fn encode(x: f32) -> Self {
                $T::from_f32(x)
            }
            #[inline(always)]
            fn decode(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn bits(self) -> u8 {
                self.to_bits()
            }
            #[inline(always)]
            fn with_bits(bits: u8) -> Self {
                $T::from_bits(bits)
            }
        }
    };
}

impl_element!(E2M1, "e2m1");
impl_element!(E2M3, "e2m3");
impl_element!(E3M2, "e3m2");
impl_element!(E4M3, "e4m3");
impl_element!(E5M2, "e5m2");
impl_element!(UE4M3, "ue4m3");
impl_element!(Int4, "int4");
