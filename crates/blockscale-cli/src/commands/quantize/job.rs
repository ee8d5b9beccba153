//! `quantize`, stage 2: one weight, quantized on the backend and encoded as the output
//! convention's tensors. The same settings serve every weight of a run.

use std::path::Path;

use blockscale::{Backend, GlobalScale, QuantizeOptions, ScaleData, ScaleFormat, Scheme};
use indicatif::ProgressBar;

use blockscale::checkpoint::TensorEntry;
use crate::cli::{ConventionArg, RecipeArg};
use blockscale::checkpoint::convention::modelopt::fp8_per_tensor as fp8_layout;
use blockscale::checkpoint::encode;
use blockscale::checkpoint::recipe::{fp8_per_tensor, modelopt_nvfp4};
use crate::error::CliError;
use crate::scheme_arg::QuantizeScheme;
use crate::values;


/// How every weight of a run is quantized and stored.
pub struct Job {
    /// Where to compute.
    pub backend: Backend,
    /// The scheme.
    pub scheme: QuantizeScheme,
    /// The output convention.
    pub convention: ConventionArg,
    /// Scale layout, NaN/Inf handling and the per-tensor scale's source.
    pub options: QuantizeOptions,
    /// Whose NVFP4 scale choices (`--recipe modelopt` quantizes on the CPU, in the CLI).
    pub recipe: RecipeArg,
}

/// How one weight is quantized.
pub struct WeightPlan {
    /// Rows (N).
    pub rows: usize,
    /// K, the quantized dimension.
    pub k: usize,
    /// The NVFP4 activation scale from calibration, if the layer has an entry.
    pub input_scale: Option<GlobalScale>,
    /// The activations' amax from calibration, if the layer has an entry (FP8 per
    /// tensor: `input_scale` = amax / 448).
    pub activation_amax: Option<f32>,
    /// The names of the output tensors it becomes.
    pub outputs: Vec<String>,
}

/// One weight to quantize: where it comes from, its bytes and its plan.
pub struct Weight<'a> {
    /// The shard it is read from (for messages).
    pub path: &'a Path,
    /// Its header entry (name, dtype, shape).
    pub tensor: &'a TensorEntry,
    /// Its data, little-endian, in its dtype.
    pub bytes: &'a [u8],
    /// Its shape and calibration, as planned.
    pub plan: &'a WeightPlan,
}

/// One weight quantized: its output tensors, ready to write.
pub struct Quantized {
    /// `(name, bytes)` of the convention's tensors, in plan order.
    pub tensors: Vec<(String, Vec<u8>)>,
    /// Blocks stored as NaN because they held NaN/Inf (`--non-finite poison`).
    pub poisoned_blocks: usize,
}

impl Job {
    /// Quantizes `w` and encodes it; poisoned blocks are reported on stderr as a
    /// warning (with `progress` suspended so the line stays readable).
    ///
    /// # Errors
    /// [`CliError::NonFinite`] naming the row and column of a NaN/Inf under
    /// `--non-finite error`; [`CheckpointError::Tensor`](blockscale::checkpoint::CheckpointError::Tensor) for any other backend error.
    pub fn run(&self, w: Weight<'_>, progress: &ProgressBar) -> Result<Quantized, CliError> {
        let Weight { path, tensor: t, bytes, plan } = w;
        let values = values::from_le_bytes(t.dtype, bytes).expect("selected tensors are float");
        let scheme = match self.scheme {
            QuantizeScheme::Block(s) => s,
            QuantizeScheme::Fp8PerTensor => {
                // On the CPU whatever the backend: one pass over the values, memory-bound.
                let q = fp8_per_tensor::quantize(&values, plan.k).map_err(|(row, col, value)| CliError::NonFinite {
                    path: path.to_owned(),
                    tensor: t.name.clone(),
                    row,
                    col,
                    value,
                })?;
                let input_scale = plan.activation_amax.map(|a| a / 448.0);
                let tensors = fp8_layout::encode(&t.name, q.codes, q.scale, input_scale);
                return Ok(Quantized { tensors, poisoned_blocks: 0 });
            }
        };
        let q = match self.recipe {
            RecipeArg::Modelopt => {
                modelopt_nvfp4::quantize(&values, plan.rows, plan.k).map_err(|at| CliError::NonFinite {
                    path: path.to_owned(),
                    tensor: t.name.clone(),
                    row: at.row,
                    col: at.col,
                    value: at.value,
                })?
            }
            RecipeArg::Blockscale => {
                values::quantize(&values, &self.backend, (plan.rows, plan.k), scheme, &self.options)
                    .map_err(|e| self.error(path, &t.name, &e))?
            }
        };
        drop(values);
        let poisoned_blocks = poisoned(q.scales(), scheme);
        self.warn_poisoned(path, &t.name, poisoned_blocks, progress);
        let tensors = encode(self.convention.writes(), &t.name, q, plan.input_scale)?;
        Ok(Quantized { tensors, poisoned_blocks })
    }
}

