//! Writing a safetensors file whose tensors are produced one at a time: the header is
//! planned up front (every output shape is known before any data is computed), then
//! each tensor's bytes are written at their offset as soon as they exist, so nothing
//! larger than one tensor is ever held in memory.
//!
//! Where the file system can reserve the file's blocks up front (`fallocate`: ext4, XFS,
//! btrfs, tmpfs), the file is also mapped, and a tensor can be computed straight into
//! its place ([`ShardWriter::pair_mut`]) instead of being copied there by `write`: the
//! reservation makes "disk full" an error of [`ShardWriter::create`], not a SIGBUS
//! while a mapped page is first written. Elsewhere every tensor goes through `write`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use safetensors::Dtype;

use crate::checkpoint::tensor_bytes;
use crate::error::CliError;

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

/// The places of two tensors in a mapped file ([`ShardWriter::pair_mut`]).
pub type Pair<'a> = (&'a mut [u8], &'a mut [u8]);

/// A safetensors file being written tensor by tensor.
pub struct ShardWriter {
    path: PathBuf,
    file: File,
    data_start: u64,
    slots: HashMap<String, (u64, usize, bool)>,
    total: u64,
    /// The whole file, mapped when its blocks could be reserved.
    map: Option<MmapMut>,
}

impl ShardWriter {
    /// Creates `path` (normally a temporary file inside the output) with the header for
    /// `tensors` and `metadata`. The data are laid out in order of decreasing dtype
    /// alignment (as the safetensors libraries do), so that every tensor starts on a
    /// multiple of its element size.
    ///
    /// # Errors
    /// [`CliError::Write`] if the file cannot be written, [`CliError::Tensor`] for a
    /// duplicate name or a size that overflows.
    pub fn create(
        path: &Path,
        tensors: &[PlannedTensor],
        metadata: &BTreeMap<String, String>,
    ) -> Result<Self, CliError> {
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
            let n =
                tensor_bytes(t.dtype, &t.shape).ok_or_else(|| CliError::tensor(path, &t.name, "its size overflows"))?;
            if slots.insert(t.name.clone(), (offset as u64, n, false)).is_some() {
                return Err(CliError::tensor(path, &t.name, "planned twice (two inputs map to this output name)"));
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
        let write_err = |source| CliError::Write { path: path.to_owned(), source };
        // Readable too: a shared writable map needs a read-write descriptor.
        let mut file =
            File::options().read(true).write(true).create(true).truncate(true).open(path).map_err(write_err)?;
        file.write_all(&(json.len() as u64).to_le_bytes()).map_err(write_err)?;
        file.write_all(&json).map_err(write_err)?;
        let data_start = 8 + json.len() as u64;
        let total = data_start + offset as u64;
        // The final length now (sparse): tensors are then written at their offsets in
        // whatever order they are produced.
        file.set_len(total).map_err(write_err)?;
        let map = if offset == 0 { None } else { reserve_and_map(&file, total).map_err(write_err)? };
        Ok(Self { path: path.to_owned(), file, data_start, slots, total, map })
    }

    /// The places of tensors `a` and `b` in the mapped file, to be filled in place; both
    /// count as written from then on (a caller that cannot fill them must abandon the
    /// file). `None` when the file is not mapped: write them with [`ShardWriter::write`].
    ///
    /// # Errors
    /// [`CliError::Tensor`] for a name not planned or already written, or `a == b` (bugs
    /// of the caller).
    pub fn pair_mut(&mut self, a: &str, b: &str) -> Result<Option<Pair<'_>>, CliError> {
        let Some(map) = &mut self.map else { return Ok(None) };
        let path = &self.path;
        if a == b {
            return Err(CliError::tensor(path, a, "asked for twice"));
        }
        let place = |name: &str| match self.slots.get(name) {
            None => Err(CliError::tensor(path, name, "not in the planned header")),
            Some(slot) if slot.2 => Err(CliError::tensor(path, name, "written twice")),
            Some(slot) => Ok((slot.0 as usize, slot.1)),
        };
        let ((oa, na), (ob, nb)) = (place(a)?, place(b)?);
        // Both found: only now do they count as written.
        for name in [a, b] {
            if let Some(slot) = self.slots.get_mut(name) {
                slot.2 = true;
            }
        }
        let data = &mut map[self.data_start as usize..];
        // Planned slots never overlap: split at the later one's start.
        Ok(Some(if oa < ob {
            let (x, y) = data.split_at_mut(ob);
            (&mut x[oa..oa + na], &mut y[..nb])
        } else {
            let (y, x) = data.split_at_mut(oa);
            (&mut x[..na], &mut y[ob..ob + nb])
        }))
    }

