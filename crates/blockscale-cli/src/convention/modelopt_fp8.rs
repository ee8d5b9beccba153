//! NVIDIA ModelOpt's FP8 per-tensor layout as `quantize --scheme fp8-per-tensor
//! --convention modelopt` writes it: per linear layer `P.weight` (F8_E4M3 `[N, K]`),
//! `P.weight_scale` (F32 of shape `[]`, the decode multiplier `amax / 448`: `W = w *
//! weight_scale`) and, for a calibrated layer, `P.input_scale` (F32 `[]`, the
//! activations' `amax / 448`); `quant_algo: FP8` in hf_quant_config.json and in
//! config.json's `quantization_config`. The scheme exists only here, in the CLI: the
//! library's schemes are block-scaled.

use safetensors::Dtype;

use super::config::Configs;
use super::encode::{Plan, prefix};
use crate::checkpoint::PlannedTensor;
use crate::cli::ConventionArg;
use crate::error::CliError;

/// The output tensors of weight `name` (`rows x k`). `input_scale`: whether calibration
/// gives the layer an activation scale.
///
/// # Errors
/// [`CliError::Unsupported`] for any convention but modelopt.
pub fn plan_outputs(
    convention: ConventionArg,
    name: &str,
    rows: usize,
    k: usize,
    input_scale: bool,
) -> Result<Plan, CliError> {
    if convention != ConventionArg::Modelopt {
        return Err(CliError::Unsupported(
            "fp8-per-tensor (E4M3 with one f32 scale per tensor) is ModelOpt's FP8 layout: use it with \
             --convention modelopt, or choose a block-scaled scheme such as fp8-block"
                .into(),
        ));
    }
    let p = prefix(name);
    let mut v = vec![
        PlannedTensor::new(format!("{p}.weight"), Dtype::F8_E4M3, vec![rows, k]),
        PlannedTensor::new(format!("{p}.weight_scale"), Dtype::F32, vec![]),
    ];
    if input_scale {
        v.push(PlannedTensor::new(format!("{p}.input_scale"), Dtype::F32, vec![]));
    }
    Ok((v, vec![]))
}

/// The planned tensors' bytes: the E4M3 codes, the weight's decode scale and the
/// activation scale of a calibrated layer.
pub fn encode(name: &str, codes: Vec<u8>, weight_scale: f32, input_scale: Option<f32>) -> Vec<(String, Vec<u8>)> {
    let p = prefix(name);
    let mut v =
        vec![(format!("{p}.weight"), codes), (format!("{p}.weight_scale"), weight_scale.to_le_bytes().to_vec())];
    if let Some(s) = input_scale {
        v.push((format!("{p}.input_scale"), s.to_le_bytes().to_vec()));
    }
    v
}

/// ModelOpt's FP8 configs: hf_quant_config.json and config.json's `quantization_config`
/// (`quant_method: modelopt`, `quant_algo: FP8`), the layers left in full precision as
/// `exclude_modules` / `ignore`.
pub fn quant_configs(ignore: &[String]) -> Configs {
    use serde_json::json;
    let producer = json!({ "name": "blockscale", "version": env!("CARGO_PKG_VERSION") });
    let hf = json!({
        "producer": producer,
        "quantization": { "quant_algo": "FP8", "kv_cache_quant_algo": null, "exclude_modules": ignore },
    });
    let qc = json!({ "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ignore });
    Configs {
        metadata: vec![("hf_quant_config".into(), hf.to_string()), ("quantization_config".into(), qc.to_string())],
        files: vec![("hf_quant_config.json".into(), hf)],
        config_json: Some(qc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_and_configs_follow_modelopt() {
        let (t, meta) = plan_outputs(ConventionArg::Modelopt, "m.q_proj.weight", 3, 5, true).unwrap();
        assert!(meta.is_empty());
        let got: Vec<(&str, Dtype, &[usize])> = t.iter().map(|t| (t.name.as_str(), t.dtype, &t.shape[..])).collect();
        assert_eq!(
            got,
            [
                ("m.q_proj.weight", Dtype::F8_E4M3, &[3, 5][..]),
                ("m.q_proj.weight_scale", Dtype::F32, &[][..]),
                ("m.q_proj.input_scale", Dtype::F32, &[][..])
            ]
        );
        assert_eq!(plan_outputs(ConventionArg::Modelopt, "w.weight", 3, 5, false).unwrap().0.len(), 2);
        let e = encode("w.weight", vec![1, 2], 0.5, Some(2.0));
        assert_eq!(e[1], ("w.weight_scale".to_owned(), 0.5f32.to_le_bytes().to_vec()));
        assert_eq!(e[2], ("w.input_scale".to_owned(), 2.0f32.to_le_bytes().to_vec()));

        let c = quant_configs(&["lm_head".into()]);
        assert_eq!(c.files[0].0, "hf_quant_config.json");
        assert_eq!(c.files[0].1["quantization"]["quant_algo"], "FP8");
        assert_eq!(c.files[0].1["quantization"]["exclude_modules"], serde_json::json!(["lm_head"]));
        let qc = c.config_json.unwrap();
        assert_eq!((qc["quant_method"].as_str(), qc["quant_algo"].as_str()), (Some("modelopt"), Some("FP8")));
    }

    #[test]
    fn other_conventions_are_refused() {
        for c in [ConventionArg::Native, ConventionArg::CompressedTensors, ConventionArg::Deepseek] {
            let e = plan_outputs(c, "w.weight", 3, 5, false).unwrap_err();
            assert!(matches!(e, CliError::Unsupported(_)), "{e:?}");
            assert!(e.to_string().contains("--convention modelopt"), "{e}");
        }
    }
}
