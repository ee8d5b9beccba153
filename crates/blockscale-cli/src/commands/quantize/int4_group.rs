//! INT4 in groups of any size along K, which the CLI computes for `--scheme int4-g128`
//! (compressed-tensors' W4A16 preset groups by 128; the library's `int4-g32` groups by
//! 32). The rule is the library's INT4 rule with a longer group: per group of `group`
//! values along a row, the f16 scale `amax / 7` (f32 division, rounded to nearest f16,
//! a result past f16's range saturated to f16::MAX), and each value stored as `q + 8`
//! with `q = round(x / scale)` (f32 division, ties to even, clamped to -8..=7); a group
//! whose scale rounds to 0 stores q = 0. Nibbles are packed two to a byte, the even
//! element in the low nibble: the bytes of pack-quantized's little-endian int32 words.
//!
//! A NaN or infinity is an error naming its row and column, or with `poison` makes its
//! group a NaN block: a NaN f16 scale and q = 0, as the library's `int4-g32` stores it.

use blockscale::Int4;
use half::f16;
use rayon::prelude::*;

use crate::values::FloatValues;

use super::fp8_tensor::NonFiniteAt;

/// One tensor quantized to INT4 groups.
#[derive(Debug, PartialEq)]
pub struct Int4Groups {
    /// Offset-8 nibbles, row-major, two per byte (even element low).
    pub codes: Vec<u8>,
    /// The f16 scales, row-major (`rows x k / group`), as little-endian bytes.
    pub scales: Vec<u8>,
    /// Groups stored as NaN blocks (only with `poison`).
    pub poisoned: usize,
}

/// Quantizes `values`, a row-major matrix of rows of `k` values (`k` a multiple of
/// `group`, `group` even), in parallel over rows.
///
/// # Errors
/// The first NaN or infinity in row-major order, unless `poison`.
pub fn quantize(values: &FloatValues<'_>, k: usize, group: usize, poison: bool) -> Result<Int4Groups, NonFiniteAt> {
    match values {
        FloatValues::Bf16(v) => quantize_slice(v, k, group, poison, |x| x.to_f32()),
        FloatValues::F16(v) => quantize_slice(v, k, group, poison, |x| x.to_f32()),
        FloatValues::F32(v) => quantize_slice(v, k, group, poison, |x| x),
    }
}

/// The f16 scale of a group of amax `amax` (finite).
fn scale_of(amax: f32) -> f16 {
    let s = f16::from_f32(amax / 7.0);
    if s.is_infinite() { f16::MAX } else { s }
}

