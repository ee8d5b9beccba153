//! Recomputing every case with a backend and comparing: codes, scales and dequantized
//! values bit for bit; GEMM bit for bit on exact cases and within the fast path's
//! documented bound elsewhere.

use blockscale_cpu::{
    Activation, Epilogue, GemmOptions, QuantizeOptions, gemm, gemm_reference, gemm_weight_only,
    gemm_weight_only_reference,
};
use blockscale_formats::{GlobalScale, GlobalScaleSource, QuantizedMatrix, ScaleLayout, Scheme, layout};
use ndarray::ArrayView2;

use crate::GoldenError;
use crate::case::{self, Values};
use crate::file::GoldenFile;

/// A backend to check.
pub enum Backend {
    /// blockscale-cpu: quantization (fastest SIMD path), the exact reference GEMM (bit
    /// for bit) and the fast GEMM (bit for bit on exact cases, within its bound
    /// elsewhere).
    Cpu,
    /// blockscale-cuda on a GPU: quantization and dequantization (bit for bit) and the
    /// GEMMs (bit for bit on exact cases, within the kernels' documented bound
    /// elsewhere; docs/KERNELS.md). A GPU with no GEMM kernel reports an error.
    #[cfg(feature = "cuda")]
    Cuda(blockscale_cuda::Device),
}

impl Backend {
    /// The name printed in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            #[cfg(feature = "cuda")]
            Self::Cuda(_) => "cuda",
        }
    }
}

/// The verdict on one case and backend path.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Identical (or within bound, as the detail says).
    Pass,
    /// A mismatch, with where.
    Fail,
    /// Not applicable to this backend (the reason is in the detail).
    Skip,
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `case [backend path]`.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Largest difference in ulps over compared float values (0 for bytes).
    pub max_ulps: u64,
    /// Where the first mismatch is, or what was compared.
    pub detail: String,
}

impl core::fmt::Display for Outcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let v = match self.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        };
        write!(f, "{v} {:<58} max {:>3} ulp  {}", self.name, self.max_ulps, self.detail)
    }
}

/// Distance in ulps between two f32 (0 for equal bits, `u64::MAX` if exactly one is NaN).
pub fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() { 0 } else { u64::MAX };
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        (if i < 0 { i32::MIN - i } else { i }) as i64
    };
    (key(a) - key(b)).unsigned_abs()
}

/// First differing byte.
fn first_diff(got: &[u8], want: &[u8]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Where byte `i` of a packed codes tensor is: row, first element, block.
fn code_place(q: &QuantizedMatrix, i: usize) -> String {
    let s = q.shape();
    let (row, byte) = (i / s.row_bytes, i % s.row_bytes);
    let col = byte * 8 / q.scheme().element().bits() as usize;
    format!("codes byte {i}: row {row}, column {col}, block {}", col / q.scheme().block_size())
}

/// Where scale entry `i` is.
fn scale_place(q: &QuantizedMatrix, layout: ScaleLayout, i: usize) -> String {
    let s = q.shape();
    let (r, c) = match layout {
        ScaleLayout::Linear => (i / s.scale_cols.max(1), i % s.scale_cols.max(1)),
        ScaleLayout::Swizzled128x4 => layout::swizzled_position(i, s.scale_cols),
    };
    format!("scale {i} ({}): scale row {r}, block {c}", layout.name())
}

/// Compares f32 values (`rows x cols`): bit-identical, or within `bound(i)` if given.
fn compare_f32(
    got: &[f32],
    want: &[f32],
    cols: usize,
    block: usize,
    bound: Option<&dyn Fn(usize) -> f64>,
) -> (bool, u64, String) {
    let mut max = 0u64;
    let mut first = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let u = ulps(g, w);
        max = max.max(u);
        let ok = match bound {
            None => g.to_bits() == w.to_bits(),
            Some(b) => (g.is_nan() && w.is_nan()) || ((g as f64 - w as f64).abs() <= b(i)),
        };
        if !ok && first.is_none() {
            let (r, c) = (i / cols, i % cols);
            first = Some(format!("[{r}, {c}] (block {}): got {g:e}, want {w:e}", c / block.max(1)));
        }
    }
    if got.len() != want.len() {
        return (false, max, format!("{} values, want {}", got.len(), want.len()));
    }
    match first {
        Some(f) => (false, max, f),
        None => (true, max, String::new()),
    }
}

