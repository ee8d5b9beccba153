//! The element types the [`Backend`](crate::Backend) API takes and returns: f32, f16 and
//! bf16, each accepted by every backend built in. They are the formats crate's sealed
//! [`Source`](blockscale_formats::Source) types; [`Element`] adds what each backend asks
//! of them.

#[cfg(feature = "cuda")]
use half::{bf16, f16};
#[cfg(feature = "cuda")]
use ndarray::ArrayView2;

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

/// Activations the CUDA GEMV and prepared kernels read: bf16 or f16 (f32 has none).
#[doc(hidden)]
#[cfg(feature = "cuda")]
pub enum HalfView<'a> {
    /// f16 activations.
    F16(ArrayView2<'a, f16>),
    /// bf16 activations.
    Bf16(ArrayView2<'a, bf16>),
}

/// An element type of the [`Backend`](crate::Backend) API's inputs and outputs: `f32`,
/// [`half::f16`] or [`half::bf16`] (sealed by [`Source`](blockscale_formats::Source)).
/// Quantize, dequantize, the GEMMs and the GEMV take and return any of them on every
/// backend, with one exception the type system cannot see: the CUDA GEMV and the
/// prepared kernels read bf16 or f16 activations, and refuse f32 ones with
/// [`Error::Unsupported`](crate::Error::Unsupported).
pub trait Element: blockscale_cpu::Input + CudaElement {
    /// The activations as the CUDA GEMV's input type; `None` for f32.
    #[doc(hidden)]
    #[cfg(feature = "cuda")]
    fn half_view(x: ArrayView2<'_, Self>) -> Option<HalfView<'_>>;
}

impl Element for f32 {
    #[cfg(feature = "cuda")]
    fn half_view(_: ArrayView2<'_, Self>) -> Option<HalfView<'_>> {
        None
    }
}

impl Element for half::f16 {
    #[cfg(feature = "cuda")]
    fn half_view(x: ArrayView2<'_, Self>) -> Option<HalfView<'_>> {
        Some(HalfView::F16(x))
    }
}

impl Element for half::bf16 {
    #[cfg(feature = "cuda")]
    fn half_view(x: ArrayView2<'_, Self>) -> Option<HalfView<'_>> {
        Some(HalfView::Bf16(x))
    }
}
