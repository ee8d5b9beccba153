//! Quantization recipe choices shared by every backend: NVFP4's per-tensor scale and
//! block recipe, and what NaN / Inf in the input do.

use crate::{DataLayout, FormatError, QuantShape, ScaleLayout};

/// NVFP4's per-tensor scale, as two f32 factors: `encode`, what quantization multiplies
/// by (the kernels' `SFScale`, `2688 / amax` for a tensor's own amax; compressed-tensors
/// stores it as `weight_global_scale`), and `decode`, what dequantization multiplies
/// by (ModelOpt stores it as `weight_scale_2` / `input_scale`, `amax / 2688`).
///
/// Each constructor takes one factor exactly and derives the other as its correctly
/// rounded reciprocal, so a checkpoint's stored value is used as stored.
///
/// ```
/// use blockscale_formats::GlobalScale;
/// let g = GlobalScale::from_amax(448.0).unwrap();
/// assert_eq!(g.encode(), 6.0);
/// assert_eq!(GlobalScale::from_amax(0.0).unwrap().encode(), 1.0); // an all-zero tensor
/// assert!(GlobalScale::from_encode(-1.0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GlobalScale {
    encode: f32,
    decode: f32,
}

/// `6 * 448`: the largest E2M1 value times the largest UE4M3 scale.
pub const NVFP4_AMAX_TO_SCALE: f32 = 2688.0;

impl GlobalScale {
    /// From the encode factor (`SFScale`); `decode = 1 / encode`.
    ///
    /// # Errors
    /// [`FormatError::InvalidGlobalScale`] unless `encode` and its reciprocal are finite
    /// and positive.
    pub fn from_encode(encode: f32) -> Result<Self, FormatError> {
        Self::checked(encode, 1.0 / encode, "encode scale", encode)
    }

    /// From the decode factor (`amax / 2688`, ModelOpt's `weight_scale_2`);
    /// `encode = 1 / decode`.
    ///
    /// # Errors
    /// [`FormatError::InvalidGlobalScale`] unless `decode` and its reciprocal are finite
    /// and positive.
    pub fn from_decode(decode: f32) -> Result<Self, FormatError> {
        Self::checked(1.0 / decode, decode, "decode scale", decode)
    }

    /// From a tensor's (or a calibration's) amax: `encode = 2688 / amax`, capped at
    /// `f32::MAX`; an amax of 0 (an all-zero tensor) gives `encode = 1`, as
    /// TransformerEngine does.
    ///
    /// # Errors
    /// [`FormatError::InvalidGlobalScale`] if `amax` is negative, NaN or infinite.
    pub fn from_amax(amax: f32) -> Result<Self, FormatError> {
        if !(amax.is_finite() && amax >= 0.0) {
            return Err(FormatError::InvalidGlobalScale { what: "amax", value: amax });
        }
        if amax == 0.0 {
            return Self::from_encode(1.0);
        }
        let encode = (NVFP4_AMAX_TO_SCALE / amax).min(f32::MAX);
        Self::checked(encode, 1.0 / encode, "amax", amax)
    }

    fn checked(encode: f32, decode: f32, what: &'static str, value: f32) -> Result<Self, FormatError> {
        let ok = |x: f32| x.is_finite() && x > 0.0;
        if ok(encode) && ok(decode) {
            Ok(Self { encode, decode })
        } else {
            Err(FormatError::InvalidGlobalScale { what, value })
        }
    }

    /// The encode factor quantization multiplies by.
    pub const fn encode(&self) -> f32 {
        self.encode
    }

    /// The decode factor dequantization multiplies by.
    pub const fn decode(&self) -> f32 {
        self.decode
    }
}

/// The GEMM epilogue factor `alpha = 1 / (encode_a * encode_b)` for two NVFP4 operands
/// (vLLM's and LightX2V's formula), one f32 multiply and one division.
pub fn nvfp4_alpha(a: GlobalScale, b: GlobalScale) -> f32 {
    1.0 / (a.encode * b.encode)
}

/// How NVFP4 computes each block's scale and element multiplier from the block amax
/// and the per-tensor encode scale `g` (docs/NUMERICS.md has the derivations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NvFp4Recipe {
    /// The LightX2V kernel (DESIGN.md rule 3), blockscale's reference:
    /// `sf = ue4m3(g * (amax * C6))`, `mult = sf != 0 ? min(g * (1 / sf), f32::MAX) : 0`,
    /// with `C6 = RN(1/6)`.
    #[default]
    LightX2V,
    /// TransformerEngine's recipe (FlashInfer's "TE-exact" mode):
    /// `sf = ue4m3(amax != 0 ? min(amax * (g * C6), f32::MAX) : 0)`,
    /// `mult = amax != 0 ? min(1 / (sf * (1 / g)), f32::MAX) : 0`.
    TransformerEngine,
}

/// Where NVFP4's per-tensor scale comes from.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum GlobalScaleSource {
    /// From the input tensor's own amax (finite values only): `encode = 2688 / amax`.
    #[default]
    TensorAmax,
    /// From a calibrated amax (for activations): `encode = 2688 / amax`.
    Amax(f32),
    /// A given scale (for example the `weight_scale_2` / `input_scale` of a checkpoint,
    /// via [`GlobalScale::from_decode`]).
    Given(GlobalScale),
}

/// What NaN and ±Inf in the input do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NonFinite {
    /// Refuse, naming the first one (in row order).
    #[default]
    Error,
    /// Quantize every block (for 128x128 FP8 tiles, every tile) holding one as a NaN
    /// block: its scale is the scale format's NaN and its codes are zero, so every
    /// element of the block dequantizes to NaN. Every backend does the same.
    Poison,
}

/// Checks that a quantization's layout and per-tensor-scale choices apply to its scheme
/// and shape; every backend calls this before quantizing.
///
/// # Errors
/// [`FormatError::OptionNotApplicable`] for a swizzled layout of a scheme without
/// one-byte scales, the block-interleaved data layout of a scheme without 4-bit elements
/// or with K not a multiple of 32, or a per-tensor scale for a scheme other than NVFP4.
pub fn check_recipe(
    shape: &QuantShape,
    scale_layout: ScaleLayout,
    data_layout: DataLayout,
    global_scale: &GlobalScaleSource,
) -> Result<(), FormatError> {
    let scheme = shape.scheme;
    if !scheme.supports_layout(scale_layout) {
        return Err(FormatError::OptionNotApplicable {
            scheme,
            option: "a swizzled scale layout",
            hint: "only NVFP4 and MX schemes (one-byte scales) can be swizzled; use ScaleLayout::Linear",
        });
    }
    if data_layout == DataLayout::BlockInterleaved && (scheme.element().bits() != 4 || !shape.k.is_multiple_of(32)) {
        return Err(FormatError::OptionNotApplicable {
            scheme,
            option: "the block-interleaved data layout",
            hint: "it holds 4-bit elements (NVFP4, MXFP4, INT4-G32) with K a multiple of 32; use DataLayout::RowMajor",
        });
    }
    if !scheme.has_global_scale() && *global_scale != GlobalScaleSource::TensorAmax {
        return Err(FormatError::OptionNotApplicable {
            scheme,
            option: "a per-tensor (global) scale",
            hint: "only NVFP4 has one; leave the global scale option at its default",
        });
    }
    Ok(())
}
