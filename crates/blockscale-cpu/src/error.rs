//! The CPU backend's error type.

use blockscale_formats::FormatError;

/// Everything the CPU backend can refuse, with the offending values and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    /// A shape, layout, scale or buffer problem found by the formats layer.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A NaN or infinity in the input under [`crate::NonFinite::Error`].
    #[error(
        "input holds {value} at row {row}, column {col}; clean the data, or quantize with \
         NonFinite::Poison to store the block holding it as NaN"
    )]
    NonFinite {
        /// Row of the first non-finite value (in row order).
        row: usize,
        /// Column of that value.
        col: usize,
        /// The value.
        value: f32,
    },
    /// A flat input or output whose length is not `rows * k`.
    #[error("{what} has {actual} elements but the shape [{rows}, {k}] needs {expected}")]
    SliceLength {
        /// Which buffer.
        what: &'static str,
        /// Rows of the shape.
        rows: usize,
        /// K of the shape.
        k: usize,
        /// `rows * k`.
        expected: usize,
        /// Its length.
        actual: usize,
    },
    /// A caller-provided byte buffer of the wrong length ([`crate::quantize_into`]).
    #[error("{what} buffer has {actual} bytes but {scheme} [{rows}, {k}] needs {expected}")]
    BufferLength {
        /// Which buffer: `"data"` or `"scales"`.
        what: &'static str,
        /// The scheme.
        scheme: blockscale_formats::Scheme,
        /// Rows of the shape.
        rows: usize,
        /// K of the shape.
        k: usize,
        /// Bytes it needs.
        expected: usize,
        /// Bytes it has.
        actual: usize,
    },
    /// An output array whose shape differs from the quantized matrix's.
    #[error("output is [{}, {}] but the quantized matrix is [{}, {}]", actual.0, actual.1, expected.0, expected.1)]
    OutputShape {
        /// The matrix's shape.
        expected: (usize, usize),
        /// The output's shape.
        actual: (usize, usize),
    },
    /// Two arrays compared element by element have different shapes.
    #[error("cannot compare a [{}, {}] array with a [{}, {}] array", a.0, a.1, b.0, b.1)]
    ShapeMismatch {
        /// The first shape.
        a: (usize, usize),
        /// The second shape.
        b: (usize, usize),
    },
    /// Two quantized schemes that do not multiply with each other.
    #[error("cannot multiply {a} by {b}: {hint}")]
    UnsupportedPair {
        /// Scheme of A.
        a: blockscale_formats::Scheme,
        /// Scheme of B.
        b: blockscale_formats::Scheme,
        /// What does work.
        hint: &'static str,
    },
    /// The operands of a product disagree on K.
    #[error("A has K = {a} but B has K = {b}; both operands are K-major with the same K")]
    KMismatch {
        /// K of A (the activations).
        a: usize,
        /// K of B (the weights).
        b: usize,
    },
    /// A bias whose length is not N.
    #[error("the bias has {actual} values but the product has N = {expected} columns")]
    BiasLength {
        /// N.
        expected: usize,
        /// The bias length.
        actual: usize,
    },
    /// A NaN or infinite bias value.
    #[error("bias[{index}] is {value}; the bias must be finite")]
    NonFiniteBias {
        /// Position in the bias.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A NaN or infinite `alpha`.
    #[error("alpha is {0}; it must be finite")]
    InvalidAlpha(f32),
    /// A SIMD path was forced that this CPU does not have.
    #[error("the {0} path was requested but this CPU lacks it; use Simd::Auto or Simd::Portable")]
    SimdUnavailable(&'static str),
    /// Panel weights asked of a matrix they do not hold.
    #[error(
        "panel weights are built from row-major NVFP4, MXFP4, INT4 (G32 or G128), MXFP6 E2M3, \
         MXFP8 E4M3 or FP8 block matrices, not {scheme} with {layout} data; multiply it as it is \
         with gemm_weight_only"
    )]
    UnsupportedPanel {
        /// The matrix's scheme.
        scheme: blockscale_formats::Scheme,
        /// Its data layout.
        layout: blockscale_formats::DataLayout,
    },
    /// Panel weights multiplied with exact activations.
    #[error(
        "panel weights multiply int8 activations: set GemmOptions::activations to \
         ActivationPrecision::Int8Blocks, or multiply the row-major matrix with gemm_weight_only for \
         exact activations"
    )]
    PanelNeedsInt8,
}
