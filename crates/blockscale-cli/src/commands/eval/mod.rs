//! `blockscale eval`: the accuracy and size of every scheme on a set of weights
//! (a checkpoint's, or the built-in demo layer's), as a table, JSON, and an SVG plot.
//!
//! [`compute`] measures each (tensor, scheme) pair and totals each scheme; [`report`]
//! prints the table or the JSON document; [`crate::plot`] draws `--plot`. This module
//! ties them together and finds the tensors.
//!
//! Where the tensors come from is not the evaluation's business: [`run_on`] takes any
//! iterator of [`EvalTensor`]s, and [`Evaluator`] takes them one at a time for callers
//! whose tensors borrow from a memory map that lives shorter than the whole run.

mod compute;
mod report;

use std::io::Write;
use std::path::PathBuf;

use blockscale::Scheme;
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

pub use compute::EvalTensor;
use compute::{Skipped, applicable, evaluate, summarize};
use report::write_report;

use crate::cli::EvalArgs;
use crate::error::CliError;
use blockscale::checkpoint::CheckpointError;
use crate::report::EvalRow;
use crate::scheme_arg::parse_schemes;
use crate::values::FloatValues;

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
    /// As [`parse_schemes`]; [`CheckpointError::OutputExists`](blockscale::checkpoint::CheckpointError::OutputExists) for the plot file.
    pub fn new(args: &EvalArgs, tensors: Option<usize>) -> Result<Self, CliError> {
        let schemes = parse_schemes(&args.schemes)?;
        if let Some(p) = &args.plot
            && !args.force
            && p.exists()
        {
            return Err(CliError::from(CheckpointError::OutputExists { path: p.clone() }));
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
                self.skipped.push(Skipped::new(tensor, scheme));
            }
            self.progress.inc(1);
        }
        Ok(())
    }

    /// Prints the table (or JSON) on stdout and writes the plot.
    ///
    /// # Errors
    /// [`CheckpointError::Write`](blockscale::checkpoint::CheckpointError::Write) if stdout or the plot cannot be written,
    /// [`CheckpointError::OutputExists`](blockscale::checkpoint::CheckpointError::OutputExists) if the plot file appeared meanwhile.
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
        write_report(out, self.json, &self.rows, summary, &self.skipped)?;
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
    let ckpt = blockscale::checkpoint::Checkpoint::open(input)?;
    let shards = ckpt.open_shards()?;
    // The weights `quantize` would quantize (same defaults), in file order.
    let selector = crate::select::Selector::new(&args.include, &[], true)?;
    let selected: Vec<_> = shards
        .iter()
        .flat_map(|s| s.tensors().iter().map(move |t| (s, t)))
        .filter(|(_, t)| selector.skip_reason(t).is_none())
        .take(args.max_tensors.unwrap_or(usize::MAX))
        .collect();
    if selected.is_empty() {
        return Err(CheckpointError::Checkpoint {
            path: input.to_owned(),
            reason: "no 2-D bf16/f16/f32 `.weight` tensors to evaluate (see --include)".into(),
        }
        .into());
    }
    let mut ev = Evaluator::new(args, Some(selected.len()))?;
    for (shard, t) in selected {
        let values = crate::values::from_le_bytes(t.dtype, shard.bytes(t)).expect("selected tensors are float");
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

#[cfg(test)]
mod tests {
    use super::compute::tests::tensor;
    use super::*;

    fn args(extra: &[&str]) -> EvalArgs {
        use clap::Parser;
        let argv = ["blockscale", "eval", "--demo", "--quiet"].into_iter().chain(extra.iter().copied());
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Eval(a) => a,
            _ => unreachable!(),
        }
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
        assert!(matches!(e, CliError::Checkpoint(CheckpointError::OutputExists { .. })), "{e:?}");
        assert!(Evaluator::new(&args(&["--plot", p, "--force"]), None).is_ok());
        assert_eq!(std::fs::read_to_string(&plot).unwrap(), "keep");
    }
}
