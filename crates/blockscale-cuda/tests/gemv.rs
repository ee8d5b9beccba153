//! The device GEMV against blockscale-cpu's exact weight-only reference
//! (`gemm_weight_only_reference`): every weight scheme and layout, M from 1 to 16, ragged
//! N and K, both scale layouts, bf16 and f16 activations, every output type, bias and
//! each activation, the split-K path and the single-pass one, the gated (SwiGLU) form,
//! NaN-poisoned outputs (an unwritten element fails), NaN and Inf inputs, run-to-run
//! determinism, a CUDA graph replay and the typed errors, each on the checkpoint layout
//! (`DeviceQuantized`, the general kernel) and on `PreparedWeights` (the fast kernels).
//! Exact data must match bit for bit; random data must sit within the documented bound
//! (docs/KERNELS.md, "GEMV").
//!
//! Needs a GPU (Hopper or SM120: the GEMV has SASS for both). Without one every test
//! prints why and passes, unless BLOCKSCALE_REQUIRE_GPU=1.

mod common;

use blockscale_cpu as cpu;
use blockscale_cuda::prepared::Unpreparable;
use blockscale_cuda::{
    Activation, CudaError, Device, DeviceElement, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized,
    Epilogue, GEMV_MAX_ROWS, GatedWeights, GemvInput, GemvWeights, PreparedWeights, gemv, gemv_gated, gemv_gated_into,
    gemv_host, gemv_into, gemv_workspace_size,
};
use blockscale_formats::{Fp8Tile, NonFinite, QuantizeOptions, QuantizedMatrix, ScaleLayout, Scheme};
use common::device;
use common::oracle::*;
use half::{bf16, f16};
use ndarray::{Array2, ArrayView2};

/// Every weight scheme and data layout: (scheme, block-interleaved).
/// Every weight scheme and layout (numbered), on checkpoint-layout weights and then on
/// prepared ones: `(prepared, index, scheme, interleaved)`.
fn runs() -> Vec<(bool, usize, Scheme, bool)> {
    let schemes = weight_schemes();
    [false, true].into_iter().flat_map(|p| schemes.iter().enumerate().map(move |(i, &(s, il))| (p, i, s, il))).collect()
}

const ACTS: [Activation; 4] = [Activation::Identity, Activation::Silu, Activation::GeluTanh, Activation::GeluErf];

/// One GEMV case.
#[derive(Clone, Copy, Debug)]
struct Case {
    scheme: Scheme,
    interleaved: bool,
    m: usize,
    n: usize,
    k: usize,
    exact: bool,
    bias: bool,
    activation: Activation,
    layout: ScaleLayout,
    /// Run on PreparedWeights (the fast kernels) instead of the checkpoint layout.
    prepared: bool,
}

impl Case {
    /// A case without bias or activation, scales swizzled: what each test then varies.
    fn new(
        (prepared, scheme, interleaved): (bool, Scheme, bool),
        (m, n, k): (usize, usize, usize),
        exact: bool,
    ) -> Self {
        let (bias, activation, layout) = (false, Activation::Identity, ScaleLayout::Swizzled128x4);
        Self { scheme, interleaved, m, n, k, exact, bias, activation, layout, prepared }
    }

    fn what<I: DeviceElement, O: DeviceElement>(&self) -> String {
        format!(
            "{}{} x {:?}{} {}x{}x{} {:?} {} bias={} {:?} -> {}",
            if self.prepared { "prepared " } else { "" },
            I::SUFFIX,
            self.scheme,
            if self.interleaved { " interleaved" } else { "" },
            self.m,
            self.n,
            self.k,
            self.layout,
            if self.exact { "exact" } else { "random" },
            self.bias,
            self.activation,
            O::SUFFIX
        )
    }
}

/// Weights on the device, in the layout a case asks for.
enum Held {
    Quantized(DeviceQuantized),
    Prepared(PreparedWeights),
}

