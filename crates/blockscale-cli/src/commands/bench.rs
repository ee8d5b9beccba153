//! `blockscale bench`: quantize, dequantize, GEMM and GEMV throughput on a standard
//! shape set, each case beside an anchor measured in the same run (a memcpy of the same
//! bytes, or the dequantize-to-f32 + ndarray product a user would otherwise write), so
//! that the ratios stay meaningful on a busy or unfamiliar machine.
//!
//! Timing: one warm-up call, then the best of at least `min_runs` calls, more while the
//! case's time budget lasts (see [`Budget`]).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;

use std::io::IsTerminal;
use std::time::Instant;

use blockscale::rng::SplitMix64;
use serde::Serialize;

use crate::cli::{BackendArg, BenchArgs};
use crate::error::CliError;

/// Runs the benchmark and prints its table (or JSON document) on stdout.
pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    let report = match args.backend {
        BackendArg::Cpu => cpu::run(args.quick)?,
        BackendArg::Cuda => run_cuda(args.quick)?,
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        report.print_table();
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn run_cuda(quick: bool) -> Result<Report, CliError> {
    cuda::run(quick)
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_quick: bool) -> Result<Report, CliError> {
    Err(CliError::Unsupported(
        "this blockscale was built without the CUDA backend; rebuild it with `--features cuda` \
         (e.g. `cargo install --path crates/blockscale-cli --features cuda`, which needs nvcc) \
         to run `bench --backend cuda`"
            .into(),
    ))
}

/// How long to measure one case.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// Timed calls at least (after the warm-up).
    pub min_runs: usize,
    /// Keep timing while less than this many seconds have been spent on the case...
    pub seconds: f64,
    /// ...but never more than this many calls.
    pub max_runs: usize,
}

impl Budget {
    /// The full run: best of at least 5 calls or 0.3 s.
    pub const FULL: Self = Self { min_runs: 5, seconds: 0.3, max_runs: 1000 };
    /// `--quick`: best of at least 3 calls or 20 ms.
    pub const QUICK: Self = Self { min_runs: 3, seconds: 0.02, max_runs: 200 };

    /// The budget of a full or `--quick` run.
    pub fn new(quick: bool) -> Self {
        if quick { Self::QUICK } else { Self::FULL }
    }

    /// Whether another call should be timed after `runs` calls taking `spent` seconds.
    fn more(&self, runs: usize, spent: f64) -> bool {
        runs < self.min_runs || (spent < self.seconds && runs < self.max_runs)
    }
}

/// The best wall-clock time of `f` in seconds: one warm-up call (page faults of
/// preallocated outputs, thread pool start, caches), then timed calls as `budget` allows.
pub(crate) fn best_of(budget: Budget, mut f: impl FnMut() -> Result<(), CliError>) -> Result<f64, CliError> {
    f()?;
    let start = Instant::now();
    let (mut best, mut runs) = (f64::INFINITY, 0);
    while budget.more(runs, start.elapsed().as_secs_f64()) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    // A clock that did not advance would make the throughput infinite.
    Ok(best.max(1e-9))
}

/// One measured case, beside its anchor.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    /// What was timed.
    pub name: String,
    /// Best time per call.
    pub seconds: f64,
    /// Work per second, in `unit`.
    pub throughput: f64,
    /// `G elem/s` or `GFLOP/s`.
    pub unit: &'static str,
    /// GB/s of the bf16 matrix (read by quantize, written by dequantize), where that
    /// means something.
    pub gb_per_s: Option<f64>,
    /// The anchor's description.
    pub anchor: String,
    /// The anchor's best time for the same work.
    pub anchor_seconds: f64,
    /// The anchor's rate for the same work, in `unit`.
    pub anchor_throughput: f64,
    /// `anchor_seconds / seconds`: above 1 the case is faster than its anchor.
    pub ratio: f64,
}

/// What a case's throughput counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Work {
    /// Matrix elements (quantize, dequantize): `G elem/s`.
    Elements(f64),
    /// Floating-point operations (2 per multiply-add): `GFLOP/s`.
    Flops(f64),
}

impl Work {
    fn amount(self) -> f64 {
        match self {
            Self::Elements(n) | Self::Flops(n) => n,
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Self::Elements(_) => "G elem/s",
            Self::Flops(_) => "GFLOP/s",
        }
    }
}

/// A measured anchor: its description and best time.
#[derive(Clone, Debug)]
pub(crate) struct Anchor {
    /// What was timed.
    pub name: String,
    /// Best time per call.
    pub seconds: f64,
}