fn outcome(name: String, ok: bool, max_ulps: u64, detail: String) -> Outcome {
    Outcome { name, verdict: if ok { Verdict::Pass } else { Verdict::Fail }, max_ulps, detail }
}

/// Runs every case of `file` with `backend`.
///
/// # Errors
/// A [`GoldenError`] when the file is not a usable golden file (never for a numeric
/// mismatch, which is an [`Outcome`] with [`Verdict::Fail`]).
pub fn verify_file(file: &GoldenFile, backend: &Backend) -> Result<Vec<Outcome>, GoldenError> {
    let case = file.meta("case")?.to_string();
    match file.meta("kind")? {
        "quantize" => verify_quantize(file, &case, backend),
        "gemm" => verify_gemm(file, &case, backend, false),
        "gemv" => verify_gemm(file, &case, backend, true),
        other => Err(file.bad_meta("kind", format!("unknown case kind {other:?}"))),
    }
}

/// The quantize options a quantize case was written with (its `scale_rule`,
/// `nvfp4_recipe`, `non_finite` and NVFP4 global-scale metadata); linear scales.
///
/// # Errors
/// Metadata that is missing or names an unknown rule, recipe or policy.
pub fn quantize_options(file: &GoldenFile, scheme: Scheme) -> Result<QuantizeOptions, GoldenError> {
    let rule = file.meta("scale_rule")?;
    let rule = case::parse_rule(rule).ok_or_else(|| file.bad_meta("scale_rule", format!("unknown rule {rule:?}")))?;
    let recipe = file.meta("nvfp4_recipe")?;
    let recipe = case::parse_recipe(recipe)
        .ok_or_else(|| file.bad_meta("nvfp4_recipe", format!("unknown recipe {recipe:?}")))?;
    let non_finite = match file.meta("non_finite")? {
        "error" => blockscale_formats::NonFinite::Error,
        "poison" => blockscale_formats::NonFinite::Poison,
        other => return Err(file.bad_meta("non_finite", format!("unknown policy {other:?}"))),
    };
    let mut o = QuantizeOptions::default().with_scale_rule(rule).with_non_finite(non_finite);
    if scheme == Scheme::NvFp4 {
        o = o.with_nvfp4_recipe(recipe).with_global_scale(match file.meta("global_source")? {
            "tensor-amax" => GlobalScaleSource::TensorAmax,
            _ => GlobalScaleSource::Given(
                GlobalScale::from_encode(file.f32_bits("global_given")?)
                    .map_err(|e| file.bad_meta("global_given", e.to_string()))?,
            ),
        });
    }
    Ok(o)
}

fn quantize_with(
    backend: &Backend,
    input: &Values,
    rows: usize,
    k: usize,
    scheme: Scheme,
    o: &QuantizeOptions,
) -> Result<QuantizedMatrix, String> {
    match backend {
        Backend::Cpu => {
            let r = match input {
                Values::F32(v) => blockscale_cpu::quantize_slice(v, rows, k, scheme, o),
                Values::F16(v) => blockscale_cpu::quantize_slice(v, rows, k, scheme, o),
                Values::Bf16(v) => blockscale_cpu::quantize_slice(v, rows, k, scheme, o),
            };
            r.map_err(|e| e.to_string())
        }
        #[cfg(feature = "cuda")]
        Backend::Cuda(dev) => {
            let co = *o;
            let r = match input {
                Values::F32(v) => {
                    blockscale_cuda::quantize_host(dev, ArrayView2::from_shape((rows, k), v).unwrap(), scheme, &co)
                }
                Values::F16(v) => {
                    blockscale_cuda::quantize_host(dev, ArrayView2::from_shape((rows, k), v).unwrap(), scheme, &co)
                }
                Values::Bf16(v) => {
                    blockscale_cuda::quantize_host(dev, ArrayView2::from_shape((rows, k), v).unwrap(), scheme, &co)
                }
            };
            r.map_err(|e| e.to_string())
        }
    }
}

