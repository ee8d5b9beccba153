//! The high-precision element types: f32, f16 and bf16. [`Source`] is the one trait over
//! them (sealed); the backends extend it only with what they add (the CPU's SIMD loads,
//! the CUDA kernels' device representation).

use half::{bf16, f16};

/// The exact f32 value of a bf16 (a bf16 is the top half of an f32).
#[inline(always)]
pub(crate) const fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits((x.to_bits() as u32) << 16)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Which of the three high-precision types, as a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatKind {
    /// `f32`.
    F32,
    /// [`half::f16`].
    F16,
    /// [`half::bf16`].
    Bf16,
}

impl FloatKind {
    /// The type's name as the kernels and file formats spell it: `f32`, `f16`, `bf16`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }

    /// Bytes per value.
    pub const fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }
}

/// A high-precision element type: f32, f16 or bf16 (sealed). Every value widens to f32
/// exactly, so an encoder gives the same code whichever of the three a value arrives in;
/// results computed in f32 are rounded to the type once, to nearest even.
///
/// ```
/// use blockscale_formats::{FloatKind, Source};
/// use half::bf16;
/// assert_eq!(<bf16 as Source>::KIND, FloatKind::Bf16);
/// assert_eq!(<bf16 as Source>::from_f32(1.0 + 2f32.powi(-9)).to_f32_exact(), 1.0); // tie -> even
/// ```
pub trait Source: Copy + Default + PartialEq + core::fmt::Debug + Send + Sync + 'static + sealed::Sealed {
    /// The type as a value.
    const KIND: FloatKind;
    /// The exact f32 value.
    fn to_f32_exact(self) -> f32;
    /// Rounds an f32 to this type (nearest even; `half`'s conversions).
    fn from_f32(x: f32) -> Self;
}

macro_rules! source_type {
    ($($T:ty: $kind:ident, |$x:ident| $widen:expr, $narrow:path;)*) => {$(
        impl Source for $T {
            const KIND: FloatKind = FloatKind::$kind;
            #[inline(always)]
            fn to_f32_exact(self) -> f32 {
                let $x = self;
                $widen
            }
            #[inline(always)]
            fn from_f32(x: f32) -> Self {
                $narrow(x)
            }
        }
    )*};
}

source_type! {
    f32: F32, |x| x, core::convert::identity;
    f16: F16, |x| x.to_f32(), f16::from_f32;
    bf16: Bf16, |x| bf16_to_f32(x), bf16::from_f32;
}
