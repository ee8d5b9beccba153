//! Recognising quantized weights in a checkpoint from their tensor names, dtypes and
//! shapes (and, for native files, metadata), with a clear error when the parts of one
//! do not fit together.

use std::collections::HashSet;

use blockscale::{ScaleLayout, Scheme};
use blockscale_golden::case::{codes_dtype, parse_layout, scale_dtype, scale_shape};
use safetensors::Dtype;

use super::{Catalog, Convention};
use crate::checkpoint::TensorEntry;
use crate::error::CliError;

/// Where an NVFP4 weight's per-tensor scale comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum GlobalSource {
    /// No per-tensor scale.
    None,
    /// A decode-scale tensor (ModelOpt `weight_scale_2`).
    DecodeTensor(String),
    /// An encode-scale tensor (compressed-tensors `weight_global_scale`).
    EncodeTensor(String),
}

/// How a found weight decodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Decode {
    /// A `rows x k` block-scaled matrix the library decodes (native, ModelOpt,
    /// compressed-tensors; gpt-oss with `transpose_experts`).
    Matrix {
        /// The scheme.
        scheme: Scheme,
        /// The scale tensor.
        scales: String,
        /// Its layout.
        layout: ScaleLayout,
        /// The per-tensor scale.
        global: GlobalSource,
        /// gpt-oss: `[E, out, K]` is transposed to `[E, K, out]` as transformers does.
        transpose_experts: Option<usize>,
    },
    /// DeepSeek FP8: `w * weight_scale_inv[n / 128, k / 128]`, any N and K.
    DeepseekFp8 {
        /// The `weight_scale_inv` tensor.
        scales: String,
    },
    /// ModelOpt FP8: `w * weight_scale`, one f32 scale for the whole tensor.
    PerTensorFp8 {
        /// The `weight_scale` tensor (one f32).
        scale: String,
    },
}

/// A quantized weight found in a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Its convention.
    pub convention: Convention,
    /// The name of the dequantized tensor.
    pub output: String,
    /// The element-data tensor.
    pub main: String,
    /// Every tensor it consumes (the data first).
    pub parts: Vec<String>,
    /// The format's name (a scheme's name, or `fp8-per-tensor`).
    pub format: &'static str,
    /// Logical rows of the 2-D matrix.
    pub rows: usize,
    /// Logical K.
    pub k: usize,
    /// Shape of the dequantized tensor.
    pub out_shape: Vec<usize>,
    /// How to decode it.
    pub decode: Decode,
}

impl Found {
    /// Storage bits per weight, scales included.
    pub fn bits_per_weight(&self, catalog: &Catalog<'_>) -> f64 {
        let bytes: usize = self.parts.iter().filter_map(|p| catalog.get(p)).map(|(_, t)| t.nbytes()).sum();
        bytes as f64 * 8.0 / (self.rows * self.k).max(1) as f64
    }
}

/// Finds every quantized weight of `catalog`; every other tensor is plain.
///
/// # Errors
/// [`CliError::Tensor`] naming the tensor whose companion has the wrong dtype or shape.
pub fn detect(catalog: &Catalog<'_>) -> Result<(Vec<Found>, HashSet<String>), CliError> {
    let mut found = Vec::new();
    for shard in catalog.shards() {
        for t in shard.tensors() {
            if let Some(f) = detect_one(catalog, t)? {
                found.push(f);
            }
        }
    }
    let consumed = found.iter().flat_map(|f| f.parts.iter().cloned()).collect();
    Ok((found, consumed))
}

fn err(catalog: &Catalog<'_>, name: &str, reason: impl Into<String>) -> CliError {
    CliError::tensor(catalog.path_of(name), name, reason)
}

fn expect(catalog: &Catalog<'_>, name: &str, dtype: Dtype, shape: Option<&[usize]>) -> Result<(), CliError> {
    let (_, t) = catalog.get(name).ok_or_else(|| err(catalog, name, "missing"))?;
    if t.dtype != dtype {
        return Err(err(catalog, name, format!("is {:?}, expected {dtype:?}", t.dtype)));
    }
    if let Some(s) = shape
        && t.shape != s
    {
        return Err(err(catalog, name, format!("has shape {:?}, expected {s:?} to match its weight", t.shape)));
    }
    Ok(())
}

/// `name` when the checkpoint holds it: an optional companion (an activation scale).
fn optional(catalog: &Catalog<'_>, name: String) -> Option<String> {
    catalog.get(&name).is_some().then_some(name)
}

fn scalar_f32(catalog: &Catalog<'_>, name: &str) -> Result<(), CliError> {
    expect(catalog, name, Dtype::F32, None)?;
    let (_, t) = catalog.get(name).expect("checked");
    if t.numel() != 1 {
        return Err(err(catalog, name, format!("has shape {:?}, expected one value", t.shape)));
    }
    Ok(())
}

