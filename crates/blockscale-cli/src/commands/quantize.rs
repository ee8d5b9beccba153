//! `blockscale quantize`: shard by shard, tensor by tensor, through memory maps, into a
//! temporary output renamed into place at the end.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use blockscale::{GlobalScale, GlobalScaleSource, NonFinite, QuantizeOptions, ScaleData, ScaleLayout, Scheme};
use serde::Serialize;

use crate::checkpoint::{
    Checkpoint, Output, OutputKind, PlannedTensor, Shard, ShardWriter, copy_others, same_path_check, tensor_bytes,
    write_index,
};
use crate::cli::{ConventionArg, LayoutArg, NonFiniteArg, QuantizeArgs};
use crate::convention::{Convention, encode, ignored_linear_layers, plan_outputs, quant_configs};
use crate::error::CliError;
use crate::progress::bytes_bar;
use crate::scheme_arg::parse_scheme;
use crate::select::Selector;
use crate::values::FloatValues;

/// One quantized weight in the report.
#[derive(Debug, Serialize)]
pub struct QuantizedEntry {
    /// The input tensor.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: String,
    /// The output tensors.
    pub outputs: Vec<String>,
    /// Input bytes.
    pub bytes_in: usize,
    /// Output bytes.
    pub bytes_out: usize,
    /// Blocks stored as NaN because they held NaN/Inf (`--non-finite poison`).
    pub poisoned_blocks: usize,
}

/// A tensor copied unchanged, and why.
#[derive(Debug, Serialize)]
pub struct SkippedEntry {
    /// The tensor.
    pub name: String,
    /// Why it was not quantized.
    pub reason: String,
}

/// The `quantize` report (`--json`).
#[derive(Debug, Serialize)]
pub struct QuantizeReport {
    /// Report format version.
    pub version: u32,
    /// The input path.
    pub input: PathBuf,
    /// The output path.
    pub output: PathBuf,
    /// The scheme.
    pub scheme: String,
    /// The output convention.
    pub convention: String,
    /// The backend.
    pub backend: String,
    /// Quantized weights.
    pub quantized: Vec<QuantizedEntry>,
    /// Tensors copied unchanged.
    pub skipped: Vec<SkippedEntry>,
    /// Calibration entries that matched no quantized layer.
    pub unused_calibration: Vec<String>,
    /// Bytes of every input shard.
    pub bytes_in: u64,
    /// Bytes of every output shard.
    pub bytes_out: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Input bytes per second, GB/s.
    pub throughput_gb_s: f64,
}

