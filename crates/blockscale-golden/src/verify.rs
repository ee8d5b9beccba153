//! Recomputing every case with a backend and comparing: codes, scales and dequantized
//! values bit for bit; GEMM bit for bit on exact cases and within the path's documented
//! bound elsewhere.
//!
//! Every case runs through the facade's [`Backend`], one code path per operation; what
//! differs between backends (which products are checked, their bounds, the output type)
//! is data chosen in `product_checks`. blockscale-cpu is called directly only for what
//! no `Backend` offers: the exact reference GEMMs, and the exact dequantized operands the
//! bounds are computed from.

use blockscale::half::bf16;
use blockscale::ndarray::{Array2, ArrayView2};
use blockscale::{
    Activation, Backend, Element, Epilogue, FloatValues, Fp8Tile, GlobalScale, GlobalScaleSource, Prepared,
    QuantizeOptions, QuantizedMatrix, ScaleLayout, Scheme, layout,
};

use crate::GoldenError;
use crate::case;
use crate::file::GoldenFile;

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

/// `$body` with `$x` bound to `$values` as a `$shape` view of its own element type: where
/// a case's run-time dtype meets the facade's generic calls. ([`case::read_values`]
/// checked the shape, so the view always exists.)
macro_rules! with_view {
    ($values:expr, $shape:expr, |$x:ident| $body:expr) => {
        blockscale::for_float_values!($values, |v| {
            let $x = ArrayView2::from_shape($shape, &v[..]).expect("read_values checked the shape");
            $body
        })
    };
}

