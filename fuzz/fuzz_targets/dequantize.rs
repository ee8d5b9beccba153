//! Structure-aware: a small valid checkpoint of one convention (native, ModelOpt NVFP4
//! and FP8, compressed-tensors NVFP4, MXFP4, INT4 and FP8 with their config in the
//! file's metadata, gpt-oss MXFP4, DeepSeek FP8), then edits that make
//! its header lie (dtypes, shapes, names, metadata, a companion moved to a second shard
//! or removed) and its scales hold NaN, Inf, zero or negative values. The byte count of
//! every tensor is kept consistent with its header so the parser accepts it and the lie
//! reaches detection and decoding.

#![no_main]

use std::path::Path;

use arbitrary::Arbitrary;
use blockscale::checkpoint::Shard;
use blockscale::checkpoint::dtypes::{codes_dtype, scale_dtype, scale_shape};
use blockscale::{ScaleLayout, Scheme};
use blockscale_fuzz::{Tensor, read_checkpoint, serialize};
use libfuzzer_sys::fuzz_target;
use safetensors::Dtype;

#[derive(Arbitrary, Debug)]
enum Convention {
    Native { scheme: u8, swizzled: bool },
    ModeloptNvfp4 { swizzled: bool, input_scale: bool },
    ModeloptFp8 { input_scale: bool },
    CompressedTensors { swizzled: bool, input_scale: bool },
    GptOss { experts: bool },
    Deepseek { ue8m0_config: bool },
    CtMxfp4,
    CtInt4 { group: u8, asymmetric: bool },
    CtFp8 { strategy: u8 },
}

#[derive(Arbitrary, Debug)]
enum Edit {
    Dtype { tensor: u8, dtype: u8 },
    Dim { tensor: u8, dim: u8, value: u64 },
    PushDim { tensor: u8, value: u8 },
    PopDim { tensor: u8 },
    Remove { tensor: u8 },
    Rename { tensor: u8, suffix: u8 },
    Meta { key: u8, value: String },
    F32 { tensor: u8, index: u16, value: u8 },
    Byte { tensor: u8, index: u16, value: u8 },
    ToSecondShard { tensor: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    convention: Convention,
    rows: u8,
    k_blocks: u8,
    edits: Vec<Edit>,
    fill: Vec<u8>,
}

const P: &str = "model.layers.0.mlp.up_proj";
const DTYPES: [Dtype; 12] = [
    Dtype::U8,
    Dtype::I8,
    Dtype::F8_E4M3,
    Dtype::F8_E5M2,
    Dtype::F8_E8M0,
    Dtype::F4,
    Dtype::F6_E2M3,
    Dtype::F6_E3M2,
    Dtype::BF16,
    Dtype::F16,
    Dtype::F32,
    Dtype::I64,
];
const SUFFIXES: [&str; 14] = [
    ".weight",
    ".weight_scale",
    ".weight_scale_2",
    ".weight_packed",
    ".weight_global_scale",
    ".weight_scale_inv",
    ".input_scale",
    "_blocks",
    "_scales",
    ".codes",
    ".scales",
    ".global_encode",
    ".weight_zero_point",
    ".weight_shape",
];
const SPECIAL: [f32; 10] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, -1.0, 1e-45, f32::MAX, 1e-40, 0.5];
/// Tensors larger than this are not built (the fuzzer would spend its time copying).
const CAP: usize = 1 << 16;

fn nbytes(dtype: Dtype, shape: &[usize]) -> Option<usize> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let bits = n.checked_mul(dtype.bitsize())?;
    (bits % 8 == 0 && bits / 8 <= CAP).then_some(bits / 8)
}

fn tensor(name: String, dtype: Dtype, shape: Vec<usize>, fill: &[u8]) -> Option<Tensor> {
    let n = nbytes(dtype, &shape)?;
    let bytes = (0..n).map(|i| if fill.is_empty() { 0x38 } else { fill[i % fill.len()] }).collect();
    Some((name, dtype, shape, bytes))
}