impl Anchor {
    /// `name`, timed as the best of `f`'s calls within `budget` ([`best_of`]).
    pub fn timed(name: &str, budget: Budget, f: impl FnMut() -> Result<(), CliError>) -> Result<Self, CliError> {
        Ok(Self { name: name.into(), seconds: best_of(budget, f)? })
    }
}

impl Case {
    /// A case doing `work` in `seconds`, against `anchor` doing the same work;
    /// `bytes`: the bf16 matrix bytes behind `gb_per_s`, if any.
    pub fn new(name: impl Into<String>, seconds: f64, work: Work, bytes: Option<f64>, anchor: &Anchor) -> Self {
        let rate = |s: f64| work.amount() / s / 1e9;
        Self {
            name: name.into(),
            seconds,
            throughput: rate(seconds),
            unit: work.unit(),
            gb_per_s: bytes.map(|b| b / seconds / 1e9),
            anchor: anchor.name.clone(),
            anchor_seconds: anchor.seconds,
            anchor_throughput: rate(anchor.seconds),
            ratio: anchor.seconds / seconds,
        }
    }
}

/// The machine a benchmark ran on.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Machine {
    /// The CPU as /proc/cpuinfo names it (null where unreadable).
    pub cpu: Option<String>,
    /// rayon's thread count (what blockscale's parallel kernels use).
    pub threads: usize,
    /// `std::env::consts::OS`.
    pub os: &'static str,
    /// `std::env::consts::ARCH`.
    pub arch: &'static str,
    /// Whether the AVX2 kernels can run.
    pub avx2: bool,
    /// Whether the AVX-512 (F, BW, BF16) kernels can run.
    pub avx512: bool,
    /// The GPU of a CUDA run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
}

/// The GPU of a CUDA run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Gpu {
    /// The device name.
    pub name: String,
    /// blockscale's kernel tier for it.
    pub arch: String,
    /// Streaming multiprocessors.
    pub sms: u32,
}

/// A finished benchmark.
#[derive(Debug)]
pub(crate) struct Report {
    /// `cpu` or `cuda`.
    pub backend: &'static str,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// The machine.
    pub machine: Machine,
    /// One line per setting worth printing above the table (shapes, threads, timing).
    pub setup: Vec<String>,
    /// The cases, in the order they ran.
    pub cases: Vec<Case>,
}

/// A number for JSON: NaN and infinities become null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The `--json` document, fields in the order a reader expects them.
#[derive(Serialize)]
struct JsonReport<'a> {
    version: u32,
    backend: &'a str,
    quick: bool,
    machine: &'a Machine,
    setup: &'a [String],
    cases: Vec<JsonCase<'a>>,
}

/// One case of the `--json` document.
#[derive(Serialize)]
struct JsonCase<'a> {
    name: &'a str,
    seconds: Option<f64>,
    throughput: Option<f64>,
    unit: &'a str,
    gb_per_s: Option<f64>,
    anchor: &'a str,
    anchor_seconds: Option<f64>,
    anchor_throughput: Option<f64>,
    ratio: Option<f64>,
}

impl Report {
    /// The `--json` document (`version` 1).
    pub fn to_json(&self) -> String {
        let doc = JsonReport {
            version: 1,
            backend: self.backend,
            quick: self.quick,
            machine: &self.machine,
            setup: &self.setup,
            cases: self
                .cases
                .iter()
                .map(|c| JsonCase {
                    name: &c.name,
                    seconds: finite(c.seconds),
                    throughput: finite(c.throughput),
                    unit: c.unit,
                    gb_per_s: c.gb_per_s.and_then(finite),
                    anchor: &c.anchor,
                    anchor_seconds: finite(c.anchor_seconds),
                    anchor_throughput: finite(c.anchor_throughput),
                    ratio: finite(c.ratio),
                })
                .collect(),
        };
        serde_json::to_string_pretty(&doc).expect("the report serializes (no maps with non-string keys)")
    }

