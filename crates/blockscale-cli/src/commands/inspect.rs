//! `blockscale inspect`: every tensor with its dtype, shape, detected convention, bits
//! per weight and size.

use std::path::PathBuf;

use serde::Serialize;

use blockscale::checkpoint::Checkpoint;
use crate::cli::InspectArgs;
use blockscale::checkpoint::{Catalog, Declared, Found, detect};
use crate::error::CliError;

/// One tensor in the listing.
#[derive(Debug, Serialize)]
pub struct InspectEntry {
    /// Name.
    pub name: String,
    /// The file holding it.
    pub file: String,
    /// Dtype.
    pub dtype: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Bytes.
    pub bytes: usize,
    /// The convention it belongs to (`plain` for ordinary tensors).
    pub convention: &'static str,
    /// For a quantized weight's data tensor: the weight's dequantized name.
    pub weight: Option<String>,
    /// For a quantized weight's data tensor: its scheme.
    pub scheme: Option<String>,
    /// For a quantized weight's data tensor: the logical `[rows, k]`.
    pub logical_shape: Option<[usize; 2]>,
    /// For a quantized weight's data tensor: storage bits per weight, scales included.
    pub bits_per_weight: Option<f64>,
}

/// The `inspect` report (`--json`).
#[derive(Debug, Serialize)]
pub struct InspectReport {
    /// Report format version.
    pub version: u32,
    /// The path inspected.
    pub input: PathBuf,
    /// Shards.
    pub files: Vec<String>,
    /// Every tensor, in file order.
    pub tensors: Vec<InspectEntry>,
    /// Quantized weights per convention.
    pub conventions: std::collections::BTreeMap<String, usize>,
    /// Bytes of all tensors.
    pub total_bytes: u64,
}

/// Runs `inspect`.
///
/// # Errors
/// Unreadable input or quantized weights whose parts do not fit.
pub fn run(args: &InspectArgs) -> Result<(), CliError> {
    let ckpt = Checkpoint::open(&args.input)?;
    let shards = ckpt.open_shards()?;
    let catalog = Catalog::new(&shards)?;
    let declared = Declared::read(&catalog, &ckpt.others);
    let (found, _) = detect(&catalog, &declared)?;
    let mut tensors = Vec::new();
    let mut conventions = std::collections::BTreeMap::new();
    for f in &found {
        *conventions.entry(f.convention.to_owned()).or_insert(0) += 1;
    }
    // Each tensor's quantized weight, if any (one lookup per tensor: checkpoints hold
    // tens of thousands of expert weights).
    let owners: std::collections::HashMap<&str, &Found> =
        found.iter().flat_map(|f| f.parts.iter().map(move |p| (p.as_str(), f))).collect();
    for s in &shards {
        for t in s.tensors() {
            let owner = owners.get(t.name.as_str()).copied();
            let main = owner.filter(|f| f.main == t.name);
            tensors.push(InspectEntry {
                name: t.name.clone(),
                file: Checkpoint::file_name(s.path()),
                dtype: format!("{:?}", t.dtype),
                shape: t.shape.clone(),
                bytes: t.nbytes(),
                convention: owner.map_or("plain", |f| f.convention),
                weight: main.map(|f| f.output.clone()),
                scheme: main.map(|f| f.format.clone()),
                logical_shape: main.map(|f| [f.rows, f.k]),
                bits_per_weight: main.map(|f| f.bits_per_weight(&catalog)),
            });
        }
    }
    let report = InspectReport {
        version: 1,
        input: args.input.clone(),
        files: shards.iter().map(|s| Checkpoint::file_name(s.path())).collect(),
        total_bytes: tensors.iter().map(|t| t.bytes as u64).sum(),
        tensors,
        conventions,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serializes"));
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &InspectReport) {
    let w = r.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4).max(6);
    println!(
        "{:<w$}  {:<8}  {:<22}  {:<18}  {:<13}  {:>6}  {:>12}",
        "tensor", "dtype", "shape", "convention", "scheme", "bits/w", "bytes"
    );
    for t in &r.tensors {
        let shape = format!("{:?}", t.shape);
        let bits = t.bits_per_weight.map_or(String::new(), |b| format!("{b:.3}"));
        println!(
            "{:<w$}  {:<8}  {:<22}  {:<18}  {:<13}  {:>6}  {:>12}",
            t.name,
            t.dtype,
            shape,
            t.convention,
            t.scheme.as_deref().unwrap_or(""),
            bits,
            t.bytes
        );
    }
    let conv: Vec<String> = r.conventions.iter().map(|(c, n)| format!("{n} {c}")).collect();
    println!(
        "{} tensors in {} file(s), {:.3} GB; quantized weights: {}",
        r.tensors.len(),
        r.files.len(),
        r.total_bytes as f64 / 1e9,
        if conv.is_empty() { "none".to_owned() } else { conv.join(", ") }
    );
}
