//! The GEMM epilogue (the formats crate's, shared with the cuda backend): checking it
//! against the operands and resolving `alpha`.

pub use blockscale_formats::{Activation, Epilogue};
use blockscale_formats::{GlobalScale, QuantizedMatrix, Scheme};

use crate::CpuError;

/// The `alpha` used with these operands (`a` is `None` for f32/f16/bf16
/// activations), after checking it and the bias against `n` output columns.
pub(crate) fn resolve_alpha(
    epilogue: &Epilogue<'_>,
    a: Option<&QuantizedMatrix>,
    b: &QuantizedMatrix,
    n: usize,
) -> Result<f32, CpuError> {
    let alpha = match a {
        Some(a) => epilogue.alpha_quantized(a.global_scale(), b.global_scale()),
        None => epilogue.alpha_weight_only(b.scheme(), b.global_scale()),
    };
    checked(epilogue, alpha, n)
}

/// The `alpha` of a weight-only product with weights of `scheme` and per-tensor scale
/// `global`, after checking it and the bias against `n` output columns.
pub(crate) fn resolve_weight_only(
    epilogue: &Epilogue<'_>,
    scheme: Scheme,
    global: Option<GlobalScale>,
    n: usize,
) -> Result<f32, CpuError> {
    checked(epilogue, epilogue.alpha_weight_only(scheme, global), n)
}

fn checked(epilogue: &Epilogue<'_>, alpha: f32, n: usize) -> Result<f32, CpuError> {
    if let Some(bias) = epilogue.bias {
        if bias.len() != n {
            return Err(CpuError::BiasLength { expected: n, actual: bias.len() });
        }
        if let Some((index, &value)) = bias.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(CpuError::NonFiniteBias { index, value });
        }
    }
    if !alpha.is_finite() {
        return Err(CpuError::InvalidAlpha(alpha));
    }
    Ok(alpha)
}
