//! The on-disk conventions for quantized weights: what `quantize` writes (ModelOpt,
//! compressed-tensors, native, DeepSeek FP8) with the configs each declares, and what
//! `dequantize` and `inspect` recognise (those, plus OpenAI gpt-oss MXFP4).
//! docs/CLI.md describes each.

mod catalog;
mod config;
mod coverage;
mod ctensors;
mod decode;
mod deepseek;
mod detect;
mod encode;
mod modelopt_fp8;
mod modelopt_recipe;

pub use catalog::Catalog;
pub use config::{Configs, ignored_linear_layers, quant_configs};
pub use coverage::{Declared, check_coverage, check_fp8_block_config};
pub use ctensors::CtConfig;
pub use decode::decode;
pub use deepseek::k_note as deepseek_k_note;
pub use detect::{Decode, Found, GlobalSource, detect};
pub use encode::{encode, encode_in_place, plan_outputs, prefix as layer_prefix};
pub use modelopt_fp8::{
    encode as encode_fp8_per_tensor, plan_outputs as plan_fp8_per_tensor, quant_configs as fp8_per_tensor_configs,
};
pub use modelopt_recipe::quantize as quantize_modelopt_nvfp4;

use crate::cli::ConventionArg;

/// A convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Convention {
    /// An ordinary tensor (not quantized, or not a convention we know).
    Plain,
    /// blockscale's own: `{name}.codes`, `{name}.scales` and `{name}.*` metadata.
    Native,
    /// NVIDIA ModelOpt NVFP4.
    Modelopt,
    /// compressed-tensors (`nvfp4-pack-quantized`, `mxfp4-pack-quantized`,
    /// `pack-quantized` INT4, `float-quantized` FP8).
    CompressedTensors,
    /// OpenAI gpt-oss MXFP4 (`*_blocks`, `*_scales`).
    GptOss,
    /// DeepSeek-V3 FP8 (`weight`, `weight_scale_inv` per 128x128).
    Deepseek,
}

/// The conventions `quantize` writes.
impl From<ConventionArg> for Convention {
    fn from(c: ConventionArg) -> Self {
        match c {
            ConventionArg::Modelopt => Self::Modelopt,
            ConventionArg::CompressedTensors => Self::CompressedTensors,
            ConventionArg::Native => Self::Native,
            ConventionArg::Deepseek => Self::Deepseek,
        }
    }
}

impl Convention {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Native => "native",
            Self::Modelopt => "modelopt",
            Self::CompressedTensors => "compressed-tensors",
            Self::GptOss => "gpt-oss",
            Self::Deepseek => "deepseek",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conventions_quantize_writes_keep_their_report_names() {
        let names =
            [ConventionArg::Modelopt, ConventionArg::CompressedTensors, ConventionArg::Native, ConventionArg::Deepseek]
                .map(|c| Convention::from(c).name());
        assert_eq!(names, ["modelopt", "compressed-tensors", "native", "deepseek"]);
    }
}
