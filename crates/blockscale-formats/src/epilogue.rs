//! The GEMM epilogue shared by every backend: `alpha`, a per-column bias and an
//! activation, applied in that order to the accumulated products.

use core::borrow::Borrow;
use core::fmt;

use crate::{GlobalScale, Scheme, nvfp4_alpha};

/// An activation fused into the GEMM epilogue, applied after `alpha` and the bias.
///
/// [`Activation::apply`] is the reference: f64 with the `libm` crate's functions (the
/// same bits on every platform), rounded once to the output type by the caller. GPU
/// kernels evaluate it in f32 and state their error in docs/KERNELS.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Activation {
    /// No activation.
    #[default]
    Identity,
    /// GELU, tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// GELU, erf form: `0.5 x (1 + erf(x / sqrt(2)))`.
    GeluErf,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu,
}

impl Activation {
    /// The activation of `x`, in f64.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Self::Identity => x,
            Self::GeluTanh => {
                let c = libm::sqrt(2.0 / core::f64::consts::PI);
                0.5 * x * (1.0 + libm::tanh(c * (x + 0.044715 * x * x * x)))
            }
            Self::GeluErf => 0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2)),
            Self::Silu => x / (1.0 + libm::exp(-x)),
        }
    }
}

/// What happens to the accumulated products: `D = act(alpha * (A . B^T) + bias)`.
///
/// `B` is where the bias lives: a host slice (`[f32]`, the default, what the CPU
/// backend takes) or a device buffer (the cuda backend's `DeviceEpilogue`).
///
/// `alpha: None` (the default) takes it from the operands: for two NVFP4 operands
/// `1 / (encode_a * encode_b)` ([`nvfp4_alpha`], what vLLM passes to its kernels), for
/// NVFP4 weights under f32/f16/bf16 activations the weights' decode factor, and 1
/// otherwise, so that `D` approximates the product of the original matrices. Set it to
/// pass an explicit factor instead, as a GPU kernel's `alpha` argument.
///
/// ```
/// use blockscale_formats::{Activation, Epilogue};
/// let bias = vec![0.5f32; 64];
/// // A host epilogue (`Epilogue<'_, [f32]>`); passed straight to a GEMM, the type is
/// // inferred from the call.
/// let e: Epilogue = Epilogue::default().with_alpha(0.25).with_bias(&bias).with_activation(Activation::Silu);
/// assert_eq!(e.alpha, Some(0.25));
/// assert_eq!(e.bias.map(|b| b.len()), Some(64));
/// ```
pub struct Epilogue<'a, B: ?Sized = [f32]> {
    /// The factor on the accumulated sum (`None`: from the operands' per-tensor scales).
    pub alpha: Option<f32>,
    /// One value per output column (N of them), added after `alpha`.
    pub bias: Option<&'a B>,
    /// Applied last.
    pub activation: Activation,
}

impl<B: ?Sized> Default for Epilogue<'_, B> {
    fn default() -> Self {
        Self { alpha: None, bias: None, activation: Activation::Identity }
    }
}

impl<B: ?Sized> Clone for Epilogue<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for Epilogue<'_, B> {}

impl<B: ?Sized + fmt::Debug> fmt::Debug for Epilogue<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Epilogue")
            .field("alpha", &self.alpha)
            .field("bias", &self.bias)
            .field("activation", &self.activation)
            .finish()
    }
}

impl<B: ?Sized + PartialEq> PartialEq for Epilogue<'_, B> {
    fn eq(&self, other: &Self) -> bool {
        self.alpha == other.alpha && self.bias == other.bias && self.activation == other.activation
    }
}

impl<'a, B: ?Sized> Epilogue<'a, B> {
    /// Sets an explicit `alpha`.
    pub fn with_alpha(mut self, alpha: f32) -> Self {
        self.alpha = Some(alpha);
        self
    }

    /// Sets the per-column bias: for a host epilogue anything that borrows as `[f32]`
    /// (`&Vec<f32>`, `&[f32]`, an array), for a device one the device buffer.
    pub fn with_bias<C: ?Sized + Borrow<B>>(mut self, bias: &'a C) -> Self {
        self.bias = Some(bias.borrow());
        self
    }

    /// Sets the activation.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// The `alpha` of a quantized x quantized product with these per-tensor scales:
    /// the explicit one if set, else [`nvfp4_alpha`] when both operands carry one, else
    /// 1. Not checked for finiteness; backends reject a non-finite result.
    ///
    /// ```
    /// use blockscale_formats::{Epilogue, GlobalScale};
    /// let g = GlobalScale::from_encode(4.0)?;
    /// let e: Epilogue<'_> = Epilogue::default();
    /// assert_eq!(e.alpha_quantized(Some(g), Some(g)), 1.0 / 16.0);
    /// assert_eq!(e.with_alpha(3.0).alpha_quantized(Some(g), Some(g)), 3.0);
    /// # Ok::<(), blockscale_formats::FormatError>(())
    /// ```
    pub fn alpha_quantized(&self, a: Option<GlobalScale>, b: Option<GlobalScale>) -> f32 {
        match (self.alpha, a, b) {
            (Some(alpha), _, _) => alpha,
            (None, Some(ga), Some(gb)) => nvfp4_alpha(ga, gb),
            _ => 1.0,
        }
    }

    /// The `alpha` of f32/f16/bf16 activations times `weights` quantized with `scheme`
    /// and per-tensor scale `global`: the explicit one if set, else the NVFP4 weights'
    /// decode factor, else 1.
    pub fn alpha_weight_only(&self, scheme: Scheme, global: Option<GlobalScale>) -> f32 {
        match (self.alpha, global) {
            (Some(alpha), _) => alpha,
            (None, Some(g)) if scheme == Scheme::NvFp4 => g.decode(),
            _ => 1.0,
        }
    }
}