fn f32_scalar(name: String, v: f32) -> Tensor {
    (name, Dtype::F32, vec![], v.to_le_bytes().to_vec())
}

fn nvfp4_scales(n: usize, k: usize, swizzled: bool) -> Vec<usize> {
    if swizzled {
        let (r, c) = ScaleLayout::Swizzled128x4.padded_shape(n, k / 16).unwrap_or((n, k / 16));
        vec![r, c]
    } else {
        vec![n, k / 16]
    }
}

/// Metadata entries of a shard.
type Metadata = Vec<(String, String)>;

fn build(input: &Input) -> Option<(Vec<Tensor>, Metadata)> {
    let n = 1 + input.rows as usize % 160;
    let kb = 1 + input.k_blocks as usize % 4;
    let fill = &input.fill;
    let mut meta = vec![("format".to_owned(), "pt".to_owned())];
    let mut t = vec![tensor("model.norm.weight".into(), Dtype::BF16, vec![8], fill)?];
    match input.convention {
        Convention::Native { scheme, swizzled } => {
            let scheme = Scheme::ALL[scheme as usize % Scheme::ALL.len()];
            let layout = if swizzled { ScaleLayout::Swizzled128x4 } else { ScaleLayout::Linear };
            let k = [kb * 32, kb * 128].into_iter().find(|&k| scheme.shape(n, k).is_ok())?;
            let shape = scheme.shape(n, k).ok()?;
            let (cd, cs) = codes_dtype(scheme, n, k);
            t.push(tensor(format!("{P}.codes"), cd, cs, fill)?);
            t.push(tensor(format!("{P}.scales"), scale_dtype(scheme), scale_shape(&shape, layout), fill)?);
            if scheme.has_global_scale() {
                t.push(f32_scalar(format!("{P}.global_encode"), 2688.0));
            }
            meta.extend([
                (format!("{P}.scheme"), scheme.name().to_owned()),
                (format!("{P}.rows"), n.to_string()),
                (format!("{P}.k"), k.to_string()),
                (format!("{P}.scale_layout"), layout.name().to_owned()),
            ]);
        }
        Convention::ModeloptNvfp4 { swizzled, input_scale } => {
            let k = kb * 16;
            t.push(tensor(format!("{P}.weight"), Dtype::U8, vec![n, k / 2], fill)?);
            t.push(tensor(format!("{P}.weight_scale"), Dtype::F8_E4M3, nvfp4_scales(n, k, swizzled), fill)?);
            t.push(f32_scalar(format!("{P}.weight_scale_2"), 1.0 / 2688.0));
            if input_scale {
                t.push(f32_scalar(format!("{P}.input_scale"), 0.01));
            }
        }
        Convention::ModeloptFp8 { input_scale } => {
            t.push(tensor(format!("{P}.weight"), Dtype::F8_E4M3, vec![n, kb * 16], fill)?);
            t.push(f32_scalar(format!("{P}.weight_scale"), 0.01));
            if input_scale {
                t.push(f32_scalar(format!("{P}.input_scale"), 0.01));
            }
        }
        Convention::CompressedTensors { swizzled, input_scale } => {
            let k = kb * 16;
            t.push(tensor(format!("{P}.weight_packed"), Dtype::U8, vec![n, k / 2], fill)?);
            t.push(tensor(format!("{P}.weight_scale"), Dtype::F8_E4M3, nvfp4_scales(n, k, swizzled), fill)?);
            t.push((format!("{P}.weight_global_scale"), Dtype::F32, vec![1], 2688f32.to_le_bytes().to_vec()));
            if input_scale {
                t.push((format!("{P}.input_global_scale"), Dtype::F32, vec![1], 100f32.to_le_bytes().to_vec()));
            }
        }
        Convention::GptOss { experts } => {
            let lead: Vec<usize> = if experts { vec![2, n] } else { vec![n] };
            let blocks = lead.iter().copied().chain([kb, 16]).collect();
            let scales = lead.iter().copied().chain([kb]).collect();
            t.push(tensor(format!("{P}_blocks"), Dtype::U8, blocks, fill)?);
            t.push(tensor(format!("{P}_scales"), Dtype::U8, scales, fill)?);
        }
        Convention::Deepseek { ue8m0_config } => {
            let k = kb * 100;
            t.push(tensor(format!("{P}.weight"), Dtype::F8_E4M3, vec![n, k], fill)?);
            let s = vec![1.0f32; n.div_ceil(128) * k.div_ceil(128)];
            let sb = s.iter().flat_map(|x| x.to_le_bytes()).collect();
            t.push((format!("{P}.weight_scale_inv"), Dtype::F32, vec![n.div_ceil(128), k.div_ceil(128)], sb));
            if ue8m0_config {
                let qc = r#"{"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}"#;
                meta.push(("quantization_config".into(), qc.into()));
            }
        }
        Convention::CtMxfp4 => {
            let k = kb * 32;
            t.push(tensor(format!("{P}.weight_packed"), Dtype::U8, vec![n, k / 2], fill)?);
            t.push(tensor(format!("{P}.weight_scale"), Dtype::U8, vec![n, k / 32], fill)?);
            meta.push(ct_config(
                "mxfp4-pack-quantized",
                r#""num_bits": 4, "type": "float", "strategy": "group", "group_size": 32"#,
            ));
        }
        Convention::CtInt4 { group, asymmetric } => {
            let k = kb * 128;
            let g = [32, 128, k][group as usize % 3];
            let (strategy, groups) = if g == k { ("channel", 1) } else { ("group", k / g) };
            t.push(tensor(format!("{P}.weight_packed"), Dtype::I32, vec![n, k / 8], fill)?);
            t.push(tensor(format!("{P}.weight_scale"), Dtype::F16, vec![n, groups], fill)?);
            let shape = [n as i64, k as i64].iter().flat_map(|d| d.to_le_bytes()).collect();
            t.push((format!("{P}.weight_shape"), Dtype::I64, vec![2], shape));
            if asymmetric {
                t.push(tensor(format!("{P}.weight_zero_point"), Dtype::I32, vec![n.div_ceil(8), groups], fill)?);
            }
            let args = format!(
                r#""num_bits": 4, "type": "int", "strategy": "{strategy}", "group_size": {g}, "symmetric": {}"#,
                !asymmetric
            );
            meta.push(ct_config("pack-quantized", &args));
        }
        Convention::CtFp8 { strategy } => {
            let k = kb * 128;
            let (name, shape) = match strategy % 3 {
                0 => ("tensor", vec![1]),
                1 => ("channel", vec![n, 1]),
                _ => ("block", vec![n.div_ceil(128), k.div_ceil(128)]),
            };
            t.push(tensor(format!("{P}.weight"), Dtype::F8_E4M3, vec![n, k], fill)?);
            t.push(tensor(format!("{P}.weight_scale"), Dtype::F32, shape, fill)?);
            let args =
                format!(r#""num_bits": 8, "type": "float", "strategy": "{name}", "block_structure": [128, 128]"#);
            meta.push(ct_config("float-quantized", &args));
        }
    }
    Some((t, meta))
}

/// A compressed-tensors `quantization_config` metadata entry: one group of `format`
/// targeting every Linear layer, with weight arguments `args` (JSON members).
fn ct_config(format: &str, args: &str) -> (String, String) {
    let qc = format!(
        r#"{{"quant_method": "compressed-tensors", "format": "{format}", "quantization_status": "compressed",
            "config_groups": {{"group_0": {{"targets": ["Linear"], "weights": {{{args}}}}}}}}}"#
    );
    ("quantization_config".into(), qc)
}

