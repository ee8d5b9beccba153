//! The GEMM epilogue: `alpha`, bias and activation, in that order.

use blockscale_formats::{QuantizedMatrix, Scheme, nvfp4_alpha};

use crate::CpuError;

/// An activation fused into the GEMM epilogue, applied after `alpha` and the bias.
///
/// Evaluated in f64 with the `libm` crate's functions (the same bits on every platform),
/// then rounded once to the output type.
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
                let c = (2.0 / core::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + libm::tanh(c * (x + 0.044715 * x * x * x)))
            }
            Self::GeluErf => 0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2)),
            Self::Silu => x / (1.0 + libm::exp(-x)),
        }
    }
}

/// What happens to the accumulated products: `D = act(alpha * (A . B^T) + bias)`.
///
/// `alpha: None` (the default) takes it from the operands: for two NVFP4 operands
/// `1 / (encode_a * encode_b)` ([`nvfp4_alpha`], what vLLM passes to its kernels), for
/// NVFP4 weights under f32/f16/bf16 activations the weights' decode factor, and 1
/// otherwise, so that `D` approximates the product of the original matrices. Set it to
/// pass an explicit factor instead, as a GPU kernel's `alpha` argument.
///
/// ```
/// use blockscale_cpu::{Activation, Epilogue};
/// let bias = vec![0.5f32; 64];
/// let e = Epilogue::default().with_alpha(0.25).with_bias(&bias).with_activation(Activation::Silu);
/// assert_eq!(e.alpha, Some(0.25));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Epilogue<'a> {
    /// The factor on the accumulated sum (`None`: from the operands' per-tensor scales).
    pub alpha: Option<f32>,
    /// One value per output column (N of them), added after `alpha`.
    pub bias: Option<&'a [f32]>,
    /// Applied last.
    pub activation: Activation,
}

impl<'a> Epilogue<'a> {
    /// Sets an explicit `alpha`.
    pub fn with_alpha(mut self, alpha: f32) -> Self {
        self.alpha = Some(alpha);
        self
    }

    /// Sets the per-column bias.
    pub fn with_bias(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Sets the activation.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// The `alpha` used with these operands (`a` is `None` for f32/f16/bf16
    /// activations), after checking it and the bias against `n` output columns.
    pub(crate) fn resolve(&self, a: Option<&QuantizedMatrix>, b: &QuantizedMatrix, n: usize) -> Result<f32, CpuError> {
        if let Some(bias) = self.bias {
            if bias.len() != n {
                return Err(CpuError::BiasLength { expected: n, actual: bias.len() });
            }
            if let Some((index, &value)) = bias.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(CpuError::NonFiniteBias { index, value });
            }
        }
        let alpha = match self.alpha {
            Some(alpha) => alpha,
            None => match (a.and_then(|a| a.global_scale()), b.global_scale()) {
                (Some(ga), Some(gb)) => nvfp4_alpha(ga, gb),
                (None, Some(gb)) if a.is_none() && b.scheme() == Scheme::NvFp4 => gb.decode(),
                _ => 1.0,
            },
        };
        if !alpha.is_finite() {
            return Err(CpuError::InvalidAlpha(alpha));
        }
        Ok(alpha)
    }
}