/// Runs `quantize`.
///
/// # Errors
/// Every [`CliError`]: bad options, unreadable input, a weight that cannot be
/// quantized (named), an output that exists or cannot be written.
pub fn run(args: &QuantizeArgs) -> Result<(), CliError> {
    let start = Instant::now();
    let scheme = parse_scheme(&args.scheme)?;
    let layout = match args.scale_layout {
        LayoutArg::Linear => ScaleLayout::Linear,
        LayoutArg::Swizzled => ScaleLayout::Swizzled128x4,
    };
    if layout != ScaleLayout::Linear && args.convention != ConventionArg::Native {
        return Err(CliError::Usage(
            "--scale-layout swizzled applies to the native convention; modelopt and compressed-tensors store linear scales"
                .into(),
        ));
    }
    if !scheme.supports_layout(layout) {
        return Err(CliError::Unsupported(format!("{scheme} has no {} scale layout", layout.name())));
    }
    // Fails early for a scheme the convention cannot store.
    plan_outputs(args.convention, scheme, layout, "probe.weight", 128, 256, false)?;
    if args.calibration.is_some() && (args.convention == ConventionArg::Native || scheme != Scheme::NvFp4) {
        return Err(CliError::Usage(
            "--calibration gives NVFP4 activation scales: use it with --scheme nvfp4 and the modelopt or \
             compressed-tensors convention"
                .into(),
        ));
    }
    let selector = Selector::new(&args.include, &args.exclude, !args.no_default_excludes)?;
    let backend = args.backend.open()?;
    let ckpt = Checkpoint::open(&args.input)?;
    same_path_check(&args.input, &args.output)?;
    let kind = if ckpt.is_dir { OutputKind::Dir } else { OutputKind::File };
    let output = Output::create(&args.output, kind, args.out.force)?;
    let shards = ckpt.shards.iter().map(|p| Shard::open(p)).collect::<Result<Vec<_>, _>>()?;
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

    // Plan every shard first: shape errors surface before anything is written.
    let mut plans = Vec::new();
    let mut skipped = Vec::new();
    let mut used_calibration = std::collections::BTreeSet::new();
    for shard in &shards {
        let mut planned = Vec::new();
        let mut meta: BTreeMap<String, String> = shard.metadata().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut jobs = Vec::new();
        for t in shard.tensors() {
            match selector.skip_reason(t) {
                Some(reason) => {
                    skipped.push(SkippedEntry { name: t.name.clone(), reason });
                    planned.push(PlannedTensor::new(&t.name, t.dtype, t.shape.clone()));
                    jobs.push((t, None));
                }
                None => {
                    let (rows, k) = (t.shape[0], t.shape[1]);
                    if let Err(e) = scheme.shape(rows, k) {
                        return Err(CliError::tensor(
                            shard.path(),
                            &t.name,
                            format!("{e} (shape {:?}); exclude it with --exclude {:?}", t.shape, t.name),
                        ));
                    }
                    let prefix = crate::convention::layer_prefix(&t.name);
                    let amax = calibration.get(prefix).or_else(|| calibration.get(t.name.as_str())).copied();
                    if amax.is_some() {
                        used_calibration
                            .insert(if calibration.contains_key(prefix) { prefix } else { &t.name }.to_owned());
                    }
                    let input = amax
                        .map(|a| {
                            GlobalScale::from_amax(a).map_err(|e| {
                                CliError::tensor(args.calibration.clone().unwrap_or_default(), prefix, e.to_string())
                            })
                        })
                        .transpose()?;
                    let (outs, m) = plan_outputs(args.convention, scheme, layout, &t.name, rows, k, input.is_some())?;
                    meta.extend(m);
                    let names = outs.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
                    planned.extend(outs);
                    jobs.push((t, Some((rows, k, input, names))));
                }
            }
        }
        meta.insert("blockscale.version".into(), env!("CARGO_PKG_VERSION").into());
        meta.insert("blockscale.scheme".into(), scheme.name().into());
        meta.insert("blockscale.convention".into(), Convention::from(args.convention).name().into());
        plans.push((planned, meta, jobs));
    }
    let ignore = ignored_linear_layers(shards.iter().flat_map(|s| s.tensors()), &selector);
    let configs = quant_configs(args.convention, scheme, !calibration.is_empty(), &ignore);
    if !ckpt.is_dir {
        // A single file carries its quantization config in its metadata.
        for (k, v) in &configs.metadata {
            plans[0].1.insert(k.clone(), v.clone());
        }
    }

    let total: u64 = shards.iter().map(|s| s.file_len() as u64).sum();
    let pb = bytes_bar(total, args.out.quiet || args.out.json);
    let n_tensors: usize = shards.iter().map(|s| s.tensors().len()).sum();
    let mut done = 0usize;
    let mut quantized = Vec::new();
    let mut weight_map = BTreeMap::new();
    let mut bytes_out = 0u64;
    let mut total_size = 0u64;
    for (shard, (planned, meta, jobs)) in shards.iter().zip(plans) {
        let file_name = Checkpoint::file_name(shard.path());
        let path = output.path(ckpt.is_dir.then_some(file_name.as_str()));
        let mut w = ShardWriter::create(&path, &planned, &meta)?;
        for p in &planned {
            weight_map.insert(p.name.clone(), file_name.clone());
            total_size += tensor_bytes(p.dtype, &p.shape).unwrap_or(0) as u64;
        }
        for (t, job) in jobs {
            done += 1;
            pb.set_message(format!("[{done}/{n_tensors}] {}", t.name));
            let bytes = shard.bytes(t);
            match job {
                None => w.write(&t.name, bytes)?,
                Some((rows, k, input, names)) => {
                    let values = FloatValues::from_le_bytes(t.dtype, bytes).expect("selected tensors are float");
                    let q =
                        values.quantize(&backend, (rows, k), scheme, &options).map_err(|e| {
                            match non_finite_at(&e) {
                                Some((row, col, value)) => CliError::NonFinite {
                                    path: shard.path().to_owned(),
                                    tensor: t.name.clone(),
                                    row,
                                    col,
                                    value,
                                },
                                None => CliError::tensor(shard.path(), &t.name, e.to_string()),
                            }
                        })?;
                    drop(values);
                    let poisoned_blocks = poisoned(q.scales(), scheme);
                    if poisoned_blocks > 0 {
                        pb.suspend(|| {
                            eprintln!(
                                "warning: {}: tensor {:?}: {poisoned_blocks} blocks held NaN/Inf and are stored as NaN blocks",
                                shard.path().display(),
                                t.name
                            )
                        });
                    }
                    let enc = encode(args.convention, &t.name, q, input);
                    let mut out_bytes = 0;
                    for (name, b) in &enc.tensors {
                        w.write(name, b)?;
                        out_bytes += b.len();
                    }
                    quantized.push(QuantizedEntry {
                        name: t.name.clone(),
                        shape: t.shape.clone(),
                        dtype: format!("{:?}", t.dtype),
                        outputs: names,
                        bytes_in: t.nbytes(),
                        bytes_out: out_bytes,
                        poisoned_blocks,
                    });
                }
            }
            shard.release(t);
            pb.inc(t.nbytes() as u64);
        }
        bytes_out += w.finish()?;
    }
    pb.finish_and_clear();
    if ckpt.is_dir {
        if ckpt.index.is_some() {
            write_index(&output, ckpt.index.as_deref(), &weight_map, total_size)?;
        }
        copy_others(&output, &ckpt, configs.config_json.as_ref(), &configs.files, &[])?;
    }
    output.commit()?;

    let seconds = start.elapsed().as_secs_f64();
    let unused_calibration = calibration.keys().filter(|k| !used_calibration.contains(*k)).cloned().collect();
    let report = QuantizeReport {
        version: 1,
        input: args.input.clone(),
        output: args.output.clone(),
        scheme: scheme.name().into(),
        convention: Convention::from(args.convention).name().into(),
        backend: backend.name().into(),
        quantized,
        skipped,
        unused_calibration,
        bytes_in: total,
        bytes_out,
        seconds,
        throughput_gb_s: total as f64 / seconds / 1e9,
    };
    if args.out.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serializes"));
    } else {
        print_report(&report);
    }
    Ok(())
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