impl Held {
    /// Uploads `w`; prepared weights must really be prepared (not kept in their
    /// checkpoint layout), or the case would test the general kernel twice.
    fn new(dev: &Device, w: &QuantizedMatrix, prepared: bool) -> Self {
        if !prepared {
            return Self::Quantized(DeviceQuantized::from_host(dev, w).unwrap());
        }
        let p = PreparedWeights::from_host(dev, w).unwrap();
        assert_eq!(p.unprepared_reason(), None, "{:?}: these weights must take the prepared layout", w.scheme());
        Self::Prepared(p)
    }

    fn get(&self) -> GemvWeights<'_> {
        match self {
            Self::Quantized(w) => w.into(),
            Self::Prepared(w) => w.into(),
        }
    }
}

/// Host inputs of a case: weights, activations, bias, alpha.
struct Inputs<I> {
    w: QuantizedMatrix,
    x: Vec<I>,
    bias: Vec<f32>,
    alpha: Option<f32>,
}

fn inputs<I: blockscale_formats::Source>(c: &Case, rng: &mut Rng) -> Inputs<I> {
    let w = weights(rng, (c.n, c.k), c.scheme, c.layout, c.interleaved, c.exact);
    let x = activations::<I>(rng, c.m, c.k, c.exact);
    let bias = (0..c.n).map(|_| rng.value()).collect();
    // Random NVFP4 keeps alpha from the weights' per-tensor scale (folded on the device).
    let alpha = if c.exact || c.scheme == Scheme::NvFp4 { None } else { Some(1.5f32) };
    Inputs { w, x, bias, alpha }
}

/// The reference for one side (M x N of `O`), and the per-element bound of its sum.
fn reference<I: DeviceElement + cpu::Input, O: DeviceElement>(
    c: &Case,
    inp: &Inputs<I>,
    activation: Activation,
) -> (Array2<O>, Vec<f64>, f64) {
    let mut epi = Epilogue { alpha: inp.alpha, ..Default::default() }.with_activation(activation);
    if c.bias {
        epi = epi.with_bias(&inp.bias[..]);
    }
    let xv = ArrayView2::from_shape((c.m, c.k), &inp.x[..]).unwrap();
    let want = cpu::gemm_weight_only_reference::<I, O>(xv, &inp.w, &epi).unwrap();
    let alpha = epi.alpha_weight_only(inp.w.scheme(), inp.w.global_scale()) as f64;
    // The GEMV scales each block's exact sum in f32: no operand is rounded.
    (want, weight_only_bound(&inp.x, &inp.w, c.m, false), alpha)
}

/// Activations on the device, rows at `stride` (a multiple of 8 elements).
fn upload_x<I: DeviceElement>(
    dev: &Device,
    x: &[I],
    m: usize,
    k: usize,
    stride: usize,
) -> blockscale_cuda::cudarc::driver::CudaSlice<I> {
    let mut host = vec![I::from_f32(0.0); m * stride];
    for r in 0..m {
        host[r * stride..r * stride + k].copy_from_slice(&x[r * k..(r + 1) * k]);
    }
    dev.stream().clone_htod(&host).unwrap()
}

/// Random row-major weights (swizzled scales) and bf16 activations on the device, rows
/// unpadded, from `seed`.
fn random_operands(
    dev: &Device,
    seed: u64,
    scheme: Scheme,
    (m, n, k): (usize, usize, usize),
) -> (QuantizedMatrix, blockscale_cuda::cudarc::driver::CudaSlice<bf16>) {
    let mut rng = Rng::new(seed);
    let w = weights(&mut rng, (n, k), scheme, ScaleLayout::Swizzled128x4, false, false);
    let x = activations::<bf16>(&mut rng, m, k, false);
    (w, upload_x(dev, &x, m, k, k))
}

