//! What `quantize` shares: the quantization configs each convention declares.

use blockscale::Scheme;

use crate::checkpoint::Shard;
use crate::cli::ConventionArg;
use crate::select::Selector;

/// The name of a convention in reports and metadata.
pub fn convention_name(c: ConventionArg) -> &'static str {
    match c {
        ConventionArg::Modelopt => "modelopt",
        ConventionArg::CompressedTensors => "compressed-tensors",
        ConventionArg::Native => "native",
    }
}

/// Layer prefixes of the 2-D `.weight` tensors left unquantized (the `exclude_modules`
/// / `ignore` lists of the configs).
pub fn ignored_linear_layers(shards: &[Shard], selector: &Selector) -> Vec<String> {
    let mut v: Vec<String> = shards
        .iter()
        .flat_map(|s| s.tensors())
        .filter(|t| t.shape.len() == 2 && t.name.ends_with(".weight") && selector.skip_reason(t).is_some())
        .map(|t| crate::convention::layer_prefix(&t.name).to_owned())
        .collect();
    v.sort();
    v
}

/// The configuration a convention declares: entries for a single file's metadata, side
/// files for a folder, and a `quantization_config` for its config.json.
pub struct Configs {
    /// `__metadata__` entries (single-file outputs).
    pub metadata: Vec<(String, String)>,
    /// Files to write into an output folder.
    pub files: Vec<(String, serde_json::Value)>,
    /// The `quantization_config` to merge into config.json (when the folder has one).
    pub config_json: Option<serde_json::Value>,
}

/// The configs of `convention` for `scheme`.
pub fn quant_configs(convention: ConventionArg, scheme: Scheme, calibrated: bool, ignore: &[String]) -> Configs {
    use serde_json::json;
    let producer = json!({ "name": "blockscale", "version": env!("CARGO_PKG_VERSION") });
    match convention {
        ConventionArg::Modelopt => {
            let hf = json!({
                "producer": producer,
                "quantization": {
                    "quant_algo": "NVFP4",
                    "kv_cache_quant_algo": null,
                    "group_size": 16,
                    "exclude_modules": ignore,
                }
            });
            let qc = json!({
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "group_size": 16,
                "ignore": ignore,
            });
            Configs {
                metadata: vec![
                    ("hf_quant_config".into(), hf.to_string()),
                    ("quantization_config".into(), qc.to_string()),
                ],
                files: vec![("hf_quant_config.json".into(), hf)],
                config_json: Some(qc),
            }
        }
        ConventionArg::CompressedTensors => {
            let args = |dynamic: serde_json::Value| {
                json!({
                    "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                    "symmetric": true, "dynamic": dynamic, "observer": "minmax",
                    "scale_dtype": "float8_e4m3fn",
                })
            };
            let mut group = json!({ "targets": ["Linear"], "weights": args(json!(false)) });
            if calibrated {
                group["input_activations"] = args(json!("local"));
            }
            let qc = json!({
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "quantization_status": "compressed",
                "config_groups": { "group_0": group },
                "ignore": ignore,
                "producer": producer,
            });
            Configs {
                metadata: vec![("quantization_config".into(), qc.to_string())],
                files: vec![],
                config_json: Some(qc),
            }
        }
        ConventionArg::Native => {
            let qc = json!({ "quant_method": "blockscale", "scheme": scheme.name(), "ignore": ignore, "producer": producer });
            Configs { metadata: vec![], files: vec![], config_json: Some(qc) }
        }
    }
}
