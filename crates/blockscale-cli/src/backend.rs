//! The compute backend of `quantize`: the CPU, or a CUDA GPU in builds with the `cuda`
//! feature. Both produce the same bytes (the golden files check it).

use blockscale::{GlobalScaleSource, NonFinite, QuantizedMatrix, ScaleLayout, Scheme};

use crate::cli::BackendArg;
use crate::error::CliError;
use crate::values::FloatValues;

/// Why quantizing one tensor failed.
pub enum QuantFailure {
    /// NaN/Inf under `NonFinite::Error`.
    NonFinite {
        /// Row.
        row: usize,
        /// Column.
        col: usize,
        /// Value.
        value: f32,
    },
    /// Anything else, as text.
    Other(String),
}

/// How to quantize one tensor.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// The scheme.
    pub scheme: Scheme,
    /// The scale layout.
    pub layout: ScaleLayout,
    /// What NaN/Inf do.
    pub non_finite: NonFinite,
    /// Where NVFP4's per-tensor scale comes from.
    pub global: GlobalScaleSource,
}

/// A backend, ready to quantize.
pub enum Backend {
    /// The CPU.
    Cpu,
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(blockscale::cuda::Device),
}

impl Backend {
    /// Opens the backend `arg` names.
    ///
    /// # Errors
    /// [`CliError::Unsupported`] for CUDA in a build without it, [`CliError::Cuda`] if
    /// no usable GPU is found.
    pub fn new(arg: BackendArg) -> Result<Self, CliError> {
        match arg {
            BackendArg::Cpu => Ok(Self::Cpu),
            #[cfg(feature = "cuda")]
            BackendArg::Cuda => {
                blockscale::cuda::Device::new(0).map(Self::Cuda).map_err(|e| CliError::Cuda(e.to_string()))
            }
            #[cfg(not(feature = "cuda"))]
            BackendArg::Cuda => Err(CliError::Unsupported(
                "this blockscale was built without CUDA: rebuild with \
                 `cargo build --release -p blockscale-cli --features cuda` (needs nvcc, see the README)"
                    .into(),
            )),
        }
    }

    /// The backend's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            #[cfg(feature = "cuda")]
            Self::Cuda(_) => "cuda",
        }
    }

    /// Quantizes a `rows x k` tensor.
    pub fn quantize(
        &self,
        values: &FloatValues<'_>,
        rows: usize,
        k: usize,
        req: Request,
    ) -> Result<QuantizedMatrix, QuantFailure> {
        let Request { scheme, layout, non_finite, global } = req;
        match self {
            Self::Cpu => {
                let o = blockscale::QuantizeOptions::default()
                    .with_scale_layout(layout)
                    .with_non_finite(non_finite)
                    .with_global_scale(global);
                let r = match values {
                    FloatValues::Bf16(v) => blockscale::quantize_slice(v, rows, k, scheme, &o),
                    FloatValues::F16(v) => blockscale::quantize_slice(v, rows, k, scheme, &o),
                    FloatValues::F32(v) => blockscale::quantize_slice(v, rows, k, scheme, &o),
                };
                r.map_err(|e| match e {
                    blockscale::CpuError::NonFinite { row, col, value } => QuantFailure::NonFinite { row, col, value },
                    other => QuantFailure::Other(other.to_string()),
                })
            }
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => {
                use blockscale::cuda::{CudaError, QuantizeOptions, quantize_host};
                use ndarray::ArrayView2;
                let o = QuantizeOptions::default()
                    .with_scale_layout(layout)
                    .with_non_finite(non_finite)
                    .with_global_scale(global);
                let shape_err = |e: ndarray::ShapeError| QuantFailure::Other(e.to_string());
                let r = match values {
                    FloatValues::Bf16(v) => {
                        quantize_host(dev, ArrayView2::from_shape((rows, k), v).map_err(shape_err)?, scheme, &o)
                    }
                    FloatValues::F16(v) => {
                        quantize_host(dev, ArrayView2::from_shape((rows, k), v).map_err(shape_err)?, scheme, &o)
                    }
                    FloatValues::F32(v) => {
                        quantize_host(dev, ArrayView2::from_shape((rows, k), v).map_err(shape_err)?, scheme, &o)
                    }
                };
                r.map_err(|e| match e {
                    CudaError::NonFinite { row, col, value } => QuantFailure::NonFinite { row, col, value },
                    other => QuantFailure::Other(other.to_string()),
                })
            }
        }
    }
}
