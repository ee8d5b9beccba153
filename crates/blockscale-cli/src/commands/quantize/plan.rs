//! `quantize`, stage 1: every option checked, the checkpoint opened and every output
//! tensor named, typed and shaped, shard by shard, with the convention's configs.
//! A weight the scheme cannot hold is an error here, before anything is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use blockscale::{GlobalScale, GlobalScaleSource, NonFinite, QuantizeOptions, ScaleLayout, Scheme};

use blockscale::checkpoint::{Checkpoint, Output, OutputKind, PlannedTensor, Shard, same_path_check};
use crate::cli::{BackendArg, ConventionArg, LayoutArg, NonFiniteArg, QuantizeArgs, RecipeArg};
use blockscale::checkpoint::convention::modelopt::fp8_per_tensor;
use blockscale::checkpoint::{Configs, layer_prefix};

use crate::convention::ignored_linear_layers;
use crate::error::CliError;
use crate::scheme_arg::{QuantizeScheme, parse_scheme};
use crate::select::Selector;

use super::job::{Job, WeightPlan};
use super::report::SkippedEntry;

/// Everything `quantize` decided before writing: what becomes of each tensor of each
/// shard, the headers of the output shards, and the configs beside them.
pub struct Plan {
    /// When the run began (the report's seconds count from here).
    pub start: Instant,
    /// The scheme.
    pub scheme: QuantizeScheme,
    /// The output convention.
    pub convention: ConventionArg,
    /// The backend's name, for the report.
    pub backend: &'static str,
    /// The input checkpoint.
    pub checkpoint: Checkpoint,
    /// The destination: its temporary exists, empty.
    pub output: Output,
    /// One per input shard, in order.
    pub shards: Vec<ShardPlan>,
    /// The convention's configs (already in the first shard's metadata for a single file).
    pub configs: Configs,
    /// Tensors to copy unchanged, with why.
    pub skipped: Vec<SkippedEntry>,
    /// Calibration entries that match no quantized layer.
    pub unused_calibration: Vec<String>,
}

/// One input shard and the output shard it becomes.
pub struct ShardPlan {
    /// The input shard.
    pub shard: Shard,
    /// The output shard's tensors (its header): copied tensors as they are, each
    /// quantized weight as its convention's tensors.
    pub tensors: Vec<PlannedTensor>,
    /// The output shard's `__metadata__`.
    pub metadata: BTreeMap<String, String>,
    /// One entry per input tensor, in file order: `None` to copy it, or how to
    /// quantize it.
    pub weights: Vec<Option<WeightPlan>>,
}


