//! # blockscale
//!
//! Block-scaled low-precision numerics for inference engines and kernel authors:
//! NVFP4, the OCP MX formats (MXFP4/6/8), DeepSeek-style FP8 block quantization and
//! INT4 weight-only quantization, bit-exact on the CPU and fast on NVIDIA GPUs.
//!
//! This facade is the one API users depend on; the backends are chosen by feature
//! (`cpu`, the default, and `cuda`, which implies `cpu`). [`Backend`] runs quantize,
//! dequantize, [`Backend::gemm`], [`Backend::gemm_weight_only`] and [`Backend::gemv`]
//! on host arrays on whichever backend it names, with one [`Error`] type. It exposes the formats layer ([`formats`],
//! re-exported at the root: element types, packing, scale layouts, scale rules,
//! schemes, [`QuantizedMatrix`]) and, with `cpu`, the CPU backend ([`cpu`], its entry
//! points re-exported at the root: [`quantize`], [`dequantize`], [`fake_quantize`],
//! [`error_metrics`], and the block-scaled products [`gemm`], [`gemm_reference`],
//! [`gemm_weight_only`], [`gemv`]). With `cuda`, the CUDA backend is `blockscale::cuda`
//! (blockscale-cuda): the same quantize / dequantize on cudarc device buffers, writing
//! the same bytes as the CPU, the block-scaled GEMMs (`cuda::gemm`,
//! `cuda::gemm_weight_only`) with the same [`Epilogue`], and host conveniences.
//!
//! ```
//! use blockscale::{E2M1, QuantizeOptions, Scheme, dequantize, quantize};
//! use blockscale::ndarray::Array2;
//!
//! assert_eq!(E2M1::from_f32(2.5).to_f32(), 2.0);
//! let w = Array2::from_shape_fn((64, 128), |(r, c)| ((r * 7 + c) % 13) as f32 - 6.0);
//! let q = quantize(w.view(), Scheme::NvFp4, &QuantizeOptions::default()).unwrap();
//! let back = dequantize::<f32>(&q);
//! assert_eq!(back.dim(), (64, 128));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use blockscale_formats as formats;
pub use blockscale_formats::*;

#[cfg(feature = "cpu")]
pub use blockscale_cpu as cpu;
#[cfg(feature = "cpu")]
pub use blockscale_cpu::{
    ActivationPrecision, CpuError, DequantizeOptions, ErrorMetrics, GemmOptions, PanelWeights, dequantize,
    dequantize_into, dequantize_slice, dequantize_with, error_metrics, error_metrics_slice, fake_quantize, gemm,
    gemm_reference, gemm_weight_only, gemm_weight_only_panels, gemm_weight_only_reference, gemv, gemv_panels, quantize,
    quantize_into, quantize_slice,
};
#[cfg(feature = "cpu")]
mod backend;
#[cfg(feature = "cpu")]
mod element;
#[cfg(feature = "cpu")]
mod error;
#[cfg(all(feature = "cpu", feature = "checkpoint"))]
pub use backend::LoadedWeight;
#[cfg(feature = "cpu")]
pub use backend::{Backend, Prepared};
#[doc(hidden)]
#[cfg(feature = "cpu")]
pub use element::CudaElement;
#[cfg(feature = "cpu")]
pub use element::Element;
#[cfg(feature = "cpu")]
pub use error::Error;

/// Quantized safetensors checkpoints (feature `checkpoint`, on by default): the
/// conventions in the wild read into [`QuantizedMatrix`] values and written from them,
/// and a streaming [`checkpoint::Reader`] for engines.
#[cfg(feature = "checkpoint")]
pub use blockscale_checkpoint as checkpoint;

/// The CUDA backend (feature `cuda`; building it needs nvcc, see the README).
#[cfg(feature = "cuda")]
pub use blockscale_cuda as cuda;
/// The `half` version whose f16 and bf16 the API takes and returns.
pub use half;
/// The ndarray version the API takes and returns.
#[cfg(any(feature = "cpu", feature = "cuda"))]
pub use ndarray;

/// The README's code examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
