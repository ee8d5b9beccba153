//! `blockscale eval`: the accuracy and size of every scheme on a set of weights
//! (a checkpoint's, or the built-in demo layer's), as a table, JSON, and an SVG plot.
//!
//! Where the tensors come from is not this module's business: [`run_on`] takes any
//! iterator of [`EvalTensor`]s, and [`Evaluator`] takes them one at a time for callers
//! whose tensors borrow from a memory map that lives shorter than the whole run.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use blockscale::ndarray::ArrayView2;
use blockscale::{CpuError, QuantizeOptions, Scheme, dequantize, error_metrics};
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};
use serde::Serialize;

use crate::cli::EvalArgs;
use crate::error::CliError;
use crate::report::EvalRow;
use crate::scheme_arg::parse_schemes;
use crate::values::FloatValues;

/// Version of the `--json` document; bumped on incompatible changes.
pub const JSON_VERSION: u32 = 1;

/// One weight to evaluate: a row-major `rows x k` matrix quantized along K.
#[derive(Clone, Debug)]
pub struct EvalTensor<'a> {
    /// The file it was read from, for error messages (`<demo>` for the demo weights).
    pub source: PathBuf,
    /// Its name.
    pub name: String,
    /// Rows (N).
    pub rows: usize,
    /// K, the quantized dimension.
    pub k: usize,
    /// `rows * k` values, row-major.
    pub values: FloatValues<'a>,
}

/// A (tensor, scheme) pair left out because the scheme cannot hold the tensor's shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// Tensor name.
    pub tensor: String,
    /// Scheme name.
    pub scheme: String,
    /// Rows of the tensor.
    pub rows: usize,
    /// K of the tensor.
    pub k: usize,
    /// Why.
    pub reason: String,
}

/// One scheme over every tensor it was applied to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchemeSummary {
    /// Scheme name.
    pub scheme: String,
    /// Tensors evaluated.
    pub tensors: usize,
    /// Mean of the tensors' SQNR in dB (`null` in JSON when one is exact: infinite).
    pub mean_sqnr_db: f64,
    /// Smallest SQNR in dB.
    pub min_sqnr_db: f64,
    /// Bytes of the original tensors.
    pub bytes_in: usize,
    /// Bytes of the quantized tensors (elements, scales, per-tensor scales).
    pub bytes_out: usize,
    /// `bytes_in / bytes_out`.
    pub compression: f64,
    /// Storage bits per weight over all the tensors.
    pub bits_per_weight: f64,
}

/// The `--json` document. Non-finite numbers (an exact tensor's infinite SQNR) are
/// written as `null`: serde_json does so for every f64 that JSON cannot represent.
#[derive(Debug, Serialize)]
pub struct EvalReport<'r> {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// One row per (tensor, scheme), tensors in input order, schemes as asked.
    pub rows: &'r [EvalRow],
    /// One entry per scheme, in the order asked.
    pub summary: Vec<SchemeSummary>,
    /// The (tensor, scheme) pairs whose shape the scheme cannot hold.
    pub skipped: &'r [Skipped],
}

/// Whether `scheme` can quantize a `rows x k` matrix (K a multiple of its block, no
/// empty dimension). Checkpoint evaluation skips the pairs where it cannot.
pub fn applicable(scheme: Scheme, rows: usize, k: usize) -> bool {
    scheme.shape(rows, k).is_ok()
}

fn not_applicable_reason(scheme: Scheme, rows: usize, k: usize) -> String {
    if rows == 0 || k == 0 {
        format!("empty shape [{rows}, {k}]")
    } else {
        format!("K = {k} is not a multiple of the {}-element block of {scheme}", scheme.block_size())
    }
}

