//! UE4M3: E4M3 used as an unsigned scale (the NVFP4 block scale).

use crate::minifloat::minifloat;

minifloat! {
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
    pub struct UE4M3: exp 4, man 3, bias 7, unsigned, NanOnly, mask 0xff
}
