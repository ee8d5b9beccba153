//! An output folder's files besides its shards: the `*.safetensors.index.json` naming
//! the shard of every tensor, config.json with its `quantization_config` set or removed,
//! and the input folder's other files (tokenizer, generation config...) copied along.

use std::collections::BTreeMap;
use std::path::Path;

use crate::CheckpointError;
use crate::{Checkpoint, Output};

/// Writes `*.safetensors.index.json` for the output shards: named as the input's
/// `index` (or `model.safetensors.index.json`), mapping each tensor to its shard file.
///
/// # Errors
/// [`CheckpointError::Write`].
pub fn write_index(
    output: &Output,
    index: Option<&Path>,
    weight_map: &BTreeMap<String, String>,
    total_size: u64,
) -> Result<(), CheckpointError> {
    let name = index.map_or_else(|| "model.safetensors.index.json".to_owned(), Checkpoint::file_name);
    let v = serde_json::json!({ "metadata": { "total_size": total_size }, "weight_map": weight_map });
    write_json(output, &name, &v)
}

/// Copies the folder's other files, except `drop`, then writes `add`. config.json gets
/// `quantization_config` set to `quant_config` (quantize; a config.json that is not a
/// JSON object is then an error) or, with `None`, removed (dequantize; a config.json
/// that is not a JSON object is copied as it is).
///
/// # Errors
/// [`CheckpointError::Read`] / [`CheckpointError::Write`]; [`CheckpointError::Checkpoint`] for a
/// config.json that cannot take the config.
pub fn copy_others(
    output: &Output,
    ckpt: &Checkpoint,
    quant_config: Option<&serde_json::Value>,
    add: &[(String, serde_json::Value)],
    drop: &[&str],
) -> Result<(), CheckpointError> {
    for p in &ckpt.others {
        let name = Checkpoint::file_name(p);
        if drop.contains(&name.as_str()) || add.iter().any(|(n, _)| *n == name) {
            continue;
        }
        if name == "config.json" {
            let text =
                std::fs::read_to_string(p).map_err(|source| CheckpointError::Read { path: p.clone(), source })?;
            let parsed = serde_json::from_str::<serde_json::Value>(&text);
            match (parsed, quant_config) {
                (Ok(mut v), Some(qc)) => {
                    let obj = v.as_object_mut().ok_or_else(|| CheckpointError::Checkpoint {
                        path: p.clone(),
                        reason: "not a JSON object".into(),
                    })?;
                    obj.insert("quantization_config".into(), qc.clone());
                    write_json(output, &name, &v)?;
                    continue;
                }
                (Err(e), Some(_)) => {
                    return Err(CheckpointError::Checkpoint {
                        path: p.clone(),
                        reason: format!("not valid JSON: {e}"),
                    });
                }
                (Ok(mut v), None) => {
                    if let Some(obj) = v.as_object_mut() {
                        obj.remove("quantization_config");
                        write_json(output, &name, &v)?;
                        continue;
                    }
                }
                (Err(_), None) => {}
            }
        }
        let dest = output.path(Some(&name));
        std::fs::copy(p, &dest).map_err(|source| CheckpointError::Write { path: dest, source })?;
    }
    for (name, v) in add {
        write_json(output, name, v)?;
    }
    Ok(())
}

/// Writes `v` as pretty JSON (with a final newline) to `name` inside the output folder.
fn write_json(output: &Output, name: &str, v: &serde_json::Value) -> Result<(), CheckpointError> {
    let p = output.path(Some(name));
    let text = serde_json::to_string_pretty(v).expect("JSON serializes") + "\n";
    std::fs::write(&p, text).map_err(|source| CheckpointError::Write { path: p, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OutputKind;

    /// A checkpoint folder with one shard and `others`, and an output folder being written.
    fn folder(others: &[(&str, &str)]) -> (tempfile::TempDir, Checkpoint, Output) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        // An empty header: the smallest valid safetensors file.
        std::fs::write(input.join("model.safetensors"), b"\x02\0\0\0\0\0\0\0{}").unwrap();
        for (name, text) in others {
            std::fs::write(input.join(name), text).unwrap();
        }
        let ckpt = Checkpoint::open(&input).unwrap();
        let output = Output::create(&dir.path().join("out"), OutputKind::Dir, false).unwrap();
        (dir, ckpt, output)
    }

    fn read(output: &Output, name: &str) -> String {
        std::fs::read_to_string(output.path(Some(name))).unwrap()
    }

    #[test]
    fn the_index_maps_tensors_to_shards_under_the_input_index_name() {
        let (_dir, _, output) = folder(&[]);
        let map = BTreeMap::from([("a.weight".to_owned(), "s1.safetensors".to_owned())]);
        write_index(&output, Some(Path::new("/x/custom.safetensors.index.json")), &map, 42).unwrap();
        let v: serde_json::Value = serde_json::from_str(&read(&output, "custom.safetensors.index.json")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "metadata": { "total_size": 42 }, "weight_map": { "a.weight": "s1.safetensors" } })
        );
        write_index(&output, None, &map, 0).unwrap();
        assert!(read(&output, "model.safetensors.index.json").ends_with("}\n"));
    }

    #[test]
    fn config_json_gets_the_quantization_config_and_the_rest_is_copied() {
        let (_dir, ckpt, output) = folder(&[("config.json", r#"{"a": 1}"#), ("tok.json", "as is"), ("old.json", "x")]);
        let qc = serde_json::json!({ "quant_method": "q" });
        let add = [("new.json".to_owned(), serde_json::json!([1]))];
        copy_others(&output, &ckpt, Some(&qc), &add, &["old.json"]).unwrap();
        let config: serde_json::Value = serde_json::from_str(&read(&output, "config.json")).unwrap();
        assert_eq!(config, serde_json::json!({ "a": 1, "quantization_config": { "quant_method": "q" } }));
        assert_eq!(read(&output, "tok.json"), "as is");
        assert_eq!(read(&output, "new.json"), "[\n  1\n]\n");
        assert!(!output.path(Some("old.json")).exists());
    }

    #[test]
    fn dequantize_removes_the_quantization_config_and_copies_an_unparsable_config() {
        let (_dir, ckpt, output) = folder(&[("config.json", r#"{"a": 1, "quantization_config": {}}"#)]);
        copy_others(&output, &ckpt, None, &[], &[]).unwrap();
        assert_eq!(read(&output, "config.json"), "{\n  \"a\": 1\n}\n");

        let (_dir, ckpt, output) = folder(&[("config.json", "not json")]);
        copy_others(&output, &ckpt, None, &[], &[]).unwrap();
        assert_eq!(read(&output, "config.json"), "not json");
    }

    #[test]
    fn a_config_json_that_cannot_take_the_config_is_a_checkpoint_error() {
        let qc = serde_json::json!({});
        for text in ["not json", "[1]"] {
            let (_dir, ckpt, output) = folder(&[("config.json", text)]);
            let e = copy_others(&output, &ckpt, Some(&qc), &[], &[]).unwrap_err();
            assert!(matches!(e, CheckpointError::Checkpoint { .. }), "{text}: {e:?}");
        }
    }
}
