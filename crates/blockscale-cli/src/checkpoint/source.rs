//! What a path names: one safetensors file, or a folder holding a sharded checkpoint
//! (`*.safetensors.index.json`) or plain safetensors files, plus the other files of a
//! model folder (config, tokenizer) that commands copy along.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// A checkpoint: its shards in order and, for a folder, the index and other files.
#[derive(Debug)]
pub struct Checkpoint {
    /// Whether `path` is a folder.
    pub is_dir: bool,
    /// The safetensors files, in the order the index lists them (or by name).
    pub shards: Vec<PathBuf>,
    /// The index file, if any.
    pub index: Option<PathBuf>,
    /// Other regular files of the folder (config.json, tokenizer files...), not
    /// safetensors files.
    pub others: Vec<PathBuf>,
}

impl Checkpoint {
    /// Finds the shards of `path`.
    ///
    /// # Errors
    /// [`CliError::Read`] for a path that cannot be read, [`CliError::Checkpoint`] for a
    /// folder without safetensors files, an unreadable index or one naming missing
    /// shards.
    pub fn open(path: &Path) -> Result<Self, CliError> {
        let meta = std::fs::metadata(path).map_err(|source| CliError::Read { path: path.to_owned(), source })?;
        if !meta.is_dir() {
            return Ok(Self { is_dir: false, shards: vec![path.to_owned()], index: None, others: Vec::new() });
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| CliError::Read { path: path.to_owned(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let index = files.iter().find(|p| name(p).ends_with(".safetensors.index.json")).cloned();
        let shards = match &index {
            Some(ix) => {
                let text = std::fs::read_to_string(ix).map_err(|source| CliError::Read { path: ix.clone(), source })?;
                let json: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| CliError::Checkpoint { path: ix.clone(), reason: format!("not valid JSON: {e}") })?;
                let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| CliError::Checkpoint {
                    path: ix.clone(),
                    reason: "no \"weight_map\" object".into(),
                })?;
                let mut listed = BTreeSet::new();
                for (tensor, file) in map {
                    let file = file.as_str().ok_or_else(|| CliError::Checkpoint {
                        path: ix.clone(),
                        reason: format!("weight_map entry {tensor:?} is not a file name"),
                    })?;
                    if file.contains('/') || file.contains('\\') || file == ".." {
                        return Err(CliError::Checkpoint {
                            path: ix.clone(),
                            reason: format!("weight_map names {file:?}, outside the folder"),
                        });
                    }
                    listed.insert(file.to_owned());
                }
                let mut shards = Vec::new();
                for f in listed {
                    let p = path.join(&f);
                    if !p.is_file() {
                        return Err(CliError::Checkpoint {
                            path: ix.clone(),
                            reason: format!("the index lists shard {f:?}, which is missing"),
                        });
                    }
                    shards.push(p);
                }
                shards
            }
            None => files.iter().filter(|p| name(p).ends_with(".safetensors")).cloned().collect(),
        };
        if shards.is_empty() {
            return Err(CliError::Checkpoint {
                path: path.to_owned(),
                reason: "no .safetensors files in this folder".into(),
            });
        }
        // Safetensors files outside the index (a consolidated copy, say) are neither read
        // nor copied.
        let others =
            files.into_iter().filter(|p| !name(p).ends_with(".safetensors") && Some(p) != index.as_ref()).collect();
        Ok(Self { is_dir: true, shards, index, others })
    }

    /// File name of a shard (or other file) of this checkpoint.
    pub fn file_name(p: &Path) -> String {
        p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}
