//! Slice encoders and decoders: the bulk conversions quantizers are built from.
//!
//! The loops are branch-free so that the compiler vectorises them for the baseline
//! target (SSE2 on x86-64) without `unsafe` or run-time dispatch; each element gives
//! the same code as the scalar conversion it wraps.

use crate::error::{check_len, check_multiple};
use crate::source::Source;
use crate::{E2M1, E8M0Rounding, Element, FormatError, UE8M0};

/// Encodes every element of `src` with `E::from_f32` (round to nearest even,
/// saturating).
///
/// ```
/// use blockscale_formats::{E4M3, slice};
/// let mut out = [E4M3::ZERO; 3];
/// slice::encode(&[1.0f32, 500.0, -0.0], &mut out).unwrap();
/// assert_eq!(out.map(E4M3::to_bits), [0x38, 0x7e, 0x80]);
/// ```
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `dst.len() == src.len()`.
pub fn encode<E: Element, S: Source>(src: &[S], dst: &mut [E]) -> Result<(), FormatError> {
    check_len("encoded output", src.len(), dst.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = E::encode(s.to_f32_exact());
    }
    Ok(())
}

/// Decodes every code of `src` to its exact f32 value.
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `dst.len() == src.len()`.
pub fn decode<E: Element>(src: &[E], dst: &mut [f32]) -> Result<(), FormatError> {
    check_len("decoded output", src.len(), dst.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.decode();
    }
    Ok(())
}

/// Encodes pairs of values to packed E2M1 bytes (even element in the low nibble).
///
/// ```
/// use blockscale_formats::slice;
/// let mut out = [0u8; 2];
/// slice::encode_e2m1_packed(&[1.0f32, -6.0, 0.5, 3.0], &mut out).unwrap();
/// assert_eq!(out, [0xf2, 0x51]);
/// ```
///
/// # Errors
/// [`FormatError::NotMultiple`] for an odd `src.len()`;
/// [`FormatError::LengthMismatch`] unless `dst.len() == src.len() / 2`.
pub fn encode_e2m1_packed<S: Source>(src: &[S], dst: &mut [u8]) -> Result<(), FormatError> {
    check_multiple("E2M1 input length", src.len(), 2, "two FP4 codes share a byte")?;
    check_len("packed E2M1 output", src.len() / 2, dst.len())?;
    for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
        let lo = E2M1::from_f32(pair[0].to_f32_exact()).to_bits();
        let hi = E2M1::from_f32(pair[1].to_f32_exact()).to_bits();
        *d = lo | (hi << 4);
    }
    Ok(())
}

/// Decodes packed E2M1 bytes (low nibble first) to f32.
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `dst.len() == 2 * src.len()`.
pub fn decode_e2m1_packed(src: &[u8], dst: &mut [f32]) -> Result<(), FormatError> {
    check_len("decoded output", src.len() * 2, dst.len())?;
    for (d, &b) in dst.chunks_exact_mut(2).zip(src) {
        d[0] = E2M1::TABLE[(b & 0xf) as usize];
        d[1] = E2M1::TABLE[(b >> 4) as usize];
    }
    Ok(())
}

/// Converts every value to UE8M0 with `rounding` and `satfinite` saturation
/// ([`UE8M0::from_f32`]).
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `dst.len() == src.len()`.
pub fn encode_ue8m0<S: Source>(src: &[S], rounding: E8M0Rounding, dst: &mut [UE8M0]) -> Result<(), FormatError> {
    check_len("encoded output", src.len(), dst.len())?;
    match rounding {
        // Two loops so that the rounding mode is a constant inside each.
        E8M0Rounding::Zero => {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = UE8M0::from_f32(s.to_f32_exact(), E8M0Rounding::Zero);
            }
        }
        E8M0Rounding::PosInf => {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = UE8M0::from_f32(s.to_f32_exact(), E8M0Rounding::PosInf);
            }
        }
    }
    Ok(())
}
