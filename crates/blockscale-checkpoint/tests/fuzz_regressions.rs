//! Inputs the fuzz targets of fuzz/ (or a reading of the code they exercise) found to
//! crash the checkpoint readers, each kept as a test: reading it must end in a typed
//! error naming the tensor, never a panic. The files are built in memory and read
//! through the library, as the `dequantize` fuzz target reads them.

use std::path::Path;

use blockscale_checkpoint::{Catalog, CheckpointError, Declared, Shard, Weight, detect, weight};
use safetensors::Dtype;

/// A safetensors file (header JSON written by hand, so shapes may be anything whose
/// byte count agrees).
fn file(tensors: &[(&str, Dtype, &[usize], Vec<u8>)], metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> =
            metadata.iter().map(|(k, v)| (k.to_string(), v.to_string().into())).collect();
        header.insert("__metadata__".into(), m.into());
    }
    let mut offset = 0;
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({ "dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()] }),
        );
        offset += bytes.len();
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for (.., bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}

/// Detects and reads every weight of one in-memory shard: the first error, if any, else
/// each weight's element count.
fn read(bytes: Vec<u8>) -> Result<Vec<usize>, CheckpointError> {
    let shard = Shard::from_bytes(Path::new("fuzz.safetensors"), bytes)?;
    let shards = [shard];
    let catalog = Catalog::new(&shards)?;
    let (found, _) = detect(&catalog, &Declared::read(&catalog, &[]))?;
    let mut lens = Vec::new();
    for f in &found {
        lens.push(match weight(&catalog, f)? {
            Weight::Matrix { q, .. } => q.rows() * q.k(),
            Weight::Values(v) => v.len(),
        });
    }
    Ok(lens)
}

/// The error's tensor and reason.
fn tensor_error(r: Result<Vec<usize>, CheckpointError>) -> (String, String) {
    match r {
        Err(CheckpointError::Tensor { tensor, reason, .. }) => (tensor, reason),
        other => panic!("expected a tensor error, got {other:?}"),
    }
}

/// gpt-oss `_blocks` with a zero dimension: no bytes, so the header may declare any
/// other dimension; K = 32 x blocks and the row count overflowed (a panic in `detect`).
#[test]
fn gpt_oss_shapes_whose_k_or_rows_overflow_are_refused() {
    let big = 1usize << 60;
    for (blocks, scales) in [
        (vec![0, big, 16], vec![0, big]),
        (vec![1 << 40, 0, big, 16], vec![1 << 40, 0, big]),
        (vec![big, 0, 16, 16], vec![big, 0, 16]),
    ] {
        let r = read(file(&[("m_blocks", Dtype::U8, &blocks, vec![]), ("m_scales", Dtype::U8, &scales, vec![])], &[]));
        let (tensor, reason) = tensor_error(r);
        assert_eq!(tensor, "m_blocks", "{blocks:?}: {reason}");
    }
}

/// An NVFP4 weight `[0, 2^63]` bytes: K = 2 x 2^63 overflowed (a panic in `detect`).
#[test]
fn nvfp4_weights_whose_k_overflows_are_refused() {
    for (weight, packed) in [("l.weight", "l.weight_scale_2"), ("l.weight_packed", "l.weight_global_scale")] {
        let r = read(file(
            &[
                (weight, Dtype::U8, &[0, 1 << 63], vec![]),
                ("l.weight_scale", Dtype::F8_E4M3, &[0, 1], vec![]),
                (packed, Dtype::F32, &[1], 1f32.to_le_bytes().to_vec()),
            ],
            &[],
        ));
        let (tensor, reason) = tensor_error(r);
        assert_eq!(tensor, weight, "{reason}");
        assert!(reason.contains("too large"), "{reason}");
    }
}

/// Zero experts (or any zero dimension) make an empty matrix: a typed error, not a
/// division by the expert count.
#[test]
fn gpt_oss_with_zero_experts_is_refused() {
    let r = read(file(
        &[("m_blocks", Dtype::U8, &[0, 2, 1, 16], vec![]), ("m_scales", Dtype::U8, &[0, 2, 1], vec![])],
        &[],
    ));
    assert_eq!(tensor_error(r).0, "m_blocks");
}
