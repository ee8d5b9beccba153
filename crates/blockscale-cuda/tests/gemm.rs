//! The device GEMMs against blockscale-cpu's exact reference (`gemm_reference`, itself
//! checked against an independent accumulation): every quantized pair and every
//! weight-only scheme, ragged M, N and K, both scale layouts, bias and activations on
//! and off, every output type, outputs with row strides TMA can and cannot write,
//! NaN-poisoned outputs (an unwritten element fails), NaN blocks, a CUDA graph replay,
//! and the typed errors. Exact data must match bit for bit; random data must sit within
//! the kernel's documented bound (docs/KERNELS.md, "Accumulation and the bound the tests use").
//!
//! Needs a GPU: the Hopper tests run on compute capability 9.0, the `sm120_` ones on
//! 12.x (what the SM120 tier has no kernel for is checked as a typed error there).
//! Without one every test prints why and passes, unless BLOCKSCALE_REQUIRE_GPU=1.

mod common;

use blockscale_cpu as cpu;
use blockscale_cuda::cudarc::driver::CudaSlice;
use blockscale_cuda::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use blockscale_cuda::{
    Activation, Arch, CudaError, Device, DeviceElement, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized,
    Epilogue, gemm, gemm_into, gemm_weight_only, gemm_weight_only_into, gemm_weight_only_workspace_size,
    gemm_workspace_size,
};
use blockscale_formats::{
    DataLayout, Fp8Tile, GlobalScale, GlobalScaleSource, NonFinite, QuantizeOptions, QuantizedMatrix, ScaleLayout,
    Scheme,
};
use common::device;
use half::{bf16, f16};
use ndarray::Array2;

/// A Hopper device, or None (printing why) for the Hopper-tier tests.
fn hopper() -> Option<Device> {
    let dev = device()?;
    if dev.arch() != Arch::Sm90 {
        eprintln!("SKIPPED: a Hopper-tier test, and this is {:?}", dev.arch());
        return None;
    }
    Some(dev)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1) times a power of two in 2^-3 .. 2^3.
    fn value(&mut self) -> f32 {
        let u = ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        u * 2f32.powi(self.below(7) as i32 - 3)
    }
}

/// Random data, or "exact" data: multiples of 1/2 in [-4, 4] with the element maximum
/// pinned once per block, so block scales are powers of two (NVFP4 with a per-tensor encode of a power of two,
/// INT4 1, MX, FP8 block) and every partial sum is a small multiple of a
/// power of two: any correct accumulation gives the exact result.
fn data(rng: &mut Rng, rows: usize, k: usize, scheme: Scheme, exact: bool) -> Vec<f32> {
    if !exact {
        return (0..rows * k).map(|_| rng.value()).collect();
    }
    let max = if scheme == Scheme::Int4G32 { 7.0 } else { 6.0 };
    if let Scheme::Fp8Block(_) = scheme {
        // Multiples of 1/2 in [-2, 2] with 3.5 = 448 / 2^7 once per block of 128: scales
        // of exactly 2^-7, codes multiples of 64. Products of codes are multiples of 2^12
        // below 2^18 and a block's sum stays below 2^24, so even the FP8 tensor cores'
        // short accumulator (docs/KERNELS.md) adds them exactly.
        let mut x: Vec<f32> = (0..rows * k).map(|_| (rng.below(9) as f32 - 4.0) * 0.5).collect();
        for blk in x.chunks_mut(128) {
            let i = rng.below(128) as usize;
            blk[i] = 3.5;
        }
        return x;
    }
    let mut x: Vec<f32> = (0..rows * k).map(|_| (rng.below(17) as f32 - 8.0) * 0.5).collect();
    if matches!(scheme, Scheme::NvFp4 | Scheme::Int4G32) {
        let bs = scheme.block_size();
        for blk in x.chunks_mut(bs) {
            let i = rng.below(bs as u64) as usize;
            blk[i] = max;
        }
    }
    x
}

fn quantize(x: &[f32], rows: usize, k: usize, scheme: Scheme, layout: ScaleLayout, exact: bool) -> QuantizedMatrix {
    let layout = if scheme.supports_layout(layout) { layout } else { ScaleLayout::Linear };
    let mut o = QuantizeOptions::default().with_scale_layout(layout);
    if scheme == Scheme::NvFp4 && exact {
        // A power of two keeps alpha (= 4) and every product exact.
        o = o.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_encode(0.5).unwrap()));
    }
    cpu::quantize_slice(x, rows, k, scheme, &o).unwrap()
}

