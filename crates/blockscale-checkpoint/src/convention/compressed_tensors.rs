//! compressed-tensors (vLLM / llm-compressor checkpoints): per linear layer
//! `P.weight_packed` with `P.weight_scale` and the format's companions, and the
//! `quantization_config` that declares them.
//!
//! - `nvfp4-pack-quantized`: U8 `weight_packed` `[N, K/2]`, F8_E4M3 `weight_scale`
//!   `[N, K/16]`, F32 `weight_global_scale` (the encode scale, "divisor" semantics) and,
//!   for a calibrated layer, `input_global_scale`.
//! - `mxfp4-pack-quantized`: U8 `weight_packed` `[N, K/2]`, U8 (or F8_E8M0) exponents
//!   `weight_scale` `[N, K/32]`.
//! - `pack-quantized` INT4: I32 `weight_packed` `[N, ceil(K/8)]` (eight offset-8 nibbles a
//!   word, element `i` in bits `4i..4i+4`), `weight_scale` `[N, K/group]`, I64
//!   `weight_shape` and, when asymmetric, `weight_zero_point`.
//! - `float-quantized` FP8: F8_E4M3 `weight` with `weight_scale` per tensor, channel or
//!   block.
//!
//! The tensors of a weight say how it decodes (the package's own decompressors infer the
//! strategy from the scale's shape); the config is read to tell a per-tensor
//! `float-quantized` FP8 weight from ModelOpt's (the same tensor names), to know the
//! block of an FP8 `block` strategy, and to refuse what blockscale does not decode.

use blockscale_formats::{Fp8Tile, QuantShape, ScaleLayout, Scheme};
use safetensors::Dtype;

use super::shared::{nvfp4_found, scaled_fp8, scaled_fp8_prefix};
use super::{Convention, Detect, Holds, Part, ToStore, Writes, layer_prefix};
use crate::{CheckpointError, Configs, Declared, Decode, Found, GlobalSource, TensorEntry};

/// The convention's name.
const NAME: &str = "compressed-tensors";

/// The compressed-tensors convention.
pub static COMPRESSED_TENSORS: Convention = Convention::new(
    NAME,
    "compressed-tensors nvfp4-pack-quantized, mxfp4-pack-quantized, pack-quantized (INT4) and float-quantized (FP8)",
    detect,
)
.writing(&CompressedTensors);

/// I32 `weight_packed` (INT4 pack-quantized), U8 FP4 pairs with `weight_global_scale`
/// (nvfp4-pack-quantized) or without (mxfp4-pack-quantized); FP8 `weight` +
/// `weight_scale` when the checkpoint declares a compressed-tensors config.
fn detect(cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".weight_packed") else {
        return match scaled_fp8_prefix(cx, t) {
            Some(p) if cx.ct.is_some() => scaled_fp8(cx, t, p, NAME).map(Some),
            _ => Ok(None),
        };
    };
    if t.dtype == Dtype::I32 {
        return packed_int4(cx, t, p).map(Some);
    }
    if t.dtype != Dtype::U8 {
        return Err(
            cx.err(name, format!("is {:?}, expected U8 (FP4 pairs) or I32 (pack-quantized INT4 words)", t.dtype))
        );
    }
    let (scales, g) = (format!("{p}.weight_scale"), format!("{p}.weight_global_scale"));
    if !cx.has(&g) {
        return mxfp4_packed(cx, t, p).map(Some);
    }
    let output = (NAME, format!("{p}.weight"));
    nvfp4_found(cx, t, output, (scales, g, format!("{p}.input_global_scale")), GlobalSource::EncodeTensor).map(Some)
}

/// How blockscale writes the compressed-tensors convention.
pub struct CompressedTensors;

