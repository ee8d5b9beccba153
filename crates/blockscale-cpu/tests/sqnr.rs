//! Accuracy sanity: SQNR of each scheme on Gaussian data stays above a documented
//! lower bound (docs/NUMERICS.md, "Accuracy"), and the metrics follow their
//! definitions on hand-made inputs.

mod common;

use blockscale_cpu::{QuantizeOptions, error_metrics, error_metrics_slice, fake_quantize};
use blockscale_formats::{Fp8Tile, ScaleRule, Scheme};
use ndarray::Array2;
use proptest::prelude::RngExt;

/// Standard normal samples (Box-Muller on the seeded generator).
fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut r = common::rng(seed);
    (0..n)
        .map(|_| {
            let u1: f64 = r.random_range(f64::MIN_POSITIVE..1.0);
            let u2: f64 = r.random_range(0.0..1.0);
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
        })
        .collect()
}

/// (scheme, rule, lower bound in dB). Measured on 512 x 4096 N(0, 1) values (seed 1):
/// NVFP4 20.43, MXFP4 18.76 (Rceil) / 18.79 (Floor) / 19.03 (Even), MXFP6 E2M3 30.97,
/// E3M2 25.55, MXFP8 E4M3 31.53, E5M2 25.55, FP8 block 1x128 31.79, 128x128 31.56,
/// INT4-G32 20.27. The bounds sit about 0.5 dB below, so a real regression (a wrong
/// rounding, a lost bit) fails while a different seed does not.
const BOUNDS: [(Scheme, ScaleRule, f64); 12] = [
    (Scheme::NvFp4, ScaleRule::Rceil, 19.9),
    (Scheme::MxFp4, ScaleRule::Rceil, 18.2),
    (Scheme::MxFp4, ScaleRule::Floor, 18.2),
    (Scheme::MxFp4, ScaleRule::Even, 18.5),
    (Scheme::MxFp6E2M3, ScaleRule::Rceil, 30.4),
    (Scheme::MxFp6E3M2, ScaleRule::Rceil, 25.0),
    (Scheme::MxFp8E4M3, ScaleRule::Rceil, 31.0),
    (Scheme::MxFp8E5M2, ScaleRule::Rceil, 25.0),
    (Scheme::Fp8Block(Fp8Tile::Row1x128), ScaleRule::Rceil, 31.2),
    (Scheme::Fp8Block(Fp8Tile::Tile128x128), ScaleRule::Rceil, 31.0),
    (Scheme::Int4G32, ScaleRule::Rceil, 19.7),
    (Scheme::Int4G128, ScaleRule::Rceil, 18.1),
];

#[test]
fn gaussian_sqnr_is_above_the_documented_bounds() {
    let (rows, k) = (512, 4096);
    let x = Array2::from_shape_vec((rows, k), gaussian(rows * k, 1)).unwrap();
    for (scheme, rule, bound) in BOUNDS {
        let y = fake_quantize(x.view(), scheme, &QuantizeOptions::default().with_scale_rule(rule)).unwrap();
        let m = error_metrics(x.view(), y.view()).unwrap();
        println!("{scheme:<18} {rule:<6} SQNR {:.2} dB, cosine {:.5}", m.sqnr_db, m.cosine);
        assert!(m.sqnr_db >= bound, "{scheme} {rule}: {:.2} dB < {bound} dB", m.sqnr_db);
        assert!(m.cosine > 0.99, "{scheme}");
    }
}

#[test]
fn metrics_follow_their_definitions() {
    // r = [3, -4, 0, 1], a = [3, -3, 0.5, 1]: e = [0, 1, 0.5, 0].
    let r = [3.0f32, -4.0, 0.0, 1.0];
    let a = [3.0f32, -3.0, 0.5, 1.0];
    let m = error_metrics_slice(&r, &a).unwrap();
    let (rr, ee, ra, aa) = (26.0f64, 1.25f64, 22.0f64, 19.25f64);
    assert_eq!(m.sqnr_db, 10.0 * (rr / ee).log10());
    assert_eq!(m.cosine, ra / (rr.sqrt() * aa.sqrt()));
    assert_eq!(m.max_abs, 1.0);
    assert_eq!(m.max_rel, 0.25); // the zero reference value is skipped
    assert_eq!(m.rmse, (ee / 4.0).sqrt());
    assert_eq!(m.count, 4);
    let exact = error_metrics_slice(&r, &r).unwrap();
    assert_eq!((exact.sqnr_db, exact.max_abs), (f64::INFINITY, 0.0));
    assert!((exact.cosine - 1.0).abs() < 1e-15, "{}", exact.cosine);
    let zeros = error_metrics_slice(&[0.0f32; 3], &[0.0f32; 3]).unwrap();
    assert_eq!((zeros.cosine, zeros.max_rel), (1.0, 0.0));
    assert_eq!(error_metrics_slice(&[0.0f32, 0.0], &[1.0f32, 0.0]).unwrap().cosine, 0.0);
    let nan = error_metrics_slice(&[1.0f32, 2.0], &[f32::NAN, 2.0]).unwrap();
    assert!(nan.sqnr_db.is_nan() && nan.max_abs.is_nan() && nan.cosine.is_nan());
    assert!(error_metrics_slice(&[1.0f32], &[1.0f32, 2.0]).is_err());
}
