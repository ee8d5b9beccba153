//! The `quantize` report: what was quantized and copied, sizes and speed, printed as
//! text or as the `--json` document (its field names are part of the stable JSON
//! interface, docs/CLI.md).

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

/// One quantized weight in the report.
#[derive(Debug, Serialize)]
pub struct QuantizedEntry {
    /// The input tensor.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: String,
    /// The output tensors.
    pub outputs: Vec<String>,
    /// Input bytes.
    pub bytes_in: usize,
    /// Output bytes.
    pub bytes_out: usize,
    /// Blocks stored as NaN because they held NaN/Inf (`--non-finite poison`).
    pub poisoned_blocks: usize,
}

/// A tensor copied unchanged, and why.
#[derive(Debug, Serialize)]
pub struct SkippedEntry {
    /// The tensor.
    pub name: String,
    /// Why it was not quantized.
    pub reason: String,
}

/// The `quantize` report (`--json`).
#[derive(Debug, Serialize)]
pub struct QuantizeReport {
    /// Report format version.
    pub version: u32,
    /// The input path.
    pub input: PathBuf,
    /// The output path.
    pub output: PathBuf,
    /// The scheme.
    pub scheme: String,
    /// The output convention.
    pub convention: String,
    /// The backend.
    pub backend: String,
    /// Quantized weights.
    pub quantized: Vec<QuantizedEntry>,
    /// Tensors copied unchanged.
    pub skipped: Vec<SkippedEntry>,
    /// Calibration entries that matched no quantized layer.
    pub unused_calibration: Vec<String>,
    /// Bytes of every input shard.
    pub bytes_in: u64,
    /// Bytes of every output shard.
    pub bytes_out: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Input bytes per second, GB/s.
    pub throughput_gb_s: f64,
}

impl QuantizeReport {
    /// Prints the report on stdout: as JSON with `json`, else as a few lines of text.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(self).expect("the report serializes"));
        } else {
            self.print_text();
        }
    }

    fn print_text(&self) {
        let r = self;
        let gb = |b: u64| b as f64 / 1e9;
        println!(
            "quantized {} weights to {} ({} convention, {} backend); copied {} tensors unchanged",
            r.quantized.len(),
            r.scheme,
            r.convention,
            r.backend,
            r.skipped.len()
        );
        let mut reasons: HashMap<&str, Vec<&str>> = HashMap::new();
        for s in &r.skipped {
            reasons.entry(s.reason.as_str()).or_default().push(&s.name);
        }
        let mut reasons: Vec<_> = reasons.into_iter().collect();
        reasons.sort();
        for (reason, names) in reasons {
            let more = if names.len() > 3 { format!(", ... ({} more)", names.len() - 3) } else { String::new() };
            println!("  copied, {reason}: {}{more}", names.iter().take(3).copied().collect::<Vec<_>>().join(", "));
        }
        if !r.unused_calibration.is_empty() {
            println!("  calibration entries matching no quantized layer: {}", r.unused_calibration.join(", "));
        }
        let poisoned: usize = r.quantized.iter().map(|q| q.poisoned_blocks).sum();
        if poisoned > 0 {
            println!("  {poisoned} blocks held NaN/Inf and are stored as NaN blocks");
        }
        println!(
            "{:.3} GB -> {:.3} GB ({:.2}x) in {:.2} s ({:.2} GB/s); wrote {}",
            gb(r.bytes_in),
            gb(r.bytes_out),
            r.bytes_in as f64 / r.bytes_out.max(1) as f64,
            r.seconds,
            r.throughput_gb_s,
            r.output.display()
        );
    }
}
