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
use blockscale_cuda::{
    Activation, Arch, CudaError, Device, DeviceElement, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized,
    Epilogue, GemvInput, PreparedWeights, gemm, gemm_into, gemm_prepared, gemm_prepared_into,
    gemm_prepared_workspace_size, gemm_weight_only, gemm_weight_only_into, gemm_weight_only_prepared,
    gemm_weight_only_prepared_into, gemm_weight_only_prepared_workspace_size, gemm_weight_only_workspace_size,
    gemm_workspace_size,
};
use blockscale_formats::{Fp8Tile, NonFinite, QuantizeOptions, ScaleLayout, Scheme};
use common::device;
use common::oracle::*;
use half::{bf16, f16};

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

fn run_case<O: DeviceElement>(dev: &Device, c: &Case, seed: u64) {
    let mut rng = Rng::new(seed | 1);
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
    assert_same_bits(dev, &fresh, &got, &format!("{what}: gemm and gemm_into differ"));
    if c.exact {
        compare(&got, &want, None, &what);
    } else {
        let (av, bv) = (raw_values(&qa), raw_values(&qb));
        let alpha_eff = host_epi.alpha_quantized(qa.global_scale(), qb.global_scale());
        let fp8 = matches!(c.b, Scheme::Fp8Block(Fp8Tile::Tile128x128));
        let rounded = if matches!(c.b, Scheme::Fp8Block(Fp8Tile::Row1x128)) { 2 } else { 0 };
        let mxfp8 = |s: Scheme| matches!(s, Scheme::MxFp8E4M3 | Scheme::MxFp8E5M2);
        // MXFP8 pairs with K a multiple of 128 run on Hopper's FP8 tensor cores up to
        // M = BLOCKSCALE_GEMM_MX_WGMMA_MAX_M (512 by default, fgemm.rs).
        let rel =
            if dev.arch() == Arch::Sm90 && mxfp8(c.a) && mxfp8(c.b) && c.k.is_multiple_of(128) && c.m <= mx_max_m() {
                mx_fp8_bound(c.k)
            } else {
                relative_bound(fp8, c.k, 1, rounded)
            };
        let t: Vec<f64> = abs_products(&av, &bv, c.m, c.n, c.k).into_iter().map(|t| t * rel).collect();
        compare(&got, &want, Some((&t, alpha_eff as f64, slope(c.activation))), &what);
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

/// FP8 block pairs at small and middle M: the FP8 wgmma kernel up to M = 128 (256 where K
/// is at most 8192, 512 where it is at most 2048) and CUTLASS's kernel above by default
/// (here 513 x 136 x 256), the FP8 wgmma kernel up to 512 with activation tiles paired
/// wherever K is not split when `BLOCKSCALE_GEMM_FP8_WGMMA_MAX_M=512
/// BLOCKSCALE_GEMM_FP8_PAIRS=2` are set (`gpu-bundle/run.sh test` runs this file both
/// ways): K split across SMs and added back inside the kernel, pairs of activation tiles
/// sharing each weight tile by multicast (ragged M and N, 1x128 and 128x128 activations,
/// exact and random data, bias and activations, every output type, padded and odd output
/// strides), and M = 512 / 513 on both sides of its boundary.
#[test]
fn fp8_block_small_m_splits_k() {
    let Some(dev) = hopper() else { return };
    // (pair, M x N x K), with the FP8 wgmma kernel up to 512: 64-row tiles up to 512 x 256
    // x 512, K split in clusters at 64 x 300 x 4096 (3 tiles of 32 blocks), 77 x 136 x
    // 2048 and 200 x 1000 x 1024; 128-row tiles at 300 x 3000 x 512 (72 tiles); 513 runs
    // CUTLASS. Pairs (no split; the second run): 100 x 1000 x 512 (two 64-row tiles, the
    // second ragged), 512 x 256 x 512, and 300 x 3000 x 512 (three 128-row tiles: the last
    // pairs with zeros past M). The last two: the tile heights by default.
    let shapes = [
        (7, (100, 1000, 512)),
        (8, (300, 3000, 512)),
        (7, (64, 300, 4096)),
        (8, (77, 136, 2048)),
        (7, (200, 1000, 1024)),
        (8, (512, 256, 512)),
        (7, (513, 136, 256)),
        // 128-row tiles at M <= 128 (its 71 tiles fill more than half the SMs); and where
        // the planner weighs both heights (M = 256, 17 weight tiles: 68 64-row tiles or 34
        // 128-row ones, each with the split its cluster counts allow).
        (7, (120, 9000, 256)),
        (8, (256, 2100, 1536)),
    ];
    let mut seed = 4000u64;
    for (i, &(pair, (m, n, k))) in shapes.iter().enumerate() {
        for exact in [true, false] {
            seed += 1;
            let c = sweep_case(PAIRS[pair], (m, n, k), exact, i, ScaleLayout::Linear, i % 4);
            match i % 3 {
                0 => run_case::<bf16>(&dev, &c, seed),
                1 => run_case::<f16>(&dev, &c, seed),
                _ => run_case::<f32>(&dev, &c, seed),
            }
        }
    }
}

/// `BLOCKSCALE_GEMM_MX_WGMMA_MAX_M` as fgemm.rs reads it (512 by default).
fn mx_max_m() -> usize {
    std::env::var("BLOCKSCALE_GEMM_MX_WGMMA_MAX_M").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(512)
}

/// MXFP8 x MXFP8 on Hopper's FP8 tensor cores (every element-type pairing, K a multiple of
/// 128): 64-row tiles with and without K split across a cluster, 128-row tiles (256 x
/// 8320: 130 tiles), exact and random data, both scale layouts, bias and activations,
/// every output type, padded and odd output strides; M = 513 takes the dequantize
/// path unless `BLOCKSCALE_GEMM_MX_WGMMA_MAX_M` is raised (`gpu-bundle/run.sh test` runs
/// this file both ways). (K not a multiple of 128 always takes the dequantize path:
/// `every_pair_matches_the_reference`.)
#[test]
fn mxfp8_pairs_on_fp8_tensor_cores() {
    let Some(dev) = hopper() else { return };
    let pairs = [
        (Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
        (Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
        (Scheme::MxFp8E4M3, Scheme::MxFp8E5M2),
        (Scheme::MxFp8E5M2, Scheme::MxFp8E4M3),
    ];
    let shapes = [
        (1, 70, 128),
        (64, 300, 4096),
        (77, 136, 2048),
        (200, 1000, 1024),
        (256, 8320, 256),
        (300, 3000, 512),
        (513, 136, 256),
    ];
    let mut seed = 9000u64;
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        for (pi, &pair) in pairs.iter().enumerate() {
            for exact in [true, false] {
                seed += 1;
                let layout = if (i + pi) % 2 == 0 { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
                let c = sweep_case(pair, (m, n, k), exact, i + pi, layout, (i + pi) % 4);
                match (i + pi) % 3 {
                    0 => run_case::<bf16>(&dev, &c, seed),
                    1 => run_case::<f16>(&dev, &c, seed),
                    _ => run_case::<f32>(&dev, &c, seed),
                }
            }
        }
    }
}

/// One weight-only case: weights of `scheme` (scales swizzled where the scheme has that
/// layout), activations, bias and alpha drawn from `seed`, the CPU reference's output,
/// and the activations laid out at a row stride of `x_stride`.
struct WeightOnly<I, O> {
    qw: blockscale_formats::QuantizedMatrix,
    x: Vec<I>,
    bias: Vec<f32>,
    alpha: Option<f32>,
    want: ndarray::Array2<O>,
    strided: Vec<I>,
}

impl<I: DeviceElement + cpu::Input, O: DeviceElement> WeightOnly<I, O> {
    fn new(
        scheme: Scheme,
        interleaved: bool,
        (m, n, k): (usize, usize, usize),
        x_stride: usize,
        exact: bool,
        activation: Activation,
        seed: u64,
    ) -> Self {
        let mut rng = Rng::new(seed | 1);
        let qw = weights(&mut rng, (n, k), scheme, ScaleLayout::Swizzled128x4, interleaved, exact);
        let x: Vec<I> = activations(&mut rng, m, k, exact);
        let bias: Vec<f32> = (0..n).map(|_| rng.value()).collect();
        let alpha = if exact || scheme == Scheme::NvFp4 { None } else { Some(1.5f32) };
        let mut host_epi = Epilogue { alpha, ..Default::default() }.with_activation(activation);
        if !exact {
            host_epi = host_epi.with_bias(&bias[..]);
        }
        let xv = ndarray::ArrayView2::from_shape((m, k), &x[..]).unwrap();
        let want = cpu::gemm_weight_only_reference::<I, O>(xv, &qw, &host_epi).unwrap();
        let mut strided = vec![<I as blockscale_formats::Source>::from_f32(0.0); (m - 1) * x_stride + k];
        for r in 0..m {
            strided[r * x_stride..r * x_stride + k].copy_from_slice(&x[r * k..(r + 1) * k]);
        }
        Self { qw, x, bias, alpha, want, strided }
    }

    /// The device epilogue of the case (the bias on the device when not exact).
    fn epilogue<'a>(
        &self,
        dbias: &'a cudarc::driver::CudaSlice<f32>,
        exact: bool,
        activation: Activation,
    ) -> DeviceEpilogue<'a> {
        let epi = DeviceEpilogue { alpha: self.alpha, ..Default::default() }.with_activation(activation);
        if exact { epi } else { epi.with_bias(dbias) }
    }

    /// `got` against the reference: bit for bit when exact, else within the weight-only
    /// bound (`rounded`: the weights were rounded to bf16 on the way).
    fn check(&self, got: &[O], exact: bool, rounded: bool, activation: Activation, what: &str) {
        if exact {
            compare(got, &self.want, None, what);
        } else {
            let alpha_eff = Epilogue::<[f32]> { alpha: self.alpha, ..Default::default() }
                .alpha_weight_only(self.qw.scheme(), self.qw.global_scale());
            let m = self.want.nrows();
            let t = weight_only_bound(&self.x, &self.qw, m, rounded);
            compare(got, &self.want, Some((&t, alpha_eff as f64, slope(activation))), what);
        }
    }
}

/// Weight-only: activations of type I (with a row stride) times weights of `scheme`.
#[allow(clippy::too_many_arguments)]
fn run_weight_only<I: DeviceElement + cpu::Input, O: DeviceElement>(
    dev: &Device,
    scheme: Scheme,
    interleaved: bool,
    (m, n, k): (usize, usize, usize),
    x_stride: usize,
    exact: bool,
    activation: Activation,
    seed: u64,
) {
    let c = WeightOnly::<I, O>::new(scheme, interleaved, (m, n, k), x_stride, exact, activation, seed);
    // The activations on the device with a row stride of `x_stride`.
    let dx = dev.stream().clone_htod(&c.strided).unwrap();
    let dw = DeviceQuantized::from_host(dev, &c.qw).unwrap();
    let dbias = dev.stream().clone_htod(&c.bias).unwrap();
    let epi = c.epilogue(&dbias, exact, activation);
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
    let rounded = matches!(scheme, Scheme::Int4G32 | Scheme::Int4G128 | Scheme::Fp8Block(_));
    c.check(&got, exact, rounded, activation, &what);
}

#[test]
fn weight_only_every_scheme_and_activation_type() {
    let Some(dev) = hopper() else { return };
    let mut seed = 1000;
    for (i, &(scheme, interleaved)) in weight_schemes().iter().enumerate() {
        let k = if matches!(scheme, Scheme::Fp8Block(_) | Scheme::Int4G128) { 384 } else { 224 };
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

/// Weight-only on prepared weights: activations of type I (bf16 or f16, rows at a multiple
/// of 8 elements) times weights of `scheme`. The fused kernels (on Hopper `wgmma` for
/// bf16 x every scheme from M = 65 to 1024, `mma.sync` up to M = 256
/// otherwise) decode the weights in registers and round nothing (scales applied exactly
/// in bf16, or in f32 per block); above, the weights are decoded to bf16 for CUTLASS's BF16 GEMM, which rounds
/// INT4 and FP8-block weights (times their scales) once, as the checkpoint layout's path.
fn run_weight_only_prepared<I: GemvInput + cpu::Input, O: DeviceElement>(
    dev: &Device,
    scheme: Scheme,
    (m, n, k): (usize, usize, usize),
    exact: bool,
    activation: Activation,
    seed: u64,
) {
    let stride = k.next_multiple_of(8) + 8;
    let c = WeightOnly::<I, O>::new(scheme, false, (m, n, k), stride, exact, activation, seed);
    let dx = dev.stream().clone_htod(&c.strided).unwrap();
    let pw = PreparedWeights::from_host(dev, &c.qw).unwrap();
    assert_eq!(pw.unprepared_reason(), None, "{scheme:?}: these weights must take the prepared layout");
    let dbias = dev.stream().clone_htod(&c.bias).unwrap();
    let epi = c.epilogue(&dbias, exact, activation);
    let xm = DeviceMatrix { data: &dx, rows: m, k, row_stride: stride };
    let fresh = gemm_weight_only_prepared::<I, O>(dev, xm, &pw, &epi).unwrap();
    dev.reserve_workspace(gemm_weight_only_prepared_workspace_size::<I, O>(dev, xm, &pw, n + 3).unwrap()).unwrap();
    let mut d = poisoned::<O>(dev, m, n + 3);
    gemm_weight_only_prepared_into(
        dev,
        xm,
        &pw,
        &epi,
        DeviceMatrixMut { data: &mut d, rows: m, cols: n, row_stride: n + 3 },
    )
    .unwrap();
    let got = read_back(dev, &d, m, n, n + 3);
    let what = format!(
        "prepared {} x {scheme:?} {m}x{n}x{k} {} {activation:?} -> {}",
        I::SUFFIX,
        if exact { "exact" } else { "random" },
        O::SUFFIX
    );
    assert_same_bits(dev, &fresh, &got, &format!("{what}: allocating and _into differ"));
    // Rounded: the bf16 decode for CUTLASS, above the fused kernels' M (on Hopper bf16
    // activations, and f16 with the post-scaled schemes, run wgmma up to M = 1024,
    // INT4-G32 with bf16 up to 256, unless BLOCKSCALE_GEMM_WGMMA=0 leaves pgemm up to 256).
    let post = matches!(scheme, Scheme::Int4G32 | Scheme::Int4G128 | Scheme::Fp8Block(_));
    let g32_bf16 = scheme == Scheme::Int4G32 && I::SUFFIX == "bf16";
    let wgmma_on = std::env::var("BLOCKSCALE_GEMM_WGMMA").map_or(true, |v| v.trim() != "0");
    let wgmma = wgmma_on && (I::SUFFIX == "bf16" || post) && m <= if g32_bf16 { 256 } else { 1024 };
    let rounded = m > 256 && !wgmma && post;
    c.check(&got, exact, rounded, activation, &what);
}

#[test]
fn weight_only_prepared_every_scheme() {
    let Some(dev) = hopper() else { return };
    let mut seed = 3000;
    let schemes: Vec<Scheme> = weight_schemes().iter().filter(|(_, il)| !il).map(|&(s, _)| s).collect();
    for (i, &scheme) in schemes.iter().enumerate() {
        // K ragged against the 64-element slab; M across the 64- and 128-row activation
        // tiles (9: the GEMV; 65 and 300 with bf16 on Hopper: wgmma; 300 with f16: the
        // bf16 decode and CUTLASS); N ragged against the 128-row tile; a
        // long K with few tiles takes the split-K path.
        let k = if matches!(scheme, Scheme::Fp8Block(_) | Scheme::Int4G128) { 384 } else { 224 };
        for (j, &(m, n, k)) in
            [(9, 40, k), (17, 72, k), (64, 130, k), (65, 200, k), (300, 96, k), (40, 64, 4096)].iter().enumerate()
        {
            for exact in [true, false] {
                seed += 1;
                let act = if exact { Activation::Identity } else { ACTS[(i + j) % 4] };
                match (i + j) % 3 {
                    0 => run_weight_only_prepared::<bf16, bf16>(&dev, scheme, (m, n, k), exact, act, seed),
                    1 => run_weight_only_prepared::<f16, f32>(&dev, scheme, (m, n, k), exact, act, seed),
                    _ => run_weight_only_prepared::<bf16, f16>(&dev, scheme, (m, n, k), exact, act, seed),
                }
            }
        }
    }
}

#[test]
fn weight_only_prepared_takes_more_tiles_than_the_gpu_holds() {
    let Some(dev) = hopper() else { return };
    // 47 x 3 tiles of 128 x 128 (the wgmma kernel on Hopper): more than one wave, so
    // each persistent CTA takes several tiles (and pgemm elsewhere several waves).
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::MxFp4, (300, 5980, 320), true, Activation::Identity, 71);
    run_weight_only_prepared::<bf16, f32>(&dev, Scheme::NvFp4, (300, 5980, 320), false, Activation::Silu, 72);
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::MxFp8E4M3, (260, 6016, 224), false, Activation::GeluErf, 73);
    // The post-scaled schemes (a scale step per block: 32 or 128 elements), exact and
    // random, in one wave and in several, with and without split K.
    for (i, scheme) in
        [Scheme::Int4G32, Scheme::Int4G128, Scheme::Fp8Block(Fp8Tile::Tile128x128), Scheme::Fp8Block(Fp8Tile::Row1x128)]
            .into_iter()
            .enumerate()
    {
        let seed = 80 + 4 * i as u64;
        // 71 x 3 tiles (INT4-G32, which takes wgmma up to M = 256: 71 x 2).
        let m = if scheme == Scheme::Int4G32 { 250 } else { 300 };
        run_weight_only_prepared::<bf16, bf16>(&dev, scheme, (m, 9000, 384), true, Activation::Identity, seed);
        run_weight_only_prepared::<bf16, f32>(&dev, scheme, (m, 9000, 640), false, Activation::Silu, seed + 1);
        run_weight_only_prepared::<bf16, bf16>(&dev, scheme, (130, 256, 4096), true, Activation::Identity, seed + 2);
        run_weight_only_prepared::<bf16, f16>(&dev, scheme, (200, 384, 2944), false, Activation::GeluTanh, seed + 3);
        // f16 activations (the wgmma kernel's f16 variant).
        run_weight_only_prepared::<f16, f32>(&dev, scheme, (m, 9000, 640), true, Activation::Identity, seed + 40);
        run_weight_only_prepared::<f16, bf16>(&dev, scheme, (130, 256, 4096), false, Activation::Silu, seed + 41);
    }
}

#[test]
fn weight_only_prepared_replays_in_a_cuda_graph_and_checks_its_inputs() {
    let Some(dev) = hopper() else { return };
    // M = 40, K = 4096 on 64 rows: one tile, split K (partial sums, last-CTA reduction).
    let (m, n, k) = (40, 64, 4096);
    let mut rng = Rng::new(15);
    let qw = weights(&mut rng, (n, k), Scheme::MxFp4, ScaleLayout::Swizzled128x4, false, false);
    let x: Vec<bf16> = activations(&mut rng, m, k, false);
    let dx = dev.stream().clone_htod(&x).unwrap();
    let pw = PreparedWeights::from_host(&dev, &qw).unwrap();
    let epi = DeviceEpilogue::default().with_activation(Activation::Silu);
    let xm = DeviceMatrix::new(&dx, m, k);
    assert!(gemm_weight_only_prepared_workspace_size::<bf16, bf16>(&dev, xm, &pw, n).unwrap() > 0, "this splits K");
    // The allocating call's bits, then the same from `_into` captured in a graph and
    // replayed, and five more allocating runs (partial sums added in split order).
    let replays_the_same = |xm: DeviceMatrix<'_, bf16>| {
        let m = xm.rows;
        let call = || gemm_weight_only_prepared::<bf16, bf16>(&dev, xm, &pw, &epi).unwrap();
        let expect = dev.stream().clone_dtoh(&call()).unwrap();
        dev.reserve_workspace(gemm_weight_only_prepared_workspace_size::<bf16, bf16>(&dev, xm, &pw, n).unwrap())
            .unwrap();
        let mut d = poisoned::<bf16>(&dev, m, n);
        replay_in_graph(
            &dev,
            &mut d,
            |d| gemm_weight_only_prepared_into(&dev, xm, &pw, &epi, DeviceMatrixMut::new(d, m, n)),
            &expect,
        );
        for _ in 0..5 {
            let again = dev.stream().clone_dtoh(&call()).unwrap();
            assert!(again.iter().zip(&expect).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    };
    replays_the_same(xm);
    // M = 130 on Hopper takes the wgmma kernel (its activation tiles and partial sums in
    // the workspace).
    let x2: Vec<bf16> = activations(&mut rng, 130, k, false);
    let dx2 = dev.stream().clone_htod(&x2).unwrap();
    replays_the_same(DeviceMatrix::new(&dx2, 130, k));
    // Typed errors.
    let wrong_k = DeviceMatrix { data: &dx, rows: 2, k: 64, row_stride: 64 };
    assert!(matches!(
        gemm_weight_only_prepared::<bf16, f32>(&dev, wrong_k, &pw, &epi),
        Err(CudaError::KMismatch { .. })
    ));
    let unaligned = DeviceMatrix { data: &dx, rows: 20, k, row_stride: k + 1 };
    assert!(matches!(
        gemm_weight_only_prepared::<bf16, f32>(&dev, unaligned, &pw, &epi),
        Err(CudaError::BadStride { .. })
    ));
    let empty = DeviceMatrix { data: &dx, rows: 0, k, row_stride: k };
    assert!(matches!(gemm_weight_only_prepared::<bf16, f32>(&dev, empty, &pw, &epi), Err(CudaError::Format(_))));
    let short_bias = dev.stream().clone_htod(&[0f32; 63]).unwrap();
    assert!(matches!(
        gemm_weight_only_prepared::<bf16, f32>(&dev, xm, &pw, &DeviceEpilogue::default().with_bias(&short_bias)),
        Err(CudaError::BiasLength { expected: 64, actual: 63 })
    ));
}

/// A quantized pair on prepared weights (`gemm_prepared`): the activations decoded to
/// bf16 exactly into the workspace, the weights in registers (the GEMV up to M = 16,
/// then where the weight-only product would take it the `wgmma` kernel on Hopper up to
/// M = 1024, else `mma.sync`), or both decoded to bf16 for CUTLASS above. Every route multiplies the same exact bf16 values
/// with f32 sums: exact data give the reference's bits, random data the BF16 bound.
fn run_prepared_pair<O: DeviceElement>(
    dev: &Device,
    (a, b): (Scheme, Scheme),
    (m, n, k): (usize, usize, usize),
    exact: bool,
    activation: Activation,
    seed: u64,
) {
    let mut rng = Rng::new(seed | 1);
    let (xa, xb) = (data(&mut rng, m, k, a, exact), data(&mut rng, n, k, b, exact));
    let a_layout = if seed.is_multiple_of(2) { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
    let (qa, qb) = (quantize(&xa, m, k, a, a_layout, exact), quantize(&xb, n, k, b, ScaleLayout::Linear, exact));
    let bias: Vec<f32> = (0..n).map(|_| rng.value()).collect();
    let alpha = if exact || a == Scheme::NvFp4 { None } else { Some(0.75f32) };
    let with_bias = !exact && !seed.is_multiple_of(3);
    let mut host_epi = Epilogue { alpha, ..Default::default() }.with_activation(activation);
    if with_bias {
        host_epi = host_epi.with_bias(&bias[..]);
    }
    let want = cpu::gemm_reference::<O>(&qa, &qb, &host_epi).unwrap();

    let da = DeviceQuantized::from_host(dev, &qa).unwrap();
    let pw = PreparedWeights::from_host(dev, &qb).unwrap();
    assert_eq!(pw.unprepared_reason(), None, "{b:?}: these weights must take the prepared layout");
    let dbias = dev.stream().clone_htod(&bias).unwrap();
    let mut epi = DeviceEpilogue { alpha, ..Default::default() }.with_activation(activation);
    if with_bias {
        epi = epi.with_bias(&dbias);
    }
    let fresh = gemm_prepared::<O>(dev, &da, &pw, &epi).unwrap();
    let stride = n + 3;
    dev.reserve_workspace(gemm_prepared_workspace_size::<O>(dev, &da, &pw, stride).unwrap()).unwrap();
    let mut d = poisoned::<O>(dev, m, stride);
    gemm_prepared_into(dev, &da, &pw, &epi, DeviceMatrixMut { data: &mut d, rows: m, cols: n, row_stride: stride })
        .unwrap();
    let got = read_back(dev, &d, m, n, stride);
    let what = format!(
        "prepared pair {a:?} x {b:?} {m}x{n}x{k} {} bias={with_bias} {activation:?} -> {}",
        if exact { "exact" } else { "random" },
        O::SUFFIX
    );
    assert_same_bits(dev, &fresh, &got, &format!("{what}: allocating and _into differ"));
    if exact {
        compare(&got, &want, None, &what);
    } else {
        let alpha_eff = host_epi.alpha_quantized(qa.global_scale(), qb.global_scale());
        let rel = relative_bound(false, k, 1, 0);
        let t: Vec<f64> =
            abs_products(&raw_values(&qa), &raw_values(&qb), m, n, k).into_iter().map(|t| t * rel).collect();
        compare(&got, &want, Some((&t, alpha_eff as f64, slope(activation))), &what);
    }
}

#[test]
fn pairs_on_prepared_weights_match_the_reference() {
    let Some(dev) = hopper() else { return };
    let pairs = PAIRS.iter().filter(|(a, _)| !matches!(a, Scheme::Fp8Block(_)));
    let mut seed = 5000;
    for (i, &pair) in pairs.enumerate() {
        // M = 1 and 9 (the GEMV), 65 and 300 (the wgmma kernel: one and three 128-row
        // tiles), 40 on small weights (pgemm; K = 4096 on one tile splits K), 1100
        // (above the wgmma kernel: CUTLASS on bf16 operands); N ragged against the
        // 128-row tile.
        for (j, &(m, n, k)) in
            [(1, 40, 224), (9, 72, 224), (65, 200, 352), (300, 130, 224), (40, 64, 4096), (1100, 96, 128)]
                .iter()
                .enumerate()
        {
            for exact in [true, false] {
                seed += 1;
                let act = if exact { Activation::Identity } else { ACTS[(i + j) % 4] };
                match (i + j) % 3 {
                    0 => run_prepared_pair::<bf16>(&dev, pair, (m, n, k), exact, act, seed),
                    1 => run_prepared_pair::<f32>(&dev, pair, (m, n, k), exact, act, seed),
                    _ => run_prepared_pair::<f16>(&dev, pair, (m, n, k), exact, act, seed),
                }
            }
        }
    }
    // More tiles than the GPU holds at once (47 x 3 on 132 persistent CTAs).
    run_prepared_pair::<bf16>(&dev, (Scheme::MxFp8E4M3, Scheme::MxFp4), (300, 5980, 320), false, Activation::Silu, 91);
    run_prepared_pair::<f32>(&dev, (Scheme::NvFp4, Scheme::NvFp4), (300, 5980, 320), true, Activation::Identity, 92);
}

#[test]
fn pairs_on_prepared_weights_replay_in_a_cuda_graph_and_check_their_inputs() {
    let Some(dev) = hopper() else { return };
    let (m, n, k) = (130, 64, 4096);
    let mut rng = Rng::new(25);
    let xa = data(&mut rng, m, k, Scheme::MxFp8E4M3, false);
    let qa = quantize(&xa, m, k, Scheme::MxFp8E4M3, ScaleLayout::Swizzled128x4, false);
    let qw = weights(&mut rng, (n, k), Scheme::MxFp4, ScaleLayout::Swizzled128x4, false, false);
    let (da, pw) = (DeviceQuantized::from_host(&dev, &qa).unwrap(), PreparedWeights::from_host(&dev, &qw).unwrap());
    let epi = DeviceEpilogue::default().with_activation(Activation::GeluErf);
    let expect = dev.stream().clone_dtoh(&gemm_prepared::<bf16>(&dev, &da, &pw, &epi).unwrap()).unwrap();
    assert!(gemm_prepared_workspace_size::<bf16>(&dev, &da, &pw, n).unwrap() > 0, "the activation tiles");
    dev.reserve_workspace(gemm_prepared_workspace_size::<bf16>(&dev, &da, &pw, n).unwrap()).unwrap();
    let mut d = poisoned::<bf16>(&dev, m, n);
    replay_in_graph(&dev, &mut d, |d| gemm_prepared_into(&dev, &da, &pw, &epi, DeviceMatrixMut::new(d, m, n)), &expect);
    for _ in 0..3 {
        let again = dev.stream().clone_dtoh(&gemm_prepared::<bf16>(&dev, &da, &pw, &epi).unwrap()).unwrap();
        assert!(again.iter().zip(&expect).all(|(a, b)| a.to_bits() == b.to_bits()), "deterministic");
    }
    // M = 8: the GEMV, the activations decoded after its split-K partials.
    let a8 = quantize(&xa[..8 * k], 8, k, Scheme::MxFp8E4M3, ScaleLayout::Linear, false);
    let da8 = DeviceQuantized::from_host(&dev, &a8).unwrap();
    let expect8 = dev.stream().clone_dtoh(&gemm_prepared::<bf16>(&dev, &da8, &pw, &epi).unwrap()).unwrap();
    dev.reserve_workspace(gemm_prepared_workspace_size::<bf16>(&dev, &da8, &pw, n).unwrap()).unwrap();
    let mut d8 = poisoned::<bf16>(&dev, 8, n);
    replay_in_graph(
        &dev,
        &mut d8,
        |d| gemm_prepared_into(&dev, &da8, &pw, &epi, DeviceMatrixMut::new(d, 8, n)),
        &expect8,
    );
    // Typed errors: a pair the rule refuses, K differing, FP8 block on prepared weights,
    // a short bias.
    let nv = small_quantized(&dev, 16, k, Scheme::NvFp4);
    assert!(matches!(gemm_prepared::<f32>(&dev, &nv, &pw, &epi), Err(CudaError::UnsupportedPair { .. })));
    let short_k = small_quantized(&dev, 16, 256, Scheme::MxFp8E4M3);
    assert!(matches!(gemm_prepared::<f32>(&dev, &short_k, &pw, &epi), Err(CudaError::KMismatch { a: 256, b: 4096 })));
    let f8 = Scheme::Fp8Block(Fp8Tile::Tile128x128);
    let pf8 =
        PreparedWeights::from_host(&dev, &weights(&mut rng, (n, k), f8, ScaleLayout::Linear, false, false)).unwrap();
    let af8 = small_quantized(&dev, 16, k, Scheme::Fp8Block(Fp8Tile::Row1x128));
    let err = gemm_prepared::<f32>(&dev, &af8, &pf8, &epi).unwrap_err();
    assert!(matches!(err, CudaError::UnsupportedPair { .. }) && err.to_string().contains("gemm"), "{err}");
    let short_bias = dev.stream().clone_htod(&[0f32; 63]).unwrap();
    assert!(matches!(
        gemm_prepared::<f32>(&dev, &da, &pw, &DeviceEpilogue::default().with_bias(&short_bias)),
        Err(CudaError::BiasLength { expected: 64, actual: 63 })
    ));
    // The host convenience refuses before uploading.
    assert!(matches!(
        blockscale_cuda::gemm_prepared_host::<f32>(&dev, &qw, &pf8, &Epilogue::default()),
        Err(CudaError::UnsupportedPair { .. })
    ));
}

#[test]
fn nan_blocks_propagate_like_the_reference() {
    let Some(dev) = hopper() else { return };
    let (m, n, k) = (40, 48, 128);
    let mut rng = Rng::new(77);
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
    let mut rng = Rng::new(5);
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
    replay_in_graph(&dev, &mut d, |d| gemm_into(&dev, &da, &db, &epi, DeviceMatrixMut::new(d, m, n)), &expect);

    // FP8 block at small M (with BLOCKSCALE_GEMM_FP8_WGMMA_MAX_M=512, the FP8 wgmma kernel: K
    // split in a cluster, tensor maps encoded on the host at capture).
    let k = 1024;
    let xa: Vec<f32> = (0..m * k).map(|_| rng.value()).collect();
    let xb: Vec<f32> = (0..n * k).map(|_| rng.value()).collect();
    let o = QuantizeOptions::default();
    let (qa, qb) = (
        cpu::quantize_slice(&xa, m, k, Scheme::Fp8Block(Fp8Tile::Row1x128), &o).unwrap(),
        cpu::quantize_slice(&xb, n, k, Scheme::Fp8Block(Fp8Tile::Tile128x128), &o).unwrap(),
    );
    let (da, db) = (DeviceQuantized::from_host(&dev, &qa).unwrap(), DeviceQuantized::from_host(&dev, &qb).unwrap());
    let expect = dev.stream().clone_dtoh(&gemm::<bf16>(&dev, &da, &db, &epi).unwrap()).unwrap();
    dev.reserve_workspace(gemm_workspace_size::<bf16>(&dev, &da, &db, n).unwrap()).unwrap();
    let mut d = poisoned::<bf16>(&dev, m, n);
    replay_in_graph(&dev, &mut d, |d| gemm_into(&dev, &da, &db, &epi, DeviceMatrixMut::new(d, m, n)), &expect);
}

#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let q = |rows, k, scheme| small_quantized(&dev, rows, k, scheme);
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
    // FP8 block at M <= 64: the FP8 wgmma kernel, K split in a cluster; at M = 100 (with
    // BLOCKSCALE_GEMM_FP8_PAIRS=2, as run.sh sets it) a pair of 64-row tiles sharing each
    // weight tile by multicast.
    let c = sweep_case(PAIRS[7], (40, 300, 1024), false, 1, ScaleLayout::Linear, 2);
    run_case::<bf16>(&dev, &c, 940);
    let c = sweep_case(PAIRS[8], (100, 1000, 512), false, 2, ScaleLayout::Linear, 1);
    run_case::<bf16>(&dev, &c, 943);
    // MXFP8 on the same kernel: K split in a cluster (64-row tiles), 128-row tiles.
    let c = sweep_case((Scheme::MxFp8E4M3, Scheme::MxFp8E5M2), (40, 300, 1024), false, 1, ScaleLayout::Linear, 2);
    run_case::<bf16>(&dev, &c, 941);
    let c = sweep_case(PAIRS[2], (200, 8320, 256), false, 2, ScaleLayout::Swizzled128x4, 1);
    run_case::<f32>(&dev, &c, 942);
    run_weight_only::<f32, f32>(&dev, Scheme::Int4G32, true, (5, 40, 64), 65, false, Activation::GeluErf, 950);
    run_weight_only::<bf16, bf16>(&dev, Scheme::NvFp4, false, (20, 40, 64), 64, false, Activation::Identity, 951);
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::NvFp4, (70, 72, 1024), false, Activation::Silu, 952);
    // With BLOCKSCALE_GEMM_WGMMA_WIDE=1 (run.sh's second pass) on wide tiles: two tiles
    // of 256 rows, the second's second half past M, K split in a cluster.
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::MxFp4, (300, 72, 1024), false, Activation::Silu, 960);
    // A pair on prepared weights: the activations decoded into the tiles, K split in a
    // cluster (one tile, two splits).
    run_prepared_pair::<bf16>(&dev, (Scheme::MxFp8E4M3, Scheme::MxFp4), (70, 72, 1024), false, Activation::Silu, 959);
    run_weight_only_prepared::<f16, f32>(&dev, Scheme::Int4G32, (130, 40, 256), false, Activation::Identity, 953);
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::Int4G128, (70, 40, 640), false, Activation::Silu, 955);
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::Int4G32, (70, 40, 320), false, Activation::GeluErf, 956);
    let (row, tile) = (Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128));
    run_weight_only_prepared::<f16, f32>(&dev, tile, (70, 40, 512), false, Activation::Identity, 958);
    run_weight_only_prepared::<bf16, f32>(&dev, row, (70, 40, 512), false, Activation::Identity, 957);
    run_weight_only_prepared::<bf16, bf16>(&dev, tile, (20, 40, 512), false, Activation::GeluTanh, 954);
    // f16 activations at M = 20: pgemm on the f16 MMA (INT4 and FP8 block fragments in f16).
    run_weight_only_prepared::<f16, bf16>(&dev, Scheme::Int4G128, (20, 40, 640), false, Activation::Silu, 961);
    run_weight_only_prepared::<f16, bf16>(&dev, tile, (20, 40, 512), false, Activation::Identity, 962);
    // With BLOCKSCALE_GEMM_WGMMA_CTAS=4 and BLOCKSCALE_GEMM_TAIL=1 (run.sh's tail passes):
    // 9 tiles (6 wide) on 4 persistent CTAs, the last wave's K halves added in a cluster
    // of two; with BLOCKSCALE_GEMM_TAIL=0 BLOCKSCALE_GEMM_SK=1, the last tile's slabs
    // spread over the 4 CTAs (stream-K); otherwise K split in clusters.
    run_weight_only_prepared::<bf16, bf16>(&dev, Scheme::NvFp4, (300, 384, 256), false, Activation::Silu, 963);
    run_weight_only_prepared::<bf16, f32>(&dev, Scheme::Int4G128, (300, 384, 512), false, Activation::Identity, 964);
}