fn run_case<I: GemvInput + cpu::Input, O: DeviceElement>(dev: &Device, c: &Case, seed: u64) {
    let mut rng = Rng::new(seed | 1);
    let inp = inputs::<I>(c, &mut rng);
    let (want, t, alpha) = reference::<I, O>(c, &inp, c.activation);

    let stride = c.k.next_multiple_of(8) + 8 * (seed as usize % 2);
    let dx = upload_x(dev, &inp.x, c.m, c.k, stride);
    let held = Held::new(dev, &inp.w, c.prepared);
    let dw = held.get();
    let dbias = dev.stream().clone_htod(&inp.bias).unwrap();
    let mut epi = DeviceEpilogue { alpha: inp.alpha, ..Default::default() }.with_activation(c.activation);
    if c.bias {
        epi = epi.with_bias(&dbias);
    }
    let xm = DeviceMatrix { data: &dx, rows: c.m, k: c.k, row_stride: stride };
    let fresh = gemv::<I, O>(dev, xm, dw, &epi).unwrap();
    // Into a padded output: the padding must stay poisoned.
    let out_stride = c.n + 5;
    let mut d = poisoned::<O>(dev, c.m, out_stride);
    dev.reserve_workspace(gemv_workspace_size(dev, c.m, dw, false).unwrap()).unwrap();
    gemv_into(dev, xm, dw, &epi, DeviceMatrixMut { data: &mut d, rows: c.m, cols: c.n, row_stride: out_stride })
        .unwrap();
    let got = read_back(dev, &d, c.m, c.n, out_stride);
    let what = c.what::<I, O>();
    assert_same_bits(dev, &fresh, &got, &format!("{what}: gemv and gemv_into differ"));
    if c.exact {
        compare(&got, &want, None, &what);
    } else {
        compare(&got, &want, Some((&t, alpha, slope(c.activation))), &what);
    }
}

/// K per scheme: ragged against the 128-element step, a multiple of the block.
fn ragged_k(scheme: Scheme, variant: usize) -> usize {
    match scheme {
        Scheme::Fp8Block(_) | Scheme::Int4G128 => [384, 128, 640][variant % 3],
        Scheme::NvFp4 => [208, 48, 592][variant % 3],
        _ => [224, 32, 608][variant % 3],
    }
}

#[test]
fn every_scheme_matches_the_reference() {
    let Some(dev) = device() else { return };
    // M 1, 4, 9 and 16 (both kernels and their edges), N ragged against every row tile.
    let shapes = [(1, 70), (4, 131), (9, 33), (16, 200)];
    let mut seed = 1u64;
    for (prepared, si, scheme, interleaved) in runs() {
        for (v, &(m, n)) in shapes.iter().enumerate() {
            for exact in [true, false] {
                seed += 1;
                let turn = si + v + usize::from(prepared);
                let c = Case {
                    bias: !exact && turn % 2 == 0,
                    activation: if exact { Activation::Identity } else { ACTS[turn % 4] },
                    layout: if v % 2 == 0 { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear },
                    ..Case::new((prepared, scheme, interleaved), (m, n, ragged_k(scheme, v)), exact)
                };
                match turn % 4 {
                    0 => run_case::<bf16, bf16>(&dev, &c, seed),
                    1 => run_case::<f16, f32>(&dev, &c, seed),
                    2 => run_case::<bf16, f16>(&dev, &c, seed),
                    _ => run_case::<f16, bf16>(&dev, &c, seed),
                }
            }
        }
    }
}

/// Weights of a shape (their values do not matter), for asking how it is launched.
fn of_shape(dev: &Device, scheme: Scheme, interleaved: bool, n: usize, k: usize, prepared: bool) -> Held {
    Held::new(dev, &weights(&mut Rng::new(1), (n, k), scheme, ScaleLayout::Linear, interleaved, false), prepared)
}

/// Whether a GEMV of `m` rows (two or more) whose split K fits one wave keeps its partial
/// sums in the workspace: on prepared weights only when `BLOCKSCALE_GEMV_CLUSTERS=0`, or
/// when the grid is spread over the SMs (the default; `BLOCKSCALE_GEMV_SPREAD=0` turns it
/// off) and the partials hold at most 8 rows; otherwise they are added in a cluster (these
/// tests' shapes are far from filling an H100). run.sh runs these tests all three ways.
fn split_workspace(prepared: bool, m: usize) -> bool {
    let off = |name: &str| std::env::var(name).is_ok_and(|v| v.trim() == "0");
    !prepared || off("BLOCKSCALE_GEMV_CLUSTERS") || (!off("BLOCKSCALE_GEMV_SPREAD") && m <= 8)
}

