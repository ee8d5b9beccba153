//! `quantize --recipe modelopt`: NVFP4 with NVIDIA ModelOpt's scale choices, so that the
//! bytes are the ones ModelOpt's own quantizer (`NVFP4QTensor.quantize`, nvidia-modelopt
//! 0.47) writes for the same weights. `cargo xtask peers` compares them with ModelOpt.
//!
//! Where it differs from blockscale's default NVFP4 recipe (docs/NUMERICS.md):
//! - the per-tensor scale is the decode scale `amax / 2688` (an f32 division), not the
//!   reciprocal of the encode scale `2688 / amax`;
//! - a block's scale is `block_amax / (6 * g)` rounded to UE4M3 after clamping to
//!   `[2^-9, 448]`: an all-zero block gets the scale 1.0 and a block a tiny fraction of
//!   the tensor's amax gets the smallest subnormal 2^-9, rather than 0;
//! - the elements are `x / (scale * g)` (a division by the f32 product), rounded to
//!   E2M1 to nearest even, saturating.
//!
//! One departure: an all-zero tensor (amax 0) makes ModelOpt divide 0 by 0 and store
//! NaN scales; here it gets `g = 1` (blockscale's rule, TransformerEngine's), zero
//! elements and scales of 1.0.

use blockscale_formats::{
    DataLayout, E2M1, E4M3, GlobalScale, QuantizedMatrix, QuantizedParts, ScaleData, ScaleLayout, Scheme,
};
use rayon::prelude::*;

use crate::values::{FloatValues, finite_amax};

/// The NVFP4 block.
const BLOCK: usize = 16;

/// Where a NaN or Inf stopped the recipe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFiniteAt {
    /// Row of the value.
    pub row: usize,
    /// Column of the value.
    pub col: usize,
    /// The value.
    pub value: f32,
}

/// `rows x k` values (row-major, `k % 16 == 0`) quantized to NVFP4 as ModelOpt does,
/// with linear scales.
///
/// # Errors
/// The first NaN or Inf (ModelOpt has no rule for them; blockscale's
/// `--non-finite poison` does not apply to this recipe).
pub fn quantize(values: &FloatValues<'_>, rows: usize, k: usize) -> Result<QuantizedMatrix, NonFiniteAt> {
    blockscale_formats::for_float_values!(values, |v| quantize_with(
        v,
        rows,
        k,
        blockscale_formats::Source::to_f32_exact
    ))
}

