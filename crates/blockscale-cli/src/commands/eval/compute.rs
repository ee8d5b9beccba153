//! What `eval` computes: each (tensor, scheme) pair quantized on the CPU, dequantized
//! and measured against the original, the pairs a scheme cannot hold, and the
//! per-scheme totals.

use std::path::PathBuf;
use std::time::Instant;

use blockscale::ndarray::ArrayView2;
use blockscale::{CpuError, QuantizeOptions, Scheme, dequantize, error_metrics};
use serde::Serialize;

use crate::error::CliError;
use crate::report::EvalRow;
use crate::values::FloatValues;

/// One weight to evaluate: a row-major `rows x k` matrix quantized along K.
#[derive(Clone, Debug)]
pub struct EvalTensor<'a> {
    /// The file it was read from, for error messages (`<demo>` for the demo weights).
    pub source: PathBuf,
    /// Its name.
    pub name: String,
    /// Rows (N).
    pub rows: usize,
    /// K, the quantized dimension.
    pub k: usize,
    /// `rows * k` values, row-major.
    pub values: FloatValues<'a>,
}

/// A (tensor, scheme) pair left out because the scheme cannot hold the tensor's shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// Tensor name.
    pub tensor: String,
    /// Scheme name.
    pub scheme: String,
    /// Rows of the tensor.
    pub rows: usize,
    /// K of the tensor.
    pub k: usize,
    /// Why.
    pub reason: String,
}

/// One scheme over every tensor it was applied to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchemeSummary {
    /// Scheme name.
    pub scheme: String,
    /// Tensors evaluated.
    pub tensors: usize,
    /// Mean of the tensors' SQNR in dB (`null` in JSON when one is exact: infinite).
    pub mean_sqnr_db: f64,
    /// Smallest SQNR in dB.
    pub min_sqnr_db: f64,
    /// Bytes of the original tensors.
    pub bytes_in: usize,
    /// Bytes of the quantized tensors (elements, scales, per-tensor scales).
    pub bytes_out: usize,
    /// `bytes_in / bytes_out`.
    pub compression: f64,
    /// Storage bits per weight over all the tensors.
    pub bits_per_weight: f64,
}

impl Skipped {
    /// `tensor` left out of `scheme`, which cannot hold its shape (see [`applicable`]).
    pub fn new(tensor: &EvalTensor<'_>, scheme: Scheme) -> Self {
        Self {
            tensor: tensor.name.clone(),
            scheme: scheme.name().to_owned(),
            rows: tensor.rows,
            k: tensor.k,
            reason: not_applicable_reason(scheme, tensor.rows, tensor.k),
        }
    }
}

/// Whether `scheme` can quantize a `rows x k` matrix (K a multiple of its block, no
/// empty dimension). Checkpoint evaluation skips the pairs where it cannot.
pub fn applicable(scheme: Scheme, rows: usize, k: usize) -> bool {
    scheme.shape(rows, k).is_ok()
}

fn not_applicable_reason(scheme: Scheme, rows: usize, k: usize) -> String {
    if rows == 0 || k == 0 {
        format!("empty shape [{rows}, {k}]")
    } else {
        format!("K = {k} is not a multiple of the {}-element block of {scheme}", scheme.block_size())
    }
}

/// Quantizes `tensor` with `scheme` on the CPU (default options), dequantizes it to f32
/// and measures the error against the original values.
///
/// # Errors
/// [`CheckpointError::Tensor`](blockscale::checkpoint::CheckpointError::Tensor) if the values are not `rows * k` or the scheme cannot hold the
/// shape (see [`applicable`]); [`CliError::NonFinite`] for NaN or Inf in the weights.
pub fn evaluate(tensor: &EvalTensor<'_>, scheme: Scheme) -> Result<EvalRow, CliError> {
    let EvalTensor { source, name, rows, k, values } = tensor;
    let (rows, k) = (*rows, *k);
    if Some(values.len()) != rows.checked_mul(k) {
        return Err(CliError::tensor(
            source,
            name,
            format!("{} values do not make a [{rows}, {k}] matrix", values.len()),
        ));
    }
    if !applicable(scheme, rows, k) {
        return Err(CliError::tensor(source, name, not_applicable_reason(scheme, rows, k)));
    }
    let measured = blockscale::for_float_values!(values, |v| measure(v, rows, k, scheme));
    let (m, bytes_out, quantize_s) = measured.map_err(|e| match e {
        CpuError::NonFinite { row, col, value } => {
            CliError::NonFinite { path: source.clone(), tensor: name.clone(), row, col, value }
        }
        e => CliError::tensor(source, name, format!("{scheme}: {e}")),
    })?;
    let len = values.len();
    let bytes_in = len * values.kind().bytes();
    Ok(EvalRow {
        tensor: name.clone(),
        scheme: scheme.name().to_owned(),
        rows,
        k,
        sqnr_db: m.sqnr_db,
        cosine: m.cosine,
        max_abs: m.max_abs,
        max_rel: m.max_rel,
        rmse: m.rmse,
        bytes_in,
        bytes_out,
        compression: bytes_in as f64 / bytes_out as f64,
        bits_per_weight: (bytes_out * 8) as f64 / len as f64,
        quantize_s,
    })
}

