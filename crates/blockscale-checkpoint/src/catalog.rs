//! Every tensor of a checkpoint by name, across its shards (a quantized weight's scale
//! tensors may sit in another shard than its data).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::CheckpointError;
use crate::{Shard, TensorEntry};

/// Where each tensor of a checkpoint sits, by name: its shard and its place in that
/// shard's tensor list; and which shard's `__metadata__` holds each key (the last one
/// that has it). Built once per checkpoint (a [`crate::Reader`] keeps it, so a lookup
/// by name does not index every shard again: the native convention writes metadata
/// entries per weight, so both grow with the model).
#[derive(Clone, Debug, Default)]
pub(crate) struct TensorIndex {
    by_name: HashMap<String, (usize, usize)>,
    metadata: HashMap<String, usize>,
}

impl TensorIndex {
    /// Indexes `shards`.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] for a name present in two shards.
    pub(crate) fn new(shards: &[Shard]) -> Result<Self, CheckpointError> {
        let mut by_name = HashMap::with_capacity(shards.iter().map(|s| s.tensors().len()).sum());
        let mut metadata = HashMap::new();
        for (i, s) in shards.iter().enumerate() {
            metadata.extend(s.metadata().keys().map(|k| (k.clone(), i)));
            for (j, t) in s.tensors().iter().enumerate() {
                if let Some((other, _)) = by_name.insert(t.name.clone(), (i, j)) {
                    return Err(CheckpointError::tensor(
                        s.path(),
                        &t.name,
                        format!("also present in {}", shards[other].path().display()),
                    ));
                }
            }
        }
        Ok(Self { by_name, metadata })
    }

    /// The shard and tensor entry of `name` in `shards` (the ones indexed).
    pub(crate) fn get<'s>(&self, shards: &'s [Shard], name: &str) -> Option<(usize, &'s TensorEntry)> {
        self.by_name.get(name).map(|&(i, j)| (i, &shards[i].tensors()[j]))
    }

    /// The `__metadata__` entry `key` in `shards` (the ones indexed).
    fn meta<'s>(&self, shards: &'s [Shard], key: &str) -> Option<&'s str> {
        self.metadata.get(key).and_then(|&i| shards[i].metadata().get(key)).map(String::as_str)
    }
}

/// Tensors by name across the shards of one checkpoint.
pub struct Catalog<'c> {
    shards: &'c [Shard],
    index: Cow<'c, TensorIndex>,
}

impl<'c> Catalog<'c> {
    /// Indexes `shards`.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] for a name present in two shards.
    pub fn new(shards: &'c [Shard]) -> Result<Self, CheckpointError> {
        Ok(Self { shards, index: Cow::Owned(TensorIndex::new(shards)?) })
    }

    /// A catalog of `shards` on their index, built before (no tensor is indexed again).
    pub(crate) fn with_index(shards: &'c [Shard], index: &'c TensorIndex) -> Self {
        Self { shards, index: Cow::Borrowed(index) }
    }

    /// The shards.
    pub fn shards(&self) -> &'c [Shard] {
        self.shards
    }

    /// The tensor `name`, with the index of its shard.
    pub fn get(&self, name: &str) -> Option<(usize, &'c TensorEntry)> {
        self.index.get(self.shards, name)
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
        self.index.meta(self.shards, key)
    }

    /// The file holding tensor `name` (for error messages), or the first shard.
    pub fn path_of(&self, name: &str) -> &'c std::path::Path {
        let i = self.get(name).map_or(0, |(i, _)| i);
        self.shards[i].path()
    }
}
