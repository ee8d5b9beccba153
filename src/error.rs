//! The error of the [`Backend`](crate::Backend) API: either backend's own error, or a
//! request the chosen backend cannot run.

use crate::Scheme;

/// Why a [`Backend`](crate::Backend) call failed. The backends' own errors are kept whole
/// (match on [`Error::Cpu`] / `Error::Cuda` for the details, e.g. the row and column of
/// a NaN); their messages are the messages shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CPU backend refused the request or its input.
    #[error(transparent)]
    Cpu(#[from] blockscale_cpu::CpuError),
    /// The CUDA backend refused the request or its input, or the GPU failed.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] blockscale_cuda::CudaError),
    /// A checkpoint could not be read (the file and tensor named).
    #[cfg(feature = "checkpoint")]
    #[error(transparent)]
    Checkpoint(#[from] blockscale_checkpoint::CheckpointError),
    /// A CUDA backend was asked for in a build without the `cuda` feature.
    #[error(
        "this blockscale was built without the CUDA backend: enable the `cuda` feature \
         (building it needs nvcc, see the README)"
    )]
    CudaNotBuilt,
    /// The gated GEMV's two matrices differ in scheme or shape (`(scheme, rows, k)`).
    #[error("the gated GEMV needs two matrices of one scheme and shape: gate {gate:?}, up {up:?}")]
    GatedMismatch {
        /// The gate's scheme, rows and K.
        gate: (Scheme, usize, usize),
        /// The up projection's.
        up: (Scheme, usize, usize),
    },
    /// The backend has no kernel for this request.
    #[error("the {backend} backend does not run {what}")]
    Unsupported {
        /// The backend's name (`"cpu"`, `"cuda"`).
        backend: &'static str,
        /// What was asked for.
        what: &'static str,
    },
}
