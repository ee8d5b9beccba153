//! `quantize_into` writes the bytes `quantize` returns, into caller buffers: the codes
//! as `data()` holds them, the scales as little-endian bytes of their format.

mod common;

use blockscale_cpu::{CpuError, NonFinite, QuantizeOptions, quantize, quantize_into};
use blockscale_formats::{DataLayout, ScaleData, ScaleLayout, ScaleRule, Scheme};
use half::bf16;
use ndarray::Array2;
use proptest::prelude::*;

/// A scale buffer as little-endian bytes.
fn le_bytes(s: &ScaleData) -> Vec<u8> {
    match s {
        ScaleData::Bytes(b) => b.clone(),
        ScaleData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ScaleData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Buffers of the lengths `quantize`'s result has, filled with a marker so that a byte
/// left unwritten shows.
fn buffers_like(q: &blockscale_formats::QuantizedMatrix) -> (Vec<u8>, Vec<u8>) {
    (vec![0xa5; q.data().len()], vec![0xa5; le_bytes(q.scales()).len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every scheme, scale layout, scale rule, data layout, thread mode and input type:
    /// the same bytes and per-tensor scale as `quantize`.
    #[test]
    fn writes_the_bytes_quantize_returns(
        scheme in prop::sample::select(Scheme::ALL.to_vec()),
        rows in 1usize..300,
        kb in 1usize..4,
        seed in any::<u64>(),
        swizzle in any::<bool>(),
        interleave in any::<bool>(),
        single in any::<bool>(),
        as_bf16 in any::<bool>(),
        rule in prop::sample::select(ScaleRule::ALL.to_vec()),
    ) {
        let k = kb * 128;
        let x = Array2::from_shape_vec((rows, k), common::data(rows * k, seed, true)).unwrap();
        let layout = if swizzle && scheme.supports_layout(ScaleLayout::Swizzled128x4) { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
        let data_layout = if interleave && scheme.element().bits() == 4 { DataLayout::BlockInterleaved } else { DataLayout::RowMajor };
        let mut opts = QuantizeOptions::default()
            .with_scale_layout(layout)
            .with_scale_rule(rule)
            .with_data_layout(data_layout)
            .with_non_finite(NonFinite::Poison);
        opts.single_threaded = single;
        let (q, got) = if as_bf16 {
            let xb = x.mapv(bf16::from_f32);
            let q = quantize(xb.view(), scheme, &opts).unwrap();
            let (mut d, mut s) = buffers_like(&q);
            let g = quantize_into(xb.view(), scheme, &opts, &mut d, &mut s).unwrap();
            (q, (d, s, g))
        } else {
            let q = quantize(x.view(), scheme, &opts).unwrap();
            let (mut d, mut s) = buffers_like(&q);
            let g = quantize_into(x.view(), scheme, &opts, &mut d, &mut s).unwrap();
            (q, (d, s, g))
        };
        prop_assert_eq!(&got.0[..], q.data());
        prop_assert_eq!(got.1, le_bytes(q.scales()));
        prop_assert_eq!(got.2.map(|g| g.encode().to_bits()), q.global_scale().map(|g| g.encode().to_bits()));
    }
}

#[test]
fn buffers_of_the_wrong_length_are_refused_naming_which() {
    let x = Array2::<f32>::ones((4, 64));
    // NVFP4 4 x 64: 128 bytes of codes, 16 one-byte scales (linear).
    let o = QuantizeOptions::default().with_scale_layout(ScaleLayout::Linear);
    let (mut d, mut s) = (vec![0u8; 128], vec![0u8; 16]);
    assert!(quantize_into(x.view(), Scheme::NvFp4, &o, &mut d, &mut s).is_ok());
    let e = quantize_into(x.view(), Scheme::NvFp4, &o, &mut d[..127], &mut s).unwrap_err();
    assert!(matches!(e, CpuError::BufferLength { what: "data", expected: 128, actual: 127, .. }), "{e:?}");
    assert_eq!(e.to_string(), "data buffer has 127 bytes but nvfp4 [4, 64] needs 128");
    let mut long = vec![0u8; 17];
    let e = quantize_into(x.view(), Scheme::NvFp4, &o, &mut d, &mut long).unwrap_err();
    assert!(matches!(e, CpuError::BufferLength { what: "scales", expected: 16, actual: 17, .. }), "{e:?}");
    // INT4 scales are f16: two bytes each (4 rows x 2 groups of 32).
    let (mut d, mut s) = (vec![0u8; 128], vec![0u8; 8]);
    let e = quantize_into(x.view(), Scheme::Int4G32, &o, &mut d, &mut s).unwrap_err();
    assert!(matches!(e, CpuError::BufferLength { what: "scales", expected: 16, actual: 8, .. }), "{e:?}");
}

#[test]
fn a_non_finite_value_is_the_same_error_as_quantize() {
    let mut x = Array2::<f32>::ones((3, 64));
    x[(2, 40)] = f32::INFINITY;
    let o = QuantizeOptions::default().with_scale_layout(ScaleLayout::Linear);
    let want = quantize(x.view(), Scheme::MxFp4, &o).unwrap_err();
    let (mut d, mut s) = (vec![0u8; 96], vec![0u8; 6]);
    let got = quantize_into(x.view(), Scheme::MxFp4, &o, &mut d, &mut s).unwrap_err();
    assert_eq!(got, want);
    assert!(matches!(got, CpuError::NonFinite { row: 2, col: 40, .. }));
}
