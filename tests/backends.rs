//! The facade's [`Backend`] API on every golden case (tests/golden/), on each backend
//! this build and machine have: the CPU always, the first GPU with `--features cuda`.
//!
//! What the expected values are:
//! - quantize: the golden codes and scales (both layouts), bit for bit;
//! - dequantize: the golden f32 values bit for bit, and for bf16 / f16 output those
//!   values rounded by `half` (docs/NUMERICS.md: one rounding of the f32, canonical NaN);
//! - products on cases marked exact: the golden (CPU reference) output bit for bit;
//! - products elsewhere: within `2^-6 sum |a b|` (scaled as the epilogue scales the sum)
//!   plus 16 ulp of the golden (CPU reference) output, a bound every backend's kernels
//!   meet with room to spare (their own, much tighter bounds are what
//!   blockscale-golden's verifier checks, `cargo xtask verify`), and the same bits as
//!   calling the backend crate directly with its default options: the question here is
//!   whether the facade runs the operation it names, unchanged.

use std::path::PathBuf;

use blockscale::FloatValues;
use blockscale::half::{bf16, f16};
use blockscale::ndarray::{Array2, ArrayView1, ArrayView2};
use blockscale::{Backend, Element, Epilogue, QuantizedMatrix, ScaleLayout};
use blockscale_golden::GoldenFile;
use blockscale_golden::case;
use blockscale_golden::verify::{abs_products, parse_activation, quantize_options};

/// The golden files, sorted by name: `BLOCKSCALE_GOLDEN_DIR` when set (the GPU bundle
/// carries them beside the test binary, on a machine where the repository is not),
/// else the repository's `tests/golden`.
fn golden_files() -> Vec<GoldenFile> {
    let dir = std::env::var_os("BLOCKSCALE_GOLDEN_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden"), PathBuf::from);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 90, "expected the committed golden set in {}, found {} files", dir.display(), paths.len());
    paths.iter().map(|p| GoldenFile::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).collect()
}

/// The CPU, and the first GPU when the build has CUDA and the machine has one.
fn backends() -> Vec<Backend> {
    let mut v = vec![Backend::Cpu];
    match Backend::cuda(0) {
        Ok(gpu) => v.push(gpu),
        Err(e) => eprintln!("note: the GPU backend is not checked here: {e}"),
    }
    v
}

fn kind(f: &GoldenFile) -> &str {
    f.meta("kind").unwrap()
}

fn case_name(f: &GoldenFile) -> String {
    f.meta("case").unwrap().to_owned()
}

use blockscale::for_float_values as with_values;

fn scale_bytes(q: &QuantizedMatrix) -> Vec<u8> {
    case::scale_bytes(q.scales())
}

/// Runs `check(backend, file, name)` on every quantize golden case on every backend;
/// returns how many ran.
fn each_quantize_case(mut check: impl FnMut(&Backend, &GoldenFile, &str)) -> usize {
    let files: Vec<_> = golden_files().into_iter().filter(|f| kind(f) == "quantize").collect();
    let mut checked = 0;
    for backend in backends() {
        for f in &files {
            check(&backend, f, &format!("{} [{}]", case_name(f), backend.name()));
            checked += 1;
        }
    }
    checked
}