/// Quantizes `tensor` with `scheme` on the CPU (default options), dequantizes it to f32
/// and measures the error against the original values.
///
/// # Errors
/// [`CliError::Tensor`] if the values are not `rows * k` or the scheme cannot hold the
/// shape (see [`applicable`]); [`CliError::NonFinite`] for NaN or Inf in the weights.
pub fn evaluate(tensor: &EvalTensor<'_>, scheme: Scheme) -> Result<EvalRow, CliError> {
    let EvalTensor { source, name, rows, k, values } = tensor;
    let (rows, k) = (*rows, *k);
    if Some(values.len()) != rows.checked_mul(k) {
        return Err(CliError::tensor(
            source,
            name,
            format!("{} values do not make a [{rows}, {k}] matrix", values.len()),
        ));
    }
    if !applicable(scheme, rows, k) {
        return Err(CliError::tensor(source, name, not_applicable_reason(scheme, rows, k)));
    }
    let measured = match values {
        FloatValues::Bf16(v) => measure(v, rows, k, scheme),
        FloatValues::F16(v) => measure(v, rows, k, scheme),
        FloatValues::F32(v) => measure(v, rows, k, scheme),
    };
    let (m, bytes_out, quantize_s) = measured.map_err(|e| match e {
        CpuError::NonFinite { row, col, value } => {
            CliError::NonFinite { path: source.clone(), tensor: name.clone(), row, col, value }
        }
        e => CliError::tensor(source, name, format!("{scheme}: {e}")),
    })?;
    let len = values.len();
    let bytes_in = len * values.elem_bytes();
    Ok(EvalRow {
        tensor: name.clone(),
        scheme: scheme.name().to_owned(),
        rows,
        k,
        sqnr_db: m.sqnr_db,
        cosine: m.cosine,
        max_abs: m.max_abs,
        max_rel: m.max_rel,
        rmse: m.rmse,
        bytes_in,
        bytes_out,
        compression: bytes_in as f64 / bytes_out as f64,
        bits_per_weight: (bytes_out * 8) as f64 / len as f64,
        quantize_s,
    })
}

/// Quantize (timed), dequantize, compare: the metrics, the storage bytes and the seconds.
fn measure<T: blockscale::cpu::Input>(
    values: &[T],
    rows: usize,
    k: usize,
    scheme: Scheme,
) -> Result<(blockscale::ErrorMetrics, usize, f64), CpuError> {
    let reference = ArrayView2::from_shape((rows, k), values).expect("length checked against rows * k");
    let start = Instant::now();
    let q = blockscale::quantize(reference, scheme, &QuantizeOptions::default())?;
    let seconds = start.elapsed().as_secs_f64();
    let back = dequantize::<f32>(&q);
    Ok((error_metrics(reference, back.view())?, q.storage_bytes(), seconds))
}

/// Per-scheme totals over `rows`, schemes in the order given.
pub fn summarize(schemes: &[Scheme], rows: &[EvalRow]) -> Vec<SchemeSummary> {
    schemes
        .iter()
        .filter_map(|s| {
            let mine: Vec<&EvalRow> = rows.iter().filter(|r| r.scheme == s.name()).collect();
            if mine.is_empty() {
                return None;
            }
            let bytes_in: usize = mine.iter().map(|r| r.bytes_in).sum();
            let bytes_out: usize = mine.iter().map(|r| r.bytes_out).sum();
            let weights: usize = mine.iter().map(|r| r.rows * r.k).sum();
            Some(SchemeSummary {
                scheme: s.name().to_owned(),
                tensors: mine.len(),
                mean_sqnr_db: mine.iter().map(|r| r.sqnr_db).sum::<f64>() / mine.len() as f64,
                min_sqnr_db: mine.iter().map(|r| r.sqnr_db).fold(f64::INFINITY, f64::min),
                bytes_in,
                bytes_out,
                compression: bytes_in as f64 / bytes_out as f64,
                bits_per_weight: (bytes_out * 8) as f64 / weights as f64,
            })
        })
        .collect()
}

/// Evaluates tensors one at a time with every scheme asked, then reports. For callers
/// that cannot hand [`run_on`] an iterator (tensors borrowed from a map dropped between
/// shards): `new`, `add` each tensor, `finish`.
#[derive(Debug)]
pub struct Evaluator {
    schemes: Vec<Scheme>,
    json: bool,
    plot: Option<PathBuf>,
    force: bool,
    rows: Vec<EvalRow>,
    skipped: Vec<Skipped>,
    progress: ProgressBar,
}

