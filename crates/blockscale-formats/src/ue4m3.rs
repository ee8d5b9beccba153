//! UE4M3: E4M3 used as an unsigned scale (the NVFP4 block scale).

use crate::minifloat::{Spec, Specials, minifloat_type};

/// UE4M3, the NVFP4 block-scale format: E4M3 with the sign bit fixed at zero, as the
/// SM100/SM120 block-scaled MMAs read it (`.ue4m3`).
///
/// Bit layout `0.eeee.mmm`: bias 7, max 448 (`0x7e`), smallest normal 2^-6, smallest
/// subnormal 2^-9, `0x7f` is NaN. A byte with the top bit set is not a valid UE4M3
/// encoding and decodes to NaN, so a corrupted scale shows up rather than hiding.
///
/// [`UE4M3::from_f32`] is E4M3's `satfinite` conversion for non-negative inputs (round
/// to nearest even, values past 448 and +Inf become 448); negative inputs, -0
/// included, become +0, the bottom of the unsigned range; NaN becomes `0x7f`. For
/// x >= 0 the byte equals `E4M3::from_f32(x)`, which is how NVFP4 quantizers compute it.
///
/// [`UE4M3::from_f64`] rounds once from the f64 value by the same rules (any NaN gives
/// `0x7f`); for non-NaN x >= 0 it equals `E4M3::from_f64(x)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct UE4M3(u8);

pub(crate) struct UE4M3Spec;
impl Spec for UE4M3Spec {
    const EXP_BITS: u32 = 4;
    const MAN_BITS: u32 = 3;
    const BIAS: i32 = 7;
    const SIGNED: bool = false;
    const SPECIALS: Specials = Specials::NanOnly;
}

minifloat_type!(UE4M3, UE4M3Spec, 0xff, "UE4M3");

impl UE4M3 {
    /// 0.
    pub const ZERO: Self = Self(0x00);
    /// 1.0.
    pub const ONE: Self = Self(0x38);
    /// Largest finite value, 448.
    pub const MAX: Self = Self(0x7e);
    /// Smallest positive normal value, 2^-6.
    pub const MIN_POSITIVE: Self = Self(0x08);
    /// Smallest positive subnormal value, 2^-9.
    pub const MIN_POSITIVE_SUBNORMAL: Self = Self(0x01);
    /// The NaN that conversions produce.
    pub const NAN: Self = Self(0x7f);
    /// Largest finite value as f32.
    pub const MAX_F32: f32 = 448.0;
}
