//! Both routes and every ISA build the same operands, equal to the formats' values
//! times the scales; a NaN or infinite code anywhere makes every route refuse.

use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{DataLayout, Fp8Tile, QuantizedParts, ScaleFormat, ScaleLayout, Scheme, layout};

use super::*;

/// Codes in row-major order (FP6 packed, 4-bit two per byte), skipping NaN and
/// infinity codes.
fn codes(scheme: Scheme, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let table = scheme.element().table();
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(rows * k);
    while out.len() < rows * k {
        let c = (rng.next_u64() % table.len() as u64) as u8;
        if table[usize::from(c)].is_finite() {
            out.push(c);
        }
    }
    out
}

fn pack(scheme: Scheme, codes: &[u8]) -> Vec<u8> {
    match scheme.element().bits() {
        8 => codes.to_vec(),
        4 => codes.chunks_exact(2).map(|p| p[0] | p[1] << 4).collect(),
        _ => {
            let mut out = vec![0u8; codes.len() / 4 * 3];
            blockscale_formats::pack::pack_fp6(codes, &mut out).unwrap();
            out
        }
    }
}

/// A matrix of `scheme` with the given codes; scales exact powers of two (`pow2`) or
/// arbitrary f32 (FP8 block only).
fn matrix(
    scheme: Scheme,
    rows: usize,
    k: usize,
    codes: &[u8],
    layout_: ScaleLayout,
    pow2: bool,
    seed: u64,
) -> QuantizedMatrix {
    let (srows, cols) = (rows.div_ceil(scheme.block_rows()), k / scheme.block_size());
    let mut rng = SplitMix64::new(seed);
    let mut draw = || rng.next_u64();
    let scales = match scheme.scale_format() {
        ScaleFormat::UE8M0 => {
            let linear: Vec<u8> = (0..srows * cols).map(|_| 120 + (draw() % 16) as u8).collect();
            match layout_ {
                ScaleLayout::Linear => ScaleData::Bytes(linear),
                ScaleLayout::Swizzled128x4 => {
                    ScaleData::Bytes(layout::convert_vec(&linear, ScaleLayout::Linear, layout_, srows, cols).unwrap())
                }
            }
        }
        ScaleFormat::UE4M3 => {
            let linear: Vec<u8> = (0..srows * cols).map(|_| 0x20 + (draw() % 0x30) as u8).collect();
            match layout_ {
                ScaleLayout::Linear => ScaleData::Bytes(linear),
                ScaleLayout::Swizzled128x4 => {
                    ScaleData::Bytes(layout::convert_vec(&linear, ScaleLayout::Linear, layout_, srows, cols).unwrap())
                }
            }
        }
        ScaleFormat::F32 => ScaleData::F32(
            (0..srows * cols)
                .map(|_| {
                    let e = (draw() % 9) as i32 - 4;
                    let m = if pow2 { 1.0 } else { 1.0 + (draw() % (1 << 20)) as f32 / (1 << 20) as f32 };
                    m * 2f32.powi(e)
                })
                .collect(),
        ),
        ScaleFormat::F16 => unreachable!("no INT4 pairs"),
    };
    let global_scale = scheme.has_global_scale().then(|| blockscale_formats::GlobalScale::from_encode(1.0).unwrap());
    QuantizedMatrix::from_parts(QuantizedParts {
        scheme,
        rows,
        k,
        data: pack(scheme, codes),
        data_layout: DataLayout::RowMajor,
        scales,
        scale_layout: layout_,
        global_scale,
    })
    .unwrap()
}

fn isas() -> Vec<Isa> {
    let mut v = vec![Isa::Portable];
    if crate::avx2_available() {
        v.push(Isa::Avx2);
    }
    if crate::avx512_available() {
        v.push(Isa::Avx512);
    }
    v
}

/// The bf16 bits `rows` and `panels` should hold for element (r, c): its value times
/// its scale for `Scaled`, its value for `Elements` (exact by the choice of data).
fn want(q: &QuantizedMatrix, codes: &[u8], values: Values, r: usize, c: usize) -> u16 {
    let v = q.scheme().element().table()[usize::from(codes[r * q.k() + c])];
    let s = match values {
        Values::Elements => 1.0,
        Values::Scaled => q.scale(r, c / q.scheme().block_size()).unwrap(),
    };
    let x = v * s;
    assert_eq!(f32::from(bf16::from_f32(x)), x, "test data must be exact in bf16");
    bf16::from_f32(x).to_bits()
}

