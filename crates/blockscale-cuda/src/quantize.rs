//! Quantization on the device: validation, the NVFP4 amax pass, the kernel launch.

use blockscale_formats::{
    GlobalScale, GlobalScaleSource, NonFinite, NvFp4Recipe, QuantRequest, QuantizeOptions, QuantizedMatrix, ScaleRule,
    Scheme,
};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use ndarray::ArrayView2;

use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::checks::{check_matrix, check_quantize};
use crate::ffi::launch::{Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::{AmaxParams, MatrixFields, QuantParams};
use crate::{CudaError, Device};

/// A row-major matrix in device memory: `rows x k` elements, row `r` starting at element
/// `r * row_stride` of `data`.
#[derive(Clone, Copy, Debug)]
pub struct DeviceMatrix<'a, T> {
    /// The elements.
    pub data: &'a CudaSlice<T>,
    /// Rows.
    pub rows: usize,
    /// Columns (K, the quantized dimension).
    pub k: usize,
    /// Elements from one row's start to the next's (at least `k`).
    pub row_stride: usize,
}

impl<'a, T> DeviceMatrix<'a, T> {
    /// A contiguous `rows x k` matrix.
    pub fn new(data: &'a CudaSlice<T>, rows: usize, k: usize) -> Self {
        Self { data, rows, k, row_stride: k }
    }
}

/// Threads per CTA of the FP8 128x128 tile kernel (`TILE_THREADS` in quantize.cu).
const TILE_THREADS: u32 = 256;

