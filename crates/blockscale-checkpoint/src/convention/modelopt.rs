//! NVIDIA ModelOpt's layouts.
//!
//! - NVFP4: per linear layer `P.weight` (U8 `[N, K/2]`, E2M1 pairs, the even element in
//!   the low nibble), `P.weight_scale` (F8_E4M3 `[N, K/16]`), `P.weight_scale_2` (F32, the
//!   per-tensor decode scale) and, for a calibrated layer, `P.input_scale` (F32, the
//!   activations' decode scale); `quant_algo: NVFP4` in hf_quant_config.json and in
//!   config.json's `quantization_config`.
//! - FP8 per tensor ([`fp8_per_tensor`]): `P.weight` (F8_E4M3 `[N, K]`), `P.weight_scale`
//!   (F32 `[]`, the decode multiplier `amax / 448`: `W = w * weight_scale`) and, for a
//!   calibrated layer, `P.input_scale` (F32 `[]`, the activations' `amax / 448`);
//!   `quant_algo: FP8`. Read per channel too (`weight_scale` `[N]` or `[N, 1]`). The
//!   scheme exists only in this convention: the library's schemes are block-scaled.

use blockscale_formats::{QuantShape, Scheme};
use safetensors::Dtype;

use super::shared::{nvfp4_found, scaled_fp8, scaled_fp8_prefix};
use super::{Convention, Detect, Holds, Part, ToStore, Writes, layer_prefix};
use crate::{CheckpointError, Configs, Found, GlobalSource, TensorEntry};

/// The ModelOpt convention.
pub static MODELOPT: Convention =
    Convention::new("modelopt", "ModelOpt NVFP4 and FP8 per tensor", detect).writing(&Modelopt);

/// NVFP4: U8 `weight` + `weight_scale` + `weight_scale_2`; FP8: F8_E4M3 `weight` +
/// `weight_scale` when no compressed-tensors config claims it.
fn detect(cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".weight") else {
        return Ok(None);
    };
    if t.dtype == Dtype::U8 && cx.has(&format!("{p}.weight_scale_2")) {
        let tensors = (format!("{p}.weight_scale"), format!("{p}.weight_scale_2"), format!("{p}.input_scale"));
        let output = (MODELOPT.name(), name.to_owned());
        return nvfp4_found(cx, t, output, tensors, GlobalSource::DecodeTensor).map(Some);
    }
    match scaled_fp8_prefix(cx, t) {
        Some(p) if cx.ct.is_none() => scaled_fp8(cx, t, p, MODELOPT.name()).map(Some),
        _ => Ok(None),
    }
}

/// How blockscale writes the ModelOpt convention.
pub struct Modelopt;

impl Writes for Modelopt {
    /// Decode scales: the reciprocals of the encode scales quantization used.
    fn parts(&self, w: &ToStore<'_>) -> Option<Vec<Part>> {
        let (p, QuantShape { scheme, rows, k, .. }) = (layer_prefix(w.name), w.shape);
        if scheme != Scheme::NvFp4 {
            return None;
        }
        let mut v = vec![
            Part::new(format!("{p}.weight"), Dtype::U8, vec![rows, k / 2], Holds::Codes),
            Part::new(format!("{p}.weight_scale"), Dtype::F8_E4M3, vec![rows, k / 16], Holds::Scales),
            Part::new(format!("{p}.weight_scale_2"), Dtype::F32, vec![], Holds::GlobalDecode),
        ];
        if w.input_scale {
            v.push(Part::new(format!("{p}.input_scale"), Dtype::F32, vec![], Holds::InputDecode));
        }
        Some(v)
    }

    fn stores(&self) -> &'static str {
        "the modelopt convention stores NVFP4 and (with --scheme fp8-per-tensor) FP8 per tensor"
    }

    fn configs(&self, _scheme: Scheme, _calibrated: bool, ignore: &[String]) -> Configs {
        use serde_json::json;
        let hf = json!({
            "producer": super::producer(),
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
            metadata: vec![("hf_quant_config".into(), hf.to_string()), ("quantization_config".into(), qc.to_string())],
            files: vec![("hf_quant_config.json".into(), hf)],
            config_json: Some(qc),
        }
    }

    fn stores_input_scale(&self, scheme: Scheme) -> bool {
        scheme == Scheme::NvFp4
    }
}

/// ModelOpt's FP8 per-tensor layout as `quantize --scheme fp8-per-tensor --convention
/// modelopt` writes it (the quantizer is [`crate::recipe::fp8_per_tensor`]).
pub mod fp8_per_tensor {
    use safetensors::Dtype;

