//! [`QuantizedMatrix`]: packed element bytes, scales, layouts, per-tensor scale and
//! logical shape, validated together. The one type that crosses crate boundaries.

use alloc::vec::Vec;

use half::f16;

use crate::error::check_len;
use crate::layout::swizzled_offset;
use crate::{
    DataLayout, FormatError, GlobalScale, QuantRequest, QuantShape, ScaleFormat, ScaleLayout, Scheme, UE4M3, UE8M0,
};

/// The scales of a [`QuantizedMatrix`], in the scheme's [`ScaleFormat`].
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleData {
    /// One byte per scale: UE4M3 (NVFP4) or UE8M0 (MX) codes.
    Bytes(Vec<u8>),
    /// f32 scales (FP8 block).
    F32(Vec<f32>),
    /// f16 scales (INT4-G32).
    F16(Vec<f16>),
}

impl ScaleData {
    /// Number of stored scales (padding included).
    pub fn len(&self) -> usize {
        match self {
            Self::Bytes(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
        }
    }

    /// Whether there are no scales.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn matches(&self, format: ScaleFormat) -> bool {
        matches!(
            (self, format),
            (Self::Bytes(_), ScaleFormat::UE4M3 | ScaleFormat::UE8M0)
                | (Self::F32(_), ScaleFormat::F32)
                | (Self::F16(_), ScaleFormat::F16)
        )
    }

    /// The value of stored scale `i`, decoded as `format` says (bytes are UE4M3 or UE8M0).
    fn value(&self, i: usize, format: ScaleFormat) -> f32 {
        match (self, format) {
            (Self::Bytes(v), ScaleFormat::UE4M3) => UE4M3::from_bits(v[i]).to_f32(),
            (Self::Bytes(v), _) => UE8M0::from_bits(v[i]).to_f32(),
            (Self::F32(v), _) => v[i],
            (Self::F16(v), _) => v[i].to_f32(),
        }
    }
}

/// Everything a [`QuantizedMatrix`] is made of, as plain public fields: build one and
/// hand it to [`QuantizedMatrix::from_parts`], which validates it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedParts {
    /// The scheme.
    pub scheme: Scheme,
    /// Logical rows (M or N).
    pub rows: usize,
    /// Logical K (the quantized dimension).
    pub k: usize,
    /// Packed element bytes.
    pub data: Vec<u8>,
    /// Order of `data`.
    pub data_layout: DataLayout,
    /// Scales, padding included for swizzled layouts.
    pub scales: ScaleData,
    /// Order of `scales`.
    pub scale_layout: ScaleLayout,
    /// The per-tensor scale (NVFP4 only).
    pub global_scale: Option<GlobalScale>,
}

/// A quantized matrix: packed element bytes, scales in a layout, an optional per-tensor
/// scale and the logical shape, consistent with each other by construction.
///
/// Build one with a quantizer (`blockscale-cpu`) or from parts
/// ([`QuantizedMatrix::from_parts`], which checks every length, the scale type, the
/// layouts, the global scale and that swizzle padding is zero).
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedMatrix {
    shape: QuantShape,
    data: Vec<u8>,
    data_layout: DataLayout,
    scales: ScaleData,
    scale_layout: ScaleLayout,
    global_scale: Option<GlobalScale>,
}

impl QuantizedMatrix {
    /// Validates the parts and assembles the matrix.
    ///
    /// # Errors
    /// - the shape errors of [`Scheme::shape`];
    /// - [`FormatError::LengthMismatch`] if `data` or `scales` has the wrong length;
    /// - [`FormatError::ScaleTypeMismatch`] if the scales are not the scheme's format;
    /// - [`FormatError::UnsupportedLayout`] / [`FormatError::UnsupportedDataLayout`] for
    ///   layouts the scheme cannot use;
    /// - [`FormatError::MissingGlobalScale`] / [`FormatError::UnexpectedGlobalScale`];
    /// - [`FormatError::NonZeroPadding`] if swizzle padding holds anything but zero.
    pub fn from_parts(parts: QuantizedParts) -> Result<Self, FormatError> {
        let QuantizedParts { scheme, rows, k, data, data_layout, scales, scale_layout, global_scale } = parts;
        let shape = scheme.shape(rows, k)?;
        check_len("quantized data bytes", shape.data_bytes, data.len())?;
        if data_layout == DataLayout::BlockInterleaved && (scheme.element().bits() != 4 || !k.is_multiple_of(32)) {
            return Err(FormatError::UnsupportedDataLayout { scheme, layout: data_layout });
        }
        if !scales.matches(scheme.scale_format()) {
            return Err(FormatError::ScaleTypeMismatch { scheme, expected: scheme.scale_format() });
        }
        check_len("scales", shape.scale_len(scale_layout)?, scales.len())?;
        match (scheme.has_global_scale(), global_scale.is_some()) {
            (true, false) => return Err(FormatError::MissingGlobalScale { scheme }),
            (false, true) => return Err(FormatError::UnexpectedGlobalScale { scheme }),
            _ => {}
        }
        let matrix = Self { shape, data, data_layout, scales, scale_layout, global_scale };
        if let Some(index) = matrix.first_nonzero_padding() {
            return Err(FormatError::NonZeroPadding { index });
        }
        Ok(matrix)
    }