    /// The human-readable table.
    pub fn print_table(&self) {
        println!("blockscale bench --backend {}{}", self.backend, if self.quick { " --quick" } else { "" });
        for line in &self.setup {
            println!("  {line}");
        }
        println!();
        let name_w = self.cases.iter().map(|c| c.name.chars().count()).max().unwrap_or(4).max(4);
        let anchor_w = self.cases.iter().map(|c| c.anchor.chars().count()).max().unwrap_or(6).max(6);
        println!(
            "{:<name_w$}  {:>10}  {:>18}  {:>7}  {:<anchor_w$}  {:>11}  {:>11}  {:>7}",
            "case", "time", "throughput", "GB/s", "anchor", "anchor time", "anchor rate", "ratio"
        );
        for c in &self.cases {
            println!(
                "{:<name_w$}  {:>10}  {:>18}  {:>7}  {:<anchor_w$}  {:>11}  {:>11}  {:>7}",
                c.name,
                duration(c.seconds),
                format!("{} {}", rate(c.throughput), c.unit),
                c.gb_per_s.map_or(String::new(), |g| format!("{g:.2}")),
                c.anchor,
                duration(c.anchor_seconds),
                rate(c.anchor_throughput),
                format!("{:.2}x", c.ratio),
            );
        }
        println!();
        println!("anchor rate: the anchor's rate for the same work, in the case's unit.");
        println!("ratio: the anchor's time over the case's for the same work (above 1: faster than the anchor).");
        println!("GB/s: bytes of the bf16 matrix read (quantize) or written (dequantize) per second.");
    }
}

/// A time with a unit that keeps three or four significant digits.
fn duration(s: f64) -> String {
    if !s.is_finite() {
        "-".into()
    } else if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// A rate with three significant digits or so.
fn rate(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x < 10.0 {
        format!("{x:.3}")
    } else if x < 1000.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// Progress on stderr, when it is a terminal (stdout stays the table or the JSON).
pub(crate) struct Progress {
    on: bool,
    total: usize,
    done: usize,
}

impl Progress {
    /// Progress over `total` timed items.
    pub fn new(total: usize) -> Self {
        Self { on: std::io::stderr().is_terminal(), total, done: 0 }
    }

    /// Announces the next item.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        if self.on {
            eprint!("\r\x1b[2K[{}/{}] {what}", self.done, self.total);
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
        }
    }
}

/// The CPU as /proc/cpuinfo names it, rayon's thread count, and the SIMD paths the
/// kernels may take.
pub(crate) fn cpu_machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    Machine {
        cpu,
        threads: rayon::current_num_threads(),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        avx2: blockscale::cpu::avx2_available(),
        avx512: blockscale::cpu::avx512_available(),
        gpu: None,
    }
}

/// Seeded bell-shaped values (the sum of two uniforms, in (-1, 1)) with one value in
/// 1024 scaled by 20: weights with rare outliers, reproducible across runs.
pub(crate) fn values(n: usize, seed: u64) -> impl Iterator<Item = f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(move |_| {
        let s = rng.next_u64();
        let a = (s >> 40) as f32;
        let b = ((s >> 16) & 0xff_ffff) as f32;
        let v = (a + b) / (1u64 << 24) as f32 - 1.0;
        if (s >> 6) & 1023 == 0 { v * 20.0 } else { v }
    })
}

/// The amax [`values`] never exceed (the NVFP4 "given global scale" cases use it).
pub(crate) const VALUES_AMAX: f32 = 20.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_bounded_and_reproducible() {
        let a: Vec<f32> = values(100_000, 7).collect();
        assert!(a.iter().all(|v| v.abs() <= VALUES_AMAX));
        assert!(a.iter().any(|v| v.abs() > 1.0), "some outliers");
        assert_eq!(a, values(100_000, 7).collect::<Vec<_>>());
    }

    #[test]
    fn non_finite_numbers_are_null() {
        let anchor = Anchor { name: "memcpy".into(), seconds: f64::NAN };
        let report = Report {
            backend: "cpu",
            quick: true,
            machine: cpu_machine(),
            setup: vec![],
            cases: vec![Case::new("x", 1.0, Work::Elements(1e9), None, &anchor)],
        };
        let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(v["version"], 1);
        assert!(v["cases"][0]["ratio"].is_null());
        assert!(v["cases"][0]["anchor_throughput"].is_null());
        assert!(v["cases"][0]["gb_per_s"].is_null());
        assert_eq!(v["cases"][0]["throughput"], 1.0);
        assert!(v["machine"].get("gpu").is_none());
    }

    #[test]
    fn budget_runs_at_least_min_runs() {
        let mut calls = 0;
        let t = best_of(Budget { min_runs: 4, seconds: 0.0, max_runs: 4 }, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 5, "one warm-up and four timed calls");
        assert!(t > 0.0);
    }

    #[test]
    fn ratio_is_anchor_time_over_case_time() {
        let anchor = Anchor { name: "memcpy".into(), seconds: 2.0 };
        let c = Case::new("x", 4.0, Work::Elements(8e9), Some(16e9), &anchor);
        assert_eq!(c.ratio, 0.5);
        assert_eq!(c.throughput, 2.0);
        assert_eq!(c.anchor_throughput, 4.0);
        assert_eq!(c.gb_per_s, Some(4.0));
    }
}