    use super::layer_prefix;
    use crate::convention::Plan;
    use crate::{Configs, PlannedTensor};

    /// The output tensors of weight `name` (`rows x k`). `input_scale`: whether
    /// calibration gives the layer an activation scale.
    pub fn plan(name: &str, rows: usize, k: usize, input_scale: bool) -> Plan {
        let p = layer_prefix(name);
        let mut v = vec![
            PlannedTensor::new(format!("{p}.weight"), Dtype::F8_E4M3, vec![rows, k]),
            PlannedTensor::new(format!("{p}.weight_scale"), Dtype::F32, vec![]),
        ];
        if input_scale {
            v.push(PlannedTensor::new(format!("{p}.input_scale"), Dtype::F32, vec![]));
        }
        (v, vec![])
    }

    /// The planned tensors' bytes: the E4M3 codes, the weight's decode scale and the
    /// activation scale of a calibrated layer.
    pub fn encode(name: &str, codes: Vec<u8>, weight_scale: f32, input_scale: Option<f32>) -> Vec<(String, Vec<u8>)> {
        let p = layer_prefix(name);
        let mut v =
            vec![(format!("{p}.weight"), codes), (format!("{p}.weight_scale"), weight_scale.to_le_bytes().to_vec())];
        if let Some(s) = input_scale {
            v.push((format!("{p}.input_scale"), s.to_le_bytes().to_vec()));
        }
        v
    }

    /// ModelOpt's FP8 configs: hf_quant_config.json and config.json's
    /// `quantization_config` (`quant_method: modelopt`, `quant_algo: FP8`), the layers
    /// left in full precision as `exclude_modules` / `ignore`.
    pub fn configs(ignore: &[String]) -> Configs {
        use serde_json::json;
        let hf = json!({
            "producer": crate::convention::producer(),
            "quantization": { "quant_algo": "FP8", "kv_cache_quant_algo": null, "exclude_modules": ignore },
        });
        let qc = json!({ "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ignore });
        Configs {
            metadata: vec![("hf_quant_config".into(), hf.to_string()), ("quantization_config".into(), qc.to_string())],
            files: vec![("hf_quant_config.json".into(), hf)],
            config_json: Some(qc),
        }
    }
}

#[cfg(test)]
mod tests {
    use blockscale_formats::ScaleLayout;

    use super::*;

    #[test]
    fn fp8_per_tensor_tensors_and_configs_follow_modelopt() {
        let (t, meta) = fp8_per_tensor::plan("m.q_proj.weight", 3, 5, true);
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
        assert_eq!(fp8_per_tensor::plan("w.weight", 3, 5, false).0.len(), 2);
        let e = fp8_per_tensor::encode("w.weight", vec![1, 2], 0.5, Some(2.0));
        assert_eq!(e[1], ("w.weight_scale".to_owned(), 0.5f32.to_le_bytes().to_vec()));
        assert_eq!(e[2], ("w.input_scale".to_owned(), 2.0f32.to_le_bytes().to_vec()));

        let c = fp8_per_tensor::configs(&["lm_head".into()]);
        assert_eq!(c.files[0].0, "hf_quant_config.json");
        assert_eq!(c.files[0].1["quantization"]["quant_algo"], "FP8");
        assert_eq!(c.files[0].1["quantization"]["exclude_modules"], serde_json::json!(["lm_head"]));
        let qc = c.config_json.unwrap();
        assert_eq!((qc["quant_method"].as_str(), qc["quant_algo"].as_str()), (Some("modelopt"), Some("FP8")));
    }

    #[test]
    fn nvfp4_configs_name_the_algorithm_and_the_excluded_layers() {
        let m = Modelopt.configs(Scheme::NvFp4, false, &["lm_head".to_owned()]);
        assert_eq!(
            m.metadata.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["hf_quant_config", "quantization_config"]
        );
        assert_eq!(m.files[0].0, "hf_quant_config.json");
        assert_eq!(m.files[0].1["quantization"]["exclude_modules"], serde_json::json!(["lm_head"]));
        assert_eq!(m.config_json.unwrap()["quant_method"], "modelopt");
    }

    #[test]
    fn other_schemes_are_refused_naming_the_native_convention() {
        let e = Modelopt.plan(Scheme::MxFp4, ScaleLayout::Linear, "w.weight", (128, 256), false).unwrap_err();
        assert!(matches!(e, CheckpointError::Unsupported(_)), "{e:?}");
        assert!(e.to_string().contains("--convention native"), "{e}");
    }
}
