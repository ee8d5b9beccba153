//! DeepSeek-V3's FP8 layout: per linear layer `P.weight` (F8_E4M3 `[N, K]`) and
//! `P.weight_scale_inv` (F32 `[ceil(N/128), ceil(K/128)]`), which, despite its name, is
//! the decode multiplier (`W = w * weight_scale_inv`): exactly what
//! `Scheme::Fp8Block(Tile128x128)` stores as its tile scales (`amax / 448`).
//! config.json declares `quant_method: fp8` with `weight_block_size: [128, 128]` and,
//! for DeepSeek-V3.1, `scale_fmt: "ue8m0"` (every scale a power of two).

use blockscale_formats::{Fp8Tile, QuantShape, Scheme};
use safetensors::Dtype;

use super::{Convention, Detect, Holds, Part, ToStore, Writes, layer_prefix};
use crate::{CheckpointError, Configs, Decode, Found, TensorEntry};

/// The one scheme the layout holds.
pub const SCHEME: Scheme = Scheme::Fp8Block(Fp8Tile::Tile128x128);

/// The DeepSeek convention.
pub static DEEPSEEK: Convention = Convention::new("deepseek", "DeepSeek-V3 FP8 (128x128 weight_scale_inv)", detect)
    .writing(&Deepseek)
    .checking(check_declared);

/// DeepSeek FP8: F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(N/128), ceil(K/128)].
fn detect(cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
    let Some((_, scales)) = cx.with_companion(t, ".weight", ".weight_scale_inv") else {
        return Ok(None);
    };
    let name = t.name.as_str();
    cx.expect(name, Dtype::F8_E4M3, None)?;
    if t.shape.len() != 2 {
        return Err(cx.err(name, format!("has shape {:?}, expected [N, K]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1]);
    cx.expect(&scales, Dtype::F32, Some(&[rows.div_ceil(128), k.div_ceil(128)]))?;
    Ok(Some(Found {
        convention: DEEPSEEK.name(),
        output: name.to_owned(),
        main: name.to_owned(),
        parts: vec![name.to_owned(), scales.clone()],
        format: SCHEME.name().into(),
        rows,
        k,
        out_shape: vec![rows, k],
        decode: Decode::DeepseekFp8 { scales },
    }))
}

/// Checks what a `quant_method: "fp8"` config (DeepSeek-V3/R1, Qwen3 FP8) says against
/// the FP8 block weights found: the block must be 128 x 128, the one layout read; with
/// `scale_fmt: "ue8m0"` (DeepSeek-V3.1) every `weight_scale_inv` must be a power of two.
///
/// # Errors
/// [`CheckpointError::Unsupported`] for another block size or scale format,
/// [`CheckpointError::Tensor`] naming a scale that is not a power of two, with its position.
fn check_declared(cx: &Detect<'_>, found: &[Found]) -> Result<(), CheckpointError> {
    let Some(qc) = cx.declared.quantization_config() else { return Ok(()) };
    if qc.get("quant_method").and_then(|m| m.as_str()) != Some("fp8") {
        return Ok(());
    }
    if let Some(block) = qc.get("weight_block_size")
        && block != &serde_json::json!([128, 128])
    {
        return Err(CheckpointError::Unsupported(format!(
            "the checkpoint's quantization_config declares FP8 weight_block_size {block}; blockscale reads \
             128 x 128 blocks (weight_scale_inv per [128, 128] tile); nothing was written"
        )));
    }
    let pow2 = match qc.get("scale_fmt").and_then(|f| f.as_str()) {
        None => false,
        Some("ue8m0") => true,
        Some(other) => {
            return Err(CheckpointError::Unsupported(format!(
                "the checkpoint's quantization_config declares scale_fmt {other:?}; blockscale reads FP8 block \
                 scales as float32 (no scale_fmt) or powers of two (\"ue8m0\"); nothing was written"
            )));
        }
    };
    if !pow2 {
        return Ok(());
    }
    for f in found {
        let Decode::DeepseekFp8 { scales } = &f.decode else { continue };
        let Some(bytes) = cx.catalog.bytes(scales) else { continue };
        let cols = f.k.div_ceil(128);
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            // A positive normal power of two: sign 0, mantissa 0, exponent neither 0 nor 255.
            let bits = v.to_bits();
            if bits & 0x807f_ffff != 0 || bits >> 23 == 0 || bits >> 23 == 255 {
                return Err(cx.err(
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

/// How blockscale writes the DeepSeek convention.
pub struct Deepseek;

impl Writes for Deepseek {
    fn parts(&self, w: &ToStore<'_>) -> Option<Vec<Part>> {
        let (p, QuantShape { scheme, rows, k, .. }) = (layer_prefix(w.name), w.shape);
        (scheme == SCHEME).then(|| {
            vec![
                Part::new(format!("{p}.weight"), Dtype::F8_E4M3, vec![rows, k], Holds::Codes),
                Part::new(
                    format!("{p}.weight_scale_inv"),
                    Dtype::F32,
                    vec![rows.div_ceil(128), k / 128],
                    Holds::Scales,
                ),
            ]
        })
    }

    fn stores(&self) -> &'static str {
        "the deepseek convention stores fp8-block (E4M3 with an f32 scale per 128x128 tile) only"
    }

    /// DeepSeek-V3's `quantization_config` (dynamic 1x128 activation scales at run time),
    /// with the layers left in full precision as `modules_to_not_convert` (the key
    /// transformers' fine-grained FP8 config reads) when there are any.
    fn configs(&self, _scheme: Scheme, _calibrated: bool, ignore: &[String]) -> Configs {
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

    fn k_note(&self) -> Option<&'static str> {
        Some(
            "DeepSeek's layout itself allows any K (ceil(K/128) scale columns), but blockscale's fp8-block quantizer \
             needs K to be a multiple of 128 (N may be anything)",
        )
    }
}

#[cfg(test)]
mod tests {
    use blockscale_formats::ScaleLayout;

    use super::*;

    #[test]
    fn tensors_and_config_follow_the_published_layout() {
        let (t, meta) = Deepseek.plan(SCHEME, ScaleLayout::Linear, "m.down_proj.weight", (200, 384), false).unwrap();
        assert!(meta.is_empty());
        let got: Vec<(&str, Dtype, &[usize])> = t.iter().map(|t| (t.name.as_str(), t.dtype, &t.shape[..])).collect();
        assert_eq!(
            got,
            [
                ("m.down_proj.weight", Dtype::F8_E4M3, &[200, 384][..]),
                ("m.down_proj.weight_scale_inv", Dtype::F32, &[2, 3][..])
            ]
        );
        let c = Deepseek.configs(SCHEME, false, &[]).config_json.unwrap();
        assert_eq!(
            c,
            serde_json::json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]})
        );
        assert_eq!(
            Deepseek.configs(SCHEME, false, &["lm_head".into()]).config_json.unwrap()["modules_to_not_convert"][0],
            "lm_head"
        );
    }

    #[test]
    fn other_schemes_are_refused_naming_the_one_it_stores() {
        for s in [Scheme::NvFp4, Scheme::Fp8Block(Fp8Tile::Row1x128)] {
            let e = Deepseek.plan(s, ScaleLayout::Linear, "w.weight", (128, 128), false).unwrap_err();
            assert!(matches!(e, CheckpointError::Unsupported(_)), "{e:?}");
            assert!(e.to_string().contains("fp8-block") && e.to_string().contains(s.name()), "{e}");
        }
    }
}
