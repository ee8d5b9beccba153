//! The quantizers of formats that are a convention's rather than a library scheme, or a
//! library scheme with a convention's own scale choices: they run on the CPU, over the
//! values as the checkpoint holds them.
//!
//! - [`fp8_per_tensor`]: FP8 E4M3 with one scale per tensor, as ModelOpt exports it.
//! - [`modelopt_nvfp4`]: NVFP4 with ModelOpt's scale choices (`quantize --recipe modelopt`).

pub mod fp8_per_tensor;
pub mod modelopt_nvfp4;
