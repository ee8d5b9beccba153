//! # blockscale-cpu
//!
//! Quantization and dequantization of every blockscale scheme on the CPU: the
//! bit-exact reference the GPU kernels are checked against, and a fast backend (AVX2
//! where the CPU has it, a portable path that gives identical bytes everywhere else,
//! rayon over 128-row bands).
//!
//! - [`quantize`] / [`quantize_slice`]: f32, f16 or bf16 input (any strides) to a
//!   [`QuantizedMatrix`], scales in the linear or swizzled layout; [`quantize_into`]
//!   writes the same codes and scale bytes into caller buffers.
//! - [`dequantize`] (and [`dequantize_into`], [`dequantize_slice`]): back to f32,
//!   f16 or bf16.
//! - [`fake_quantize`]: the dequantized values without materialising the codes.
//! - [`error_metrics`]: SQNR, cosine similarity, max abs and max relative error.
//! - [`gemm`] / [`gemm_reference`]: `act(alpha * A . B^T + bias)` on two quantized
//!   matrices (NVFP4 x NVFP4, MX x MX in any element mix, FP8 block x FP8 block); the
//!   reference is exact up to one final rounding, the fast path is bounded against it.
//! - [`gemm_weight_only`] / [`gemv`] / [`gemm_weight_only_reference`]: f32, f16 or
//!   bf16 activations times quantized weights.
//!
//! The arithmetic of every scheme is in docs/NUMERICS.md; in short:
//!
//! | scheme | block scale | element |
//! |---|---|---|
//! | NVFP4 (LightX2V) | `sf = ue4m3(g * (amax * C6))` | `e2m1(x * min(g * (1/sf), MAX))`, 0 if `sf` is 0 |
//! | MX | `ScaleRule` on amax (default `Rceil`) | `elem(x * 2^-e)` |
//! | FP8 block | `s = amax / 448` (f32) | `e4m3(x / s)`, 0 if `s` is 0 |
//! | INT4-G32 | `s = f16(amax / 7)` | `clamp(rne(x / s), -8, 7) + 8`, 8 if `s` is 0 |
//!
//! ```
//! use blockscale_cpu::{QuantizeOptions, dequantize, error_metrics, quantize};
//! use blockscale_formats::{ScaleLayout, Scheme};
//! use ndarray::Array2;
//!
//! let x = Array2::from_shape_fn((256, 512), |(r, c)| ((r * 31 + c * 7) % 97) as f32 / 13.0 - 3.5);
//! let opts = QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
//! let q = quantize(x.view(), Scheme::NvFp4, &opts).unwrap();
//! let y = dequantize::<f32>(&q);
//! let m = error_metrics(x.view(), y.view()).unwrap();
//! assert!(m.sqnr_db > 15.0);
//! ```
//!
//! ```
//! use blockscale_cpu::{Epilogue, GemmOptions, QuantizeOptions, gemm, gemm_reference, quantize};
//! use blockscale_formats::Scheme;
//! use ndarray::Array2;
//!
//! let a = Array2::from_shape_fn((8, 64), |(i, k)| ((i * 7 + k) % 13) as f32 - 6.0);
//! let b = Array2::from_shape_fn((16, 64), |(j, k)| ((j + 3 * k) % 5) as f32 - 2.0);
//! let opts = QuantizeOptions::default();
//! let (qa, qb) = (quantize(a.view(), Scheme::MxFp8E4M3, &opts).unwrap(), quantize(b.view(), Scheme::MxFp8E4M3, &opts).unwrap());
//! let exact = gemm_reference::<f32>(&qa, &qb, &Epilogue::default()).unwrap();
//! let fast = gemm::<f32>(&qa, &qb, &Epilogue::default(), &GemmOptions::default()).unwrap();
//! // Small integers: every partial sum is exact, so both equal A . B^T.
//! assert_eq!(exact, a.dot(&b.t()));
//! assert_eq!(fast, exact);
//! ```

#![warn(missing_docs)]

mod dequantize;
mod error;
mod fake;
mod gemm;
mod input;
mod kernels;
mod metrics;
mod options;
mod quantize;
mod scale;

