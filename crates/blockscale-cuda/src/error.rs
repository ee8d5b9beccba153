//! The CUDA backend's error type.

use blockscale_formats::{FormatError, Scheme};
use cudarc::driver::DriverError;

use crate::Arch;

/// Everything the CUDA backend can refuse or meet, with the values involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// No CUDA driver library (libcuda) could be loaded.
    #[error("no CUDA driver found (libcuda.so could not be loaded); install the NVIDIA driver or use the CPU backend")]
    NoDriver,
    /// The requested device does not exist.
    #[error("CUDA device {ordinal} requested but {count} device(s) are visible (check CUDA_VISIBLE_DEVICES)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices visible.
        count: usize,
    },
    /// A GPU whose architecture has no kernels here.
    #[error(
        "{name} has compute capability {major}.{minor}; blockscale's kernels are built for 9.0 \
         (Hopper, sm_90a) and 12.x (Blackwell GeForce, sm_120a); use the CPU backend on this GPU"
    )]
    Unsupported {
        /// Device name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },
    /// A device allocation failed for lack of memory.
    #[error("out of GPU memory allocating {bytes} bytes for {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: &'static str,
        /// Its size.
        bytes: usize,
    },
    /// Any other CUDA driver failure, with what was being done.
    #[error("CUDA driver error while {context}: {source}")]
    Driver {
        /// What was being done.
        context: &'static str,
        /// The driver's error.
        source: DriverError,
    },
    /// A shape, layout, scale or option problem found by the formats layer.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A NaN or infinity in the input under `NonFinite::Error`.
    #[error(
        "input holds {value} at row {row}, column {col}; clean the data, or quantize with \
         NonFinite::Poison to store the block holding it as NaN"
    )]
    NonFinite {
        /// Row of the first non-finite value (row order).
        row: usize,
        /// Its column.
        col: usize,
        /// The value.
        value: f32,
    },
    /// A device buffer too short for the shape it is used with.
    #[error("{what} has {actual} elements but the shape needs {expected}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A row stride smaller than K, or not keeping rows 16-byte aligned.
    #[error(
        "row stride {row_stride} (elements of {elem_bytes} bytes) does not fit K = {k}: it must be >= K and \
         keep every row 16-byte aligned (a multiple of {} elements)",
        16 / elem_bytes
    )]
    BadStride {
        /// The stride given.
        row_stride: usize,
        /// K.
        k: usize,
        /// Bytes per element.
        elem_bytes: usize,
    },
    /// A GEMM operand or output whose row stride is smaller than its row (any larger
    /// stride works: what the kernels cannot address directly is staged).
    #[error("the row stride {row_stride} of the {what} is smaller than its rows of {width} elements")]
    StrideTooSmall {
        /// Which matrix.
        what: &'static str,
        /// The stride given (elements).
        row_stride: usize,
        /// Elements per row.
        width: usize,
    },
    /// A matrix beyond the kernels' index range.
    #[error("a {rows} x {k} matrix is too large for the CUDA kernels: {limit}; split it into row ranges")]
    TooLarge {
        /// Rows.
        rows: usize,
        /// K.
        k: usize,
        /// The limit crossed.
        limit: &'static str,
    },
    /// Two quantized matrices that do not multiply (their K blocks or scale kinds differ,
    /// or one is weight-only).
    #[error("{a:?} x {b:?} does not multiply: {hint}")]
    UnsupportedPair {
        /// A's scheme.
        a: Scheme,
        /// B's scheme.
        b: Scheme,
        /// What to do instead.
        hint: &'static str,
    },
    /// The operands' K differ.
    #[error("K mismatch: A has K = {a}, B has K = {b}")]
    KMismatch {
        /// A's (or the activations') K.
        a: usize,
        /// B's (the weights') K.
        b: usize,
    },
    /// A bias whose length is not N.
    #[error("the bias has {actual} values but the output has {expected} columns")]
    BiasLength {
        /// N.
        expected: usize,
        /// The bias's length.
        actual: usize,
    },
    /// An `alpha` that is NaN or infinite.
    #[error("alpha is {0}; it must be finite")]
    InvalidAlpha(f32),
    /// An output buffer whose shape is not M x N.
    #[error("the output is {rows} x {cols} but the product is {m} x {n}")]
    OutputShape {
        /// The output's rows.
        rows: usize,
        /// The output's columns.
        cols: usize,
        /// M.
        m: usize,
        /// N.
        n: usize,
    },
    /// The device's GEMM workspace is smaller than a `*_into` call needs.
    #[error(
        "this GEMM needs {needed} bytes of workspace and the device holds {available}; call \
         Device::reserve_workspace({needed}) once beforehand (outside any CUDA graph capture), or use \
         the allocating gemm functions, which grow it"
    )]
    WorkspaceTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes the device's workspace holds.
        available: usize,
    },
    /// No GEMM kernel for this device tier.
    #[error("{what} has no GEMM kernel for {arch:?} in this build; use the CPU backend for it")]
    NoGemmKernel {
        /// The device's tier.
        arch: Arch,
        /// What was asked.
        what: &'static str,
    },
    /// K is not a multiple of what the kernel's 16-byte TMA loads need (SM120 tier: 32
    /// for FP4 pairs, 16 for MXFP8, 128 for MXFP6 and FP8 block).
    #[error("K = {k} is not a multiple of {multiple}, which this GEMM kernel's 16-byte loads need")]
    KAlignment {
        /// The operands' K.
        k: usize,
        /// The multiple needed.
        multiple: usize,
    },
    /// A CUTLASS shim refused the arguments or failed to launch.
    #[error("CUTLASS GEMM {kernel} failed: {status} (CUDA error code {cuda})")]
    Cutlass {
        /// The shim.
        kernel: &'static str,
        /// What went wrong.
        status: &'static str,
        /// The CUDA runtime's error code (0 if none).
        cuda: i32,
    },
    /// A GEMV with a number of activation rows it does not take.
    #[error("the GEMV takes 1 to 16 activation rows and was given {m}; use gemm_weight_only for more")]
    GemvRows {
        /// Rows given.
        m: usize,
    },
    /// Gate and up matrices of a gated GEMV that differ.
    #[error(
        "the gated GEMV needs gate and up weights of one scheme, shape and layout: gate is {gate:?}, up is \
         {up:?} (scheme, rows, K), or their scale or data layouts differ"
    )]
    GatedMismatch {
        /// The gate's scheme, rows and K.
        gate: (Scheme, usize, usize),
        /// The up matrix's.
        up: (Scheme, usize, usize),
    },
    /// A gated GEMV with one matrix prepared and the other not (or kept in its
    /// checkpoint layout by `PreparedWeights`).
    #[error(
        "the gated GEMV needs gate and up weights both prepared (PreparedWeights with no unprepared_reason) or \
         both in the checkpoint layout; one of each was given"
    )]
    MixedPreparation,
    /// A [`crate::HostPipeline`] used with another device (or stream) than the one it
    /// was made for.
    #[error(
        "this HostPipeline was made for another Device (its staging and streams belong to that device's          context and stream); make one per Device"
    )]
    ForeignPipeline,
    /// Page-locked host memory could not be allocated for a [`crate::HostPipeline`]'s
    /// staging buffers.
    #[error("could not allocate {bytes} bytes of page-locked host memory for {what}: {source}")]
    PinnedAlloc {
        /// What was being allocated.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The driver's error.
        source: DriverError,
    },
    /// A device pointer not aligned for the kernels' 16-byte vector accesses.
    #[error("{what} starts at device address {address:#x}, which is not 16-byte aligned; pass an aligned view")]
    Misaligned {
        /// Which buffer.
        what: &'static str,
        /// Its address.
        address: u64,
    },
}

impl CudaError {
    /// Wraps a driver error, recognising out-of-memory.
    pub(crate) fn driver(context: &'static str) -> impl FnOnce(DriverError) -> Self {
        move |source| Self::Driver { context, source }
    }

    /// Wraps an allocation failure, recognising out-of-memory.
    pub(crate) fn alloc(what: &'static str, bytes: usize) -> impl FnOnce(DriverError) -> Self {
        move |source| {
            if source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                Self::OutOfMemory { what, bytes }
            } else {
                Self::Driver { context: "allocating device memory", source }
            }
        }
    }
}