/// Quantize (timed), dequantize, compare: the metrics, the storage bytes and the seconds.
fn measure<T: blockscale::cpu::Input>(
    values: &[T],
    rows: usize,
    k: usize,
    scheme: Scheme,
) -> Result<(blockscale::ErrorMetrics, usize, f64), CpuError> {
    let reference = ArrayView2::from_shape((rows, k), values).expect("length checked against rows * k");
    let start = Instant::now();
    let q = blockscale::quantize(reference, scheme, &QuantizeOptions::default())?;
    let seconds = start.elapsed().as_secs_f64();
    let back = dequantize::<f32>(&q);
    Ok((error_metrics(reference, back.view())?, q.storage_bytes(), seconds))
}

/// Per-scheme totals over `rows`, schemes in the order given.
pub fn summarize(schemes: &[Scheme], rows: &[EvalRow]) -> Vec<SchemeSummary> {
    schemes
        .iter()
        .filter_map(|s| {
            let mine: Vec<&EvalRow> = rows.iter().filter(|r| r.scheme == s.name()).collect();
            if mine.is_empty() {
                return None;
            }
            let bytes_in: usize = mine.iter().map(|r| r.bytes_in).sum();
            let bytes_out: usize = mine.iter().map(|r| r.bytes_out).sum();
            let weights: usize = mine.iter().map(|r| r.rows * r.k).sum();
            Some(SchemeSummary {
                scheme: s.name().to_owned(),
                tensors: mine.len(),
                mean_sqnr_db: mine.iter().map(|r| r.sqnr_db).sum::<f64>() / mine.len() as f64,
                min_sqnr_db: mine.iter().map(|r| r.sqnr_db).fold(f64::INFINITY, f64::min),
                bytes_in,
                bytes_out,
                compression: bytes_in as f64 / bytes_out as f64,
                bits_per_weight: (bytes_out * 8) as f64 / weights as f64,
            })
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use half::bf16;

    /// A tensor `w` of `rows x k` f32 values, for the tests here and in `eval`.
    pub(in crate::commands::eval) fn tensor(rows: usize, k: usize, values: Vec<f32>) -> EvalTensor<'static> {
        EvalTensor {
            source: "t.safetensors".into(),
            name: "w".into(),
            rows,
            k,
            values: FloatValues::F32(values.into()),
        }
    }

    #[test]
    fn applicability_follows_the_block() {
        assert!(applicable(Scheme::NvFp4, 3, 16));
        assert!(!applicable(Scheme::MxFp4, 3, 16));
        assert!(!applicable(Scheme::Fp8Block(blockscale::Fp8Tile::Row1x128), 3, 64));
        assert!(applicable(Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128), 3, 128));
        assert!(!applicable(Scheme::NvFp4, 0, 16));
    }

    #[test]
    fn exactly_representable_values_are_exact() {
        // Powers of two and small integers times a power of two: exact in E2M1 once the
        // block scale is 1 (block amax 6), and in every wider element format too.
        let grid = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        let values: Vec<f32> = (0..4 * 128).map(|i| grid[i % 8] * if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let t = tensor(4, 128, values);
        // (Not FP8 block: its f32 scale amax / 448 is no power of two.)
        for scheme in [Scheme::MxFp4, Scheme::MxFp6E2M3, Scheme::MxFp6E3M2, Scheme::MxFp8E4M3, Scheme::MxFp8E5M2] {
            let r = evaluate(&t, scheme).unwrap();
            assert_eq!(r.sqnr_db, f64::INFINITY, "{scheme}");
            assert!((r.cosine - 1.0).abs() < 1e-12, "{scheme}");
            assert_eq!((r.max_abs, r.max_rel, r.rmse), (0.0, 0.0, 0.0), "{scheme}");
            assert_eq!((r.tensor.as_str(), r.scheme.as_str(), r.rows, r.k), ("w", scheme.name(), 4, 128));
            assert_eq!(r.bytes_in, 4 * 128 * 4);
        }
        // MXFP4: 4 x 128 / 2 element bytes + 4 x 4 UE8M0 scales.
        let r = evaluate(&t, Scheme::MxFp4).unwrap();
        assert_eq!(r.bytes_out, 256 + 16);
        assert_eq!(r.bits_per_weight, 4.25);
        assert_eq!(r.compression, 2048.0 / 272.0);
        // NVFP4: 256 element bytes + 4 x 8 UE4M3 scales + the f32 per-tensor scale.
        let r = evaluate(&t, Scheme::NvFp4).unwrap();
        assert_eq!(r.bytes_out, 256 + 32 + 4);
        assert!(r.quantize_s >= 0.0);
    }

    #[test]
    fn lossy_schemes_report_finite_errors() {
        let values: Vec<f32> = (0..8 * 64).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let t = tensor(8, 64, values);
        let nv = evaluate(&t, Scheme::NvFp4).unwrap();
        let mx8 = evaluate(&t, Scheme::MxFp8E4M3).unwrap();
        assert!(nv.sqnr_db.is_finite() && nv.sqnr_db > 10.0, "{nv:?}");
        assert!(mx8.sqnr_db > nv.sqnr_db + 10.0, "{mx8:?} vs {nv:?}");
        assert!(nv.max_abs > 0.0 && nv.cosine < 1.0 && nv.cosine > 0.9);
    }

    #[test]
    fn bad_shapes_and_non_finite_values_name_the_tensor() {
        let e = evaluate(&tensor(2, 48, vec![1.0; 96]), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::Checkpoint(blockscale::checkpoint::CheckpointError::Tensor { .. })), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("t.safetensors") && msg.contains("\"w\"") && msg.contains("32"), "{msg}");
        assert!(msg.contains("K = 48"), "{msg}");

        let e = evaluate(&tensor(2, 32, vec![1.0; 63]), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::Checkpoint(blockscale::checkpoint::CheckpointError::Tensor { .. })), "{e:?}");

        let mut v = vec![1.0; 64];
        v[40] = f32::NAN;
        let e = evaluate(&tensor(2, 32, v), Scheme::MxFp4).unwrap_err();
        assert!(matches!(e, CliError::NonFinite { row: 1, col: 8, .. }), "{e:?}");
    }

    #[test]
    fn bf16_and_f16_inputs_count_two_bytes() {
        let v: Vec<bf16> = (0..64).map(|i| bf16::from_f32(i as f32)).collect();
        let t =
            EvalTensor { source: "x".into(), name: "b".into(), rows: 2, k: 32, values: FloatValues::Bf16(v.into()) };
        let r = evaluate(&t, Scheme::MxFp8E5M2).unwrap();
        assert_eq!(r.bytes_in, 128);
        assert_eq!(r.bytes_out, 64 + 2);
    }

    #[test]
    fn summary_totals_each_scheme_in_the_order_asked() {
        let t = tensor(2, 64, (0..128).map(|i| (i as f32 - 60.0) / 9.0).collect());
        let odd = EvalTensor {
            name: "odd".into(),
            rows: 2,
            k: 16,
            values: FloatValues::F32(vec![1.0; 32].into()),
            ..t.clone()
        };
        let rows = vec![
            evaluate(&t, Scheme::NvFp4).unwrap(),
            evaluate(&t, Scheme::MxFp4).unwrap(),
            evaluate(&odd, Scheme::NvFp4).unwrap(),
        ];
        let s = summarize(&[Scheme::MxFp8E4M3, Scheme::NvFp4, Scheme::MxFp4], &rows);
        // No row for MXFP8: no summary entry; NVFP4 first, as asked.
        assert_eq!(s.iter().map(|s| s.scheme.as_str()).collect::<Vec<_>>(), ["nvfp4", "mxfp4"]);
        assert_eq!(s[0].tensors, 2);
        assert_eq!(s[0].bytes_in, rows[0].bytes_in + rows[2].bytes_in);
        assert_eq!(s[0].bytes_out, rows[0].bytes_out + rows[2].bytes_out);
        assert_eq!(s[0].min_sqnr_db, rows[0].sqnr_db.min(rows[2].sqnr_db));
        assert_eq!(s[0].mean_sqnr_db, (rows[0].sqnr_db + rows[2].sqnr_db) / 2.0);
        assert_eq!(s[0].bits_per_weight, ((rows[0].bytes_out + rows[2].bytes_out) * 8) as f64 / (128 + 32) as f64);
        assert_eq!(
            s[1],
            SchemeSummary {
                scheme: "mxfp4".into(),
                tensors: 1,
                mean_sqnr_db: rows[1].sqnr_db,
                min_sqnr_db: rows[1].sqnr_db,
                bytes_in: rows[1].bytes_in,
                bytes_out: rows[1].bytes_out,
                compression: rows[1].compression,
                bits_per_weight: rows[1].bits_per_weight,
            }
        );
    }

    #[test]
    fn a_skipped_pair_says_why() {
        let t = tensor(2, 48, vec![1.0; 96]);
        let s = Skipped::new(&t, Scheme::MxFp4);
        assert_eq!((s.tensor.as_str(), s.scheme.as_str(), s.rows, s.k), ("w", "mxfp4", 2, 48));
        assert_eq!(s.reason, "K = 48 is not a multiple of the 32-element block of mxfp4");
        assert_eq!(Skipped::new(&tensor(0, 16, vec![]), Scheme::NvFp4).reason, "empty shape [0, 16]");
    }
}
