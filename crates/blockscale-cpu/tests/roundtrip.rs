//! Round trips: values that are representable (elements times a representable scale)
//! come back exactly; property tests over random shapes, strides, layouts and input
//! types; fake quantization equals dequantize(quantize(x)) to the bit.

mod common;

use blockscale_cpu::{GlobalScaleSource, NonFinite, QuantizeOptions, dequantize, fake_quantize, quantize};
use blockscale_formats::{
    DataLayout, E2M1, E2M3, E3M2, E4M3, E5M2, ElementFormat, Fp8Tile, GlobalScale, ScaleLayout, ScaleRule, Scheme,
};
use half::bf16;
use ndarray::{Array2, s};
use proptest::prelude::*;

/// The finite values of an element format.
fn values(e: ElementFormat) -> Vec<f32> {
    let t: &[f32] = match e {
        ElementFormat::E2M1 => &E2M1::TABLE,
        ElementFormat::E2M3 => &E2M3::TABLE,
        ElementFormat::E3M2 => &E3M2::TABLE,
        ElementFormat::E4M3 => &E4M3::TABLE,
        ElementFormat::E5M2 => &E5M2::TABLE,
        ElementFormat::Int4 => {
            &[-8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
        }
    };
    t.iter().copied().filter(|v| v.is_finite()).collect()
}

/// MX blocks whose maximum is the element max and whose elements are representable,
/// times a power of two: Rceil picks exactly that power of two, so every value returns.
#[test]
fn mx_representable_values_round_trip() {
    let mut rng = common::rng(3);
    for scheme in [Scheme::MxFp4, Scheme::MxFp6E2M3, Scheme::MxFp6E3M2, Scheme::MxFp8E4M3, Scheme::MxFp8E5M2] {
        let e = scheme.element();
        let vals = values(e);
        let (rows, k) = (5, 96);
        let mut x = vec![0f32; rows * k];
        for (b, chunk) in x.chunks_mut(32).enumerate() {
            let scale = 2f32.powi((b % 7) as i32 - 3);
            for (i, v) in chunk.iter_mut().enumerate() {
                *v = if i == b % 32 { e.max() } else { vals[rng.random_range(0..vals.len())] } * scale;
            }
        }
        let q = quantize_slice_f32(&x, rows, k, scheme, &QuantizeOptions::default());
        let y = dequantize::<f32>(&q);
        assert_eq!(y.as_slice().unwrap(), &x[..], "{scheme}");
    }
}

fn quantize_slice_f32(
    x: &[f32],
    rows: usize,
    k: usize,
    scheme: Scheme,
    o: &QuantizeOptions,
) -> blockscale_cpu::QuantizedMatrix {
    blockscale_cpu::quantize_slice(x, rows, k, scheme, o).unwrap()
}

/// `len` values in blocks of `block`: element `i` of block `b` is `f(b, i)`.
fn blockwise(len: usize, block: usize, mut f: impl FnMut(usize, usize) -> f32) -> Vec<f32> {
    (0..len).map(|j| f(j / block, j % block)).collect()
}

/// NVFP4 with g = 1 and block maxima of 6 * 2^j (j in -3..=3): the scale is exactly
/// 2^j (a UE4M3 value), the multiplier exactly 2^-j, so E2M1 values times 2^j return.
#[test]
fn nvfp4_representable_values_round_trip() {
    let vals = values(ElementFormat::E2M1);
    let mut rng = common::rng(4);
    let (rows, k) = (3, 64);
    let x = blockwise(rows * k, 16, |b, i| {
        let scale = 2f32.powi((b % 7) as i32 - 3);
        let v = if i == 0 { 6.0 } else { vals[rng.random_range(0..vals.len())] };
        v * scale
    });
    let g = GlobalScaleSource::Given(GlobalScale::from_encode(1.0).unwrap());
    let q = quantize_slice_f32(&x, rows, k, Scheme::NvFp4, &QuantizeOptions::default().with_global_scale(g));
    assert_eq!(dequantize::<f32>(&q).as_slice().unwrap(), &x[..]);
}

/// INT4 with group maxima of 7 * s for s a power of two, and FP8 blocks with maxima of
/// 448 * s: exact scales, exact elements.
#[test]
fn int4_and_fp8_block_representable_values_round_trip() {
    let mut rng = common::rng(5);
    let (rows, k) = (4, 256);
    let x = blockwise(rows * k, 32, |b, i| {
        let scale = 2f32.powi((b % 5) as i32 - 2);
        // amax is exactly 7 * scale (the symmetric scale cannot return -8 * scale).
        let v = if i == 3 { 7.0 } else { rng.random_range(-7i32..=7) as f32 };
        v * scale
    });
    let q = quantize_slice_f32(&x, rows, k, Scheme::Int4G32, &QuantizeOptions::default());
    assert_eq!(dequantize::<f32>(&q).as_slice().unwrap(), &x[..]);
    let inter = quantize_slice_f32(
        &x,
        rows,
        k,
        Scheme::Int4G32,
        &QuantizeOptions::default().with_data_layout(DataLayout::BlockInterleaved),
    );
    assert_eq!(dequantize::<f32>(&inter).as_slice().unwrap(), &x[..]);

    let vals = values(ElementFormat::E4M3);
    let mut x = vec![0f32; rows * k];
    for (b, chunk) in x.chunks_mut(128).enumerate() {
        let scale = 2f32.powi(b as i32 % 3);
        for (i, v) in chunk.iter_mut().enumerate() {
            *v = if i == 0 { 448.0 } else { vals[rng.random_range(0..vals.len())] } * scale;
        }
    }
    let q = quantize_slice_f32(&x, rows, k, Scheme::Fp8Block(Fp8Tile::Row1x128), &QuantizeOptions::default());
    assert_eq!(dequantize::<f32>(&q).as_slice().unwrap(), &x[..]);
}

fn scheme_strategy() -> impl Strategy<Value = Scheme> {
    prop::sample::select(Scheme::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any shape, any strides, any layout, any input type: fake quantization equals
    /// dequantize(quantize(x)) bit for bit, and the quantized bytes do not depend on
    /// strides, threads or the input type holding the same values.
    #[test]
    fn fake_equals_roundtrip_and_strides_do_not_matter(
        scheme in scheme_strategy(),
        rows in 1usize..200,
        kb in 1usize..4,
        seed in any::<u64>(),
        swizzle in any::<bool>(),
        rule in prop::sample::select(ScaleRule::ALL.to_vec()),
        transposed in any::<bool>(),
    ) {
        let k = kb * 128;
        let x = Array2::from_shape_vec((rows, k), common::data(rows * k, seed, true)).unwrap();
        let layout = if swizzle && scheme.supports_layout(ScaleLayout::Swizzled128x4) { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
        let opts = QuantizeOptions::default().with_scale_layout(layout).with_scale_rule(rule).with_non_finite(NonFinite::Poison);
        let q = quantize(x.view(), scheme, &opts).unwrap();
        let owned_t = x.t().to_owned();
        let view = if transposed { owned_t.t() } else { x.view() };
        prop_assert!(common::same_matrix(&quantize(view, scheme, &opts).unwrap(), &q));
        let y = dequantize::<f32>(&q);
        let f = fake_quantize(view, scheme, &opts).unwrap();
        prop_assert!(y.iter().zip(f.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
        // bf16 input holding the same values (when they are bf16 values) gives the same bytes.
        let xb = x.mapv(bf16::from_f32);
        let xr = xb.mapv(|v| v.to_f32());
        let qb = quantize(xb.view(), scheme, &opts).unwrap();
        let qr = quantize(xr.view(), scheme, &opts).unwrap();
        prop_assert!(common::same_matrix(&qb, &qr));
        // A column slice (rows contiguous, row stride != k).
        let mut wide = Array2::<f32>::zeros((rows, k + 128));
        wide.slice_mut(s![.., 64..64 + k]).assign(&x);
        prop_assert!(common::same_matrix(&quantize(wide.slice(s![.., 64..64 + k]), scheme, &opts).unwrap(), &q));
    }
}
