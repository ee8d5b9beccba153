//! Input element types the encoders accept: f32, f16 and bf16.

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

/// A high-precision input type: f32, f16 or bf16. Every value widens to f32 exactly,
/// so an encoder gives the same code whichever of the three a value arrives in.
pub trait Source: Copy + sealed::Sealed {
    /// The exact f32 value.
    fn to_f32_exact(self) -> f32;
}

impl Source for f32 {
    #[inline(always)]
    fn to_f32_exact(self) -> f32 {
        self
    }
}

impl Source for f16 {
    #[inline(always)]
    fn to_f32_exact(self) -> f32 {
        self.to_f32()
    }
}

impl Source for bf16 {
    #[inline(always)]
    fn to_f32_exact(self) -> f32 {
        bf16_to_f32(self)
    }
}