impl Writes for CompressedTensors {
    /// NVFP4, MXFP4, INT4-G32, INT4-G128 and FP8 128x128 blocks.
    fn parts(&self, w: &ToStore<'_>) -> Option<Vec<Part>> {
        let (p, QuantShape { scheme, rows, k, scale_rows, scale_cols, .. }) = (layer_prefix(w.name), w.shape);
        let codes =
            |suffix: &str, dtype, cols| Part::new(format!("{p}.{suffix}"), dtype, vec![rows, cols], Holds::Codes);
        let scales = |dtype, shape| Part::new(format!("{p}.weight_scale"), dtype, shape, Holds::Scales);
        Some(match scheme {
            Scheme::NvFp4 => {
                // Encode scales ("divisor" semantics).
                let mut v = vec![
                    codes("weight_packed", Dtype::U8, k / 2),
                    scales(Dtype::F8_E4M3, vec![rows, k / 16]),
                    Part::new(format!("{p}.weight_global_scale"), Dtype::F32, vec![1], Holds::GlobalEncode),
                ];
                if w.input_scale {
                    v.push(Part::new(format!("{p}.input_global_scale"), Dtype::F32, vec![1], Holds::InputEncode));
                }
                v
            }
            Scheme::MxFp4 => vec![codes("weight_packed", Dtype::U8, k / 2), scales(Dtype::U8, vec![rows, k / 32])],
            // The offset-8 nibbles, even element low, are pack-quantized's int32 words
            // (element i in bits 4i..4i+4) read little-endian: codes packed two to a byte
            // are stored as they are.
            Scheme::Int4G32 | Scheme::Int4G128 => vec![
                codes("weight_packed", Dtype::I32, k / 8),
                scales(Dtype::F16, vec![rows, k / scheme.block_size()]),
                Part::new(format!("{p}.weight_shape"), Dtype::I64, vec![2], Holds::Dims),
            ],
            Scheme::Fp8Block(Fp8Tile::Tile128x128) => {
                vec![codes("weight", Dtype::F8_E4M3, k), scales(Dtype::F32, vec![scale_rows, scale_cols])]
            }
            _ => return None,
        })
    }

    fn stores(&self) -> &'static str {
        "the compressed-tensors convention stores nvfp4, mxfp4, int4-g32, int4-g128 and fp8-block (128x128)"
    }

    fn configs(&self, scheme: Scheme, calibrated: bool, ignore: &[String]) -> Configs {
        let (format, group) = config_group(scheme, calibrated);
        let qc = serde_json::json!({
            "quant_method": "compressed-tensors",
            "format": format,
            "quantization_status": "compressed",
            "config_groups": { "group_0": group },
            "ignore": ignore,
            "producer": super::producer(),
        });
        Configs { metadata: vec![("quantization_config".into(), qc.to_string())], files: vec![], config_json: Some(qc) }
    }

    fn stores_input_scale(&self, scheme: Scheme) -> bool {
        scheme == Scheme::NvFp4
    }
}

