//! Output element types of dequantization: f32, f16, bf16.

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Which output type, as a value (for the SIMD kernels).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutKind {
    #[allow(missing_docs)]
    F32,
    #[allow(missing_docs)]
    F16,
    #[allow(missing_docs)]
    Bf16,
}

/// A dequantization output type: f32, f16 or bf16. Values are computed in f32 and
/// then rounded to the output type once (round to nearest even; `half`'s conversions).
pub trait Output: Copy + Default + Send + Sync + 'static + sealed::Sealed {
    /// The type as a value.
    #[doc(hidden)]
    const KIND: OutKind;
    /// Rounds an f32 to this type (nearest even).
    fn from_f32(x: f32) -> Self;
}

impl Output for f32 {
    const KIND: OutKind = OutKind::F32;
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Output for f16 {
    const KIND: OutKind = OutKind::F16;
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Output for bf16 {
    const KIND: OutKind = OutKind::Bf16;
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}
