//! blockscale's own convention: per weight `{name}.codes` and `{name}.scales` in the
//! dtypes of [`crate::dtypes`], `{name}.global_encode` (F32 `[1]`) for NVFP4, and the
//! metadata entries `{name}.scheme`, `.rows`, `.k` and `.scale_layout`. Every scheme,
//! either scale layout; the golden files store matrices the same way.

use blockscale_formats::{ScaleLayout, Scheme};
use safetensors::Dtype;

use super::{Convention, Detect, Holds, Part, ToStore, Writes};
use crate::dtypes::{codes_dtype, parse_layout, scale_dtype, scale_shape};
use crate::{CheckpointError, Configs, Found, GlobalSource, TensorEntry};

/// The native convention.
pub static NATIVE: Convention = Convention::new("native", "native (blockscale)", detect).writing(&Native);

/// `{p}.codes` with `{p}.scheme` metadata.
fn detect(cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
    let name = t.name.as_str();
    let Some(p) = name.strip_suffix(".codes") else {
        return Ok(None);
    };
    let Some(scheme) = cx.catalog.meta(&format!("{p}.scheme")) else {
        return Ok(None);
    };
    let meta = |key: &str| {
        cx.catalog.meta(&format!("{p}.{key}")).ok_or_else(|| cx.err(name, format!("metadata {p}.{key} is missing")))
    };
    let scheme: Scheme = scheme.parse().map_err(|_| cx.err(name, format!("unknown scheme {scheme:?}")))?;
    let parse = |key: &str| -> Result<usize, CheckpointError> {
        meta(key)?.parse().map_err(|_| cx.err(name, format!("metadata {p}.{key} is not a number")))
    };
    let (rows, k) = (parse("rows")?, parse("k")?);
    let shape = scheme.shape(rows, k).map_err(|e| cx.err(name, e.to_string()))?;
    let layout_name = meta("scale_layout")?;
    let layout =
        parse_layout(layout_name).ok_or_else(|| cx.err(name, format!("unknown scale layout {layout_name:?}")))?;
    let (cd, cs) = codes_dtype(scheme, rows, k);
    cx.expect(name, cd, Some(&cs))?;
    let scales = format!("{p}.scales");
    cx.expect(&scales, scale_dtype(scheme), Some(&scale_shape(&shape, layout)))?;
    let mut parts = vec![name.to_owned(), scales.clone()];
    let global_name = format!("{p}.global_encode");
    let global = if scheme.has_global_scale() {
        cx.scalar_f32(&global_name)?;
        parts.push(global_name.clone());
        GlobalSource::EncodeTensor(global_name)
    } else {
        GlobalSource::None
    };
    Ok(Some(Found::matrix(NATIVE.name(), p.to_owned(), parts, scheme, (rows, k), (scales, layout, global))))
}

/// How blockscale writes the native convention.
pub struct Native;

impl Writes for Native {
    fn parts(&self, w: &ToStore<'_>) -> Option<Vec<Part>> {
        let (name, s) = (w.name, &w.shape);
        let (cd, cs) = codes_dtype(s.scheme, s.rows, s.k);
        let mut v = vec![
            Part::new(format!("{name}.codes"), cd, cs, Holds::Codes),
            Part::new(format!("{name}.scales"), scale_dtype(s.scheme), scale_shape(s, w.layout), Holds::Scales),
        ];
        if s.scheme.has_global_scale() {
            v.push(Part::new(format!("{name}.global_encode"), Dtype::F32, vec![1], Holds::GlobalEncode));
        }
        Some(v)
    }

    fn stores(&self) -> &'static str {
        "the native convention stores every scheme"
    }

    fn metadata(&self, w: &ToStore<'_>) -> Vec<(String, String)> {
        let (name, s) = (w.name, &w.shape);
        vec![
            (format!("{name}.scheme"), s.scheme.name().to_owned()),
            (format!("{name}.rows"), s.rows.to_string()),
            (format!("{name}.k"), s.k.to_string()),
            (format!("{name}.scale_layout"), w.layout.name().to_owned()),
        ]
    }

    fn configs(&self, scheme: Scheme, _calibrated: bool, ignore: &[String]) -> Configs {
        let producer = super::producer();
        let qc = serde_json::json!({ "quant_method": "blockscale", "scheme": scheme.name(), "ignore": ignore, "producer": producer });
        Configs { metadata: vec![], files: vec![], config_json: Some(qc) }
    }

    fn scale_layouts(&self) -> &'static [ScaleLayout] {
        &ScaleLayout::ALL
    }
}