impl Evaluator {
    /// Parses the schemes, refuses an existing plot file without `--force` before any
    /// work is done, and starts the progress bar (on stderr; hidden with `--quiet` or
    /// when stderr is not a terminal). `tensors` is how many tensors will be added,
    /// when known, for the bar's length.
    ///
    /// # Errors
    /// As [`parse_schemes`]; [`CliError::OutputExists`] for the plot file.
    pub fn new(args: &EvalArgs, tensors: Option<usize>) -> Result<Self, CliError> {
        let schemes = parse_schemes(&args.schemes)?;
        if let Some(p) = &args.plot
            && !args.force
            && p.exists()
        {
            return Err(CliError::OutputExists { path: p.clone() });
        }
        let progress = if args.quiet {
            ProgressBar::hidden()
        } else {
            let (bar, template) = match tensors {
                Some(n) => (
                    ProgressBar::new((n * schemes.len()) as u64),
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} (tensor, scheme) {wide_msg}",
                ),
                None => (ProgressBar::no_length(), "{spinner} [{elapsed_precise}] {pos} (tensor, scheme) {wide_msg}"),
            };
            // Cleared when dropped too: an error message then starts on a clean line.
            bar.with_style(ProgressStyle::with_template(template).expect("valid template"))
                .with_finish(ProgressFinish::AndClear)
        };
        Ok(Self {
            schemes,
            json: args.json,
            plot: args.plot.clone(),
            force: args.force,
            rows: vec![],
            skipped: vec![],
            progress,
        })
    }

    /// Evaluates one tensor with every scheme; schemes that cannot hold its shape are
    /// recorded as skipped.
    ///
    /// # Errors
    /// As [`evaluate`] (but for inapplicable schemes).
    pub fn add(&mut self, tensor: &EvalTensor<'_>) -> Result<(), CliError> {
        for &scheme in &self.schemes {
            self.progress.set_message(format!("{} {scheme}", tensor.name));
            if applicable(scheme, tensor.rows, tensor.k) {
                self.rows.push(evaluate(tensor, scheme)?);
            } else {
                self.skipped.push(Skipped {
                    tensor: tensor.name.clone(),
                    scheme: scheme.name().to_owned(),
                    rows: tensor.rows,
                    k: tensor.k,
                    reason: not_applicable_reason(scheme, tensor.rows, tensor.k),
                });
            }
            self.progress.inc(1);
        }
        Ok(())
    }

    /// Prints the table (or JSON) on stdout and writes the plot.
    ///
    /// # Errors
    /// [`CliError::Write`] if stdout or the plot cannot be written,
    /// [`CliError::OutputExists`] if the plot file appeared meanwhile.
    pub fn finish(self) -> Result<(), CliError> {
        let stdout = std::io::stdout();
        self.finish_to(&mut stdout.lock())
    }

    /// [`Self::finish`] printing to `out`.
    ///
    /// # Errors
    /// As [`Self::finish`].
    pub fn finish_to(self, out: &mut impl Write) -> Result<(), CliError> {
        self.progress.finish_and_clear();
        let summary = summarize(&self.schemes, &self.rows);
        let written = if self.json {
            let report = EvalReport { version: JSON_VERSION, rows: &self.rows, summary, skipped: &self.skipped };
            serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from).and_then(|()| writeln!(out))
        } else {
            write_table(out, &self.rows, &summary, &self.skipped)
        };
        match written.and_then(|()| out.flush()) {
            // The reader went away (`| head`): nothing left to tell it; not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(source) => return Err(CliError::Write { path: "<stdout>".into(), source }),
            Ok(()) => {}
        }
        if let Some(p) = &self.plot {
            crate::plot::write_svg(p, &self.rows, self.force)?;
        }
        Ok(())
    }
}

/// Evaluates every tensor with every scheme of `args.schemes` and reports as `args`
/// asks (table or `--json` on stdout, `--plot`). `tensors` is the number of tensors
/// the iterator will yield, if known (for the progress bar).
///
/// # Errors
/// The first error of the iterator or of [`Evaluator`].
pub fn run_on<'a>(
    tensors: impl IntoIterator<Item = Result<EvalTensor<'a>, CliError>>,
    args: &EvalArgs,
    count: Option<usize>,
) -> Result<(), CliError> {
    let mut eval = Evaluator::new(args, count)?;
    for t in tensors {
        eval.add(&t?)?;
    }
    eval.finish()
}