pub use blockscale_formats::{FloatKind, GlobalScale, QuantizedMatrix, Source, nvfp4_alpha};
pub use dequantize::{DequantizeOptions, dequantize, dequantize_into, dequantize_slice, dequantize_with};
pub use error::CpuError;
pub use fake::fake_quantize;
pub use gemm::{
    Activation, ActivationPrecision, Epilogue, GemmOptions, PanelWeights, gemm, gemm_reference, gemm_weight_only,
    gemm_weight_only_panels, gemm_weight_only_reference, gemv, gemv_panels, vbmi_available, vnni_available,
};
pub use input::Input;
pub use kernels::{avx2_available, avx512_available};
pub use metrics::{ErrorMetrics, error_metrics, error_metrics_slice};
pub use options::{GlobalScaleSource, NonFinite, NvFp4Recipe, QuantizeOptions, Simd};
pub use quantize::{quantize, quantize_into, quantize_slice};

/// Direct access to the element kernels, for the crate's own tests (which compare the
/// SIMD and portable paths on every f32 input). Not part of the API.
#[doc(hidden)]
pub mod __test_hooks {
    use blockscale_formats::{ElementFormat, Source};

    use crate::kernels::{self, Codes, Isa, RowBlocks};
    use crate::scale::Op;
    use crate::{CpuError, Simd};

    /// Encodes `xs` (a multiple of 32 values) as one block per 32 with factor `factor`,
    /// multiplying (`div = false`) or dividing.
    pub fn encode(simd: Simd, element: ElementFormat, div: bool, xs: &[f32], factor: f32) -> Result<Vec<u8>, CpuError> {
        let target = element;
        let mut out = vec![0u8; xs.len() / target.per_byte()];
        let factors = vec![factor; xs.len() / 32];
        let op = if div { Op::Div } else { Op::Mul };
        kernels::encode_row(Isa::select(simd)?, xs, RowBlocks { block: 32, factors: &factors, target }, op, &mut out);
        Ok(out)
    }

    /// Decodes codes (one block per 32 elements, one code per byte except E2M1/INT4) with
    /// block scale `scale` and post factor `post`.
    pub fn decode<O: Source>(
        simd: Simd,
        element: ElementFormat,
        codes: &[u8],
        scale: f32,
        post: f32,
    ) -> Result<Vec<O>, CpuError> {
        let target = element;
        let n = codes.len() * target.per_byte();
        let mut out = vec![O::default(); n];
        let scales = vec![scale; n / 32];
        kernels::decode_row(
            Isa::select(simd)?,
            codes,
            RowBlocks { block: 32, factors: &scales, target },
            post,
            &mut out,
        );
        Ok(out)
    }

    /// FP6 codes (one per byte, a multiple of 4) packed four per three bytes.
    pub fn pack_fp6(simd: Simd, codes: &[u8]) -> Result<Vec<u8>, CpuError> {
        let mut out = vec![0u8; codes.len() / 4 * 3];
        kernels::pack_fp6(Isa::select(simd)?, codes, &mut out);
        Ok(out)
    }

    /// Packed FP6 bytes (a multiple of 3) unpacked to one code per byte.
    pub fn unpack_fp6(simd: Simd, packed: &[u8]) -> Result<Vec<u8>, CpuError> {
        let mut out = vec![0u8; packed.len() / 3 * 4];
        kernels::unpack_fp6(Isa::select(simd)?, packed, &mut out);
        Ok(out)
    }

    /// NVFP4 (LightX2V) block scales and factors for a row of amax bit patterns.
    pub fn nvfp4_scales(simd: Simd, amax: &[u32], g: f32) -> Result<(Vec<u8>, Vec<f32>), CpuError> {
        let mut s = vec![0u8; amax.len()];
        let mut f = vec![0f32; amax.len()];
        kernels::nvfp4_scales(Isa::select(simd)?, amax, g, crate::NvFp4Recipe::LightX2V, &mut s, &mut f);
        Ok((s, f))
    }
}
