//! Float tensors as typed slices: the weights commands read, borrowed from a memory map
//! when aligned, copied otherwise.

use blockscale::{Backend, GlobalScale, QuantizeOptions, QuantizedMatrix, Scheme, for_float_values};
use ndarray::ArrayView2;

pub use blockscale::checkpoint::values::{FloatValues, from_le_bytes};

/// Quantizes `values` as a `rows x k` matrix on `backend`.
///
/// # Errors
/// The backend's ([`blockscale::Error`]); `rows x k` must be the length.
pub fn quantize(
    values: &FloatValues<'_>,
    backend: &Backend,
    (rows, k): (usize, usize),
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<QuantizedMatrix, blockscale::Error> {
    assert_eq!(rows * k, values.len(), "a tensor's values are rows x k");
    for_float_values!(values, |v| backend.quantize(
        ArrayView2::from_shape((rows, k), &v[..]).expect("checked"),
        scheme,
        options
    ))
}

/// Quantizes `values` as a `rows x k` matrix on `backend` into `data` and `scales`
/// ([`Backend::quantize_into`]); returns the per-tensor scale (NVFP4).
///
/// # Errors
/// As [`Backend::quantize_into`]; `rows x k` must be the length.
pub fn quantize_into(
    values: &FloatValues<'_>,
    backend: &Backend,
    (rows, k): (usize, usize),
    scheme: Scheme,
    options: &QuantizeOptions,
    data: &mut [u8],
    scales: &mut [u8],
) -> Result<Option<GlobalScale>, blockscale::Error> {
    assert_eq!(rows * k, values.len(), "a tensor's values are rows x k");
    for_float_values!(values, |v| backend.quantize_into(
        ArrayView2::from_shape((rows, k), &v[..]).expect("checked"),
        scheme,
        options,
        data,
        scales
    ))
}

