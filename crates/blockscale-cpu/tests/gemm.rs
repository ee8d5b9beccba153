//! GEMM and GEMV against an f64 triple loop over values built in the test itself: codes
//! and scales are drawn here, the truth is `table[code] * scale` from the formats
//! crate's element tables, and the operands are assembled with the formats crate's
//! packing and swizzle functions. Nothing of blockscale-cpu computes an expected value.

mod common;

use blockscale_cpu::{
    Activation, ActivationPrecision, CpuError, Epilogue, GemmOptions, PanelWeights, QuantizedMatrix, Simd, gemm,
    gemm_reference, gemm_weight_only, gemm_weight_only_panels, gemm_weight_only_reference, gemv, gemv_panels,
};
use blockscale_formats::{
    DataLayout, Fp8Tile, GlobalScale, QuantizedParts, ScaleData, ScaleFormat, ScaleLayout, Scheme, UE4M3, layout, pack,
};
use common::{_RngExtForTests as _, pack_codes, rng};
use half::{bf16, f16};
use ndarray::{Array2, ArrayView2};

/// A quantized operand and its exact values (`value(code) * block scale`; the NVFP4
/// per-tensor scale is 1 unless set).
struct Operand {
    q: QuantizedMatrix,
    values: Vec<f64>,
}

/// The value of a stored code (INT4-G32 stores offset-8 nibbles).
fn code_value(scheme: Scheme, code: u8) -> f64 {
    if scheme.element() == blockscale_formats::ElementFormat::Int4 {
        code as f64 - 8.0
    } else {
        scheme.element().table()[code as usize] as f64
    }
}

/// Draws an operand. `friendly`: element values are multiples of 1/2 up to 8 and scales
/// are 1/2, 1 or 2, so every partial sum of a modest product is exact in f32.
fn operand(
    scheme: Scheme,
    rows: usize,
    k: usize,
    scale_layout: ScaleLayout,
    data_layout: DataLayout,
    friendly: bool,
    seed: u64,
) -> Operand {
    let mut r = rng(seed);
    let bits = scheme.element().bits() as usize;
    let codes_allowed: Vec<u8> = (0..1u16 << bits)
        .map(|c| c as u8)
        .filter(|&c| {
            let v = code_value(scheme, c);
            v.is_finite() && (!friendly || (v.abs() <= 8.0 && (2.0 * v).fract() == 0.0))
        })
        .collect();
    let codes: Vec<u8> = (0..rows * k).map(|_| codes_allowed[r.random_range(0..codes_allowed.len())]).collect();
    let (bs, br) = (scheme.block_size(), scheme.block_rows());
    let (srows, cols) = (rows.div_ceil(br), k / bs);
    let pow2 = |r: &mut proptest::test_runner::TestRng| 2f32.powi(r.random_range(-1..=1));
    let scale_values: Vec<f32> = (0..srows * cols)
        .map(|_| match (scheme.scale_format(), friendly) {
            (_, true) => pow2(&mut r),
            (ScaleFormat::UE4M3, false) => UE4M3::from_bits(r.random_range(0x20..0x50)).to_f32(),
            (ScaleFormat::UE8M0, false) => 2f32.powi(r.random_range(-12..12)),
            (ScaleFormat::F32, false) => r.random_range(1e-3f32..1e2),
            (ScaleFormat::F16, false) => f16::from_f32(r.random_range(1e-3f32..1e2)).to_f32(),
        })
        .collect();
    let linear = match scheme.scale_format() {
        ScaleFormat::UE4M3 => ScaleData::Bytes(scale_values.iter().map(|&s| UE4M3::from_f32(s).to_bits()).collect()),
        ScaleFormat::UE8M0 => ScaleData::Bytes(scale_values.iter().map(|&s| (s.log2() as i32 + 127) as u8).collect()),
        ScaleFormat::F32 => ScaleData::F32(scale_values.clone()),
        ScaleFormat::F16 => ScaleData::F16(scale_values.iter().map(|&s| f16::from_f32(s)).collect()),
    };
    let scales = match (linear, scale_layout) {
        (ScaleData::Bytes(b), ScaleLayout::Swizzled128x4) => ScaleData::Bytes(
            layout::convert_vec(&b, ScaleLayout::Linear, ScaleLayout::Swizzled128x4, srows, cols).unwrap(),
        ),
        (s, _) => s,
    };
    let mut data = pack_codes(&codes, bits);
    if data_layout == DataLayout::BlockInterleaved {
        let mut words = vec![0u32; data.len() / 4];
        pack::words_from_le_bytes(&data, &mut words).unwrap();
        let inter = pack::to_block_interleaved_vec(&words, rows, k).unwrap();
        pack::le_bytes_from_words(&inter, &mut data).unwrap();
    }
    let global_scale = (scheme == Scheme::NvFp4).then(|| GlobalScale::from_encode(1.0).unwrap());
    let q = QuantizedMatrix::from_parts(QuantizedParts {
        scheme,
        rows,
        k,
        data,
        data_layout,
        scales,
        scale_layout,
        global_scale,
    })
    .unwrap();
    let values = (0..rows * k)
        .map(|i| {
            let (row, col) = (i / k, i % k);
            code_value(scheme, codes[i]) * scale_values[(row / br) * cols + col / bs] as f64
        })
        .collect();
    Operand { q, values }
}