fn quantize_with<T: Copy + Sync>(
    v: &[T],
    rows: usize,
    k: usize,
    f: impl Fn(T) -> f32 + Sync,
) -> Result<QuantizedMatrix, NonFiniteAt> {
    assert!(k.is_multiple_of(BLOCK) && v.len() == rows * k, "the plan checks K and the tensor's length");
    let row_len = k.max(1);
    let amax = finite_amax(v, k, &f).map_err(|(row, col, value)| NonFiniteAt { row, col, value })?;
    let g = if amax == 0.0 { 1.0 } else { amax / blockscale_formats::NVFP4_AMAX_TO_SCALE };
    let six_g = 6.0 * g;
    let mut data = vec![0u8; rows * k / 2];
    let mut scales = vec![0u8; rows * k / BLOCK];
    data.par_chunks_mut((k / 2).max(1))
        .zip(scales.par_chunks_mut((k / BLOCK).max(1)))
        .zip(v.par_chunks(row_len))
        .for_each(|((out, sc), row)| {
            for ((out, s), block) in out.chunks_exact_mut(BLOCK / 2).zip(sc.iter_mut()).zip(row.chunks_exact(BLOCK)) {
                let block_amax = block.iter().fold(0f32, |m, &x| m.max(f(x).abs()));
                let mut scale = block_amax / six_g;
                if scale == 0.0 {
                    scale = 1.0;
                }
                let code = E4M3::from_f32(scale.clamp(2f32.powi(-9), 448.0));
                *s = code.to_bits();
                let denominator = code.to_f32() * g;
                for (o, pair) in out.iter_mut().zip(block.chunks_exact(2)) {
                    let lo = E2M1::from_f32(f(pair[0]) / denominator).to_bits();
                    let hi = E2M1::from_f32(f(pair[1]) / denominator).to_bits();
                    *o = lo | (hi << 4);
                }
            }
        });
    let global_scale = GlobalScale::from_decode(g).expect("g is positive and finite: amax is finite and nonzero");
    Ok(QuantizedMatrix::from_parts(QuantizedParts {
        scheme: Scheme::NvFp4,
        rows,
        k,
        data,
        data_layout: DataLayout::RowMajor,
        scales: ScaleData::Bytes(scales),
        scale_layout: ScaleLayout::Linear,
        global_scale: Some(global_scale),
    })
    .expect("the lengths follow from rows and k"))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn run(values: Vec<f32>, rows: usize) -> QuantizedMatrix {
        let k = values.len() / rows;
        quantize(&FloatValues::F32(Cow::Owned(values)), rows, k).unwrap()
    }

    // Expected codes below are worked by hand from ModelOpt's formulas (module docs):
    // E4M3 1.0 = 0x38, 2^-9 = 0x01, 448 = 0x7e; E2M1 6.0 = 0x7, 4.0 = 0x6, 0.5 = 0x1.

    #[test]
    fn an_all_zero_block_gets_the_scale_one_and_a_tiny_block_the_floor() {
        // Row 0: amax 2688 (g = 1); block 0 is zero, block 1 holds 1e-6 (scale 1e-6/6 is
        // below 2^-9), block 2 holds 2688 (scale 448).
        let mut v = vec![0f32; 48];
        v[16] = 1e-6;
        v[32] = 2688.0;
        let q = run(v, 1);
        assert_eq!(q.global_scale().unwrap().decode(), 1.0);
        let ScaleData::Bytes(s) = q.scales() else { panic!("NVFP4 scales are bytes") };
        assert_eq!(s, &[0x38, 0x01, 0x7e]);
        // 1e-6 / 2^-9 = 0.000512 rounds to 0; 2688 / 448 = 6.
        assert_eq!(q.data()[8], 0x00);
        assert_eq!(q.data()[16], 0x07);
    }

    #[test]
    fn the_tensor_scale_is_amax_over_2688_and_elements_divide_by_the_product() {
        // amax 12: g = 12 / 2688, not a power of two, so every step rounds; the expected
        // bytes follow ModelOpt's f32 formulas step by step with the formats crate's
        // conversions (checked against NVIDIA's own elsewhere).
        let mut v = vec![0f32; 16];
        v[0] = 12.0;
        v[1] = -3.0;
        v[2] = 1.0;
        let q = run(v, 1);
        let g = 12f32 / 2688.0;
        assert_eq!(q.global_scale().unwrap().decode().to_bits(), g.to_bits());
        let scale = 12f32 / (6.0 * g);
        let ScaleData::Bytes(s) = q.scales() else { panic!("NVFP4 scales are bytes") };
        assert_eq!(s[0], E4M3::from_f32(scale).to_bits());
        let d = E4M3::from_bits(s[0]).to_f32() * g;
        let want = |x: f32| E2M1::from_f32(x / d).to_bits();
        assert_eq!(q.data()[0], want(12.0) | (want(-3.0) << 4));
        assert_eq!(q.data()[1], want(1.0));
    }

    #[test]
    fn an_all_zero_tensor_gets_scale_one_not_nan() {
        let q = run(vec![0.0; 64], 2);
        assert_eq!(q.global_scale().unwrap().decode(), 1.0);
        let ScaleData::Bytes(s) = q.scales() else { panic!("NVFP4 scales are bytes") };
        assert_eq!(s, &[0x38, 0x38, 0x38, 0x38]);
        assert!(q.data().iter().all(|&b| b == 0));
    }

    #[test]
    fn the_first_non_finite_value_is_reported() {
        let mut v = vec![1f32; 64];
        v[40] = f32::INFINITY;
        v[50] = f32::NAN;
        let e = quantize(&FloatValues::F32(Cow::Owned(v)), 2, 32).unwrap_err();
        assert_eq!((e.row, e.col), (1, 8));
    }
}
