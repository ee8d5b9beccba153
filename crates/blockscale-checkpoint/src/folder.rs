//! What a path names: one safetensors file, or a folder holding a sharded checkpoint
//! (`*.safetensors.index.json`) or plain safetensors files, plus the other files of a
//! model folder (config, tokenizer) that commands copy along.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::CheckpointError;
use crate::Shard;

/// A checkpoint: its shards in order and, for a folder, the index and other files.
#[derive(Debug)]
pub struct Checkpoint {
    /// Whether `path` is a folder.
    pub is_dir: bool,
    /// The safetensors files, in the order the index lists them (or by name).
    pub shards: Vec<PathBuf>,
    /// The index file, if any.
    pub index: Option<PathBuf>,
    /// The index's `weight_map`: tensor name to shard file name (empty without an index).
    pub weight_map: BTreeMap<String, String>,
    /// Other regular files of the folder (config.json, tokenizer files...), not
    /// safetensors files.
    pub others: Vec<PathBuf>,
}

impl Checkpoint {
    /// Finds the shards of `path`.
    ///
    /// # Errors
    /// [`CheckpointError::Read`] for a path that cannot be read, [`CheckpointError::Checkpoint`] for a
    /// folder without safetensors files, an unreadable index or one naming missing
    /// shards.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let meta = std::fs::metadata(path).map_err(|source| CheckpointError::Read { path: path.to_owned(), source })?;
        if !meta.is_dir() {
            return Ok(Self {
                is_dir: false,
                shards: vec![path.to_owned()],
                index: None,
                weight_map: BTreeMap::new(),
                others: Vec::new(),
            });
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| CheckpointError::Read { path: path.to_owned(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let index = files.iter().find(|p| name(p).ends_with(".safetensors.index.json")).cloned();
        let mut weight_map = BTreeMap::new();
        let shards = match &index {
            Some(ix) => {
                let text =
                    std::fs::read_to_string(ix).map_err(|source| CheckpointError::Read { path: ix.clone(), source })?;
                let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| CheckpointError::Checkpoint {
                    path: ix.clone(),
                    reason: format!("not valid JSON: {e}"),
                })?;
                let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
                    CheckpointError::Checkpoint { path: ix.clone(), reason: "no \"weight_map\" object".into() }
                })?;
                let mut listed = BTreeSet::new();
                for (tensor, file) in map {
                    let file = file.as_str().ok_or_else(|| CheckpointError::Checkpoint {
                        path: ix.clone(),
                        reason: format!("weight_map entry {tensor:?} is not a file name"),
                    })?;
                    if file.contains('/') || file.contains('\\') || file == ".." {
                        return Err(CheckpointError::Checkpoint {
                            path: ix.clone(),
                            reason: format!("weight_map names {file:?}, outside the folder"),
                        });
                    }
                    listed.insert(file.to_owned());
                    weight_map.insert(tensor.clone(), file.to_owned());
                }
                let mut shards = Vec::new();
                for f in listed {
                    let p = path.join(&f);
                    if !p.is_file() {
                        return Err(CheckpointError::Checkpoint {
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
            return Err(CheckpointError::Checkpoint {
                path: path.to_owned(),
                reason: "no .safetensors files in this folder".into(),
            });
        }
        // Safetensors files outside the index (a consolidated copy, say) are neither read
        // nor copied.
        let others =
            files.into_iter().filter(|p| !name(p).ends_with(".safetensors") && Some(p) != index.as_ref()).collect();
        Ok(Self { is_dir: true, shards, index, weight_map, others })
    }

    /// Opens every shard ([`Shard::open`]) and, with an index, checks that the shards
    /// hold exactly the tensors it lists, each in the shard it names: a checkpoint whose
    /// index disagrees with its shards is damaged (an interrupted copy, a hand-edited
    /// index), and reading it anyway would drop or misplace tensors.
    ///
    /// # Errors
    /// As [`Shard::open`]; [`CheckpointError::Tensor`] naming a tensor the index lists but no
    /// shard holds, one held by another shard than the index names, or one a shard
    /// holds that the index does not list.
    pub fn open_shards(&self) -> Result<Vec<Shard>, CheckpointError> {
        let shards = self.shards.iter().map(|p| Shard::open(p)).collect::<Result<Vec<_>, _>>()?;
        let Some(index) = &self.index else { return Ok(shards) };
        let index_name = Self::file_name(index);
        let mut held = BTreeSet::new();
        for shard in &shards {
            let file = Self::file_name(shard.path());
            for t in shard.tensors() {
                match self.weight_map.get(&t.name) {
                    None => {
                        return Err(CheckpointError::tensor(
                            shard.path(),
                            &t.name,
                            format!("not listed in the index {index_name} (the index and the shards disagree)"),
                        ));
                    }
                    Some(listed) if *listed != file => {
                        return Err(CheckpointError::tensor(
                            shard.path(),
                            &t.name,
                            format!("the index {index_name} places it in {listed}, not in this shard"),
                        ));
                    }
                    Some(_) => {
                        held.insert(t.name.as_str());
                    }
                }
            }
        }
        if let Some((tensor, file)) = self.weight_map.iter().find(|(t, _)| !held.contains(t.as_str())) {
            return Err(CheckpointError::tensor(
                index,
                tensor,
                format!("listed in the index in shard {file}, which does not hold it (truncated or wrong shard?)"),
            ));
        }
        Ok(shards)
    }

    /// File name of a shard (or other file) of this checkpoint.
    pub fn file_name(p: &Path) -> String {
        p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}
