//! The quantization configs a convention declares beside its tensors: ModelOpt's
//! `hf_quant_config.json`, the `quantization_config` of config.json (or of a single
//! file's metadata).

/// The configuration a convention declares: entries for a single file's metadata, side
/// files for a folder, and a `quantization_config` for its config.json.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Configs {
    /// `__metadata__` entries (single-file outputs).
    pub metadata: Vec<(String, String)>,
    /// Files to write into an output folder.
    pub files: Vec<(String, serde_json::Value)>,
    /// The `quantization_config` to merge into config.json (when the folder has one).
    pub config_json: Option<serde_json::Value>,
}
