//! Schemes as data: the table of DESIGN.md, names, shape validation and its errors.

use blockscale_formats::{ElementFormat, FormatError, Fp8Tile, ScaleFormat, ScaleLayout, Scheme};

#[test]
fn the_design_table() {
    use ElementFormat as E;
    use ScaleFormat as S;
    let want = [
        (Scheme::NvFp4, E::E2M1, 16, 1, S::UE4M3, true, 4.5),
        (Scheme::MxFp4, E::E2M1, 32, 1, S::UE8M0, false, 4.25),
        (Scheme::MxFp6E2M3, E::E2M3, 32, 1, S::UE8M0, false, 6.25),
        (Scheme::MxFp6E3M2, E::E3M2, 32, 1, S::UE8M0, false, 6.25),
        (Scheme::MxFp8E4M3, E::E4M3, 32, 1, S::UE8M0, false, 8.25),
        (Scheme::MxFp8E5M2, E::E5M2, 32, 1, S::UE8M0, false, 8.25),
        (Scheme::Fp8Block(Fp8Tile::Row1x128), E::E4M3, 128, 1, S::F32, false, 8.25),
        (Scheme::Fp8Block(Fp8Tile::Tile128x128), E::E4M3, 128, 128, S::F32, false, 8.0 + 32.0 / 16384.0),
        (Scheme::Int4G32, E::Int4, 32, 1, S::F16, false, 4.5),
        (Scheme::Int4G128, E::Int4, 128, 1, S::F16, false, 4.125),
    ];
    assert_eq!(want.len(), Scheme::ALL.len());
    for (s, e, block, rows, scale, global, bits) in want {
        assert_eq!(s.element(), e, "{s}");
        assert_eq!(s.block_size(), block, "{s}");
        assert_eq!(s.block_rows(), rows, "{s}");
        assert_eq!(s.scale_format(), scale, "{s}");
        assert_eq!(s.has_global_scale(), global, "{s}");
        assert_eq!(s.bits_per_element(), bits, "{s}");
        assert!(Scheme::ALL.contains(&s));
    }
}

#[test]
fn names_round_trip() {
    for s in Scheme::ALL {
        assert_eq!(s.name().parse::<Scheme>(), Ok(s));
        assert_eq!(s.to_string(), s.name());
        assert_eq!(s.name().to_uppercase().replace('-', "_").parse::<Scheme>(), Ok(s));
    }
    assert_eq!("fp8-block".parse::<Scheme>(), Ok(Scheme::Fp8Block(Fp8Tile::Tile128x128)));
    for bad in ["", "nvfp", "nvfp4x", "mxfp6", "fp8_block_1x12"] {
        assert_eq!(bad.parse::<Scheme>(), Err(FormatError::UnknownScheme), "{bad:?}");
    }
    let message = FormatError::UnknownScheme.to_string();
    assert_eq!(
        message,
        "unknown scheme; expected one of nvfp4, mxfp4, mxfp6-e2m3, mxfp6-e3m2, mxfp8-e4m3, mxfp8-e5m2, \
         fp8-block-1x128, fp8-block-128x128 (or fp8-block), int4-g32, int4-g128"
    );
}

#[test]
fn shapes() {
    let s = Scheme::MxFp6E3M2.shape(3, 64).unwrap();
    assert_eq!((s.row_bytes, s.data_bytes, s.scale_rows, s.scale_cols), (48, 144, 3, 2));
    assert_eq!(s.scale_len(ScaleLayout::Linear), Ok(6));
    assert_eq!(s.scale_len(ScaleLayout::Swizzled128x4), Ok(128 * 4));
    let s = Scheme::Fp8Block(Fp8Tile::Tile128x128).shape(300, 256).unwrap();
    assert_eq!((s.row_bytes, s.scale_rows, s.scale_cols), (256, 3, 2));
    assert_eq!(
        s.scale_len(ScaleLayout::Swizzled128x4),
        Err(FormatError::UnsupportedLayout {
            scheme: Scheme::Fp8Block(Fp8Tile::Tile128x128),
            layout: ScaleLayout::Swizzled128x4
        })
    );
    let s = Scheme::Int4G32.shape(1, 32).unwrap();
    assert_eq!((s.row_bytes, s.scale_cols), (16, 1));
    assert!(!Scheme::Int4G32.supports_layout(ScaleLayout::Swizzled128x4));
    assert!(Scheme::NvFp4.supports_layout(ScaleLayout::Swizzled128x4));
}

#[test]
fn shape_errors_name_the_problem() {
    let err = Scheme::NvFp4.shape(4, 100).unwrap_err();
    assert_eq!(
        err,
        FormatError::NotMultiple {
            what: "K",
            value: 100,
            multiple: 16,
            reason: "NVFP4 scales blocks of 16 elements along K"
        }
    );
    assert!(err.to_string().contains("pad it to 112"), "{err}");
    assert_eq!(Scheme::MxFp4.shape(0, 32).unwrap_err(), FormatError::EmptyShape { rows: 0, cols: 32 });
    assert_eq!(Scheme::MxFp4.shape(2, 0).unwrap_err(), FormatError::EmptyShape { rows: 2, cols: 0 });
    assert!(matches!(Scheme::MxFp8E4M3.shape(usize::MAX, 1 << 20), Err(FormatError::TooLarge { .. })));
    assert!(matches!(Scheme::MxFp8E4M3.shape(3, usize::MAX / 32 * 32), Err(FormatError::TooLarge { .. })));
    let err = FormatError::UnsupportedLayout { scheme: Scheme::Int4G32, layout: ScaleLayout::Swizzled128x4 };
    assert!(err.to_string().contains("use the linear layout"), "{err}");
}