/// Applies `e` to `t` (tensors, and for each whether it goes to the second shard).
fn apply(e: &Edit, t: &mut Vec<(Tensor, bool)>, meta: &mut Metadata) {
    let pick = |i: u8, len: usize| (len > 0).then(|| i as usize % len);
    let resize = |x: &mut Tensor, dtype: Dtype, shape: Vec<usize>| {
        if let Some(n) = nbytes(dtype, &shape) {
            x.1 = dtype;
            x.2 = shape;
            x.3.resize(n, 0x3c);
        }
    };
    match *e {
        Edit::Dtype { tensor, dtype } => {
            if let Some(i) = pick(tensor, t.len()) {
                let shape = t[i].0.2.clone();
                resize(&mut t[i].0, DTYPES[dtype as usize % DTYPES.len()], shape);
            }
        }
        Edit::Dim { tensor, dim, value } => {
            if let Some(i) = pick(tensor, t.len()) {
                let mut shape = t[i].0.2.clone();
                if let Some(d) = pick(dim, shape.len()) {
                    shape[d] = value as usize;
                    let dtype = t[i].0.1;
                    resize(&mut t[i].0, dtype, shape);
                }
            }
        }
        Edit::PushDim { tensor, value } => {
            if let Some(i) = pick(tensor, t.len()) {
                let mut shape = t[i].0.2.clone();
                shape.push(value as usize);
                let dtype = t[i].0.1;
                resize(&mut t[i].0, dtype, shape);
            }
        }
        Edit::PopDim { tensor } => {
            if let Some(i) = pick(tensor, t.len()) {
                let mut shape = t[i].0.2.clone();
                shape.pop();
                let dtype = t[i].0.1;
                resize(&mut t[i].0, dtype, shape);
            }
        }
        Edit::Remove { tensor } => {
            if let Some(i) = pick(tensor, t.len()) {
                t.remove(i);
            }
        }
        Edit::Rename { tensor, suffix } => {
            if let Some(i) = pick(tensor, t.len()) {
                t[i].0.0 = format!("{P}{}", SUFFIXES[suffix as usize % SUFFIXES.len()]);
            }
        }
        Edit::Meta { key, value: ref v } => {
            let keys = ["scheme", "rows", "k", "scale_layout"];
            let k = keys[key as usize % 4];
            let k = if key >= 128 { "quantization_config".to_owned() } else { format!("{P}.{k}") };
            meta.retain(|(x, _)| *x != k);
            meta.push((k, v.clone()));
        }
        Edit::F32 { tensor, index, value } => {
            if let Some(i) = pick(tensor, t.len()) {
                let b = &mut t[i].0.3;
                let at = index as usize * 4 % b.len().max(1);
                if at + 4 <= b.len() {
                    b[at..at + 4].copy_from_slice(&SPECIAL[value as usize % SPECIAL.len()].to_le_bytes());
                }
            }
        }
        Edit::Byte { tensor, index, value } => {
            if let Some(i) = pick(tensor, t.len()) {
                let b = &mut t[i].0.3;
                if !b.is_empty() {
                    let at = index as usize % b.len();
                    b[at] = value;
                }
            }
        }
        Edit::ToSecondShard { tensor } => {
            if let Some(i) = pick(tensor, t.len()) {
                t[i].1 = true;
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let Some((tensors, mut meta)) = build(&input) else { return };
    let mut t: Vec<(Tensor, bool)> = tensors.into_iter().map(|x| (x, false)).collect();
    for e in input.edits.iter().take(16) {
        apply(e, &mut t, &mut meta);
    }
    // Duplicate names (a rename onto an existing tensor) cannot be written in one header.
    let mut seen = std::collections::HashSet::new();
    t.retain(|(x, second)| seen.insert((x.0.clone(), *second)));
    let mut shards = Vec::new();
    for (second, name) in [(false, "a.safetensors"), (true, "b.safetensors")] {
        let part: Vec<Tensor> = t.iter().filter(|x| x.1 == second).map(|x| x.0.clone()).collect();
        if part.is_empty() && second {
            continue;
        }
        let bytes = serialize(&part, &meta);
        match Shard::from_bytes(Path::new(name), bytes) {
            Ok(s) => shards.push(s),
            Err(e) => panic!("a consistent header was refused: {e}"),
        }
    }
    read_checkpoint(&shards);
});
