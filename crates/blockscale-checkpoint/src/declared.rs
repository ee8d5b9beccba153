//! What a checkpoint declares about its quantization: config.json's
//! `quantization_config`, ModelOpt's hf_quant_config.json, the same keys in a file's
//! metadata. The conventions read what concerns them (`CtConfig::declared`,
//! `Convention::check_declared`); `convention/coverage.rs` refuses a declaration of
//! which no weight was found.

use std::path::Path;

use crate::Catalog;

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

    /// Where [`Declared::quantization_config`] comes from, for messages.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The first declaration of any kind (config.json's, hf_quant_config.json's, the
    /// metadata's), with where it was found.
    pub fn first(&self) -> Option<(&str, &serde_json::Value)> {
        self.first.as_ref().map(|(s, v)| (s.as_str(), v))
    }
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}
