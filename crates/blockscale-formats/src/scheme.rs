//! Schemes as data: element format + block shape + scale format + per-tensor scale.

use crate::error::{check_multiple, mul};
use crate::{ElementFormat, FormatError, ScaleLayout};

/// The format of a scheme's block scales.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ScaleFormat {
    /// E4M3 as an unsigned scale ([`crate::UE4M3`]), one byte.
    UE4M3,
    /// Power of two ([`crate::UE8M0`]), one byte.
    UE8M0,
    /// IEEE f32, four bytes.
    F32,
    /// IEEE f16, two bytes.
    F16,
}

impl ScaleFormat {
    /// Bytes per scale.
    pub const fn bytes(self) -> usize {
        match self {
            Self::UE4M3 | Self::UE8M0 => 1,
            Self::F16 => 2,
            Self::F32 => 4,
        }
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::UE4M3 => "ue4m3",
            Self::UE8M0 => "ue8m0",
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }
}

/// The block shape of DeepSeek-style FP8 quantization.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Fp8Tile {
    /// One row by 128 K-elements: activations, quantized per token.
    Row1x128,
    /// 128 rows by 128 K-elements: weights, as DeepSeek-V3 checkpoints store them.
    Tile128x128,
}

/// A complete quantization recipe (DESIGN.md vocabulary).
///
/// | scheme | element | block (rows x K) | scale | per-tensor scale |
/// |---|---|---|---|---|
/// | `NvFp4` | E2M1 | 1 x 16 | UE4M3 | f32 |
/// | `MxFp4` | E2M1 | 1 x 32 | UE8M0 | - |
/// | `MxFp6E2M3` | E2M3 | 1 x 32 | UE8M0 | - |
/// | `MxFp6E3M2` | E3M2 | 1 x 32 | UE8M0 | - |
/// | `MxFp8E4M3` | E4M3 | 1 x 32 | UE8M0 | - |
/// | `MxFp8E5M2` | E5M2 | 1 x 32 | UE8M0 | - |
/// | `Fp8Block(Row1x128)` | E4M3 | 1 x 128 | f32 | - |
/// | `Fp8Block(Tile128x128)` | E4M3 | 128 x 128 | f32 | - |
/// | `Int4G32` | Int4 (offset-8) | 1 x 32 | f16 | - |
/// | `Int4G128` | Int4 (offset-8) | 1 x 128 | f16 | - |
///
/// Quantization runs along the last dimension, K, which must be a multiple of the
/// block's K extent. `Fp8Block(Tile128x128)` covers a partial last row block (its
/// scale grid is `ceil(rows/128) x K/128`, as DeepSeek checkpoints store it).
///
/// ```
/// use blockscale_formats::{Scheme, ScaleLayout};
/// let s: Scheme = "nvfp4".parse().unwrap();
/// let shape = s.shape(4096, 11008).unwrap();
/// assert_eq!(shape.scale_cols, 688);
/// assert_eq!(shape.row_bytes, 5504);
/// assert_eq!(shape.scale_len(ScaleLayout::Swizzled128x4).unwrap(), 4096 * 688);
/// assert!(s.shape(4096, 100).is_err()); // K not a multiple of 16
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Scheme {
    /// NVIDIA NVFP4: E2M1 x UE4M3 per 16, with an f32 per-tensor scale.
    NvFp4,
    /// OCP MXFP4: E2M1 x UE8M0 per 32.
    MxFp4,
    /// OCP MXFP6 with E2M3 elements.
    MxFp6E2M3,
    /// OCP MXFP6 with E3M2 elements.
    MxFp6E3M2,
    /// OCP MXFP8 with E4M3 elements.
    MxFp8E4M3,
    /// OCP MXFP8 with E5M2 elements.
    MxFp8E5M2,
    /// DeepSeek-V3 FP8: E4M3 with f32 scales `amax / 448` per tile.
    Fp8Block(Fp8Tile),
    /// Weight-only INT4, offset-8, f16 scale `amax / 7` per 32.
    Int4G32,
    /// Weight-only INT4 with the same rule per 128: the group of most GPTQ, AWQ and
    /// compressed-tensors W4A16 checkpoints.
    Int4G128,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Self; 10] = [
        Self::NvFp4,
        Self::MxFp4,
        Self::MxFp6E2M3,
        Self::MxFp6E3M2,
        Self::MxFp8E4M3,
        Self::MxFp8E5M2,
        Self::Fp8Block(Fp8Tile::Row1x128),
        Self::Fp8Block(Fp8Tile::Tile128x128),
        Self::Int4G32,
        Self::Int4G128,
    ];

    /// The element format.
    pub const fn element(self) -> ElementFormat {
        match self {
            Self::NvFp4 | Self::MxFp4 => ElementFormat::E2M1,
            Self::MxFp6E2M3 => ElementFormat::E2M3,
            Self::MxFp6E3M2 => ElementFormat::E3M2,
            Self::MxFp8E4M3 | Self::Fp8Block(_) => ElementFormat::E4M3,
            Self::MxFp8E5M2 => ElementFormat::E5M2,
            Self::Int4G32 | Self::Int4G128 => ElementFormat::Int4,
        }
    }

    /// Elements per block along K.
    pub const fn block_size(self) -> usize {
        match self {
            Self::NvFp4 => 16,
            Self::Fp8Block(_) | Self::Int4G128 => 128,
            _ => 32,
        }
    }

    /// Rows per block (128 for weight tiles, 1 otherwise).
    pub const fn block_rows(self) -> usize {
        match self {
            Self::Fp8Block(Fp8Tile::Tile128x128) => 128,
            _ => 1,
        }
    }

    /// The scale format.
    pub const fn scale_format(self) -> ScaleFormat {
        match self {
            Self::NvFp4 => ScaleFormat::UE4M3,
            Self::Fp8Block(_) => ScaleFormat::F32,
            Self::Int4G32 | Self::Int4G128 => ScaleFormat::F16,
            _ => ScaleFormat::UE8M0,
        }
    }

    /// Whether the scheme carries an f32 per-tensor (global) scale.
    pub const fn has_global_scale(self) -> bool {
        matches!(self, Self::NvFp4)
    }

    /// Whether a quantized `self` (the M x K operand) multiplies a quantized `other`
    /// (N x K): the block shapes along K and the scale kinds must agree, as in the
    /// hardware's block-scaled MMAs. NVFP4 x NVFP4, any MX x any MX, FP8 block x FP8
    /// block; INT4 is weight-only. The error is a hint for the user.
    ///
    /// ```
    /// use blockscale_formats::Scheme;
    /// assert!(Scheme::MxFp6E2M3.pairs_with(Scheme::MxFp8E4M3).is_ok());
    /// assert!(Scheme::NvFp4.pairs_with(Scheme::MxFp4).is_err());
    /// ```
    pub fn pairs_with(self, other: Self) -> Result<(), &'static str> {
        const fn family(s: Scheme) -> Option<u8> {
            match s {
                Scheme::NvFp4 => Some(0),
                Scheme::MxFp4 | Scheme::MxFp6E2M3 | Scheme::MxFp6E3M2 | Scheme::MxFp8E4M3 | Scheme::MxFp8E5M2 => {
                    Some(1)
                }
                Scheme::Fp8Block(_) => Some(2),
                Scheme::Int4G32 | Scheme::Int4G128 => None,
            }
        }
        match (family(self), family(other)) {
            (Some(x), Some(y)) if x == y => Ok(()),
            _ if self.element() == ElementFormat::Int4 || other.element() == ElementFormat::Int4 => {
                Err("INT4 is weight-only: multiply f32/f16/bf16 activations with gemm_weight_only")
            }
            _ => Err(
                "quantized pairs must share a block shape and scale kind: NVFP4 x NVFP4, MX x MX, FP8 block x FP8 block",
            ),
        }
    }

    /// Whether scales can be stored in `layout`: every scheme has `Linear`;
    /// `Swizzled128x4` needs one-byte scales per single-row block (NVFP4 and MX).
    pub const fn supports_layout(self, layout: ScaleLayout) -> bool {
        match layout {
            ScaleLayout::Linear => true,
            ScaleLayout::Swizzled128x4 => self.scale_format().bytes() == 1 && self.block_rows() == 1,
        }
    }

    /// Storage bits per element, scales included (per-tensor scale excluded): 4.5 for
    /// NVFP4, 4.25 for MXFP4, 8.25 for MXFP8, 4.5 for Int4G32, 4.125 for Int4G128.
    pub fn bits_per_element(self) -> f64 {
        let scale_bits = (self.scale_format().bytes() * 8) as f64;
        self.element().bits() as f64 + scale_bits / (self.block_size() * self.block_rows()) as f64
    }

    /// The canonical name (`"nvfp4"`, `"mxfp6-e2m3"`, `"fp8-block-128x128"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::NvFp4 => "nvfp4",
            Self::MxFp4 => "mxfp4",
            Self::MxFp6E2M3 => "mxfp6-e2m3",
            Self::MxFp6E3M2 => "mxfp6-e3m2",
            Self::MxFp8E4M3 => "mxfp8-e4m3",
            Self::MxFp8E5M2 => "mxfp8-e5m2",
            Self::Fp8Block(Fp8Tile::Row1x128) => "fp8-block-1x128",
            Self::Fp8Block(Fp8Tile::Tile128x128) => "fp8-block-128x128",
            Self::Int4G32 => "int4-g32",
            Self::Int4G128 => "int4-g128",
        }
    }

    /// Validates a `rows x k` matrix for this scheme and returns its storage shape.
    ///
    /// # Errors
    /// [`FormatError::EmptyShape`] if a dimension is zero;
    /// [`FormatError::NotMultiple`] if `k` is not a multiple of [`Self::block_size`];
    /// [`FormatError::TooLarge`] if a size overflows `usize`.
    pub fn shape(self, rows: usize, k: usize) -> Result<QuantShape, FormatError> {
        if rows == 0 || k == 0 {
            return Err(FormatError::EmptyShape { rows, cols: k });
        }
        check_multiple("K", k, self.block_size(), self.block_reason())?;
        let bits = self.element().bits() as usize;
        // k is a multiple of 16 or more, so k * bits / 8 is whole for 4, 6 and 8 bits.
        let row_bytes = mul(k, bits, "packed row")? / 8;
        let data_bytes = mul(rows, row_bytes, "packed data")?;
        Ok(QuantShape {
            scheme: self,
            rows,
            k,
            row_bytes,
            data_bytes,
            scale_rows: rows.div_ceil(self.block_rows()),
            scale_cols: k / self.block_size(),
        })
    }

    const fn block_reason(self) -> &'static str {
        match self {
            Self::NvFp4 => "NVFP4 scales blocks of 16 elements along K",
            Self::Fp8Block(_) => "FP8 block scales cover 128 elements along K",
            Self::Int4G32 => "INT4-G32 scales groups of 32 elements along K",
            Self::Int4G128 => "INT4-G128 scales groups of 128 elements along K",
            _ => "MX formats scale blocks of 32 elements along K",
        }
    }
}

