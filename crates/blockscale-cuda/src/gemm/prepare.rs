//! Launches of the operand-preparation kernels (`kernels/gemm/prepare.cu`). Every
//! function takes raw device addresses that the caller (gemm/mod.rs) derived from
//! buffers it checked and keeps borrowed until the launches are queued.

use crate::ffi::launch::{Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::{CopyParams, Fp8ScaleParams, SplitParams};
use crate::{CudaError, Device};

/// Writes the `rows x k` activations at `x` (element stride `x_stride`, element type
/// `suffix`: f32, f16 or bf16) as `pieces` exact bf16 matrices side by side into `out`
/// (row stride `pieces * k` bf16 elements).
#[allow(clippy::too_many_arguments)] // mirrors the kernel parameters one to one
pub(crate) fn split(
    dev: &Device,
    suffix: &str,
    x: u64,
    x_stride: usize,
    rows: usize,
    k: usize,
    pieces: usize,
    out: u64,
) -> Result<(), CudaError> {
    let params = SplitParams {
        x,
        out,
        x_stride: x_stride as u64,
        out_stride: (pieces * k) as u64,
        rows: rows as u32,
        k: k as u32,
        pieces: pieces as u32,
        pad: 0,
    };
    let kernel = dev.function(&KernelName::split(suffix))?;
    let config = dev.grid_stride((rows * k / 8) as u64, &kernel);
    // The launch contract (ffi): the caller checked that `x` holds `rows` rows of `k`
    // elements at `x_stride` and that `out` holds rows x pieces*k bf16 values, 16-byte
    // aligned (K is a multiple of 8), both alive until the kernel runs.
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the activation split kernel"))
}

/// Copies `rows x cols` elements of `suffix` from `src` (row stride `src_stride`) to
/// `dst` (row stride `dst_stride`).
#[allow(clippy::too_many_arguments)] // mirrors the kernel parameters one to one
pub(crate) fn copy_out(
    dev: &Device,
    suffix: &str,
    src: u64,
    src_stride: usize,
    dst: u64,
    dst_stride: usize,
    rows: usize,
    cols: usize,
) -> Result<(), CudaError> {
    let params = CopyParams {
        src,
        dst,
        src_stride: src_stride as u64,
        dst_stride: dst_stride as u64,
        rows: rows as u32,
        cols: cols as u32,
    };
    let kernel = dev.function(&KernelName::copy_out(suffix))?;
    let config = dev.grid_stride((rows * cols) as u64, &kernel);
    // The launch contract (ffi): the caller checked both matrices' extents (rows x cols
    // at their strides) and keeps them alive until the kernel runs.
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the output copy kernel"))
}

/// Rewrites FP8 activation scales (`src`: one per row, or per 128 rows when `tiles`,
/// and per 128 of K; `kb` per row) as one per row, K-major or M-major, into `dst`.
pub(crate) fn fp8_scales(
    dev: &Device,
    src: u64,
    dst: u64,
    rows: usize,
    kb: usize,
    tiles: bool,
    mn_major: bool,
) -> Result<(), CudaError> {
    let params =
        Fp8ScaleParams { src, dst, rows: rows as u32, kb: kb as u32, tiles: tiles as u32, mn_major: mn_major as u32 };
    let kernel = dev.function(&KernelName::fp8_scales())?;
    let config = dev.grid_stride((rows * kb) as u64, &kernel);
    // The launch contract (ffi): the caller checked that `src` holds the scales of a
    // rows x (128 kb) FP8 block matrix and that `dst` holds rows x kb f32.
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the FP8 scale kernel"))
}

/// Copies `len` bytes from `src` to `dst` (device addresses) and zeroes the `pad` bytes
/// after them, on the device's stream.
///
/// The caller guarantees `src` holds `len` readable bytes and `dst` `len + pad`
/// writable ones, kept alive until the stream has run the copy.
pub(crate) fn copy_and_pad(dev: &Device, src: u64, dst: u64, len: usize, pad: usize) -> Result<(), CudaError> {
    let stream = dev.stream().cu_stream();
    // SAFETY: the extents are the caller's guarantee above; both calls only queue work on
    // the device's stream.
    unsafe {
        if len > 0 {
            cudarc::driver::result::memcpy_dtod_async(dst, src, len, stream)
                .map_err(CudaError::driver("copying a GEMM operand into the workspace"))?;
        }
        zero(dst + len as u64, pad, stream)
    }
}

/// Zeroes `bytes` bytes at device address `at` (the caller guarantees they are writable).
pub(crate) fn zero_bytes(dev: &Device, at: u64, bytes: usize) -> Result<(), CudaError> {
    // SAFETY: the extent is the caller's guarantee; this only queues a memset.
    unsafe { zero(at, bytes, dev.stream().cu_stream()) }
}

/// # Safety
/// `bytes` bytes at `at` must be device memory writable until `stream` has run.
unsafe fn zero(at: u64, bytes: usize, stream: cudarc::driver::sys::CUstream) -> Result<(), CudaError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the function's contract.
    unsafe { cudarc::driver::result::memset_d8_async(at, 0, bytes, stream) }
        .map_err(CudaError::driver("zeroing GEMM padding in the workspace"))
}
