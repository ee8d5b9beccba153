//! The CPU cases: quantize every scheme, dequantize, GEMM and GEMV, with their anchors.

use std::hint::black_box;

use blockscale::half::bf16;
use blockscale::ndarray::{Array1, Array2};
use blockscale::{
    DequantizeOptions, Epilogue, GemmOptions, GlobalScale, GlobalScaleSource, QuantizeOptions, QuantizedMatrix,
    ScaleLayout, Scheme, dequantize, dequantize_slice, gemm, gemv, quantize, quantize_slice,
};

use super::{Anchor, Budget, Case, Progress, Report, VALUES_AMAX, Work, best_of, cpu_machine, values};
use crate::error::CliError;

/// The shapes of a full or `--quick` run.
struct Shapes {
    /// Quantize / dequantize input: rows x K bf16.
    quant: (usize, usize),
    /// GEMM M = N = K.
    gemm: usize,
    /// GEMV weights N x K (M = 1).
    gemv: (usize, usize),
}

const FULL: Shapes = Shapes { quant: (4096, 4096), gemm: 1024, gemv: (4096, 4096) };
const QUICK: Shapes = Shapes { quant: (512, 1024), gemm: 256, gemv: (1024, 1024) };

/// The scale layout the GPU kernels consume where the scheme has one.
fn layout(scheme: Scheme) -> ScaleLayout {
    if scheme.supports_layout(ScaleLayout::Swizzled128x4) { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear }
}

fn given_scale() -> Result<GlobalScaleSource, CliError> {
    let g = GlobalScale::from_amax(VALUES_AMAX).map_err(|e| lib_error("the NVFP4 global scale", e))?;
    Ok(GlobalScaleSource::Given(g))
}

/// A library failure while benchmarking (e.g. `BLOCKSCALE_SIMD` forcing a path this CPU
/// lacks).
fn lib_error(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Unsupported(format!("bench: {what}: {e}"))
}

/// Runs every CPU case.
pub fn run(quick: bool) -> Result<Report, CliError> {
    let shapes = if quick { QUICK } else { FULL };
    let budget = Budget::new(quick);
    let threads = rayon::current_num_threads();
    // 10 quantize, 3 dequantize, 2 x 2 GEMM, 2 x 3 GEMV.
    let mut progress = Progress::new(10 + 3 + 4 + 6);
    let mut cases = conversions(&shapes, budget, &mut progress)?;
    cases.extend(gemms(&shapes, budget, &mut progress)?);
    cases.extend(gemvs(&shapes, budget, &mut progress)?);
    progress.finish();
    let setup = setup(&shapes, budget, threads);
    Ok(Report { backend: "cpu", quick, machine: cpu_machine(), setup, cases })
}

