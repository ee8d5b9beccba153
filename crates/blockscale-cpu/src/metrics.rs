//! Error metrics between a reference and an approximation (SQNR, cosine similarity,
//! max abs and max relative error), accumulated in f64 in a fixed order.

use ndarray::ArrayView2;

use crate::{CpuError, Input};

/// How far an approximation is from a reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorMetrics {
    /// Signal-to-quantization-noise ratio, `10 log10(sum r^2 / sum (a - r)^2)`, in dB;
    /// `+inf` when the approximation is exact.
    pub sqnr_db: f64,
    /// Cosine similarity `sum r a / sqrt(sum r^2 sum a^2)`; 1 when both are all zero,
    /// 0 when exactly one is.
    pub cosine: f64,
    /// Largest `|a - r|`.
    pub max_abs: f64,
    /// Largest `|a - r| / |r|` over the non-zero reference values (0 if there are none).
    pub max_rel: f64,
    /// Root mean square of `a - r`.
    pub rmse: f64,
    /// Number of values compared.
    pub count: usize,
}

/// Compares `approx` with `reference` element by element. NaN or Inf in either makes
/// the affected metrics NaN or Inf, as IEEE arithmetic does.
///
/// ```
/// use blockscale_cpu::error_metrics_slice;
/// let m = error_metrics_slice(&[1.0f32, -2.0, 4.0], &[1.0f32, -2.0, 3.0]).unwrap();
/// assert_eq!(m.max_abs, 1.0);
/// assert_eq!(m.max_rel, 0.25);
/// assert!((m.sqnr_db - 10.0 * 21f64.log10()).abs() < 1e-12);
/// ```
///
/// # Errors
/// [`CpuError::ShapeMismatch`] if the shapes differ.
pub fn error_metrics<A: Input, B: Input>(
    reference: ArrayView2<'_, A>,
    approx: ArrayView2<'_, B>,
) -> Result<ErrorMetrics, CpuError> {
    if reference.dim() != approx.dim() {
        return Err(CpuError::ShapeMismatch { a: reference.dim(), b: approx.dim() });
    }
    Ok(accumulate(reference.iter().zip(approx.iter()).map(|(&r, &a)| (r.to_f32_exact(), a.to_f32_exact()))))
}

/// [`error_metrics`] for flat slices.
///
/// # Errors
/// [`CpuError::ShapeMismatch`] if the lengths differ.
pub fn error_metrics_slice<A: Input, B: Input>(reference: &[A], approx: &[B]) -> Result<ErrorMetrics, CpuError> {
    if reference.len() != approx.len() {
        return Err(CpuError::ShapeMismatch { a: (1, reference.len()), b: (1, approx.len()) });
    }
    Ok(accumulate(reference.iter().zip(approx).map(|(&r, &a)| (r.to_f32_exact(), a.to_f32_exact()))))
}

fn accumulate(pairs: impl Iterator<Item = (f32, f32)>) -> ErrorMetrics {
    let (mut rr, mut aa, mut ra, mut ee) = (0f64, 0f64, 0f64, 0f64);
    let (mut max_abs, mut max_rel, mut count) = (0f64, 0f64, 0usize);
    let fmax = |m: f64, x: f64| if x > m || x.is_nan() { x } else { m };
    for (r, a) in pairs {
        let (r, a) = (r as f64, a as f64);
        let e = a - r;
        rr += r * r;
        aa += a * a;
        ra += r * a;
        ee += e * e;
        max_abs = fmax(max_abs, e.abs());
        if r != 0.0 {
            max_rel = fmax(max_rel, e.abs() / r.abs());
        }
        count += 1;
    }
    let sqnr_db = if ee == 0.0 { f64::INFINITY } else { 10.0 * (rr / ee).log10() };
    let cosine = if rr == 0.0 && aa == 0.0 {
        1.0
    } else if rr == 0.0 || aa == 0.0 {
        0.0
    } else {
        ra / (rr.sqrt() * aa.sqrt())
    };
    let rmse = if count == 0 { 0.0 } else { (ee / count as f64).sqrt() };
    ErrorMetrics { sqnr_db, cosine, max_abs, max_rel, rmse, count }
}
