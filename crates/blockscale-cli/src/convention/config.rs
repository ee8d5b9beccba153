//! The quantization configs an output convention declares beside its tensors: ModelOpt's
//! `hf_quant_config.json`, the `quantization_config` of config.json (or of a single
//! file's metadata), and the layers they list as left unquantized.

use blockscale::Scheme;

use crate::checkpoint::TensorEntry;
use crate::cli::ConventionArg;
use crate::select::Selector;

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

/// Layer prefixes of the 2-D `.weight` tensors left unquantized (the `exclude_modules`
/// / `ignore` lists of the configs), sorted.
pub fn ignored_linear_layers<'a>(
    tensors: impl IntoIterator<Item = &'a TensorEntry>,
    selector: &Selector,
) -> Vec<String> {
    let mut v: Vec<String> = tensors
        .into_iter()
        .filter(|t| t.shape.len() == 2 && t.name.ends_with(".weight") && selector.skip_reason(t).is_some())
        .map(|t| super::layer_prefix(&t.name).to_owned())
        .collect();
    v.sort();
    v
}

/// The compressed-tensors format and config group (`targets`, `weights` and, where the
/// scheme has them, `input_activations`) of `scheme`, with the weight arguments the
/// package's presets give it: NVFP4, MXFP4A16, W4A16 with groups of 32, FP8_BLOCK.
fn compressed_tensors_group(scheme: Scheme, calibrated: bool) -> (&'static str, serde_json::Value) {
    use serde_json::json;
    match scheme {
        Scheme::MxFp4 => (
            "mxfp4-pack-quantized",
            json!({ "targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                "symmetric": true, "dynamic": false, "scale_dtype": "torch.uint8",
            }}),
        ),
        Scheme::Int4G32 | Scheme::Int4G128 => int4_group(scheme.block_size()),
        Scheme::Fp8Block(_) => (
            "float-quantized",
            json!({
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
                    "symmetric": true, "dynamic": false, "observer": "minmax",
                },
                // Dynamic per-token groups of 128, as the FP8_BLOCK preset (and vLLM's
                // block FP8 kernels) expect: nothing to calibrate.
                "input_activations": {
                    "num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                    "symmetric": true, "dynamic": true,
                },
            }),
        ),
        _ => {
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
            ("nvfp4-pack-quantized", group)
        }
    }
}

/// pack-quantized symmetric INT4 in groups of `group` (W4A16 has 128).
fn int4_group(group: usize) -> (&'static str, serde_json::Value) {
    let weights = serde_json::json!({
        "num_bits": 4, "type": "int", "strategy": "group", "group_size": group,
        "symmetric": true, "dynamic": false, "actorder": null, "observer": "minmax",
    });
    ("pack-quantized", serde_json::json!({ "targets": ["Linear"], "weights": weights }))
}

/// A compressed-tensors `quantization_config` of one config group.
fn compressed_tensors_configs((format, group): (&str, serde_json::Value), ignore: &[String]) -> Configs {
    let producer = serde_json::json!({ "name": "blockscale", "version": env!("CARGO_PKG_VERSION") });
    let qc = serde_json::json!({
        "quant_method": "compressed-tensors",
        "format": format,
        "quantization_status": "compressed",
        "config_groups": { "group_0": group },
        "ignore": ignore,
        "producer": producer,
    });
    Configs { metadata: vec![("quantization_config".into(), qc.to_string())], files: vec![], config_json: Some(qc) }
}

/// The configs of `convention` for `scheme`. `calibrated`: whether the layers carry
/// activation scales; `ignore`: the layers left unquantized.
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
            compressed_tensors_configs(compressed_tensors_group(scheme, calibrated), ignore)
        }
        ConventionArg::Deepseek => super::deepseek::quant_configs(ignore),
        ConventionArg::Native => {
            let qc = json!({ "quant_method": "blockscale", "scheme": scheme.name(), "ignore": ignore, "producer": producer });
            Configs { metadata: vec![], files: vec![], config_json: Some(qc) }
        }
    }
}

#[cfg(test)]
mod tests {
    use safetensors::Dtype;

    use super::*;

    fn entry(name: &str, shape: &[usize]) -> TensorEntry {
        TensorEntry { name: name.into(), dtype: Dtype::BF16, shape: shape.to_vec(), range: 0..0 }
    }

    #[test]
    fn the_ignore_list_holds_the_skipped_linear_layers_sorted() {
        let tensors = [
            entry("model.norm.weight", &[8]),
            entry("model.q.weight", &[8, 32]),
            entry("lm_head.weight", &[8, 32]),
            entry("model.embed_tokens.weight", &[8, 32]),
            entry("model.q.bias", &[8, 32]),
        ];
        let selector = Selector::new(&[], &[], true).unwrap();
        assert_eq!(ignored_linear_layers(&tensors, &selector), ["lm_head", "model.embed_tokens"]);
    }

    #[test]
    fn each_convention_declares_its_config() {
        let ignore = vec!["lm_head".to_owned()];
        let m = quant_configs(ConventionArg::Modelopt, Scheme::NvFp4, false, &ignore);
        assert_eq!(
            m.metadata.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["hf_quant_config", "quantization_config"]
        );
        assert_eq!(m.files[0].0, "hf_quant_config.json");
        assert_eq!(m.files[0].1["quantization"]["exclude_modules"], serde_json::json!(["lm_head"]));
        assert_eq!(m.config_json.unwrap()["quant_method"], "modelopt");

        let ct = |calibrated| quant_configs(ConventionArg::CompressedTensors, Scheme::NvFp4, calibrated, &ignore);
        let group = |c: Configs| c.config_json.unwrap()["config_groups"]["group_0"].clone();
        assert!(group(ct(false)).get("input_activations").is_none());
        assert_eq!(group(ct(true))["input_activations"]["dynamic"], "local");
        assert!(ct(false).files.is_empty());
        assert_eq!(ct(false).config_json.unwrap()["format"], "nvfp4-pack-quantized");

        // The other schemes compressed-tensors stores: each its format, the weight
        // arguments the package's decompressor and vLLM select on, read back as ours.
        let fp8 = Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128);
        for (scheme, format) in
            [(Scheme::MxFp4, "mxfp4-pack-quantized"), (Scheme::Int4G32, "pack-quantized"), (fp8, "float-quantized")]
        {
            let qc = quant_configs(ConventionArg::CompressedTensors, scheme, false, &ignore).config_json.unwrap();
            assert_eq!(qc["format"], format);
            assert_eq!(qc["quantization_status"], "compressed");
            assert_eq!(qc["ignore"], serde_json::json!(["lm_head"]));
            let ct = super::super::CtConfig::parse(&qc, "test").unwrap().unwrap();
            assert_eq!(ct.fp8_block, (scheme == fp8).then_some([128, 128]), "{scheme}");
        }

        let n = quant_configs(ConventionArg::Native, Scheme::MxFp4, false, &ignore);
        assert!(n.metadata.is_empty() && n.files.is_empty());
        assert_eq!(n.config_json.unwrap()["scheme"], "mxfp4");
    }
}
