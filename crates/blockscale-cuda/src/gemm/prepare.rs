//! Launches of the operand-preparation kernels (`kernels/gemm/prepare.cu`). Every
//! function takes raw device addresses that the caller (gemm/mod.rs) derived from
//! buffers it checked and keeps borrowed until the launches are queued.

use crate::ffi::driver;
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
/// writable ones, kept alive until the stream has run the copy (the launch contract).
pub(crate) fn copy_and_pad(dev: &Device, src: u64, dst: u64, len: usize, pad: usize) -> Result<(), CudaError> {
    if len > 0 {
        driver::copy_async(dev.stream(), dst, src, len)
            .map_err(CudaError::driver("copying a GEMM operand into the workspace"))?;
    }
    zero_bytes(dev, dst + len as u64, pad)
}

/// Zeroes `bytes` bytes at device address `at` (the caller guarantees they are writable,
/// the launch contract).
pub(crate) fn zero_bytes(dev: &Device, at: u64, bytes: usize) -> Result<(), CudaError> {
    if bytes == 0 {
        return Ok(());
    }
    driver::zero_async(dev.stream(), at, bytes).map_err(CudaError::driver("zeroing GEMM padding in the workspace"))
}
