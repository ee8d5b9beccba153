//! The oracle side the GEMM and GEMV tests share: test data (random, or "exact" data any
//! correct accumulation adds without rounding), quantization for a case, the documented
//! error bound (docs/KERNELS.md) and the comparison against blockscale-cpu's exact
//! reference, NaN-poisoned outputs and their read-back.
//!
//! Included by path from gemm.rs and gemv.rs; not every item is used by both.
#![allow(dead_code)]

use blockscale_cpu as cpu;
use blockscale_cuda::cudarc::driver::CudaSlice;
use blockscale_cuda::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use blockscale_cuda::{Activation, Arch, Device, DeviceElement};
use blockscale_formats::{
    DataLayout, GlobalScale, GlobalScaleSource, QuantizeOptions, QuantizedMatrix, ScaleLayout, Scheme,
};
use ndarray::Array2;

use super::device;

/// A Hopper device, or None (printing why) for the Hopper-tier tests.
pub fn hopper() -> Option<Device> {
    let dev = device()?;
    if dev.arch() != Arch::Sm90 {
        eprintln!("SKIPPED: a Hopper-tier test, and this is {:?}", dev.arch());
        return None;
    }
    Some(dev)
}

/// The tests' data: the project's seeded generator (blockscale_formats::rng).
pub struct Rng(blockscale_formats::rng::SplitMix64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(blockscale_formats::rng::SplitMix64::new(seed))
    }
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1) times a power of two in 2^-3 .. 2^3.
    pub fn value(&mut self) -> f32 {
        let u = ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        u * 2f32.powi(self.below(7) as i32 - 3)
    }
}

/// Random data, or "exact" data: multiples of 1/2 in [-4, 4] with the element maximum
/// pinned once per block, so block scales are powers of two (NVFP4 with a per-tensor encode of a power of two,
/// INT4 1, MX, FP8 block) and every partial sum is a small multiple of a
/// power of two: any correct accumulation gives the exact result.
pub fn data(rng: &mut Rng, rows: usize, k: usize, scheme: Scheme, exact: bool) -> Vec<f32> {
    if !exact {
        return (0..rows * k).map(|_| rng.value()).collect();
    }
    let max = if matches!(scheme, Scheme::Int4G32 | Scheme::Int4G128) { 7.0 } else { 6.0 };
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
    if matches!(scheme, Scheme::NvFp4 | Scheme::Int4G32 | Scheme::Int4G128) {
        let bs = scheme.block_size();
        for blk in x.chunks_mut(bs) {
            let i = rng.below(bs as u64) as usize;
            blk[i] = max;
        }
    }
    x
}

pub fn quantize(x: &[f32], rows: usize, k: usize, scheme: Scheme, layout: ScaleLayout, exact: bool) -> QuantizedMatrix {
    let layout = if scheme.supports_layout(layout) { layout } else { ScaleLayout::Linear };
    let mut o = QuantizeOptions::default().with_scale_layout(layout);
    if scheme == Scheme::NvFp4 && exact {
        // A power of two keeps alpha (= 4) and every product exact.
        o = o.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_encode(0.5).unwrap()));
    }
    cpu::quantize_slice(x, rows, k, scheme, &o).unwrap()
}

/// Dequantized values without NVFP4's per-tensor factor (the kernels' alpha carries it).
pub fn raw_values(q: &QuantizedMatrix) -> Vec<f32> {
    let g = q.global_scale().map_or(1.0, |g| g.decode() as f64);
    cpu::dequantize::<f32>(q).into_raw_vec_and_offset().0.into_iter().map(|v| (v as f64 / g) as f32).collect()
}

