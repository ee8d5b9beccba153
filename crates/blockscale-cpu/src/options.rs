//! Quantization options: the formats crate's, shared with the cuda backend.

pub use blockscale_formats::{GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizeOptions, Simd};
