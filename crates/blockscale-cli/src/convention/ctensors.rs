//! compressed-tensors' `quantization_config` (vLLM / llm-compressor checkpoints): which
//! of its formats and weight arguments `dequantize` and `inspect` read, and the refusal
//! of every other one before anything is written.
//!
//! The tensors of a weight say how it decodes (the package's own decompressors infer the
//! strategy from the scale's shape); the config is read to tell a per-tensor
//! `float-quantized` FP8 weight from ModelOpt's (the same tensor names), to know the
//! block of an FP8 `block` strategy, and to refuse what blockscale does not decode.

use crate::error::CliError;

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

    fn refuse(&self, source: &str, why: &str) -> CliError {
        CliError::Unsupported(format!(
            "{source}: compressed-tensors config group {:?} (format {:?}) declares weights with {}: {why}; \
             blockscale reads {READ}; nothing was written",
            self.group,
            self.format,
            self.describe()
        ))
    }
}

impl CtConfig {
    /// Reads `qc` (a `quantization_config` found in `source`): `None` unless its
    /// `quant_method` is `compressed-tensors`.
    ///
    /// # Errors
    /// [`CliError::Unsupported`] naming the config group and what it declares, for a
    /// format or a combination of weight arguments blockscale does not decode.
    pub fn parse(qc: &serde_json::Value, source: &str) -> Result<Option<Self>, CliError> {
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

    fn parse(format: &str, weights: serde_json::Value) -> Result<Option<CtConfig>, CliError> {
        let qc = json!({
            "quant_method": "compressed-tensors",
            "format": format,
            "config_groups": { "group_0": { "targets": ["Linear"], "weights": weights } },
        });
        CtConfig::parse(&qc, "config.json")
    }

    fn refusal(format: &str, weights: serde_json::Value) -> String {
        match parse(format, weights) {
            Err(CliError::Unsupported(m)) => m,
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