/// Checks the options, opens the backend, the checkpoint and the destination (refusing
/// an existing one without `--force`), and plans every shard: the per-tensor job's
/// settings and the plan the writer follows.
///
/// # Errors
/// [`CliError::Usage`] / [`CliError::Unsupported`] for options that do not go together;
/// the backend's, the checkpoint's and the calibration file's errors;
/// [`CheckpointError::Tensor`](blockscale::checkpoint::CheckpointError::Tensor) naming the first weight the scheme cannot hold.
pub fn plan(args: &QuantizeArgs) -> Result<(Job, Plan), CliError> {
    let start = Instant::now();
    let (scheme, layout) = check_options(args)?;
    let selector = Selector::new(&args.include, &args.exclude, !args.no_default_excludes)?;
    let opening = args.backend.open_in_background()?;
    let checkpoint = Checkpoint::open(&args.input)?;
    same_path_check(&args.input, &args.output)?;
    let kind = if checkpoint.is_dir { OutputKind::Dir } else { OutputKind::File };
    let output = Output::create(&args.output, kind, args.out.force)?;
    let shards = checkpoint.open_shards()?;
    let calibration = match &args.calibration {
        Some(p) => load_calibration(p)?,
        None => BTreeMap::new(),
    };
    let non_finite = match args.non_finite {
        NonFiniteArg::Error => NonFinite::Error,
        NonFiniteArg::Poison => NonFinite::Poison,
    };
    let options = QuantizeOptions::default()
        .with_scale_layout(layout)
        .with_non_finite(non_finite)
        .with_global_scale(GlobalScaleSource::TensorAmax);

    let mut planner = Planner {
        recipe: args.recipe,
        convention: args.convention,
        scheme,
        layout,
        selector: &selector,
        calibration: &calibration,
        calibration_path: args.calibration.clone().unwrap_or_default(),
        skipped: Vec::new(),
        used_calibration: BTreeSet::new(),
    };
    // Every shard first: shape errors surface before anything is written.
    let mut shards = shards.into_iter().map(|shard| planner.shard(shard)).collect::<Result<Vec<_>, _>>()?;
    let Planner { skipped, used_calibration, .. } = planner;
    let ignore = ignored_linear_layers(shards.iter().flat_map(|p| p.shard.tensors()), &selector);
    let configs = match scheme {
        QuantizeScheme::Block(s) => args.convention.writes().configs(s, !calibration.is_empty(), &ignore),
        QuantizeScheme::Fp8PerTensor => fp8_per_tensor::configs(&ignore),
    };
    if !checkpoint.is_dir {
        // A single file carries its quantization config in its metadata.
        shards[0].metadata.extend(configs.metadata.iter().cloned());
    }
    let unused_calibration = calibration.keys().filter(|k| !used_calibration.contains(*k)).cloned().collect();
    let backend = opening.join()?;
    let plan = Plan {
        start,
        scheme,
        convention: args.convention,
        backend: backend.name(),
        checkpoint,
        output,
        shards,
        configs,
        skipped,
        unused_calibration,
    };
    Ok((Job { backend, scheme, convention: args.convention, options, recipe: args.recipe }, plan))
}

/// The scheme and scale layout, once the options are known to go together: a layout
/// the scheme has, a scheme the convention can store, calibration only where it applies.
fn check_options(args: &QuantizeArgs) -> Result<(QuantizeScheme, ScaleLayout), CliError> {
    let scheme = parse_scheme(&args.scheme)?;
    let layout = match args.scale_layout {
        LayoutArg::Linear => ScaleLayout::Linear,
        LayoutArg::Swizzled => ScaleLayout::Swizzled128x4,
    };
    if !args.convention.writes().scale_layouts().contains(&layout) {
        return Err(CliError::Usage(
            "--scale-layout swizzled applies to the native convention; modelopt and compressed-tensors store linear scales"
                .into(),
        ));
    }
    if args.recipe == RecipeArg::Modelopt {
        let why = if scheme != QuantizeScheme::Block(Scheme::NvFp4) {
            Some(format!("is an NVFP4 recipe, not one for {}", args.scheme))
        } else if args.backend != BackendArg::Cpu {
            Some("runs on the CPU only".to_owned())
        } else if args.non_finite == NonFiniteArg::Poison {
            Some("has no NaN blocks: NaN/Inf in a weight is an error (drop --non-finite poison)".to_owned())
        } else if layout != ScaleLayout::Linear {
            Some("writes linear scales (drop --scale-layout swizzled)".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(CliError::Unsupported(format!("--recipe modelopt {why}")));
        }
    }
    let block = match scheme {
        QuantizeScheme::Block(s) => s,
        QuantizeScheme::Fp8PerTensor => {
            if args.convention != ConventionArg::Modelopt {
                return Err(CliError::Unsupported(
                    "fp8-per-tensor (E4M3 with one f32 scale per tensor) is ModelOpt's FP8 layout: use it with \
                     --convention modelopt, or choose a block-scaled scheme such as fp8-block"
                        .into(),
                ));
            }
            if args.non_finite == NonFiniteArg::Poison {
                return Err(CliError::Usage(
                    "--non-finite poison stores NaN blocks, and fp8-per-tensor has no blocks: a NaN or Inf in \
                     a weight is an error with this scheme"
                        .into(),
                ));
            }
            return Ok((scheme, layout));
        }
    };
    if !block.supports_layout(layout) {
        return Err(CliError::Unsupported(format!("{block} has no {} scale layout", layout.name())));
    }
    // Fails early for a scheme the convention cannot store.
    args.convention.writes().plan(block, layout, "probe.weight", (128, 256), false)?;
    if args.calibration.is_some() && !args.convention.writes().stores_input_scale(block) {
        return Err(CliError::Usage(
            "--calibration gives activation scales: use it with --scheme nvfp4 and the modelopt or \
             compressed-tensors convention, or with --scheme fp8-per-tensor"
                .into(),
        ));
    }
    Ok((scheme, layout))
}

/// Plans shard after shard, collecting what the report needs across them.
struct Planner<'a> {
    recipe: RecipeArg,
    convention: ConventionArg,
    scheme: QuantizeScheme,
    layout: ScaleLayout,
    selector: &'a Selector,
    /// Activation amax by layer (or tensor) name.
    calibration: &'a BTreeMap<String, f32>,
    /// The calibration file, for its errors.
    calibration_path: PathBuf,
    /// Tensors copied unchanged so far.
    skipped: Vec<SkippedEntry>,
    /// Calibration entries used so far.
    used_calibration: BTreeSet<String>,
}