/// The amax of every tensor of a calibration file, by name.
fn load_calibration(path: &Path) -> Result<BTreeMap<String, f32>, CliError> {
    let shard = Shard::open(path)?;
    let mut out = BTreeMap::new();
    for t in shard.tensors() {
        let values = FloatValues::from_le_bytes(t.dtype, shard.bytes(t)).ok_or_else(|| {
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

fn print_report(r: &QuantizeReport) {
    let gb = |b: u64| b as f64 / 1e9;
    println!(
        "quantized {} weights to {} ({} convention, {} backend); copied {} tensors unchanged",
        r.quantized.len(),
        r.scheme,
        r.convention,
        r.backend,
        r.skipped.len()
    );
    let mut reasons: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in &r.skipped {
        reasons.entry(s.reason.as_str()).or_default().push(&s.name);
    }
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort();
    for (reason, names) in reasons {
        let more = if names.len() > 3 { format!(", ... ({} more)", names.len() - 3) } else { String::new() };
        println!("  copied, {reason}: {}{more}", names.iter().take(3).copied().collect::<Vec<_>>().join(", "));
    }
    if !r.unused_calibration.is_empty() {
        println!("  calibration entries matching no quantized layer: {}", r.unused_calibration.join(", "));
    }
    let poisoned: usize = r.quantized.iter().map(|q| q.poisoned_blocks).sum();
    if poisoned > 0 {
        println!("  {poisoned} blocks held NaN/Inf and are stored as NaN blocks");
    }
    println!(
        "{:.3} GB -> {:.3} GB ({:.2}x) in {:.2} s ({:.2} GB/s); wrote {}",
        gb(r.bytes_in),
        gb(r.bytes_out),
        r.bytes_in as f64 / r.bytes_out.max(1) as f64,
        r.seconds,
        r.throughput_gb_s,
        r.output.display()
    );
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
