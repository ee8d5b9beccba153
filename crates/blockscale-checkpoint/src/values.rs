//! Float tensors as typed slices: the weights a checkpoint holds, borrowed from a
//! memory map when aligned, copied otherwise.

use std::borrow::Cow;

use half::{bf16, f16};

pub use blockscale_formats::FloatValues;

/// Reads little-endian `bytes` of safetensors dtype `dtype`; `None` for a dtype that is
/// not BF16, F16 or F32 or a length that is not a whole number of values. Borrows when
/// the bytes are suitably aligned (always, for a memory-mapped file written by the
/// safetensors libraries), copies otherwise.
pub fn from_le_bytes(dtype: safetensors::Dtype, bytes: &[u8]) -> Option<FloatValues<'_>> {
    use safetensors::Dtype;
    match dtype {
        Dtype::BF16 => cast(bytes, bf16::from_le_bytes).map(FloatValues::Bf16),
        Dtype::F16 => cast(bytes, f16::from_le_bytes).map(FloatValues::F16),
        Dtype::F32 => cast(bytes, f32::from_le_bytes).map(FloatValues::F32),
        _ => None,
    }
}

fn cast<T: bytemuck::Pod, const N: usize>(bytes: &[u8], from_le: fn([u8; N]) -> T) -> Option<Cow<'_, [T]>> {
    if !bytes.len().is_multiple_of(N) {
        return None;
    }
    if cfg!(target_endian = "little")
        && let Ok(v) = bytemuck::try_cast_slice(bytes)
    {
        return Some(Cow::Borrowed(v));
    }
    Some(Cow::Owned(bytes.chunks_exact(N).map(|c| from_le(c.try_into().expect("chunk of N bytes"))).collect()))
}

/// The largest |value| of a row-major matrix of rows of `k` values (0 for none), or the
/// first NaN or infinity in row-major order as `(row, column, value)`; in parallel over
/// rows. The recipes of [`crate::recipe`] start here.
pub fn finite_amax<T: Copy + Sync>(
    v: &[T],
    k: usize,
    f32_of: impl Fn(T) -> f32 + Sync,
) -> Result<f32, (usize, usize, f32)> {
    use rayon::prelude::*;
    let rows: Vec<Result<f32, (usize, f32)>> = v
        .par_chunks(k.max(1))
        .map(|row| {
            let mut amax = 0f32;
            for (c, &x) in row.iter().enumerate() {
                let x = f32_of(x);
                if !x.is_finite() {
                    return Err((c, x));
                }
                amax = amax.max(x.abs());
            }
            Ok(amax)
        })
        .collect();
    let mut amax = 0f32;
    for (r, row) in rows.into_iter().enumerate() {
        match row {
            Ok(a) => amax = amax.max(a),
            Err((c, x)) => return Err((r, c, x)),
        }
    }
    Ok(amax)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_amax_is_the_largest_magnitude_or_the_first_non_finite() {
        assert_eq!(finite_amax(&[1.0f32, -3.0, 2.0, 0.5], 2, |x| x), Ok(3.0));
        assert_eq!(finite_amax::<f32>(&[], 2, |x| x), Ok(0.0));
        let v = [1.0f32, 2.0, 3.0, f32::INFINITY, f32::NAN, 0.0];
        assert_eq!(finite_amax(&v, 3, |x| x), Err((1, 0, f32::INFINITY)));
    }

    #[test]
    fn borrows_aligned_and_copies_unaligned_bytes() {
        let words: Vec<u32> = vec![0x3f80_4000, 0xc000_0000];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        let v = from_le_bytes(safetensors::Dtype::BF16, bytes).unwrap();
        assert!(matches!(&v, FloatValues::Bf16(Cow::Borrowed(_))));
        assert_eq!(v.to_f32(), vec![2.0, 1.0, 0.0, -2.0]);
        let odd = from_le_bytes(safetensors::Dtype::BF16, &bytes[1..7]).unwrap();
        assert!(matches!(&odd, FloatValues::Bf16(Cow::Owned(_))));
        assert_eq!(odd.len(), 3);
        assert!(from_le_bytes(safetensors::Dtype::F32, &bytes[..6]).is_none());
        assert!(from_le_bytes(safetensors::Dtype::U8, bytes).is_none());
    }
}