fn dequantize_with(backend: &Backend, q: &QuantizedMatrix) -> Result<Vec<f32>, String> {
    match backend {
        Backend::Cpu => Ok(blockscale_cpu::dequantize::<f32>(q).into_raw_vec_and_offset().0),
        #[cfg(feature = "cuda")]
        Backend::Cuda(dev) => blockscale_cuda::dequantize_host::<f32>(dev, q)
            .map(|a| a.into_raw_vec_and_offset().0)
            .map_err(|e| e.to_string()),
    }
}

fn verify_quantize(file: &GoldenFile, name: &str, backend: &Backend) -> Result<Vec<Outcome>, GoldenError> {
    let golden = case::get_matrix(file, "q")?;
    let (scheme, rows, k) = (golden.scheme(), golden.rows(), golden.k());
    let input = Values::read(file, "input", &[rows, k])?;
    let dequant = file.f32s("dequant", &[rows, k])?;
    let swizzled = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        let shape = case::scale_shape(golden.shape(), ScaleLayout::Swizzled128x4);
        Some(file.bytes("scales_swizzled", case::scale_dtype(scheme), &shape)?.to_vec())
    } else {
        None
    };
    let opts = quantize_options(file, scheme)?;
    let label = format!("{name} [{}]", backend.name());
    let mut out = Vec::new();
    // Quantize, linear scales, then swizzled.
    let q = match quantize_with(backend, &input, rows, k, scheme, &opts.with_scale_layout(ScaleLayout::Linear)) {
        Ok(q) => q,
        Err(e) => return Ok(vec![outcome(format!("{label} quantize"), false, 0, format!("error: {e}"))]),
    };
    let mut problem = first_diff(q.data(), golden.data()).map(|i| code_place(&golden, i));
    if problem.is_none() {
        problem = first_diff(&case::scale_bytes(q.scales()), &case::scale_bytes(golden.scales()))
            .map(|i| scale_place(&golden, ScaleLayout::Linear, i / scheme.scale_format().bytes()));
    }
    if problem.is_none()
        && q.global_scale().map(|g| g.encode().to_bits()) != golden.global_scale().map(|g| g.encode().to_bits())
    {
        problem = Some(format!("global scale {:?}, want {:?}", q.global_scale(), golden.global_scale()));
    }
    if problem.is_none()
        && let Some(want) = &swizzled
    {
        match quantize_with(backend, &input, rows, k, scheme, &opts.with_scale_layout(ScaleLayout::Swizzled128x4)) {
            Ok(q2) => {
                problem = first_diff(&case::scale_bytes(q2.scales()), want)
                    .map(|i| scale_place(&golden, ScaleLayout::Swizzled128x4, i))
                    .or_else(|| first_diff(q2.data(), golden.data()).map(|i| code_place(&golden, i)));
            }
            Err(e) => problem = Some(format!("swizzled: error: {e}")),
        }
    }
    let what = if swizzled.is_some() { "codes, scales (both layouts)" } else { "codes, scales" };
    out.push(outcome(format!("{label} quantize"), problem.is_none(), 0, problem.unwrap_or_else(|| what.into())));
    // Dequantize the golden codes.
    match dequantize_with(backend, &golden) {
        Ok(d) => {
            let (ok, max, detail) = compare_f32(&d, &dequant, k, scheme.block_size(), None);
            out.push(outcome(
                format!("{label} dequantize"),
                ok,
                max,
                if ok { "f32, bit for bit".into() } else { detail },
            ));
        }
        Err(e) => out.push(outcome(format!("{label} dequantize"), false, 0, format!("error: {e}"))),
    }
    Ok(out)
}

/// The epilogue activation a product case was written with.
///
/// # Errors
/// A missing or unknown `activation`.
pub fn parse_activation(file: &GoldenFile) -> Result<Activation, GoldenError> {
    Ok(match file.meta("activation")? {
        "identity" => Activation::Identity,
        "gelu-tanh" => Activation::GeluTanh,
        "gelu-erf" => Activation::GeluErf,
        "silu" => Activation::Silu,
        other => return Err(file.bad_meta("activation", format!("unknown activation {other:?}"))),
    })
}