/// `sum_k a[i, k] * b[j, k]` and `sum_k |a[i, k] * b[j, k]|`, in f64.
/// Random weights of `scheme` (row-major, scales in `layout`) and f32 activations from
/// `seed`, with the oracle's exact sums and sums of magnitudes of their product.
fn random_product(
    scheme: Scheme,
    (m, n, k): (usize, usize, usize),
    layout: ScaleLayout,
    seed: u64,
) -> (Operand, Vec<f32>, (Vec<f64>, Vec<f64>)) {
    let w = operand(scheme, n, k, layout, DataLayout::RowMajor, false, seed);
    let xs = activations(m, k, false, seed + 1);
    let xv: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
    let sums = oracle(&xv, &w.values, m, n, k);
    (w, xs, sums)
}

fn oracle(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut sum = vec![0f64; m * n];
    let mut abs = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for t in 0..k {
                let p = a[i * k + t] * b[j * k + t];
                sum[i * n + j] += p;
                abs[i * n + j] += p.abs();
            }
        }
    }
    (sum, abs)
}

fn layouts(scheme: Scheme) -> Vec<ScaleLayout> {
    ScaleLayout::ALL.into_iter().filter(|&l| scheme.supports_layout(l)).collect()
}

fn data_layouts(scheme: Scheme, k: usize) -> Vec<DataLayout> {
    let mut v = vec![DataLayout::RowMajor];
    if scheme.element().bits() == 4 && k.is_multiple_of(32) {
        v.push(DataLayout::BlockInterleaved);
    }
    v
}

