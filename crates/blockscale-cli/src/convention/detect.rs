//! Recognising quantized weights in a checkpoint from their tensor names, dtypes and
//! shapes (and, for native files, metadata), with a clear error when the parts of one
//! do not fit together.

use std::collections::HashSet;

use blockscale::{ScaleLayout, Scheme};
use blockscale_golden::case::{codes_dtype, parse_layout, scale_dtype, scale_shape};
use safetensors::Dtype;

use super::{Catalog, Convention, CtConfig};
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
    /// FP8 E4M3 times one scale (F32, BF16 or F16) per `block[0] x block[1]` tile:
    /// `w[n, k] * scale[n / block[0], k / block[1]]` (compressed-tensors
    /// `float-quantized`: per tensor, per channel or per block).
    ScaledFp8 {
        /// The `weight_scale` tensor.
        scale: String,
        /// The tile one scale covers, `[rows, columns]`.
        block: [usize; 2],
    },
    /// compressed-tensors `pack-quantized` INT4: eight offset-8 nibbles per int32 word
    /// (element `i` of a word in bits `4i..4i+4`, value `nibble - 8`), decoded as
    /// `(q - zero_point) * scale[n, k / group]`.
    PackedInt4 {
        /// The `weight_scale` tensor `[N, K / group]` (F32, BF16 or F16).
        scales: String,
        /// The `weight_zero_point` tensor of an asymmetric weight: the same nibbles,
        /// packed along N (`[ceil(N / 8), K / group]` words).
        zero_point: Option<String>,
        /// Elements per group along K (K itself per channel).
        group: usize,
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
    /// The format's name (a scheme's name, `fp8-per-tensor`, `fp8-per-channel`,
    /// `int4-g128`, ...).
    pub format: String,
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
    /// A 2-D block-scaled matrix of `scheme` (`parts[0]` its codes), dequantized to
    /// `output` of shape `[rows, k]` with its scales as `(tensor, layout, global)`.
    fn matrix(
        convention: Convention,
        output: String,
        parts: Vec<String>,
        scheme: Scheme,
        (rows, k): (usize, usize),
        (scales, layout, global): (String, ScaleLayout, GlobalSource),
    ) -> Self {
        Self {
            convention,
            output,
            main: parts[0].clone(),
            parts,
            format: scheme.name().into(),
            rows,
            k,
            out_shape: vec![rows, k],
            decode: Decode::Matrix { scheme, scales, layout, global, transpose_experts: None },
        }
    }

    /// Storage bits per weight, scales included.
    pub fn bits_per_weight(&self, catalog: &Catalog<'_>) -> f64 {
        let bytes: usize = self.parts.iter().filter_map(|p| catalog.get(p)).map(|(_, t)| t.nbytes()).sum();
        bytes as f64 * 8.0 / (self.rows * self.k).max(1) as f64
    }
}

