//! The element types the [`Backend`](crate::Backend) API takes and returns: f32, f16 and
//! bf16, each accepted by every backend built in.

use half::{bf16, f16};
#[cfg(feature = "cuda")]
use ndarray::{Array2, ArrayView2};

#[cfg(feature = "cuda")]
use crate::{Epilogue, QuantizedMatrix};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// What the CUDA backend asks of an element type; nothing without the `cuda` feature.
/// Not meant to be named: [`Element`] is the bound to write.
#[doc(hidden)]
#[cfg(feature = "cuda")]
pub trait CudaElement: blockscale_cuda::DeviceElement {}
#[cfg(feature = "cuda")]
impl<T: blockscale_cuda::DeviceElement> CudaElement for T {}
/// What the CUDA backend asks of an element type; nothing without the `cuda` feature.
/// Not meant to be named: [`Element`] is the bound to write.
#[doc(hidden)]
#[cfg(not(feature = "cuda"))]
pub trait CudaElement {}
#[cfg(not(feature = "cuda"))]
impl<T> CudaElement for T {}

/// An element type of the [`Backend`](crate::Backend) API's inputs and outputs: `f32`,
/// [`half::f16`] or [`half::bf16`] (sealed). Quantize, dequantize, the GEMMs and the GEMV take and
/// return any of them on every backend, with one exception the type system cannot see:
/// the CUDA GEMV reads bf16 or f16 activations, and refuses f32 ones with
/// [`Error::Unsupported`](crate::Error::Unsupported).
pub trait Element: blockscale_cpu::Input + blockscale_cpu::Output + CudaElement + sealed::Sealed {
    /// The CUDA GEMV of `x` (`m x k`, this type) by `w`: bf16 and f16 run the GEMV
    /// kernels, f32 is refused.
    #[doc(hidden)]
    #[cfg(feature = "cuda")]
    fn cuda_gemv<O: Element>(
        dev: &blockscale_cuda::Device,
        x: ArrayView2<'_, Self>,
        w: &QuantizedMatrix,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error>;

    /// As `cuda_gemv` on weights prepared on the device.
    #[doc(hidden)]
    #[cfg(feature = "cuda")]
    fn cuda_gemv_prepared<O: Element>(
        dev: &blockscale_cuda::Device,
        x: ArrayView2<'_, Self>,
        w: &blockscale_cuda::PreparedWeights,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error>;

    /// The weight-only GEMM of `x` (any M) by weights prepared on the device: bf16 and
    /// f16 run it, f32 is refused (the prepared kernels read bf16 or f16).
    #[doc(hidden)]
    #[cfg(feature = "cuda")]
    fn cuda_gemm_weight_only_prepared<O: Element>(
        dev: &blockscale_cuda::Device,
        x: ArrayView2<'_, Self>,
        w: &blockscale_cuda::PreparedWeights,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error>;
}

/// The CUDA GEMV's refusal of f32 activations.
#[cfg(feature = "cuda")]
fn f32_gemv() -> crate::Error {
    crate::Error::Unsupported {
        backend: "cuda",
        what: "a GEMV with f32 activations (the CUDA GEMV reads bf16 or f16; convert them, or use \
               gemm_weight_only, which takes f32)",
    }
}

impl Element for f32 {
    #[cfg(feature = "cuda")]
    fn cuda_gemv<O: Element>(
        _: &blockscale_cuda::Device,
        _: ArrayView2<'_, Self>,
        _: &QuantizedMatrix,
        _: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error> {
        Err(f32_gemv())
    }

    #[cfg(feature = "cuda")]
    fn cuda_gemv_prepared<O: Element>(
        _: &blockscale_cuda::Device,
        _: ArrayView2<'_, Self>,
        _: &blockscale_cuda::PreparedWeights,
        _: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error> {
        Err(f32_gemv())
    }

    #[cfg(feature = "cuda")]
    fn cuda_gemm_weight_only_prepared<O: Element>(
        _: &blockscale_cuda::Device,
        _: ArrayView2<'_, Self>,
        _: &blockscale_cuda::PreparedWeights,
        _: &Epilogue<'_>,
    ) -> Result<Array2<O>, crate::Error> {
        Err(crate::Error::Unsupported {
            backend: "cuda",
            what: "f32 activations on prepared weights (the prepared kernels read bf16 or f16; convert \
                   them, or use gemm_weight_only on the QuantizedMatrix, which takes f32)",
        })
    }
}

macro_rules! gemv_element {
    ($t:ty) => {
        impl Element for $t {
            #[cfg(feature = "cuda")]
            fn cuda_gemv<O: Element>(
                dev: &blockscale_cuda::Device,
                x: ArrayView2<'_, Self>,
                w: &QuantizedMatrix,
                epilogue: &Epilogue<'_>,
            ) -> Result<Array2<O>, crate::Error> {
                Ok(blockscale_cuda::gemv_host::<Self, O>(dev, x, w, epilogue)?)
            }

            #[cfg(feature = "cuda")]
            fn cuda_gemv_prepared<O: Element>(
                dev: &blockscale_cuda::Device,
                x: ArrayView2<'_, Self>,
                w: &blockscale_cuda::PreparedWeights,
                epilogue: &Epilogue<'_>,
            ) -> Result<Array2<O>, crate::Error> {
                Ok(blockscale_cuda::gemv_prepared_host::<Self, O>(dev, x, w, epilogue)?)
            }

            #[cfg(feature = "cuda")]
            fn cuda_gemm_weight_only_prepared<O: Element>(
                dev: &blockscale_cuda::Device,
                x: ArrayView2<'_, Self>,
                w: &blockscale_cuda::PreparedWeights,
                epilogue: &Epilogue<'_>,
            ) -> Result<Array2<O>, crate::Error> {
                Ok(blockscale_cuda::gemm_weight_only_prepared_host::<Self, O>(dev, x, w, epilogue)?)
            }
        }
    };
}
gemv_element!(f16);
gemv_element!(bf16);