    /// Writes the data of tensor `name` (exactly its planned size).
    ///
    /// # Errors
    /// [`CliError::Tensor`] for a name not planned, written twice or with the wrong
    /// size (a bug of the caller), [`CliError::Write`] for an I/O error.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), CliError> {
        let path = &self.path;
        let slot = self.slots.get_mut(name).ok_or_else(|| CliError::tensor(path, name, "not in the planned header"))?;
        if slot.2 {
            return Err(CliError::tensor(path, name, "written twice"));
        }
        if bytes.len() != slot.1 {
            return Err(CliError::tensor(path, name, format!("{} bytes, the header says {}", bytes.len(), slot.1)));
        }
        self.file
            .write_all_at(bytes, self.data_start + slot.0)
            .map_err(|source| CliError::Write { path: path.clone(), source })?;
        slot.2 = true;
        Ok(())
    }

    /// Drops this process's mappings of the pages of tensor `name` (filled in place):
    /// they stay in the page cache, dirty, to be written back, but leave the resident
    /// set, which then holds about one weight's output rather than the whole shard's.
    pub fn release(&self, name: &str) {
        let (Some(map), Some(&(offset, len, _))) = (&self.map, self.slots.get(name)) else { return };
        let page = 4096;
        let (start, end) =
            (self.data_start as usize + offset as usize, self.data_start as usize + offset as usize + len);
        // Whole pages inside the tensor only: a neighbour's first or last page stays.
        let (start, end) = (start.div_ceil(page) * page, end / page * page);
        if end > start {
            // SAFETY: MADV_DONTNEED on a shared file mapping only drops page-table
            // entries: dirty pages are marked dirty in the page cache first, and the next
            // access maps the same bytes again. No slice of the map outlives `pair_mut`'s
            // borrow, so nothing refers into the range during the call.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }

    /// Checks that every planned tensor was written and flushes the file to disk.
    ///
    /// # Errors
    /// [`CliError::Tensor`] naming a tensor never written, [`CliError::Write`] if the
    /// data cannot be synced.
    pub fn finish(self) -> Result<u64, CliError> {
        if let Some((name, _)) = self.slots.iter().find(|(_, s)| !s.2) {
            return Err(CliError::tensor(&self.path, name, "planned but never written"));
        }
        let write_err = |source| CliError::Write { path: self.path.clone(), source };
        if let Some(map) = &self.map {
            map.flush().map_err(write_err)?;
        }
        self.file.sync_all().map_err(write_err)?;
        Ok(self.total)
    }
}

/// Reserves the blocks of `file` (`len` bytes) and maps it; `None` where the file
/// system cannot reserve them (the data are then written with `pwrite`).
fn reserve_and_map(file: &File, len: u64) -> std::io::Result<Option<MmapMut>> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // SAFETY: the file was just created by this process (a private temporary next to the
    // destination, not yet renamed into place), so nothing else maps or truncates it
    // while the map lives; its blocks are reserved, so writing a mapped page cannot fail
    // for lack of space. The map is only accessed through `&mut self` (no aliasing).
    Ok(Some(unsafe { MmapMut::map_mut(file) }?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Shard;

    #[test]
    fn tensors_filled_in_place_land_where_the_header_says() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.safetensors");
        let planned = [
            PlannedTensor::new("a", Dtype::U8, vec![3, 4]),
            PlannedTensor::new("s", Dtype::F32, vec![2]),
            PlannedTensor::new("b", Dtype::U8, vec![5]),
        ];
        let mut w = ShardWriter::create(&p, &planned, &BTreeMap::new()).unwrap();
        // Asked for in the opposite order of their offsets.
        let (b, a) = w.pair_mut("b", "a").unwrap().expect("the temp dir's file system reserves blocks");
        b.copy_from_slice(&[9; 5]);
        a.copy_from_slice(&(1..=12).collect::<Vec<u8>>());
        for (x, y, why) in
            [("a", "s", "written twice"), ("s", "s", "asked for twice"), ("s", "zz", "not in the planned")]
        {
            let e = w.pair_mut(x, y).err().unwrap();
            assert!(matches!(&e, CliError::Tensor { .. }) && e.to_string().contains(why), "{e}");
        }
        w.write("s", &[0, 0, 128, 63, 0, 0, 0, 64]).unwrap();
        assert_eq!(w.finish().unwrap(), std::fs::metadata(&p).unwrap().len());

        let read = Shard::open(&p).unwrap();
        let bytes = |name: &str| read.bytes(read.tensors().iter().find(|t| t.name == name).unwrap()).to_vec();
        assert_eq!(bytes("a"), (1..=12).collect::<Vec<u8>>());
        assert_eq!(bytes("b"), [9; 5]);
        assert_eq!(bytes("s"), [0, 0, 128, 63, 0, 0, 0, 64]);
    }
}
