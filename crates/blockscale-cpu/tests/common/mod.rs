//! Test support: an independent reference quantizer written straight from
//! docs/NUMERICS.md (one element at a time, scalar conversions of the formats crate,
//! which its own tests pin to NVIDIA's functions; no bands, layouts, SIMD or kernels),
//! and seeded test data.
#![allow(dead_code)]

use blockscale_cpu::{NvFp4Recipe, QuantizedMatrix};
use blockscale_formats::{
    E2M1, E2M3, E3M2, E4M3, E5M2, ElementFormat, Int4, ScaleData, ScaleLayout, ScaleRule, Scheme, UE4M3, UE8M0, layout,
};
use half::f16;
use proptest::prelude::RngExt;
pub use proptest::prelude::RngExt as _RngExtForTests;
use proptest::test_runner::{RngAlgorithm, TestRng};

/// A seeded generator.
pub fn rng(seed: u64) -> TestRng {
    TestRng::from_seed(RngAlgorithm::ChaCha, &seed.to_le_bytes().repeat(4))
}

/// Activation-like values with outliers, exact zeros, ties and (if `specials`) NaN/Inf.
pub fn data(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n)
        .map(|i| {
            let u: f32 = r.random_range(-1.0..1.0);
            match r.random_range(0..100) {
                0 if specials => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3],
                1 => 0.0,
                2 => -0.0,
                3 => u * 1e4,
                4 => u * 1e-6,
                5 => [0.25f32, 0.75, 2.5, 5.0, 448.0, 464.0, 6.0][i % 7] * if u < 0.0 { -1.0 } else { 1.0 },
                _ => u * 2f32.powi(r.random_range(-8..8)),
            }
        })
        .collect()
}

/// What the reference produces: row-major packed data and linear scales.
#[derive(Debug, PartialEq)]
pub struct Reference {
    pub data: Vec<u8>,
    pub scales: ScaleData,
}

/// `RN(1/6)`.
pub const C6: f32 = 1.0 / 6.0;

fn max_abs(xs: &[f32]) -> Option<f32> {
    // None: the block holds a NaN or an infinity.
    xs.iter().try_fold(0.0f32, |m, &x| x.is_finite().then(|| m.max(x.abs())))
}

fn nvfp4_block(amax: f32, g: f32, recipe: NvFp4Recipe) -> (u8, f32) {
    match recipe {
        NvFp4Recipe::LightX2V => {
            let sf = UE4M3::from_f32(g * (amax * C6));
            let mult = if sf.to_bits() != 0 { (g * (1.0 / sf.to_f32())).min(f32::MAX) } else { 0.0 };
            (sf.to_bits(), mult)
        }
        NvFp4Recipe::TransformerEngine => {
            if amax == 0.0 {
                return (0, 0.0);
            }
            let sf = UE4M3::from_f32((amax * (g * C6)).min(f32::MAX));
            (sf.to_bits(), (1.0 / (sf.to_f32() * (1.0 / g))).min(f32::MAX))
        }
    }
}

fn encode_element(e: ElementFormat, y: f32) -> u8 {
    match e {
        ElementFormat::E2M1 => E2M1::from_f32(y).to_bits(),
        ElementFormat::E2M3 => E2M3::from_f32(y).to_bits(),
        ElementFormat::E3M2 => E3M2::from_f32(y).to_bits(),
        ElementFormat::E4M3 => E4M3::from_f32(y).to_bits(),
        ElementFormat::E5M2 => E5M2::from_f32(y).to_bits(),
        ElementFormat::Int4 => Int4::from_f32(y).to_offset8_bits(),
    }
}

/// Packs codes (one per element, row-major) the way FORMATS.md says, bit by bit.
pub fn pack_codes(codes: &[u8], bits: usize) -> Vec<u8> {
    let mut out = vec![0u8; codes.len() * bits / 8];
    for (i, &c) in codes.iter().enumerate() {
        for b in 0..bits {
            let bit = i * bits + b;
            out[bit / 8] |= ((c >> b) & 1) << (bit % 8);
        }
    }
    out
}