fn quantize_slice<T: Copy + Sync>(
    v: &[T],
    k: usize,
    group: usize,
    poison: bool,
    f32_of: impl Fn(T) -> f32 + Sync,
) -> Result<Int4Groups, NonFiniteAt> {
    assert!(group >= 2 && group.is_multiple_of(2) && k.is_multiple_of(group), "k {k} and group {group}");
    let k = k.max(group);
    let groups = k / group;
    let rows = v.len() / k;
    let mut codes = vec![0u8; v.len() / 2];
    let mut scales = vec![0u8; rows * groups * 2];
    let per_row: Vec<Result<usize, (usize, f32)>> = codes
        .par_chunks_mut(k / 2)
        .zip(scales.par_chunks_mut(groups * 2))
        .zip(v.par_chunks(k))
        .map(|((out, scales), row)| {
            let mut poisoned = 0;
            for (g, ((out, s), x)) in
                out.chunks_exact_mut(group / 2).zip(scales.chunks_exact_mut(2)).zip(row.chunks_exact(group)).enumerate()
            {
                let mut amax = 0f32;
                for (c, &x) in x.iter().enumerate() {
                    let x = f32_of(x);
                    if !x.is_finite() {
                        if !poison {
                            return Err((g * group + c, x));
                        }
                        amax = f32::NAN;
                        break;
                    }
                    amax = amax.max(x.abs());
                }
                if amax.is_nan() {
                    poisoned += 1;
                    s.copy_from_slice(&f16::NAN.to_le_bytes());
                    out.fill(0x88);
                    continue;
                }
                let scale = scale_of(amax);
                s.copy_from_slice(&scale.to_le_bytes());
                let divisor = scale.to_f32();
                let code = |x: T| {
                    if divisor == 0.0 { 8 } else { Int4::from_f32(f32_of(x) / divisor).to_offset8_bits() }
                };
                for (o, pair) in out.iter_mut().zip(x.chunks_exact(2)) {
                    *o = code(pair[0]) | (code(pair[1]) << 4);
                }
            }
            Ok(poisoned)
        })
        .collect();
    let mut poisoned = 0;
    for (r, row) in per_row.into_iter().enumerate() {
        match row {
            Ok(p) => poisoned += p,
            Err((c, x)) => return Err((r, c, x)),
        }
    }
    Ok(Int4Groups { codes, scales, poisoned })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use blockscale::{NonFinite, QuantizeOptions, Scheme, quantize as library_quantize};
    use ndarray::Array2;

    use super::*;

    fn f32s(v: &[f32]) -> FloatValues<'_> {
        FloatValues::F32(Cow::Borrowed(v))
    }

    fn scales(q: &Int4Groups) -> Vec<f32> {
        q.scales.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
    }

    #[test]
    fn the_scale_is_amax_over_7_and_codes_are_rounded_quotients() {
        // One group of 4: amax 14, scale 2; 14/2 = 7, -3/2 = -1.5 (ties to even: -2),
        // 1/2 = 0.5 (ties to 0), -14/2 = -7. Stored as q + 8: 15, 6, 8, 1.
        let q = quantize(&f32s(&[14.0, -3.0, 1.0, -14.0]), 4, 4, false).unwrap();
        assert_eq!(scales(&q), [2.0]);
        assert_eq!(q.codes, [0x6f, 0x18]);
        // Two groups of 2 in one row, the second all zero: scale 0 and q = 0.
        let q = quantize(&f32s(&[7.0, 2.5, 0.0, -0.0]), 4, 2, false).unwrap();
        assert_eq!(scales(&q), [1.0, 0.0]);
        // 7 -> 15, 2.5 -> 2 (ties to even) -> 10; the zero group's nibbles are 8.
        assert_eq!(q.codes, [0xaf, 0x88]);
    }

    #[test]
    fn the_f16_scale_rounds_and_saturates() {
        // amax 1: 1/7 rounds to the nearest f16, 0x3092 (0.142822..); 0.125 / that is 0.875.. -> 1.
        let q = quantize(&f32s(&[1.0, 0.125]), 2, 2, false).unwrap();
        assert_eq!(q.scales, 0x3092u16.to_le_bytes());
        assert_eq!(q.codes, [0x9f]);
        // amax 1e6: 1e6 / 7 is past f16::MAX (65504), which it saturates to.
        let q = quantize(&f32s(&[1e6, -1e6]), 2, 2, false).unwrap();
        assert_eq!(scales(&q), [65504.0]);
        // 1e6 / 65504 = 15.3 clamps to 7, its negative to -8.
        assert_eq!(q.codes, [0x0f]);
    }

    #[test]
    fn non_finite_values_are_an_error_or_a_nan_group() {
        let v = [1.0, 2.0, 3.0, 4.0, 1.0, f32::NAN, 1.0, 1.0];
        let e = quantize(&f32s(&v), 4, 2, false).unwrap_err();
        assert_eq!((e.0, e.1), (1, 1));
        let q = quantize(&f32s(&v), 4, 2, true).unwrap();
        assert_eq!(q.poisoned, 1);
        assert!(scales(&q)[2].is_nan());
        assert_eq!(q.codes[2], 0x88);
        assert_eq!(scales(&q)[3], f16::from_f32(1.0 / 7.0).to_f32());
    }

    /// With groups of 32 the rule is the library's int4-g32, computed by its own
    /// (SIMD-dispatched) quantizer: the same bytes, NaN groups included.
    #[test]
    fn groups_of_32_are_the_library_int4_g32() {
        let x = Array2::from_shape_fn((24, 256), |(r, c)| {
            let t = (r * 256 + c) as f32;
            match (r, c) {
                (3, 40) => f32::NAN,
                (5, 7) => f32::NEG_INFINITY,
                (7, _) => 0.0,
                (9, _) => 1e-9 * (t.sin()),
                (11, _) => 6.5e4 * t.cos(),
                _ => (t * 0.37).sin() * (1.0 + (r % 5) as f32),
            }
        });
        let options = QuantizeOptions::default().with_non_finite(NonFinite::Poison);
        let values = x.iter().copied().collect::<Vec<_>>();
        for values in [
            f32s(&values),
            FloatValues::Bf16(values.iter().map(|&v| half::bf16::from_f32(v)).collect()),
            FloatValues::F16(values.iter().map(|&v| f16::from_f32(v)).collect()),
        ] {
            // Every bf16 and f16 value is an f32 value: the library quantizes those.
            let y = Array2::from_shape_vec((24, 256), values.to_f32()).unwrap();
            let lib = library_quantize(y.view(), Scheme::Int4G32, &options).unwrap();
            let ours = quantize(&values, 256, 32, true).unwrap();
            assert_eq!(ours.codes, lib.data());
            assert_eq!(ours.scales, blockscale_golden::case::scale_bytes(lib.scales()));
            assert_eq!(ours.poisoned, 2);
        }
    }
}