#[test]
fn quantize_writes_the_golden_bytes_on_every_backend() {
    let checked = each_quantize_case(|backend, f, name| {
        let golden = case::get_matrix(f, "q").unwrap();
        let (scheme, rows, k) = (golden.scheme(), golden.rows(), golden.k());
        let input = case::read_values(f, "input", &[rows, k]).unwrap();
        let options = quantize_options(f, scheme).unwrap();
        let q = with_values!(&input, |v| backend.quantize(
            ArrayView2::from_shape((rows, k), &v[..]).unwrap(),
            scheme,
            &options
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(q.data() == golden.data(), "{name}: codes differ from the golden file");
        assert_eq!(scale_bytes(&q), scale_bytes(&golden), "{name}: linear scales differ");
        assert_eq!(
            q.global_scale().map(|g| g.encode().to_bits()),
            golden.global_scale().map(|g| g.encode().to_bits()),
            "{name}: global scale"
        );
        if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
            let shape = case::scale_shape(golden.shape(), ScaleLayout::Swizzled128x4);
            let want = f.bytes("scales_swizzled", case::scale_dtype(scheme), &shape).unwrap();
            let o = options.with_scale_layout(ScaleLayout::Swizzled128x4);
            let q2 = with_values!(&input, |v| backend.quantize(
                ArrayView2::from_shape((rows, k), &v[..]).unwrap(),
                scheme,
                &o
            ))
            .unwrap_or_else(|e| panic!("{name} swizzled: {e}"));
            assert_eq!(scale_bytes(&q2), want, "{name}: swizzled scales differ");
            assert!(q2.data() == golden.data(), "{name}: codes differ with swizzled scales");
        }
    });
    assert!(checked >= 50, "only {checked} quantize cases checked");
}

/// Bits of `got` against the golden f32 values rounded to `T` by `half`, NaN canonical.
fn check_rounded<T: Element + Copy>(
    name: &str,
    got: &Array2<T>,
    want: &[f32],
    bits: impl Fn(T) -> u16,
    round: impl Fn(f32) -> u16,
    nan: u16,
) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let expected = if w.is_nan() { nan } else { round(w) };
        assert_eq!(bits(g), expected, "{name}: value {i}: got {:#06x}, want {expected:#06x} (f32 {w:e})", bits(g));
    }
}

#[test]
fn dequantize_gives_the_golden_values_in_every_output_type() {
    let checked = each_quantize_case(|backend, f, name| {
        let q = case::get_matrix(f, "q").unwrap();
        let want = f.f32s("dequant", &[q.rows(), q.k()]).unwrap();
        let got = backend.dequantize::<f32>(&q).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.dim(), (q.rows(), q.k()), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}: f32 value {i}: got {g:e}, want {w:e}");
        }
        let b = backend.dequantize::<bf16>(&q).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_rounded(name, &b, &want, bf16::to_bits, |v| bf16::from_f32(v).to_bits(), 0x7fc0);
        let h = backend.dequantize::<f16>(&q).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_rounded(name, &h, &want, f16::to_bits, |v| f16::from_f32(v).to_bits(), 0x7e00);
    });
    assert!(checked >= 50, "only {checked} dequantize cases checked");
}

/// A product case's operands and epilogue.
struct Product {
    a: Option<QuantizedMatrix>,
    x: Option<FloatValues<'static>>,
    b: QuantizedMatrix,
    m: usize,
    want: Vec<f32>,
    bias: Option<Vec<f32>>,
    alpha: Option<f32>,
    activation: blockscale::Activation,
    exact: bool,
    /// `sum_k |a b|` per output, computed once per case (the GEMV checks it row by row).
    abs: std::cell::OnceCell<Vec<f64>>,
}

impl Product {
    fn read(f: &GoldenFile) -> Self {
        let b = case::get_matrix(f, "b").unwrap();
        let m: usize = f.parse("m").unwrap();
        let (n, k) = (b.rows(), b.k());
        let weight_only = f.meta_opt("a.scheme").is_none();
        Self {
            a: (!weight_only).then(|| case::get_matrix(f, "a").unwrap()),
            x: weight_only.then(|| case::read_values(f, "x", &[m, k]).unwrap()),
            want: f.f32s("out", &[m, n]).unwrap(),
            bias: f.has("bias").then(|| f.f32s("bias", &[n]).unwrap()),
            alpha: match f.meta("alpha").unwrap() {
                "auto" => None,
                _ => Some(f.f32_bits("alpha").unwrap()),
            },
            activation: parse_activation(f).unwrap(),
            exact: f.meta("exact").unwrap() == "true",
            abs: std::cell::OnceCell::new(),
            b,
            m,
        }
    }