/// The name of an activation in golden files.
pub fn activation_name(a: Activation) -> &'static str {
    match a {
        Activation::Identity => "identity",
        Activation::GeluTanh => "gelu-tanh",
        Activation::GeluErf => "gelu-erf",
        Activation::Silu => "silu",
    }
}

/// A GEMM case, or (`gemv`) a decode case: weight-only, which the cuda backend runs
/// through its GEMV rather than its GEMM.
fn verify_gemm(file: &GoldenFile, name: &str, backend: &Backend, gemv: bool) -> Result<Vec<Outcome>, GoldenError> {
    let b = case::get_matrix(file, "b")?;
    let weight_only = file.meta_opt("a.scheme").is_none();
    let (m, n, k) = (file.parse::<usize>("m")?, b.rows(), b.k());
    let a = if weight_only { None } else { Some(case::get_matrix(file, "a")?) };
    let x = if weight_only { Some(Values::read(file, "x", &[m, k])?) } else { None };
    let want = file.f32s("out", &[m, n])?;
    let bias = if file.has("bias") { Some(file.f32s("bias", &[n])?) } else { None };
    let alpha = match file.meta("alpha")? {
        "auto" => None,
        _ => Some(file.f32_bits("alpha")?),
    };
    let exact = file.meta("exact")? == "true";
    let mut epi: Epilogue<'_> = Epilogue { alpha, ..Default::default() }.with_activation(parse_activation(file)?);
    if let Some(bias) = &bias {
        epi = epi.with_bias(bias);
    }
    let label = format!("{name} [{}", backend.name());
    #[cfg(feature = "cuda")]
    if let Backend::Cuda(dev) = backend {
        if gemv {
            return verify_gemv_cuda(dev, &label, (x.as_ref(), &b), &epi, &want, exact);
        }
        return verify_gemm_cuda(dev, &label, (a.as_ref(), x.as_ref(), &b), &epi, &want, exact);
    }
    #[cfg(not(feature = "cuda"))]
    let _ = gemv;
    let run = |fast: bool| -> Result<Vec<f32>, String> {
        let r = match (&a, &x) {
            (Some(a), _) if fast => gemm::<f32>(a, &b, &epi, &GemmOptions::default()),
            (Some(a), _) => gemm_reference::<f32>(a, &b, &epi),
            (None, Some(x)) => {
                macro_rules! wo {
                    ($v:expr) => {{
                        let view = ArrayView2::from_shape((m, k), &$v[..]).map_err(|e| e.to_string())?;
                        if fast {
                            gemm_weight_only(view, &b, &epi, &GemmOptions::default())
                        } else {
                            gemm_weight_only_reference(view, &b, &epi)
                        }
                    }};
                }
                match x {
                    Values::F32(v) => wo!(v),
                    Values::F16(v) => wo!(v),
                    Values::Bf16(v) => wo!(v),
                }
            }
            (None, None) => unreachable!("weight-only cases read x"),
        };
        r.map(|o| o.into_raw_vec_and_offset().0).map_err(|e| e.to_string())
    };
    let mut out = Vec::new();
    match run(false) {
        Ok(got) => {
            let (ok, max, detail) = compare_f32(&got, &want, n, 0, None);
            out.push(outcome(format!("{label} reference]"), ok, max, if ok { "bit for bit".into() } else { detail }));
        }
        Err(e) => out.push(outcome(format!("{label} reference]"), false, 0, format!("error: {e}"))),
    }
    // The fast path: bit for bit on exact cases, else within its bound (docs/NUMERICS.md):
    // n u/(1 - n u) * sum |a b| (values with every scale), plus the f32 epilogue's
    // roundings, times the activation's slope (at most 1.13 for GELU and SiLU).
    let t = abs_products(a.as_ref(), x.as_ref(), &b, m)?;
    let bs = b.scheme().block_size();
    let nu = (k + k / bs + bs + 8) as f64 * 2f64.powi(-24);
    let slope = if epi.activation == Activation::Identity { 1.0 } else { 1.2 };
    let bound = |i: usize| slope * (nu / (1.0 - nu) * t[i] * 1.001 + 3.0 * ulp(want[i]));
    match run(true) {
        Ok(got) => {
            let (ok, max, detail) =
                if exact { compare_f32(&got, &want, n, 0, None) } else { compare_f32(&got, &want, n, 0, Some(&bound)) };
            let what = if exact { "bit for bit" } else { "within the fast path's bound" };
            out.push(outcome(format!("{label} fast]"), ok, max, if ok { what.into() } else { detail }));
        }
        Err(e) => out.push(outcome(format!("{label} fast]"), false, 0, format!("error: {e}"))),
    }
    Ok(out)
}

