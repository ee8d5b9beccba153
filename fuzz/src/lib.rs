//! Shared by the fuzz targets: what `blockscale dequantize` and `inspect` do with the
//! shards of a checkpoint once they are open, minus the writing, and a safetensors
//! serializer that writes whatever header it is given (dtypes and shapes may lie about
//! what the tensors are, as long as the byte counts agree).

use blockscale::checkpoint::{Catalog, Shard, Weight, recognise, weight};
use blockscale_cli::convention::decode;

/// Detects, checks and reads every quantized weight of `shards` as the library's
/// `Reader` does (`weight`), then decodes it as `dequantize` does; errors are fine,
/// panics are the bugs.
pub fn read_checkpoint(shards: &[Shard]) {
    let Ok(catalog) = Catalog::new(shards) else { return };
    // A compressed-tensors config in a file's metadata steers detection, as in dequantize.
    let Ok((found, _)) = recognise(&catalog, &[]) else { return };
    for f in &found {
        let _ = f.bits_per_weight(&catalog);
        let n = f.out_shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match weight(&catalog, f) {
            Ok(Weight::Matrix { q, .. }) => {
                assert_eq!(Some(q.rows() * q.k()), n, "{}: matrix of {:?}", f.output, f.out_shape)
            }
            Ok(Weight::Values(v)) => {
                assert_eq!(Some(v.len()), n, "{}: {} values for {:?}", f.output, v.len(), f.out_shape)
            }
            Err(_) => {}
        }
        if let Ok(v) = decode::<f32>(&blockscale::Backend::Cpu, &catalog, f) {
            assert_eq!(Some(v.len()), n, "{}: decoded {} values for shape {:?}", f.output, v.len(), f.out_shape);
        }
    }
}

/// A tensor: name, dtype, shape, bytes.
pub type Tensor = (String, safetensors::Dtype, Vec<usize>, Vec<u8>);

/// The bytes of a safetensors file holding `tensors` (in this order) and `metadata`.
pub fn serialize(tensors: &[Tensor], metadata: &[(String, String)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> =
            metadata.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
        header.insert("__metadata__".into(), m.into());
    }
    let mut offset = 0usize;
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            serde_json::json!({ "dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()] }),
        );
        offset += bytes.len();
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).expect("serializes");
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for (_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}
