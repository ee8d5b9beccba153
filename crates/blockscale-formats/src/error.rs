//! The formats crate's error type.

use crate::{DataLayout, ScaleFormat, ScaleLayout, Scheme};

/// Everything that can go wrong in this crate: each variant carries the offending
/// values, and its message says what to change.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FormatError {
    /// A length or dimension is not a multiple of what the format requires.
    NotMultiple {
        /// What was measured (for example `"K"` or `"E2M1 code count"`).
        what: &'static str,
        /// Its value.
        value: usize,
        /// The required multiple.
        multiple: usize,
        /// Why the multiple is required.
        reason: &'static str,
    },
    /// A buffer has the wrong length for the shape it is used with.
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// The length the shape implies.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A shape with a zero dimension.
    EmptyShape {
        /// Rows given.
        rows: usize,
        /// Columns (K) given.
        cols: usize,
    },
    /// A size computation overflowed `usize`.
    TooLarge {
        /// What was being sized.
        what: &'static str,
    },
    /// The scheme's scales cannot be stored in this layout.
    UnsupportedLayout {
        /// The scheme.
        scheme: Scheme,
        /// The layout asked for.
        layout: ScaleLayout,
    },
    /// A name that is not a scheme (see [`Scheme::ALL`]).
    UnknownScheme,
    /// Scales of the wrong number type for the scheme.
    ScaleTypeMismatch {
        /// The scheme.
        scheme: Scheme,
        /// The scale format it uses.
        expected: ScaleFormat,
    },
    /// The scheme needs a per-tensor (global) scale and none was given.
    MissingGlobalScale {
        /// The scheme.
        scheme: Scheme,
    },
    /// A per-tensor (global) scale was given for a scheme that has none.
    UnexpectedGlobalScale {
        /// The scheme.
        scheme: Scheme,
    },
    /// A per-tensor scale (or amax) that is zero, negative, NaN or infinite, or whose
    /// reciprocal is not finite.
    InvalidGlobalScale {
        /// Which quantity (`"encode scale"`, `"decode scale"`, `"amax"`).
        what: &'static str,
        /// Its value.
        value: f32,
    },
    /// The element data cannot be stored in this layout for this scheme.
    UnsupportedDataLayout {
        /// The scheme.
        scheme: Scheme,
        /// The layout asked for.
        layout: DataLayout,
    },
    /// A quantization option that does not apply to the scheme.
    OptionNotApplicable {
        /// The scheme.
        scheme: Scheme,
        /// The option given.
        option: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A padding entry of a swizzled scale buffer is not zero.
    NonZeroPadding {
        /// Index of the first non-zero padding entry.
        index: usize,
    },
}

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::NotMultiple { what, value, multiple, reason } => {
                let up = value.div_ceil(multiple) * multiple;
                write!(
                    f,
                    "{what} = {value} is not a multiple of {multiple} ({reason}); \
                     pad it to {up} or choose a shape that divides evenly"
                )
            }
            Self::LengthMismatch { what, expected, actual } => {
                write!(f, "{what} has {actual} elements but the shape needs exactly {expected}")
            }
            Self::EmptyShape { rows, cols } => {
                write!(f, "shape [{rows}, {cols}] is empty; every dimension must be at least 1")
            }
            Self::TooLarge { what } => {
                write!(f, "{what} does not fit in usize; use a smaller shape")
            }
            Self::UnsupportedLayout { scheme, layout } => write!(
                f,
                "{scheme} scales cannot be stored {layout}: only schemes with one-byte scales \
                 (UE4M3 or UE8M0) per row block have a swizzled layout; use the linear layout"
            ),
            Self::UnknownScheme => {
                f.write_str("unknown scheme; expected one of ")?;
                for (i, scheme) in crate::Scheme::ALL.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", scheme.name())?;
                    if *scheme == crate::Scheme::Fp8Block(crate::Fp8Tile::Tile128x128) {
                        f.write_str(" (or fp8-block)")?;
                    }
                }
                Ok(())
            }
            Self::ScaleTypeMismatch { scheme, expected } => {
                write!(f, "{scheme} scales must be {}; convert them or pick the scheme they belong to", expected.name())
            }
            Self::MissingGlobalScale { scheme } => {
                write!(f, "{scheme} needs a per-tensor (global) scale; compute it from the tensor's amax or pass one")
            }
            Self::UnexpectedGlobalScale { scheme } => {
                write!(f, "{scheme} has no per-tensor (global) scale; leave it out")
            }
            Self::InvalidGlobalScale { what, value } => write!(
                f,
                "global {what} {value} is not usable: it must be finite and greater than zero, \
                 with a finite reciprocal"
            ),
            Self::UnsupportedDataLayout { scheme, layout } => write!(
                f,
                "{scheme} data cannot be stored {layout}: the block-interleaved layout holds 4-bit elements \
                 with K a multiple of 32; use the row-major layout"
            ),
            Self::OptionNotApplicable { scheme, option, hint } => {
                write!(f, "{option} does not apply to {scheme}: {hint}")
            }
            Self::NonZeroPadding { index } => write!(
                f,
                "swizzled scale padding at index {index} is not zero; padding must be zero-filled \
                 (re-swizzle the scales with blockscale_formats::layout::swizzle)"
            ),
        }
    }
}

impl core::error::Error for FormatError {}

/// `a * b`, or [`FormatError::TooLarge`].
pub(crate) fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, FormatError> {
    a.checked_mul(b).ok_or(FormatError::TooLarge { what })
}

/// Fails with [`FormatError::LengthMismatch`] unless `actual == expected`.
pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), FormatError> {
    if expected == actual { Ok(()) } else { Err(FormatError::LengthMismatch { what, expected, actual }) }
}

/// Fails with [`FormatError::NotMultiple`] unless `multiple` divides `value`.
pub(crate) fn check_multiple(
    what: &'static str,
    value: usize,
    multiple: usize,
    reason: &'static str,
) -> Result<(), FormatError> {
    if value.is_multiple_of(multiple) {
        Ok(())
    } else {
        Err(FormatError::NotMultiple { what, value, multiple, reason })
    }
}
