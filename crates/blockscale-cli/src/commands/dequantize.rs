//! `blockscale dequantize`: every quantized weight of a checkpoint (any convention
//! `inspect` recognises) back to bf16, f16 or f32; every other tensor copied unchanged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use half::{bf16, f16};
use safetensors::Dtype;
use serde::Serialize;

use blockscale::checkpoint::dtypes::tensor_bytes;
use blockscale::checkpoint::{
    Catalog, Checkpoint, Found, Output, OutputKind, PlannedTensor, ShardWriter, copy_others, recognise,
    same_path_check, write_index,
};
use crate::cli::{DequantizeArgs, DtypeArg};
use crate::convention::decode_into;
use crate::error::CliError;
use crate::progress::bytes_bar;

/// One dequantized weight in the report.
#[derive(Debug, Serialize)]
pub struct DequantizedEntry {
    /// The output tensor.
    pub name: String,
    /// Its convention.
    pub convention: String,
    /// Its scheme.
    pub scheme: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The input tensors it was read from.
    pub from: Vec<String>,
}

/// The `dequantize` report (`--json`).
#[derive(Debug, Serialize)]
pub struct DequantizeReport {
    /// Report format version.
    pub version: u32,
    /// The input path.
    pub input: PathBuf,
    /// The output path.
    pub output: PathBuf,
    /// Output dtype of dequantized weights.
    pub dtype: String,
    /// Dequantized weights.
    pub dequantized: Vec<DequantizedEntry>,
    /// Tensors copied unchanged.
    pub copied: Vec<String>,
    /// Bytes written.
    pub bytes_out: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Runs `dequantize`.
///
/// # Errors
/// Every [`CliError`]: unreadable input, quantized weights whose parts do not fit, an
/// output that exists or cannot be written.
pub fn run(args: &DequantizeArgs) -> Result<(), CliError> {
    let start = Instant::now();
    let opening = args.backend.open_in_background()?;
    let ckpt = Checkpoint::open(&args.input)?;
    same_path_check(&args.input, &args.output)?;
    Output::refuse_existing(&args.output, args.out.force)?;
    let shards = ckpt.open_shards()?;
    let catalog = Catalog::new(&shards)?;
    // Refused before the output exists: nothing is written.
    let (found, consumed) = recognise(&catalog, &ckpt.others)?;
    let backend = opening.join()?;
    let kind = if ckpt.is_dir { OutputKind::Dir } else { OutputKind::File };
    let output = Output::create(&args.output, kind, args.out.force)?;
    let by_main: BTreeMap<&str, &Found> = found.iter().map(|f| (f.main.as_str(), f)).collect();
    let dtype = match args.dtype {
        DtypeArg::Bf16 => Dtype::BF16,
        DtypeArg::F16 => Dtype::F16,
        DtypeArg::F32 => Dtype::F32,
    };

    let total: u64 = shards.iter().map(|s| s.file_len() as u64).sum();
    let pb = bytes_bar(total, args.out.quiet || args.out.json);
    let mut weight_map = BTreeMap::new();
    let mut total_size = 0u64;
    let mut bytes_out = 0u64;
    let mut dequantized = Vec::new();
    let mut copied = Vec::new();
    let write = match args.dtype {
        DtypeArg::Bf16 => write_in_place::<bf16>,
        DtypeArg::F16 => write_in_place::<f16>,
        DtypeArg::F32 => write_in_place::<f32>,
    };
    for shard in &shards {
        let file_name = Checkpoint::file_name(shard.path());
        // Quantized weights are written in the shard that holds their data; the scale
        // tensors they consume disappear.
        let mut planned = Vec::new();
        for t in shard.tensors() {
            if let Some(f) = by_main.get(t.name.as_str()) {
                planned.push(PlannedTensor::new(&f.output, dtype, f.out_shape.clone()));
            } else if !consumed.contains(&t.name) {
                planned.push(PlannedTensor::new(&t.name, t.dtype, t.shape.clone()));
            }
        }
        let mut meta: BTreeMap<String, String> = shard
            .metadata()
            .iter()
            .filter(|(k, _)| !is_quant_metadata(k, &found))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        meta.insert("blockscale.dequantized".into(), env!("CARGO_PKG_VERSION").into());
        for p in &planned {
            weight_map.insert(p.name.clone(), file_name.clone());
            total_size += tensor_bytes(p.dtype, &p.shape).unwrap_or(0) as u64;
        }
        let path = output.path(ckpt.is_dir.then_some(file_name.as_str()));
        let mut w = ShardWriter::create(&path, &planned, &meta)?;
        for t in shard.tensors() {
            pb.set_message(t.name.clone());
            if let Some(f) = by_main.get(t.name.as_str()) {
                write(&backend, &catalog, f, &mut w)?;
                for p in &f.parts {
                    catalog.release(p);
                }
                dequantized.push(DequantizedEntry {
                    name: f.output.clone(),
                    convention: f.convention.into(),
                    scheme: f.format.clone(),
                    shape: f.out_shape.clone(),
                    from: f.parts.clone(),
                });
            } else if !consumed.contains(&t.name) {
                w.write(&t.name, shard.bytes(t))?;
                copied.push(t.name.clone());
                shard.release(t);
            }
            pb.inc(t.nbytes() as u64);
        }
        bytes_out += w.finish()?;
    }
    pb.finish_and_clear();
    if ckpt.is_dir {
        if ckpt.index.is_some() {
            write_index(&output, ckpt.index.as_deref(), &weight_map, total_size)?;
        }
        // The configs of a quantized model no longer apply: drop hf_quant_config.json and
        // the quantization_config of config.json.
        copy_others(&output, &ckpt, None, &[], &["hf_quant_config.json"])?;
    }
    output.commit()?;
    let report = DequantizeReport {
        version: 1,
        input: args.input.clone(),
        output: args.output.clone(),
        dtype: format!("{dtype:?}").to_lowercase(),
        dequantized,
        copied,
        bytes_out,
        seconds: start.elapsed().as_secs_f64(),
    };
    if args.out.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("the report serializes"));
    } else {
        println!(
            "dequantized {} weights to {}; copied {} tensors unchanged; wrote {} ({:.3} GB) in {:.2} s",
            report.dequantized.len(),
            report.dtype,
            report.copied.len(),
            report.output.display(),
            bytes_out as f64 / 1e9,
            report.seconds
        );
    }
    Ok(())
}

