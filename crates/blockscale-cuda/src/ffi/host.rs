//! Host memory the copies of the host-to-host pipeline touch: page-locked (pinned)
//! staging buffers, the queued copies between them and device addresses, and the byte
//! views of the element types that let one pinned buffer of bytes stage f32, f16 or
//! bf16 values.

use std::sync::Arc;

use blockscale_formats::Source;
use cudarc::driver::{CudaContext, CudaStream, DriverError, PinnedHostSlice, result, sys};

/// A new page-locked host buffer of `len` bytes in `ctx`, its contents left as the
/// driver gives them. `write_combined` asks for write-combined memory: fast for the host
/// to write and the GPU to read, slow for the host to read, so only for buffers the host
/// only writes (the inputs of host-to-device copies).
///
/// # Errors
/// The driver's error (out of page-locked memory among others).
pub(crate) fn alloc_pinned(
    ctx: &Arc<CudaContext>,
    len: usize,
    write_combined: bool,
) -> Result<PinnedHostSlice<u8>, DriverError> {
    let flags = if write_combined { sys::CU_MEMHOSTALLOC_WRITECOMBINED } else { 0 };
    // SAFETY: cudarc's allocation is unsafe because the memory is unset; every bit
    // pattern is a valid u8, so whatever it holds, reading it gives bytes.
    unsafe { ctx.alloc_pinned_with_flags::<u8>(len.max(1), flags) }
}

/// Queues a copy of the host bytes `src` to device address `dst` on `stream`.
///
/// Safe to call inside the crate under the launch contract of the [`ffi`](super) module,
/// which for a copy from the host also covers `src`: it is page-locked memory (from
/// [`alloc_pinned`]) that stays allocated and unwritten until the stream has run the
/// copy (the caller waits on an event recorded after it before writing there again or
/// freeing it), and `dst` holds `src.len()` writable bytes until then.
///
/// # Errors
/// The driver's error.
pub(crate) fn copy_to_device(stream: &CudaStream, dst: u64, src: &[u8]) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    // SAFETY: the extents and lifetimes are the launch contract's (above): `src` is
    // pinned memory that outlives the queued copy unmodified and `dst` covers its length;
    // this only queues the copy.
    unsafe { result::memcpy_htod_async(dst, src, stream.cu_stream()) }
}

/// Queues a copy of `dst.len()` bytes from device address `src` into the host bytes
/// `dst` on `stream`.
///
/// Safe to call inside the crate under the launch contract of the [`ffi`](super) module,
/// which for a copy to the host also covers `dst`: it is page-locked memory (from
/// [`alloc_pinned`]) that stays allocated, and that nothing reads or writes, until the
/// stream has run the copy (the caller waits on an event recorded after it first), and
/// `src` holds `dst.len()` readable bytes until then.
///
/// # Errors
/// The driver's error.
pub(crate) fn copy_to_host(stream: &CudaStream, dst: &mut [u8], src: u64) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    // SAFETY: the extents and lifetimes are the launch contract's (above): `dst` is
    // pinned memory that outlives the queued copy and is left alone until it has run,
    // and `src` covers its length; this only queues the copy.
    unsafe { result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
}

/// The bytes of `values` (f32, f16 or bf16, in memory order: little-endian on every
/// platform CUDA runs on).
pub(crate) fn bytes_of<T: Source>(values: &[T]) -> &[u8] {
    // SAFETY: `Source` is sealed to f32, f16 and bf16: plain data of 4 or 2 bytes with no
    // padding, so all `size_of_val(values)` bytes behind the pointer are initialised; u8
    // has alignment 1, and the view borrows `values` for its lifetime.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) }
}

/// [`bytes_of`] for writing: the bytes of `values`, any of which may be set to anything.
pub(crate) fn bytes_of_mut<T: Source>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`, and every bit pattern of f32, f16 and bf16 is a value of
    // that type (NaNs included), so whatever bytes are written leave valid values; the
    // view borrows `values` mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), size_of_val(values)) }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;

    #[test]
    fn byte_views_are_the_little_endian_bytes() {
        let x = [1.5f32, -2.0];
        let want: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(bytes_of(&x), &want[..]);
        let h = [bf16::from_f32(3.0), bf16::from_f32(-0.5)];
        assert_eq!(bytes_of(&h), &[0x40, 0x40, 0x00, 0xbf]);
        let mut y = [f16::ZERO; 2];
        bytes_of_mut(&mut y).copy_from_slice(&[0x00, 0x3c, 0x00, 0xc0]);
        assert_eq!(y, [f16::from_f32(1.0), f16::from_f32(-2.0)]);
    }
}
