//! Dequantization on the device.

use blockscale_formats::{QuantRequest, QuantizedMatrix};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use ndarray::Array2;

use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::launch::{Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::{DequantParams, MatrixFields};
use crate::{CudaError, Device};

/// Dequantizes to a new contiguous `rows x k` device buffer of `O` (f32, f16 or bf16):
/// `(value(code) * block_scale) * post` in f32, NaN canonical, rounded once to `O`;
/// the same values blockscale-cpu's `dequantize` gives.
///
/// # Errors
/// [`CudaError::OutOfMemory`] or [`CudaError::Driver`].
pub fn dequantize<O: DeviceElement>(dev: &Device, q: &DeviceQuantized) -> Result<CudaSlice<O>, CudaError> {
    let shape = q.shape();
    let n = shape.rows * shape.k;
    // Left unset: the dequantize kernels write every one of the rows x k outputs (each
    // chunk of 8 values of every row) before anything reads them.
    let mut out = dev.alloc_unset::<O>(n, "the output")?;
    dequantize_into(dev, q, &mut out, shape.k)?;
    Ok(out)
}

/// Dequantizes into an existing device buffer, row `r` at element `r * row_stride`.
///
/// # Errors
/// [`CudaError::BadStride`], [`CudaError::BufferLength`], [`CudaError::Misaligned`],
/// [`CudaError::Driver`].
pub fn dequantize_into<O: DeviceElement>(
    dev: &Device,
    q: &DeviceQuantized,
    out: &mut CudaSlice<O>,
    row_stride: usize,
) -> Result<(), CudaError> {
    let shape = q.shape();
    let stream = dev.stream();
    let len = out.len();
    // cudarc's guard lives until the launch is queued, so that with event tracking on,
    // the recorded write covers the kernel.
    let (out_ptr, g_out) = out.device_ptr_mut(stream);
    crate::checks::check_matrix::<O>(shape.rows, shape.k, row_stride, len, out_ptr, "output")?;
    let post = q.global_scale().map_or(1.0, |g| g.decode());
    launch_dequantize(dev, q, out_ptr, row_stride, O::SUFFIX, post)?;
    drop(g_out);
    Ok(())
}

/// Queues the dequantize kernel writing `(value * block_scale) * post` as `suffix`
/// (`f32`, `f16`, `bf16`) to `out_ptr`, row `r` at element `r * row_stride`.
///
/// The caller guarantees that `out_ptr` addresses `rows x k` elements at that row stride,
/// 16-byte aligned with `row_stride` a multiple of 8 elements, valid until the kernel
/// has run (stream order).
pub(crate) fn launch_dequantize(
    dev: &Device,
    q: &DeviceQuantized,
    out_ptr: u64,
    row_stride: usize,
    suffix: &str,
    post: f32,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let (data_ptr, g_data) = q.data().device_ptr(stream);
    let (scales_ptr, g_scales) = q.scales().ptr(stream);
    // The launch contract (ffi): `q` was built by `quantize` or `from_host` (a validated
    // QuantizedMatrix), so its codes and scales have the sizes its request implies; the
    // caller guarantees the output's size, stride and alignment.
    launch_dequantize_at(dev, &q.request, (data_ptr, scales_ptr), out_ptr, row_stride, suffix, post)?;
    drop((g_data, g_scales));
    Ok(())
}

/// Queues the dequantize kernel of `request` (scheme, shape, layouts) reading the codes
/// and scales at the device addresses `(data, scales)` and writing `(value *
/// block_scale) * post` as `suffix` (`f32`, `f16`, `bf16`) to `out_ptr`, row `r` at
/// element `r * row_stride`.
///
/// The caller guarantees (the launch contract of [`crate::ffi`]): `data` and `scales`
/// hold the codes and scales `request` sizes, `out_ptr` addresses `rows x k` elements
/// at that row stride, 16-byte aligned with `row_stride` a multiple of 8 elements; all
/// valid until the kernel has run (stream order), their guards held until it is queued.
pub(crate) fn launch_dequantize_at(
    dev: &Device,
    request: &QuantRequest,
    (data, scales): (u64, u64),
    out_ptr: u64,
    row_stride: usize,
    suffix: &str,
    post: f32,
) -> Result<(), CudaError> {
    let shape = request.shape();
    let params = params_of(request, (data, scales), out_ptr, row_stride, post);
    let kernel = dev.function(&KernelName::dequantize(request.scheme(), suffix))?;
    // One thread per 8 values (dequantize.cu).
    let config = dev.grid_stride((shape.rows * shape.k / 8) as u64, &kernel);
    // The launch contract (ffi): the caller's, above. The kernel reads nothing before
    // its griddepcontrol.wait.
    launch(dev.stream(), &kernel, config, Order::DEPENDENT, &params)
        .map_err(CudaError::driver("launching the dequantize kernel"))
}

/// The decoding kernels' parameters (`DequantParams`) for `q`, whose codes and scales
/// are at the device addresses `(data, scales)`, writing rows of `row_stride` elements
/// at `out_ptr` (0 for kernels that write elsewhere) times `post`.
pub(crate) fn dequant_params(
    q: &DeviceQuantized,
    (data, scales): (u64, u64),
    out_ptr: u64,
    row_stride: usize,
    post: f32,
) -> DequantParams {
    params_of(&q.request, (data, scales), out_ptr, row_stride, post)
}

/// [`dequant_params`] for a matrix of `request`'s shape and layouts.
fn params_of(
    request: &QuantRequest,
    (data, scales): (u64, u64),
    out_ptr: u64,
    row_stride: usize,
    post: f32,
) -> DequantParams {
    DequantParams { data, scales, out: out_ptr, row_stride: row_stride as u64, matrix: MatrixFields::of(request), post }
}

/// Host convenience: copies a quantized matrix to the device, dequantizes it there and
/// copies the values back.
///
/// # Errors
/// As [`dequantize`].
pub fn dequantize_host<O: DeviceElement>(dev: &Device, q: &QuantizedMatrix) -> Result<Array2<O>, CudaError> {
    let d = DeviceQuantized::from_host(dev, q)?;
    let out = dequantize::<O>(dev, &d)?;
    let host = dev.stream().clone_dtoh(&out).map_err(CudaError::driver("copying the output to the host"))?;
    Ok(Array2::from_shape_vec((q.rows(), q.k()), host).expect("rows x k values"))
}
