//! # blockscale
//!
//! Block-scaled low-precision numerics for inference engines and kernel authors:
//! NVFP4, the OCP MX formats (MXFP4/6/8), DeepSeek-style FP8 block quantization and
//! INT4 weight-only quantization, bit-exact on the CPU and fast on NVIDIA GPUs.
//!
//! This facade is the one API users depend on; the backend is chosen by feature
//! (`cpu`, the default, and `cuda`). Today it exposes the formats layer
//! ([`formats`], re-exported at the root): element types, packing, scale layouts,
//! scale rules and schemes. Quantization, dequantization and GEMM join it as the
//! backend crates land.
//!
//! ```
//! use blockscale::{E2M1, Scheme};
//! assert_eq!(E2M1::from_f32(2.5).to_f32(), 2.0);
//! assert_eq!(Scheme::NvFp4.block_size(), 16);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
compile_error!(
    "the `cuda` feature of blockscale is not implemented yet: build without it \
     (the CPU backend is the default)"
);

pub use blockscale_formats as formats;
pub use blockscale_formats::*;

/// The README's code examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