    /// The matrix a backend made for a [`QuantRequest`] (which proves the shape and
    /// layouts), from buffers it sized by the request: nothing is checked again. Debug
    /// builds assert every invariant [`Self::from_parts`] checks.
    ///
    /// # Panics
    /// In debug builds, if `data` or `scales` do not have the request's sizes and format,
    /// the global scale's presence does not match the scheme, or swizzle padding is not
    /// zero: a bug in the backend, not in its input.
    pub fn from_request(
        request: &QuantRequest,
        data: Vec<u8>,
        scales: ScaleData,
        global_scale: Option<GlobalScale>,
    ) -> Self {
        let shape = *request.shape();
        debug_assert_eq!(data.len(), shape.data_bytes, "data sized by the request");
        debug_assert!(scales.matches(shape.scheme.scale_format()), "scales in the scheme's format");
        debug_assert_eq!(scales.len(), request.scale_len(), "scales sized by the request");
        debug_assert_eq!(shape.scheme.has_global_scale(), global_scale.is_some(), "a global scale exactly for NVFP4");
        let matrix = Self {
            shape,
            data,
            data_layout: request.data_layout(),
            scales,
            scale_layout: request.scale_layout(),
            global_scale,
        };
        debug_assert_eq!(matrix.first_nonzero_padding(), None, "zero swizzle padding");
        matrix
    }

    /// The request this matrix answers: its scheme, shape and layouts, checked when it was
    /// made. A backend that copies the matrix takes it instead of checking again.
    pub fn request(&self) -> QuantRequest {
        QuantRequest::of_matrix(self.shape, self.scale_layout, self.data_layout, self.scales.len())
    }

    fn first_nonzero_padding(&self) -> Option<usize> {
        if self.scale_layout != ScaleLayout::Swizzled128x4 {
            return None;
        }
        let ScaleData::Bytes(bytes) = &self.scales else { return None };
        let (rows, cols) = (self.shape.scale_rows, self.shape.scale_cols);
        let (padded_rows, padded_cols) = self.scale_layout.padded_shape(rows, cols).ok()?;
        // Visit only the padding entries: columns past `cols` of every row, then the
        // padding rows; report the lowest index holding a non-zero byte.
        (0..padded_rows)
            .flat_map(|r| (if r < rows { cols } else { 0 }..padded_cols).map(move |c| (r, c)))
            .map(|(r, c)| swizzled_offset(r, c, cols))
            .filter(|&i| bytes[i] != 0)
            .min()
    }

    /// Takes the matrix apart (the inverse of [`Self::from_parts`]).
    pub fn into_parts(self) -> QuantizedParts {
        QuantizedParts {
            scheme: self.shape.scheme,
            rows: self.shape.rows,
            k: self.shape.k,
            data: self.data,
            data_layout: self.data_layout,
            scales: self.scales,
            scale_layout: self.scale_layout,
            global_scale: self.global_scale,
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.shape.scheme
    }

    /// The validated storage shape (rows, K, bytes per row, scale-matrix shape).
    pub fn shape(&self) -> &QuantShape {
        &self.shape
    }

    /// Logical rows.
    pub fn rows(&self) -> usize {
        self.shape.rows
    }

    /// Logical K.
    pub fn k(&self) -> usize {
        self.shape.k
    }

    /// The packed element bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Order of [`Self::data`].
    pub fn data_layout(&self) -> DataLayout {
        self.data_layout
    }

    /// The stored scales (padding included).
    pub fn scales(&self) -> &ScaleData {
        &self.scales
    }

    /// Order of [`Self::scales`].
    pub fn scale_layout(&self) -> ScaleLayout {
        self.scale_layout
    }

    /// The per-tensor scale (NVFP4).
    pub fn global_scale(&self) -> Option<GlobalScale> {
        self.global_scale
    }

    /// The decoded scale of `row`'s K-block `block` (for 128x128 FP8 tiles, the tile
    /// holding that row). `None` if out of range.
    pub fn scale(&self, row: usize, block: usize) -> Option<f32> {
        if row >= self.shape.rows || block >= self.shape.scale_cols {
            return None;
        }
        let r = row / self.shape.scheme.block_rows();
        let i = self.scale_layout.offset(r, block, self.shape.scale_cols);
        Some(self.scales.value(i, self.shape.scheme.scale_format()))
    }

    /// Total storage in bytes: data plus scales (plus 4 for a global scale).
    pub fn storage_bytes(&self) -> usize {
        self.data.len()
            + self.scales.len() * self.shape.scheme.scale_format().bytes()
            + if self.global_scale.is_some() { 4 } else { 0 }
    }
}