const PAIRS: [(Scheme, Scheme); 11] = [
    (Scheme::NvFp4, Scheme::NvFp4),
    (Scheme::MxFp4, Scheme::MxFp4),
    (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
    (Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
    (Scheme::MxFp6E2M3, Scheme::MxFp8E4M3),
    (Scheme::MxFp6E3M2, Scheme::MxFp8E4M3),
    (Scheme::MxFp8E5M2, Scheme::MxFp6E2M3),
    (Scheme::MxFp6E3M2, Scheme::MxFp6E3M2),
    (Scheme::MxFp4, Scheme::MxFp8E4M3),
    (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
    (Scheme::Fp8Block(Fp8Tile::Tile128x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
];

/// Every kernel family this CPU has (under CI the AVX2 and AVX-512 ones must exist:
/// `common::require_avx2`).
fn simds() -> Vec<Simd> {
    let mut v = vec![Simd::Portable];
    if common::require_avx2() {
        v.push(Simd::Avx2);
    }
    if blockscale_cpu::avx512_available() {
        v.push(Simd::Avx512);
    }
    v
}

/// The documented bound of the fast path (docs/NUMERICS.md): `n u / (1 - n u) T` with
/// `n = K + K/B + B + 8`.
fn fast_bound(k: usize, bs: usize, t: f64) -> f64 {
    let nu = (k + k / bs + bs + 8) as f64 * 2f64.powi(-24);
    nu / (1.0 - nu) * t
}

fn bits_eq(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits())
}

#[test]
fn quantized_pairs_are_exact_on_friendly_inputs() {
    let shapes = [(1, 1, 128), (3, 37, 256), (130, 5, 128), (17, 131, 384)];
    let mut seed = 0;
    for (sa, sb) in PAIRS {
        for (m, n, k) in shapes {
            for (la, lb) in layouts(sa)
                .into_iter()
                .zip(layouts(sb).into_iter().cycle())
                .chain([(*layouts(sa).last().unwrap(), layouts(sb)[0])])
            {
                // Every data layout on each side, and both row-major (the 4-bit pairs'
                // panel kernels take only that).
                let pairs = data_layouts(sa, k).into_iter().zip(data_layouts(sb, k).into_iter().rev().cycle());
                for (da, db) in pairs.chain([(DataLayout::RowMajor, DataLayout::RowMajor)]) {
                    seed += 1;
                    let a = operand(sa, m, k, la, da, true, seed);
                    let b = operand(sb, n, k, lb, db, true, seed + 1000);
                    let (exact, _) = oracle(&a.values, &b.values, m, n, k);
                    // The test's own premise: every sum is an f32.
                    assert!(exact.iter().all(|&v| (v as f32) as f64 == v), "{sa} x {sb}: data not f32-exact");
                    let want: Vec<f32> = exact.iter().map(|&v| v as f32).collect();
                    let ctx = format!("{sa} ({la:?}, {da}) x {sb} ({lb:?}, {db}), {m}x{n}x{k}");
                    let got = gemm_reference::<f32>(&a.q, &b.q, &Epilogue::default()).unwrap();
                    assert_eq!(bits_eq(got.as_slice().unwrap(), &want), None, "reference, {ctx}");
                    let got16 = gemm_reference::<f16>(&a.q, &b.q, &Epilogue::default()).unwrap();
                    assert!(got16.iter().zip(&want).all(|(g, w)| g.to_bits() == f16::from_f32(*w).to_bits()), "{ctx}");
                    let gotb = gemm_reference::<bf16>(&a.q, &b.q, &Epilogue::default()).unwrap();
                    assert!(gotb.iter().zip(&want).all(|(g, w)| g.to_bits() == bf16::from_f32(*w).to_bits()), "{ctx}");
                    for simd in simds() {
                        let o = GemmOptions::default().with_simd(simd);
                        let fast = gemm::<f32>(&a.q, &b.q, &Epilogue::default(), &o).unwrap();
                        assert_eq!(bits_eq(fast.as_slice().unwrap(), &want), None, "fast {simd:?}, {ctx}");
                        let fastb = gemm::<bf16>(&a.q, &b.q, &Epilogue::default(), &o).unwrap();
                        assert!(fastb.iter().zip(gotb.iter()).all(|(f, r)| f.to_bits() == r.to_bits()), "{ctx}");
                    }
                }
            }
        }
    }
}

/// ulp of an f32 magnitude (at least the subnormal step).
fn ulp(x: f64) -> f64 {
    let x = (x.abs() as f32).max(f32::MIN_POSITIVE);
    (f32::from_bits(x.to_bits() + 1) - x) as f64
}

#[test]
fn quantized_pairs_meet_their_bounds_on_random_inputs() {
    let mut seed = 10_000;
    for (sa, sb) in PAIRS {
        for (m, n, k) in [(5, 7, 512), (33, 9, 1024)] {
            seed += 2;
            let a = operand(sa, m, k, ScaleLayout::Linear, DataLayout::RowMajor, false, seed);
            let b = operand(sb, n, k, ScaleLayout::Linear, DataLayout::RowMajor, false, seed + 1);
            let (sum, abs) = oracle(&a.values, &b.values, m, n, k);
            let reference = gemm_reference::<f32>(&a.q, &b.q, &Epilogue::default()).unwrap();
            for (idx, (&r, (&s, &t))) in reference.iter().zip(sum.iter().zip(&abs)).enumerate() {
                // The f64 loop itself errs by at most k * 2^-53 * t; the reference is
                // the correctly rounded exact value.
                let tol = ulp(s) / 2.0 + t * k as f64 * 2f64.powi(-53);
                assert!((r as f64 - s).abs() <= tol, "reference {sa} x {sb} [{idx}]: {r} vs {s}");
            }
            let bs = sa.block_size();
            for simd in simds() {
                let fast =
                    gemm::<f32>(&a.q, &b.q, &Epilogue::default(), &GemmOptions::default().with_simd(simd)).unwrap();
                for (idx, ((&f, &r), &t)) in fast.iter().zip(reference.iter()).zip(&abs).enumerate() {
                    let bound = fast_bound(k, bs, t) + ulp(r as f64) / 2.0;
                    assert!((f as f64 - r as f64).abs() <= bound, "fast {simd:?} {sa} x {sb} [{idx}]: {f} vs {r}");
                }
            }
        }
    }
}

#[test]
fn epilogue_is_alpha_then_bias_then_activation() {
    let (m, n, k) = (4, 40, 64);
    let a = operand(Scheme::MxFp8E4M3, m, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 1);
    let b = operand(Scheme::MxFp8E4M3, n, k, ScaleLayout::Swizzled128x4, DataLayout::RowMajor, true, 2);
    let (exact, _) = oracle(&a.values, &b.values, m, n, k);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 4.0).collect();
    let acts = [Activation::Identity, Activation::GeluTanh, Activation::GeluErf, Activation::Silu];
    for act in acts {
        let f = |x: f64| match act {
            Activation::Identity => x,
            Activation::GeluTanh => {
                0.5 * x * (1.0 + libm::tanh((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))))
            }
            Activation::GeluErf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
            Activation::Silu => x / (1.0 + libm::exp(-x)),
        };
        let e = Epilogue::default().with_alpha(0.375).with_bias(&bias).with_activation(act);
        let got = gemm_reference::<f32>(&a.q, &b.q, &e).unwrap();
        for (idx, (&g, &s)) in got.iter().zip(&exact).enumerate() {
            // alpha * s + bias is exact in f64 for these inputs.
            let want = f(0.375 * s + bias[idx % n] as f64) as f32;
            let close = if act == Activation::Identity { g == want } else { (g - want).abs() <= want.abs() * 2e-7 };
            assert!(close, "{act:?} [{idx}]: {g} vs {want}");
        }
        let fast = gemm::<f32>(&a.q, &b.q, &e, &GemmOptions::default()).unwrap();
        for (idx, (&g, &r)) in fast.iter().zip(got.iter()).enumerate() {
            assert!((g - r).abs() <= r.abs() * 1e-6 + 1e-6, "fast {act:?} [{idx}]: {g} vs {r}");
        }
    }
}

#[test]
fn large_products_are_the_same_on_one_thread_and_many() {
    // Enough rows for the panel GEMM to split them between tasks, N not a multiple of
    // 16, and over 65536 outputs so that the f32 epilogue runs on the pool: every bit
    // as on one thread, for each output type and with the whole epilogue.
    let (m, n, k) = (300, 233, 128);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.125 - 9.0).collect();
    for scheme in [Scheme::NvFp4, Scheme::MxFp4, Scheme::MxFp8E4M3] {
        let a = operand(scheme, m, k, ScaleLayout::Swizzled128x4, DataLayout::RowMajor, false, 21);
        let b = operand(scheme, n, k, ScaleLayout::Linear, DataLayout::RowMajor, false, 22);
        for act in [Activation::Identity, Activation::Silu] {
            let e = Epilogue::default().with_alpha(0.75).with_bias(&bias).with_activation(act);
            let one = GemmOptions::default().with_single_thread(true);
            let (p32, s32) = (
                gemm::<f32>(&a.q, &b.q, &e, &GemmOptions::default()).unwrap(),
                gemm::<f32>(&a.q, &b.q, &e, &one).unwrap(),
            );
            assert_eq!(bits_eq(p32.as_slice().unwrap(), s32.as_slice().unwrap()), None, "{scheme} {act:?} f32");
            let (p16, s16) = (
                gemm::<bf16>(&a.q, &b.q, &e, &GemmOptions::default()).unwrap(),
                gemm::<bf16>(&a.q, &b.q, &e, &one).unwrap(),
            );
            assert!(p16.iter().zip(&s16).all(|(x, y)| x.to_bits() == y.to_bits()), "{scheme} {act:?} bf16");
            // Without an activation (rounded once from f64 into each type), bf16 is the
            // f32 output rounded.
            if act == Activation::Identity {
                assert!(p16.iter().zip(&p32).all(|(x, y)| x.to_bits() == bf16::from_f32(*y).to_bits()), "{scheme}");
            }
        }
    }
}

#[test]
fn nvfp4_alpha_defaults_to_the_per_tensor_scales() {
    let (m, n, k) = (2, 3, 32);
    let mut a = operand(Scheme::NvFp4, m, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 5).q.into_parts();
    let mut b = operand(Scheme::NvFp4, n, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 6).q.into_parts();
    a.global_scale = Some(GlobalScale::from_encode(4.0).unwrap());
    b.global_scale = Some(GlobalScale::from_encode(0.5).unwrap());
    let (a, b) = (QuantizedMatrix::from_parts(a).unwrap(), QuantizedMatrix::from_parts(b).unwrap());
    let plain = gemm_reference::<f32>(&a, &b, &Epilogue::default().with_alpha(1.0)).unwrap();
    let auto = gemm_reference::<f32>(&a, &b, &Epilogue::default()).unwrap();
    assert_eq!(auto, plain.mapv(|v| v * 0.5));
    let x = Array2::from_elem((1, k), 1.0f32);
    let wplain = gemm_weight_only_reference::<f32, f32>(x.view(), &b, &Epilogue::default().with_alpha(1.0)).unwrap();
    let wauto = gemm_weight_only_reference::<f32, f32>(x.view(), &b, &Epilogue::default()).unwrap();
    assert_eq!(wauto, wplain.mapv(|v| v * 2.0));
}

fn activations(m: usize, k: usize, friendly: bool, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    (0..m * k)
        .map(|_| {
            if friendly {
                r.random_range(-16i32..=16) as f32 * 0.5
            } else {
                r.random_range(-1.0f32..1.0) * 2f32.powi(r.random_range(-6..6))
            }
        })
        .collect()
}

fn weight_only_case<I: blockscale_cpu::Input>(conv: impl Fn(f32) -> I) {
    let mut seed = 20_000;
    for scheme in Scheme::ALL {
        for (m, n, k) in [(1, 33, 128), (3, 7, 256), (16, 20, 128), (17, 129, 384)] {
            for dl in data_layouts(scheme, k) {
                seed += 2;
                let w = operand(scheme, n, k, ScaleLayout::Linear, dl, true, seed);
                let xs: Vec<I> = activations(m, k, true, seed + 1).into_iter().map(&conv).collect();
                let xv: Vec<f64> = xs.iter().map(|v| v.to_f32_exact() as f64).collect();
                let (exact, _) = oracle(&xv, &w.values, m, n, k);
                assert!(exact.iter().all(|&v| (v as f32) as f64 == v));
                let want: Vec<f32> = exact.iter().map(|&v| v as f32).collect();
                let x = ArrayView2::from_shape((m, k), &xs[..]).unwrap();
                let ctx = format!("{scheme} ({dl}), {m}x{n}x{k}");
                let got = gemm_weight_only_reference::<I, f32>(x, &w.q, &Epilogue::default()).unwrap();
                assert_eq!(bits_eq(got.as_slice().unwrap(), &want), None, "reference {ctx}");
                for simd in simds() {
                    let o = GemmOptions::default().with_simd(simd);
                    let fast = gemm_weight_only::<I, f32>(x, &w.q, &Epilogue::default(), &o).unwrap();
                    assert_eq!(bits_eq(fast.as_slice().unwrap(), &want), None, "fast {simd:?} {ctx}");
                }
                if m == 1 {
                    let v: Vec<f32> = gemv(&xs, &w.q, &Epilogue::default(), &GemmOptions::default()).unwrap();
                    assert_eq!(bits_eq(&v, &want), None, "gemv {ctx}");
                }
            }
        }
    }
}

#[test]
fn weight_only_is_exact_on_friendly_inputs_f32() {
    weight_only_case(|v| v);
}

#[test]
fn weight_only_is_exact_on_friendly_inputs_f16_bf16() {
    weight_only_case(f16::from_f32);
    weight_only_case(bf16::from_f32);
}

#[test]
fn weight_only_meets_its_bounds_on_random_inputs() {
    let mut seed = 30_000;
    for scheme in Scheme::ALL {
        for (m, n, k) in [(1, 64, 1024), (4, 33, 512), (20, 9, 256)] {
            seed += 2;
            let (w, xs, (sum, abs)) = random_product(scheme, (m, n, k), *layouts(scheme).last().unwrap(), seed);
            let x = ArrayView2::from_shape((m, k), &xs[..]).unwrap();
            let reference = gemm_weight_only_reference::<f32, f32>(x, &w.q, &Epilogue::default()).unwrap();
            for (&r, (&s, &t)) in reference.iter().zip(sum.iter().zip(&abs)) {
                assert!((r as f64 - s).abs() <= ulp(s) / 2.0 + t * k as f64 * 2f64.powi(-53), "{scheme}: {r} vs {s}");
            }
            // The 4-bit kernels sum INT4-G128 in 32-element blocks, as INT4-G32.
            let bs = if scheme == Scheme::Int4G128 { 32 } else { scheme.block_size() };
            for simd in simds() {
                let o = GemmOptions::default().with_simd(simd);
                let fast = gemm_weight_only::<f32, f32>(x, &w.q, &Epilogue::default(), &o).unwrap();
                for ((&f, &r), &t) in fast.iter().zip(reference.iter()).zip(&abs) {
                    let bound = fast_bound(k, bs, t) + ulp(r as f64) / 2.0;
                    assert!((f as f64 - r as f64).abs() <= bound, "{scheme} {simd:?}: {f} vs {r}");
                }
                // Int8 activations: each x moves by at most half its block's step
                // d = amax / 127, on top of the f32 bound.
                let o8 = o.with_activations(ActivationPrecision::Int8Blocks);
                let fast8 = gemm_weight_only::<f32, f32>(x, &w.q, &Epilogue::default(), &o8).unwrap();
                for (idx, (&f, &r)) in fast8.iter().zip(reference.iter()).enumerate() {
                    let (i, j) = (idx / n, idx % n);
                    let mut q_err = 0.0;
                    for blk in 0..k / 32 {
                        let span = i * k + blk * 32..i * k + blk * 32 + 32;
                        let d = xs[span.clone()].iter().fold(0f64, |a, &v| a.max(f64::from(v).abs())) / 127.0;
                        let wabs: f64 = (blk * 32..blk * 32 + 32).map(|t| w.values[j * k + t].abs()).sum();
                        q_err += d / 2.0 * wabs * (1.0 + 1e-6);
                    }
                    let bound = q_err + 2.0 * fast_bound(k, bs, abs[idx]) + ulp(r as f64);
                    assert!((f as f64 - r as f64).abs() <= bound, "int8 {scheme} {simd:?} [{idx}]: {f} vs {r}");
                }
            }
        }
    }
}

/// The 6- and 8-bit weights streamed by the GEMV kernels (M <= 16): one order of
/// operations on every path, so the same bits everywhere, within the tighter bound of
/// docs/NUMERICS.md ("6- and 8-bit weights": `n = B/16 + K/B + 7`).
#[test]
fn streamed_minifloat_weights_are_the_same_on_every_path() {
    let streamed = [
        Scheme::MxFp6E2M3,
        Scheme::MxFp6E3M2,
        Scheme::MxFp8E4M3,
        Scheme::MxFp8E5M2,
        Scheme::Fp8Block(Fp8Tile::Row1x128),
        Scheme::Fp8Block(Fp8Tile::Tile128x128),
    ];
    let mut seed = 35_000;
    for scheme in streamed {
        for (m, n, k) in [(1, 37, 1024), (3, 20, 256), (8, 17, 384), (13, 9, 512), (16, 140, 128)] {
            for sl in layouts(scheme) {
                seed += 2;
                let (w, xs, (sum, abs)) = random_product(scheme, (m, n, k), sl, seed);
                let x = ArrayView2::from_shape((m, k), &xs[..]).unwrap();
                let bs = scheme.block_size();
                let nu = (bs / 16 + k / bs + 7) as f64 * 2f64.powi(-24);
                let mut first: Option<Vec<f32>> = None;
                for simd in simds() {
                    for threads in [false, true] {
                        let o = GemmOptions::default().with_simd(simd).with_single_thread(threads);
                        let fast = gemm_weight_only::<f32, f32>(x, &w.q, &Epilogue::default(), &o).unwrap();
                        let fast = fast.into_raw_vec_and_offset().0;
                        for (idx, (&f, (&s, &t))) in fast.iter().zip(sum.iter().zip(&abs)).enumerate() {
                            let bound = nu / (1.0 - nu) * t;
                            assert!(
                                (f as f64 - s).abs() <= bound,
                                "{scheme} {sl} {simd:?} {m}x{n}x{k} [{idx}]: {f} vs {s}"
                            );
                        }
                        match &first {
                            None => first = Some(fast),
                            Some(want) => {
                                assert_eq!(bits_eq(&fast, want), None, "{scheme} {sl} {simd:?} {m}x{n}x{k}")
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A weight code that is NaN (E4M3 `0x7f`, E5M2 `0x7d`) or infinite (E5M2 `0x7c`)
/// reaches its row's outputs through the streaming kernels as IEEE arithmetic says.
#[test]
fn non_finite_weight_codes_propagate() {
    let (m, n, k) = (3, 4, 64);
    for (scheme, code, inf) in [
        (Scheme::MxFp8E4M3, 0x7fu8, false),
        (Scheme::MxFp8E4M3, 0xff, false),
        (Scheme::MxFp8E5M2, 0x7d, false),
        (Scheme::MxFp8E5M2, 0x7c, true),
        (Scheme::MxFp8E5M2, 0xfc, true),
    ] {
        let mut parts = operand(scheme, n, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 50).q.into_parts();
        parts.data[2 * k + 9] = code; // row 2, element 9
        let w = QuantizedMatrix::from_parts(parts).unwrap();
        let mut x = activations(m, k, true, 51);
        x[9] = 0.0; // row 0 meets the code with a zero: NaN even for infinity
        x[k + 9] = 1.5;
        x[2 * k + 9] = -2.0;
        let xv = ArrayView2::from_shape((m, k), &x[..]).unwrap();
        let r = gemm_weight_only_reference::<f32, f32>(xv, &w, &Epilogue::default()).unwrap();
        for simd in simds() {
            let f = gemm_weight_only::<f32, f32>(xv, &w, &Epilogue::default(), &GemmOptions::default().with_simd(simd))
                .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (rv, fv) = (r[[i, j]], f[[i, j]]);
                    let ctx = format!("{scheme} {code:#x} {simd:?} [{i}, {j}]");
                    if j != 2 {
                        assert!(rv.is_finite() && fv.is_finite(), "{ctx}");
                    } else if inf && i > 0 {
                        assert!(rv.is_infinite() && fv.to_bits() == rv.to_bits(), "{ctx}: {fv} vs {rv}");
                    } else {
                        assert!(rv.is_nan() && fv.is_nan(), "{ctx}: {fv} vs {rv}");
                    }
                }
            }
        }
    }
}

#[test]
fn panel_weights_meet_the_int8_bound_with_the_epilogue() {
    // Panel weights built from every scale layout, multiplied with int8 activations on
    // every kernel this CPU has, against the exact reference with alpha and a bias:
    // within the int8 mode's bound (the quantization step of each
    // activation block, plus the f32 bound before the epilogue, then one rounding).
    let mut seed = 50_000;
    let schemes = [
        Scheme::NvFp4,
        Scheme::MxFp4,
        Scheme::Int4G32,
        Scheme::Int4G128,
        Scheme::MxFp6E2M3,
        Scheme::MxFp8E4M3,
        Scheme::Fp8Block(blockscale_formats::Fp8Tile::Tile128x128),
        Scheme::Fp8Block(blockscale_formats::Fp8Tile::Row1x128),
    ];
    for scheme in schemes {
        for (m, n, k) in [(1, 64, 1024), (5, 33, 512), (17, 40, 256)] {
            for layout in layouts(scheme) {
                seed += 2;
                let (w, xs, (_, abs)) = random_product(scheme, (m, n, k), layout, seed);
                let x = ArrayView2::from_shape((m, k), &xs[..]).unwrap();
                let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 3.0).collect();
                let ep = Epilogue::default().with_alpha(0.75).with_bias(&bias);
                let reference = gemm_weight_only_reference::<f32, f32>(x, &w.q, &ep).unwrap();
                let panels = PanelWeights::new(&w.q).unwrap();
                assert_eq!((panels.rows(), panels.k(), panels.scheme()), (n, k, scheme));
                let mut results = Vec::new();
                for simd in simds() {
                    let o = GemmOptions::default().with_simd(simd).with_activations(ActivationPrecision::Int8Blocks);
                    let got = gemm_weight_only_panels::<f32, f32>(x, &panels, &ep, &o).unwrap();
                    for (idx, (&f, &r)) in got.iter().zip(reference.iter()).enumerate() {
                        let (i, j) = (idx / n, idx % n);
                        let mut q_err = 0.0;
                        for blk in 0..k / 32 {
                            let span = i * k + blk * 32..i * k + blk * 32 + 32;
                            let d = xs[span].iter().fold(0f64, |a, &v| a.max(f64::from(v).abs())) / 127.0;
                            let wabs: f64 = (blk * 32..blk * 32 + 32).map(|t| w.values[j * k + t].abs()).sum();
                            q_err += d / 2.0 * wabs * (1.0 + 1e-6);
                        }
                        let bound = 0.75 * (q_err + 2.0 * fast_bound(k, scheme.block_size(), abs[idx])) + ulp(r as f64);
                        assert!((f as f64 - r as f64).abs() <= bound, "{scheme} {layout} {simd:?} [{idx}]: {f} vs {r}");
                    }
                    results.push(got);
                }
                // Every kernel gives the same bits.
                for r in &results[1..] {
                    assert_eq!(bits_eq(results[0].as_slice().unwrap(), r.as_slice().unwrap()), None, "{scheme}");
                }
                // gemv_panels is row 0 of the product.
                let o = GemmOptions::default().with_activations(ActivationPrecision::Int8Blocks);
                let y: Vec<f32> = gemv_panels(&xs[..k], &panels, &ep, &o).unwrap();
                assert_eq!(bits_eq(&y, &results[0].as_slice().unwrap()[..n]), None, "{scheme} gemv");
            }
        }
    }
}

#[test]
fn panel_weights_refuse_what_they_cannot_do() {
    let q = |s, rows, k| operand(s, rows, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 9).q;
    let e = CpuError::UnsupportedPanel { scheme: Scheme::MxFp8E5M2, layout: DataLayout::RowMajor };
    assert_eq!(PanelWeights::new(&q(Scheme::MxFp8E5M2, 4, 64)).unwrap_err().to_string(), e.to_string());
    assert!(matches!(PanelWeights::new(&q(Scheme::MxFp6E3M2, 4, 128)), Err(CpuError::UnsupportedPanel { .. })));
    let inter = operand(Scheme::MxFp4, 4, 64, ScaleLayout::Linear, DataLayout::BlockInterleaved, true, 9).q;
    assert!(matches!(PanelWeights::new(&inter), Err(CpuError::UnsupportedPanel { .. })));
    let p = PanelWeights::new(&q(Scheme::NvFp4, 4, 64)).unwrap();
    let x = vec![1f32; 64];
    let exact = GemmOptions::default();
    let int8 = exact.with_activations(ActivationPrecision::Int8Blocks);
    let ep = Epilogue::default();
    assert!(matches!(gemv_panels::<f32, f32>(&x, &p, &ep, &exact), Err(CpuError::PanelNeedsInt8)));
    assert!(gemv_panels::<f32, f32>(&x, &p, &ep, &exact).unwrap_err().to_string().contains("Int8Blocks"));
    assert!(matches!(gemv_panels::<f32, f32>(&x[..32], &p, &ep, &int8), Err(CpuError::KMismatch { a: 32, b: 64 })));
    let bias = [0f32; 3];
    let e = gemv_panels::<f32, f32>(&x, &p, &Epilogue::default().with_bias(&bias), &int8).unwrap_err();
    assert!(matches!(e, CpuError::BiasLength { expected: 4, actual: 3 }), "{e}");
    let empty = ArrayView2::<f32>::from_shape((0, 64), &[]).unwrap();
    assert!(gemm_weight_only_panels::<f32, f32>(empty, &p, &ep, &int8).is_err());
    if !blockscale_cpu::avx512_available() {
        let e = gemv_panels::<f32, f32>(&x, &p, &ep, &int8.with_simd(Simd::Avx512)).unwrap_err();
        assert!(matches!(e, CpuError::SimdUnavailable(_)), "{e}");
    }
}

#[test]
fn extreme_mx_scales_stay_exact() {
    // MXFP4 x MXFP4 with scales of 2^80 and 2^-80 in some blocks (outside the panel
    // kernels' range check, so another path takes them) and friendly values: every
    // partial sum is still an f32, so every path must give the exact result.
    let (m, n, k) = (3, 20, 128);
    let mut a = operand(Scheme::MxFp4, m, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 60).q.into_parts();
    let mut b = operand(Scheme::MxFp4, n, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 61).q.into_parts();
    if let (ScaleData::Bytes(sa), ScaleData::Bytes(sb)) = (&mut a.scales, &mut b.scales) {
        sa[0] = 127 + 80; // A row 0, block 0: 2^80
        sb[5] = 127 - 80; // B row 1, block 1: 2^-80
    }
    let (a, b) = (QuantizedMatrix::from_parts(a).unwrap(), QuantizedMatrix::from_parts(b).unwrap());
    let want = gemm_reference::<f32>(&a, &b, &Epilogue::default()).unwrap();
    assert!(want.iter().all(|v| v.is_finite()));
    for simd in simds() {
        let got = gemm::<f32>(&a, &b, &Epilogue::default(), &GemmOptions::default().with_simd(simd)).unwrap();
        assert_eq!(bits_eq(got.as_slice().unwrap(), want.as_slice().unwrap()), None, "{simd:?}");
    }
}

#[test]
fn nan_and_inf_propagate() {
    let (m, n, k) = (2, 3, 64);
    let a = operand(Scheme::MxFp8E4M3, m, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 40);
    let mut parts =
        operand(Scheme::MxFp8E4M3, n, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 41).q.into_parts();
    if let ScaleData::Bytes(s) = &mut parts.scales {
        s[2] = 0xff; // row 1, block 0: NaN scale (a poisoned block)
    }
    let b = QuantizedMatrix::from_parts(parts).unwrap();
    let r = gemm_reference::<f32>(&a.q, &b, &Epilogue::default()).unwrap();
    let f = gemm::<f32>(&a.q, &b, &Epilogue::default(), &GemmOptions::default()).unwrap();
    for i in 0..m {
        for j in 0..n {
            assert_eq!(r[[i, j]].is_nan(), j == 1, "reference [{i}, {j}]");
            assert_eq!(f[[i, j]].is_nan(), j == 1, "fast [{i}, {j}]");
        }
    }
    let w = operand(Scheme::NvFp4, n, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 42);
    let mut x = activations(m, k, true, 43);
    x[5] = f32::INFINITY; // row 0
    x[k + 7] = f32::NAN; // row 1
    let xv = ArrayView2::from_shape((m, k), &x[..]).unwrap();
    let r = gemm_weight_only_reference::<f32, f32>(xv, &w.q, &Epilogue::default()).unwrap();
    for prec in [ActivationPrecision::Exact, ActivationPrecision::Int8Blocks] {
        let f = gemm_weight_only::<f32, f32>(
            xv,
            &w.q,
            &Epilogue::default(),
            &GemmOptions::default().with_activations(prec),
        )
        .unwrap();
        for j in 0..n {
            let wv = w.values[j * k + 5];
            let want0 = if wv == 0.0 { f32::NAN } else { f32::INFINITY.copysign(wv as f32) };
            assert_eq!(r[[0, j]].to_bits(), want0.to_bits(), "reference row 0, col {j}");
            assert_eq!(f[[0, j]].is_nan(), want0.is_nan(), "{prec:?} row 0, col {j}");
            assert!(!f[[0, j]].is_finite());
            assert!(r[[1, j]].is_nan() && f[[1, j]].is_nan());
        }
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let q = |s, rows, k| operand(s, rows, k, ScaleLayout::Linear, DataLayout::RowMajor, true, 7).q;
    let e = Epilogue::default();
    let o = GemmOptions::default();
    let nv = q(Scheme::NvFp4, 4, 64);
    let mx = q(Scheme::MxFp4, 4, 64);
    let i4 = q(Scheme::Int4G32, 4, 64);
    assert!(matches!(gemm_reference::<f32>(&nv, &mx, &e), Err(CpuError::UnsupportedPair { .. })));
    assert!(matches!(gemm::<f32>(&i4, &i4, &e, &o), Err(CpuError::UnsupportedPair { .. })));
    let err = gemm_reference::<f32>(&i4, &i4, &e).unwrap_err().to_string();
    assert!(err.contains("weight-only"), "{err}");
    assert!(matches!(
        gemm_reference::<f32>(&mx, &q(Scheme::MxFp4, 4, 96), &e),
        Err(CpuError::KMismatch { a: 64, b: 96 })
    ));
    let x = Array2::<f32>::zeros((2, 48));
    assert!(matches!(gemm_weight_only::<f32, f32>(x.view(), &nv, &e, &o), Err(CpuError::KMismatch { a: 48, b: 64 })));
    assert!(matches!(
        gemm_weight_only_reference::<f32, f32>(Array2::<f32>::zeros((0, 64)).view(), &nv, &e),
        Err(CpuError::Format(_))
    ));
    let short = [0f32; 3];
    assert!(matches!(
        gemm::<f32>(&mx, &mx, &e.with_bias(&short), &o),
        Err(CpuError::BiasLength { expected: 4, actual: 3 })
    ));
    let nan_bias = [0.0, f32::NAN, 0.0, 0.0];
    assert!(matches!(
        gemm_reference::<f32>(&mx, &mx, &e.with_bias(&nan_bias)),
        Err(CpuError::NonFiniteBias { index: 1, .. })
    ));
    assert!(matches!(gemm::<f32>(&mx, &mx, &e.with_alpha(f32::INFINITY), &o), Err(CpuError::InvalidAlpha(_))));
    assert!(matches!(gemv::<f32, f32>(&[0.0; 32], &nv, &e, &o), Err(CpuError::KMismatch { a: 32, b: 64 })));
}