    fn epilogue(&self) -> Epilogue<'_> {
        let e = Epilogue { alpha: self.alpha, ..Default::default() }.with_activation(self.activation);
        match &self.bias {
            Some(b) => e.with_bias(b),
            None => e,
        }
    }
}

/// Bit for bit, or the first difference.
fn same_bits(name: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: {what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{name}: {what}: value {i}: got {g:e}, want {w:e}"
        );
    }
}

/// The backend crate's own result for what the facade ran, with default options (on the
/// prepared weights where the facade ran on them: the GPU's prepared kernels may round
/// differently from its plain ones where the case is not exact).
fn direct(
    backend: &Backend,
    p: &Product,
    x_row: Option<usize>,
    prepared: Option<&blockscale::Prepared>,
) -> Result<Vec<f32>, String> {
    #[cfg(not(feature = "cuda"))]
    let _ = prepared; // only the cuda arm reads it
    let epi = p.epilogue();
    let k = p.b.k();
    let cpu = blockscale::GemmOptions::default();
    let flat = |a: Array2<f32>| a.into_raw_vec_and_offset().0;
    match (backend, &p.a, &p.x, x_row) {
        (Backend::Cpu, Some(a), _, _) => {
            blockscale::cpu::gemm(a, &p.b, &epi, &cpu).map(flat).map_err(|e| e.to_string())
        }
        // (The CPU's prepared weights are the matrix itself.)
        (Backend::Cpu, None, Some(x), None) => with_values!(x, |v| blockscale::cpu::gemm_weight_only(
            ArrayView2::from_shape((p.m, k), &v[..]).unwrap(),
            &p.b,
            &epi,
            &cpu
        ))
        .map(flat)
        .map_err(|e| e.to_string()),
        (Backend::Cpu, None, Some(x), Some(r)) => {
            with_values!(x, |v| blockscale::cpu::gemv(&v[r * k..(r + 1) * k], &p.b, &epi, &cpu))
                .map_err(|e| e.to_string())
        }
        #[cfg(feature = "cuda")]
        (Backend::Cuda(dev), a, x, row) => cuda_direct(dev, p, a.as_ref(), x.as_ref(), row, prepared),
        _ => unreachable!("a product case has a or x"),
    }
}