impl Job {
    /// Whether [`Job::run_into`] can quantize this run's weights into caller buffers
    /// that are then written as they are (every convention stores a library scheme's
    /// codes and scales unchanged): a library scheme with blockscale's recipe, on either
    /// backend (the GPU's through its pinned staging, `Backend::quantize_into`).
    pub fn quantizes_into(&self) -> bool {
        matches!(self.scheme, QuantizeScheme::Block(_)) && self.recipe == RecipeArg::Blockscale
    }

    /// [`Job::run`] into caller buffers (only where [`Job::quantizes_into`]): the codes
    /// go into `data` and the scales into `scales`, buffers of the sizes of the weight's
    /// first two planned tensors, to be written as they are; the rest (per-tensor
    /// scales) are returned.
    ///
    /// # Errors
    /// As [`Job::run`].
    pub fn run_into(
        &self,
        w: Weight<'_>,
        progress: &ProgressBar,
        data: &mut [u8],
        scales: &mut [u8],
    ) -> Result<Quantized, CliError> {
        let QuantizeScheme::Block(scheme) = self.scheme else {
            unreachable!("run_into is only called where quantizes_into() holds")
        };
        let Weight { path, tensor: t, bytes, plan } = w;
        let values = values::from_le_bytes(t.dtype, bytes).expect("selected tensors are float");
        let global =
            values::quantize_into(&values, &self.backend, (plan.rows, plan.k), scheme, &self.options, data, scales)
                .map_err(|e| self.error(path, &t.name, &e))?;
        drop(values);
        let poisoned_blocks = poisoned_bytes(scales, scheme);
        self.warn_poisoned(path, &t.name, poisoned_blocks, progress);
        let tensors =
            self.convention.writes().encode_rest(scheme, &t.name, (plan.rows, plan.k), global, plan.input_scale);
        Ok(Quantized { tensors, poisoned_blocks })
    }

    fn error(&self, path: &Path, tensor: &str, e: &blockscale::Error) -> CliError {
        match non_finite_at(e) {
            Some((row, col, value)) => {
                CliError::NonFinite { path: path.to_owned(), tensor: tensor.to_owned(), row, col, value }
            }
            None => CliError::tensor(path, tensor, e.to_string()),
        }
    }

    fn warn_poisoned(&self, path: &Path, tensor: &str, blocks: usize, progress: &ProgressBar) {
        if blocks > 0 {
            progress.suspend(|| {
                eprintln!(
                    "warning: {}: tensor {tensor:?}: {blocks} blocks held NaN/Inf and are stored as NaN blocks",
                    path.display(),
                )
            });
        }
    }
}

/// [`poisoned`] for scales as little-endian bytes of the scheme's scale format.
fn poisoned_bytes(scales: &[u8], scheme: Scheme) -> usize {
    match scheme.scale_format() {
        ScaleFormat::UE4M3 => scales.iter().filter(|&&x| x == 0x7f).count(),
        ScaleFormat::UE8M0 => scales.iter().filter(|&&x| x == 0xff).count(),
        ScaleFormat::F32 => {
            scales.chunks_exact(4).filter(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan()).count()
        }
        ScaleFormat::F16 => scales.chunks_exact(2).filter(|c| half::f16::from_le_bytes([c[0], c[1]]).is_nan()).count(),
    }
}

/// Blocks whose scale is the scale format's NaN.
fn poisoned(scales: &ScaleData, scheme: Scheme) -> usize {
    match scales {
        ScaleData::Bytes(b) => {
            let nan = if scheme == Scheme::NvFp4 { 0x7f } else { 0xff };
            b.iter().filter(|&&x| x == nan).count()
        }
        ScaleData::F32(v) => v.iter().filter(|x| x.is_nan()).count(),
        ScaleData::F16(v) => v.iter().filter(|x| x.is_nan()).count(),
    }
}