fn verify_quantize(file: &GoldenFile, name: &str, backend: &Backend) -> Result<Vec<Outcome>, GoldenError> {
    let golden = case::get_matrix(file, "q")?;
    let (scheme, rows, k) = (golden.scheme(), golden.rows(), golden.k());
    let input = case::read_values(file, "input", &[rows, k])?;
    let dequant = file.f32s("dequant", &[rows, k])?;
    let swizzled = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        let shape = case::scale_shape(golden.shape(), ScaleLayout::Swizzled128x4);
        Some(file.bytes("scales_swizzled", case::scale_dtype(scheme), &shape)?.to_vec())
    } else {
        None
    };
    let opts = quantize_options(file, scheme)?;
    let label = format!("{name} [{}]", backend.name());
    let quantize = |layout: ScaleLayout| {
        let o = opts.with_scale_layout(layout);
        with_view!(&input, (rows, k), |x| backend.quantize(x, scheme, &o))
    };
    let mut out = Vec::new();
    // Quantize, linear scales, then swizzled.
    let q = match quantize(ScaleLayout::Linear) {
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
        match quantize(ScaleLayout::Swizzled128x4) {
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
    match backend.dequantize::<f32>(&golden) {
        Ok(d) => {
            let d = d.into_raw_vec_and_offset().0;
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

/// What one product check runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// The exact reference: blockscale-cpu's `gemm_reference` / `gemm_weight_only_reference`
    /// (no [`Backend`] operation: the backends run their fast paths).
    Reference,
    /// [`Backend::gemm`] of quantized activations, or [`Backend::gemm_weight_only`] of
    /// high-precision ones, into f32.
    Gemm {
        /// The quantized GEMM writes bf16 instead (the SM120 kernels).
        bf16_out: bool,
    },
    /// [`Backend::gemv`] on each row of the activations (it takes one vector).
    Gemv,
    /// The weights made once by [`Backend::prepare`], then
    /// [`Backend::gemm_weight_only_prepared`] on all the rows: on a GPU, up to 16 rows run
    /// the GEMV's fast kernels on the prepared layout.
    GemvPrepared,
}

/// How a product check's result is judged against the golden output: bit for bit on
/// exact cases, whatever the bound; elsewhere as the bound says.
#[derive(Clone, Copy, Debug)]
enum Bound {
    /// Bit for bit on every case (the exact reference wrote the golden output).
    Exact,
    /// blockscale-cpu's fast path (docs/NUMERICS.md): `n u/(1 - n u) sum |a b|` (values
    /// with every scale), plus the f32 epilogue's roundings, times the activation's slope
    /// (at most 1.13 for GELU and SiLU).
    Fast,
    /// A GPU kernel family's (docs/KERNELS.md):
    /// `slope (|alpha| rel T / per-tensor + 8 ulp) + out_ulps ulp`, with `T = sum |a b|`
    /// over values without NVFP4's per-tensor factors, which alpha carries.
    Kernel {
        /// The family's relative bound.
        rel: f64,
        /// The output's rounding, in f32 ulps of the result.
        out_ulps: f64,
        /// The output is bf16: compared with the golden f32 output rounded to bf16.
        bf16_out: bool,
    },
}

/// One line of a product case's report.
#[derive(Clone, Copy, Debug)]
struct Check {
    /// The path's name in the report: `reference`, `fast`, `gemm`, `gemv`, `gemv prepared`.
    path: &'static str,
    /// What runs.
    op: Op,
    /// How its result is judged.
    bound: Bound,
}

/// The products checked on `backend` for a case with quantized activations `a` or
/// high-precision ones `x` and weights `b`, a decode (`gemv`) case or not: the one place
/// where the backends differ.
fn product_checks(
    backend: &Backend,
    gemv: bool,
    a: Option<&QuantizedMatrix>,
    x: Option<&FloatValues<'static>>,
    b: &QuantizedMatrix,
) -> Vec<Check> {
    if matches!(backend, Backend::Cpu) {
        // The exact reference and the fast path; a decode case is a weight-only product
        // like any other here.
        return vec![
            Check { path: "reference", op: Op::Reference, bound: Bound::Exact },
            Check { path: "fast", op: Op::Gemm { bf16_out: false }, bound: Bound::Fast },
        ];
    }
    if gemv {
        // The checkpoint layout (the general kernel), then the same weights prepared (the
        // fast kernels). Weights exact in bf16 (scaled in f32, or scaled exactly in bf16
        // when prepared): nothing rounded.
        let bound = Bound::Kernel { rel: bf16_tensor_core_rel(b.k(), x, 0), out_ulps: 1.0, bf16_out: false };
        return vec![
            Check { path: "gemv", op: Op::Gemv, bound },
            Check { path: "gemv prepared", op: Op::GemvPrepared, bound },
        ];
    }
    // The SM120 tier writes bf16 (one bf16 ulp, 2^16 f32 ulps, more) and has no
    // weight-only kernel: what it has no kernel for is a SKIP.
    let sm120 = is_sm120(backend);
    let bound = Bound::Kernel {
        rel: gemm_kernel_rel(sm120, a, x, b),
        out_ulps: if sm120 { 65536.0 } else { 1.0 },
        bf16_out: sm120,
    };
    vec![Check { path: "gemm", op: Op::Gemm { bf16_out: sm120 && a.is_some() }, bound }]
}

/// Whether `backend` is a Blackwell GeForce (SM120) GPU.
fn is_sm120(backend: &Backend) -> bool {
    #[cfg(feature = "cuda")]
    {
        matches!(backend, Backend::Cuda(dev) if dev.arch() == blockscale::cuda::Arch::Sm120)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = backend;
        false
    }
}

/// Whether `e` says the GPU has no GEMM kernel for the operands: a SKIP, not a failure.
fn no_gemm_kernel(e: &blockscale::Error) -> bool {
    #[cfg(feature = "cuda")]
    {
        use blockscale::cuda::CudaError;
        matches!(e, blockscale::Error::Cuda(CudaError::NoGemmKernel { .. } | CudaError::KAlignment { .. }))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = e;
        false
    }
}

/// A GEMM case, or (`gemv`) a decode case: weight-only, which a GPU runs through its GEMV
/// rather than its GEMM.
fn verify_gemm(file: &GoldenFile, name: &str, backend: &Backend, gemv: bool) -> Result<Vec<Outcome>, GoldenError> {
    let b = case::get_matrix(file, "b")?;
    let weight_only = file.meta_opt("a.scheme").is_none();
    let (m, n, k) = (file.parse::<usize>("m")?, b.rows(), b.k());
    let a = if weight_only { None } else { Some(case::get_matrix(file, "a")?) };
    let x = if weight_only { Some(case::read_values(file, "x", &[m, k])?) } else { None };
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
    let label = |path: &str| format!("{name} [{} {path}]", backend.name());
    let checks = product_checks(backend, gemv, a.as_ref(), x.as_ref(), &b);
    // Weights are prepared once; the GEMV reads bf16 or f16 activations.
    let mut prepared = None;
    if let Some(c) = checks.iter().find(|c| c.op == Op::GemvPrepared) {
        match backend.prepare(&b) {
            Ok(p) => prepared = Some(p),
            Err(e) => return Ok(vec![outcome(label(c.path), false, 0, format!("error: {e}"))]),
        }
    }
    if let Some(c) = checks.iter().find(|c| matches!(c.op, Op::Gemv | Op::GemvPrepared))
        && !matches!(x, Some(FloatValues::Bf16(_) | FloatValues::F16(_)))
    {
        return Ok(vec![outcome(label(c.path), false, 0, "a GEMV case needs bf16 or f16 activations x".into())]);
    }
    let t = if exact { Vec::new() } else { abs_products(a.as_ref(), x.as_ref(), &b, m)? };
    let mut out = Vec::new();
    for c in &checks {
        let name = label(c.path);
        match run_product(backend, c.op, (a.as_ref(), x.as_ref(), &b), m, &epi, prepared.as_ref()) {
            Ok(got) => out.push(judge(name, (&got, &want), c.bound, (exact, &t), (a.as_ref(), &b), &epi)),
            Err(e) if matches!(c.op, Op::Gemm { .. }) && no_gemm_kernel(&e) => {
                out.push(Outcome { name, verdict: Verdict::Skip, max_ulps: 0, detail: e.to_string() });
            }
            Err(e) => out.push(outcome(name, false, 0, format!("error: {e}"))),
        }
    }
    Ok(out)
}

/// Runs `op` on `backend` for activations `a` or `x` (`m` rows) and weights `b` (or
/// their `prepared` form): the `m x n` result as f32, row-major.
fn run_product(
    backend: &Backend,
    op: Op,
    (a, x, b): (Option<&QuantizedMatrix>, Option<&FloatValues<'static>>, &QuantizedMatrix),
    m: usize,
    epi: &Epilogue<'_>,
    prepared: Option<&Prepared>,
) -> Result<Vec<f32>, blockscale::Error> {
    let shape = (m, b.k());
    let y: Array2<f32> = match (op, a, x) {
        (Op::Reference, Some(a), _) => blockscale_cpu::gemm_reference(a, b, epi)?,
        (Op::Reference, None, Some(x)) => {
            with_view!(x, shape, |x| blockscale_cpu::gemm_weight_only_reference(x, b, epi))?
        }
        (Op::Gemm { bf16_out: true }, Some(a), _) => backend.gemm::<bf16>(a, b, epi)?.mapv(|v| v.to_f32()),
        (Op::Gemm { .. }, Some(a), _) => backend.gemm(a, b, epi)?,
        (Op::Gemm { .. }, None, Some(x)) => with_view!(x, shape, |x| backend.gemm_weight_only(x, b, epi))?,
        (Op::Gemv, None, Some(x)) => with_view!(x, shape, |x| gemv_rows(backend, x, b, epi))?,
        (Op::GemvPrepared, None, Some(x)) => {
            let w = prepared.expect("verify_gemm prepares the weights first");
            with_view!(x, shape, |x| backend.gemm_weight_only_prepared(x, w, epi))?
        }
        (Op::Gemv | Op::GemvPrepared, Some(_), _) => unreachable!("verify_gemm checks that GEMV cases have x"),
        (_, None, None) => unreachable!("weight-only cases read x"),
    };
    Ok(y.into_raw_vec_and_offset().0)
}

/// [`Backend::gemv`] on each row of `x`.
fn gemv_rows<I: Element>(
    backend: &Backend,
    x: ArrayView2<'_, I>,
    w: &QuantizedMatrix,
    epi: &Epilogue<'_>,
) -> Result<Array2<f32>, blockscale::Error> {
    let mut y = Array2::zeros((x.nrows(), w.rows()));
    for (row, mut out) in x.rows().into_iter().zip(y.rows_mut()) {
        out.assign(&backend.gemv::<I, f32>(row, w, epi)?);
    }
    Ok(y)
}

/// A product's result against the golden output, as `bound` says; `t` is
/// [`abs_products`] (empty on exact cases, which are compared bit for bit).
fn judge(
    name: String,
    (got, want): (&[f32], &[f32]),
    bound: Bound,
    (exact, t): (bool, &[f64]),
    (a, b): (Option<&QuantizedMatrix>, &QuantizedMatrix),
    epi: &Epilogue<'_>,
) -> Outcome {
    let n = b.rows();
    let rounded_want: Vec<f32>;
    let want = if let Bound::Kernel { bf16_out: true, .. } = bound {
        rounded_want = want.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
        &rounded_want[..]
    } else {
        want
    };
    let bound = if exact { Bound::Exact } else { bound };
    let slope = if epi.activation == Activation::Identity { 1.0 } else { 1.2 };
    let ((ok, max, detail), what) = match bound {
        Bound::Exact => (compare_f32(got, want, n, 0, None), "bit for bit"),
        Bound::Fast => {
            let (k, bs) = (b.k(), b.scheme().block_size());
            let nu = (k + k / bs + bs + 8) as f64 * 2f64.powi(-24);
            let limit = |i: usize| slope * (nu / (1.0 - nu) * t[i] * 1.001 + 3.0 * ulp(want[i]));
            (compare_f32(got, want, n, 0, Some(&limit)), "within the fast path's bound")
        }
        Bound::Kernel { rel, out_ulps, .. } => {
            let decode =
                |q: Option<&QuantizedMatrix>| q.and_then(|q| q.global_scale()).map_or(1.0, |g| g.decode() as f64);
            let alpha = match a {
                Some(a) => epi.alpha_quantized(a.global_scale(), b.global_scale()),
                None => epi.alpha_weight_only(b.scheme(), b.global_scale()),
            } as f64;
            let per_tensor = decode(a) * decode(Some(b));
            let limit = |i: usize| {
                slope * (alpha.abs() * rel * t[i] / per_tensor + 8.0 * ulp(want[i])) + out_ulps * ulp(want[i])
            };
            (compare_f32(got, want, n, 0, Some(&limit)), "within the kernel's bound")
        }
    };
    outcome(name, ok, max, if ok { what.into() } else { detail })
}

/// `rel` of the GPU GEMM family that runs these operands (docs/KERNELS.md).
fn gemm_kernel_rel(
    sm120: bool,
    a: Option<&QuantizedMatrix>,
    x: Option<&FloatValues<'static>>,
    b: &QuantizedMatrix,
) -> f64 {
    let k = b.k();
    let fp8 = a.is_some() && b.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128);
    let mxfp8 = |s: Scheme| matches!(s, Scheme::MxFp8E4M3 | Scheme::MxFp8E5M2);
    // MXFP8 pairs with K a multiple of 128 run on Hopper's FP8 tensor cores up to M = 512
    // (the default of BLOCKSCALE_GEMM_MX_WGMMA_MAX_M).
    let mx_on_fp8 =
        !sm120 && a.is_some_and(|a| mxfp8(a.scheme()) && a.rows() <= 512) && mxfp8(b.scheme()) && k.is_multiple_of(128);
    if fp8 {
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
    }
}

/// `rel` of the BF16 tensor-core kernels (docs/KERNELS.md): `(K' + K'/16 + 4) 2^-22`
/// with `K'` = K times the bf16 pieces per activation (f32 3, f16 2, bf16 or quantized
/// 1), plus `2^-9` per operand rounded once to bf16.
fn bf16_tensor_core_rel(k: usize, x: Option<&FloatValues<'static>>, rounded: u32) -> f64 {
    let pieces = match x {
        Some(FloatValues::F32(_)) => 3.0,
        Some(FloatValues::F16(_)) => 2.0,
        _ => 1.0,
    };
    let kk = k as f64 * pieces;
    (kk + kk / 16.0 + 4.0) * 2f64.powi(-22) + rounded as f64 * 2f64.powi(-9)
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
    x: Option<&FloatValues<'static>>,
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
