//! Writing a safetensors file whose tensors are produced one at a time: the header is
//! planned up front (every output shape is known before any data is computed), then
//! each tensor's bytes are written at their offset as soon as they exist, so nothing
//! larger than one tensor is ever held in memory.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::Dtype;

use crate::CheckpointError;
use crate::dtypes::tensor_bytes;

/// A tensor of the file being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// Name.
    pub name: String,
    /// Dtype.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
}

impl PlannedTensor {
    /// A planned tensor.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: Vec<usize>) -> Self {
        Self { name: name.into(), dtype, shape }
    }
}

/// One claimed tensor of a [`ShardWriter`], written from any thread.
#[derive(Debug)]
pub struct SlotWriter {
    path: PathBuf,
    file: File,
    offset: u64,
    len: usize,
}

impl SlotWriter {
    /// Writes the tensor's bytes (exactly the claimed length) at its offset.
    ///
    /// # Errors
    /// [`CheckpointError::Write`] for an I/O error.
    ///
    /// # Panics
    /// If `bytes` is not the claimed length (a bug of the caller).
    pub fn write(&self, bytes: &[u8]) -> Result<(), CheckpointError> {
        assert_eq!(bytes.len(), self.len, "a claimed slot is written with its claimed length");
        self.file
            .write_all_at(bytes, self.offset)
            .map_err(|source| CheckpointError::Write { path: self.path.clone(), source })
    }
}

/// One tensor's bytes in the file being written, memory mapped
/// ([`ShardWriter::claim_mapped`]).
pub struct MappedSlot {
    map: crate::mapped::SlotMap,
}

impl MappedSlot {
    /// The tensor's bytes, to write in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.bytes_mut()
    }
}

impl std::fmt::Debug for MappedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedSlot").field("len", &self.map.len()).finish()
    }
}

/// A safetensors file being written tensor by tensor.
pub struct ShardWriter {
    path: PathBuf,
    file: File,
    data_start: u64,
    slots: HashMap<String, (u64, usize, bool)>,
    total: u64,
}

impl ShardWriter {
    /// Creates `path` (normally a temporary file inside the output) with the header for
    /// `tensors` and `metadata`. The data are laid out in order of decreasing dtype
    /// alignment (as the safetensors libraries do), so that every tensor starts on a
    /// multiple of its element size.
    ///
    /// # Errors
    /// [`CheckpointError::Write`] if the file cannot be written, [`CheckpointError::Tensor`] for a
    /// duplicate name or a size that overflows.
    pub fn create(
        path: &Path,
        tensors: &[PlannedTensor],
        metadata: &BTreeMap<String, String>,
    ) -> Result<Self, CheckpointError> {
        let mut order: Vec<&PlannedTensor> = tensors.iter().collect();
        // Stable: equal alignments keep the plan's order.
        order.sort_by_key(|t| std::cmp::Reverse(t.dtype.bitsize().max(8)));
        let mut header = serde_json::Map::new();
        if !metadata.is_empty() {
            header.insert("__metadata__".into(), serde_json::to_value(metadata).expect("strings serialize"));
        }
        let mut slots = HashMap::new();
        let mut offset = 0usize;
        for t in order {
            let n = tensor_bytes(t.dtype, &t.shape)
                .ok_or_else(|| CheckpointError::tensor(path, &t.name, "its size overflows"))?;
            if slots.insert(t.name.clone(), (offset as u64, n, false)).is_some() {
                return Err(CheckpointError::tensor(
                    path,
                    &t.name,
                    "planned twice (two inputs map to this output name)",
                ));
            }
            header.insert(
                t.name.clone(),
                serde_json::json!({ "dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + n] }),
            );
            offset += n;
        }
        let mut json = serde_json::to_vec(&header).expect("a JSON map serializes");
        // The data start on a multiple of 8 bytes (padding with spaces, as the format allows).
        while !(json.len() + 8).is_multiple_of(8) {
            json.push(b' ');
        }
        let write_err = |source| CheckpointError::Write { path: path.to_owned(), source };
        // Readable too: a slot may be memory mapped (`claim_mapped`), which a write-only
        // descriptor cannot do.
        let mut file =
            File::options().read(true).write(true).create(true).truncate(true).open(path).map_err(write_err)?;
        file.write_all(&(json.len() as u64).to_le_bytes()).map_err(write_err)?;
        file.write_all(&json).map_err(write_err)?;
        let data_start = 8 + json.len() as u64;
        let total = data_start + offset as u64;
        // The final length now (sparse): tensors are then written at their offsets in
        // whatever order they are produced.
        file.set_len(total).map_err(write_err)?;
        Ok(Self { path: path.to_owned(), file, data_start, slots, total })
    }

    /// The planned size in bytes of tensor `name`, if planned.
    pub fn planned_len(&self, name: &str) -> Option<usize> {
        self.slots.get(name).map(|s| s.1)
    }

    /// Writes the data of tensor `name` (exactly its planned size).
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] for a name not planned, written twice or with the wrong
    /// size (a bug of the caller), [`CheckpointError::Write`] for an I/O error.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), CheckpointError> {
        let path = &self.path;
        let slot =
            self.slots.get_mut(name).ok_or_else(|| CheckpointError::tensor(path, name, "not in the planned header"))?;
        if slot.2 {
            return Err(CheckpointError::tensor(path, name, "written twice"));
        }
        if bytes.len() != slot.1 {
            return Err(CheckpointError::tensor(
                path,
                name,
                format!("{} bytes, the header says {}", bytes.len(), slot.1),
            ));
        }
        self.file
            .write_all_at(bytes, self.data_start + slot.0)
            .map_err(|source| CheckpointError::Write { path: path.clone(), source })?;
        slot.2 = true;
        Ok(())
    }