/// The reference quantizer. `g` is NVFP4's encode scale (ignored otherwise).
pub fn reference(
    x: &[f32],
    rows: usize,
    k: usize,
    scheme: Scheme,
    rule: ScaleRule,
    recipe: NvFp4Recipe,
    g: f32,
) -> Reference {
    let block = scheme.block_size();
    let brows = scheme.block_rows();
    let element = scheme.element();
    let cols = k / block;
    let srows = rows.div_ceil(brows);
    let mut codes = vec![0u8; rows * k];
    let (mut bytes, mut f32s, mut f16s) =
        (vec![0u8; srows * cols], vec![0f32; srows * cols], vec![f16::ZERO; srows * cols]);
    for sr in 0..srows {
        for c in 0..cols {
            let rows_here = (sr * brows)..((sr + 1) * brows).min(rows);
            let mut values = Vec::new();
            for r in rows_here.clone() {
                values.extend_from_slice(&x[r * k + c * block..r * k + (c + 1) * block]);
            }
            let amax = max_abs(&values);
            let at = sr * cols + c;
            // (factor, multiply?) ; NaN factor = poisoned block.
            let (factor, mul) = match scheme {
                Scheme::NvFp4 => {
                    let (sf, f) = amax.map_or((0x7f, f32::NAN), |a| nvfp4_block(a, g, recipe));
                    bytes[at] = sf;
                    (f, true)
                }
                Scheme::Fp8Block(_) => {
                    let s = amax.map_or(f32::NAN, |a| a / 448.0);
                    f32s[at] = s;
                    (s, false)
                }
                Scheme::Int4G32 | Scheme::Int4G128 => {
                    let s = amax.map_or(f16::NAN, |a| {
                        let s = f16::from_f32(a / 7.0);
                        if s.is_infinite() { f16::MAX } else { s }
                    });
                    f16s[at] = s;
                    (s.to_f32(), false)
                }
                _ => {
                    let s = amax.map_or(UE8M0::NAN, |a| rule.select(a, element));
                    bytes[at] = s.to_bits();
                    (s.recip_f32(), true)
                }
            };
            for r in rows_here {
                for i in 0..block {
                    let col = c * block + i;
                    let v = x[r * k + col];
                    codes[r * k + col] = if factor == 0.0 || factor.is_nan() {
                        if element == ElementFormat::Int4 { 8 } else { 0 }
                    } else {
                        encode_element(element, if mul { v * factor } else { v / factor })
                    };
                }
            }
        }
    }
    let data = pack_codes(&codes, element.bits() as usize);
    let scales = match scheme {
        Scheme::Fp8Block(_) => ScaleData::F32(f32s),
        Scheme::Int4G32 | Scheme::Int4G128 => ScaleData::F16(f16s),
        _ => ScaleData::Bytes(bytes),
    };
    Reference { data, scales }
}

/// A quantized matrix's scales in the linear layout.
pub fn linear_scales(q: &QuantizedMatrix) -> ScaleData {
    let s = q.shape();
    match (q.scales(), q.scale_layout()) {
        (ScaleData::Bytes(b), ScaleLayout::Swizzled128x4) => ScaleData::Bytes(
            layout::convert_vec(b, ScaleLayout::Swizzled128x4, ScaleLayout::Linear, s.scale_rows, s.scale_cols)
                .unwrap(),
        ),
        (other, _) => other.clone(),
    }
}

/// Bitwise equality of scale data (NaN == NaN when the bits match).
pub fn same_scales(a: &ScaleData, b: &ScaleData) -> bool {
    match (a, b) {
        (ScaleData::Bytes(x), ScaleData::Bytes(y)) => x == y,
        (ScaleData::F32(x), ScaleData::F32(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        (ScaleData::F16(x), ScaleData::F16(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
        _ => false,
    }
}

/// Whether AVX2 comparisons must run: under CI on x86-64 a missing AVX2 is a failure
/// (the comparison would otherwise pass vacuously).
pub fn require_avx2() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if !blockscale_cpu::avx2_available() {
        assert!(!(ci && cfg!(target_arch = "x86_64")), "CI expects AVX2 on x86-64 so that the SIMD path is tested");
        eprintln!("SKIPPED: this CPU has no AVX2; only the portable path is tested");
        return false;
    }
    true
}

/// Bitwise equality of two quantized matrices (NaN scales compare by bits).
pub fn same_matrix(a: &QuantizedMatrix, b: &QuantizedMatrix) -> bool {
    a.shape() == b.shape()
        && a.data() == b.data()
        && a.data_layout() == b.data_layout()
        && a.scale_layout() == b.scale_layout()
        && a.global_scale() == b.global_scale()
        && same_scales(a.scales(), b.scales())
}