/// Quantize (every scheme) and dequantize cases on a `shapes.quant` bf16 matrix, against
/// a one-thread memcpy of it.
fn conversions(shapes: &Shapes, budget: Budget, progress: &mut Progress) -> Result<Vec<Case>, CliError> {
    let mut cases = Vec::new();
    let (rows, k) = shapes.quant;
    let n = rows * k;
    let x: Vec<bf16> = values(n, 0x5eed).map(bf16::from_f32).collect();
    let bytes = (n * 2) as f64;

    // Anchor: copying the same bf16 matrix, one thread, into a preallocated buffer.
    // It is sampled before every case it anchors, and the best over the run is the one
    // anchor of them all: one sample alone caught whatever moment of the VM's memory
    // bandwidth it fell on (1.4-2.0 ms across runs), and timing it alternately with
    // each case made it depend on the case's cache footprint (1.9-2.9 ms within a
    // run), so that the ratios no longer ranked the cases as their times did.
    let sample_budget = Budget { seconds: budget.seconds / 6.0, ..budget };
    let src = &x;
    let mut dst = vec![bf16::ZERO; n];
    // Owns `dst`, so that dropping it frees the buffer before the GEMM cases.
    let mut copy = move || {
        dst.copy_from_slice(black_box(src));
        black_box(&dst);
        Ok(())
    };
    let mut copy_best = f64::INFINITY;
    // (name, seconds) of the memcpy-anchored cases, made into cases once the anchor is known.
    let mut timed: Vec<(String, f64)> = Vec::new();

    let given = given_scale()?;
    let mut quantize_cases: Vec<(String, Scheme, GlobalScaleSource)> = Vec::new();
    for scheme in Scheme::ALL {
        if scheme == Scheme::NvFp4 {
            quantize_cases.push(("quantize nvfp4 (given global scale)".into(), scheme, given));
            quantize_cases.push(("quantize nvfp4 (+ tensor amax pass)".into(), scheme, GlobalScaleSource::TensorAmax));
        } else {
            quantize_cases.push((format!("quantize {scheme}"), scheme, GlobalScaleSource::TensorAmax));
        }
    }
    for (name, scheme, global) in quantize_cases {
        progress.step(&name);
        let opts = QuantizeOptions::default().with_scale_layout(layout(scheme));
        let opts = if scheme.has_global_scale() { opts.with_global_scale(global) } else { opts };
        copy_best = copy_best.min(best_of(sample_budget, &mut copy)?);
        let t = best_of(budget, || {
            let q = quantize_slice(black_box(&x), rows, k, scheme, &opts).map_err(|e| lib_error(&name, e))?;
            black_box(q);
            Ok(())
        })?;
        timed.push((name, t));
    }

    for scheme in [Scheme::NvFp4, Scheme::MxFp4, Scheme::MxFp8E4M3] {
        let name = format!("dequantize {scheme} -> bf16");
        progress.step(&name);
        let opts = QuantizeOptions::default().with_scale_layout(layout(scheme));
        let opts = if scheme.has_global_scale() { opts.with_global_scale(given) } else { opts };
        let q = quantize_slice(&x, rows, k, scheme, &opts).map_err(|e| lib_error(&name, e))?;
        let mut out = vec![bf16::ZERO; n];
        copy_best = copy_best.min(best_of(sample_budget, &mut copy)?);
        let t = best_of(budget, || {
            dequantize_slice(black_box(&q), &mut out, &DequantizeOptions::default())
                .map_err(|e| lib_error(&name, e))?;
            black_box(&out);
            Ok(())
        })?;
        timed.push((name, t));
    }
    drop(copy);
    drop(x);
    let copy = Anchor { name: format!("memcpy {} MiB, 1 thread", (n * 2) >> 20), seconds: copy_best };
    for (name, t) in timed {
        cases.push(Case::new(name, t, Work::Elements(n as f64), Some(bytes), &copy));
    }

    Ok(cases)
}

/// GEMM cases (NVFP4 and MXFP8 pairs, M = N = K = `shapes.gemm`) against dequantizing to
/// f32 and ndarray's sgemm.
fn gemms(shapes: &Shapes, budget: Budget, progress: &mut Progress) -> Result<Vec<Case>, CliError> {
    let mut cases = Vec::new();
    let size = shapes.gemm;
    let a = matrix(size, size, 3);
    let b = matrix(size, size, 5);
    for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3] {
        let qa = quant(&a, scheme)?;
        let qb = quant(&b, scheme)?;
        let label = format!("gemm {scheme} x {scheme} {size}^3");
        progress.step(&format!("{label}: anchor"));
        let anchor = Anchor::timed("dequantize to f32 + ndarray sgemm", budget, || {
            let (af, bf) = (dequantize::<f32>(&qa), dequantize::<f32>(&qb));
            black_box(af.dot(&bf.t()));
            Ok(())
        })?;
        progress.step(&label);
        let t = best_of(budget, || {
            let c = gemm::<f32>(&qa, &qb, &Epilogue::default(), &GemmOptions::default())
                .map_err(|e| lib_error(&label, e))?;
            black_box(c);
            Ok(())
        })?;
        cases.push(Case::new(label, t, Work::Flops(2.0 * (size as f64).powi(3)), None, &anchor));
    }
    drop((a, b));

    Ok(cases)
}

