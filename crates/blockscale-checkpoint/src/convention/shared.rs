//! What two conventions share: NVFP4 weights with a per-tensor scale (ModelOpt and
//! compressed-tensors `nvfp4-pack-quantized`) and FP8 weights with a float scale per
//! tensor, channel or block (ModelOpt FP8 and compressed-tensors `float-quantized`).

use blockscale_formats::{ScaleLayout, Scheme};
use safetensors::Dtype;

use super::Detect;
use crate::{CheckpointError, Decode, Found, GlobalSource, TensorEntry};

/// NVFP4 packed weight `[N, K/2]` with F8_E4M3 scales, linear `[N, K/16]` or padded
/// 128x4-swizzled (ambiguous shapes read as linear, the format's definition).
fn nvfp4_scales(
    cx: &Detect<'_>,
    data: &TensorEntry,
    scales: &str,
) -> Result<(usize, usize, ScaleLayout), CheckpointError> {
    if data.shape.len() != 2 {
        return Err(cx.err(&data.name, format!("has shape {:?}, expected [N, K/2]", data.shape)));
    }
    // Checked: a zero dimension lets the header declare any other (no bytes to match).
    let too_large = || cx.err(&data.name, format!("has shape {:?}, too large", data.shape));
    let (n, k) = (data.shape[0], data.shape[1].checked_mul(2).ok_or_else(too_large)?);
    if k % 16 != 0 {
        return Err(cx.err(&data.name, format!("K = {k} is not a multiple of the NVFP4 block (16)")));
    }
    let linear = [n, k / 16];
    let s = cx.tensor(scales)?;
    let swz = ScaleLayout::Swizzled128x4.padded_shape(n, k / 16).map(|(r, c)| [r, c]).ok();
    let layout = if s.shape == linear {
        ScaleLayout::Linear
    } else if swz.is_some_and(|p| s.shape == p) {
        ScaleLayout::Swizzled128x4
    } else {
        return Err(cx.err(
            scales,
            format!(
                "has shape {:?}, expected {linear:?} (or the 128x4-swizzled {swz:?}) for weight {:?} of shape {:?}",
                s.shape, data.name, data.shape
            ),
        ));
    };
    cx.expect(scales, Dtype::F8_E4M3, None)?;
    Ok((n, k, layout))
}

/// The NVFP4 matrix `t` of both NVFP4 conventions, written as `output`: its block scales,
/// its per-tensor scalar (`global`, which `source` says how to read) and the optional
/// activation scale `input`, checked, as the parts it is read from.
pub fn nvfp4_found(
    cx: &Detect<'_>,
    t: &TensorEntry,
    (convention, output): (&'static str, String),
    (scales, global, input): (String, String, String),
    source: fn(String) -> GlobalSource,
) -> Result<Found, CheckpointError> {
    let (rows, k, layout) = nvfp4_scales(cx, t, &scales)?;
    cx.scalar_f32(&global)?;
    let mut parts = vec![t.name.clone(), scales.clone(), global.clone()];
    parts.extend(cx.optional(input));
    Ok(Found::matrix(convention, output, parts, Scheme::NvFp4, (rows, k), (scales, layout, source(global))))
}

/// Whether `t` is an FP8 E4M3 `{p}.weight` with a `{p}.weight_scale` (and no DeepSeek
/// `weight_scale_inv`): `Some(p)` if so.
pub fn scaled_fp8_prefix<'t>(cx: &Detect<'_>, t: &'t TensorEntry) -> Option<&'t str> {
    let p = t.name.strip_suffix(".weight")?;
    (t.dtype == Dtype::F8_E4M3 && cx.has(&format!("{p}.weight_scale")) && !cx.has(&format!("{p}.weight_scale_inv")))
        .then_some(p)
}

/// FP8 E4M3 `{p}.weight` with `{p}.weight_scale` (and an optional `{p}.input_scale`):
/// compressed-tensors `float-quantized` when the checkpoint declares a compressed-tensors
/// config (per tensor, per channel or per block, F32, BF16 or F16 scales), else ModelOpt
/// FP8 (one F32 scale, or one per channel).
pub fn scaled_fp8(
    cx: &Detect<'_>,
    t: &TensorEntry,
    p: &str,
    convention: &'static str,
) -> Result<Found, CheckpointError> {
    let name = t.name.as_str();
    let scale = format!("{p}.weight_scale");
    if t.shape.len() != 2 {
        return Err(cx.err(name, format!("has shape {:?}, expected [N, K]", t.shape)));
    }
    let (rows, k) = (t.shape[0], t.shape[1]);
    let ct = cx.ct.as_ref();
    let s = if ct.is_some() {
        cx.float_scale(&scale)?
    } else {
        cx.expect(&scale, Dtype::F32, None)?;
        cx.tensor(&scale)?
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
        return Err(cx.err(
            &scale,
            format!("has shape {:?}, expected {expected} for weight {name:?} of shape {:?}", s.shape, t.shape),
        ));
    };
    let mut parts = vec![name.to_owned(), scale];
    if let Some(input_scale) = cx.optional(format!("{p}.input_scale")) {
        if ct.is_some() {
            cx.float_scale(&input_scale)?;
        } else {
            cx.scalar_f32(&input_scale)?;
        }
        parts.push(input_scale);
    }
    Ok(Found {
        convention,
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