/// compressed-tensors mxfp4-pack-quantized: U8 `{p}.weight_packed` [N, K/2] (E2M1
/// pairs, the even element in the low nibble) and `{p}.weight_scale` [N, K/32] of
/// UE8M0 exponents (U8 or F8_E8M0).
fn mxfp4_packed(cx: &Detect<'_>, t: &TensorEntry, p: &str) -> Result<Found, CheckpointError> {
    let name = t.name.as_str();
    let scales = format!("{p}.weight_scale");
    if t.shape.len() != 2 {
        return Err(cx.err(name, format!("has shape {:?}, expected [N, K/2]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1] * 2);
    let s = cx.tensor(&scales)?;
    let linear = [rows, k / 32];
    if k % 32 != 0 || s.shape != linear || !matches!(s.dtype, Dtype::U8 | Dtype::F8_E8M0) {
        return Err(cx.err(
            &scales,
            format!(
                "is {:?} {:?}; without {p}.weight_global_scale (NVFP4) the FP4 weight {name:?} of shape {:?} is \
                 read as mxfp4-pack-quantized, which needs U8 exponents of shape [N, K/32] = {linear:?} and K a \
                 multiple of 32",
                s.dtype, s.shape, t.shape
            ),
        ));
    }
    let mut parts = vec![name.to_owned(), scales.clone()];
    parts.extend(cx.optional(format!("{p}.input_global_scale")));
    let scale = (scales, ScaleLayout::Linear, GlobalSource::None);
    Ok(Found::matrix(NAME, format!("{p}.weight"), parts, Scheme::MxFp4, (rows, k), scale))
}

/// compressed-tensors pack-quantized INT4: I32 `{p}.weight_packed` [N, ceil(K/8)],
/// `{p}.weight_shape` ([N, K], I64 or I32), `{p}.weight_scale` [N, K/group] and, when
/// asymmetric, I32 `{p}.weight_zero_point` [ceil(N/8), K/group].
fn packed_int4(cx: &Detect<'_>, t: &TensorEntry, p: &str) -> Result<Found, CheckpointError> {
    let name = t.name.as_str();
    let g_idx = format!("{p}.weight_g_idx");
    if cx.has(&g_idx) {
        return Err(CheckpointError::Unsupported(format!(
            "{}: tensor {g_idx:?}: an activation-ordered INT4 weight (columns permuted into groups by weight_g_idx) \
             is not read; blockscale reads compressed-tensors {}; nothing was written",
            cx.catalog.path_of(&g_idx).display(),
            READ
        )));
    }
    let shape_name = format!("{p}.weight_shape");
    let st = cx.tensor(&shape_name)?;
    let bytes = cx.catalog.bytes(&shape_name).expect("present");
    let dims: Vec<u64> = match st.dtype {
        Dtype::I64 => bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
        Dtype::I32 => bytes.chunks_exact(4).map(|c| u64::from(u32::from_le_bytes(c.try_into().expect("4")))).collect(),
        d => return Err(cx.err(&shape_name, format!("is {d:?}, expected I64 (or I32)"))),
    };
    let [n, k] = dims[..] else {
        return Err(cx.err(&shape_name, format!("holds {dims:?}, expected the two dimensions [N, K]")));
    };
    let (rows, k) = (n as usize, k as usize);
    if t.shape != [rows, k.div_ceil(8)] {
        return Err(cx.err(
            name,
            format!(
                "has shape {:?}, expected [N, ceil(K/8)] = [{rows}, {}] for 4-bit values of weight_shape [{rows}, {k}] \
                 (blockscale reads num_bits 4 only)",
                t.shape,
                k.div_ceil(8)
            ),
        ));
    }
    let scales = format!("{p}.weight_scale");
    let s = cx.float_scale(&scales)?;
    let groups = match s.shape[..] {
        [r, g] if r == rows && g > 0 && k % g == 0 => g,
        _ => {
            return Err(cx.err(
                &scales,
                format!(
                    "has shape {:?}, expected [{rows}, K/group] with a group dividing K = {k} ([{rows}, 1] per channel)",
                    s.shape
                ),
            ));
        }
    };
    let group = k / groups;
    let zp_name = format!("{p}.weight_zero_point");
    let zero_point = cx.optional(zp_name);
    if let Some(z) = &zero_point {
        cx.expect(z, Dtype::I32, Some(&[rows.div_ceil(8), groups]))?;
    }
    let mut format = if groups == 1 { "int4-per-channel".to_owned() } else { format!("int4-g{group}") };
    if zero_point.is_some() {
        format += "-asym";
    }
    let mut parts = vec![name.to_owned(), scales.clone(), shape_name];
    parts.extend(zero_point.clone());
    Ok(Found {
        convention: NAME,
        output: format!("{p}.weight"),
        main: name.to_owned(),
        parts,
        format,
        rows,
        k,
        out_shape: vec![rows, k],
        decode: Decode::PackedInt4 { scales, zero_point, group },
    })
}

/// The compressed-tensors format and config group (`targets`, `weights` and, where the
/// scheme has them, `input_activations`) of `scheme`, with the weight arguments the
/// package's presets give it: NVFP4, MXFP4A16, W4A16 with groups of 32, FP8_BLOCK.
fn config_group(scheme: Scheme, calibrated: bool) -> (&'static str, serde_json::Value) {
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

/// The formats blockscale reads, for messages.
pub const READ: &str = "nvfp4-pack-quantized (FP4, group 16), mxfp4-pack-quantized (FP4, group 32), \
                        pack-quantized (INT4 W4A16: group or channel strategy, symmetric or asymmetric, \
                        no activation ordering) and float-quantized (FP8 E4M3: tensor, channel or block \
                        strategy, symmetric)";

/// What a compressed-tensors `quantization_config` declares, once checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CtConfig {
    /// The `block_structure` of its FP8 `block` groups (`[rows, columns]`), if any.
    pub fp8_block: Option<[usize; 2]>,
}

/// The weight arguments of one config group, as far as blockscale looks at them.
struct WeightArgs<'a> {
    group: &'a str,
    format: &'a str,
    args: &'a serde_json::Value,
}

impl WeightArgs<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        self.args.get(key).and_then(|v| v.as_str())
    }

    fn num(&self, key: &str) -> Option<u64> {
        self.args.get(key).and_then(serde_json::Value::as_u64)
    }

    /// `num_bits 4, type int, strategy group, group_size 128, symmetric false`.
    fn describe(&self) -> String {
        ["num_bits", "type", "strategy", "group_size", "block_structure", "symmetric", "actorder"]
            .iter()
            .filter_map(|k| self.args.get(k).filter(|v| !v.is_null()).map(|v| format!("{k} {v}")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn refuse(&self, source: &str, why: &str) -> CheckpointError {
        CheckpointError::Unsupported(format!(
            "{source}: compressed-tensors config group {:?} (format {:?}) declares weights with {}: {why}; \
             blockscale reads {READ}; nothing was written",
            self.group,
            self.format,
            self.describe()
        ))
    }
}

impl CtConfig {
    /// The compressed-tensors config the checkpoint declares, checked (`None` for
    /// another or none).
    ///
    /// # Errors
    /// As [`CtConfig::parse`].
    pub fn declared(declared: &Declared) -> Result<Option<Self>, CheckpointError> {
        match declared.quantization_config() {
            Some(qc) => Self::parse(qc, declared.source()),
            None => Ok(None),
        }
    }

    /// Reads `qc` (a `quantization_config` found in `source`): `None` unless its
    /// `quant_method` is `compressed-tensors`.
    ///
    /// # Errors
    /// [`CheckpointError::Unsupported`] naming the config group and what it declares, for a
    /// format or a combination of weight arguments blockscale does not decode.
    pub fn parse(qc: &serde_json::Value, source: &str) -> Result<Option<Self>, CheckpointError> {
        if qc.get("quant_method").and_then(|m| m.as_str()) != Some("compressed-tensors") {
            return Ok(None);
        }
        let top = qc.get("format").and_then(|f| f.as_str());
        let mut config = Self::default();
        let Some(groups) = qc.get("config_groups").and_then(|g| g.as_object()) else {
            return Ok(Some(config));
        };
        for (name, group) in groups {
            let Some(args) = group.get("weights").filter(|w| w.is_object()) else { continue };
            let format = group.get("format").and_then(|f| f.as_str()).or(top).unwrap_or("");
            let w = WeightArgs { group: name, format, args };
            let (bits, ty, strategy) = (w.num("num_bits"), w.str("type"), w.str("strategy"));
            match format {
                "nvfp4-pack-quantized" => {}
                "mxfp4-pack-quantized" => {
                    if bits != Some(4) || ty != Some("float") || w.num("group_size") != Some(32) {
                        return Err(w.refuse(source, "MXFP4 is FP4 (num_bits 4, type float) in groups of 32"));
                    }
                }
                "pack-quantized" => {
                    if bits != Some(4) || ty != Some("int") {
                        return Err(w.refuse(source, "pack-quantized is read for 4-bit integers only"));
                    }
                    match strategy {
                        Some("channel") => {}
                        Some("group") if w.num("group_size").is_some_and(|g| g > 0) => {}
                        _ => return Err(w.refuse(source, "INT4 is read per group (with a group_size) or per channel")),
                    }
                    match w.args.get("actorder") {
                        None | Some(serde_json::Value::Null | serde_json::Value::Bool(false)) => {}
                        // Calibration-time orderings that store the columns in order, no g_idx.
                        Some(serde_json::Value::String(s)) if s == "weight" || s == "static" => {}
                        Some(_) => {
                            return Err(w.refuse(
                                source,
                                "activation ordering by group stores weight_g_idx (columns permuted into groups), \
                                 which blockscale does not decode",
                            ));
                        }
                    }
                }
                "float-quantized" | "naive-quantized" => {
                    if bits != Some(8) || ty != Some("float") {
                        return Err(w.refuse(source, "float-quantized is read for FP8 E4M3 (num_bits 8, type float)"));
                    }
                    if w.args.get("symmetric").and_then(|s| s.as_bool()) == Some(false) {
                        return Err(w.refuse(source, "an FP8 zero point is not read"));
                    }
                    match strategy {
                        Some("tensor" | "channel") => {}
                        Some("block") => {
                            let block: Option<Vec<usize>> = w
                                .args
                                .get("block_structure")
                                .and_then(|b| b.as_array()?.iter().map(|x| x.as_u64().map(|x| x as usize)).collect());
                            let block = match block.as_deref() {
                                Some(&[r, c]) if r > 0 && c > 0 => [r, c],
                                _ => {
                                    return Err(
                                        w.refuse(source, "a block strategy needs a block_structure [rows, columns]")
                                    );
                                }
                            };
                            if config.fp8_block.is_some_and(|b| b != block) {
                                return Err(w.refuse(source, "two FP8 block structures in one checkpoint"));
                            }
                            config.fp8_block = Some(block);
                        }
                        _ => return Err(w.refuse(source, "FP8 is read per tensor, per channel or per block")),
                    }
                }
                "" => return Err(w.refuse(source, "no format is declared (neither the group's nor a top-level one)")),
                _ => return Err(w.refuse(source, "blockscale does not read this format")),
            }
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(format: &str, weights: serde_json::Value) -> Result<Option<CtConfig>, CheckpointError> {
        let qc = json!({
            "quant_method": "compressed-tensors",
            "format": format,
            "config_groups": { "group_0": { "targets": ["Linear"], "weights": weights } },
        });
        CtConfig::parse(&qc, "config.json")
    }

    fn refusal(format: &str, weights: serde_json::Value) -> String {
        match parse(format, weights) {
            Err(CheckpointError::Unsupported(m)) => m,
            other => panic!("{format}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn other_quant_methods_are_not_compressed_tensors() {
        assert_eq!(CtConfig::parse(&json!({"quant_method": "fp8"}), "config.json").unwrap(), None);
    }

    #[test]
    fn the_supported_groups_are_read() {
        let int4 = |strategy: &str, extra: serde_json::Value| {
            let mut w = json!({"num_bits": 4, "type": "int", "strategy": strategy, "symmetric": false});
            w.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            parse("pack-quantized", w).unwrap().unwrap()
        };
        assert_eq!(int4("group", json!({"group_size": 128, "actorder": null})), CtConfig::default());
        assert_eq!(int4("channel", json!({"actorder": "weight"})), CtConfig::default());
        let fp8 = |strategy: &str| json!({"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": true});
        assert_eq!(parse("float-quantized", fp8("channel")).unwrap().unwrap().fp8_block, None);
        let mut block = fp8("block");
        block["block_structure"] = json!([128, 64]);
        assert_eq!(parse("float-quantized", block).unwrap().unwrap().fp8_block, Some([128, 64]));
        let mx = json!({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32});
        assert!(parse("mxfp4-pack-quantized", mx).is_ok());
    }

    #[test]
    fn what_is_not_read_is_refused_naming_the_group_and_what_it_declares() {
        let m = refusal(
            "pack-quantized",
            json!({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "actorder": "group"}),
        );
        assert!(m.contains("\"group_0\"") && m.contains("actorder \"group\"") && m.contains("weight_g_idx"), "{m}");
        assert!(m.contains("nothing was written") && m.contains("pack-quantized (INT4"), "{m}");
        let m = refusal("pack-quantized", json!({"num_bits": 8, "type": "int", "strategy": "channel"}));
        assert!(m.contains("num_bits 8"), "{m}");
        let m = refusal("float-quantized", json!({"num_bits": 8, "type": "float", "strategy": "token"}));
        assert!(m.contains("strategy \"token\""), "{m}");
        let m = refusal("float-quantized", json!({"num_bits": 8, "type": "float", "strategy": "block"}));
        assert!(m.contains("block_structure"), "{m}");
        let m = refusal("marlin-24", json!({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}));
        assert!(m.contains("format \"marlin-24\"") && m.contains("does not read this format"), "{m}");
    }
}