#[cfg(feature = "cuda")]
fn cuda_direct(
    dev: &blockscale::cuda::Device,
    p: &Product,
    a: Option<&QuantizedMatrix>,
    x: Option<&FloatValues<'static>>,
    row: Option<usize>,
    prepared: Option<&blockscale::Prepared>,
) -> Result<Vec<f32>, String> {
    use blockscale::cuda;
    let epi = p.epilogue();
    let k = p.b.k();
    if let (Some(blockscale::Prepared::Cuda(w)), Some(a)) = (prepared, a) {
        let r = cuda::gemm_prepared_host::<f32>(dev, a, w, &epi);
        return r.map(|a| a.into_raw_vec_and_offset().0).map_err(|e| e.to_string());
    }
    if let (Some(blockscale::Prepared::Cuda(w)), Some(x), None) = (prepared, x, row) {
        let r = match x {
            FloatValues::Bf16(v) => cuda::gemm_weight_only_prepared_host::<_, f32>(
                dev,
                ArrayView2::from_shape((p.m, k), &v[..]).unwrap(),
                w,
                &epi,
            ),
            FloatValues::F16(v) => cuda::gemm_weight_only_prepared_host::<_, f32>(
                dev,
                ArrayView2::from_shape((p.m, k), &v[..]).unwrap(),
                w,
                &epi,
            ),
            FloatValues::F32(_) => return Err("no direct call for this case".into()),
        };
        return r.map(|a| a.into_raw_vec_and_offset().0).map_err(|e| e.to_string());
    }
    if let (Some(blockscale::Prepared::Cuda(w)), Some(x), Some(r)) = (prepared, x, row) {
        let r = match x {
            FloatValues::Bf16(v) => cuda::gemv_prepared_host::<_, f32>(
                dev,
                ArrayView2::from_shape((1, k), &v[r * k..(r + 1) * k]).unwrap(),
                w,
                &epi,
            ),
            FloatValues::F16(v) => cuda::gemv_prepared_host::<_, f32>(
                dev,
                ArrayView2::from_shape((1, k), &v[r * k..(r + 1) * k]).unwrap(),
                w,
                &epi,
            ),
            FloatValues::F32(_) => return Err("no direct call for this case".into()),
        };
        return r.map(|a| a.into_raw_vec_and_offset().0).map_err(|e| e.to_string());
    }
    let r = match (a, x, row) {
        (Some(a), _, _) => cuda::gemm_host::<f32>(dev, a, &p.b, &epi),
        (None, Some(x), None) => with_values!(x, |v| cuda::gemm_weight_only_host::<_, f32>(
            dev,
            ArrayView2::from_shape((p.m, k), &v[..]).unwrap(),
            &p.b,
            &epi
        )),
        (None, Some(FloatValues::Bf16(v)), Some(r)) => {
            cuda::gemv_host::<_, f32>(dev, ArrayView2::from_shape((1, k), &v[r * k..(r + 1) * k]).unwrap(), &p.b, &epi)
        }
        (None, Some(FloatValues::F16(v)), Some(r)) => {
            cuda::gemv_host::<_, f32>(dev, ArrayView2::from_shape((1, k), &v[r * k..(r + 1) * k]).unwrap(), &p.b, &epi)
        }
        _ => return Err("no direct call for this case".into()),
    };
    r.map(|a| a.into_raw_vec_and_offset().0).map_err(|e| e.to_string())
}

/// A backend that has no kernel for a case says so with a typed error: those are skips
/// (SM120 has no f32-output or weight-only GEMM, the CUTLASS kernels need aligned K).
fn is_no_kernel(e: &blockscale::Error) -> bool {
    match e {
        #[cfg(feature = "cuda")]
        blockscale::Error::Cuda(
            blockscale::cuda::CudaError::NoGemmKernel { .. } | blockscale::cuda::CudaError::KAlignment { .. },
        ) => true,
        blockscale::Error::Unsupported { .. } => true,
        _ => false,
    }
}

/// The facade's result against the golden output (exact cases) or the backend crate's
/// direct result (elsewhere). Returns whether it ran.
fn check_product(
    name: &str,
    backend: &Backend,
    p: &Product,
    got: Result<Vec<f32>, blockscale::Error>,
    row: Option<usize>,
    prepared: Option<&blockscale::Prepared>,
) -> bool {
    let got = match got {
        Ok(g) => g,
        Err(e) if is_no_kernel(&e) => {
            eprintln!("skip {name}: {e}");
            return false;
        }
        Err(e) => panic!("{name}: {e}"),
    };
    let n = p.b.rows();
    let want = match row {
        Some(r) => &p.want[r * n..(r + 1) * n],
        None => &p.want[..],
    };
    if p.exact {
        same_bits(name, "against the golden output", &got, want);
    } else {
        within_loose_bound(name, p, &got, row);
        let d = direct(backend, p, row, prepared)
            .unwrap_or_else(|e| panic!("{name}: the direct call failed where the facade ran: {e}"));
        same_bits(name, "against the backend crate's own call", &got, &d);
    }
    true
}

