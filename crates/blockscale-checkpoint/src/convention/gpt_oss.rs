//! OpenAI gpt-oss MXFP4 (read only): `{p}_blocks` U8 `[..., out, K/32, 16]` (E2M1
//! pairs, the even element in the low nibble) and `{p}_scales` U8 `[..., out, K/32]`
//! (UE8M0 exponents). Experts' `[E, out, K]` weights are decoded transposed to
//! `[E, K, out]`, as transformers does.

use blockscale_formats::{ScaleLayout, Scheme};
use safetensors::Dtype;

use super::{Convention, Detect};
use crate::{CheckpointError, Decode, Found, GlobalSource, TensorEntry};

/// The gpt-oss convention.
pub static GPT_OSS: Convention = Convention::new("gpt-oss", "gpt-oss MXFP4", detect);

/// gpt-oss MXFP4: `{p}_blocks` U8 [..., out, K/32, 16] + `{p}_scales` U8 [..., out, K/32].
fn detect(cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
    let Some((p, scales)) = cx.with_companion(t, "_blocks", "_scales") else {
        return Ok(None);
    };
    let name = t.name.as_str();
    cx.expect(name, Dtype::U8, None)?;
    let d = &t.shape;
    if d.len() < 3 || d[d.len() - 1] != 16 {
        return Err(cx.err(name, format!("has shape {d:?}, expected [..., out, K/32, 16]")));
    }
    let lead = &d[..d.len() - 1];
    cx.expect(&scales, Dtype::U8, Some(lead))?;
    // Checked: a zero dimension lets the header declare any other (no bytes to match).
    let too_large = || cx.err(name, format!("has shape {d:?}, too large"));
    let k = d[d.len() - 2].checked_mul(32).ok_or_else(too_large)?;
    let out = d[d.len() - 3];
    let rows = d[..d.len() - 2].iter().try_fold(1usize, |a, &x| a.checked_mul(x)).ok_or_else(too_large)?;
    let (out_shape, transpose) = if d.len() == 4 {
        (vec![d[0], k, out], Some(d[0]))
    } else {
        (d[..d.len() - 2].iter().copied().chain([k]).collect(), None)
    };
    Ok(Some(Found {
        convention: GPT_OSS.name(),
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
