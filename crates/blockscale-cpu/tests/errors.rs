//! Every misuse is a typed error with a message that names the fix; nothing panics.
//! And the documented NaN/Inf rule: an error naming the first one, or poisoned blocks.

use blockscale_cpu::{
    CpuError, DequantizeOptions, GlobalScaleSource, NonFinite, QuantizeOptions, dequantize, dequantize_into,
    dequantize_slice, error_metrics, fake_quantize, quantize, quantize_slice,
};
use blockscale_formats::{DataLayout, FormatError, Fp8Tile, ScaleData, ScaleLayout, Scheme};
use ndarray::Array2;

#[test]
fn shape_errors() {
    let x = vec![1.0f32; 4 * 24];
    let err = quantize_slice(&x, 4, 24, Scheme::NvFp4, &QuantizeOptions::default()).unwrap_err();
    assert!(matches!(err, CpuError::Format(FormatError::NotMultiple { what: "K", value: 24, multiple: 16, .. })));
    assert!(err.to_string().contains("pad it to 32"), "{err}");
    let empty = Array2::<f32>::zeros((0, 32));
    assert!(matches!(
        quantize(empty.view(), Scheme::MxFp4, &QuantizeOptions::default()),
        Err(CpuError::Format(FormatError::EmptyShape { rows: 0, cols: 32 }))
    ));
    let err = quantize_slice(&x, 5, 24, Scheme::MxFp8E4M3, &QuantizeOptions::default()).unwrap_err();
    assert!(matches!(err, CpuError::SliceLength { expected: 120, actual: 96, .. }), "{err}");
    let err = quantize_slice(&x, usize::MAX, 2, Scheme::MxFp8E4M3, &QuantizeOptions::default()).unwrap_err();
    assert!(matches!(err, CpuError::SliceLength { .. }));
}

#[test]
fn option_errors() {
    let x = vec![1.0f32; 2 * 128];
    let bad_global = QuantizeOptions::default().with_global_scale(GlobalScaleSource::Amax(3.0));
    let err = quantize_slice(&x, 2, 128, Scheme::MxFp4, &bad_global).unwrap_err();
    assert!(matches!(err, CpuError::Format(FormatError::OptionNotApplicable { .. })));
    assert!(err.to_string().contains("only NVFP4"), "{err}");
    for amax in [-1.0f32, f32::NAN, f32::INFINITY] {
        let opts = QuantizeOptions::default().with_global_scale(GlobalScaleSource::Amax(amax));
        let err = quantize_slice(&x, 2, 128, Scheme::NvFp4, &opts).unwrap_err();
        assert!(matches!(err, CpuError::Format(FormatError::InvalidGlobalScale { what: "amax", .. })), "{amax}: {err}");
    }
    let swizzled = QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
    for scheme in [Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Int4G32] {
        let err = quantize_slice(&x, 2, 128, scheme, &swizzled).unwrap_err();
        assert!(err.to_string().contains("ScaleLayout::Linear"), "{err}");
    }
    let inter = QuantizeOptions::default().with_data_layout(DataLayout::BlockInterleaved);
    let err = quantize_slice(&x, 2, 128, Scheme::MxFp8E4M3, &inter).unwrap_err();
    assert!(err.to_string().contains("DataLayout::RowMajor"), "{err}");
    let x48 = vec![1.0f32; 2 * 48];
    assert!(quantize_slice(&x48, 2, 48, Scheme::NvFp4, &inter).is_err()); // K % 32 != 0
    // Fake quantization validates the same way.
    let arr = Array2::from_shape_vec((2, 128), x).unwrap();
    assert!(matches!(
        fake_quantize(arr.view(), Scheme::MxFp4, &bad_global),
        Err(CpuError::Format(FormatError::OptionNotApplicable { .. }))
    ));
}

#[test]
fn output_and_metric_errors() {
    let x = vec![0.5f32; 4 * 32];
    let q = quantize_slice(&x, 4, 32, Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
    let mut small = Array2::<f32>::zeros((4, 31));
    let err = dequantize_into(&q, small.view_mut(), &DequantizeOptions::default()).unwrap_err();
    assert_eq!(err, CpuError::OutputShape { expected: (4, 32), actual: (4, 31) });
    let mut flat = vec![0f32; 100];
    assert!(matches!(
        dequantize_slice(&q, &mut flat, &DequantizeOptions::default()),
        Err(CpuError::SliceLength { expected: 128, actual: 100, .. })
    ));
    let a = Array2::<f32>::zeros((2, 3));
    let b = Array2::<f32>::zeros((3, 2));
    assert_eq!(error_metrics(a.view(), b.view()).unwrap_err(), CpuError::ShapeMismatch { a: (2, 3), b: (3, 2) });
}

#[test]
fn non_finite_values_are_refused_with_their_position() {
    for scheme in Scheme::ALL {
        for (row, col, v) in [(0usize, 0usize, f32::NAN), (2, 70, f32::INFINITY), (5, 255, f32::NEG_INFINITY)] {
            let mut x = vec![1.0f32; 6 * 256];
            x[row * 256 + col] = v;
            // A later non-finite value must not be the one reported.
            x[5 * 256 + 10] = f32::NAN;
            let want = if (row, col) < (5, 10) { (row, col) } else { (5, 10) };
            for single in [true, false] {
                let opts = QuantizeOptions::default().with_single_thread(single);
                let err = quantize_slice(&x, 6, 256, scheme, &opts).unwrap_err();
                match err {
                    CpuError::NonFinite { row, col, value } => {
                        assert_eq!((row, col), want, "{scheme}");
                        assert!(!value.is_finite());
                    }
                    other => panic!("{scheme}: {other}"),
                }
                assert!(err.to_string().contains("NonFinite::Poison"));
                let arr = Array2::from_shape_vec((6, 256), x.clone()).unwrap();
                assert!(matches!(fake_quantize(arr.view(), scheme, &opts), Err(CpuError::NonFinite { .. })));
            }
        }
    }
}

#[test]
fn poisoned_blocks_dequantize_to_nan_and_spare_the_rest() {
    let (rows, k) = (130, 256);
    for scheme in Scheme::ALL {
        let mut x: Vec<f32> = (0..rows * k).map(|i| ((i % 13) as f32 - 6.0) / 4.0).collect();
        x[129 * k + 200] = f32::NAN;
        x[3 * k + 5] = f32::INFINITY;
        let opts = QuantizeOptions::default().with_non_finite(NonFinite::Poison);
        let q = quantize_slice(&x, rows, k, scheme, &opts).unwrap();
        let y = dequantize::<f32>(&q);
        let (block, brows) = (scheme.block_size(), scheme.block_rows());
        let poisoned = |r: usize, c: usize| {
            [(129usize, 200usize), (3, 5)].iter().any(|&(pr, pc)| pr / brows == r / brows && pc / block == c / block)
        };
        for r in 0..rows {
            for c in 0..k {
                let v = y[(r, c)];
                assert_eq!(v.is_nan(), poisoned(r, c), "{scheme} ({r}, {c}) = {v}");
            }
        }
        // The stored scale of a poisoned block is the format's NaN; its codes are zero.
        let (r, c) = (3, 5 / block);
        assert!(q.scale(r, c).unwrap().is_nan(), "{scheme}");
        if let ScaleData::Bytes(_) = q.scales() {
            let row_bytes = q.shape().row_bytes;
            let per = q.scheme().element().bits() as usize;
            let first = 3 * row_bytes + (5 / block) * block * per / 8;
            assert!(q.data()[first..first + block * per / 8].iter().all(|&b| b == 0), "{scheme}");
        }
    }
}