/// `|got - want| <= slope (2^-6 |alpha| T / per-tensor + 16 ulp(want))` per output, with
/// `T = sum_k |a b|` over the dequantized operands (per-tensor factors included, which
/// the division takes out again: `alpha` scales the sum without them), and `slope` 1.2
/// for GELU and SiLU (their slope is below 1.13).
fn within_loose_bound(name: &str, p: &Product, got: &[f32], row: Option<usize>) {
    let n = p.b.rows();
    let epi = p.epilogue();
    let decode = |q: Option<&QuantizedMatrix>| q.and_then(|q| q.global_scale()).map_or(1.0, |g| g.decode() as f64);
    let alpha = match &p.a {
        Some(a) => epi.alpha_quantized(a.global_scale(), p.b.global_scale()),
        None => epi.alpha_weight_only(p.b.scheme(), p.b.global_scale()),
    };
    let abs = p.abs.get_or_init(|| abs_products(p.a.as_ref(), p.x.as_ref(), &p.b, p.m).unwrap());
    let per_tensor = decode(p.a.as_ref()) * decode(Some(&p.b));
    let slope = if p.activation == blockscale::Activation::Identity { 1.0 } else { 1.2 };
    let rows: Vec<usize> = row.map_or_else(|| (0..p.m).collect(), |r| vec![r]);
    for (ri, &i) in rows.iter().enumerate() {
        for j in 0..n {
            let t = abs[i * n + j];
            let (g, w) = (got[ri * n + j], p.want[i * n + j]);
            let ulp = (f32::from_bits(w.abs().max(f32::MIN_POSITIVE).to_bits() + 1) - w.abs()) as f64;
            let bound = slope * (2f64.powi(-6) * (alpha as f64).abs() * t / per_tensor + 16.0 * ulp);
            assert!(
                (g.is_nan() && w.is_nan()) || (g as f64 - w as f64).abs() <= bound,
                "{name}: [{i}, {j}]: got {g:e}, the CPU reference {w:e}, beyond the loose bound {bound:e}"
            );
        }
    }
}

#[test]
fn gemm_and_gemm_weight_only_agree_with_the_golden_cases() {
    // Every case also on weights prepared once (on the GPU: the fused kernels' layout):
    // weight-only through `gemm_weight_only_prepared` (f32 activations are refused
    // there), pairs through `gemm_prepared`.
    let (mut ran, mut exact, mut prepared_ran) = (0, 0, 0);
    for backend in backends() {
        for f in golden_files().iter().filter(|f| kind(f) == "gemm") {
            let p = Product::read(f);
            let epi = p.epilogue();
            // Pairs too (`gemm_prepared`), but FP8 block pairs, which read the checkpoint
            // layout on the GPU.
            let fp8_pair = p.a.as_ref().is_some_and(|a| matches!(a.scheme(), blockscale::Scheme::Fp8Block(_)));
            let prepared = (!fp8_pair).then(|| backend.prepare(&p.b).unwrap());
            for use_prepared in [false, true] {
                if use_prepared && prepared.is_none() {
                    continue;
                }
                let how = if use_prepared { " prepared" } else { "" };
                let name = format!("{}{how} [{}]", case_name(f), backend.name());
                let got = match (&p.a, &p.x, prepared.as_ref().filter(|_| use_prepared)) {
                    (Some(a), _, Some(w)) => backend.gemm_prepared::<f32>(a, w, &epi),
                    (Some(a), _, None) => backend.gemm::<f32>(a, &p.b, &epi),
                    (None, Some(x), None) => with_values!(x, |v| backend.gemm_weight_only::<_, f32>(
                        ArrayView2::from_shape((p.m, p.b.k()), &v[..]).unwrap(),
                        &p.b,
                        &epi
                    )),
                    (None, Some(x), Some(w)) => with_values!(x, |v| backend.gemm_weight_only_prepared::<_, f32>(
                        ArrayView2::from_shape((p.m, p.b.k()), &v[..]).unwrap(),
                        w,
                        &epi
                    )),
                    (None, None, _) => unreachable!(),
                }
                .map(|a| {
                    assert_eq!(a.dim(), (p.m, p.b.rows()), "{name}: output shape");
                    a.into_raw_vec_and_offset().0
                });
                let on = if use_prepared { prepared.as_ref() } else { None };
                if check_product(&name, &backend, &p, got, None, on) {
                    ran += 1;
                    exact += usize::from(p.exact);
                    prepared_ran += usize::from(use_prepared);
                }
            }
        }
    }
    assert!(
        ran >= 30 && exact >= 6 && prepared_ran >= 16,
        "only {ran} GEMM cases ran ({exact} exact, {prepared_ran} prepared)"
    );
}

