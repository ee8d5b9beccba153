//! Scale layouts: row-major `Linear` and the tensor cores' `Swizzled128x4`.
//!
//! A scale matrix has one entry per (row, K-block): `rows x cols` with
//! `cols = K / block_size`. [`ScaleLayout::Linear`] stores it row-major.
//! [`ScaleLayout::Swizzled128x4`] is the layout SM100/SM120 block-scaled MMAs read
//! (CUTLASS `Sm1xxBlockScaledConfig`, cuBLAS, `torch._scaled_mm`, FlashInfer, vLLM):
//! rows padded to a multiple of 128 and columns to a multiple of 4, zero-filled, viewed
//! as `[rows/128, 4, 32, cols/4, 4]` and permuted to `[rows/128, cols/4, 32, 4, 4]`.
//! Entry (r, c) lands at
//!
//! ```text
//! (r / 128) * (cols_padded / 4) * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4
//! ```
//!
//! Each 512-entry tile covers 128 rows x 4 columns; the four scales of one row for four
//! consecutive K-blocks are contiguous, which is the 32-bit scale operand one MMA takes.

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use crate::FormatError;
use crate::error::{check_len, mul};

/// Rows per swizzle tile.
pub const SWIZZLE_ROWS: usize = 128;
/// Scale columns per swizzle tile.
pub const SWIZZLE_COLS: usize = 4;
/// Entries per swizzle tile.
pub const SWIZZLE_TILE: usize = SWIZZLE_ROWS * SWIZZLE_COLS;

/// How a scale matrix is stored.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum ScaleLayout {
    /// Row-major `[rows, cols]`, no padding.
    #[default]
    Linear,
    /// The 5-D `[rows/128, cols/4, 32, 4, 4]` tensor-core layout, rows padded to 128 and
    /// columns to 4 with zero entries.
    Swizzled128x4,
}

impl ScaleLayout {
    /// Both layouts.
    pub const ALL: [Self; 2] = [Self::Linear, Self::Swizzled128x4];

    /// Lower-case name (`"linear"`, `"swizzled128x4"`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::Swizzled128x4 => "swizzled128x4",
        }
    }

    /// The stored (padded) shape `[rows', cols']` of a `rows x cols` scale matrix.
    ///
    /// # Errors
    /// [`FormatError::TooLarge`] if padding overflows `usize`.
    pub fn padded_shape(self, rows: usize, cols: usize) -> Result<(usize, usize), FormatError> {
        match self {
            Self::Linear => Ok((rows, cols)),
            Self::Swizzled128x4 => {
                let r = rows
                    .checked_next_multiple_of(SWIZZLE_ROWS)
                    .ok_or(FormatError::TooLarge { what: "padded scale rows" })?;
                let c = cols
                    .checked_next_multiple_of(SWIZZLE_COLS)
                    .ok_or(FormatError::TooLarge { what: "padded scale columns" })?;
                Ok((r, c))
            }
        }
    }

    /// Number of stored entries for a `rows x cols` scale matrix, padding included.
    ///
    /// # Errors
    /// [`FormatError::TooLarge`] if the size overflows `usize`.
    pub fn storage_len(self, rows: usize, cols: usize) -> Result<usize, FormatError> {
        let (r, c) = self.padded_shape(rows, cols)?;
        mul(r, c, "scale storage")
    }

    /// Index of entry (row, col) of a matrix with `cols` logical columns.
    /// The caller keeps `row` and `col` in range.
    #[inline]
    pub const fn offset(self, row: usize, col: usize, cols: usize) -> usize {
        match self {
            Self::Linear => row * cols + col,
            Self::Swizzled128x4 => swizzled_offset(row, col, cols),
        }
    }
}

impl core::fmt::Display for ScaleLayout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

/// Index of scale (row, col) in the `Swizzled128x4` layout of a matrix with `cols`
/// logical columns (padding is implied).
#[inline]
pub const fn swizzled_offset(row: usize, col: usize, cols: usize) -> usize {
    let k_tiles = cols.div_ceil(SWIZZLE_COLS);
    (row / SWIZZLE_ROWS) * k_tiles * SWIZZLE_TILE
        + (col / SWIZZLE_COLS) * SWIZZLE_TILE
        + (row % 32) * 16
        + ((row % SWIZZLE_ROWS) / 32) * 4
        + col % SWIZZLE_COLS
}

/// The (row, column) that index `offset` of a `Swizzled128x4` buffer holds, for a
/// matrix with `cols` logical columns; positions past the logical shape are padding.
/// The inverse of [`swizzled_offset`].
#[inline]
pub const fn swizzled_position(offset: usize, cols: usize) -> (usize, usize) {
    let k_tiles = cols.div_ceil(SWIZZLE_COLS);
    let tile = offset / SWIZZLE_TILE;
    let within = offset % SWIZZLE_TILE;
    let (band, k_tile) = match (tile.checked_div(k_tiles), tile.checked_rem(k_tiles)) {
        (Some(band), Some(k_tile)) => (band, k_tile),
        _ => (0, 0),
    };
    let lane = within % 16;
    let row = band * SWIZZLE_ROWS + (lane / 4) * 32 + within / 16;
    (row, k_tile * SWIZZLE_COLS + lane % 4)
}

