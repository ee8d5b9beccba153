//! What `dequantize` refuses rather than copy: low-precision tensors that no convention
//! it reads explains, and a checkpoint whose config declares a quantization of which it
//! found no weight. Either would hand back quantized bytes to a user who asked for
//! floats (a ModelOpt FP8 checkpoint once came back unchanged, "dequantized 0 weights").

use std::collections::HashSet;
use std::path::Path;

use safetensors::Dtype;

use super::{Catalog, CtConfig, Found};
use crate::error::CliError;

/// What `dequantize` and `inspect` read, for messages.
pub const SUPPORTED: &str = "native (blockscale), ModelOpt NVFP4 and FP8 per tensor, compressed-tensors \
                             nvfp4-pack-quantized, mxfp4-pack-quantized, pack-quantized (INT4) and \
                             float-quantized (FP8), gpt-oss MXFP4, DeepSeek-V3 FP8 (128x128 weight_scale_inv)";

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

    /// The declared compressed-tensors config, checked (`None` for another or none).
    ///
    /// # Errors
    /// [`CliError::Unsupported`] for a format or weight arguments blockscale does not
    /// read (see [`CtConfig::parse`]).
    pub fn compressed_tensors(&self) -> Result<Option<CtConfig>, CliError> {
        match &self.quantization_config {
            Some(qc) => CtConfig::parse(qc, self.source),
            None => Ok(None),
        }
    }
}

/// Checks what a `quant_method: "fp8"` config (DeepSeek-V3/R1, Qwen3 FP8) says against
/// the FP8 block weights found: the block must be 128 x 128, the one layout read; with
/// `scale_fmt: "ue8m0"` (DeepSeek-V3.1) every `weight_scale_inv` must be a power of two.
///
/// # Errors
/// [`CliError::Unsupported`] for another block size or scale format,
/// [`CliError::Tensor`] naming a scale that is not a power of two, with its position.
pub fn check_fp8_block_config(catalog: &Catalog<'_>, declared: &Declared, found: &[Found]) -> Result<(), CliError> {
    let Some(qc) = &declared.quantization_config else { return Ok(()) };
    if qc.get("quant_method").and_then(|m| m.as_str()) != Some("fp8") {
        return Ok(());
    }
    if let Some(block) = qc.get("weight_block_size")
        && block != &serde_json::json!([128, 128])
    {
        return Err(CliError::Unsupported(format!(
            "the checkpoint's quantization_config declares FP8 weight_block_size {block}; blockscale reads \
             128 x 128 blocks (weight_scale_inv per [128, 128] tile); nothing was written"
        )));
    }
    let pow2 = match qc.get("scale_fmt").and_then(|f| f.as_str()) {
        None => false,
        Some("ue8m0") => true,
        Some(other) => {
            return Err(CliError::Unsupported(format!(
                "the checkpoint's quantization_config declares scale_fmt {other:?}; blockscale reads FP8 block \
                 scales as float32 (no scale_fmt) or powers of two (\"ue8m0\"); nothing was written"
            )));
        }
    };
    if !pow2 {
        return Ok(());
    }
    for f in found {
        let super::Decode::DeepseekFp8 { scales } = &f.decode else { continue };
        let Some(bytes) = catalog.bytes(scales) else { continue };
        let cols = f.k.div_ceil(128);
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            // A positive normal power of two: sign 0, mantissa 0, exponent neither 0 nor 255.
            let bits = v.to_bits();
            if bits & 0x807f_ffff != 0 || bits >> 23 == 0 || bits >> 23 == 255 {
                return Err(CliError::tensor(
                    catalog.path_of(scales),
                    scales,
                    format!(
                        "scale [{}, {}] is {v:e}, not a power of two, but the config declares scale_fmt \"ue8m0\"",
                        i / cols.max(1),
                        i % cols.max(1)
                    ),
                ));
            }
        }
    }
    Ok(())
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
/// [`CliError::Unsupported`] naming the first low-precision tensor no convention
/// explains, or the declared quantization when no quantized weight was found.
pub fn check_coverage(
    catalog: &Catalog<'_>,
    found: &[Found],
    consumed: &HashSet<String>,
    declared: &Declared,
) -> Result<(), CliError> {
    for shard in catalog.shards() {
        if let Some(t) = shard.tensors().iter().find(|t| low_precision(t.dtype) && !consumed.contains(&t.name)) {
            return Err(CliError::Unsupported(format!(
                "{}: tensor {:?} is {:?} {:?}, and no convention blockscale reads explains it (supported: {SUPPORTED}); \
                 nothing was written",
                shard.path().display(),
                t.name,
                t.dtype,
                t.shape
            )));
        }
    }
    if found.is_empty()
        && let Some((source, v)) = &declared.first
    {
        return Err(CliError::Unsupported(format!(
            "{source} declares a quantization ({}), but no weight of a convention blockscale reads was found \
             (supported: {SUPPORTED}); nothing was written",
            describe(v)
        )));
    }
    Ok(())
}