/// Finds every quantized weight of `catalog`; every other tensor is plain. `ct`: the
/// checkpoint's compressed-tensors config, if it declares one.
///
/// # Errors
/// [`CliError::Tensor`] naming the tensor whose companion has the wrong dtype or shape;
/// [`CliError::Unsupported`] for an activation-ordered INT4 weight (`weight_g_idx`).
pub fn detect(catalog: &Catalog<'_>, ct: Option<&CtConfig>) -> Result<(Vec<Found>, HashSet<String>), CliError> {
    let mut found = Vec::new();
    for shard in catalog.shards() {
        for t in shard.tensors() {
            if let Some(f) = detect_one(catalog, t, ct)? {
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

/// Which convention `t` is the main tensor of, if any, and what it takes to decode it.
fn detect_one(catalog: &Catalog<'_>, t: &TensorEntry, ct: Option<&CtConfig>) -> Result<Option<Found>, CliError> {
    // The conventions' names are disjoint but for `.weight`, where the side tensors tell
    // ModelOpt NVFP4 (`weight_scale_2`), DeepSeek (`weight_scale_inv`) and scaled FP8
    // (`weight_scale`) apart: the first that matches decides, in this order.
    for probe in [native, modelopt_nvfp4, compressed_tensors_packed, gpt_oss_mxfp4, deepseek_fp8] {
        if let Some(found) = probe(catalog, t)? {
            return Ok(Some(found));
        }
    }
    // FP8 `weight` + `weight_scale`: compressed-tensors float-quantized when its config
    // says so (per tensor, per channel or per block), else ModelOpt FP8 (one F32 scale,
    // or one per channel).
    if let Some(p) = t.name.strip_suffix(".weight")
        && t.dtype == Dtype::F8_E4M3
        && catalog.get(&format!("{p}.weight_scale")).is_some()
    {
        return scaled_fp8(catalog, t, p, ct).map(Some);
    }
    Ok(None)
}

/// Native: `{p}.codes` with `{p}.scheme` metadata.
fn native(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".codes") else {
        return Ok(None);
    };
    let Some(scheme) = catalog.meta(&format!("{p}.scheme")) else {
        return Ok(None);
    };
    let meta = |key: &str| {
        catalog.meta(&format!("{p}.{key}")).ok_or_else(|| err(catalog, name, format!("metadata {p}.{key} is missing")))
    };
    let scheme: Scheme = scheme.parse().map_err(|_| err(catalog, name, format!("unknown scheme {scheme:?}")))?;
    let parse = |key: &str| -> Result<usize, CliError> {
        meta(key)?.parse().map_err(|_| err(catalog, name, format!("metadata {p}.{key} is not a number")))
    };
    let (rows, k) = (parse("rows")?, parse("k")?);
    let shape = scheme.shape(rows, k).map_err(|e| err(catalog, name, e.to_string()))?;
    let layout_name = meta("scale_layout")?;
    let layout =
        parse_layout(layout_name).ok_or_else(|| err(catalog, name, format!("unknown scale layout {layout_name:?}")))?;
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
    Ok(Some(Found::matrix(Convention::Native, p.to_owned(), parts, scheme, (rows, k), (scales, layout, global))))
}

/// ModelOpt NVFP4: U8 `weight` + `weight_scale` + `weight_scale_2`.
fn modelopt_nvfp4(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".weight") else {
        return Ok(None);
    };
    if t.dtype != Dtype::U8 {
        return Ok(None);
    }
    if catalog.get(&format!("{p}.weight_scale_2")).is_none() {
        return Ok(None);
    }
    let tensors = (format!("{p}.weight_scale"), format!("{p}.weight_scale_2"), format!("{p}.input_scale"));
    nvfp4_found(catalog, t, (Convention::Modelopt, name.to_owned()), tensors, GlobalSource::DecodeTensor).map(Some)
}

/// The NVFP4 matrix `t` of both NVFP4 conventions, written as `output`: its block scales,
/// its per-tensor scalar (`global`, which `source` says how to read) and the optional
/// activation scale `input`, checked, as the parts it is read from.
fn nvfp4_found(
    catalog: &Catalog<'_>,
    t: &TensorEntry,
    (convention, output): (Convention, String),
    (scales, global, input): (String, String, String),
    source: fn(String) -> GlobalSource,
) -> Result<Found, CliError> {
    let (rows, k, layout) = nvfp4_scales(catalog, t, &scales)?;
    scalar_f32(catalog, &global)?;
    let mut parts = vec![t.name.clone(), scales.clone(), global.clone()];
    parts.extend(optional(catalog, input));
    Ok(Found::matrix(convention, output, parts, Scheme::NvFp4, (rows, k), (scales, layout, source(global))))
}

/// compressed-tensors: I32 `weight_packed` (INT4 pack-quantized), or U8 FP4 pairs with
/// `weight_global_scale` (nvfp4-pack-quantized) or without (mxfp4-pack-quantized).
fn compressed_tensors_packed(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".weight_packed") else {
        return Ok(None);
    };
    if t.dtype == Dtype::I32 {
        return packed_int4(catalog, t, p).map(Some);
    }
    if t.dtype != Dtype::U8 {
        return Err(err(
            catalog,
            name,
            format!("is {:?}, expected U8 (FP4 pairs) or I32 (pack-quantized INT4 words)", t.dtype),
        ));
    }
    let (scales, g) = (format!("{p}.weight_scale"), format!("{p}.weight_global_scale"));
    if catalog.get(&g).is_none() {
        return mxfp4_packed(catalog, t, p).map(Some);
    }
    let output = (Convention::CompressedTensors, format!("{p}.weight"));
    nvfp4_found(catalog, t, output, (scales, g, format!("{p}.input_global_scale")), GlobalSource::EncodeTensor)
        .map(Some)
}

/// gpt-oss MXFP4: `{p}_blocks` U8 [..., out, K/32, 16] + `{p}_scales` U8 [..., out, K/32].
fn gpt_oss_mxfp4(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix("_blocks") else {
        return Ok(None);
    };
    if catalog.get(&format!("{p}_scales")).is_none() {
        return Ok(None);
    }
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
    Ok(Some(Found {
        convention: Convention::GptOss,
        output: p.to_owned(),
        main: name.to_owned(),
        parts: vec![name.to_owned(), scales.clone()],
        format: Scheme::MxFp4.name().into(),
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
    }))
}

/// DeepSeek FP8: F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(N/128), ceil(K/128)].
fn deepseek_fp8(catalog: &Catalog<'_>, t: &TensorEntry) -> Result<Option<Found>, CliError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".weight") else {
        return Ok(None);
    };
    if catalog.get(&format!("{p}.weight_scale_inv")).is_none() {
        return Ok(None);
    }
    let scales = format!("{p}.weight_scale_inv");
    expect(catalog, name, Dtype::F8_E4M3, None)?;
    if t.shape.len() != 2 {
        return Err(err(catalog, name, format!("has shape {:?}, expected [N, K]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1]);
    expect(catalog, &scales, Dtype::F32, Some(&[rows.div_ceil(128), k.div_ceil(128)]))?;
    Ok(Some(Found {
        convention: Convention::Deepseek,
        output: name.to_owned(),
        main: name.to_owned(),
        parts: vec![name.to_owned(), scales.clone()],
        format: Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128).name().into(),
        rows,
        k,
        out_shape: vec![rows, k],
        decode: Decode::DeepseekFp8 { scales },
    }))
}

/// The float scale tensor `name`: F32, BF16 or F16.
fn float_scale<'c>(catalog: &Catalog<'c>, name: &str) -> Result<&'c TensorEntry, CliError> {
    let (_, s) = catalog.get(name).ok_or_else(|| err(catalog, name, "missing"))?;
    if !matches!(s.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
        return Err(err(catalog, name, format!("is {:?}, expected F32, BF16 or F16", s.dtype)));
    }
    Ok(s)
}

/// FP8 E4M3 `{p}.weight` with `{p}.weight_scale` (and an optional `{p}.input_scale`).
fn scaled_fp8(catalog: &Catalog<'_>, t: &TensorEntry, p: &str, ct: Option<&CtConfig>) -> Result<Found, CliError> {
    let name = t.name.as_str();
    let scale = format!("{p}.weight_scale");
    if t.shape.len() != 2 {
        return Err(err(catalog, name, format!("has shape {:?}, expected [N, K]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1]);
    let s = if ct.is_some() {
        float_scale(catalog, &scale)?
    } else {
        expect(catalog, &scale, Dtype::F32, None)?;
        catalog.get(&scale).expect("checked").1
    };
    let block = ct.and_then(|c| c.fp8_block);
    let tiles = block.map(|[r, c]| [rows.div_ceil(r), k.div_ceil(c)]);
    let (format, decode) = if s.numel() == 1 {
        let format = "fp8-per-tensor".to_owned();
        if ct.is_some() {
            (format, Decode::ScaledFp8 { scale: scale.clone(), block: [rows.max(1), k.max(1)] })
        } else {
            (format, Decode::PerTensorFp8 { scale: scale.clone() })
        }
    } else if s.shape == [rows, 1] || (ct.is_none() && s.shape == [rows]) {
        ("fp8-per-channel".to_owned(), Decode::ScaledFp8 { scale: scale.clone(), block: [1, k.max(1)] })
    } else if let (Some([r, c]), Some(tiles)) = (block, tiles)
        && s.shape == tiles
    {
        (format!("fp8-block-{r}x{c}"), Decode::ScaledFp8 { scale: scale.clone(), block: [r, c] })
    } else {
        let mut expected = format!("one value (per tensor) or [{rows}, 1] (per channel)");
        if let (Some([r, c]), Some(tiles)) = (block, tiles) {
            expected += &format!(" or {tiles:?} (the config's {r}x{c} blocks)");
        }
        return Err(err(
            catalog,
            &scale,
            format!("has shape {:?}, expected {expected} for weight {name:?} of shape {:?}", s.shape, t.shape),
        ));
    };
    let mut parts = vec![name.to_owned(), scale];
    if let Some(input_scale) = optional(catalog, format!("{p}.input_scale")) {
        if ct.is_some() {
            float_scale(catalog, &input_scale)?;
        } else {
            scalar_f32(catalog, &input_scale)?;
        }
        parts.push(input_scale);
    }
    Ok(Found {
        convention: if ct.is_some() { Convention::CompressedTensors } else { Convention::Modelopt },
        output: name.to_owned(),
        main: name.to_owned(),
        parts,
        format,
        rows,
        k,
        out_shape: vec![rows, k],
        decode,
    })
}

/// compressed-tensors mxfp4-pack-quantized: U8 `{p}.weight_packed` [N, K/2] (E2M1
/// pairs, the even element in the low nibble) and `{p}.weight_scale` [N, K/32] of
/// UE8M0 exponents (U8 or F8_E8M0).
fn mxfp4_packed(catalog: &Catalog<'_>, t: &TensorEntry, p: &str) -> Result<Found, CliError> {
    let name = t.name.as_str();
    let scales = format!("{p}.weight_scale");
    if t.shape.len() != 2 {
        return Err(err(catalog, name, format!("has shape {:?}, expected [N, K/2]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1] * 2);
    let (_, s) = catalog.get(&scales).ok_or_else(|| err(catalog, &scales, "missing"))?;
    let linear = [rows, k / 32];
    if k % 32 != 0 || s.shape != linear || !matches!(s.dtype, Dtype::U8 | Dtype::F8_E8M0) {
        return Err(err(
            catalog,
            &scales,
            format!(
                "is {:?} {:?}; without {p}.weight_global_scale (NVFP4) the FP4 weight {name:?} of shape {:?} is \
                 read as mxfp4-pack-quantized, which needs U8 exponents of shape [N, K/32] = {linear:?} and K a \
                 multiple of 32",
                s.dtype, s.shape, t.shape
            ),
        ));
    }
    let mut parts = vec![name.to_owned(), scales.clone()];
    parts.extend(optional(catalog, format!("{p}.input_global_scale")));
    let scale = (scales, ScaleLayout::Linear, GlobalSource::None);
    Ok(Found::matrix(Convention::CompressedTensors, format!("{p}.weight"), parts, Scheme::MxFp4, (rows, k), scale))
}

/// compressed-tensors pack-quantized INT4: I32 `{p}.weight_packed` [N, ceil(K/8)],
/// `{p}.weight_shape` ([N, K], I64 or I32), `{p}.weight_scale` [N, K/group] and, when
/// asymmetric, I32 `{p}.weight_zero_point` [ceil(N/8), K/group].
fn packed_int4(catalog: &Catalog<'_>, t: &TensorEntry, p: &str) -> Result<Found, CliError> {
    let name = t.name.as_str();
    let g_idx = format!("{p}.weight_g_idx");
    if catalog.get(&g_idx).is_some() {
        return Err(CliError::Unsupported(format!(
            "{}: tensor {g_idx:?}: an activation-ordered INT4 weight (columns permuted into groups by weight_g_idx) \
             is not read; blockscale reads compressed-tensors {}; nothing was written",
            catalog.path_of(&g_idx).display(),
            super::ctensors::READ
        )));
    }
    let shape_name = format!("{p}.weight_shape");
    let (_, st) = catalog.get(&shape_name).ok_or_else(|| err(catalog, &shape_name, "missing"))?;
    let bytes = catalog.bytes(&shape_name).expect("present");
    let dims: Vec<u64> = match st.dtype {
        Dtype::I64 => bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
        Dtype::I32 => bytes.chunks_exact(4).map(|c| u64::from(u32::from_le_bytes(c.try_into().expect("4")))).collect(),
        d => return Err(err(catalog, &shape_name, format!("is {d:?}, expected I64 (or I32)"))),
    };
    let [n, k] = dims[..] else {
        return Err(err(catalog, &shape_name, format!("holds {dims:?}, expected the two dimensions [N, K]")));
    };
    let (rows, k) = (n as usize, k as usize);
    if t.shape != [rows, k.div_ceil(8)] {
        return Err(err(
            catalog,
            name,
            format!(
                "has shape {:?}, expected [N, ceil(K/8)] = [{rows}, {}] for 4-bit values of weight_shape [{rows}, {k}] \
                 (blockscale reads num_bits 4 only)",
                t.shape,
                k.div_ceil(8)
            ),
        ));
    }
    let scales = format!("{p}.weight_scale");
    let s = float_scale(catalog, &scales)?;
    let groups = match s.shape[..] {
        [r, g] if r == rows && g > 0 && k % g == 0 => g,
        _ => {
            return Err(err(
                catalog,
                &scales,
                format!(
                    "has shape {:?}, expected [{rows}, K/group] with a group dividing K = {k} ([{rows}, 1] per channel)",
                    s.shape
                ),
            ));
        }
    };
    let group = k / groups;
    let zp_name = format!("{p}.weight_zero_point");
    let zero_point = optional(catalog, zp_name);
    if let Some(z) = &zero_point {
        expect(catalog, z, Dtype::I32, Some(&[rows.div_ceil(8), groups]))?;
    }
    let mut format = if groups == 1 { "int4-per-channel".to_owned() } else { format!("int4-g{group}") };
    if zero_point.is_some() {
        format += "-asym";
    }
    let mut parts = vec![name.to_owned(), scales.clone(), shape_name];
    parts.extend(zero_point.clone());
    Ok(Found {
        convention: Convention::CompressedTensors,
        output: format!("{p}.weight"),
        main: name.to_owned(),
        parts,
        format,
        rows,
        k,
        out_shape: vec![rows, k],
        decode: Decode::PackedInt4 { scales, zero_point, group },
    })
}