/// Dequantized values without NVFP4's per-tensor factor (the kernels' alpha carries it).
fn raw_values(q: &QuantizedMatrix) -> Vec<f32> {
    let g = q.global_scale().map_or(1.0, |g| g.decode() as f64);
    cpu::dequantize::<f32>(q).into_raw_vec_and_offset().0.into_iter().map(|v| (v as f64 / g) as f32).collect()
}

/// `sum_k |A[i, k] B[j, k]|` over dequantized values.
fn abs_products(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut t = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            t[i * n + j] = a[i * k..(i + 1) * k]
                .iter()
                .zip(&b[j * k..(j + 1) * k])
                .map(|(&p, &q)| (p as f64 * q as f64).abs())
                .sum();
        }
    }
    t
}

/// The documented bound (docs/KERNELS.md) of the accumulated sum before the epilogue,
/// relative to `sum |a b|`, for a kernel family: BF16 tensor cores (`pieces` bf16 terms
/// per activation; `rounded` operands rounded once to bf16), or FP8 blockwise.
fn relative_bound(fp8: bool, k: usize, pieces: usize, rounded: usize) -> f64 {
    if fp8 {
        136.0 * 2f64.powi(-12) + (k / 128 + 2) as f64 * 2f64.powi(-23)
    } else {
        let kk = (k * pieces) as f64;
        (kk + kk / 16.0 + 4.0) * 2f64.powi(-22) + rounded as f64 * 2f64.powi(-9)
    }
}

fn ulp_f32(x: f64) -> f64 {
    let a = (x.abs() as f32).max(f32::MIN_POSITIVE);
    (f32::from_bits(a.to_bits() + 1) - a) as f64
}

/// One ulp of the output type at `x`.
fn ulp_out<O: DeviceElement>(x: f64) -> f64 {
    let bits = match O::SUFFIX {
        "bf16" => 8,
        "f16" => 11,
        _ => 24,
    };
    let min_exp = match O::SUFFIX {
        "f16" => -14,
        _ => -126,
    };
    let e = if x == 0.0 { min_exp } else { (x.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(e - bits + 1)
}

/// Compares a GPU result with the exact reference: bit for bit when `bound` is None, else
/// `|gpu - ref| <= slope * (|alpha| bound(i) + 8 ulp_f32) + ulp_O`. NaN must meet NaN.
fn compare<O: DeviceElement + cpu::Output>(got: &[O], want: &Array2<O>, bound: Option<(&[f64], f64, f64)>, what: &str) {
    let want = want.as_slice().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.widen() as f64, w.widen() as f64);
        if g.is_nan() || w.is_nan() {
            assert!(g.is_nan() && w.is_nan(), "{what}: element {i}: got {g}, want {w}");
            continue;
        }
        match bound {
            None => assert!(g.to_bits() == w.to_bits(), "{what}: element {i}: got {g:e}, want {w:e} (exact)"),
            Some((t, alpha, slope)) => {
                let tol = slope * (alpha.abs() * t[i] + 8.0 * ulp_f32(w)) + ulp_out::<O>(w);
                assert!(
                    (g - w).abs() <= tol,
                    "{what}: element {i}: got {g:e}, want {w:e}, |diff| {:e} > bound {tol:e}",
                    (g - w).abs()
                );
            }
        }
    }
}

const POISON_F32: f32 = f32::NAN;

/// A device buffer for an M x N output at `stride`, poisoned with NaN.
fn poisoned<O: DeviceElement + cpu::Output>(dev: &Device, m: usize, stride: usize) -> CudaSlice<O> {
    let host: Vec<O> = vec![O::from_f32(POISON_F32); m * stride];
    dev.stream().clone_htod(&host).unwrap()
}

/// Reads an M x N output at `stride` back, checking the padding was left alone.
fn read_back<O: DeviceElement + cpu::Output>(
    dev: &Device,
    d: &CudaSlice<O>,
    m: usize,
    n: usize,
    stride: usize,
) -> Vec<O> {
    let host = dev.stream().clone_dtoh(d).unwrap();
    let mut out = Vec::with_capacity(m * n);
    for r in 0..m {
        out.extend_from_slice(&host[r * stride..r * stride + n]);
        for (c, v) in host[r * stride + n..(r + 1) * stride].iter().enumerate() {
            assert!(v.widen().is_nan(), "padding element ({r}, {}) was written", n + c);
        }
    }
    out
}