impl core::fmt::Display for Scheme {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

impl core::str::FromStr for Scheme {
    type Err = FormatError;

    /// Parses a canonical name (case-insensitive, `_` accepted for `-`). `fp8-block`
    /// alone means the 128x128 weight tiles checkpoints use.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let matches = |name: &str| {
            s.len() == name.len()
                && s.bytes().zip(name.bytes()).all(|(a, b)| a.to_ascii_lowercase() == b || (a == b'_' && b == b'-'))
        };
        if matches("fp8-block") {
            return Ok(Self::Fp8Block(Fp8Tile::Tile128x128));
        }
        Self::ALL.into_iter().find(|sch| matches(sch.name())).ok_or(FormatError::UnknownScheme)
    }
}

/// The validated storage shape of a `rows x k` matrix under a scheme.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct QuantShape {
    /// The scheme.
    pub scheme: Scheme,
    /// Logical rows (M or N).
    pub rows: usize,
    /// Logical K.
    pub k: usize,
    /// Packed element bytes per row (`k * bits / 8`).
    pub row_bytes: usize,
    /// Packed element bytes in all (`rows * row_bytes`).
    pub data_bytes: usize,
    /// Rows of the logical scale matrix (`ceil(rows / block_rows)`).
    pub scale_rows: usize,
    /// Columns of the logical scale matrix (`k / block_size`).
    pub scale_cols: usize,
}

impl QuantShape {
    /// Stored scale entries in `layout` (padding included).
    ///
    /// # Errors
    /// [`FormatError::UnsupportedLayout`] if the scheme has no such layout;
    /// [`FormatError::TooLarge`] on overflow.
    pub fn scale_len(&self, layout: ScaleLayout) -> Result<usize, FormatError> {
        if !self.scheme.supports_layout(layout) {
            return Err(FormatError::UnsupportedLayout { scheme: self.scheme, layout });
        }
        layout.storage_len(self.scale_rows, self.scale_cols)
    }
}
