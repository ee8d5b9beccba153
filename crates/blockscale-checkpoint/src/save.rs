//! Writing a small quantized checkpoint in one call: quantized weights stored under a
//! convention, plain tensors beside them, the convention's config in the metadata, the
//! file appearing complete or not at all. (The `blockscale quantize` command streams a
//! whole model shard by shard with the same pieces: [`crate::Writes`],
//! [`crate::ShardWriter`], [`crate::Output`].)

use std::collections::BTreeMap;
use std::path::Path;

use blockscale_formats::QuantizedMatrix;
use safetensors::Dtype;

use crate::convention::{Writes, encode, layer_prefix};
use crate::{CheckpointError, Output, OutputKind, PlannedTensor, ShardWriter};

/// A tensor stored as it is: name, dtype, shape and little-endian bytes.
pub type PlainData = (String, Dtype, Vec<usize>, Vec<u8>);

/// Writes one safetensors file at `path`: each `(name, matrix)` of `weights` stored
/// under the convention `writes` (with no activation scales), then `plain` as given,
/// and the convention's `quantization_config` (and ModelOpt's `hf_quant_config`) in the
/// file's metadata. Every weight must be of one scheme (a config declares one).
/// Replaces an existing file only with `force`.
///
/// # Errors
/// [`CheckpointError::Invalid`] for no weights or weights of several schemes,
/// [`CheckpointError::Unsupported`] for a scheme the convention cannot store,
/// [`CheckpointError::OutputExists`], [`CheckpointError::Write`], and
/// [`CheckpointError::Tensor`] for a name planned twice.
pub fn save(
    path: &Path,
    writes: &dyn Writes,
    weights: Vec<(String, QuantizedMatrix)>,
    plain: Vec<PlainData>,
    force: bool,
) -> Result<(), CheckpointError> {
    let Some(scheme) = weights.first().map(|(_, q)| q.scheme()) else {
        return Err(CheckpointError::Invalid("no weights to save".into()));
    };
    if let Some((name, q)) = weights.iter().find(|(_, q)| q.scheme() != scheme) {
        return Err(CheckpointError::Invalid(format!(
            "{name} is {}, the first weight {scheme}: one file declares one scheme",
            q.scheme()
        )));
    }
    let mut planned = Vec::new();
    let mut metadata = BTreeMap::new();
    for (name, q) in &weights {
        let (tensors, meta) = writes.plan(q.scheme(), q.scale_layout(), name, (q.rows(), q.k()), false)?;
        planned.extend(tensors);
        metadata.extend(meta);
    }
    planned.extend(plain.iter().map(|(name, dtype, shape, _)| PlannedTensor::new(name.clone(), *dtype, shape.clone())));
    let mut ignore: Vec<String> = plain
        .iter()
        .filter(|(name, _, shape, _)| shape.len() == 2 && name.ends_with(".weight"))
        .map(|(name, ..)| layer_prefix(name).to_owned())
        .collect();
    ignore.sort();
    metadata.extend(writes.configs(scheme, false, &ignore).metadata);
    let output = Output::create(path, OutputKind::File, force)?;
    let mut w = ShardWriter::create(&output.path(None), &planned, &metadata)?;
    for (name, q) in weights {
        for (tensor, bytes) in encode(writes, &name, q, None)? {
            w.write(&tensor, &bytes)?;
        }
    }
    for (name, _, _, bytes) in &plain {
        w.write(name, bytes)?;
    }
    w.finish()?;
    output.commit()
}
