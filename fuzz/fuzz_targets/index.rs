//! Structure-aware: a sharded checkpoint folder whose `model.safetensors.index.json`
//! may disagree with its shards (tensors it lists missing or in another shard, tensors
//! it does not list, shards it names absent or outside the folder, JSON that is not an
//! index). Whatever `Checkpoint::open` and `open_shards` accept must agree with the
//! index exactly; then the shards are read as `dequantize` reads them.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use blockscale::checkpoint::{Checkpoint, Reader, Weight};
use blockscale_fuzz::{read_checkpoint, serialize};
use libfuzzer_sys::fuzz_target;
use safetensors::Dtype;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Per shard, the tensors it holds (indices into NAMES).
    shards: Vec<Vec<u8>>,
    /// The index's weight_map: tensor (index into NAMES) to file (index into FILES).
    weight_map: Vec<(u8, u8)>,
    /// Instead of a weight_map built from the above, this text as the index.
    raw_index: Option<String>,
    /// Also write a safetensors file that no index lists.
    stray: bool,
}

const NAMES: [&str; 6] = ["a.weight", "b.weight", "c.weight", "d.bias", "e.weight_scale", "f"];
const FILES: [&str; 6] = [
    "model-00001-of-00003.safetensors",
    "model-00002-of-00003.safetensors",
    "model-00003-of-00003.safetensors",
    "absent.safetensors",
    "../outside.safetensors",
    "",
];

fuzz_target!(|input: Input| {
    let Ok(dir) = tempfile::tempdir() else { return };
    let mut held = BTreeMap::new();
    for (i, names) in input.shards.iter().take(3).enumerate() {
        let mut tensors = Vec::new();
        for &n in names.iter().take(6) {
            let name = NAMES[n as usize % NAMES.len()];
            if !tensors.iter().any(|(x, ..): &blockscale_fuzz::Tensor| x == name) {
                tensors.push((name.to_owned(), Dtype::BF16, vec![2], vec![0x80, 0x3f, 0, 0x40]));
                held.entry(name).or_insert_with(Vec::new).push(FILES[i]);
            }
        }
        if std::fs::write(dir.path().join(FILES[i]), serialize(&tensors, &[])).is_err() {
            return;
        }
    }
    if input.stray {
        let _ = std::fs::write(dir.path().join("consolidated.safetensors"), serialize(&[], &[]));
    }
    let map: BTreeMap<&str, &str> = input
        .weight_map
        .iter()
        .take(8)
        .map(|&(t, f)| (NAMES[t as usize % NAMES.len()], FILES[f as usize % FILES.len()]))
        .collect();
    let text = match &input.raw_index {
        Some(raw) => raw.clone(),
        None => serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map }).to_string(),
    };
    if std::fs::write(dir.path().join("model.safetensors.index.json"), &text).is_err() {
        return;
    }
    let Ok(ckpt) = Checkpoint::open(dir.path()) else { return };
    let Ok(shards) = ckpt.open_shards() else { return };
    if input.raw_index.is_none() {
        // Accepted: the shards the index names hold exactly the tensors it lists, each
        // once and in the shard it names.
        let read: BTreeMap<&str, Vec<&str>> = held
            .iter()
            .map(|(&t, files)| (t, files.iter().copied().filter(|f| map.values().any(|m| m == f)).collect()))
            .filter(|(_, files): &(&str, Vec<&str>)| !files.is_empty())
            .collect();
        let want: BTreeMap<&str, Vec<&str>> = map.iter().map(|(&t, &f)| (t, vec![f])).collect();
        assert_eq!(read, want, "accepted a checkpoint whose index disagrees with its shards");
    }
    read_checkpoint(&shards);
    // The engines' entry point over the same folder: whatever it opens, it reads
    // without panicking, and every weight it hands out has its found shape.
    if let Ok(reader) = Reader::open(dir.path()) {
        for loaded in reader.weights().flatten() {
            if let Weight::Values(v) = &loaded.weight {
                assert_eq!(v.len(), loaded.found.out_shape.iter().product::<usize>());
            }
        }
        let _ = reader.plain_tensors().count();
    }
});