/// Long K with few rows takes the split-K path (partials reduced in split order, through
/// the workspace or, on prepared weights, in a cluster); many rows with short K the
/// single pass. Both, for every scheme.
#[test]
fn split_k_and_single_pass() {
    let Some(dev) = device() else { return };
    let mut seed = 500u64;
    for (prepared, si, scheme, interleaved) in runs() {
        // 13000 rows give every SM of an H100 (132) or RTX PRO 6000 (188) a row tile.
        for &(m, n, k, exact) in &[(3, 40, 4096, true), (16, 72, 2048, false), (2, 13000, 256, false)] {
            seed += 1;
            let c = Case {
                bias: !exact,
                activation: if exact { Activation::Identity } else { ACTS[si % 4] },
                ..Case::new((prepared, scheme, interleaved), (m, n, k), exact)
            };
            let held = of_shape(&dev, scheme, interleaved, n, k, prepared);
            let workspace = gemv_workspace_size(&dev, m, held.get(), false).unwrap() > 0;
            assert_eq!(
                workspace,
                n < 1000 && split_workspace(prepared, m),
                "{scheme:?} {m}x{n}x{k}: split-K partials expected only for the short N"
            );
            if si % 2 == 0 {
                run_case::<bf16, bf16>(&dev, &c, seed);
            } else {
                run_case::<f16, f32>(&dev, &c, seed);
            }
        }
    }
}

/// The gated GEMV against two reference GEMVs combined on the host.
fn run_gated<I: GemvInput + cpu::Input, O: DeviceElement>(
    dev: &Device,
    c: &Case,
    acts: (Activation, Activation),
    seed: u64,
) {
    let mut rng = Rng::new(seed | 1);
    let gate = inputs::<I>(c, &mut rng);
    let mut up = inputs::<I>(c, &mut rng);
    up.x.clone_from(&gate.x);
    // Each side in f32, then combined as the kernel does: one f32 product, one rounding to O.
    let (g32, tg, ag) = reference::<I, f32>(c, &gate, acts.0);
    let (u32_, tu, au) = reference::<I, f32>(c, &up, acts.1);
    let want: Array2<O> = Array2::from_shape_fn((c.m, c.n), |(i, j)| O::from_f32(g32[(i, j)] * u32_[(i, j)]));

    let dx = upload_x(dev, &gate.x, c.m, c.k, c.k.next_multiple_of(8));
    let (dg, du) = (Held::new(dev, &gate.w, c.prepared), Held::new(dev, &up.w, c.prepared));
    let (bg, bu) = (dev.stream().clone_htod(&gate.bias).unwrap(), dev.stream().clone_htod(&up.bias).unwrap());
    let side = |alpha, bias, act| {
        let e = DeviceEpilogue { alpha, ..Default::default() }.with_activation(act);
        if c.bias { e.with_bias(bias) } else { e }
    };
    let weights = GatedWeights {
        gate: dg.get(),
        gate_epilogue: side(gate.alpha, &bg, acts.0),
        up: du.get(),
        up_epilogue: side(up.alpha, &bu, acts.1),
    };
    let xm = DeviceMatrix { data: &dx, rows: c.m, k: c.k, row_stride: c.k.next_multiple_of(8) };
    let fresh = gemv_gated::<I, O>(dev, xm, &weights).unwrap();
    let mut d = poisoned::<O>(dev, c.m, c.n);
    dev.reserve_workspace(gemv_workspace_size(dev, c.m, dg.get(), true).unwrap()).unwrap();
    gemv_gated_into(dev, xm, &weights, DeviceMatrixMut::new(&mut d, c.m, c.n)).unwrap();
    let got = read_back(dev, &d, c.m, c.n, c.n);
    let what = format!("gated {:?} {}", acts, c.what::<I, O>());
    assert_same_bits(dev, &fresh, &got, &format!("{what}: gemv_gated and gemv_gated_into differ"));
    if c.exact {
        compare(&got, &want, None, &what);
        return;
    }
    // |g u - g' u'| <= |u| dg + |g| du + dg du, each side's error within its own bound
    // (plus 8 ulp_f32 for its activation), then the product's f32 and output roundings.
    let t: Vec<f64> = (0..c.m * c.n)
        .map(|e| {
            let (i, j) = (e / c.n, e % c.n);
            let (g, u) = (g32[(i, j)] as f64, u32_[(i, j)] as f64);
            let eg = slope(acts.0) * (ag.abs() * tg[e] + 8.0 * ulp_f32(g));
            let eu = slope(acts.1) * (au.abs() * tu[e] + 8.0 * ulp_f32(u));
            u.abs() * eg + g.abs() * eu + eg * eu
        })
        .collect();
    // compare() adds slope (|alpha| t + 8 ulp_f32(want)) + ulp_O(want): alpha 1, slope 1.
    compare(&got, &want, Some((&t, 1.0, 1.0)), &what);
}

