//! # blockscale-cuda
//!
//! The CUDA backend of blockscale: quantization and dequantization kernels for every
//! scheme, compiled at build time to SASS for Hopper (`sm_90a`) and Blackwell GeForce
//! (`sm_120a`), embedded in the crate and loaded through cudarc. The bytes they write
//! are identical to blockscale-cpu's.
//!
//! ```no_run
//! use blockscale_cuda::{Device, QuantizeOptions, dequantize_host, quantize_host};
//! use blockscale_formats::{ScaleLayout, Scheme};
//! use ndarray::Array2;
//!
//! let dev = Device::new(0)?;
//! let w = Array2::from_shape_fn((256, 1024), |(r, c)| half::bf16::from_f32((r as f32 - c as f32) / 97.0));
//! let opts = QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
//! let q = quantize_host(&dev, w.view(), Scheme::NvFp4, &opts)?; // a blockscale_formats::QuantizedMatrix
//! let back = dequantize_host::<f32>(&dev, &q)?;
//! # Ok::<(), blockscale_cuda::CudaError>(())
//! ```
//!
//! For data already on the GPU, [`quantize`] takes a [`DeviceMatrix`] (a cudarc
//! `CudaSlice` with its shape) and returns a [`DeviceQuantized`]; [`dequantize`] goes
//! back to a `CudaSlice`. Everything is queued on the [`Device`]'s stream.
//!
//! For host arrays in bulk (a checkpoint's weights), [`quantize_host_into`] and
//! [`dequantize_host_into`] take a [`HostPipeline`]: pinned staging buffers, reused from
//! call to call, through which the matrix goes in row chunks, the host's copies of one
//! chunk overlapping the transfers and kernel of the next; they write into the caller's
//! buffers the bytes blockscale-cpu's `quantize_into` and `dequantize_slice` write.
//!
//! Building needs nvcc (CUDA 13.0); see the README. Running needs an NVIDIA driver and
//! a GPU of compute capability 9.0 or 12.x; anything else is a typed error.

#![warn(missing_docs)]
// `unsafe` lives only in the FFI layer (`ffi/`), whose modules that need it say so with
// `#[allow(unsafe_code)]`; every other module is safe Rust, and the compiler keeps it so.
#![deny(unsafe_code)]

mod buffer;
mod checks;
mod dequantize;
mod device;
mod error;
mod ffi;
mod gemm;
mod gemv;
mod pipeline;
pub mod prepared;
mod quantize;
mod tuning;

pub use blockscale_formats::{Activation, Epilogue, GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizeOptions};
pub use buffer::{DeviceElement, DeviceQuantized, DeviceScales};
pub use cudarc;
pub use dequantize::{dequantize, dequantize_host, dequantize_into};
pub use device::{Arch, Device};
pub use error::CudaError;
pub use gemm::{
    DeviceEpilogue, DeviceMatrixMut, gemm, gemm_host, gemm_into, gemm_prepared, gemm_prepared_host, gemm_prepared_into,
    gemm_prepared_workspace_size, gemm_weight_only, gemm_weight_only_host, gemm_weight_only_into,
    gemm_weight_only_prepared, gemm_weight_only_prepared_host, gemm_weight_only_prepared_into,
    gemm_weight_only_prepared_workspace_size, gemm_weight_only_workspace_size, gemm_workspace_size,
};
pub use gemv::{
    GEMV_MAX_ROWS, GatedWeights, GemvInput, GemvWeights, gemv, gemv_gated, gemv_gated_into, gemv_gated_prepared_host,
    gemv_host, gemv_into, gemv_prepared_host, gemv_workspace_size,
};
pub use pipeline::{HostPipeline, dequantize_host_into, dequantize_host_with, quantize_host_into, quantize_host_with};
pub use prepared::PreparedWeights;
pub use quantize::{DeviceMatrix, quantize, quantize_host, quantize_into};
