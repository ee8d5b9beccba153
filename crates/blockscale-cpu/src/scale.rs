//! Per-block scale arithmetic, shared by every kernel path: from a block's amax to the
//! stored scale and the factor its elements are multiplied (or divided) by. Scalar
//! code, once per block, so the SIMD and portable paths cannot differ here.

use blockscale_formats::{ElementFormat, ScaleRule, UE4M3, UE8M0};
use half::f16;

use crate::NvFp4Recipe;

/// `RN(1/6)`, bits `0x3e2aaaab`: the constant the NVFP4 recipes multiply amax by.
pub(crate) const C6: f32 = 1.0 / 6.0;

/// `1 / v` (correctly rounded) for every UE4M3 byte; 0 for zero and NaN bytes. On
/// H100, `rcp.approx.ftz.f32` returns exactly these values for all 126 positive finite
/// E4M3 values (REFERENCE.md, measured), which makes the LightX2V recipe reproducible.
pub(crate) static UE4M3_RCP: [f32; 128] = {
    let mut t = [0.0f32; 128];
    let mut i = 1;
    while i < 127 {
        t[i] = 1.0 / UE4M3::from_bits(i as u8).to_f32();
        i += 1;
    }
    t
};

/// What a block's elements are scaled by before encoding. A factor of 0 or NaN means
/// "write zero codes" (a zero scale, or a poisoned block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Mul,
    Div,
}

/// NVFP4: (UE4M3 scale byte, element multiplier) from the block amax (finite, >= 0)
/// and the per-tensor encode scale `g`.
#[inline(always)]
pub(crate) fn nvfp4(amax: f32, g: f32, recipe: NvFp4Recipe) -> (u8, f32) {
    match recipe {
        NvFp4Recipe::LightX2V => {
            let sf = UE4M3::from_f32(g * (amax * C6)).to_bits();
            // sf <= 0x7e (saturating, input finite and >= 0), so the table lookup is in range.
            let mult = if sf != 0 { (g * UE4M3_RCP[sf as usize]).min(f32::MAX) } else { 0.0 };
            (sf, mult)
        }
        NvFp4Recipe::TransformerEngine => {
            if amax == 0.0 {
                return (0, 0.0);
            }
            let sf = UE4M3::from_f32((amax * (g * C6)).min(f32::MAX));
            let mult = (1.0 / (sf.to_f32() * (1.0 / g))).min(f32::MAX);
            (sf.to_bits(), mult)
        }
    }
}

/// MX: (UE8M0 byte, element multiplier `2^-e`, exact). A NaN scale byte (possible
/// only under `Even` for amax near `f32::MAX`) poisons the block.
#[inline(always)]
pub(crate) fn mx(amax: f32, element: ElementFormat, rule: ScaleRule) -> (u8, f32) {
    let s = rule.select(amax, element);
    (s.to_bits(), s.recip_f32())
}

/// FP8 block: (f32 scale `amax / 448`, divisor = the scale).
#[inline]
pub(crate) fn fp8_block(amax: f32) -> (f32, f32) {
    let s = amax / 448.0;
    (s, s)
}

/// INT4-G32: (f16 scale `amax / 7`, rounded to f16 and saturated to f16::MAX, divisor =
/// that scale's f32 value).
#[inline]
pub(crate) fn int4(amax: f32) -> (f16, f32) {
    let s = f16::from_f32(amax / 7.0);
    let s = if s.is_infinite() { f16::MAX } else { s };
    (s, s.to_f32())
}

/// Amax bit patterns at or above this hold a NaN or an infinity.
pub(crate) const NON_FINITE: u32 = 0x7f80_0000;

// The `*_entry` functions take a block's amax bit pattern (see
// `kernels::block_amax_bits`) and return (stored scale, element factor), with the
// poison of `NonFinite::Poison` for non-finite blocks: the format's NaN scale and a NaN
// factor (which makes the encoders write zero codes).

/// NVFP4 block scale, poison `0x7f` (UE4M3 NaN).
#[inline(always)]
pub(crate) fn nvfp4_entry(amax_bits: u32, g: f32, recipe: NvFp4Recipe) -> (u8, f32) {
    if amax_bits >= NON_FINITE { (UE4M3::NAN.to_bits(), f32::NAN) } else { nvfp4(f32::from_bits(amax_bits), g, recipe) }
}

/// MX block scale, poison `0xff` (UE8M0 NaN).
#[inline(always)]
pub(crate) fn mx_entry(amax_bits: u32, element: ElementFormat, rule: ScaleRule) -> (u8, f32) {
    if amax_bits >= NON_FINITE {
        (UE8M0::NAN.to_bits(), f32::NAN)
    } else {
        mx(f32::from_bits(amax_bits), element, rule)
    }
}

/// FP8 block scale, poison f32 NaN.
#[inline(always)]
pub(crate) fn fp8_entry(amax_bits: u32) -> (f32, f32) {
    if amax_bits >= NON_FINITE { (f32::NAN, f32::NAN) } else { fp8_block(f32::from_bits(amax_bits)) }
}

/// INT4-G32 group scale, poison f16 NaN.
#[inline(always)]
pub(crate) fn int4_entry(amax_bits: u32) -> (f16, f32) {
    if amax_bits >= NON_FINITE { (f16::NAN, f32::NAN) } else { int4(f32::from_bits(amax_bits)) }
}

/// Applies a per-block `entry` (one of the `*_entry` functions above) to a row of block
/// amaxes, writing each block's stored scale and element factor.
#[inline(always)]
pub(crate) fn each<S>(amax: &[u32], entries: &mut [S], factors: &mut [f32], entry: impl Fn(u32) -> (S, f32)) {
    for ((&a, e), f) in amax.iter().zip(entries.iter_mut()).zip(factors.iter_mut()) {
        (*e, *f) = entry(a);
    }
}