/// The cuda backend's GEMM against the golden output: bit for bit on exact cases, else
/// within the bound docs/KERNELS.md states for the kernel family that ran.
#[cfg(feature = "cuda")]
fn verify_gemm_cuda(
    dev: &blockscale_cuda::Device,
    label: &str,
    (a, x, b): (Option<&QuantizedMatrix>, Option<&Values>, &QuantizedMatrix),
    epi: &Epilogue<'_>,
    want: &[f32],
    exact: bool,
) -> Result<Vec<Outcome>, GoldenError> {
    use blockscale_formats::Fp8Tile;
    let (m, k) = (want.len() / b.rows(), b.k());
    // The SM120 tier writes bf16 and has no weight-only kernel: its results are compared
    // with the golden f32 output rounded to bf16, and what it has no kernel for is a SKIP.
    let sm120 = dev.arch() == blockscale_cuda::Arch::Sm120;
    let run = || -> Result<Vec<f32>, blockscale_cuda::CudaError> {
        // (Weight-only cases reach the f32 calls below, which refuse them on SM120.)
        if let (true, Some(a)) = (sm120, a) {
            let r = blockscale_cuda::gemm_host::<half::bf16>(dev, a, b, epi)?;
            return Ok(r.iter().map(|v| v.to_f32()).collect());
        }
        let r = match (a, x) {
            (Some(a), _) => blockscale_cuda::gemm_host::<f32>(dev, a, b, epi)?,
            (None, Some(Values::F32(v))) => {
                blockscale_cuda::gemm_weight_only_host(dev, ArrayView2::from_shape((m, k), &v[..]).unwrap(), b, epi)?
            }
            (None, Some(Values::F16(v))) => {
                blockscale_cuda::gemm_weight_only_host(dev, ArrayView2::from_shape((m, k), &v[..]).unwrap(), b, epi)?
            }
            (None, Some(Values::Bf16(v))) => {
                blockscale_cuda::gemm_weight_only_host(dev, ArrayView2::from_shape((m, k), &v[..]).unwrap(), b, epi)?
            }
            (None, None) => unreachable!("weight-only cases read x"),
        };
        Ok(r.into_raw_vec_and_offset().0)
    };
    let got = match run() {
        Ok(got) => got,
        Err(e @ (blockscale_cuda::CudaError::NoGemmKernel { .. } | blockscale_cuda::CudaError::KAlignment { .. })) => {
            let name = format!("{label} gemm]");
            return Ok(vec![Outcome { name, verdict: Verdict::Skip, max_ulps: 0, detail: format!("{e}") }]);
        }
        Err(e) => return Ok(vec![outcome(format!("{label} gemm]"), false, 0, format!("error: {e}"))]),
    };
    let rounded_want: Vec<f32>;
    let want = if sm120 {
        rounded_want = want.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
        &rounded_want[..]
    } else {
        want
    };
    // The kernel family's bound relative to sum |a b| over values without NVFP4's
    // per-tensor factors, which alpha carries (docs/KERNELS.md).
    let fp8 = a.is_some() && b.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128);
    let mxfp8 = |s: Scheme| matches!(s, Scheme::MxFp8E4M3 | Scheme::MxFp8E5M2);
    // MXFP8 pairs with K a multiple of 128 run on Hopper's FP8 tensor cores up to M = 512
    // (the default of BLOCKSCALE_GEMM_MX_WGMMA_MAX_M).
    let mx_on_fp8 =
        !sm120 && a.is_some_and(|a| mxfp8(a.scheme()) && a.rows() <= 512) && mxfp8(b.scheme()) && k.is_multiple_of(128);
    let rel = if fp8 {
        136.0 * 2f64.powi(-12) + (k / 128 + 2) as f64 * 2f64.powi(-23)
    } else if mx_on_fp8 {
        40.0 * 2f64.powi(-12) + (k / 32 + 2) as f64 * 2f64.powi(-23)
    } else {
        let rounded = match (a, b.scheme()) {
            (Some(_), Scheme::Fp8Block(_)) => 2,
            (None, Scheme::Fp8Block(_) | Scheme::Int4G32 | Scheme::Int4G128) => 1,
            _ => 0,
        };
        bf16_tensor_core_rel(k, x, rounded)
    };
    // A bf16 output adds its rounding: one bf16 ulp (2^16 f32 ulps) of the result.
    let out_ulps = if sm120 { 65536.0 } else { 1.0 };
    check_cuda(format!("{label} gemm]"), &got, want, (a, x, b), epi, (exact, rel, out_ulps))
}