/// `blockscale eval`.
///
/// # Errors
/// As [`run_on`].
pub fn run(args: &EvalArgs) -> Result<(), CliError> {
    if args.demo {
        let demo = crate::demo::tensors();
        let count = demo.len();
        let tensors = demo.into_iter().map(|t| {
            Ok(EvalTensor {
                source: PathBuf::from("<demo>"),
                name: t.name,
                rows: t.rows,
                k: t.k,
                values: FloatValues::Bf16(t.values.into()),
            })
        });
        return run_on(tensors, args, Some(count));
    }
    let input = args.input.as_deref().ok_or_else(|| CliError::Usage("eval needs a checkpoint or --demo".into()))?;
    let ckpt = crate::checkpoint::Checkpoint::open(input)?;
    let shards = ckpt.shards.iter().map(|p| crate::checkpoint::Shard::open(p)).collect::<Result<Vec<_>, _>>()?;
    // The weights `quantize` would quantize (same defaults), in file order.
    let selector = crate::select::Selector::new(&args.include, &[], true)?;
    let selected: Vec<_> = shards
        .iter()
        .flat_map(|s| s.tensors().iter().map(move |t| (s, t)))
        .filter(|(_, t)| selector.skip_reason(t).is_none())
        .take(args.max_tensors.unwrap_or(usize::MAX))
        .collect();
    if selected.is_empty() {
        return Err(CliError::Checkpoint {
            path: input.to_owned(),
            reason: "no 2-D bf16/f16/f32 `.weight` tensors to evaluate (see --include)".into(),
        });
    }
    let mut ev = Evaluator::new(args, Some(selected.len()))?;
    for (shard, t) in selected {
        let values = FloatValues::from_le_bytes(t.dtype, shard.bytes(t)).expect("selected tensors are float");
        ev.add(&EvalTensor {
            source: shard.path().to_owned(),
            name: t.name.clone(),
            rows: t.shape[0],
            k: t.shape[1],
            values,
        })?;
        shard.release(t);
    }
    ev.finish()
}

fn write_table(
    out: &mut impl Write,
    rows: &[EvalRow],
    summary: &[SchemeSummary],
    skipped: &[Skipped],
) -> std::io::Result<()> {
    let tw = rows.iter().map(|r| r.tensor.len()).chain([6]).max().unwrap_or(6);
    let sw = Scheme::ALL.iter().map(|s| s.name().len()).max().unwrap_or(6);
    writeln!(
        out,
        "{:<tw$}  {:<sw$}  {:>8}  {:>9}  {:>9}  {:>9}  {:>6}  {:>11}  {:>8}",
        "tensor", "scheme", "SQNR dB", "cosine", "max abs", "max rel", "bits/w", "compression", "quant ms"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<tw$}  {:<sw$}  {:>8}  {:>9.6}  {:>9}  {:>9}  {:>6.3}  {:>10.2}x  {:>8.1}",
            r.tensor,
            r.scheme,
            db(r.sqnr_db),
            r.cosine,
            sig(r.max_abs),
            sig(r.max_rel),
            r.bits_per_weight,
            r.compression,
            r.quantize_s * 1e3
        )?;
    }
    if !summary.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<sw$}  {:>7}  {:>13}  {:>12}  {:>10}  {:>10}  {:>6}  {:>11}",
            "scheme", "tensors", "mean SQNR dB", "min SQNR dB", "MB in", "MB out", "bits/w", "compression"
        )?;
        for s in summary {
            writeln!(
                out,
                "{:<sw$}  {:>7}  {:>13}  {:>12}  {:>10.2}  {:>10.2}  {:>6.3}  {:>10.2}x",
                s.scheme,
                s.tensors,
                db(s.mean_sqnr_db),
                db(s.min_sqnr_db),
                s.bytes_in as f64 / 1e6,
                s.bytes_out as f64 / 1e6,
                s.bits_per_weight,
                s.compression
            )?;
        }
    }
    if !skipped.is_empty() {
        writeln!(out)?;
        writeln!(out, "skipped {} (tensor, scheme) pairs:", skipped.len())?;
        for s in skipped.iter().take(20) {
            writeln!(out, "  {} {}: {}", s.tensor, s.scheme, s.reason)?;
        }
        if skipped.len() > 20 {
            writeln!(out, "  ... and {} more (--json lists them all)", skipped.len() - 20)?;
        }
    }
    Ok(())
}