#[test]
fn gated_matches_two_references() {
    let Some(dev) = device() else { return };
    let mut seed = 800u64;
    for (prepared, si, scheme, interleaved) in runs() {
        // Exact with identity on both sides (bit for bit), then SwiGLU and GELU-gated
        // random data; short K (single pass) and long K with few rows (split-K).
        for (v, &(m, n, k, exact)) in
            [(5, 100, 256, true), (1, 130, 512, false), (16, 48, 3072, false)].iter().enumerate()
        {
            seed += 1;
            let c = Case {
                bias: v == 1,
                layout: if si % 2 == 0 { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear },
                ..Case::new((prepared, scheme, interleaved), (m, n, k), exact)
            };
            let acts = match v {
                0 => (Activation::Identity, Activation::Identity),
                1 => (Activation::Silu, Activation::Identity),
                _ => (Activation::GeluTanh, Activation::GeluErf),
            };
            match (si + v) % 3 {
                0 => run_gated::<bf16, bf16>(&dev, &c, acts, seed),
                1 => run_gated::<f16, f16>(&dev, &c, acts, seed),
                _ => run_gated::<bf16, f32>(&dev, &c, acts, seed),
            }
        }
    }
}

#[test]
fn non_finite_inputs_propagate_like_the_reference() {
    let Some(dev) = device() else { return };
    let (m, n, k) = (4, 70, 256);
    let mut rng = Rng::new(77);
    for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3, Scheme::MxFp8E5M2, Scheme::Fp8Block(Fp8Tile::Row1x128)] {
        // Poisoned weight blocks (NaN in row 5, Inf in row 9) and NaN / Inf activations.
        let mut xw: Vec<f32> = (0..n * k).map(|_| rng.value()).collect();
        xw[5 * k + 17] = f32::NAN;
        xw[9 * k + 200] = f32::INFINITY;
        let o = QuantizeOptions::default().with_non_finite(NonFinite::Poison);
        let w = cpu::quantize_slice(&xw, n, k, scheme, &o).unwrap();
        let mut x: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(rng.value())).collect();
        x[k + 3] = bf16::NAN; // row 1
        x[2 * k + 40] = bf16::INFINITY; // row 2
        let xv = ArrayView2::from_shape((m, k), &x[..]).unwrap();
        let want = cpu::gemm_weight_only_reference::<bf16, f32>(xv, &w, &Epilogue::default()).unwrap();
        let got = gemv_host::<bf16, f32>(&dev, xv, &w, &Epilogue::default()).unwrap();
        // Prepared: NaN scales (NVFP4, MX) keep the matrix in its checkpoint layout; FP8
        // block's f32 scales are applied after the sums, so it takes the prepared layout.
        let pw = PreparedWeights::from_host(&dev, &w).unwrap();
        let expected = if matches!(scheme, Scheme::Fp8Block(_)) { None } else { Some(Unpreparable::SpecialScale) };
        assert_eq!(pw.unprepared_reason(), expected, "{scheme:?}");
        let dx = dev.stream().clone_htod(&x).unwrap();
        let py = gemv::<bf16, f32>(&dev, DeviceMatrix::new(&dx, m, k), &pw, &DeviceEpilogue::default()).unwrap();
        let py = Array2::from_shape_vec((m, n), dev.stream().clone_dtoh(&py).unwrap()).unwrap();
        for (label, got) in [("checkpoint layout", &got), ("prepared", &py)] {
            for (i, (g, r)) in got.iter().zip(want.iter()).enumerate() {
                assert_eq!(g.is_nan(), r.is_nan(), "{scheme:?} {label}: element {i}: got {g}, want {r}");
                if r.is_infinite() {
                    assert_eq!(g, r, "{scheme:?} {label}: element {i}");
                }
            }
            assert!(got.row(1).iter().all(|v| v.is_nan()), "{scheme:?} {label}: a NaN activation poisons its row");
            assert!(
                got.column(5).iter().all(|v| v.is_nan()),
                "{scheme:?} {label}: a NaN weight block poisons its column"
            );
        }
    }
}