/// `rel` of the BF16 tensor-core kernels (docs/KERNELS.md): `(K' + K'/16 + 4) 2^-22`
/// with `K'` = K times the bf16 pieces per activation (f32 3, f16 2, bf16 or quantized
/// 1), plus `2^-9` per operand rounded once to bf16.
#[cfg(feature = "cuda")]
fn bf16_tensor_core_rel(k: usize, x: Option<&Values>, rounded: u32) -> f64 {
    let pieces = match x {
        Some(Values::F32(_)) => 3.0,
        Some(Values::F16(_)) => 2.0,
        _ => 1.0,
    };
    let kk = k as f64 * pieces;
    (kk + kk / 16.0 + 4.0) * 2f64.powi(-22) + rounded as f64 * 2f64.powi(-9)
}

/// A cuda result against the golden output: bit for bit when `exact`, else within
/// `slope (|alpha| rel T / per-tensor + 8 ulp) + out_ulps ulp` (docs/KERNELS.md).
#[cfg(feature = "cuda")]
fn check_cuda(
    name: String,
    got: &[f32],
    want: &[f32],
    (a, x, b): (Option<&QuantizedMatrix>, Option<&Values>, &QuantizedMatrix),
    epi: &Epilogue<'_>,
    (exact, rel, out_ulps): (bool, f64, f64),
) -> Result<Vec<Outcome>, GoldenError> {
    let n = b.rows();
    if exact {
        let (ok, max, detail) = compare_f32(got, want, n, 0, None);
        return Ok(vec![outcome(name, ok, max, if ok { "bit for bit".into() } else { detail })]);
    }
    let decode = |q: Option<&QuantizedMatrix>| q.and_then(|q| q.global_scale()).map_or(1.0, |g| g.decode() as f64);
    let alpha = match a {
        Some(a) => epi.alpha_quantized(a.global_scale(), b.global_scale()),
        None => epi.alpha_weight_only(b.scheme(), b.global_scale()),
    } as f64;
    let t = abs_products(a, x, b, want.len() / n)?;
    let per_tensor = decode(a) * decode(Some(b));
    let slope = if epi.activation == Activation::Identity { 1.0 } else { 1.2 };
    let bound =
        |i: usize| slope * (alpha.abs() * rel * t[i] / per_tensor + 8.0 * ulp(want[i])) + out_ulps * ulp(want[i]);
    let (ok, max, detail) = compare_f32(got, want, n, 0, Some(&bound));
    Ok(vec![outcome(name, ok, max, if ok { "within the kernel's bound".into() } else { detail })])
}