/// GEMV cases (MXFP4 and NVFP4 weights of `shapes.gemv`, bf16 activations) against
/// ndarray's mat-vec, with and without the dequantization to f32.
fn gemvs(shapes: &Shapes, budget: Budget, progress: &mut Progress) -> Result<Vec<Case>, CliError> {
    let mut cases = Vec::new();
    let (wn, wk) = shapes.gemv;
    let w = matrix(wn, wk, 11);
    let xv: Vec<bf16> = values(wk, 7).map(bf16::from_f32).collect();
    let flops = Work::Flops(2.0 * (wn * wk) as f64);
    let to_f32 = |x: &[bf16]| x.iter().map(|v| v.to_f32()).collect::<Array1<f32>>();
    for scheme in [Scheme::MxFp4, Scheme::NvFp4] {
        let qw = quant(&w, scheme)?;
        let label = format!("gemv {scheme} N={wn} K={wk}, bf16 x");
        progress.step(&format!("{label}: anchor"));
        let anchor = Anchor::timed("dequantize to f32 + ndarray mat-vec", budget, || {
            let wf = dequantize::<f32>(&qw);
            black_box(wf.dot(&to_f32(black_box(&xv))));
            Ok(())
        })?;
        let wf = dequantize::<f32>(&qw);
        progress.step(&format!("{label}: f32 mat-vec"));
        let ready = Anchor::timed("ndarray mat-vec, f32 weights ready", budget, || {
            black_box(wf.dot(&to_f32(black_box(&xv))));
            Ok(())
        })?;
        drop(wf);
        progress.step(&label);
        let t = best_of(budget, || {
            let y: Vec<f32> = gemv(black_box(&xv), &qw, &Epilogue::default(), &GemmOptions::default())
                .map_err(|e| lib_error(&label, e))?;
            black_box(y);
            Ok(())
        })?;
        // The same time against the f32 product alone (what the fused decode gains
        // beyond not materialising f32 weights): a second row, named apart so that
        // names stay unique keys.
        cases.push(Case::new(format!("{label} [vs f32 weights ready]"), t, flops, None, &ready));
        cases.insert(cases.len() - 1, Case::new(label, t, flops, None, &anchor));
    }
    Ok(cases)
}

/// The report's description of the shapes, threads and timing.
fn setup(shapes: &Shapes, budget: Budget, threads: usize) -> Vec<String> {
    let ((rows, k), size, (wn, wk)) = (shapes.quant, shapes.gemm, shapes.gemv);
    vec![
        format!(
            "quantize/dequantize: {rows} x {k} bf16 (seeded bell-shaped values, 1 in 1024 scaled by {VALUES_AMAX}); \
             swizzled scales for NVFP4/MX, linear for FP8 block and INT4; quantize allocates its output, \
             dequantize writes a preallocated one"
        ),
        format!(
            "gemm: M = N = K = {size}, f32 output; gemv: M = 1, K = {wk}, N = {wn}, bf16 activations; \
             NVFP4 with a given global scale"
        ),
        format!("threads: {threads} for blockscale and dequantize (rayon); memcpy and the ndarray products on one"),
        format!(
            "timing: one warm-up call, then the best of at least {} calls or {} s per case; \
             the memcpy anchor is sampled before each case it anchors, best over the run",
            budget.min_runs, budget.seconds
        ),
    ]
}

/// A `rows x cols` f32 matrix of [`values`].
fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    Array2::from_shape_vec((rows, cols), values(rows * cols, seed).collect()).expect("rows * cols values")
}

/// Quantizes GEMM/GEMV operands: the scheme's kernel layout, NVFP4 with a given scale.
fn quant(m: &Array2<f32>, scheme: Scheme) -> Result<QuantizedMatrix, CliError> {
    let mut opts = QuantizeOptions::default().with_scale_layout(layout(scheme));
    if scheme.has_global_scale() {
        opts = opts.with_global_scale(given_scale()?);
    }
    quantize(m.view(), scheme, &opts).map_err(|e| lib_error(&format!("quantize {scheme}"), e))
}