/// Where a NaN/Inf stopped quantizing under `NonFinite::Error`, on either backend.
fn non_finite_at(e: &blockscale::Error) -> Option<(usize, usize, f32)> {
    match e {
        blockscale::Error::Cpu(blockscale::CpuError::NonFinite { row, col, value }) => Some((*row, *col, *value)),
        #[cfg(feature = "cuda")]
        blockscale::Error::Cuda(blockscale::cuda::CudaError::NonFinite { row, col, value }) => {
            Some((*row, *col, *value))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::quantize::plan::plan;
    use crate::commands::quantize::testing::{args, write_bf16};

    #[test]
    fn poisoned_blocks_are_counted_by_the_scale_formats_nan() {
        assert_eq!(poisoned(&ScaleData::Bytes(vec![0x7f, 0xff, 0x7f]), Scheme::NvFp4), 2);
        assert_eq!(poisoned(&ScaleData::Bytes(vec![0x7f, 0xff, 0x7f]), Scheme::MxFp4), 1);
        assert_eq!(poisoned(&ScaleData::F32(vec![f32::NAN, 1.0]), Scheme::Int4G32), 1);
    }

    #[test]
    fn poisoned_blocks_are_counted_in_little_endian_scale_bytes() {
        assert_eq!(poisoned_bytes(&[0x7f, 0xff, 0x7f], Scheme::NvFp4), 2);
        assert_eq!(poisoned_bytes(&[0x7f, 0xff, 0x7f], Scheme::MxFp4), 1);
        let f32s: Vec<u8> = [1.0, f32::NAN, -2.0].iter().flat_map(|x: &f32| x.to_le_bytes()).collect();
        assert_eq!(poisoned_bytes(&f32s, Scheme::Fp8Block(blockscale::Fp8Tile::Row1x128)), 1);
        let f16s: Vec<u8> = [half::f16::NAN, half::f16::ONE].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(poisoned_bytes(&f16s, Scheme::Int4G32), 1);
    }

    /// The job and the one weight's plan for a 2 x 32 weight holding `values`, with `extra` options.
    fn job_for(values: &[f32], extra: &[&str], test: impl FnOnce(&Job, Weight<'_>)) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.safetensors");
        let bytes: Vec<u8> = values.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect();
        write_bf16(&input, &[("l.weight", vec![2, 32], bytes.clone())]);
        let out = dir.path().join("o.safetensors");
        let mut argv = vec![input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--scheme", "mxfp4"];
        argv.extend(extra);
        let (job, plan) = plan(&args(&argv)).unwrap();
        let shard = &plan.shards[0];
        let tensor = &shard.shard.tensors()[0];
        let weight = Weight { path: &input, tensor, bytes: &bytes, plan: shard.weights[0].as_ref().unwrap() };
        test(&job, weight);
    }

    #[test]
    fn a_weight_becomes_its_planned_tensors() {
        let values: Vec<f32> = (0..64).map(|i| i as f32 / 8.0).collect();
        job_for(&values, &[], |job, w| {
            let outputs = w.plan.outputs.clone();
            let q = job.run(w, &ProgressBar::hidden()).unwrap();
            assert_eq!(q.tensors.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), outputs);
            // 64 FP4 codes in 32 bytes, one UE8M0 scale per row.
            assert_eq!(q.tensors.iter().map(|(_, b)| b.len()).collect::<Vec<_>>(), [32, 2]);
            assert_eq!(q.poisoned_blocks, 0);
        });
    }

    #[test]
    fn nan_is_an_error_naming_its_place_unless_poisoned() {
        let mut values = vec![1.0; 64];
        values[40] = f32::NAN;
        job_for(&values, &[], |job, w| {
            let e = job.run(w, &ProgressBar::hidden()).err().unwrap();
            assert!(matches!(e, CliError::NonFinite { row: 1, col: 8, .. }), "{e:?}");
        });
        job_for(&values, &["--non-finite", "poison"], |job, w| {
            assert_eq!(job.run(w, &ProgressBar::hidden()).unwrap().poisoned_blocks, 1);
        });
    }
}