/// NVFP4 packed weight `[N, K/2]` with F8_E4M3 scales, linear `[N, K/16]` or padded
/// 128x4-swizzled (ambiguous shapes read as linear, the format's definition).
fn nvfp4_scales(
    catalog: &Catalog<'_>,
    data: &TensorEntry,
    scales: &str,
) -> Result<(usize, usize, ScaleLayout), CliError> {
    if data.shape.len() != 2 {
        return Err(err(catalog, &data.name, format!("has shape {:?}, expected [N, K/2]", data.shape)));
    }
    // Checked: a zero dimension lets the header declare any other (no bytes to match).
    let too_large = || err(catalog, &data.name, format!("has shape {:?}, too large", data.shape));
    let (n, k) = (data.shape[0], data.shape[1].checked_mul(2).ok_or_else(too_large)?);
    if k % 16 != 0 {
        return Err(err(catalog, &data.name, format!("K = {k} is not a multiple of the NVFP4 block (16)")));
    }
    let linear = [n, k / 16];
    let (_, s) = catalog.get(scales).ok_or_else(|| err(catalog, scales, "missing"))?;
    let swz = ScaleLayout::Swizzled128x4.padded_shape(n, k / 16).map(|(r, c)| [r, c]).ok();
    let layout = if s.shape == linear {
        ScaleLayout::Linear
    } else if swz.is_some_and(|p| s.shape == p) {
        ScaleLayout::Swizzled128x4
    } else {
        return Err(err(
            catalog,
            scales,
            format!(
                "has shape {:?}, expected {linear:?} (or the 128x4-swizzled {swz:?}) for weight {:?} of shape {:?}",
                s.shape, data.name, data.shape
            ),
        ));
    };
    expect(catalog, scales, Dtype::F8_E4M3, None)?;
    Ok((n, k, layout))
}

