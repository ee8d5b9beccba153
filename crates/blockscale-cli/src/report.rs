//! The reports commands print: plain structs that serialize to the `--json` output.
//! Field names are part of the stable JSON interface (docs/CLI.md).

use serde::Serialize;

/// One tensor quantized with one scheme by `eval`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalRow {
    /// Tensor name.
    pub tensor: String,
    /// Scheme name (`Scheme::name`, e.g. `nvfp4`).
    pub scheme: String,
    /// Rows (N) of the weight.
    pub rows: usize,
    /// K of the weight.
    pub k: usize,
    /// Signal-to-quantization-noise ratio in dB (`f64::INFINITY` when exact).
    pub sqnr_db: f64,
    /// Cosine similarity.
    pub cosine: f64,
    /// Largest absolute error.
    pub max_abs: f64,
    /// Largest `|a - r| / |r|` over the non-zero reference values.
    pub max_rel: f64,
    /// Root mean square error.
    pub rmse: f64,
    /// Bytes of the original tensor (its own dtype).
    pub bytes_in: usize,
    /// Bytes of the quantized tensor (elements + scales, per-tensor scale included).
    pub bytes_out: usize,
    /// `bytes_in / bytes_out`.
    pub compression: f64,
    /// Storage bits per weight (scales included).
    pub bits_per_weight: f64,
    /// Seconds to quantize (wall clock, CPU backend).
    pub quantize_s: f64,
}