struct Case {
    a: Scheme,
    b: Scheme,
    m: usize,
    n: usize,
    k: usize,
    exact: bool,
    bias: bool,
    activation: Activation,
    layout: ScaleLayout,
    /// Output row stride minus N (0: contiguous).
    pad: usize,
}

fn run_case<O: DeviceElement + cpu::Output>(dev: &Device, c: &Case, seed: u64) {
    let mut rng = Rng(seed | 1);
    let xa = data(&mut rng, c.m, c.k, c.a, c.exact);
    let xb = data(&mut rng, c.n, c.k, c.b, c.exact);
    // Hopper takes either layout (A Linear exercises the other one); SM120 reads both
    // operands' scales in the layout of the case.
    let a_layout = if dev.arch() == Arch::Sm120 { c.layout } else { ScaleLayout::Linear };
    let (qa, qb) = (quantize(&xa, c.m, c.k, c.a, a_layout, c.exact), quantize(&xb, c.n, c.k, c.b, c.layout, c.exact));
    let bias: Vec<f32> = (0..c.n).map(|_| rng.value()).collect();
    // Random NVFP4 keeps alpha from the operands' global scales (folded on the device).
    let alpha = if c.exact || c.a == Scheme::NvFp4 { None } else { Some(0.75f32) };
    let mut host_epi = Epilogue { alpha, ..Default::default() }.with_activation(c.activation);
    if c.bias {
        host_epi = host_epi.with_bias(&bias[..]);
    }
    let want = cpu::gemm_reference::<O>(&qa, &qb, &host_epi).unwrap();

    let (da, db) = (DeviceQuantized::from_host(dev, &qa).unwrap(), DeviceQuantized::from_host(dev, &qb).unwrap());
    let dbias = dev.stream().clone_htod(&bias).unwrap();
    let mut epi = DeviceEpilogue { alpha, ..Default::default() }.with_activation(c.activation);
    if c.bias {
        epi = epi.with_bias(&dbias);
    }
    let stride = c.n + c.pad;
    let mut d = poisoned::<O>(dev, c.m, stride);
    // The allocating call grows the workspace; the _into call runs in what the caller
    // reserved beforehand (a padded output may need more than the contiguous one).
    let fresh = gemm::<O>(dev, &da, &db, &epi).unwrap();
    dev.reserve_workspace(gemm_workspace_size::<O>(dev, &da, &db, stride).unwrap()).unwrap();
    gemm_into(dev, &da, &db, &epi, DeviceMatrixMut { data: &mut d, rows: c.m, cols: c.n, row_stride: stride }).unwrap();
    let got = read_back(dev, &d, c.m, c.n, stride);
    let what = format!(
        "{:?} x {:?} {}x{}x{} {} bias={} {:?} {:?} pad={} -> {}",
        c.a,
        c.b,
        c.m,
        c.n,
        c.k,
        if c.exact { "exact" } else { "random" },
        c.bias,
        c.activation,
        c.layout,
        c.pad,
        O::SUFFIX
    );
    assert_eq!(
        dev.stream().clone_dtoh(&fresh).unwrap().iter().map(|v| v.widen().to_bits()).collect::<Vec<_>>(),
        got.iter().map(|v| v.widen().to_bits()).collect::<Vec<_>>(),
        "{what}: gemm and gemm_into differ"
    );
    if c.exact {
        compare(&got, &want, None, &what);
    } else {
        let (av, bv) = (raw_values(&qa), raw_values(&qb));
        let alpha_eff = host_epi.alpha_quantized(qa.global_scale(), qb.global_scale());
        let fp8 = matches!(c.b, Scheme::Fp8Block(Fp8Tile::Tile128x128));
        let rounded = if matches!(c.b, Scheme::Fp8Block(Fp8Tile::Row1x128)) { 2 } else { 0 };
        let rel = relative_bound(fp8, c.k, 1, rounded);
        let t: Vec<f64> = abs_products(&av, &bv, c.m, c.n, c.k).into_iter().map(|t| t * rel).collect();
        let slope = if c.activation == Activation::Identity { 1.0 } else { 1.2 };
        compare(&got, &want, Some((&t, alpha_eff as f64, slope)), &what);
    }
}