impl Planner<'_> {
    /// The plan of one shard: each tensor copied or quantized, the output header and
    /// metadata.
    fn shard(&mut self, shard: Shard) -> Result<ShardPlan, CliError> {
        let mut tensors = Vec::new();
        let mut metadata: BTreeMap<String, String> =
            shard.metadata().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut weights = Vec::new();
        for t in shard.tensors() {
            match self.selector.skip_reason(t) {
                Some(reason) => {
                    self.skipped.push(SkippedEntry { name: t.name.clone(), reason });
                    tensors.push(PlannedTensor::new(&t.name, t.dtype, t.shape.clone()));
                    weights.push(None);
                }
                None => {
                    let (rows, k) = (t.shape[0], t.shape[1]);
                    let shape_error = match self.scheme {
                        QuantizeScheme::Block(s) => s.shape(rows, k).err().map(|e| e.to_string()),
                        QuantizeScheme::Fp8PerTensor => None,
                    };
                    if let Some(e) = shape_error {
                        let note =
                            self.convention.writes().k_note().map(|n| format!("; {n}")).unwrap_or_default();
                        return Err(CliError::tensor(
                            shard.path(),
                            &t.name,
                            format!("{e} (shape {:?}){note}; exclude it with --exclude {:?}", t.shape, t.name),
                        ));
                    }
                    let activation_amax = self.activation_amax(&t.name)?;
                    let (outs, m) = match self.scheme {
                        QuantizeScheme::Block(s) => self.convention.writes().plan(
                            s,
                            self.layout,
                            &t.name,
                            (rows, k),
                            activation_amax.is_some(),
                        )?,
                        QuantizeScheme::Fp8PerTensor => {
                            fp8_per_tensor::plan(&t.name, rows, k, activation_amax.is_some())
                        }
                    };
                    let input_scale = match (self.scheme, activation_amax) {
                        (QuantizeScheme::Block(_), Some(a)) => Some(
                            match self.recipe {
                                // ModelOpt's activation scale is the decode scale `amax / 2688` itself.
                                RecipeArg::Modelopt if a > 0.0 && a.is_finite() => {
                                    GlobalScale::from_decode(a / blockscale::NVFP4_AMAX_TO_SCALE)
                                }
                                _ => GlobalScale::from_amax(a),
                            }
                            .map_err(|e| {
                                CliError::tensor(&self.calibration_path, layer_prefix(&t.name), e.to_string())
                            })?,
                        ),
                        _ => None,
                    };
                    metadata.extend(m);
                    let outputs = outs.iter().map(|o| o.name.clone()).collect();
                    tensors.extend(outs);
                    weights.push(Some(WeightPlan { rows, k, input_scale, activation_amax, outputs }));
                }
            }
        }
        metadata.insert("blockscale.version".into(), env!("CARGO_PKG_VERSION").into());
        metadata.insert("blockscale.scheme".into(), self.scheme.name().into());
        metadata.insert("blockscale.convention".into(), self.convention.name().into());
        Ok(ShardPlan { shard, tensors, metadata, weights })
    }

    /// The activations' amax calibration gives weight `name`: its layer's entry, else its
    /// own, else none.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`](blockscale::checkpoint::CheckpointError::Tensor) for an amax of 0 under fp8-per-tensor (an `input_scale` of 0
    /// cannot quantize activations).
    fn activation_amax(&mut self, name: &str) -> Result<Option<f32>, CliError> {
        let prefix = layer_prefix(name);
        let key = if self.calibration.contains_key(prefix) { prefix } else { name };
        let Some(&amax) = self.calibration.get(key) else { return Ok(None) };
        self.used_calibration.insert(key.to_owned());
        if self.scheme == QuantizeScheme::Fp8PerTensor && amax == 0.0 {
            return Err(CliError::tensor(
                &self.calibration_path,
                key,
                "is all zeros: an FP8 input_scale (amax / 448) of 0 cannot quantize activations",
            ));
        }
        Ok(Some(amax))
    }
}

