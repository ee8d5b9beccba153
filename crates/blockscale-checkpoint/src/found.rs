//! A quantized weight found in a checkpoint: which tensors it is made of, its logical
//! shape, and how it decodes.

use blockscale_formats::{ScaleLayout, Scheme};

use crate::Catalog;

/// Where an NVFP4 weight's per-tensor scale comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum GlobalSource {
    /// No per-tensor scale.
    None,
    /// A decode-scale tensor (ModelOpt `weight_scale_2`).
    DecodeTensor(String),
    /// An encode-scale tensor (compressed-tensors `weight_global_scale`).
    EncodeTensor(String),
}

/// How a found weight decodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Decode {
    /// A `rows x k` block-scaled matrix the library decodes (native, ModelOpt,
    /// compressed-tensors; gpt-oss with `transpose_experts`).
    Matrix {
        /// The scheme.
        scheme: Scheme,
        /// The scale tensor.
        scales: String,
        /// Its layout.
        layout: ScaleLayout,
        /// The per-tensor scale.
        global: GlobalSource,
        /// gpt-oss: `[E, out, K]` is transposed to `[E, K, out]` as transformers does.
        transpose_experts: Option<usize>,
    },
    /// DeepSeek FP8: `w * weight_scale_inv[n / 128, k / 128]`, any N and K.
    DeepseekFp8 {
        /// The `weight_scale_inv` tensor.
        scales: String,
    },
    /// ModelOpt FP8: `w * weight_scale`, one f32 scale for the whole tensor.
    PerTensorFp8 {
        /// The `weight_scale` tensor (one f32).
        scale: String,
    },
    /// FP8 E4M3 times one scale (F32, BF16 or F16) per `block[0] x block[1]` tile:
    /// `w[n, k] * scale[n / block[0], k / block[1]]` (compressed-tensors
    /// `float-quantized`: per tensor, per channel or per block).
    ScaledFp8 {
        /// The `weight_scale` tensor.
        scale: String,
        /// The tile one scale covers, `[rows, columns]`.
        block: [usize; 2],
    },
    /// compressed-tensors `pack-quantized` INT4: eight offset-8 nibbles per int32 word
    /// (element `i` of a word in bits `4i..4i+4`, value `nibble - 8`), decoded as
    /// `(q - zero_point) * scale[n, k / group]`.
    PackedInt4 {
        /// The `weight_scale` tensor `[N, K / group]` (F32, BF16 or F16).
        scales: String,
        /// The `weight_zero_point` tensor of an asymmetric weight: the same nibbles,
        /// packed along N (`[ceil(N / 8), K / group]` words).
        zero_point: Option<String>,
        /// Elements per group along K (K itself per channel).
        group: usize,
    },
}

/// A quantized weight found in a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Its convention's name ([`Convention::name`](crate::Convention::name)).
    pub convention: &'static str,
    /// The name of the dequantized tensor.
    pub output: String,
    /// The element-data tensor.
    pub main: String,
    /// Every tensor it consumes (the data first).
    pub parts: Vec<String>,
    /// The format's name (a scheme's name, `fp8-per-tensor`, `fp8-per-channel`,
    /// `int4-g128`, ...).
    pub format: String,
    /// Logical rows of the 2-D matrix.
    pub rows: usize,
    /// Logical K.
    pub k: usize,
    /// Shape of the dequantized tensor.
    pub out_shape: Vec<usize>,
    /// How to decode it.
    pub decode: Decode,
}

impl Found {
    /// A 2-D block-scaled matrix of `scheme` (`parts[0]` its codes), dequantized to
    /// `output` of shape `[rows, k]` with its scales as `(tensor, layout, global)`.
    pub fn matrix(
        convention: &'static str,
        output: String,
        parts: Vec<String>,
        scheme: Scheme,
        (rows, k): (usize, usize),
        (scales, layout, global): (String, ScaleLayout, GlobalSource),
    ) -> Self {
        Self {
            convention,
            output,
            main: parts[0].clone(),
            parts,
            format: scheme.name().into(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::Matrix { scheme, scales, layout, global, transpose_experts: None },
        }
    }

    /// Storage bits per weight, scales included.
    pub fn bits_per_weight(&self, catalog: &Catalog<'_>) -> f64 {
        let bytes: usize = self.parts.iter().filter_map(|p| catalog.get(p)).map(|(_, t)| t.nbytes()).sum();
        bytes as f64 * 8.0 / (self.rows * self.k).max(1) as f64
    }
}