fn detect_one(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    // Native: `{p}.codes` with `{p}.scheme` metadata.
    if let Some(p) = name.strip_suffix(".codes")
        && let Some(scheme) = catalog.meta(&format!("{p}.scheme"))
    {
        let meta = |key: &str| {
            catalog
                .meta(&format!("{p}.{key}"))
                .ok_or_else(|| err(catalog, name, format!("metadata {p}.{key} is missing")))
        };
        let scheme: Scheme = scheme.parse().map_err(|_| err(catalog, name, format!("unknown scheme {scheme:?}")))?;
        let parse = |key: &str| -> Result<usize, CliError> {
            meta(key)?.parse().map_err(|_| err(catalog, name, format!("metadata {p}.{key} is not a number")))
        };
        let (rows, k) = (parse("rows")?, parse("k")?);
        let shape = scheme.shape(rows, k).map_err(|e| err(catalog, name, e.to_string()))?;
        let layout_name = meta("scale_layout")?;
        let layout = parse_layout(layout_name)
            .ok_or_else(|| err(catalog, name, format!("unknown scale layout {layout_name:?}")))?;
        let (cd, cs) = codes_dtype(scheme, rows, k);
        expect(catalog, name, cd, Some(&cs))?;
        let scales = format!("{p}.scales");
        expect(catalog, &scales, scale_dtype(scheme), Some(&scale_shape(&shape, layout)))?;
        let mut parts = vec![name.to_owned(), scales.clone()];
        let global_name = format!("{p}.global_encode");
        let global = if scheme.has_global_scale() {
            scalar_f32(catalog, &global_name)?;
            parts.push(global_name.clone());
            GlobalSource::EncodeTensor(global_name)
        } else {
            GlobalSource::None
        };
        return Ok(Some(Found {
            convention: Convention::Native,
            output: p.to_owned(),
            main: name.to_owned(),
            parts,
            format: scheme.name(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::Matrix { scheme, scales, layout, global, transpose_experts: None },
        }));
    }
    // ModelOpt NVFP4: U8 `weight` + `weight_scale` + `weight_scale_2`.
    if let Some(p) = name.strip_suffix(".weight")
        && t.dtype == Dtype::U8
        && catalog.get(&format!("{p}.weight_scale_2")).is_some()
    {
        let (scales, ws2) = (format!("{p}.weight_scale"), format!("{p}.weight_scale_2"));
        let (rows, k, layout) = nvfp4_scales(catalog, t, &scales)?;
        scalar_f32(catalog, &ws2)?;
        let mut parts = vec![name.to_owned(), scales.clone(), ws2.clone()];
        parts.extend(optional(catalog, format!("{p}.input_scale")));
        return Ok(Some(Found {
            convention: Convention::Modelopt,
            output: name.to_owned(),
            main: name.to_owned(),
            parts,
            format: Scheme::NvFp4.name(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::Matrix {
                scheme: Scheme::NvFp4,
                scales,
                layout,
                global: GlobalSource::DecodeTensor(ws2),
                transpose_experts: None,
            },
        }));
    }
    // compressed-tensors NVFP4: `weight_packed` + `weight_scale` + `weight_global_scale`.
    if let Some(p) = name.strip_suffix(".weight_packed") {
        let (scales, g) = (format!("{p}.weight_scale"), format!("{p}.weight_global_scale"));
        if catalog.get(&g).is_none() {
            return Err(err(
                catalog,
                name,
                format!(
                    "{g:?} is missing: only the NVFP4 `nvfp4-pack-quantized` format of compressed-tensors is supported"
                ),
            ));
        }
        expect(catalog, name, Dtype::U8, None)?;
        let (rows, k, layout) = nvfp4_scales(catalog, t, &scales)?;
        scalar_f32(catalog, &g)?;
        let mut parts = vec![name.to_owned(), scales.clone(), g.clone()];
        parts.extend(optional(catalog, format!("{p}.input_global_scale")));
        return Ok(Some(Found {
            convention: Convention::CompressedTensors,
            output: format!("{p}.weight"),
            main: name.to_owned(),
            parts,
            format: Scheme::NvFp4.name(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::Matrix {
                scheme: Scheme::NvFp4,
                scales,
                layout,
                global: GlobalSource::EncodeTensor(g),
                transpose_experts: None,
            },
        }));
    }
    // gpt-oss MXFP4: `{p}_blocks` U8 [..., out, K/32, 16] + `{p}_scales` U8 [..., out, K/32].
    if let Some(p) = name.strip_suffix("_blocks")
        && catalog.get(&format!("{p}_scales")).is_some()
    {
        let scales = format!("{p}_scales");
        expect(catalog, name, Dtype::U8, None)?;
        let d = &t.shape;
        if d.len() < 3 || d[d.len() - 1] != 16 {
            return Err(err(catalog, name, format!("has shape {d:?}, expected [..., out, K/32, 16]")));
        }
        let lead = &d[..d.len() - 1];
        expect(catalog, &scales, Dtype::U8, Some(lead))?;
        // Checked: a zero dimension lets the header declare any other (no bytes to match).
        let too_large = || err(catalog, name, format!("has shape {d:?}, too large"));
        let k = d[d.len() - 2].checked_mul(32).ok_or_else(too_large)?;
        let out = d[d.len() - 3];
        let rows = d[..d.len() - 2].iter().try_fold(1usize, |a, &x| a.checked_mul(x)).ok_or_else(too_large)?;
        let (out_shape, transpose) = if d.len() == 4 {
            (vec![d[0], k, out], Some(d[0]))
        } else {
            (d[..d.len() - 2].iter().copied().chain([k]).collect(), None)
        };
        return Ok(Some(Found {
            convention: Convention::GptOss,
            output: p.to_owned(),
            main: name.to_owned(),
            parts: vec![name.to_owned(), scales.clone()],
            format: Scheme::MxFp4.name(),
            rows,
            k,
            out_shape,
            decode: Decode::Matrix {
                scheme: Scheme::MxFp4,
                scales,
                layout: ScaleLayout::Linear,
                global: GlobalSource::None,
                transpose_experts: transpose,
            },
        }));
    }
    // DeepSeek FP8: F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(N/128), ceil(K/128)].
    if let Some(p) = name.strip_suffix(".weight")
        && catalog.get(&format!("{p}.weight_scale_inv")).is_some()
    {
        let scales = format!("{p}.weight_scale_inv");
        expect(catalog, name, Dtype::F8_E4M3, None)?;
        if t.shape.len() != 2 {
            return Err(err(catalog, name, format!("has shape {:?}, expected [N, K]", t.shape)));
        }
        let (rows, k) = (t.shape[0], t.shape[1]);
        expect(catalog, &scales, Dtype::F32, Some(&[rows.div_ceil(128), k.div_ceil(128)]))?;
        return Ok(Some(Found {
            convention: Convention::Deepseek,
            output: name.to_owned(),
            main: name.to_owned(),
            parts: vec![name.to_owned(), scales.clone()],
            format: Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128).name(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::DeepseekFp8 { scales },
        }));
    }
    // ModelOpt FP8 per tensor: F8_E4M3 `weight` + one F32 `weight_scale` (+ `input_scale`).
    if let Some(p) = name.strip_suffix(".weight")
        && t.dtype == Dtype::F8_E4M3
        && catalog.get(&format!("{p}.weight_scale")).is_some()
    {
        let scale = format!("{p}.weight_scale");
        if t.shape.len() != 2 {
            return Err(err(catalog, name, format!("has shape {:?}, expected [N, K]", t.shape)));
        }
        scalar_f32(catalog, &scale)?;
        let (rows, k) = (t.shape[0], t.shape[1]);
        let mut parts = vec![name.to_owned(), scale.clone()];
        if let Some(input_scale) = optional(catalog, format!("{p}.input_scale")) {
            scalar_f32(catalog, &input_scale)?;
            parts.push(input_scale);
        }
        return Ok(Some(Found {
            convention: Convention::Modelopt,
            output: name.to_owned(),
            main: name.to_owned(),
            parts,
            format: "fp8-per-tensor",
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::PerTensorFp8 { scale },
        }));
    }
    Ok(None)
}