#[test]
fn gemv_agrees_with_the_golden_decode_cases_row_by_row() {
    // Each row through `gemv` and through `gemv_prepared` on weights prepared once (on
    // the GPU: the fast kernels' layout).
    let (mut ran, mut exact) = (0, 0);
    for backend in backends() {
        for f in golden_files().iter().filter(|f| kind(f) == "gemv") {
            let p = Product::read(f);
            let x = p.x.as_ref().expect("decode cases are weight-only");
            let k = p.b.k();
            let prepared = backend.prepare(&p.b).unwrap();
            for r in 0..p.m {
                for (how, use_prepared) in [("", false), (" prepared", true)] {
                    let name = format!("{} row {r}{how} [{}]", case_name(f), backend.name());
                    let got = with_values!(x, |v| {
                        let xv = ArrayView1::from(&v[r * k..(r + 1) * k]);
                        if use_prepared {
                            backend.gemv_prepared::<_, f32>(xv, &prepared, &p.epilogue())
                        } else {
                            backend.gemv::<_, f32>(xv, &p.b, &p.epilogue())
                        }
                    })
                    .map(|y| {
                        assert_eq!(y.len(), p.b.rows(), "{name}: output length");
                        y.to_vec()
                    });
                    if check_product(&name, &backend, &p, got, Some(r), use_prepared.then_some(&prepared)) {
                        ran += 1;
                        exact += usize::from(p.exact);
                    }
                }
            }
        }
    }
    assert!(ran >= 36 && exact >= 18, "only {ran} GEMV rows ran ({exact} exact)");
}

#[test]
fn bad_input_is_a_typed_error_on_every_backend() {
    use blockscale::{QuantizeOptions, Scheme};
    for backend in backends() {
        let name = backend.name();
        // K not a multiple of MXFP4's 32-element block: the formats layer's shape error.
        let w = Array2::<f32>::ones((32, 48));
        let e = backend.quantize(w.view(), Scheme::MxFp4, &QuantizeOptions::default()).unwrap_err();
        assert!(e.to_string().contains("48"), "{name}: {e}");
        // NaN under the default policy: the backend's NonFinite error, with its place.
        let mut w = Array2::<f32>::ones((16, 64));
        w[[3, 17]] = f32::NAN;
        let e = backend.quantize(w.view(), Scheme::MxFp4, &QuantizeOptions::default()).unwrap_err();
        let place = match &e {
            blockscale::Error::Cpu(blockscale::CpuError::NonFinite { row, col, .. }) => (*row, *col),
            #[cfg(feature = "cuda")]
            blockscale::Error::Cuda(blockscale::cuda::CudaError::NonFinite { row, col, .. }) => (*row, *col),
            other => panic!("{name}: expected a NonFinite error, got {other:?}"),
        };
        assert_eq!(place, (3, 17), "{name}");
        // A vector whose length is not the weights' K.
        let q =
            backend.quantize(Array2::<f32>::ones((16, 64)).view(), Scheme::MxFp4, &QuantizeOptions::default()).unwrap();
        let x = [bf16::ONE; 32];
        let e = backend.gemv::<bf16, f32>(ArrayView1::from(&x[..]), &q, &Epilogue::default()).unwrap_err();
        assert!(e.to_string().contains("32") && e.to_string().contains("64"), "{name}: {e}");
    }
}

#[test]
fn asking_for_cuda_without_it_is_an_error_and_cuda_if_available_falls_back() {
    let chosen = Backend::cuda_if_available(0).expect("a machine without a usable GPU falls back to the CPU");
    #[cfg(not(feature = "cuda"))]
    {
        assert!(matches!(Backend::cuda(0), Err(blockscale::Error::CudaNotBuilt)));
        assert_eq!(chosen.name(), "cpu");
    }
    #[cfg(feature = "cuda")]
    assert_eq!(chosen.name(), if Backend::cuda(0).is_ok() { "cuda" } else { "cpu" });
}

