//! FP8 per tensor, ModelOpt's FP8 weight recipe, which only the CLI implements: one f32
//! scale `amax / 448` for the whole tensor (amax over every |w|) and each value stored
//! as ModelOpt's export computes it in PyTorch, `(weight / scale).to(float8_e4m3fn)`:
//! the quotient of the weight's value by the f32 scale (a true division), rounded to the
//! weight's own dtype (a bf16 weight divided by a 0-dim f32 tensor gives a bf16 tensor),
//! then to E4M3, to nearest even both times and saturated to ±448 (`w / scale` cannot
//! exceed 448 by more than an f32 rounding, which rounds back to 448). An all-zero tensor
//! gets scale 0 and zero codes, as a zero tile of the library's fp8-block does
//! (ModelOpt's division would give NaN there).

use blockscale_formats::E4M3;
use rayon::prelude::*;

use crate::values::{FloatValues, finite_amax};

/// One tensor quantized to FP8 with one scale.
#[derive(Debug, PartialEq)]
pub struct Fp8Tensor {
    /// E4M3 codes, row-major.
    pub codes: Vec<u8>,
    /// The decode scale (`w ≈ e4m3 * scale`).
    pub scale: f32,
}

/// Where a NaN or infinity was found: (row, column, value), the first in row-major order.
pub type NonFiniteAt = (usize, usize, f32);

/// Quantizes `values`, a row-major matrix of rows of `k` values, in parallel over rows.
///
/// # Errors
/// The first NaN or infinity, which no per-tensor scale can represent.
pub fn quantize(values: &FloatValues<'_>, k: usize) -> Result<Fp8Tensor, NonFiniteAt> {
    match values {
        FloatValues::Bf16(v) => quantize_slice(v, k, |x| x.to_f32(), |q| half::bf16::from_f32(q).to_f32()),
        FloatValues::F16(v) => quantize_slice(v, k, |x| x.to_f32(), |q| half::f16::from_f32(q).to_f32()),
        FloatValues::F32(v) => quantize_slice(v, k, |x| x, |q| q),
    }
}

fn quantize_slice<T: Copy + Sync>(
    v: &[T],
    k: usize,
    f32_of: impl Fn(T) -> f32 + Sync,
    in_own_dtype: impl Fn(f32) -> f32 + Sync,
) -> Result<Fp8Tensor, NonFiniteAt> {
    let k = k.max(1);
    let amax = finite_amax(v, k, &f32_of)?;
    let scale = amax / 448.0;
    let mut codes = vec![0u8; v.len()];
    if scale > 0.0 {
        codes.par_chunks_mut(k).zip(v.par_chunks(k)).for_each(|(out, row)| {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = E4M3::from_f32(in_own_dtype(f32_of(x) / scale)).to_bits();
            }
        });
    }
    Ok(Fp8Tensor { codes, scale })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn the_scale_is_amax_over_448_and_codes_are_w_over_scale() {
        // amax 896: scale 2, so w / scale is 448 (0x7e), -1 (0xb8), 0.5 (0x30), 2^-7 (the
        // subnormal 4 * 2^-9, 0x04), 0 and -0 (0x80: the sign stays).
        let v = [896.0, -2.0, 1.0, 0.015625, 0.0, -0.0];
        let q = quantize(&FloatValues::F32(Cow::Borrowed(&v)), 3).unwrap();
        assert_eq!(q.scale, 2.0);
        assert_eq!(q.codes, [0x7e, 0xb8, 0x30, 0x04, 0x00, 0x80]);
    }

    #[test]
    fn ties_round_to_even_and_nothing_passes_448() {
        // scale 1: 1.0625 is the midpoint of 1 and 1.125 (ties to 1.0, even), 1.1875 of
        // 1.125 and 1.25 (ties to 1.25); 448 stays 448.
        let v = [448.0f32, 1.0625, 1.1875, -448.0];
        let q = quantize(&FloatValues::F32(Cow::Borrowed(&v)), 4).unwrap();
        assert_eq!(q.scale, 1.0);
        assert_eq!(q.codes, [0x7e, 0x38, 0x3a, 0xfe]);
    }

    #[test]
    fn an_all_zero_tensor_has_scale_zero_and_zero_codes() {
        let v = [half::bf16::ZERO; 6];
        let q = quantize(&FloatValues::Bf16(Cow::Borrowed(&v)), 2).unwrap();
        assert_eq!(q, Fp8Tensor { codes: vec![0; 6], scale: 0.0 });
    }

    #[test]
    fn the_first_non_finite_value_is_named_by_row_and_column() {
        let mut v = vec![1.0f32; 12];
        v[7] = f32::INFINITY;
        v[10] = f32::NAN;
        let e = quantize(&FloatValues::F32(Cow::Borrowed(&v)), 4).unwrap_err();
        assert_eq!(e, (1, 3, f32::INFINITY));
    }
}
