//! What a reader refuses rather than pass on: low-precision tensors that no convention
//! explains, and a declared quantization of which no weight was found. Either would
//! hand back quantized bytes to a user who asked for floats (a ModelOpt FP8 checkpoint
//! once came back unchanged, "dequantized 0 weights").

use std::collections::HashSet;

use safetensors::Dtype;

use super::supported;
use crate::{Catalog, CheckpointError, Declared, Found};

/// Dtypes that only quantized weights and their scales use.
fn low_precision(d: Dtype) -> bool {
    matches!(d, Dtype::F8_E4M3 | Dtype::F8_E5M2 | Dtype::F8_E8M0 | Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2)
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
        && let Some((source, v)) = declared.first()
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