#[test]
fn results_do_not_change_from_run_to_run() {
    let Some(dev) = device() else { return };
    // Split-K (N = 64, K = 8192) and gated: the sums are added in a fixed order.
    let (m, n, k) = (8, 64, 8192);
    let (w, dx) = random_operands(&dev, 31, Scheme::MxFp4, (m, n, k));
    for prepared in [false, true] {
        let held = Held::new(&dev, &w, prepared);
        let dw = held.get();
        let ws = gemv_workspace_size(&dev, m, dw, false).unwrap();
        assert_eq!(ws > 0, split_workspace(prepared, m), "this shape splits K");
        let xm = DeviceMatrix::new(&dx, m, k);
        let first =
            dev.stream().clone_dtoh(&gemv::<bf16, f32>(&dev, xm, dw, &DeviceEpilogue::default()).unwrap()).unwrap();
        let gated = GatedWeights::swiglu(dw, dw);
        let g_first = dev.stream().clone_dtoh(&gemv_gated::<bf16, f32>(&dev, xm, &gated).unwrap()).unwrap();
        for _ in 0..20 {
            let again =
                dev.stream().clone_dtoh(&gemv::<bf16, f32>(&dev, xm, dw, &DeviceEpilogue::default()).unwrap()).unwrap();
            assert!(again.iter().zip(&first).all(|(a, b)| a.to_bits() == b.to_bits()), "prepared {prepared}");
            let g = dev.stream().clone_dtoh(&gemv_gated::<bf16, f32>(&dev, xm, &gated).unwrap()).unwrap();
            assert!(g.iter().zip(&g_first).all(|(a, b)| a.to_bits() == b.to_bits()), "prepared {prepared}");
        }
    }
}