/// `sum_k |A[i, k] B[j, k]|` over dequantized values.
pub fn abs_products(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
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
pub fn relative_bound(fp8: bool, k: usize, pieces: usize, rounded: usize) -> f64 {
    if fp8 {
        136.0 * 2f64.powi(-12) + (k / 128 + 2) as f64 * 2f64.powi(-23)
    } else {
        let kk = (k * pieces) as f64;
        (kk + kk / 16.0 + 4.0) * 2f64.powi(-22) + rounded as f64 * 2f64.powi(-9)
    }
}

/// The bound of MXFP8 pairs on Hopper's FP8 tensor cores (docs/KERNELS.md): each 32 of K
/// in the short accumulator, promoted into f32 with its two scales.
pub fn mx_fp8_bound(k: usize) -> f64 {
    40.0 * 2f64.powi(-12) + (k / 32 + 2) as f64 * 2f64.powi(-23)
}

pub fn ulp_f32(x: f64) -> f64 {
    let a = (x.abs() as f32).max(f32::MIN_POSITIVE);
    (f32::from_bits(a.to_bits() + 1) - a) as f64
}

/// One ulp of the output type at `x`.
pub fn ulp_out<O: DeviceElement>(x: f64) -> f64 {
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
pub fn compare<O: DeviceElement>(got: &[O], want: &Array2<O>, bound: Option<(&[f64], f64, f64)>, what: &str) {
    let want = want.as_slice().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f32_exact() as f64, w.to_f32_exact() as f64);
        if g.is_nan() || w.is_nan() {
            assert!(g.is_nan() && w.is_nan(), "{what}: element {i}: got {g}, want {w}");
            continue;
        }
        if g.is_infinite() || w.is_infinite() {
            // An overflow to the output type's infinity must be the reference's.
            assert!(g == w, "{what}: element {i}: got {g}, want {w}");
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

pub const POISON_F32: f32 = f32::NAN;

/// A device buffer for an M x N output at `stride`, poisoned with NaN.
pub fn poisoned<O: DeviceElement>(dev: &Device, m: usize, stride: usize) -> CudaSlice<O> {
    let host: Vec<O> = vec![O::from_f32(POISON_F32); m * stride];
    dev.stream().clone_htod(&host).unwrap()
}

/// Reads an M x N output at `stride` back, checking the padding was left alone.
pub fn read_back<O: DeviceElement>(dev: &Device, d: &CudaSlice<O>, m: usize, n: usize, stride: usize) -> Vec<O> {
    let host = dev.stream().clone_dtoh(d).unwrap();
    let mut out = Vec::with_capacity(m * n);
    for r in 0..m {
        out.extend_from_slice(&host[r * stride..r * stride + n]);
        for (c, v) in host[r * stride + n..(r + 1) * stride].iter().enumerate() {
            assert!(v.to_f32_exact().is_nan(), "padding element ({r}, {}) was written", n + c);
        }
    }
    out
}

/// Weights for a weight-only product: `data` quantized with `layout` where the scheme
/// takes it (else linear scales), optionally block-interleaved; exact NVFP4 data gets a
/// power-of-two per-tensor scale so alpha (the decode factor, 4) keeps every product exact.
pub fn weights(
    rng: &mut Rng,
    (n, k): (usize, usize),
    scheme: Scheme,
    layout: ScaleLayout,
    interleaved: bool,
    exact: bool,
) -> QuantizedMatrix {
    let xw = data(rng, n, k, scheme, exact);
    let layout = if scheme.supports_layout(layout) { layout } else { ScaleLayout::Linear };
    let mut o = QuantizeOptions::default().with_scale_layout(layout);
    if interleaved {
        o = o.with_data_layout(DataLayout::BlockInterleaved);
    }
    if exact && scheme == Scheme::NvFp4 {
        o = o.with_global_scale(GlobalScaleSource::Given(GlobalScale::from_encode(0.25).unwrap()));
    }
    cpu::quantize_slice(&xw, n, k, scheme, &o).unwrap()
}

/// M x K activations of type `I`: exact data (multiples of 1/2 in [-4, 4]) or random
/// values with full 24-bit significands (so f16 and f32 inputs exercise the split into
/// bf16 pieces).
pub fn activations<I: blockscale_formats::Source>(rng: &mut Rng, m: usize, k: usize, exact: bool) -> Vec<I> {
    (0..m * k)
        .map(|_| {
            let v = if exact {
                (rng.below(17) as f32 - 8.0) * 0.5
            } else {
                rng.value() * (1.0 + (rng.below(1 << 20) as f32) * 2f32.powi(-22))
            };
            I::from_f32(v)
        })
        .collect()
}

/// The bound of a weight-only product's sum, `rel * sum_k |x w|` per output, for
/// activations `x` (M x K) of type `I` on the BF16 tensor cores (bf16 in one piece,
/// f16 in two, f32 in three); `rounded` when the kernel rounds the weights to bf16 once.
pub fn weight_only_bound<I: DeviceElement>(x: &[I], w: &QuantizedMatrix, m: usize, rounded: bool) -> Vec<f64> {
    let (n, k) = (w.rows(), w.k());
    let xv: Vec<f32> = x.iter().map(|v| v.to_f32_exact()).collect();
    let pieces = match I::SUFFIX {
        "bf16" => 1,
        "f16" => 2,
        _ => 3,
    };
    let rel = relative_bound(false, k, pieces, usize::from(rounded));
    abs_products(&xv, &raw_values(w), m, n, k).into_iter().map(|t| t * rel).collect()
}

/// The activation slope of the bound: 1 for none, 1.2 for GELU and SiLU (their
/// derivatives stay below 1.13).
pub fn slope(activation: Activation) -> f64 {
    if activation == Activation::Identity { 1.0 } else { 1.2 }
}

/// Captures what `queue` puts on the device's stream into a CUDA graph (nothing runs),
/// checks that `out` is still all NaN, replays the graph three times and checks `out`
/// holds the bits of `expect`.
///
/// cudarc's cross-stream event tracking would make the capture wait on events recorded
/// before it, which invalidates it: it is off while capturing (every buffer of these
/// tests lives on the device's one stream, and the device is synchronized first).
pub fn replay_in_graph<O: DeviceElement>(
    dev: &Device,
    out: &mut CudaSlice<O>,
    queue: impl FnOnce(&mut CudaSlice<O>) -> Result<(), blockscale_cuda::CudaError>,
    expect: &[O],
) {
    dev.synchronize().unwrap();
    let stream = dev.stream().clone();
    // SAFETY: no buffer is used on another stream while tracking is off.
    unsafe { dev.context().disable_event_tracking() };
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    let queued = queue(out);
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap();
    // SAFETY: as above; tracking resumes for buffers created from here on.
    unsafe { dev.context().enable_event_tracking() };
    queued.unwrap();
    let graph = graph.expect("the capture recorded the work");
    assert!(
        dev.stream().clone_dtoh(out).unwrap().iter().all(|v| v.to_f32_exact().is_nan()),
        "nothing ran before the replay"
    );
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    let bits = |v: &[O]| v.iter().map(|x| x.to_f32_exact().to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&dev.stream().clone_dtoh(out).unwrap()), bits(expect), "the replayed graph's output");
}

/// A small deterministic matrix (values -3..3) quantized with default options, on the
/// device: operands for the typed-error tests.
pub fn small_quantized(dev: &Device, rows: usize, k: usize, scheme: Scheme) -> blockscale_cuda::DeviceQuantized {
    let x: Vec<f32> = (0..rows * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let q = cpu::quantize_slice(&x, rows, k, scheme, &QuantizeOptions::default()).unwrap();
    blockscale_cuda::DeviceQuantized::from_host(dev, &q).unwrap()
}

/// Every weight scheme and data layout of the weight-only products: (scheme,
/// block-interleaved), [`Scheme::ALL`] in order, each INT4 scheme also interleaved.
pub fn weight_schemes() -> Vec<(Scheme, bool)> {
    let int4 = |s: Scheme| matches!(s, Scheme::Int4G32 | Scheme::Int4G128);
    Scheme::ALL.into_iter().flat_map(|s| [(s, false)].into_iter().chain(int4(s).then_some((s, true)))).collect()
}

/// Checks that the allocating call's output (`fresh`, on the device) has the bits the
/// `_into` call wrote (`got`, read back).
pub fn assert_same_bits<O: DeviceElement>(dev: &Device, fresh: &CudaSlice<O>, got: &[O], what: &str) {
    let bits = |v: &[O]| v.iter().map(|x| x.to_f32_exact().to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&dev.stream().clone_dtoh(fresh).unwrap()), bits(got), "{what}");
}
