//! The reader for engines: open a checkpoint once, then take its linear weights one at a
//! time, shard by shard, as [`Weight`]s, and its other tensors as bytes. Shards are
//! memory-mapped: a weight's bytes are read when it is taken and their pages released
//! afterwards, so memory stays near one weight, whatever the model's size.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use safetensors::Dtype;

use crate::catalog::TensorIndex;
use crate::convention::recognise;
use crate::decode::weight;
use crate::values::{FloatValues, from_le_bytes};
use crate::{Catalog, Checkpoint, CheckpointError, Found, Shard, TensorEntry, Weight};

/// An open checkpoint: a safetensors file, or a folder of shards with or without an
/// index, its weights recognised ([`crate::CONVENTIONS`]) and checked against what its
/// configs declare.
///
/// ```no_run
/// use blockscale_checkpoint::{Reader, Weight};
///
/// let reader = Reader::open("model/".as_ref())?;
/// for loaded in reader.weights() {
///     let loaded = loaded?;
///     match &loaded.weight {
///         Weight::Matrix { q, .. } => println!("{}: {} {}x{}", loaded.found.output, q.scheme(), q.rows(), q.k()),
///         Weight::Values(v) => println!("{}: {} values ({})", loaded.found.output, v.len(), loaded.found.format),
///     }
/// }
/// # Ok::<(), blockscale_checkpoint::CheckpointError>(())
/// ```
pub struct Reader {
    files: Checkpoint,
    shards: Vec<Shard>,
    /// Every tensor by name, built once: lookups by name do not index the shards again.
    index: TensorIndex,
    found: Vec<Found>,
    consumed: HashSet<String>,
    by_output: HashMap<String, usize>,
}

/// A weight taken from a [`Reader`]: what was found (names, convention, format, shape)
/// and its data.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The weight as detection found it: its output name (`model.layers.0.mlp.up_proj.weight`),
    /// its convention, format, logical shape and the tensors it is made of.
    pub found: Found,
    /// Its data.
    pub weight: Weight,
}

/// A tensor that is not part of a quantized weight (norms, embeddings, biases, weights
/// left in full precision), borrowed from its shard's memory map.
#[derive(Clone, Copy, Debug)]
pub struct PlainTensor<'r> {
    /// Its name.
    pub name: &'r str,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: &'r [usize],
    /// Its little-endian bytes.
    pub bytes: &'r [u8],
}

impl<'r> PlainTensor<'r> {
    /// Tensor `t` of shard `s`.
    fn of(s: &'r Shard, t: &'r TensorEntry) -> Self {
        Self { name: &t.name, dtype: t.dtype, shape: &t.shape, bytes: s.bytes(t) }
    }

    /// Its values if it is a BF16, F16 or F32 tensor (borrowed when aligned).
    pub fn values(&self) -> Option<FloatValues<'_>> {
        from_le_bytes(self.dtype, self.bytes)
    }
}

impl Reader {
    /// Opens the checkpoint at `path` (a `.safetensors` file or a folder), maps its
    /// shards, recognises every quantized weight and refuses what it cannot read.
    ///
    /// # Errors
    /// [`CheckpointError::Read`], [`CheckpointError::NotSafetensors`] and
    /// [`CheckpointError::Checkpoint`] for files that cannot be read;
    /// [`CheckpointError::Tensor`] naming a weight whose parts do not fit together;
    /// [`CheckpointError::Unsupported`] for a declared quantization blockscale does not
    /// read, or low-precision tensors no convention explains.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let files = Checkpoint::open(path)?;
        let shards = files.open_shards()?;
        let index = TensorIndex::new(&shards)?;
        let (found, consumed) = recognise(&Catalog::with_index(&shards, &index), &files.others)?;
        let by_output = found.iter().enumerate().map(|(i, f)| (f.output.clone(), i)).collect();
        Ok(Self { files, shards, index, found, consumed, by_output })
    }

    /// The files: shards, index, side files.
    pub fn files(&self) -> &Checkpoint {
        &self.files
    }

    /// Every quantized weight found, in file order.
    pub fn found(&self) -> &[Found] {
        &self.found
    }

    /// The weights in file order, shard by shard, each read when the iterator reaches
    /// it (its pages released afterwards).
    pub fn weights(&self) -> impl Iterator<Item = Result<Loaded, CheckpointError>> + '_ {
        let catalog = self.catalog();
        self.found.iter().map(move |f| Self::take(&catalog, f))
    }

    /// The weight whose output name is `name` (`model.layers.0.mlp.up_proj.weight`),
    /// `None` if there is none.
    ///
    /// # Errors
    /// As [`crate::weight`].
    pub fn weight(&self, name: &str) -> Option<Result<Loaded, CheckpointError>> {
        let f = &self.found[*self.by_output.get(name)?];
        Some(Self::take(&self.catalog(), f))
    }

    /// The catalog of the shards, on the index built when the reader opened.
    fn catalog(&self) -> Catalog<'_> {
        Catalog::with_index(&self.shards, &self.index)
    }

    fn take(catalog: &Catalog<'_>, f: &Found) -> Result<Loaded, CheckpointError> {
        let weight = weight(catalog, f);
        for p in &f.parts {
            catalog.release(p);
        }
        Ok(Loaded { found: f.clone(), weight: weight? })
    }

    /// Every tensor no quantized weight consumes, in file order.
    pub fn plain_tensors(&self) -> impl Iterator<Item = PlainTensor<'_>> {
        self.shards.iter().flat_map(move |s| {
            s.tensors().iter().filter(|t| !self.consumed.contains(&t.name)).map(move |t| PlainTensor::of(s, t))
        })
    }

    /// The plain tensor `name`, if the checkpoint holds one (found by the reader's
    /// index, not by a walk over every tensor).
    pub fn plain_tensor(&self, name: &str) -> Option<PlainTensor<'_>> {
        if self.consumed.contains(name) {
            return None;
        }
        let (i, t) = self.index.get(&self.shards, name)?;
        Some(PlainTensor::of(&self.shards[i], t))
    }
}