/// The cuda backend's GEMV against a decode case's golden output: bit for bit on exact
/// cases, else within the GEMV's bound (docs/KERNELS.md, "GEMV": every block's sum exact
/// products added in f32, scaled in f32; no operand rounded).
#[cfg(feature = "cuda")]
fn verify_gemv_cuda(
    dev: &blockscale_cuda::Device,
    label: &str,
    (x, b): (Option<&Values>, &QuantizedMatrix),
    epi: &Epilogue<'_>,
    want: &[f32],
    exact: bool,
) -> Result<Vec<Outcome>, GoldenError> {
    let (m, k) = (want.len() / b.rows(), b.k());
    // The checkpoint layout (the general kernel), then the same weights prepared (the
    // fast kernels).
    let prepared = match blockscale_cuda::PreparedWeights::from_host(dev, b) {
        Ok(p) => p,
        Err(e) => return Ok(vec![outcome(format!("{label} gemv prepared]"), false, 0, format!("error: {e}"))]),
    };
    let mut outcomes = Vec::new();
    for prepare in [false, true] {
        let name = format!("{label} gemv{}]", if prepare { " prepared" } else { "" });
        let run = |xv: Option<&Values>| -> Result<ndarray::Array2<f32>, blockscale_cuda::CudaError> {
            match (xv, prepare) {
                (Some(Values::Bf16(v)), false) => {
                    blockscale_cuda::gemv_host(dev, ArrayView2::from_shape((m, k), &v[..]).unwrap(), b, epi)
                }
                (Some(Values::F16(v)), false) => {
                    blockscale_cuda::gemv_host(dev, ArrayView2::from_shape((m, k), &v[..]).unwrap(), b, epi)
                }
                (Some(Values::Bf16(v)), true) => blockscale_cuda::gemv_prepared_host(
                    dev,
                    ArrayView2::from_shape((m, k), &v[..]).unwrap(),
                    &prepared,
                    epi,
                ),
                (Some(Values::F16(v)), true) => blockscale_cuda::gemv_prepared_host(
                    dev,
                    ArrayView2::from_shape((m, k), &v[..]).unwrap(),
                    &prepared,
                    epi,
                ),
                _ => unreachable!("checked below"),
            }
        };
        if !matches!(x, Some(Values::Bf16(_) | Values::F16(_))) {
            return Ok(vec![outcome(name, false, 0, "a GEMV case needs bf16 or f16 activations x".into())]);
        }
        let got = match run(x) {
            Ok(got) => got.into_raw_vec_and_offset().0,
            Err(e) => {
                outcomes.push(outcome(name, false, 0, format!("error: {e}")));
                continue;
            }
        };
        // Weights exact in bf16 (scaled in f32, or scaled exactly in bf16 when
        // prepared): nothing rounded.
        let rel = bf16_tensor_core_rel(k, x, 0);
        outcomes.extend(check_cuda(name, &got, want, (None, x, b), epi, (exact, rel, 1.0))?);
    }
    Ok(outcomes)
}

fn ulp(x: f32) -> f64 {
    let a = x.abs().max(f32::MIN_POSITIVE);
    if !a.is_finite() {
        return f64::INFINITY;
    }
    (f32::from_bits(a.to_bits() + 1) - a) as f64
}

/// `sum_k |A[i, k] B[j, k]|` over dequantized values (per-tensor factors included), the
/// scale of every product bound: `a` quantized or `x` high-precision, times `b`. (It
/// returns no error today.)
pub fn abs_products(
    a: Option<&QuantizedMatrix>,
    x: Option<&Values>,
    b: &QuantizedMatrix,
    m: usize,
) -> Result<Vec<f64>, GoldenError> {
    let k = b.k();
    let av: Vec<f32> = match (a, x) {
        (Some(a), _) => blockscale_cpu::dequantize::<f32>(a).into_raw_vec_and_offset().0,
        (None, Some(x)) => x.to_f32(),
        (None, None) => vec![0.0; m * k],
    };
    let bv = blockscale_cpu::dequantize::<f32>(b).into_raw_vec_and_offset().0;
    let n = b.rows();
    let mut t = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            t[i * n + j] = av[i * k..(i + 1) * k]
                .iter()
                .zip(&bv[j * k..(j + 1) * k])
                .map(|(&p, &q)| (p as f64 * q as f64).abs())
                .sum();
        }
    }
    Ok(t)
}