/// Quantizes a device matrix along K into new device buffers. The result stays on the
/// device; the queued work is not waited for, except to read back the NVFP4 tensor amax
/// (`GlobalScaleSource::TensorAmax`) and, under `NonFinite::Error`, the NaN/Inf flag.
///
/// # Errors
/// - shape errors (empty input, K not a multiple of the block) and option errors
///   ([`blockscale_formats::check_recipe`]), as [`CudaError::Format`];
/// - [`CudaError::TooLarge`], [`CudaError::BadStride`], [`CudaError::BufferLength`], [`CudaError::Misaligned`];
/// - [`CudaError::NonFinite`] under `NonFinite::Error`;
/// - [`CudaError::OutOfMemory`] and [`CudaError::Driver`].
pub fn quantize<T: DeviceElement>(
    dev: &Device,
    input: DeviceMatrix<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<DeviceQuantized, CudaError> {
    let request = check_quantize(scheme, input.rows, input.k, options)?;
    let mut out = DeviceQuantized::alloc_for(dev, &request)?;
    run(dev, input, options, &mut out)?;
    Ok(out)
}

/// [`quantize`] into existing buffers (from [`DeviceQuantized::alloc`] or an earlier
/// quantization of the same scheme, shape and layouts), so that a loop quantizing
/// activations allocates nothing. The scheme, shape and layouts are `out`'s.
///
/// # Errors
/// As [`quantize`], plus [`CudaError::Format`] if the input's shape or the options'
/// layouts differ from `out`'s.
pub fn quantize_into<T: DeviceElement>(
    dev: &Device,
    input: DeviceMatrix<'_, T>,
    options: &QuantizeOptions,
    out: &mut DeviceQuantized,
) -> Result<(), CudaError> {
    let request = check_quantize(out.scheme(), input.rows, input.k, options)?;
    if request != out.request {
        return Err(blockscale_formats::FormatError::LengthMismatch {
            what: "output buffers (their shape or layouts differ from the input and options)",
            expected: request.shape().data_bytes,
            actual: out.shape().data_bytes,
        }
        .into());
    }
    run(dev, input, options, out)
}

/// The quantization itself, into buffers allocated for this input and these options
/// (checked by the caller).
fn run<T: DeviceElement>(
    dev: &Device,
    input: DeviceMatrix<'_, T>,
    options: &QuantizeOptions,
    out: &mut DeviceQuantized,
) -> Result<(), CudaError> {
    let (scheme, shape) = (out.scheme(), *out.shape());
    debug_assert_eq!((shape.rows, shape.k), (input.rows, input.k), "the caller checked the shape");
    let stream = dev.stream();
    // cudarc's guards (`g_*`) live until the launch is queued, so that with event
    // tracking on, the recorded reads and writes cover the kernel.
    let (input_ptr, g_in) = input.data.device_ptr(stream);
    check_matrix::<T>(input.rows, input.k, input.row_stride, input.data.len(), input_ptr, "input")?;
    // The flag is read only under NonFinite::Error, so only then does it need clearing
    // (one driver call fewer per poisoning call).
    if options.non_finite == NonFinite::Error {
        stream.memset_zeros(&mut out.bad).map_err(CudaError::driver("clearing the NaN/Inf flag"))?;
    }

    let global = match (scheme, options.global_scale) {
        (Scheme::NvFp4, GlobalScaleSource::TensorAmax) => {
            let amax = tensor_amax(dev, &input, input_ptr, &mut out.bad, options.non_finite)?;
            Some(GlobalScale::from_amax(amax)?)
        }
        (Scheme::NvFp4, GlobalScaleSource::Amax(a)) => Some(GlobalScale::from_amax(a)?),
        (Scheme::NvFp4, GlobalScaleSource::Given(g)) => Some(g),
        _ => None,
    };

    let (data_ptr, g_data) = out.data.device_ptr_mut(stream);
    let (scales_ptr, g_scales) = out.scales.ptr_mut(stream);
    let (bad_ptr, g_bad) = out.bad.device_ptr_mut(stream);
    // The launch contract (ffi): check_matrix confirmed the input holds rows x k elements
    // at row_stride with 16-byte alignment; `out` was allocated for exactly this shape and
    // these layouts (checked by the caller) and `bad` holds one u64. All outlive the
    // queued kernel: cudarc frees device memory in stream order.
    launch_quantize(
        dev,
        &out.request,
        options,
        global,
        T::SUFFIX,
        (input_ptr, input.row_stride),
        (data_ptr, scales_ptr, bad_ptr),
    )?;
    drop((g_in, g_data, g_scales, g_bad));

    if options.non_finite == NonFinite::Error {
        check_bad(dev, &input, &out.bad)?;
    }
    out.global_scale = global;
    Ok(())
}

/// Queues the quantize kernel of `request` (scheme, shape, layouts) on the device's
/// stream: the input's `rows x k` elements of type `suffix` (`f32`, `f16`, `bf16`) at
/// device address `input`, row `r` at element `r * row_stride`; the codes, scales and
/// NaN/Inf flag to the device addresses `out`; `global` NVFP4's per-tensor scale, the
/// rule and recipe from `options`.
///
/// The caller guarantees (the launch contract of [`crate::ffi`]): `input` addresses the
/// rows at that stride, 16-byte aligned with a stride of a multiple of 16 bytes; `out`
/// addresses the codes and scales `request` sizes and one u64; all valid, with their
/// guards held, until the kernel is queued, and the memory until it has run.
pub(crate) fn launch_quantize(
    dev: &Device,
    request: &QuantRequest,
    options: &QuantizeOptions,
    global: Option<GlobalScale>,
    suffix: &str,
    (input, row_stride): (u64, usize),
    (data, scales, bad): (u64, u64, u64),
) -> Result<(), CudaError> {
    let (scheme, shape) = (request.scheme(), *request.shape());
    let element = scheme.element();
    let params = QuantParams {
        input,
        data,
        scales,
        bad,
        row_stride: row_stride as u64,
        matrix: MatrixFields::of(request),
        rule: rule_code(options.scale_rule),
        recipe: (options.nvfp4_recipe == NvFp4Recipe::TransformerEngine) as u32,
        global_encode: global.map_or(1.0, |g| g.encode()),
        max_recip: element.max_recip(),
        emax: element.emax(),
        mbits: element.mantissa_bits() as i32,
        pad: 0,
    };
    let kernel = dev.function(&KernelName::quantize(scheme, suffix))?;
    let config = if scheme.block_rows() == 128 {
        LaunchConfig {
            grid_dim: (shape.scale_cols as u32, shape.scale_rows as u32, 1),
            block_dim: (TILE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    } else {
        // One thread per unit: a 16-value NVFP4 block or 32 values (quantize.cu).
        let units = (shape.rows * shape.k / scheme.block_size().min(32)) as u64;
        dev.grid_stride(units, &kernel)
    };
    // The launch contract (ffi): the caller's, above.
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the quantize kernel"))
}

/// The (row, column) of the first NaN/Inf a kernel recorded in `flag` (`!flat_index`,
/// 0 for none) over rows of `k` elements.
pub(crate) fn bad_position(flag: u64, k: usize) -> Option<(usize, usize)> {
    (flag != 0).then(|| {
        let flat = !flag;
        ((flat / k as u64) as usize, (flat % k as u64) as usize)
    })
}

fn rule_code(rule: ScaleRule) -> u32 {
    match rule {
        ScaleRule::Rceil => 0,
        ScaleRule::Floor => 1,
        ScaleRule::Ceil => 2,
        ScaleRule::Even => 3,
    }
}

/// Reads the NaN/Inf flag back; an error naming the first such value.
fn check_bad<T: DeviceElement>(
    dev: &Device,
    input: &DeviceMatrix<'_, T>,
    bad: &CudaSlice<u64>,
) -> Result<(), CudaError> {
    let flag = dev.stream().clone_dtoh(bad).map_err(CudaError::driver("reading the NaN/Inf flag"))?[0];
    let Some((row, col)) = bad_position(flag, input.k) else { return Ok(()) };
    let at = row * input.row_stride + col;
    let value = dev
        .stream()
        .clone_dtoh(&input.data.slice(at..at + 1))
        .map_err(CudaError::driver("reading the non-finite value"))?[0];
    Err(CudaError::NonFinite { row, col, value: value.to_f32_exact() })
}

/// The largest finite |x| of the input (a kernel and a 4-byte read back); an error for
/// NaN/Inf unless poisoning.
fn tensor_amax<T: DeviceElement>(
    dev: &Device,
    input: &DeviceMatrix<'_, T>,
    input_ptr: u64,
    bad: &mut CudaSlice<u64>,
    policy: NonFinite,
) -> Result<f32, CudaError> {
    let stream = dev.stream();
    let mut amax = stream.alloc_zeros::<u32>(1).map_err(CudaError::alloc("the amax", 4))?;
    let (amax_ptr, g_amax) = amax.device_ptr_mut(stream);
    let (bad_ptr, g_bad) = bad.device_ptr_mut(stream);
    // The launch contract (ffi): the input was checked by check_matrix, and `amax` and
    // `bad` hold one u32 and one u64.
    launch_amax(dev, T::SUFFIX, (input_ptr, input.rows, input.k, input.row_stride), (amax_ptr, bad_ptr))?;
    drop((g_amax, g_bad));
    if policy == NonFinite::Error {
        check_bad(dev, input, bad)?;
    }
    let bits = stream.clone_dtoh(&amax).map_err(CudaError::driver("reading the amax"))?[0];
    Ok(f32::from_bits(bits))
}

/// Queues the amax kernel over `rows x k` elements of type `suffix` at device address
/// `input` (row `r` at element `r * row_stride`): the largest finite |x| as f32 bits
/// into the u32 at `amax` (max with what it holds, so zero it first), the first NaN/Inf
/// into the flag at `bad` (as the quantize kernel records it).
///
/// The caller guarantees the launch contract of [`crate::ffi`] for these addresses, as
/// for [`launch_quantize`].
pub(crate) fn launch_amax(
    dev: &Device,
    suffix: &str,
    (input, rows, k, row_stride): (u64, usize, usize, usize),
    (amax, bad): (u64, u64),
) -> Result<(), CudaError> {
    let params =
        AmaxParams { input, amax_bits: amax, bad, row_stride: row_stride as u64, rows: rows as u32, k: k as u32 };
    let kernel = dev.function(&KernelName::amax(suffix))?;
    // One thread per 16 values (quantize.cu `amax_units`).
    let config = dev.grid_stride((rows * k / 16) as u64, &kernel);
    // The launch contract (ffi): the caller's, above.
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the amax kernel"))
}

/// Host convenience: copies a 2-D array (any strides) to the device, quantizes it there
/// and copies the result back.
///
/// # Errors
/// As [`quantize`].
pub fn quantize_host<T: DeviceElement>(
    dev: &Device,
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<QuantizedMatrix, CudaError> {
    let (rows, k) = input.dim();
    // Refuse what would fail anyway before copying the input to the device.
    let request = check_quantize(scheme, rows, k, options)?;
    let host = input.as_standard_layout();
    let flat = host.as_slice().expect("standard layout is contiguous");
    let data = dev.stream().clone_htod(flat).map_err(CudaError::alloc("the input", std::mem::size_of_val(flat)))?;
    let mut out = DeviceQuantized::alloc_for(dev, &request)?;
    run(dev, DeviceMatrix::new(&data, rows, k), options, &mut out)?;
    out.to_host(dev)
}