/// A dB value with two decimals, `inf` for an exact result.
fn db(x: f64) -> String {
    if x.is_finite() { format!("{x:.2}") } else { format!("{x}") }
}

/// About four significant digits in at most nine characters.
fn sig(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || !a.is_finite() {
        format!("{x}")
    } else if (1e-3..1e5).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn args(extra: &[&str]) -> EvalArgs {
        use clap::Parser;
        let argv = ["blockscale", "eval", "--demo", "--quiet"].into_iter().chain(extra.iter().copied());
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Eval(a) => a,
            _ => unreachable!(),
        }
    }

    fn tensor(rows: usize, k: usize, values: Vec<f32>) -> EvalTensor<'static> {
        EvalTensor {
            source: "t.safetensors".into(),
            name: "w".into(),
            rows,
            k,
            values: FloatValues::F32(values.into()),
        }
    }

    #[test]
    fn applicability_follows_the_block() {
        assert!(applicable(Scheme::NvFp4, 3, 16));
        assert!(!applicable(Scheme::MxFp4, 3, 16));
        assert!(!applicable(Scheme::Fp8Block(blockscale::Fp8Tile::Row1x128), 3, 64));
        assert!(applicable(Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128), 3, 128));
        assert!(!applicable(Scheme::NvFp4, 0, 16));
    }

    #[test]
    fn exactly_representable_values_are_exact() {
        // Powers of two and small integers times a power of two: exact in E2M1 once the
        // block scale is 1 (block amax 6), and in every wider element format too.
        let grid = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        let values: Vec<f32> = (0..4 * 128).map(|i| grid[i % 8] * if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let t = tensor(4, 128, values);
        // (Not FP8 block: its f32 scale amax / 448 is no power of two.)
        for scheme in [Scheme::MxFp4, Scheme::MxFp6E2M3, Scheme::MxFp6E3M2, Scheme::MxFp8E4M3, Scheme::MxFp8E5M2] {
            let r = evaluate(&t, scheme).unwrap();
            assert_eq!(r.sqnr_db, f64::INFINITY, "{scheme}");
            assert!((r.cosine - 1.0).abs() < 1e-12, "{scheme}");
            assert_eq!((r.max_abs, r.max_rel, r.rmse), (0.0, 0.0, 0.0), "{scheme}");
            assert_eq!((r.tensor.as_str(), r.scheme.as_str(), r.rows, r.k), ("w", scheme.name(), 4, 128));
            assert_eq!(r.bytes_in, 4 * 128 * 4);
        }
        // MXFP4: 4 x 128 / 2 element bytes + 4 x 4 UE8M0 scales.
        let r = evaluate(&t, Scheme::MxFp4).unwrap();
        assert_eq!(r.bytes_out, 256 + 16);
        assert_eq!(r.bits_per_weight, 4.25);
        assert_eq!(r.compression, 2048.0 / 272.0);
        // NVFP4: 256 element bytes + 4 x 8 UE4M3 scales + the f32 per-tensor scale.
        let r = evaluate(&t, Scheme::NvFp4).unwrap();
        assert_eq!(r.bytes_out, 256 + 32 + 4);
        assert!(r.quantize_s >= 0.0);
    }

    #[test]
    fn lossy_schemes_report_finite_errors() {
        let values: Vec<f32> = (0..8 * 64).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let t = tensor(8, 64, values);
        let nv = evaluate(&t, Scheme::NvFp4).unwrap();
        let mx8 = evaluate(&t, Scheme::MxFp8E4M3).unwrap();
        assert!(nv.sqnr_db.is_finite() && nv.sqnr_db > 10.0, "{nv:?}");
        assert!(mx8.sqnr_db > nv.sqnr_db + 10.0, "{mx8:?} vs {nv:?}");
        assert!(nv.max_abs > 0.0 && nv.cosine < 1.0 && nv.cosine > 0.9);
    }

    #[test]
    fn bad_shapes_and_non_finite_values_name_the_tensor() {
        let e = evaluate(&tensor(2, 48, vec![1.0; 96]), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::Tensor { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("t.safetensors") && msg.contains("\"w\"") && msg.contains("32"), "{msg}");
        assert!(msg.contains("K = 48"), "{msg}");

        let e = evaluate(&tensor(2, 32, vec![1.0; 63]), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::Tensor { .. }), "{e:?}");

        let mut v = vec![1.0; 64];
        v[40] = f32::NAN;
        let e = evaluate(&tensor(2, 32, v), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::NonFinite { row: 1, col: 8, .. }), "{e:?}");
    }

    #[test]
    fn bf16_and_f16_inputs_count_two_bytes() {
        let v: Vec<bf16> = (0..64).map(|i| bf16::from_f32(i as f32)).collect();
        let t =
            EvalTensor { source: "x".into(), name: "b".into(), rows: 2, k: 32, values: FloatValues::Bf16(v.into()) };
        let r = evaluate(&t, Scheme::MxFp8E5M2).unwrap();
        assert_eq!(r.bytes_in, 128);
        assert_eq!(r.bytes_out, 64 + 2);
    }

    #[test]
    fn json_writes_infinite_sqnr_as_null() {
        let t = tensor(1, 32, vec![1.0; 32]);
        let mut eval = Evaluator::new(&args(&["--json", "--schemes", "mxfp8-e4m3,nvfp4"]), Some(1)).unwrap();
        eval.add(&t).unwrap();
        eval.add(&EvalTensor { name: "odd".into(), k: 16, rows: 2, ..t.clone() }).unwrap();
        let mut out = Vec::new();
        eval.finish_to(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["version"], 1);
        let rows = v["rows"].as_array().unwrap();
        // w with both schemes, odd (K = 16) with NVFP4 only.
        assert_eq!(rows.len(), 3);
        assert!(rows[0]["sqnr_db"].is_null(), "{}", rows[0]);
        assert!((rows[0]["cosine"].as_f64().unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(v["summary"][0]["scheme"], "mxfp8-e4m3");
        assert!(v["summary"][0]["mean_sqnr_db"].is_null());
        assert!(v["summary"][0]["min_sqnr_db"].is_null());
        assert_eq!(v["summary"][1]["tensors"], 2);
        assert_eq!(v["skipped"][0]["tensor"], "odd");
        assert_eq!(v["skipped"][0]["scheme"], "mxfp8-e4m3");
        // Nothing JSON cannot parse (Infinity, NaN) in the text.
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
    }

    #[test]
    fn table_lists_every_row_then_the_summary() {
        let t = tensor(2, 64, (0..128).map(|i| (i as f32 - 60.0) / 9.0).collect());
        let mut eval = Evaluator::new(&args(&["--schemes", "nvfp4,int4-g32"]), None).unwrap();
        eval.add(&t).unwrap();
        let mut out = Vec::new();
        eval.finish_to(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("tensor") && lines[0].contains("SQNR dB") && lines[0].contains("bits/w"));
        assert!(lines[1].starts_with("w ") && lines[1].contains("nvfp4"));
        assert!(lines[2].contains("int4-g32"));
        assert!(lines[4].starts_with("scheme") && lines[4].contains("mean SQNR dB"));
        assert!(lines[5].starts_with("nvfp4"));
        assert_eq!(lines.len(), 7);
    }

    #[test]
    fn an_existing_plot_is_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let plot = dir.path().join("p.svg");
        std::fs::write(&plot, "keep").unwrap();
        let p = plot.to_str().unwrap();
        let e = Evaluator::new(&args(&["--plot", p]), None).unwrap_err();
        assert!(matches!(e, CliError::OutputExists { .. }), "{e:?}");
        assert!(Evaluator::new(&args(&["--plot", p, "--force"]), None).is_ok());
        assert_eq!(std::fs::read_to_string(&plot).unwrap(), "keep");
    }

    #[test]
    fn number_formats() {
        assert_eq!(db(f64::INFINITY), "inf");
        assert_eq!(db(12.3456), "12.35");
        assert_eq!(sig(0.0), "0");
        assert_eq!(sig(1.0), "1.000");
        assert_eq!(sig(0.0125), "0.01250");
        assert_eq!(sig(123.456), "123.5");
        assert_eq!(sig(1.5e-5), "1.50e-5");
    }
}
