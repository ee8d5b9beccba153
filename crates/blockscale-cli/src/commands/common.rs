//! What `quantize` and `dequantize` share: the checkpoint folder's
//! index and side files, and the quantization configs each convention declares.

use std::collections::BTreeMap;
use std::path::Path;

use blockscale::Scheme;

use crate::checkpoint::{Checkpoint, Output, Shard};
use crate::cli::ConventionArg;
use crate::error::CliError;
use crate::select::Selector;

/// Refuses an output that is the input.
///
/// # Errors
/// [`CliError::Usage`].
pub fn same_path_check(input: &Path, output: &Path) -> Result<(), CliError> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    if canon(input).is_some() && canon(input) == canon(output) {
        return Err(CliError::Usage(format!("the output {} is the input; write elsewhere", output.display())));
    }
    Ok(())
}

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

fn write_json(output: &Output, name: &str, v: &serde_json::Value) -> Result<(), CliError> {
    let p = output.path(Some(name));
    let text = serde_json::to_string_pretty(v).expect("JSON serializes") + "\n";
    std::fs::write(&p, text).map_err(|source| CliError::Write { path: p, source })
}

/// Writes `*.safetensors.index.json` for the output shards.
///
/// # Errors
/// [`CliError::Write`].
pub fn write_index(
    output: &Output,
    index: Option<&Path>,
    weight_map: &BTreeMap<String, String>,
    total_size: u64,
) -> Result<(), CliError> {
    let name = index.map_or_else(|| "model.safetensors.index.json".to_owned(), Checkpoint::file_name);
    let v = serde_json::json!({ "metadata": { "total_size": total_size }, "weight_map": weight_map });
    write_json(output, &name, &v)
}

/// Copies the folder's other files, except `drop`, then writes `add`. config.json gets
/// `quantization_config` set to `quant_config` (quantize; a config.json that is not a
/// JSON object is then an error) or, with `None`, removed (dequantize; a config.json
/// that is not a JSON object is copied as it is).
///
/// # Errors
/// [`CliError::Read`] / [`CliError::Write`]; [`CliError::Checkpoint`] for a
/// config.json that cannot take the config.
pub fn copy_others(
    output: &Output,
    ckpt: &Checkpoint,
    quant_config: Option<&serde_json::Value>,
    add: &[(String, serde_json::Value)],
    drop: &[&str],
) -> Result<(), CliError> {
    for p in &ckpt.others {
        let name = Checkpoint::file_name(p);
        if drop.contains(&name.as_str()) || add.iter().any(|(n, _)| *n == name) {
            continue;
        }
        if name == "config.json" {
            let text = std::fs::read_to_string(p).map_err(|source| CliError::Read { path: p.clone(), source })?;
            let parsed = serde_json::from_str::<serde_json::Value>(&text);
            match (parsed, quant_config) {
                (Ok(mut v), Some(qc)) => {
                    let obj = v
                        .as_object_mut()
                        .ok_or_else(|| CliError::Checkpoint { path: p.clone(), reason: "not a JSON object".into() })?;
                    obj.insert("quantization_config".into(), qc.clone());
                    write_json(output, &name, &v)?;
                    continue;
                }
                (Err(e), Some(_)) => {
                    return Err(CliError::Checkpoint { path: p.clone(), reason: format!("not valid JSON: {e}") });
                }
                (Ok(mut v), None) => {
                    if let Some(obj) = v.as_object_mut() {
                        obj.remove("quantization_config");
                        write_json(output, &name, &v)?;
                        continue;
                    }
                }
                (Err(_), None) => {}
            }
        }
        let dest = output.path(Some(&name));
        std::fs::copy(p, &dest).map_err(|source| CliError::Write { path: dest, source })?;
    }
    for (name, v) in add {
        write_json(output, name, v)?;
    }
    Ok(())
}
