//! How block-scaled matrices map onto safetensors dtypes and shapes: the dtype and shape
//! of a scheme's codes and scales, scale bytes in both directions, and tensor sizes. The
//! native convention and the golden files (`blockscale-golden`) store matrices this way.

use blockscale_formats::{ElementFormat, QuantShape, ScaleData, ScaleFormat, ScaleLayout, Scheme};
use half::f16;
use safetensors::Dtype;

/// The dtype and shape of a scheme's packed codes for a `rows x k` matrix: F4, F6_E2M3,
/// F6_E3M2, F8_E4M3, F8_E5M2 with shape `[rows, k]` (elements), or U8 `[rows, k/2]` for
/// INT4 (offset-8 nibbles, no safetensors dtype exists).
pub fn codes_dtype(scheme: Scheme, rows: usize, k: usize) -> (Dtype, Vec<usize>) {
    match scheme.element() {
        ElementFormat::E2M1 => (Dtype::F4, vec![rows, k]),
        ElementFormat::E2M3 => (Dtype::F6_E2M3, vec![rows, k]),
        ElementFormat::E3M2 => (Dtype::F6_E3M2, vec![rows, k]),
        ElementFormat::E4M3 => (Dtype::F8_E4M3, vec![rows, k]),
        ElementFormat::E5M2 => (Dtype::F8_E5M2, vec![rows, k]),
        ElementFormat::Int4 => (Dtype::U8, vec![rows, k / 2]),
    }
}

/// The dtype of a scheme's scales: UE4M3 as F8_E4M3 (sign bit 0), UE8M0 as F8_E8M0,
/// then F32 and F16.
pub fn scale_dtype(scheme: Scheme) -> Dtype {
    match scheme.scale_format() {
        ScaleFormat::UE4M3 => Dtype::F8_E4M3,
        ScaleFormat::UE8M0 => Dtype::F8_E8M0,
        ScaleFormat::F32 => Dtype::F32,
        ScaleFormat::F16 => Dtype::F16,
    }
}

/// The stored shape of scales: `[scale_rows, scale_cols]` linear, or the padded
/// `[rows', cols']` in swizzled order.
pub fn scale_shape(q_shape: &QuantShape, layout: ScaleLayout) -> Vec<usize> {
    let (r, c) = layout.padded_shape(q_shape.scale_rows, q_shape.scale_cols).unwrap_or((0, 0));
    vec![r, c]
}

/// Scale values as little-endian bytes.
pub fn scale_bytes(s: &ScaleData) -> Vec<u8> {
    match s {
        ScaleData::Bytes(b) => b.clone(),
        ScaleData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ScaleData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Scales of `format` from their little-endian bytes (the inverse of [`scale_bytes`]).
pub fn scales_from(format: ScaleFormat, bytes: &[u8]) -> ScaleData {
    match format {
        ScaleFormat::F32 => {
            ScaleData::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        }
        ScaleFormat::F16 => ScaleData::F16(bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
        _ => ScaleData::Bytes(bytes.to_vec()),
    }
}

/// Parses a scale layout name (`linear`, `swizzled-128x4`).
pub fn parse_layout(s: &str) -> Option<ScaleLayout> {
    ScaleLayout::ALL.into_iter().find(|l| l.name() == s)
}

/// Bytes of a tensor of `dtype` and `shape` (sub-byte dtypes rounded up to whole bytes),
/// `None` on overflow.
pub fn tensor_bytes(dtype: Dtype, shape: &[usize]) -> Option<usize> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    n.checked_mul(dtype.bitsize()).map(|bits| bits.div_ceil(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_bytes_round_trip_in_every_format() {
        for s in [
            ScaleData::F32(vec![1.5, -0.0, f32::MAX]),
            ScaleData::F16(vec![f16::from_f32(0.25), f16::MIN_POSITIVE_SUBNORMAL]),
            ScaleData::Bytes(vec![0, 0x7f, 0xff]),
        ] {
            let format = match &s {
                ScaleData::F32(_) => ScaleFormat::F32,
                ScaleData::F16(_) => ScaleFormat::F16,
                ScaleData::Bytes(_) => ScaleFormat::UE8M0,
            };
            assert_eq!(scales_from(format, &scale_bytes(&s)), s);
        }
    }

    #[test]
    fn sub_byte_tensors_round_up_and_overflow_is_none() {
        assert_eq!(tensor_bytes(Dtype::F4, &[3, 3]), Some(5));
        assert_eq!(tensor_bytes(Dtype::F6_E2M3, &[1, 4]), Some(3));
        assert_eq!(tensor_bytes(Dtype::F32, &[]), Some(4));
        assert_eq!(tensor_bytes(Dtype::U8, &[usize::MAX, 2]), None);
    }
}
