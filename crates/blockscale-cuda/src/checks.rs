//! The argument checks the ops share before a launch: a quantization's request, the
//! kernels' index limits, and a device matrix view's stride, length and alignment. Below every op and the buffers,
//! so each of them can check without importing another.

use blockscale_formats::{QuantRequest, QuantizeOptions, Scheme};

use crate::CudaError;

/// The checks every quantize entry point (and [`crate::DeviceQuantized::alloc`]) makes
/// once, before touching the device: the shape and the options against the scheme
/// ([`QuantRequest::new`]) and the kernels' limits. What runs below takes the request
/// and checks nothing again.
pub(crate) fn check_quantize(
    scheme: Scheme,
    rows: usize,
    k: usize,
    options: &QuantizeOptions,
) -> Result<QuantRequest, CudaError> {
    let request = QuantRequest::new(scheme, rows, k, options)?;
    check_limits(scheme, rows, k)?;
    Ok(request)
}

/// Refuses shapes beyond the kernels' index range: rows and K are 32-bit in the kernel
/// parameters, and the 128x128 tile kernel has one CTA per tile (grid y at most 65535).
pub(crate) fn check_limits(scheme: Scheme, rows: usize, k: usize) -> Result<(), CudaError> {
    if u32::try_from(rows).is_err() || u32::try_from(k).is_err() {
        return Err(CudaError::TooLarge { rows, k, limit: "rows and K must each be below 2^32" });
    }
    if scheme.block_rows() == 128 && rows.div_ceil(128) > 65535 {
        return Err(CudaError::TooLarge {
            rows,
            k,
            limit: "128x128 tiles allow at most 65535 tile rows (8,388,480 rows)",
        });
    }
    Ok(())
}

/// Checks a matrix view of `len` elements of `T` starting at device `address`: row
/// stride, length and 16-byte alignment.
pub(crate) fn check_matrix<T>(
    rows: usize,
    k: usize,
    row_stride: usize,
    len: usize,
    address: u64,
    what: &'static str,
) -> Result<(), CudaError> {
    let elem = size_of::<T>();
    if row_stride < k || !(row_stride * elem).is_multiple_of(16) {
        return Err(CudaError::BadStride { row_stride, k, elem_bytes: elem });
    }
    let needed = if rows == 0 { 0 } else { (rows - 1) * row_stride + k };
    if len < needed {
        return Err(CudaError::BufferLength { what, expected: needed, actual: len });
    }
    if !address.is_multiple_of(16) {
        return Err(CudaError::Misaligned { what, address });
    }
    Ok(())
}
