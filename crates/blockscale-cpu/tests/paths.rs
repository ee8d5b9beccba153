//! The AVX2 path against the portable path: identical bytes and values everywhere,
//! exhaustively where the domain allows (every f32 into every element encoder, every
//! amax bit pattern into the NVFP4 scale step), and on random matrices for the whole
//! pipeline, including thread counts and strides.

mod common;

use blockscale_cpu::__test_hooks as hooks;
use blockscale_cpu::{DequantizeOptions, NonFinite, QuantizeOptions, Simd, dequantize_into, dequantize_with, quantize};
use blockscale_formats::{ElementFormat, Fp8Tile, ScaleLayout, Scheme};
use half::{bf16, f16};
use ndarray::{Array2, s};

/// Every element format the encoders write.
const ENCODED: [ElementFormat; 6] = [
    ElementFormat::E2M1,
    ElementFormat::E2M3,
    ElementFormat::E3M2,
    ElementFormat::E4M3,
    ElementFormat::E5M2,
    ElementFormat::Int4,
];

/// All 2^32 f32 patterns in chunks, split over the cores.
fn sweep(check: impl Fn(&[f32]) + Sync) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    const CHUNK: u64 = 1 << 20;
    let chunks = (1u64 << 32) / CHUNK;
    std::thread::scope(|sc| {
        for t in 0..threads as u64 {
            let check = &check;
            sc.spawn(move || {
                let mut xs = vec![0f32; CHUNK as usize];
                for c in (t..chunks).step_by(threads) {
                    for (i, x) in xs.iter_mut().enumerate() {
                        *x = f32::from_bits((c * CHUNK + i as u64) as u32);
                    }
                    check(&xs);
                }
            });
        }
    });
}

#[test]
#[ignore = "all 2^32 f32 inputs through six encoders on both paths (about a minute); run by `cargo xtask test`"]
fn element_encoders_agree_on_every_f32() {
    if !common::require_avx2() {
        return;
    }
    sweep(|xs| {
        for e in ENCODED {
            let a = hooks::encode(Simd::Portable, e, false, xs, 1.0).unwrap();
            let b = hooks::encode(Simd::Avx2, e, false, xs, 1.0).unwrap();
            if a != b {
                let i = a.iter().zip(&b).position(|(p, q)| p != q).unwrap();
                panic!("{e}: byte {i} (near {:#010x}) portable {:#04x} avx2 {:#04x}", xs[i].to_bits(), a[i], b[i]);
            }
        }
    });
}

#[test]
#[ignore = "all 2^31 amax patterns through the NVFP4 scale step on both paths; run by `cargo xtask test`"]
fn nvfp4_scale_step_agrees_on_every_amax() {
    if !common::require_avx2() {
        return;
    }
    let gs = [1.0f32, 2688.0 / 3.3, 1e-30, f32::MAX];
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u32;
    const CHUNK: u32 = 1 << 20;
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                for c in (t..(1 << 31) / CHUNK).step_by(threads as usize) {
                    let amax: Vec<u32> = (c * CHUNK..(c + 1) * CHUNK).collect();
                    for g in gs {
                        let p = hooks::nvfp4_scales(Simd::Portable, &amax, g).unwrap();
                        let v = hooks::nvfp4_scales(Simd::Avx2, &amax, g).unwrap();
                        assert_eq!(p.0, v.0, "scale bytes, g {g}");
                        assert!(p.1.iter().zip(&v.1).all(|(a, b)| a.to_bits() == b.to_bits()), "factors, g {g}");
                    }
                }
            });
        }
    });
}

#[test]
fn element_encoders_agree_with_factors_and_division() {
    if !common::require_avx2() {
        return;
    }
    let xs = common::data(1 << 16, 11, true);
    for e in ENCODED {
        for f in [1.0f32, 0.37, 3.0e-5, 7.1e4, f32::MAX, 1e-40, 0.0, f32::NAN] {
            for div in [false, true] {
                let a = hooks::encode(Simd::Portable, e, div, &xs, f).unwrap();
                let b = hooks::encode(Simd::Avx2, e, div, &xs, f).unwrap();
                assert_eq!(a, b, "{e} factor {f} div {div}");
            }
        }
    }
}

#[test]
fn fp6_packing_and_unpacking_agree_with_the_formats_crate() {
    let bytes: Vec<u8> = common::data(400, 13, false).iter().map(|v| v.to_bits() as u8).collect();
    let simds: &[Simd] = if common::require_avx2() { &[Simd::Portable, Simd::Avx2] } else { &[Simd::Portable] };
    for &simd in simds {
        for len in (0..=400).step_by(4) {
            let want = blockscale_formats::pack::pack_fp6_vec::<u8>(&bytes[..len]).unwrap();
            assert_eq!(hooks::pack_fp6(simd, &bytes[..len]).unwrap(), want, "pack {simd:?}, {len} codes");
        }
        for len in (0..=300).step_by(3) {
            let want = blockscale_formats::pack::unpack_fp6_vec::<u8>(&bytes[..len]).unwrap();
            assert_eq!(hooks::unpack_fp6(simd, &bytes[..len]).unwrap(), want, "unpack {simd:?}, {len} bytes");
        }
    }
}