#[test]
fn gemv_into_replays_in_a_cuda_graph() {
    let Some(dev) = device() else { return };
    // N = 96, K = 4096: split-K, so the graph holds the GEMV and its reduction.
    let (m, n, k) = (2, 96, 4096);
    let (w, dx) = random_operands(&dev, 5, Scheme::NvFp4, (m, n, k));
    for prepared in [false, true] {
        // Prepared: one launch whose last CTA per tile adds the partials (its counters must
        // be back at zero for every replay), or (not spread) whose splits add their sums in
        // a cluster.
        let held = Held::new(&dev, &w, prepared);
        let dw = held.get();
        let epi = DeviceEpilogue::default().with_activation(Activation::Silu);
        let xm = DeviceMatrix::new(&dx, m, k);
        let expect = dev.stream().clone_dtoh(&gemv::<bf16, bf16>(&dev, xm, dw, &epi).unwrap()).unwrap();
        assert_eq!(
            gemv_workspace_size(&dev, m, dw, false).unwrap() > 0,
            split_workspace(prepared, m),
            "this shape splits K"
        );
        dev.reserve_workspace(gemv_workspace_size(&dev, m, dw, false).unwrap()).unwrap();
        let mut d = poisoned::<bf16>(&dev, m, n);
        replay_in_graph(&dev, &mut d, |d| gemv_into(&dev, xm, dw, &epi, DeviceMatrixMut::new(d, m, n)), &expect);
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let q = |rows, k, scheme| small_quantized(&dev, rows, k, scheme);
    let w = q(32, 64, Scheme::NvFp4);
    let epi = DeviceEpilogue::default();
    let x = dev.stream().clone_htod(&vec![bf16::ZERO; 17 * 64]).unwrap();
    let rows = |m| DeviceMatrix { data: &x, rows: m, k: 64, row_stride: 64 };
    for m in [0, GEMV_MAX_ROWS + 1] {
        assert!(matches!(gemv::<bf16, f32>(&dev, rows(m), &w, &epi), Err(CudaError::GemvRows { m: got }) if got == m));
        assert!(matches!(gemv_workspace_size(&dev, m, &w, false), Err(CudaError::GemvRows { .. })));
    }
    let wrong_k = DeviceMatrix { data: &x, rows: 2, k: 32, row_stride: 32 };
    assert!(matches!(gemv::<bf16, f32>(&dev, wrong_k, &w, &epi), Err(CudaError::KMismatch { a: 32, b: 64 })));
    // A row stride that breaks the 16-byte row alignment, one below K, too short a buffer.
    for stride in [68, 60] {
        let bad = DeviceMatrix { data: &x, rows: 2, k: 64, row_stride: stride };
        assert!(matches!(gemv::<bf16, f32>(&dev, bad, &w, &epi), Err(CudaError::BadStride { .. })), "stride {stride}");
    }
    let long = DeviceMatrix { data: &x, rows: 16, k: 64, row_stride: 72 };
    assert!(matches!(gemv::<bf16, f32>(&dev, long, &w, &epi), Err(CudaError::BufferLength { .. })));
    let short_bias = dev.stream().clone_htod(&[0f32; 31]).unwrap();
    assert!(matches!(
        gemv::<bf16, f32>(&dev, rows(2), &w, &DeviceEpilogue::default().with_bias(&short_bias)),
        Err(CudaError::BiasLength { expected: 32, actual: 31 })
    ));
    assert!(matches!(
        gemv::<bf16, f32>(&dev, rows(2), &w, &DeviceEpilogue::default().with_alpha(f32::INFINITY)),
        Err(CudaError::InvalidAlpha(_))
    ));
    let mut out = dev.stream().alloc_zeros::<f32>(2 * 32).unwrap();
    assert!(matches!(
        gemv_into(&dev, rows(2), &w, &epi, DeviceMatrixMut::new(&mut out, 2, 31)),
        Err(CudaError::OutputShape { .. })
    ));
    assert!(matches!(
        gemv_into(&dev, rows(2), &w, &epi, DeviceMatrixMut { data: &mut out, rows: 2, cols: 32, row_stride: 40 }),
        Err(CudaError::BufferLength { .. })
    ));
    // Gated: the two matrices must agree in scheme, shape and layouts.
    let (w48, mx) = (q(48, 64, Scheme::NvFp4), q(32, 64, Scheme::MxFp4));
    for other in [&w48, &mx] {
        assert!(matches!(
            gemv_gated::<bf16, f32>(&dev, rows(2), &GatedWeights::swiglu(&w, other)),
            Err(CudaError::GatedMismatch { .. })
        ));
    }
    // Gated: both prepared or neither.
    let hw32 = cpu::quantize_slice(&vec![0.5f32; 32 * 64], 32, 64, Scheme::NvFp4, &QuantizeOptions::default()).unwrap();
    let pw = PreparedWeights::from_host(&dev, &hw32).unwrap();
    assert_eq!(pw.unprepared_reason(), None);
    assert!(matches!(
        gemv_gated::<bf16, f32>(&dev, rows(2), &GatedWeights::swiglu(&w, &pw)),
        Err(CudaError::MixedPreparation)
    ));
    // The prepared path checks its inputs the same way.
    assert!(matches!(gemv::<bf16, f32>(&dev, wrong_k, &pw, &epi), Err(CudaError::KMismatch { a: 32, b: 64 })));
    assert!(matches!(
        gemv::<bf16, f32>(&dev, rows(2), &pw, &DeviceEpilogue::default().with_bias(&short_bias)),
        Err(CudaError::BiasLength { expected: 32, actual: 31 })
    ));
    // A fresh device has no workspace: a split-K gemv_into asks for it, naming the size.
    let fresh = Device::new(0).unwrap();
    let big = {
        let xs: Vec<f32> = (0..32 * 4096).map(|i| (i % 7) as f32 - 3.0).collect();
        DeviceQuantized::from_host(
            &fresh,
            &cpu::quantize_slice(&xs, 32, 4096, Scheme::NvFp4, &QuantizeOptions::default()).unwrap(),
        )
        .unwrap()
    };
    let xb = fresh.stream().clone_htod(&vec![bf16::ZERO; 4096]).unwrap();
    let mut ob = fresh.stream().alloc_zeros::<bf16>(32).unwrap();
    let xm = DeviceMatrix::new(&xb, 1, 4096);
    match gemv_into(&fresh, xm, &big, &epi, DeviceMatrixMut::new(&mut ob, 1, 32)) {
        Err(CudaError::WorkspaceTooSmall { needed, available: 0 }) => {
            assert_eq!(needed, gemv_workspace_size(&fresh, 1, &big, false).unwrap());
            fresh.reserve_workspace(needed).unwrap();
            gemv_into(&fresh, xm, &big, &epi, DeviceMatrixMut::new(&mut ob, 1, 32)).unwrap();
        }
        other => panic!("expected WorkspaceTooSmall, got {other:?}"),
    }
    // The host convenience checks too.
    let hx = Array2::<bf16>::zeros((17, 64));
    let hw = cpu::quantize_slice(&vec![1f32; 32 * 64], 32, 64, Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
    assert!(matches!(
        gemv_host::<bf16, f32>(&dev, hx.view(), &hw, &Epilogue::default()),
        Err(CudaError::GemvRows { m: 17 })
    ));
}

/// A short run of every kernel (both M variants, split and single pass, gated): what
/// `run.sh sanitize` runs under compute-sanitizer.
#[test]
fn gemv_sanitizer_smoke() {
    let Some(dev) = device() else { return };
    for (si, (scheme, interleaved)) in weight_schemes().into_iter().enumerate() {
        // INT4-G128: 5 scale columns, so half the general kernel's scale words are the
        // high halves.
        let k = match scheme {
            Scheme::Fp8Block(_) => 1024,
            Scheme::Int4G128 => 640,
            _ => 608,
        };
        let c = Case {
            bias: true,
            activation: Activation::Silu,
            layout: [ScaleLayout::Swizzled128x4, ScaleLayout::Linear][si / 2 % 2],
            ..Case::new((false, scheme, interleaved), ([3, 16][si % 2], 70, k), false)
        };
        run_case::<bf16, bf16>(&dev, &c, 900 + si as u64);
        run_case::<bf16, bf16>(&dev, &Case { prepared: true, ..c }, 920 + si as u64);
        run_case::<f16, f32>(&dev, &Case { prepared: true, m: 9, ..c }, 940 + si as u64);
    }
    let c = Case { bias: true, ..Case::new((false, Scheme::MxFp8E4M3, false), (2, 40, 1024), false) };
    run_gated::<f16, f32>(&dev, &c, (Activation::Silu, Activation::Identity), 950);
    run_gated::<bf16, f32>(&dev, &Case { prepared: true, ..c }, (Activation::Silu, Activation::Identity), 951);
    // Prepared weights with K split (in a cluster, or through the workspace).
    let c = Case { bias: true, ..Case::new((true, Scheme::NvFp4, false), (3, 70, 4096), false) };
    run_case::<bf16, bf16>(&dev, &c, 960);
    run_gated::<bf16, f32>(&dev, &Case { m: 16, ..c }, (Activation::Silu, Activation::Identity), 961);
}