#[test]
fn every_route_and_isa_builds_the_same_operands() {
    let schemes = [
        Scheme::MxFp8E4M3,
        Scheme::MxFp8E5M2,
        Scheme::Fp8Block(Fp8Tile::Row1x128),
        Scheme::Fp8Block(Fp8Tile::Tile128x128),
        Scheme::MxFp6E2M3,
        Scheme::MxFp6E3M2,
        Scheme::MxFp4,
        Scheme::NvFp4,
    ];
    for scheme in schemes {
        for &(rows, k) in &[(1, 128), (17, 256), (32, 128), (45, 384), (70, 128)] {
            let k = if scheme.block_size() == 128 { k } else { k - 32 };
            let cs = codes(scheme, rows, k, (rows * 1000 + k) as u64);
            for layout_ in ScaleLayout::ALL.into_iter().filter(|&l| scheme.supports_layout(l)) {
                for (values, pow2) in [(Values::Elements, false), (Values::Scaled, true)] {
                    let q = matrix(scheme, rows, k, &cs, layout_, pow2, rows as u64);
                    // The scaled kernel reads K as it is; the other one a padded K.
                    let kp = if values == Values::Elements { k } else { k.next_multiple_of(32) + 32 };
                    let ctx = format!("{scheme} {rows}x{k} {layout_}");
                    for isa in isas() {
                        for parallel in [false, true] {
                            let a = rows_of(&q, isa, values, kp, parallel, &ctx);
                            let b = panels_of(&q, isa, values, kp, parallel, &ctx);
                            for r in 0..rows {
                                for c in 0..kp {
                                    let w = if c < k { want(&q, &cs, values, r, c) } else { 0 };
                                    assert_eq!(a.values[r * kp + c].to_bits(), w, "rows {ctx} {isa:?} ({r}, {c})");
                                    let word = b.values[(r / PANEL * (kp / 2) + c / 2) * PANEL + r % PANEL];
                                    assert_eq!((word >> (16 * (c % 2))) as u16, w, "panels {ctx} {isa:?} ({r}, {c})");
                                }
                            }
                            // Rows past the matrix are zero.
                            for r in rows..rows.next_multiple_of(PANEL) {
                                for t in 0..kp / 2 {
                                    assert_eq!(b.values[(r / PANEL * (kp / 2) + t) * PANEL + r % PANEL], 0, "{ctx}");
                                }
                            }
                            check_scales(&q, values, &a, &b, &ctx);
                        }
                    }
                }
            }
        }
    }
}

fn rows_of(q: &QuantizedMatrix, isa: Isa, values: Values, kp: usize, parallel: bool, ctx: &str) -> Rows {
    rows(q, isa, values, kp, parallel).unwrap_or_else(|| panic!("rows {ctx} {isa:?}: refused finite data"))
}

fn panels_of(q: &QuantizedMatrix, isa: Isa, values: Values, kp: usize, parallel: bool, ctx: &str) -> Panels {
    panels(q, isa, values, kp, parallel).unwrap_or_else(|| panic!("panels {ctx} {isa:?}: refused finite data"))
}

fn check_scales(q: &QuantizedMatrix, values: Values, a: &Rows, b: &Panels, ctx: &str) {
    if values == Values::Scaled {
        assert!(a.scales.is_empty() && b.scales.is_empty(), "{ctx}");
        return;
    }
    let nb = q.k() / q.scheme().block_size();
    for r in 0..q.rows() {
        for kb in 0..nb {
            let s = q.scale(r, kb).unwrap().to_bits();
            assert_eq!(a.scales[r * nb + kb].to_bits(), s, "{ctx} ({r}, {kb})");
            assert_eq!(b.scales[(r / PANEL * nb + kb) * PANEL + r % PANEL].to_bits(), s, "{ctx} ({r}, {kb})");
        }
    }
}

#[test]
fn a_non_finite_code_anywhere_is_refused_on_every_route() {
    for (scheme, bad) in [
        (Scheme::MxFp8E4M3, [0x7f_u8, 0xff]),
        (Scheme::Fp8Block(Fp8Tile::Tile128x128), [0x7f, 0xff]),
        (Scheme::MxFp8E5M2, [0x7c, 0xfe]),
    ] {
        let (n, k) = (40, 256);
        let clean = codes(scheme, n, k, 7);
        for (i, at) in [0, 1, 31, 32, 33 * k + 200, n * k - 1].into_iter().enumerate() {
            let mut cs = clean.clone();
            cs[at] = bad[i % 2];
            let q = matrix(scheme, n, k, &cs, ScaleLayout::Linear, true, 3);
            for isa in isas() {
                for values in [Values::Elements, Values::Scaled] {
                    for parallel in [false, true] {
                        assert!(rows(&q, isa, values, k, parallel).is_none(), "{scheme} {isa:?} code {at}");
                        assert!(panels(&q, isa, values, k, parallel).is_none(), "{scheme} {isa:?} code {at}");
                    }
                }
            }
        }
    }
}