#[test]
fn decoders_agree_for_every_code_and_many_scales() {
    if !common::require_avx2() {
        return;
    }
    // Every code of each format, against 2^16 scales spread over the whole f32 range
    // (every bf16 pattern, NaN and Inf included), for all three output types.
    let scales: Vec<f32> = (0..=u16::MAX).map(|b| bf16::from_bits(b).to_f32()).collect();
    for (e, codes) in [
        (ElementFormat::E2M1, (0..16u8).map(|c| c | (c << 4)).cycle().take(32 * 8).collect::<Vec<u8>>()),
        (ElementFormat::Int4, (0..16u8).map(|c| c | ((15 - c) << 4)).cycle().take(32 * 8).collect()),
        (ElementFormat::E4M3, (0..=255u8).cycle().take(256).collect()),
        (ElementFormat::E5M2, (0..=255u8).cycle().take(256).collect()),
        (ElementFormat::E2M3, (0..64u8).cycle().take(256).collect()),
        (ElementFormat::E3M2, (0..64u8).cycle().take(256).collect()),
    ] {
        for (i, &s) in scales.iter().enumerate() {
            let post = [1.0f32, 0.01, 3.0e8][i % 3];
            let a = hooks::decode::<f32>(Simd::Portable, e, &codes, s, post).unwrap();
            let b = hooks::decode::<f32>(Simd::Avx2, e, &codes, s, post).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{e} f32 scale {s}");
            let a = hooks::decode::<bf16>(Simd::Portable, e, &codes, s, post).unwrap();
            let b = hooks::decode::<bf16>(Simd::Avx2, e, &codes, s, post).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{e} bf16 scale {s}");
            let a = hooks::decode::<f16>(Simd::Portable, e, &codes, s, post).unwrap();
            let b = hooks::decode::<f16>(Simd::Avx2, e, &codes, s, post).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{e} f16 scale {s}");
        }
    }
}

fn dequant_bits<O: blockscale_formats::Source>(
    q: &blockscale_cpu::QuantizedMatrix,
    simd: Simd,
    single: bool,
    bits: impl Fn(O) -> u32,
) -> Vec<u32> {
    dequantize_with::<O>(q, &DequantizeOptions { simd, single_threaded: single })
        .unwrap()
        .iter()
        .map(|&v| bits(v))
        .collect()
}

#[test]
fn whole_pipeline_agrees_across_paths_threads_and_strides() {
    let avx2 = common::require_avx2();
    let (rows, k) = (300, 256);
    let x = Array2::from_shape_vec((rows, k), common::data(rows * k, 5, true)).unwrap();
    // A strided view of the same values: every other column of a wider array, and a
    // transposed copy read back through .t().
    let mut wide = Array2::<f32>::zeros((rows, 2 * k));
    wide.slice_mut(s![.., ..;2]).assign(&x);
    let strided = wide.slice(s![.., ..;2]);
    let transposed = x.t().to_owned();
    for scheme in Scheme::ALL {
        let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
            ScaleLayout::Swizzled128x4
        } else {
            ScaleLayout::Linear
        };
        let base = QuantizeOptions::default().with_scale_layout(layout).with_non_finite(NonFinite::Poison);
        let reference = quantize(x.view(), scheme, &base.with_simd(Simd::Portable).with_single_thread(true)).unwrap();
        let mut variants = vec![
            quantize(x.view(), scheme, &base.with_simd(Simd::Portable)).unwrap(),
            quantize(strided, scheme, &base).unwrap(),
            quantize(transposed.t(), scheme, &base).unwrap(),
        ];
        if avx2 {
            variants.push(quantize(x.view(), scheme, &base.with_simd(Simd::Avx2).with_single_thread(true)).unwrap());
            variants.push(quantize(x.view(), scheme, &base.with_simd(Simd::Avx2)).unwrap());
        }
        for (i, v) in variants.iter().enumerate() {
            assert!(common::same_matrix(v, &reference), "{scheme}: variant {i} differs");
        }
        let simds: &[Simd] = if avx2 { &[Simd::Portable, Simd::Avx2] } else { &[Simd::Portable] };
        let want32 = dequant_bits::<f32>(&reference, Simd::Portable, true, f32::to_bits);
        let want16 = dequant_bits::<f16>(&reference, Simd::Portable, true, |v| v.to_bits() as u32);
        let wantb = dequant_bits::<bf16>(&reference, Simd::Portable, true, |v| v.to_bits() as u32);
        for &simd in simds {
            for single in [true, false] {
                assert_eq!(dequant_bits::<f32>(&reference, simd, single, f32::to_bits), want32, "{scheme} {simd:?}");
                assert_eq!(dequant_bits::<f16>(&reference, simd, single, |v| v.to_bits() as u32), want16, "{scheme}");
                assert_eq!(dequant_bits::<bf16>(&reference, simd, single, |v| v.to_bits() as u32), wantb, "{scheme}");
            }
        }
        // Into a strided output: the same values.
        let mut out = Array2::<f32>::from_elem((rows, 2 * k), f32::NAN);
        dequantize_into(&reference, out.slice_mut(s![.., 1..;2]), &DequantizeOptions::default()).unwrap();
        let got: Vec<u32> = out.slice(s![.., 1..;2]).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want32, "{scheme}: strided output");
        assert!(out.slice(s![.., ..;2]).iter().all(|v| v.is_nan()), "{scheme}: wrote outside the view");
    }
    // 128x128 tiles over a partial band.
    let q1 = quantize(
        x.view(),
        Scheme::Fp8Block(Fp8Tile::Tile128x128),
        &QuantizeOptions::default().with_non_finite(NonFinite::Poison),
    );
    assert!(q1.is_ok());
}