/// How the packed element bytes of a `QuantizedMatrix` are ordered.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum DataLayout {
    /// Row-major `[rows, row_bytes]`: each row's codes packed along K (FP4 low nibble
    /// first, FP6 as the LSB-first bitstream, INT4 eight per little-endian u32).
    #[default]
    RowMajor,
    /// The block-interleaved `[k/32, rows, 4]` u32 layout for 128-bit-load GEMV kernels
    /// (4-bit elements, K a multiple of 32), stored as little-endian bytes. See
    /// [`crate::pack::to_block_interleaved`].
    BlockInterleaved,
}

impl DataLayout {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::RowMajor => "row-major",
            Self::BlockInterleaved => "block-interleaved",
        }
    }
}

impl core::fmt::Display for DataLayout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

/// Rewrites a row-major `rows x cols` scale matrix into the `Swizzled128x4` layout;
/// `out` must hold [`ScaleLayout::storage_len`] entries, and its padding is set to
/// `T::default()` (the zero byte for UE4M3 and UE8M0).
///
/// # Errors
/// [`FormatError::LengthMismatch`] if `linear` or `out` has the wrong length.
pub fn swizzle<T: Copy + Default>(linear: &[T], rows: usize, cols: usize, out: &mut [T]) -> Result<(), FormatError> {
    check_len("linear scales", mul(rows, cols, "scale matrix")?, linear.len())?;
    check_len("swizzled scales", ScaleLayout::Swizzled128x4.storage_len(rows, cols)?, out.len())?;
    out.fill(T::default());
    for (r, row) in linear.chunks_exact(cols.max(1)).enumerate().take(rows) {
        let row_base = swizzled_offset(r, 0, cols);
        for (t, group) in row.chunks(SWIZZLE_COLS).enumerate() {
            let dst = row_base + t * SWIZZLE_TILE;
            out[dst..dst + group.len()].copy_from_slice(group);
        }
    }
    Ok(())
}

/// Reads the `rows x cols` logical scales out of a `Swizzled128x4` buffer into a
/// row-major `out` (padding is dropped).
///
/// # Errors
/// [`FormatError::LengthMismatch`] if `swizzled` or `out` has the wrong length.
pub fn unswizzle<T: Copy>(swizzled: &[T], rows: usize, cols: usize, out: &mut [T]) -> Result<(), FormatError> {
    check_len("swizzled scales", ScaleLayout::Swizzled128x4.storage_len(rows, cols)?, swizzled.len())?;
    check_len("linear scales", mul(rows, cols, "scale matrix")?, out.len())?;
    for (r, row) in out.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
        let row_base = swizzled_offset(r, 0, cols);
        for (t, group) in row.chunks_mut(SWIZZLE_COLS).enumerate() {
            let src = row_base + t * SWIZZLE_TILE;
            group.copy_from_slice(&swizzled[src..src + group.len()]);
        }
    }
    Ok(())
}

/// Converts a scale matrix between layouts (`out` sized for `to`).
///
/// # Errors
/// [`FormatError::LengthMismatch`] if `src` or `out` has the wrong length.
pub fn convert<T: Copy + Default>(
    src: &[T],
    from: ScaleLayout,
    to: ScaleLayout,
    rows: usize,
    cols: usize,
    out: &mut [T],
) -> Result<(), FormatError> {
    match (from, to) {
        (ScaleLayout::Linear, ScaleLayout::Swizzled128x4) => swizzle(src, rows, cols, out),
        (ScaleLayout::Swizzled128x4, ScaleLayout::Linear) => unswizzle(src, rows, cols, out),
        _ => {
            check_len("source scales", from.storage_len(rows, cols)?, src.len())?;
            check_len("output scales", to.storage_len(rows, cols)?, out.len())?;
            out.copy_from_slice(src);
            Ok(())
        }
    }
}

/// [`convert`] into a new vector.
///
/// # Errors
/// [`FormatError::LengthMismatch`] if `src` has the wrong length.
#[cfg(feature = "alloc")]
pub fn convert_vec<T: Copy + Default>(
    src: &[T],
    from: ScaleLayout,
    to: ScaleLayout,
    rows: usize,
    cols: usize,
) -> Result<Vec<T>, FormatError> {
    let mut out = alloc::vec![T::default(); to.storage_len(rows, cols)?];
    convert(src, from, to, rows, cols, &mut out)?;
    Ok(out)
}
