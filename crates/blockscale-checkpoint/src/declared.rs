//! What a checkpoint declares about its quantization (config.json's
//! `quantization_config`, ModelOpt's hf_quant_config.json, the same keys in a file's
//! metadata), and what a reader refuses rather than pass on: low-precision tensors that
//! no convention explains, and a declared quantization of which no weight was found.
//! Either would hand back quantized bytes to a user who asked for floats (a ModelOpt FP8
//! checkpoint once came back unchanged, "dequantized 0 weights").

use std::collections::HashSet;
use std::path::Path;

use safetensors::Dtype;

use crate::CheckpointError;
use crate::convention::{CtConfig, supported};
use crate::{Catalog, Found};

/// Dtypes that only quantized weights and their scales use.
fn low_precision(d: Dtype) -> bool {
    matches!(d, Dtype::F8_E4M3 | Dtype::F8_E5M2 | Dtype::F8_E8M0 | Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2)
}

/// The quantization a checkpoint declares, read once: `quantization_config` of the
/// folder's config.json, ModelOpt's hf_quant_config.json, and those keys of a file's
/// metadata.
pub struct Declared {
    /// config.json's `quantization_config` object, else the metadata's, with where it
    /// was found.
    quantization_config: Option<serde_json::Value>,
    /// Where `quantization_config` comes from, for messages.
    source: &'static str,
    /// The first declaration of any kind, in the order above: `(where, what)`.
    first: Option<(String, serde_json::Value)>,
}

impl Declared {
    /// Reads the declarations of `catalog`'s shards and the folder's `side_files`.
    pub fn read(catalog: &Catalog<'_>, side_files: &[std::path::PathBuf]) -> Self {
        let file = |name: &str| side_files.iter().find(|p| p.file_name().is_some_and(|n| n == name));
        let meta = |key: &str| -> Option<serde_json::Value> { serde_json::from_str(catalog.meta(key)?).ok() };
        let config_qc = file("config.json")
            .and_then(|p| read_json(p)?.get("quantization_config").filter(|v| !v.is_null()).cloned());
        let hf = file("hf_quant_config.json").and_then(|p| read_json(p)).filter(|v| !v.is_null());
        let meta_qc = meta("quantization_config");
        let first = [
            ("config.json".to_owned(), config_qc.clone()),
            ("hf_quant_config.json".to_owned(), hf),
            ("the safetensors metadata key \"quantization_config\"".to_owned(), meta_qc.clone()),
            ("the safetensors metadata key \"hf_quant_config\"".to_owned(), meta("hf_quant_config")),
        ]
        .into_iter()
        .find_map(|(source, v)| Some((source, v?)));
        let (quantization_config, source) = match config_qc.filter(|v| v.is_object()) {
            Some(qc) => (Some(qc), "config.json"),
            None => (meta_qc, "the safetensors metadata key \"quantization_config\""),
        };
        Self { quantization_config, source, first }
    }

    /// The `quantization_config` declared (config.json's, else a file's metadata's).
    pub fn quantization_config(&self) -> Option<&serde_json::Value> {
        self.quantization_config.as_ref()
    }

    /// The declared compressed-tensors config, checked (`None` for another or none).
    ///
    /// # Errors
    /// [`CheckpointError::Unsupported`] for a format or weight arguments blockscale does not
    /// read (see [`CtConfig::parse`]).
    pub fn compressed_tensors(&self) -> Result<Option<CtConfig>, CheckpointError> {
        match &self.quantization_config {
            Some(qc) => CtConfig::parse(qc, self.source),
            None => Ok(None),
        }
    }
}

/// A declaration in a few words: its `quant_method`, `format`, `quant_algo` or
/// ModelOpt's `quantization.quant_algo`, else the start of its JSON.
fn describe(v: &serde_json::Value) -> String {
    let keys = ["quant_method", "format", "quant_algo", "quantization"];
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            v.get(k).map(|x| format!("{k}: {}", if x.is_object() { describe_short(x) } else { x.to_string() }))
        })
        .collect();
    if parts.is_empty() { v.to_string().chars().take(120).collect() } else { parts.join(", ") }
}

fn describe_short(v: &serde_json::Value) -> String {
    v.get("quant_algo").map_or_else(|| "{...}".into(), |a| format!("{{quant_algo: {a}}}"))
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Refuses a checkpoint `dequantize` would return partly quantized.
///
/// # Errors
/// [`CheckpointError::Unsupported`] naming the first low-precision tensor no convention
/// explains, or the declared quantization when no quantized weight was found.
pub fn check_coverage(
    catalog: &Catalog<'_>,
    found: &[Found],
    consumed: &HashSet<String>,
    declared: &Declared,
) -> Result<(), CheckpointError> {
    for shard in catalog.shards() {
        if let Some(t) = shard.tensors().iter().find(|t| low_precision(t.dtype) && !consumed.contains(&t.name)) {
            return Err(CheckpointError::Unsupported(format!(
                "{}: tensor {:?} is {:?} {:?}, and no convention blockscale reads explains it (supported: {}); \
                 nothing was written",
                shard.path().display(),
                t.name,
                t.dtype,
                t.shape,
                supported()
            )));
        }
    }
    if found.is_empty()
        && let Some((source, v)) = &declared.first
    {
        return Err(CheckpointError::Unsupported(format!(
            "{source} declares a quantization ({}), but no weight of a convention blockscale reads was found \
             (supported: {}); nothing was written",
            describe(v),
            supported()
        )));
    }
    Ok(())
}