const PAIRS: [(Scheme, Scheme); 10] = [
    (Scheme::NvFp4, Scheme::NvFp4),
    (Scheme::MxFp4, Scheme::MxFp4),
    (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
    (Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
    (Scheme::MxFp6E2M3, Scheme::MxFp8E4M3),
    (Scheme::MxFp8E5M2, Scheme::MxFp6E3M2),
    (Scheme::MxFp4, Scheme::MxFp8E4M3),
    (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
    (Scheme::Fp8Block(Fp8Tile::Tile128x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
    (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Row1x128)),
];

const ACTS: [Activation; 4] = [Activation::Identity, Activation::Silu, Activation::GeluTanh, Activation::GeluErf];

/// A case of the pair sweeps: random cases rotate bias and activation by `turn`; output
/// row strides by `variant`: contiguous, padded to a 16-byte multiple (TMA writes it),
/// odd (staged through the workspace), contiguous.
fn sweep_case(
    (a, b): (Scheme, Scheme),
    (m, n, k): (usize, usize, usize),
    exact: bool,
    turn: usize,
    layout: ScaleLayout,
    variant: usize,
) -> Case {
    Case {
        a,
        b,
        m,
        n,
        k,
        exact,
        bias: !exact && turn.is_multiple_of(2),
        activation: if exact { Activation::Identity } else { ACTS[turn % 4] },
        layout,
        pad: [0, 8, 3, 0][variant],
    }
}

#[test]
fn every_pair_matches_the_reference() {
    let Some(dev) = hopper() else { return };
    // Ragged shapes: M odd and from 1 to 257 (so both tile configurations run), N not a
    // multiple of any tile, K a multiple of the block but not of the K tile.
    let shapes = [(1, 70, 0), (33, 200, 1), (130, 136, 2), (257, 264, 3)];
    let mut seed = 1u64;
    for (pi, &(a, b)) in PAIRS.iter().enumerate() {
        let fp8 = matches!(a, Scheme::Fp8Block(_));
        for &(m, n, variant) in &shapes {
            let k = if fp8 { [128, 384, 640, 256][variant] } else { [96, 224, 320, 64][variant] };
            for exact in [true, false] {
                seed += 1;
                let layout = if variant % 2 == 0 { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
                let c = sweep_case((a, b), (m, n, k), exact, pi + variant, layout, variant);
                match (variant + pi) % 3 {
                    0 => run_case::<bf16>(&dev, &c, seed),
                    1 => run_case::<f16>(&dev, &c, seed),
                    _ => run_case::<f32>(&dev, &c, seed),
                }
            }
        }
    }
}

/// The SM120 tier (skipped elsewhere): every pair it has a kernel for, ragged M and N
/// (N not a multiple of 8 or of 128 copies B with zero rows), bias and activations,
/// contiguous, padded and odd output strides, bf16 output, exact and random data.
#[test]
fn sm120_every_pair_matches_the_reference() {
    let Some(dev) = device() else { return };
    if dev.arch() != Arch::Sm120 {
        eprintln!("SKIPPED: {:?} is not an SM120 device", dev.arch());
        return;
    }
    let pairs = [
        (Scheme::NvFp4, Scheme::NvFp4),
        (Scheme::MxFp4, Scheme::MxFp4),
        (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
        (Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
        (Scheme::MxFp8E4M3, Scheme::MxFp6E2M3),
        (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
        (Scheme::Fp8Block(Fp8Tile::Tile128x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
    ];
    let shapes = [(1, 70, 128), (33, 200, 384), (130, 136, 256), (257, 264, 640)];
    let mut seed = 7001u64;
    for (pi, &(a, b)) in pairs.iter().enumerate() {
        for (variant, &(m, n, k)) in shapes.iter().enumerate() {
            for exact in [true, false] {
                seed += 1;
                let c = sweep_case((a, b), (m, n, k), exact, pi + variant, ScaleLayout::Swizzled128x4, variant);
                run_case::<bf16>(&dev, &c, seed);
            }
        }
    }
}

#[test]
fn large_tiles_and_every_output_type() {
    let Some(dev) = hopper() else { return };
    // Enough tiles for the large-tile configurations (128x256 BF16, 128x128 FP8).
    for (i, &(a, b)) in [PAIRS[0], PAIRS[2], PAIRS[7]].iter().enumerate() {
        let k = if matches!(a, Scheme::Fp8Block(_)) { 512 } else { 256 };
        for exact in [true, false] {
            let c = Case {
                a,
                b,
                m: 1031,
                n: 1000 + 8 * i,
                k,
                exact,
                bias: !exact,
                activation: if exact { Activation::Identity } else { Activation::Silu },
                layout: ScaleLayout::Swizzled128x4,
                pad: 0,
            };
            run_case::<bf16>(&dev, &c, 100 + i as u64);
            run_case::<f16>(&dev, &c, 200 + i as u64);
            run_case::<f32>(&dev, &c, 300 + i as u64);
        }
    }
}

/// Weight-only: activations of type I (with a row stride) times weights of `scheme`.
#[allow(clippy::too_many_arguments)]
fn run_weight_only<I: DeviceElement + cpu::Input + cpu::Output, O: DeviceElement + cpu::Output>(
    dev: &Device,
    scheme: Scheme,
    interleaved: bool,
    (m, n, k): (usize, usize, usize),
    x_stride: usize,
    exact: bool,
    activation: Activation,
    seed: u64,
) {
    let mut rng = Rng(seed | 1);
    let xw = data(&mut rng, n, k, scheme, exact);
    let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        ScaleLayout::Swizzled128x4
    } else {
        ScaleLayout::Linear
    };
    let mut o = QuantizeOptions::default().with_scale_layout(layout);
    if interleaved {
        o = o.with_data_layout(DataLayout::BlockInterleaved);
    }
    if exact && scheme == Scheme::NvFp4 {
        // A power of two keeps alpha (the decode factor, 4) and every product exact.
        o = o.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_encode(0.25).unwrap()));
    }
    let qw = cpu::quantize_slice(&xw, n, k, scheme, &o).unwrap();
    let xs: Vec<f32> = if exact {
        (0..m * k).map(|_| (rng.below(17) as f32 - 8.0) * 0.5).collect()
    } else {
        // f32 activations with full 24-bit significands exercise the three-piece split.
        (0..m * k).map(|_| rng.value() * (1.0 + (rng.below(1 << 20) as f32) * 2f32.powi(-22))).collect()
    };
    let x: Vec<I> = xs.iter().map(|&v| <I as cpu::Output>::from_f32(v)).collect();
    let bias: Vec<f32> = (0..n).map(|_| rng.value()).collect();
    let alpha = if exact || scheme == Scheme::NvFp4 { None } else { Some(1.5f32) };
    let mut host_epi = Epilogue { alpha, ..Default::default() }.with_activation(activation);
    if !exact {
        host_epi = host_epi.with_bias(&bias[..]);
    }
    let xv = ndarray::ArrayView2::from_shape((m, k), &x[..]).unwrap();
    let want = cpu::gemm_weight_only_reference::<I, O>(xv, &qw, &host_epi).unwrap();

    // The activations on the device with a row stride of `x_stride`.
    let mut strided = vec![<I as cpu::Output>::from_f32(0.0); (m - 1) * x_stride + k];
    for r in 0..m {
        strided[r * x_stride..r * x_stride + k].copy_from_slice(&x[r * k..(r + 1) * k]);
    }
    let dx = dev.stream().clone_htod(&strided).unwrap();
    let dw = DeviceQuantized::from_host(dev, &qw).unwrap();
    let dbias = dev.stream().clone_htod(&bias).unwrap();
    let mut epi = DeviceEpilogue { alpha, ..Default::default() }.with_activation(activation);
    if !exact {
        epi = epi.with_bias(&dbias);
    }
    let xm = DeviceMatrix { data: &dx, rows: m, k, row_stride: x_stride };
    let _ = gemm_weight_only::<I, O>(dev, xm, &dw, &epi).unwrap();
    dev.reserve_workspace(gemm_weight_only_workspace_size::<I, O>(dev, xm, &dw, n).unwrap()).unwrap();
    let mut d = poisoned::<O>(dev, m, n);
    gemm_weight_only_into(dev, xm, &dw, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
    let got = read_back(dev, &d, m, n, n);
    let what = format!(
        "{} x {scheme:?}{} {m}x{n}x{k} stride {x_stride} {} {activation:?} -> {}",
        I::SUFFIX,
        if interleaved { " interleaved" } else { "" },
        if exact { "exact" } else { "random" },
        O::SUFFIX
    );
    if exact {
        compare(&got, &want, None, &what);
    } else {
        let xv32: Vec<f32> = x.iter().map(|v| v.widen()).collect();
        let wv = raw_values(&qw);
        let alpha_eff = host_epi.alpha_weight_only(qw.scheme(), qw.global_scale());
        let pieces = match I::SUFFIX {
            "bf16" => 1,
            "f16" => 2,
            _ => 3,
        };
        let rounded = usize::from(matches!(scheme, Scheme::Int4G32 | Scheme::Fp8Block(_)));
        let rel = relative_bound(false, k, pieces, rounded);
        let t: Vec<f64> = abs_products(&xv32, &wv, m, n, k).into_iter().map(|t| t * rel).collect();
        let slope = if activation == Activation::Identity { 1.0 } else { 1.2 };
        compare(&got, &want, Some((&t, alpha_eff as f64, slope)), &what);
    }
}

#[test]
fn weight_only_every_scheme_and_activation_type() {
    let Some(dev) = hopper() else { return };
    let schemes = [
        (Scheme::NvFp4, false),
        (Scheme::MxFp4, false),
        (Scheme::MxFp6E2M3, false),
        (Scheme::MxFp6E3M2, false),
        (Scheme::MxFp8E4M3, false),
        (Scheme::MxFp8E5M2, false),
        (Scheme::Fp8Block(Fp8Tile::Row1x128), false),
        (Scheme::Fp8Block(Fp8Tile::Tile128x128), false),
        (Scheme::Int4G32, false),
        (Scheme::Int4G32, true),
    ];
    let mut seed = 1000;
    for (i, &(scheme, interleaved)) in schemes.iter().enumerate() {
        let k = if matches!(scheme, Scheme::Fp8Block(_)) { 384 } else { 224 };
        for (j, &(m, n)) in [(1usize, 130usize), (17, 72), (300, 200)].iter().enumerate() {
            for exact in [true, false] {
                seed += 1;
                let act = if exact { Activation::Identity } else { ACTS[(i + j) % 4] };
                // Row strides: k (contiguous), k + 8 (aligned: bf16 read in place), k + 1
                // (copied into the workspace).
                let stride = k + [0, 8, 1][j];
                let shape = (m, n, k);
                match (i + j) % 3 {
                    0 => run_weight_only::<bf16, bf16>(&dev, scheme, interleaved, shape, stride, exact, act, seed),
                    1 => run_weight_only::<f16, f32>(&dev, scheme, interleaved, shape, stride, exact, act, seed),
                    _ => run_weight_only::<f32, f16>(&dev, scheme, interleaved, shape, stride, exact, act, seed),
                }
            }
        }
    }
}

#[test]
fn nan_blocks_propagate_like_the_reference() {
    let Some(dev) = hopper() else { return };
    let (m, n, k) = (40, 48, 128);
    let mut rng = Rng(77);
    for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3] {
        let mut xa: Vec<f32> = (0..m * k).map(|_| rng.value()).collect();
        xa[5 * k + 17] = f32::NAN; // row 5
        xa[9 * k + 100] = f32::INFINITY; // row 9
        let xb: Vec<f32> = (0..n * k).map(|_| rng.value()).collect();
        let o = QuantizeOptions::default().with_non_finite(NonFinite::Poison);
        let qa = cpu::quantize_slice(&xa, m, k, scheme, &o).unwrap();
        let qb = cpu::quantize_slice(&xb, n, k, scheme, &o).unwrap();
        let want = cpu::gemm_reference::<f32>(&qa, &qb, &Epilogue::default()).unwrap();
        let got = blockscale_cuda::gemm_host::<f32>(&dev, &qa, &qb, &Epilogue::default()).unwrap();
        for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            assert_eq!(g.is_nan(), w.is_nan(), "{scheme:?}: element {i}: got {g}, want {w}");
        }
        assert!(got.row(5).iter().all(|v| v.is_nan()) && got.row(9).iter().all(|v| v.is_nan()));
        assert!(got.row(0).iter().all(|v| v.is_finite()));
    }
}

#[test]
fn gemm_into_replays_in_a_cuda_graph() {
    let Some(dev) = hopper() else { return };
    let (m, n, k) = (96, 136, 256);
    let mut rng = Rng(5);
    let xa: Vec<f32> = (0..m * k).map(|_| rng.value()).collect();
    let xb: Vec<f32> = (0..n * k).map(|_| rng.value()).collect();
    let o = QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
    let (qa, qb) = (
        cpu::quantize_slice(&xa, m, k, Scheme::NvFp4, &o).unwrap(),
        cpu::quantize_slice(&xb, n, k, Scheme::NvFp4, &o).unwrap(),
    );
    let (da, db) = (DeviceQuantized::from_host(&dev, &qa).unwrap(), DeviceQuantized::from_host(&dev, &qb).unwrap());
    let epi = DeviceEpilogue::default().with_activation(Activation::GeluTanh);
    let expect = dev.stream().clone_dtoh(&gemm::<bf16>(&dev, &da, &db, &epi).unwrap()).unwrap();
    let mut d = poisoned::<bf16>(&dev, m, n);
    dev.synchronize().unwrap();
    let stream = dev.stream().clone();
    // cudarc's cross-stream event tracking would make the capture wait on events recorded
    // before it, which invalidates it: off while capturing (every buffer here lives on
    // the device's one stream, and the device was synchronized above).
    // SAFETY: no buffer is used on another stream while tracking is off.
    unsafe { dev.context().disable_event_tracking() };
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    let queued = gemm_into(&dev, &da, &db, &epi, DeviceMatrixMut::new(&mut d, m, n));
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap();
    // SAFETY: as above; tracking resumes for buffers created from here on.
    unsafe { dev.context().enable_event_tracking() };
    queued.unwrap();
    let graph = graph.expect("the capture recorded the GEMM");
    // Nothing ran yet: the output is still poisoned.
    assert!(dev.stream().clone_dtoh(&d).unwrap().iter().all(|v| v.to_f32().is_nan()));
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    let got = dev.stream().clone_dtoh(&d).unwrap();
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        expect.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let o = QuantizeOptions::default();
    let q = |rows: usize, k: usize, scheme: Scheme| {
        let x: Vec<f32> = (0..rows * k).map(|i| (i % 7) as f32 - 3.0).collect();
        DeviceQuantized::from_host(&dev, &cpu::quantize_slice(&x, rows, k, scheme, &o).unwrap()).unwrap()
    };
    let (a, b) = (q(16, 64, Scheme::NvFp4), q(32, 64, Scheme::NvFp4));
    let epi = DeviceEpilogue::default();
    if dev.arch() == Arch::Sm120 {
        // What the SM120 tier has no kernel for is a typed error before any launch.
        assert!(matches!(gemm::<f32>(&dev, &a, &b, &epi), Err(CudaError::NoGemmKernel { .. })));
        let (a48, b48) = (q(16, 48, Scheme::NvFp4), q(32, 48, Scheme::NvFp4));
        assert!(matches!(gemm::<bf16>(&dev, &a48, &b48, &epi), Err(CudaError::KAlignment { k: 48, multiple: 32 })));
        let x = dev.stream().clone_htod(&vec![bf16::ZERO; 16 * 64]).unwrap();
        let x = DeviceMatrix { data: &x, rows: 16, k: 64, row_stride: 64 };
        assert!(matches!(gemm_weight_only::<bf16, bf16>(&dev, x, &b, &epi), Err(CudaError::NoGemmKernel { .. })));
        let linear = QuantizeOptions::default().with_scale_layout(ScaleLayout::Linear);
        let xs: Vec<f32> = (0..32 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
        let bl = DeviceQuantized::from_host(&dev, &cpu::quantize_slice(&xs, 32, 64, Scheme::NvFp4, &linear).unwrap())
            .unwrap();
        assert!(matches!(gemm::<bf16>(&dev, &a, &bl, &epi), Err(CudaError::NoGemmKernel { .. })));
    }
    if dev.arch() != Arch::Sm90 {
        return;
    }
    let mx = q(32, 64, Scheme::MxFp4);
    assert!(matches!(gemm::<f32>(&dev, &a, &mx, &epi), Err(CudaError::UnsupportedPair { .. })));
    let int4 = q(32, 64, Scheme::Int4G32);
    assert!(matches!(gemm::<f32>(&dev, &int4, &int4, &epi), Err(CudaError::UnsupportedPair { .. })));
    let k128 = q(32, 128, Scheme::NvFp4);
    assert!(matches!(gemm::<f32>(&dev, &a, &k128, &epi), Err(CudaError::KMismatch { a: 64, b: 128 })));
    let short_bias = dev.stream().clone_htod(&[0f32; 31]).unwrap();
    assert!(matches!(
        gemm::<f32>(&dev, &a, &b, &DeviceEpilogue::default().with_bias(&short_bias)),
        Err(CudaError::BiasLength { expected: 32, actual: 31 })
    ));
    assert!(matches!(
        gemm::<f32>(&dev, &a, &b, &DeviceEpilogue::default().with_alpha(f32::NAN)),
        Err(CudaError::InvalidAlpha(_))
    ));
    let mut out = dev.stream().alloc_zeros::<f32>(16 * 32).unwrap();
    assert!(matches!(
        gemm_into(&dev, &a, &b, &epi, DeviceMatrixMut::new(&mut out, 16, 31)),
        Err(CudaError::OutputShape { .. })
    ));
    assert!(matches!(
        gemm_into(&dev, &a, &b, &epi, DeviceMatrixMut { data: &mut out, rows: 16, cols: 32, row_stride: 31 }),
        Err(CudaError::StrideTooSmall { .. })
    ));
    assert!(matches!(
        gemm_into(&dev, &a, &b, &epi, DeviceMatrixMut { data: &mut out, rows: 16, cols: 32, row_stride: 40 }),
        Err(CudaError::BufferLength { .. })
    ));
    // A fresh device has no workspace: gemm_into asks for it, naming the size.
    let fresh = Device::new(0).unwrap();
    let (fa, fb) = (q(16, 64, Scheme::NvFp4), q(32, 64, Scheme::NvFp4));
    match gemm_into(&fresh, &fa, &fb, &epi, DeviceMatrixMut::new(&mut out, 16, 32)) {
        Err(CudaError::WorkspaceTooSmall { needed, available: 0 }) => {
            fresh.reserve_workspace(needed).unwrap();
            gemm_into(&fresh, &fa, &fb, &epi, DeviceMatrixMut::new(&mut out, 16, 32)).unwrap();
        }
        other => panic!("expected WorkspaceTooSmall, got {other:?}"),
    }
    // Weight-only: K mismatch, short activations, stride below K, no rows.
    let x = dev.stream().clone_htod(&vec![bf16::ZERO; 16 * 64]).unwrap();
    let wrong_k = DeviceMatrix { data: &x, rows: 16, k: 32, row_stride: 32 };
    assert!(matches!(gemm_weight_only::<bf16, f32>(&dev, wrong_k, &b, &epi), Err(CudaError::KMismatch { .. })));
    let short = DeviceMatrix { data: &x, rows: 17, k: 64, row_stride: 64 };
    assert!(matches!(gemm_weight_only::<bf16, f32>(&dev, short, &b, &epi), Err(CudaError::BufferLength { .. })));
    let narrow = DeviceMatrix { data: &x, rows: 16, k: 64, row_stride: 60 };
    assert!(matches!(gemm_weight_only::<bf16, f32>(&dev, narrow, &b, &epi), Err(CudaError::StrideTooSmall { .. })));
    let empty = DeviceMatrix { data: &x, rows: 0, k: 64, row_stride: 64 };
    assert!(matches!(gemm_weight_only::<bf16, f32>(&dev, empty, &b, &epi), Err(CudaError::Format(_))));
}

/// A short run of every kernel family and preparation path: what `run.sh sanitize` runs
/// under compute-sanitizer.
#[test]
fn gemm_sanitizer_smoke() {
    let Some(dev) = hopper() else { return };
    for (i, &(a, b)) in [PAIRS[0], PAIRS[4], PAIRS[7], PAIRS[8], PAIRS[9]].iter().enumerate() {
        let k = if matches!(a, Scheme::Fp8Block(_)) { 256 } else { 64 };
        let c = Case {
            a,
            b,
            m: [3, 130][i % 2],
            n: 40,
            k,
            exact: false,
            bias: true,
            activation: Activation::Silu,
            layout: ScaleLayout::Swizzled128x4,
            pad: [0, 3][i % 2],
        };
        run_case::<bf16>(&dev, &c, 900 + i as u64);
    }
    run_weight_only::<f32, f32>(&dev, Scheme::Int4G32, true, (5, 40, 64), 65, false, Activation::GeluErf, 950);
    run_weight_only::<bf16, bf16>(&dev, Scheme::NvFp4, false, (20, 40, 64), 64, false, Activation::Identity, 951);
}
