//! DeepSeek-V3's FP8 layout as `quantize --convention deepseek` writes it: per linear
//! layer `P.weight` (F8_E4M3 `[N, K]`) and `P.weight_scale_inv` (F32
//! `[ceil(N/128), K/128]`), which, despite its name, is the decode multiplier
//! (`W = w * weight_scale_inv`): exactly what `Scheme::Fp8Block(Tile128x128)` stores as
//! its tile scales (`amax / 448`). config.json declares `quant_method: fp8`.

use blockscale::{Fp8Tile, Scheme};
use safetensors::Dtype;

use super::config::Configs;
use super::encode::{Plan, prefix};
use crate::checkpoint::PlannedTensor;
use crate::cli::ConventionArg;
use crate::error::CliError;

/// The one scheme the layout holds.
pub const SCHEME: Scheme = Scheme::Fp8Block(Fp8Tile::Tile128x128);

/// Under the deepseek convention, why a K that is no multiple of 128 is refused (for the
/// library's shape error); `None` under the others.
pub fn k_note(convention: ConventionArg) -> Option<&'static str> {
    (convention == ConventionArg::Deepseek).then_some(
        "DeepSeek's layout itself allows any K (ceil(K/128) scale columns), but blockscale's fp8-block quantizer \
         needs K to be a multiple of 128 (N may be anything)",
    )
}

/// The output tensors of weight `name` (`rows x k`).
///
/// # Errors
/// [`CliError::Unsupported`] for a scheme other than fp8-block (128x128 tiles).
pub fn plan_outputs(scheme: Scheme, name: &str, rows: usize, k: usize) -> Result<Plan, CliError> {
    if scheme != SCHEME {
        return Err(CliError::Unsupported(format!(
            "the deepseek convention stores fp8-block (E4M3 with an f32 scale per 128x128 tile) only, not {scheme}; \
             use --convention native for other schemes"
        )));
    }
    let p = prefix(name);
    Ok((
        vec![
            PlannedTensor::new(format!("{p}.weight"), Dtype::F8_E4M3, vec![rows, k]),
            PlannedTensor::new(format!("{p}.weight_scale_inv"), Dtype::F32, vec![rows.div_ceil(128), k / 128]),
        ],
        vec![],
    ))
}

/// DeepSeek-V3's `quantization_config` (dynamic 1x128 activation scales at run time),
/// with the layers left in full precision as `modules_to_not_convert` (the key
/// transformers' fine-grained FP8 config reads) when there are any.
pub fn quant_configs(ignore: &[String]) -> Configs {
    use serde_json::json;
    let mut qc = json!({
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    });
    if !ignore.is_empty() {
        qc["modules_to_not_convert"] = json!(ignore);
    }
    Configs { metadata: vec![("quantization_config".into(), qc.to_string())], files: vec![], config_json: Some(qc) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_and_config_follow_the_published_layout() {
        let (t, meta) = plan_outputs(SCHEME, "m.down_proj.weight", 200, 384).unwrap();
        assert!(meta.is_empty());
        let got: Vec<(&str, Dtype, &[usize])> = t.iter().map(|t| (t.name.as_str(), t.dtype, &t.shape[..])).collect();
        assert_eq!(
            got,
            [
                ("m.down_proj.weight", Dtype::F8_E4M3, &[200, 384][..]),
                ("m.down_proj.weight_scale_inv", Dtype::F32, &[2, 3][..])
            ]
        );
        let c = quant_configs(&[]).config_json.unwrap();
        assert_eq!(
            c,
            serde_json::json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]})
        );
        assert_eq!(quant_configs(&["lm_head".into()]).config_json.unwrap()["modules_to_not_convert"][0], "lm_head");
    }

    #[test]
    fn other_schemes_are_refused_naming_the_one_it_stores() {
        for s in [Scheme::NvFp4, Scheme::Fp8Block(Fp8Tile::Row1x128)] {
            let e = plan_outputs(s, "w.weight", 128, 128).unwrap_err();
            assert!(matches!(e, CliError::Unsupported(_)), "{e:?}");
            assert!(e.to_string().contains("fp8-block") && e.to_string().contains(s.name()), "{e}");
        }
    }
}
