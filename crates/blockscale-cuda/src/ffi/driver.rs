//! The driver calls cudarc's safe API does not cover: whether libcuda loads, allocations
//! left unset, the cluster occupancy query, stream-ordered copies and memsets on device
//! addresses, and the TMA tensor maps of the FP8 GEMM.

use std::any::TypeId;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig, ValidAsZeroBits, result, sys,
};

use super::launch::{cluster_attribute, config_ex};
use super::params::TensorMap;

/// Whether the CUDA driver library (libcuda) can be loaded; cudarc panics on its first
/// call without it.
pub(crate) fn library_present() -> bool {
    // SAFETY: is_culib_present only tries to load the library by name; it has no
    // preconditions.
    unsafe { sys::is_culib_present() }
}

/// Whether every bit pattern of `T` is a value of `T`: true for the element types the
/// crate allocates (u8, f32, f16, bf16).
fn any_bits_valid<T: 'static>() -> bool {
    let t = TypeId::of::<T>();
    [TypeId::of::<u8>(), TypeId::of::<f32>(), TypeId::of::<half::f16>(), TypeId::of::<half::bf16>()].contains(&t)
}

/// A new buffer of `len` values of `T` on `stream`, in stream order, its memory left as
/// the allocator gives it (no memset): for buffers a kernel writes in full before they
/// are read. Any other `T` than u8, f32, f16 and bf16 is allocated zeroed instead.
///
/// # Errors
/// The driver's error (out of memory among others).
pub(crate) fn alloc_unset<T: DeviceRepr + ValidAsZeroBits + 'static>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, DriverError> {
    if !any_bits_valid::<T>() {
        return stream.alloc_zeros(len);
    }
    // SAFETY: cudarc's `alloc` is unsafe because the memory is unset; `T` is u8, f32, f16
    // or bf16 (checked above), of which every bit pattern is a valid value, so whatever
    // the memory holds, reading it back gives values of `T`.
    unsafe { stream.alloc::<T>(len) }
}

/// How many clusters of `size` CTAs (along x) of `func`, each of `threads` threads and
/// `smem` bytes of dynamic shared memory, the device of `stream` holds at once (the
/// driver's `cuOccupancyMaxActiveClusters`).
///
/// # Errors
/// The driver's error when the query fails (a cluster size the kernel cannot take).
pub(crate) fn max_active_clusters(
    stream: &CudaStream,
    func: &CudaFunction,
    size: u32,
    (threads, smem): (u32, usize),
) -> Result<c_int, DriverError> {
    let mut attr = [cluster_attribute(size)];
    let shape = LaunchConfig { grid_dim: (size, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 };
    let config = config_ex(stream, shape, &mut attr);
    let mut n: c_int = 0;
    // SAFETY: `config`, `attr` and `n` outlive the call, a query that launches nothing;
    // the function is a loaded kernel of the stream's context.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, func.cu_function(), &config) }.result()?;
    Ok(n)
}

/// Queues a copy of `bytes` bytes from device address `src` to `dst` on `stream`.
///
/// Safe to call inside the crate under the launch contract of the [`ffi`](super)
/// module: `src` holds `bytes` readable bytes and `dst` as many writable ones, kept
/// alive until the stream has run the copy.
///
/// # Errors
/// The driver's error.
pub(crate) fn copy_async(stream: &CudaStream, dst: u64, src: u64, bytes: usize) -> Result<(), DriverError> {
    // SAFETY: the extents are the launch contract's; this only queues a copy on the
    // stream.
    unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
}

/// Queues the zeroing of `bytes` bytes at device address `at` on `stream`.
///
/// Safe to call inside the crate under the launch contract of the [`ffi`](super)
/// module: the bytes are device memory writable until the stream has run the memset.
///
/// # Errors
/// The driver's error.
pub(crate) fn zero_async(stream: &CudaStream, at: u64, bytes: usize) -> Result<(), DriverError> {
    // SAFETY: the extent is the launch contract's; this only queues a memset on the
    // stream.
    unsafe { result::memset_d8_async(at, 0, bytes, stream.cu_stream()) }
}

/// The element types a tensor map here describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TmaElement {
    /// Bytes (FP8 codes).
    U8,
    /// 16-bit values (bf16 or f16 outputs; a TMA store copies them as they are).
    U16,
}

/// The TMA tensor map of a `rows x cols` matrix of `element`s at device address `ptr`
/// (row stride `stride` elements) read or written in boxes of `box_rows x box_cols`
/// elements (128 bytes a box row at most), 128-byte swizzled, with 256-byte L2
/// promotion, zeros read past the last row and nothing written past the matrix. Encoding
/// touches no device memory; a kernel reading or writing through the map accesses `ptr`,
/// so the launch that passes it comes under the launch contract for the whole matrix.
///
/// # Errors
/// The driver's error when it refuses the description.
pub(crate) fn tensor_map(
    ptr: u64,
    element: TmaElement,
    (rows, cols, stride): (usize, usize, usize),
    (box_rows, box_cols): (usize, usize),
) -> Result<TensorMap, DriverError> {
    let mut map = TensorMap::default();
    let (kind, bytes) = match element {
        TmaElement::U8 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8, 1),
        TmaElement::U16 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16, 2),
    };
    let dims = [cols as u64, rows as u64];
    let strides = [(stride * bytes) as u64];
    let boxes = [box_cols as u32, box_rows as u32];
    let element_strides = [1u32, 1];
    // SAFETY: `map` is 128 writable bytes with CUtensorMap's alignment (TensorMap's
    // layout); the arrays hold the rank's entries (rank - 1 strides); the function only
    // encodes the description (it touches no device memory).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            (&mut map as *mut TensorMap).cast::<sys::CUtensorMap>(),
            kind,
            2,
            ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(map)
}