    /// Claims the slot of tensor `name` for `len` bytes that another thread writes: the
    /// checks of [`ShardWriter::write`], and the slot is marked written. The returned
    /// [`SlotWriter`] must have written before [`ShardWriter::finish`] is called.
    ///
    /// # Errors
    /// As [`ShardWriter::write`]; [`CheckpointError::Write`] if the file handle cannot be
    /// duplicated.
    pub fn claim(&mut self, name: &str, len: usize) -> Result<SlotWriter, CheckpointError> {
        let path = &self.path;
        let slot =
            self.slots.get_mut(name).ok_or_else(|| CheckpointError::tensor(path, name, "not in the planned header"))?;
        if slot.2 {
            return Err(CheckpointError::tensor(path, name, "written twice"));
        }
        if len != slot.1 {
            return Err(CheckpointError::tensor(path, name, format!("{len} bytes, the header says {}", slot.1)));
        }
        let file = self.file.try_clone().map_err(|source| CheckpointError::Write { path: path.clone(), source })?;
        slot.2 = true;
        Ok(SlotWriter { path: path.clone(), file, offset: self.data_start + slot.0, len })
    }

    /// Claims the slot of tensor `name` (`len` bytes, as [`ShardWriter::claim`]) as
    /// memory mapped from the file, for a producer that writes its bytes in place: no
    /// buffer of its own, no copy, and page faults spread over the producer's threads
    /// rather than one writer's `pwrite` (which a memory file system serializes per
    /// file). The slot is marked written; its bytes are whatever the mapping holds when
    /// the [`MappedSlot`] is dropped (zeros if nothing is written).
    ///
    /// # Errors
    /// As [`ShardWriter::claim`]; [`CheckpointError::Write`] if the file cannot be
    /// mapped.
    pub fn claim_mapped(&mut self, name: &str, len: usize) -> Result<MappedSlot, CheckpointError> {
        let slot = self.claim(name, len)?;
        crate::mapped::map(&slot.file, slot.offset, len)
            .map(|map| MappedSlot { map })
            .map_err(|source| CheckpointError::Write { path: self.path.clone(), source })
    }

    /// Checks that every planned tensor was written and flushes the file to disk.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] naming a tensor never written, [`CheckpointError::Write`] if the
    /// data cannot be synced.
    pub fn finish(self) -> Result<u64, CheckpointError> {
        if let Some((name, _)) = self.slots.iter().find(|(_, s)| !s.2) {
            return Err(CheckpointError::tensor(&self.path, name, "planned but never written"));
        }
        self.file.sync_all().map_err(|source| CheckpointError::Write { path: self.path.clone(), source })?;
        Ok(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer of the U8 tensors `planned` (name, length) into a new file, the folder
    /// holding it (removed when dropped) and the file's path.
    fn create(planned: &[(&str, usize)]) -> (tempfile::TempDir, PathBuf, ShardWriter) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.safetensors");
        let planned: Vec<_> =
            planned.iter().map(|&(name, len)| PlannedTensor::new(name, Dtype::U8, vec![len])).collect();
        let w = ShardWriter::create(&path, &planned, &BTreeMap::new()).unwrap();
        (dir, path, w)
    }

    /// The bytes of tensor `name` in the written file at `path`.
    fn data(path: &Path, name: &str) -> Vec<u8> {
        let bytes = std::fs::read(path).unwrap();
        safetensors::SafeTensors::deserialize(&bytes).unwrap().tensor(name).unwrap().data().to_vec()
    }

    #[test]
    fn a_claimed_slot_is_written_from_another_thread_and_counts_as_written() {
        let (_dir, path, mut w) = create(&[("a", 3), ("b", 2)]);
        // Refused as write refuses: a wrong length, an unknown name; nothing is claimed.
        assert!(w.claim("a", 4).unwrap_err().to_string().contains("4 bytes, the header says 3"));
        assert!(w.claim("c", 1).unwrap_err().to_string().contains("not in the planned header"));
        let slot = w.claim("a", 3).unwrap();
        assert!(w.claim("a", 3).unwrap_err().to_string().contains("written twice"));
        assert!(w.write("a", &[0; 3]).unwrap_err().to_string().contains("written twice"));
        std::thread::spawn(move || slot.write(&[7, 8, 9]).unwrap()).join().unwrap();
        w.write("b", &[1, 2]).unwrap();
        w.finish().unwrap();
        assert_eq!(data(&path, "a"), [7, 8, 9]);
        assert_eq!(data(&path, "b"), [1, 2]);
    }

    #[test]
    fn a_mapped_slot_is_written_in_place_and_counts_as_written() {
        // A slot that starts past the first page and spans two, and a small one.
        let (_dir, path, mut w) = create(&[("a", 5000), ("b", 3)]);
        assert!(w.claim_mapped("a", 4999).unwrap_err().to_string().contains("4999 bytes, the header says 5000"));
        let mut b = w.claim_mapped("b", 3).unwrap();
        b.bytes_mut().copy_from_slice(&[7, 8, 9]);
        let mut a = w.claim_mapped("a", 5000).unwrap();
        for (i, x) in a.bytes_mut().iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        assert!(w.write("a", &[0; 5000]).unwrap_err().to_string().contains("written twice"));
        drop((a, b));
        w.finish().unwrap();
        assert_eq!(data(&path, "b"), [7, 8, 9]);
        let a: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
        assert_eq!(data(&path, "a"), a);
    }

    #[test]
    fn a_slot_neither_written_nor_claimed_is_reported() {
        let (_dir, _, w) = create(&[("a", 3)]);
        assert!(w.finish().unwrap_err().to_string().contains("planned but never written"));
    }
}
