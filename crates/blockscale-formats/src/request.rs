//! [`QuantRequest`]: a quantization's shape and options, checked once at the API
//! boundary and passed down, so that the layers below neither re-check nor disagree.

use crate::{DataLayout, FormatError, QuantShape, QuantizeOptions, ScaleLayout, Scheme, check_recipe};

/// A `rows x k` quantization under a scheme with its layouts, validated: the shape
/// against the scheme ([`Scheme::shape`]), the options against both ([`check_recipe`]),
/// and the sizes of the scale storage. Only [`QuantRequest::new`] makes one, so a value
/// of this type is proof of those checks; the backends build it once per call and take
/// it everywhere below.
///
/// ```
/// use blockscale_formats::{Fp8Tile, QuantRequest, QuantizeOptions, ScaleLayout, Scheme};
/// let options = QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
/// let request = QuantRequest::new(Scheme::NvFp4, 3, 64, &options)?;
/// assert_eq!((request.shape().data_bytes, request.scale_len()), (96, 128 * 4));
/// // FP8 block scales are f32: they cannot be swizzled.
/// assert!(QuantRequest::new(Scheme::Fp8Block(Fp8Tile::Tile128x128), 128, 128, &options).is_err());
/// # Ok::<(), blockscale_formats::FormatError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantRequest {
    shape: QuantShape,
    scale_layout: ScaleLayout,
    data_layout: DataLayout,
    scale_len: usize,
}

impl QuantRequest {
    /// Checks a `rows x k` quantization under `scheme` with `options`' layouts and
    /// per-tensor scale choice.
    ///
    /// # Errors
    /// The shape errors of [`Scheme::shape`] and the option errors of [`check_recipe`].
    pub fn new(scheme: Scheme, rows: usize, k: usize, options: &QuantizeOptions) -> Result<Self, FormatError> {
        let shape = scheme.shape(rows, k)?;
        check_recipe(&shape, options.scale_layout, options.data_layout, &options.global_scale)?;
        let scale_len = shape.scale_len(options.scale_layout)?;
        Ok(Self { shape, scale_layout: options.scale_layout, data_layout: options.data_layout, scale_len })
    }

    /// The request a validated matrix answers (its shape and layouts hold every check).
    #[cfg(feature = "alloc")]
    pub(crate) fn of_matrix(
        shape: QuantShape,
        scale_layout: ScaleLayout,
        data_layout: DataLayout,
        scale_len: usize,
    ) -> Self {
        Self { shape, scale_layout, data_layout, scale_len }
    }

    /// The validated storage shape.
    pub fn shape(&self) -> &QuantShape {
        &self.shape
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.shape.scheme
    }

    /// The layout of the scales.
    pub fn scale_layout(&self) -> ScaleLayout {
        self.scale_layout
    }

    /// The layout of the packed data.
    pub fn data_layout(&self) -> DataLayout {
        self.data_layout
    }

    /// Scale entries to store (with the swizzle's padding).
    pub fn scale_len(&self) -> usize {
        self.scale_len
    }

    /// Scale bytes to store.
    pub fn scale_bytes(&self) -> usize {
        self.scale_len * self.shape.scheme.scale_format().bytes()
    }
}