/// The amax of every tensor of a calibration file, by name.
fn load_calibration(path: &Path) -> Result<BTreeMap<String, f32>, CliError> {
    let shard = Shard::open(path)?;
    let mut out = BTreeMap::new();
    for t in shard.tensors() {
        let values = crate::values::from_le_bytes(t.dtype, shard.bytes(t)).ok_or_else(|| {
            CliError::tensor(
                path,
                &t.name,
                format!("dtype {:?}: calibration tensors must be bf16, f16 or f32", t.dtype),
            )
        })?;
        let v = values.to_f32();
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(CliError::tensor(path, &t.name, format!("holds {} at flat index {i}", v[i])));
        }
        if v.is_empty() {
            return Err(CliError::tensor(path, &t.name, "is empty"));
        }
        out.insert(t.name.clone(), v.iter().fold(0f32, |m, x| m.max(x.abs())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::quantize::testing::small_job;

    #[test]
    fn each_tensor_is_planned_as_a_copy_or_a_weight_with_its_outputs() {
        let (_dir, out, a) = small_job(&["--scheme", "nvfp4"]);
        let (job, plan) = plan(&a).unwrap();
        assert_eq!((job.scheme, job.convention), (QuantizeScheme::Block(Scheme::NvFp4), ConventionArg::Native));
        assert_eq!(plan.shards.len(), 1);
        let shard = &plan.shards[0];
        // File order: the weight, then the norm.
        let w = shard.weights[0].as_ref().unwrap();
        assert_eq!((w.rows, w.k, w.input_scale), (2, 64, None));
        assert_eq!(w.outputs, ["l.weight.codes", "l.weight.scales", "l.weight.global_encode"]);
        assert!(shard.weights[1].is_none());
        let names: Vec<&str> = shard.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["l.weight.codes", "l.weight.scales", "l.weight.global_encode", "norm"]);
        assert_eq!(shard.metadata["blockscale.scheme"], "nvfp4");
        assert_eq!(shard.metadata["l.weight.k"], "64");
        assert_eq!(plan.skipped.len(), 1);
        assert_eq!(plan.skipped[0].name, "norm");
        // Nothing is written yet: the destination does not exist.
        assert!(!out.exists());
    }

    #[test]
    fn a_shape_the_scheme_cannot_hold_is_refused_naming_the_tensor() {
        // K = 64 is no multiple of the 128-element FP8 block.
        let (_dir, out, a) = small_job(&["--scheme", "fp8-block"]);
        let e = plan(&a).err().unwrap();
        assert!(matches!(e, CliError::Checkpoint(blockscale::checkpoint::CheckpointError::Tensor { .. })), "{e:?}");
        assert!(e.to_string().contains("--exclude \"l.weight\""), "{e}");
        assert!(!out.exists());
    }
}