/// Dequantizes `f` in place into its slot of `w`, as `O`: the slot is memory mapped and
/// the backend writes straight into it (no buffer, no copy; the page faults spread over
/// the backend's threads instead of one `pwrite`, which a memory file system serializes
/// per file). A slot not aligned for `O` (never, for the files [`ShardWriter`] lays out)
/// goes through a temporary.
fn write_in_place<O: blockscale::Element + bytemuck::Pod>(
    backend: &blockscale::Backend,
    catalog: &Catalog<'_>,
    f: &Found,
    w: &mut ShardWriter,
) -> Result<(), CliError> {
    let n = f.rows * f.k;
    let mut slot = w.claim_mapped(&f.output, n * std::mem::size_of::<O>())?;
    match bytemuck::try_cast_slice_mut::<u8, O>(slot.bytes_mut()) {
        Ok(out) => decode_into(backend, catalog, f, out),
        Err(_) => {
            let mut tmp = vec![O::default(); n];
            decode_into(backend, catalog, f, &mut tmp)?;
            slot.bytes_mut().copy_from_slice(bytemuck::cast_slice(&tmp));
            Ok(())
        }
    }
}

/// Metadata that describes quantized tensors (native per-tensor keys, blockscale's and
/// the conventions' configs) and no longer applies after dequantization.
fn is_quant_metadata(key: &str, found: &[Found]) -> bool {
    key.starts_with("blockscale.")
        || key == "hf_quant_config"
        || key == "quantization_config"
        || found.iter().any(|f| key.strip_prefix(f.output.as_str()).is_some_and(|rest| rest.starts_with('.')))
}
