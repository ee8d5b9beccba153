//! How a case is laid out in a golden file: tensor names, dtypes and metadata keys
//! (docs/GOLDEN.md is the reference for people outside the project).

use blockscale_formats::{
    DataLayout, FloatKind, FloatValues, GlobalScale, NonFinite, NvFp4Recipe, QuantizedMatrix, QuantizedParts,
    ScaleRule, Scheme,
};
use safetensors::Dtype;

use crate::GoldenError;
use crate::file::{GoldenFile, Writer};

/// The safetensors dtype of f32, f16 or bf16 values.
pub fn dtype_of(kind: FloatKind) -> Dtype {
    match kind {
        FloatKind::F32 => Dtype::F32,
        FloatKind::F16 => Dtype::F16,
        FloatKind::Bf16 => Dtype::BF16,
    }
}

/// Reads tensor `name` of shape `shape` (a quantization case's input or weight-only
/// activations), whichever of f32, f16 and bf16 it holds.
///
/// # Errors
/// As [`GoldenFile::bytes`]; [`GoldenError::Dtype`] for any other dtype.
pub fn read_values(file: &GoldenFile, name: &str, shape: &[usize]) -> Result<FloatValues<'static>, GoldenError> {
    match file.info(name)?.0 {
        Dtype::F16 => Ok(FloatValues::F16(file.f16s(name, shape)?.into())),
        Dtype::BF16 => Ok(FloatValues::Bf16(file.bf16s(name, shape)?.into())),
        _ => Ok(FloatValues::F32(file.f32s(name, shape)?.into())),
    }
}

pub use blockscale_checkpoint::dtypes::{
    codes_dtype, parse_layout, scale_bytes, scale_dtype, scale_shape, scales_from,
};

/// Writes a quantized matrix as `{prefix}.codes` and `{prefix}.scales` (its own scale
/// layout) with metadata `{prefix}.scheme`, `.rows`, `.k`, `.scale_layout`, for NVFP4
/// `.global_encode` (f32 bits) and, for block-interleaved codes, `.data_layout`.
pub fn put_matrix(w: &mut Writer, prefix: &str, q: &QuantizedMatrix) {
    let (dtype, shape) = codes_dtype(q.scheme(), q.rows(), q.k());
    w.tensor(&format!("{prefix}.codes"), dtype, &shape, q.data().to_vec());
    let sshape = scale_shape(q.shape(), q.scale_layout());
    w.tensor(&format!("{prefix}.scales"), scale_dtype(q.scheme()), &sshape, scale_bytes(q.scales()));
    w.meta(&format!("{prefix}.scheme"), q.scheme().name())
        .meta(&format!("{prefix}.rows"), q.rows().to_string())
        .meta(&format!("{prefix}.k"), q.k().to_string())
        .meta(&format!("{prefix}.scale_layout"), q.scale_layout().name());
    if let Some(g) = q.global_scale() {
        w.meta_f32(&format!("{prefix}.global_encode"), g.encode());
    }
    if q.data_layout() != DataLayout::RowMajor {
        // The codes tensor keeps its [rows, row bytes] shape; its bytes are in this order.
        w.meta(&format!("{prefix}.data_layout"), q.data_layout().name());
    }
}

/// Parses a data layout name.
pub fn parse_data_layout(s: &str) -> Option<DataLayout> {
    [DataLayout::RowMajor, DataLayout::BlockInterleaved].into_iter().find(|l| l.name() == s)
}

/// Parses a scale rule name.
pub fn parse_rule(s: &str) -> Option<ScaleRule> {
    ScaleRule::ALL.into_iter().find(|r| r.name() == s)
}

/// The names of NVFP4 recipes in golden files.
pub fn recipe_name(r: NvFp4Recipe) -> &'static str {
    match r {
        NvFp4Recipe::LightX2V => "lightx2v",
        NvFp4Recipe::TransformerEngine => "transformer-engine",
    }
}

/// Parses a recipe name.
pub fn parse_recipe(s: &str) -> Option<NvFp4Recipe> {
    [NvFp4Recipe::LightX2V, NvFp4Recipe::TransformerEngine].into_iter().find(|&r| recipe_name(r) == s)
}

/// The names of the non-finite policies in golden files.
pub fn non_finite_name(n: NonFinite) -> &'static str {
    match n {
        NonFinite::Error => "error",
        NonFinite::Poison => "poison",
    }
}

/// Reads back a matrix written by [`put_matrix`].
///
/// # Errors
/// Any [`GoldenError`] about its tensors and metadata, including parts that do not
/// make a valid matrix.
pub fn get_matrix(f: &GoldenFile, prefix: &str) -> Result<QuantizedMatrix, GoldenError> {
    let key = |k: &str| format!("{prefix}.{k}");
    let scheme: Scheme = f.parse(&key("scheme"))?;
    let rows: usize = f.parse(&key("rows"))?;
    let k: usize = f.parse(&key("k"))?;
    let layout_name = f.meta(&key("scale_layout"))?;
    let scale_layout = parse_layout(layout_name)
        .ok_or_else(|| f.bad_meta(&key("scale_layout"), format!("unknown layout {layout_name:?}")))?;
    let shape = scheme.shape(rows, k).map_err(|e| f.bad_meta(&key("k"), e.to_string()))?;
    let (dtype, cshape) = codes_dtype(scheme, rows, k);
    let data = f.bytes(&key("codes"), dtype, &cshape)?.to_vec();
    let sbytes = f.bytes(&key("scales"), scale_dtype(scheme), &scale_shape(&shape, scale_layout))?;
    let data_layout = match f.meta_opt(&key("data_layout")) {
        Some(name) => parse_data_layout(name)
            .ok_or_else(|| f.bad_meta(&key("data_layout"), format!("unknown data layout {name:?}")))?,
        None => DataLayout::RowMajor,
    };
    let global_scale = match f.meta_opt(&key("global_encode")) {
        Some(_) => Some(
            GlobalScale::from_encode(f.f32_bits(&key("global_encode"))?)
                .map_err(|e| f.bad_meta(&key("global_encode"), e.to_string()))?,
        ),
        None => None,
    };
    QuantizedMatrix::from_parts(QuantizedParts {
        scheme,
        rows,
        k,
        data,
        data_layout,
        scales: scales_from(scheme.scale_format(), sbytes),
        scale_layout,
        global_scale,
    })
    .map_err(|e| f.bad_meta(prefix, format!("the parts do not make a valid matrix: {e}")))
}
