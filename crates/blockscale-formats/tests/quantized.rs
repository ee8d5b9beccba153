//! QuantizedMatrix validation: every inconsistent set of parts is a typed error, a
//! consistent one round-trips through from_parts / into_parts.

use blockscale_formats::{
    DataLayout, FormatError, Fp8Tile, GlobalScale, QuantizedMatrix, QuantizedParts, ScaleData, ScaleLayout, Scheme,
    UE4M3, layout, nvfp4_alpha,
};
use half::f16;

fn nvfp4_parts(rows: usize, k: usize, layout: ScaleLayout) -> QuantizedParts {
    let cols = k / 16;
    let linear: Vec<u8> = (0..rows * cols).map(|i| (i % 100 + 1) as u8).collect();
    let scales = layout::convert_vec(&linear, ScaleLayout::Linear, layout, rows, cols).unwrap();
    QuantizedParts {
        scheme: Scheme::NvFp4,
        rows,
        k,
        data: vec![0x21; rows * k / 2],
        data_layout: DataLayout::RowMajor,
        scales: ScaleData::Bytes(scales),
        scale_layout: layout,
        global_scale: Some(GlobalScale::from_encode(2.0).unwrap()),
    }
}

#[test]
fn valid_parts_round_trip() {
    for layout in ScaleLayout::ALL {
        let parts = nvfp4_parts(130, 96, layout);
        let q = QuantizedMatrix::from_parts(parts.clone()).unwrap();
        assert_eq!((q.rows(), q.k(), q.scheme()), (130, 96, Scheme::NvFp4));
        assert_eq!(q.scale(129, 5), Some(UE4M3::from_bits(((129 * 6 + 5) % 100 + 1) as u8).to_f32()));
        assert_eq!(q.scale(130, 0), None);
        assert_eq!(q.scale(0, 6), None);
        assert_eq!(q.storage_bytes(), 130 * 48 + parts.scales.len() + 4);
        assert_eq!(q.into_parts(), parts);
    }
}

#[test]
fn inconsistent_parts_are_typed_errors() {
    let mut p = nvfp4_parts(4, 32, ScaleLayout::Linear);
    p.data.pop();
    assert!(matches!(
        QuantizedMatrix::from_parts(p),
        Err(FormatError::LengthMismatch { expected: 64, actual: 63, .. })
    ));

    let mut p = nvfp4_parts(4, 32, ScaleLayout::Swizzled128x4);
    p.scale_layout = ScaleLayout::Linear;
    assert!(matches!(
        QuantizedMatrix::from_parts(p),
        Err(FormatError::LengthMismatch { expected: 8, actual: 512, .. })
    ));

    let mut p = nvfp4_parts(4, 32, ScaleLayout::Linear);
    p.scales = ScaleData::F32(vec![1.0; 8]);
    assert_eq!(
        QuantizedMatrix::from_parts(p).unwrap_err(),
        FormatError::ScaleTypeMismatch { scheme: Scheme::NvFp4, expected: blockscale_formats::ScaleFormat::UE4M3 }
    );

    let mut p = nvfp4_parts(4, 32, ScaleLayout::Linear);
    p.global_scale = None;
    assert_eq!(QuantizedMatrix::from_parts(p).unwrap_err(), FormatError::MissingGlobalScale { scheme: Scheme::NvFp4 });

    let mut p = nvfp4_parts(4, 32, ScaleLayout::Swizzled128x4);
    if let ScaleData::Bytes(b) = &mut p.scales {
        b[511] = 3; // row 127 of a 4-row matrix: padding
    }
    assert_eq!(QuantizedMatrix::from_parts(p).unwrap_err(), FormatError::NonZeroPadding { index: 511 });

    let mut p = nvfp4_parts(4, 48, ScaleLayout::Linear);
    p.data_layout = DataLayout::BlockInterleaved;
    assert!(matches!(QuantizedMatrix::from_parts(p), Err(FormatError::UnsupportedDataLayout { .. })));

    let p = QuantizedParts {
        scheme: Scheme::Fp8Block(Fp8Tile::Tile128x128),
        rows: 130,
        k: 256,
        data: vec![0; 130 * 256],
        data_layout: DataLayout::RowMajor,
        scales: ScaleData::F32(vec![1.0; 4]),
        scale_layout: ScaleLayout::Linear,
        global_scale: Some(GlobalScale::from_encode(1.0).unwrap()),
    };
    assert_eq!(
        QuantizedMatrix::from_parts(p.clone()).unwrap_err(),
        FormatError::UnexpectedGlobalScale { scheme: Scheme::Fp8Block(Fp8Tile::Tile128x128) }
    );
    let q = QuantizedMatrix::from_parts(QuantizedParts { global_scale: None, ..p.clone() }).unwrap();
    assert_eq!(q.scale(129, 1), Some(1.0));
    let p = QuantizedParts { data_layout: DataLayout::BlockInterleaved, global_scale: None, ..p };
    assert!(matches!(QuantizedMatrix::from_parts(p), Err(FormatError::UnsupportedDataLayout { .. })));

    let int4 = QuantizedParts {
        scheme: Scheme::Int4G32,
        rows: 2,
        k: 64,
        data: vec![0x88; 64],
        data_layout: DataLayout::BlockInterleaved,
        scales: ScaleData::F16(vec![f16::ONE; 4]),
        scale_layout: ScaleLayout::Linear,
        global_scale: None,
    };
    assert!(QuantizedMatrix::from_parts(int4.clone()).is_ok());
    let bad = QuantizedParts { scale_layout: ScaleLayout::Swizzled128x4, ..int4 };
    assert!(matches!(QuantizedMatrix::from_parts(bad), Err(FormatError::UnsupportedLayout { .. })));
}

#[test]
fn global_scales() {
    let g = GlobalScale::from_amax(2688.0).unwrap();
    assert_eq!((g.encode(), g.decode()), (1.0, 1.0));
    let g = GlobalScale::from_decode(0.5).unwrap();
    assert_eq!((g.encode(), g.decode()), (2.0, 0.5));
    let g = GlobalScale::from_amax(1e-45).unwrap();
    assert_eq!(g.encode(), f32::MAX);
    assert!(g.decode() > 0.0);
    for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY, f32::MAX * 2.0, 1e-45] {
        assert!(GlobalScale::from_encode(bad).is_err(), "encode {bad}");
        assert!(GlobalScale::from_decode(bad).is_err(), "decode {bad}");
    }
    for bad in [-1.0f32, f32::NAN, f32::INFINITY] {
        let err = GlobalScale::from_amax(bad).unwrap_err();
        assert!(matches!(err, FormatError::InvalidGlobalScale { what: "amax", .. }));
        assert!(err.to_string().contains("finite"), "{err}");
    }
    let a = GlobalScale::from_encode(4.0).unwrap();
    let b = GlobalScale::from_encode(8.0).unwrap();
    assert_eq!(nvfp4_alpha(a, b), 1.0 / 32.0);
}
