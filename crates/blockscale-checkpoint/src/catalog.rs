//! Every tensor of a checkpoint by name, across its shards (a quantized weight's scale
//! tensors may sit in another shard than its data).

use std::collections::HashMap;

use crate::CheckpointError;
use crate::{Shard, TensorEntry};

/// Tensors by name across the shards of one checkpoint.
pub struct Catalog<'c> {
    shards: &'c [Shard],
    by_name: HashMap<&'c str, (usize, &'c TensorEntry)>,
    metadata: HashMap<&'c str, &'c str>,
}

impl<'c> Catalog<'c> {
    /// Indexes `shards`.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] for a name present in two shards.
    pub fn new(shards: &'c [Shard]) -> Result<Self, CheckpointError> {
        let mut by_name = HashMap::new();
        let mut metadata = HashMap::new();
        for (i, s) in shards.iter().enumerate() {
            for t in s.tensors() {
                if let Some((j, _)) = by_name.insert(t.name.as_str(), (i, t)) {
                    return Err(CheckpointError::tensor(
                        s.path(),
                        &t.name,
                        format!("also present in {}", shards[j].path().display()),
                    ));
                }
            }
            for (k, v) in s.metadata() {
                metadata.insert(k.as_str(), v.as_str());
            }
        }
        Ok(Self { shards, by_name, metadata })
    }

    /// The shards.
    pub fn shards(&self) -> &'c [Shard] {
        self.shards
    }

    /// The tensor `name`, with the index of its shard.
    pub fn get(&self, name: &str) -> Option<(usize, &'c TensorEntry)> {
        self.by_name.get(name).copied()
    }

    /// The bytes of tensor `name` (which must exist).
    pub fn bytes(&self, name: &str) -> Option<&'c [u8]> {
        self.get(name).map(|(i, t)| self.shards[i].bytes(t))
    }

    /// Releases the pages of tensor `name` (see [`Shard::release`]).
    pub fn release(&self, name: &str) {
        if let Some((i, t)) = self.get(name) {
            self.shards[i].release(t);
        }
    }

    /// A `__metadata__` entry of any shard.
    pub fn meta(&self, key: &str) -> Option<&'c str> {
        self.metadata.get(key).copied()
    }

    /// The file holding tensor `name` (for error messages), or the first shard.
    pub fn path_of(&self, name: &str) -> &'c std::path::Path {
        let i = self.get(name).map_or(0, |(i, _)| i);
        self.shards[i].path()
    }
}