/// `gemv_gated_prepared` is `act_g(x Wg^T) * act_u(x Wu^T)`: on the CPU exactly the
/// product of its two GEMVs in f32; on a GPU (one kernel over both matrices) that
/// product within each side's GEMV bound (docs/KERNELS.md: `(K' + K'/16 + 4) 2^-22` of
/// the side's sum of |terms|, K' the padded K), twice (the gated and the separate
/// results are each within it of the exact value), SiLU being 1.1-Lipschitz, plus the
/// product's rounding.
#[test]
fn the_gated_gemv_is_the_product_of_its_two_sides() {
    use blockscale::half::bf16;
    use blockscale::{Activation, Error, QuantizeOptions, Scheme};
    let (n, k) = (256, 1024);
    let w = |s: usize| Array2::from_shape_fn((n, k), move |(r, c)| ((r * 7 + c * s) % 23) as f32 / 4.0 - 2.75);
    let x = blockscale::ndarray::Array1::from_shape_fn(k, |c| bf16::from_f32(((c * 5) % 9) as f32 * 0.125 - 0.5));
    let silu = Epilogue::default().with_activation(Activation::Silu);
    let plain = Epilogue::default();
    let rel = (k + k / 16 + 4) as f64 * 2f64.powi(-22);
    for backend in backends() {
        let opts = QuantizeOptions::default();
        let (qg, qu) = (
            backend.quantize(w(1).view(), Scheme::NvFp4, &opts).unwrap(),
            backend.quantize(w(3).view(), Scheme::NvFp4, &opts).unwrap(),
        );
        let (gate, up) = (backend.prepare(&qg).unwrap(), backend.prepare(&qu).unwrap());
        let h: blockscale::ndarray::Array1<f32> =
            backend.gemv_gated_prepared(x.view(), (&gate, &silu), (&up, &plain)).unwrap();
        let g: blockscale::ndarray::Array1<f32> = backend.gemv_prepared(x.view(), &gate, &silu).unwrap();
        let u: blockscale::ndarray::Array1<f32> = backend.gemv_prepared(x.view(), &up, &plain).unwrap();
        // Each side's sum of |terms|, from the exact dequantized weights.
        let abs_sums = |q: &blockscale::QuantizedMatrix| {
            let d = Backend::Cpu.dequantize::<f32>(q).unwrap();
            d.rows()
                .into_iter()
                .map(|row| row.iter().zip(&x).map(|(w, x)| f64::from(*w * x.to_f32()).abs()).sum::<f64>())
                .collect::<Vec<f64>>()
        };
        let (sg, su) = (abs_sums(&qg), abs_sums(&qu));
        for i in 0..n {
            if backend.name() == "cpu" {
                assert_eq!(h[i].to_bits(), (g[i] * u[i]).to_bits(), "cpu row {i}");
                continue;
            }
            let (bg, bu) = (2.0 * 1.1 * rel * sg[i], 2.0 * rel * su[i]);
            let (gi, ui) = (f64::from(g[i]), f64::from(u[i]));
            let want = gi * ui;
            let bound = ui.abs() * bg + gi.abs() * bu + bg * bu + want.abs() * 2f64.powi(-23);
            let got = f64::from(h[i]);
            assert!((got - want).abs() <= bound, "{} row {i}: {got} vs {want} (bound {bound:e})", backend.name());
        }
        let other = backend.prepare(&backend.quantize(w(1).view(), Scheme::MxFp4, &opts).unwrap()).unwrap();
        let e = backend.gemv_gated_prepared::<bf16, f32>(x.view(), (&gate, &silu), (&other, &plain)).unwrap_err();
        assert!(matches!(e, Error::GatedMismatch { .. }), "{e}");
    }
}
