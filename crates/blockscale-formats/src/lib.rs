//! # blockscale-formats
//!
//! The lowest layer of [blockscale](https://github.com/blockscale/blockscale): the
//! element formats of block-scaled low-precision numerics, bit-exact, with their
//! packing orders, scale layouts and scale-selection rules. No GPU, no `std`
//! (`alloc` only, behind the default `alloc` feature), no `unsafe`, and two
//! dependencies (`half`, and `libm` for the reference activations).
//!
//! - Element types, each a `Copy` newtype over its bits: [`E2M1`], [`E2M3`], [`E3M2`],
//!   [`E4M3`], [`E5M2`], [`UE4M3`], [`UE8M0`], [`Int4`]. Conversions from f32, f16,
//!   bf16 and f64 (rounded once from the f64, `from_f64`), in every rounding mode
//!   NVIDIA offers (round-toward-zero for FP4/FP6 is `from_f32_rz` and friends), are
//!   bit-identical to NVIDIA's host conversion functions (`cuda_fp8.h`, `cuda_fp6.h`,
//!   `cuda_fp4.h`); the tests check this against those functions themselves.
//! - [`ScaleRule`]: UE8M0 scale selection (`Rceil`, `Floor`, `Ceil`, `Even`).
//! - [`pack`]: FP4 nibble order, FP6 bitstream, INT4 words, the block-interleaved
//!   GEMV layout.
//! - [`layout`]: `Linear` and `Swizzled128x4` scale layouts.
//! - [`Scheme`]: the recipes (NVFP4, MXFP4/6/8, FP8 block, INT4-G32) as data, with shape
//!   validation that returns a [`FormatError`] and never panics.
//! - [`slice`]: fast slice encoders and decoders.
//! - [`rng`]: the seeded generator of the tests, benches, demo and golden files
//!   (deterministic, not cryptographic).
//! - What every backend shares: [`QuantizeOptions`], the GEMM [`Epilogue`] and its
//!   [`Activation`], and [`Scheme::pairs_with`] (which quantized pairs multiply).
//!
//! ```
//! use blockscale_formats::{E2M1, E4M3, ElementFormat, ScaleRule, UE4M3};
//!
//! // One NVFP4 block step by hand: scale, then elements.
//! let block = [0.1f32, -2.0, 3.3, 0.0];
//! let amax = 3.3f32;
//! let sf = UE4M3::from_f32(amax * ElementFormat::E2M1.max_recip());
//! let codes: Vec<E2M1> = block.iter().map(|&x| E2M1::from_f32(x / sf.to_f32())).collect();
//! assert_eq!(codes[2], E2M1::MAX);
//!
//! // An MXFP8 block scale: amax 1000 with E4M3 elements (max 448) needs 2^2.
//! assert_eq!(ScaleRule::Rceil.select(1000.0, ElementFormat::E4M3).exponent(), Some(2));
//! assert_eq!(E4M3::from_f32(1000.0 / 4.0).to_f32(), 256.0);
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod epilogue;
mod error;
mod minifloat;
mod options;
mod source;

mod e2m1;
mod e2m3;
mod e3m2;
mod e4m3;
mod e5m2;
mod int4;
mod ue4m3;
mod ue8m0;

mod element;
pub mod layout;
pub mod pack;
#[cfg(feature = "alloc")]
mod quantized;
mod recipe;
mod request;
pub mod rng;
mod scale_rule;
mod scheme;
pub mod slice;
#[cfg(feature = "alloc")]
mod values;

pub use e2m1::E2M1;
pub use e2m3::E2M3;
pub use e3m2::E3M2;
pub use e4m3::E4M3;
pub use e5m2::E5M2;
pub use element::{Element, ElementFormat};
pub use epilogue::{Activation, Epilogue};
pub use error::FormatError;
pub use int4::{Int4, Int4Storage};
pub use layout::{DataLayout, ScaleLayout};
pub use options::{QuantizeOptions, Simd};
#[cfg(feature = "alloc")]
pub use quantized::{QuantizedMatrix, QuantizedParts, ScaleData};
pub use recipe::{
    GlobalScale, GlobalScaleSource, NVFP4_AMAX_TO_SCALE, NonFinite, NvFp4Recipe, check_recipe, nvfp4_alpha,
};
pub use request::QuantRequest;
pub use scale_rule::ScaleRule;
pub use scheme::{Fp8Tile, QuantShape, ScaleFormat, Scheme};
pub use source::{FloatKind, Source};
pub use ue4m3::UE4M3;
pub use ue8m0::{E8M0Rounding, UE8M0};
#[cfg(feature = "alloc")]
pub use values::FloatValues;
