//! quantize() against the independent reference in `common` (written from
//! docs/NUMERICS.md, one element at a time): identical bytes for every scheme, NVFP4
//! recipe and MX rule, both scale layouts, all three input types, both kernel paths,
//! shapes with partial 128-row bands, and data with zeros, ties, outliers, NaN and Inf
//! (poisoned blocks).

mod common;

use blockscale_cpu::{GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizeOptions, Simd, quantize};
use blockscale_formats::{GlobalScale, ScaleLayout, ScaleRule, Scheme};
use half::{bf16, f16};
use ndarray::Array2;

fn check_all(rows: usize, k: usize, seed: u64) {
    check_data(rows, k, common::data(rows * k, seed, true));
}

fn check_data(rows: usize, k: usize, raw: Vec<f32>) {
    // The reference sees exactly the values each input type holds.
    let inputs: [(&str, Vec<f32>); 3] = [
        ("f32", raw.clone()),
        ("bf16", raw.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()),
        ("f16", raw.iter().map(|&v| f16::from_f32(v).to_f32()).collect()),
    ];
    let mut simds = vec![Simd::Portable];
    if common::require_avx2() {
        simds.push(Simd::Avx2);
    }
    for (ty, x) in &inputs {
        let finite_amax = x.iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
        for scheme in Scheme::ALL {
            if !k.is_multiple_of(scheme.block_size()) {
                continue;
            }
            let variants: Vec<(ScaleRule, NvFp4Recipe)> = match scheme {
                Scheme::NvFp4 => {
                    vec![(ScaleRule::Rceil, NvFp4Recipe::LightX2V), (ScaleRule::Rceil, NvFp4Recipe::TransformerEngine)]
                }
                Scheme::Fp8Block(_) | Scheme::Int4G32 | Scheme::Int4G128 => {
                    vec![(ScaleRule::Rceil, NvFp4Recipe::LightX2V)]
                }
                _ => ScaleRule::ALL.iter().map(|&r| (r, NvFp4Recipe::LightX2V)).collect(),
            };
            for (rule, recipe) in variants {
                let g = GlobalScale::from_amax(finite_amax).unwrap().encode();
                let want = common::reference(x, rows, k, scheme, rule, recipe, g);
                for &layout in &ScaleLayout::ALL {
                    if !scheme.supports_layout(layout) {
                        continue;
                    }
                    for &simd in &simds {
                        let opts = QuantizeOptions::default()
                            .with_scale_rule(rule)
                            .with_nvfp4_recipe(recipe)
                            .with_scale_layout(layout)
                            .with_non_finite(NonFinite::Poison)
                            .with_simd(simd);
                        let q = match *ty {
                            "f32" => {
                                quantize(Array2::from_shape_vec((rows, k), x.clone()).unwrap().view(), scheme, &opts)
                            }
                            "bf16" => quantize(
                                Array2::from_shape_vec((rows, k), x.iter().map(|&v| bf16::from_f32(v)).collect())
                                    .unwrap()
                                    .view(),
                                scheme,
                                &opts,
                            ),
                            _ => quantize(
                                Array2::from_shape_vec((rows, k), x.iter().map(|&v| f16::from_f32(v)).collect())
                                    .unwrap()
                                    .view(),
                                scheme,
                                &opts,
                            ),
                        }
                        .unwrap();
                        let what = format!("{scheme} {rule} {recipe:?} {layout} {simd:?} {ty} [{rows}x{k}]");
                        if let Some(i) = q.data().iter().zip(&want.data).position(|(a, b)| a != b) {
                            panic!("{what}: data byte {i} is {:#04x}, reference {:#04x}", q.data()[i], want.data[i]);
                        }
                        assert_eq!(q.data().len(), want.data.len(), "{what}");
                        assert!(common::same_scales(&common::linear_scales(&q), &want.scales), "{what}: scales differ");
                        if scheme == Scheme::NvFp4 {
                            assert_eq!(q.global_scale().unwrap().encode(), g, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_scheme_matches_the_reference() {
    check_all(3, 256, 1);
    check_all(130, 128, 2); // a partial second band
    check_all(257, 384, 3);
}

#[test]
fn tiny_and_subnormal_blocks_match_the_reference() {
    // Blocks (and 128-row tiles) whose amax is an f32 subnormal, or a normal just above
    // the subnormal range: the scale steps' underflow edges (UE4M3 0, UE8M0 2^-127, FP8
    // scales that are themselves subnormal, INT4 f16 scales that round to 0).
    let (rows, k) = (130, 256);
    let base = common::data(rows * k, 21, false);
    let x: Vec<f32> = base
        .iter()
        .enumerate()
        .map(|(i, &v)| match (i / 16) % 4 {
            0 => v * 1e-41,
            1 => v * 1e-37,
            2 => v * 3e-39,
            _ => v,
        })
        .collect();
    check_data(rows, k, x);
}

#[test]
fn given_and_calibrated_global_scales() {
    let (rows, k) = (20, 64);
    let x = common::data(rows * k, 7, false);
    let arr = Array2::from_shape_vec((rows, k), x.clone()).unwrap();
    for (source, g) in [
        (GlobalScaleSource::Amax(3.0), 2688.0 / 3.0),
        (GlobalScaleSource::Given(GlobalScale::from_decode(0.01).unwrap()), 1.0 / 0.01),
        (GlobalScaleSource::Given(GlobalScale::from_encode(1.0).unwrap()), 1.0),
    ] {
        let q = quantize(arr.view(), Scheme::NvFp4, &QuantizeOptions::default().with_global_scale(source)).unwrap();
        let want = common::reference(&x, rows, k, Scheme::NvFp4, ScaleRule::Rceil, NvFp4Recipe::LightX2V, g);
        assert_eq!(q.data(), &want.data[..], "{source:?}");
        assert!(common::same_scales(q.scales(), &want.scales), "{source:?}");
        assert_eq!(q.global_scale().unwrap().encode(), g);
    }
}
