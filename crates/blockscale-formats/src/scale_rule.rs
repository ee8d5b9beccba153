//! Choosing a UE8M0 block scale from a block's amax: the rules users meet.

use crate::{E8M0Rounding, ElementFormat, UE8M0};

/// How an MX block's UE8M0 scale is chosen from the block's amax (largest magnitude)
/// and the element format. Each rule is one formula; `amax` is used by magnitude.
///
/// | rule | scale `2^e` | who uses it |
/// |---|---|---|
/// | [`Rceil`](Self::Rceil) | `amax * RN(1/max)` rounded **up** to a power of two | LightX2V, cuBLAS, TransformerEngine, FlashInfer, OpenAI triton_kernels |
/// | [`Floor`](Self::Floor) | `floor(log2 amax) - emax` | OCP MX v1.0, torchao's default |
/// | [`Ceil`](Self::Ceil) | `ceil(log2 amax) - emax` | torchao |
/// | [`Even`](Self::Even) | `floor(log2 round(amax)) - emax`, amax first rounded to the element's mantissa width | torchao |
///
/// `max` and `emax` are [`ElementFormat::max`] and [`ElementFormat::emax`]; `RN(1/max)`
/// is [`ElementFormat::max_recip`] and the product is one f32 multiply.
///
/// Edge cases (the byte returned):
///
/// | amax | Rceil | Floor | Ceil | Even |
/// |---|---|---|---|---|
/// | 0 | `0x00` (2^-127) | `0x00` | `0x00` | `0x00` |
/// | f32 subnormal | `0x00` | `0x00` | `0x00` | `0x00` |
/// | +Inf | `0xfe` (2^127, satfinite) | `0xff` (NaN) | `0xff` | `0xff` |
/// | NaN | `0xff` | `0xff` | `0xff` | `0xff` |
///
/// Below 2^-127 every rule clamps to `0x00`. Rceil is exactly
/// `__nv_cvt_float_to_e8m0(amax * RN(1/max), __NV_SATFINITE, cudaRoundPosInf)`; the
/// other three reproduce torchao's `to_mx` integer arithmetic on the f32 exponent
/// field, including its one oddity: under `Even`, a finite amax so large that rounding
/// it carries into the f32 infinity exponent gives NaN (`0xff`).
///
/// For 16-bit (f16/bf16) amax values, Rceil's multiply by the rounded reciprocal gives
/// the same byte as an exact division `amax / max` for every input (tested
/// exhaustively), so kernels that divide agree too.
///
/// Rceil never lets the block maximum overflow the element range; Floor may
/// (amax / 2^e can reach just under 2 * 2^emax, e.g. up to 8 for E2M1, which then
/// saturates to 6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum ScaleRule {
    /// `amax / max` rounded up to a power of two (the default).
    #[default]
    Rceil,
    /// OCP MX v1.0: `2^(floor(log2 amax) - emax)`.
    Floor,
    /// `2^(ceil(log2 amax) - emax)`.
    Ceil,
    /// Floor after rounding amax to the element's mantissa width (ties up).
    Even,
}

impl ScaleRule {
    /// Every rule.
    pub const ALL: [Self; 4] = [Self::Rceil, Self::Floor, Self::Ceil, Self::Even];

    /// Lower-case name (`"rceil"`, `"floor"`, `"ceil"`, `"even"`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rceil => "rceil",
            Self::Floor => "floor",
            Self::Ceil => "ceil",
            Self::Even => "even",
        }
    }

    /// The rule with this name, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The block scale for a block whose largest magnitude is `amax`.
    ///
    /// ```
    /// use blockscale_formats::{ElementFormat, ScaleRule};
    /// // amax 7 with E2M1 elements (max 6): REFERENCE.md's worked example.
    /// assert_eq!(ScaleRule::Rceil.select(7.0, ElementFormat::E2M1).to_f32(), 2.0);
    /// assert_eq!(ScaleRule::Floor.select(7.0, ElementFormat::E2M1).to_f32(), 1.0);
    /// assert_eq!(ScaleRule::Even.select(7.0, ElementFormat::E2M1).to_f32(), 2.0);
    /// assert_eq!(ScaleRule::Ceil.select(5.0, ElementFormat::E2M1).to_f32(), 2.0);
    /// ```
    #[inline]
    pub fn select(self, amax: f32, element: ElementFormat) -> UE8M0 {
        UE8M0::from_bits(select_byte(self, amax, element))
    }
}

impl core::fmt::Display for ScaleRule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

/// Branch-light body of [`ScaleRule::select`].
#[inline(always)]
pub(crate) fn select_byte(rule: ScaleRule, amax: f32, element: ElementFormat) -> u8 {
    let bits = amax.to_bits() & 0x7fff_ffff;
    match rule {
        ScaleRule::Rceil => {
            crate::ue8m0::encode_e8m0(f32::from_bits(bits) * element.max_recip(), E8M0Rounding::PosInf, true)
        }
        ScaleRule::Floor => exponent_rule(bits, 0, element),
        ScaleRule::Ceil => exponent_rule(bits, ((bits & 0x7f_ffff) != 0) as i32, element),
        ScaleRule::Even => {
            if bits > 0x7f80_0000 {
                return 0xff;
            }
            let half = 1u32 << (23 - element.mantissa_bits() - 1);
            exponent_rule((bits + half) & 0xff80_0000, 0, element)
        }
    }
}

/// torchao's integer rule: `clamp(E(amax) - 127 + bump - emax, -127, 128) + 127`, with
/// non-finite amax giving NaN.
#[inline(always)]
fn exponent_rule(bits: u32, bump: i32, element: ElementFormat) -> u8 {
    if bits >= 0x7f80_0000 {
        return 0xff;
    }
    let unbiased = (bits >> 23) as i32 - 127 + bump - element.emax();
    (unbiased.clamp(-127, 128) + 127) as u8
}
