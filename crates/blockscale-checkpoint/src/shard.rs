//! One safetensors file, memory-mapped: its header parsed and checked, its tensors
//! readable as byte slices, their pages released once processed.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::CheckpointError;

/// A tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorEntry {
    /// Name.
    pub name: String,
    /// Dtype.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Byte range in the file.
    pub range: std::ops::Range<usize>,
}

impl TensorEntry {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of data.
    pub fn nbytes(&self) -> usize {
        self.range.len()
    }
}

/// A memory-mapped safetensors file.
pub struct Shard {
    path: PathBuf,
    data: Data,
    tensors: Vec<TensorEntry>,
    metadata: HashMap<String, String>,
}

/// The bytes of a shard: a file's memory map, or bytes already in memory (an empty file,
/// or [`Shard::from_bytes`]).
enum Data {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Map(m) => m,
            Self::Owned(v) => v,
        }
    }
}

impl Shard {
    /// Maps `path` and validates its header: a readable header whose tensors exactly
    /// cover the data, as the safetensors format requires.
    ///
    /// # Errors
    /// [`CheckpointError::Read`] if the file cannot be opened or mapped,
    /// [`CheckpointError::NotSafetensors`] for a bad or truncated header or data section.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let read_err = |source| CheckpointError::Read { path: path.to_owned(), source };
        let file = File::open(path).map_err(read_err)?;
        let len = file.metadata().map_err(read_err)?.len();
        let data = if len == 0 {
            Data::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this process; safetensors files
            // are not modified while a command reads them (a concurrent writer could
            // change the bytes under us, as with any reader, but not break memory safety
            // of our own code beyond reading different values: we only ever copy bytes
            // out of it).
            Data::Map(unsafe { Mmap::map(&file) }.map_err(read_err)?)
        };
        Self::parse(path, data)
    }

    /// A shard whose bytes are already in memory, checked as [`Shard::open`] checks a
    /// file; `path` names it in errors. For the fuzz targets and tests, which build
    /// checkpoints in memory.
    ///
    /// # Errors
    /// [`CheckpointError::NotSafetensors`] for a bad or truncated header or data section.
    #[doc(hidden)]
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self, CheckpointError> {
        Self::parse(path, Data::Owned(bytes))
    }

    fn parse(path: &Path, data: Data) -> Result<Self, CheckpointError> {
        let bytes = data.bytes();
        let (n, meta) = SafeTensors::read_metadata(bytes).map_err(|e| CheckpointError::NotSafetensors {
            path: path.to_owned(),
            reason: describe(&e, bytes.len()),
        })?;
        let base = 8 + n;
        let infos = meta.tensors();
        let mut tensors: Vec<TensorEntry> = meta
            .offset_keys()
            .into_iter()
            .map(|name| {
                let info = infos[&name];
                TensorEntry {
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    range: base + info.data_offsets.0..base + info.data_offsets.1,
                    name,
                }
            })
            .collect();
        tensors.sort_by_key(|t| t.range.start);
        let metadata = meta.metadata().clone().unwrap_or_default();
        Ok(Self { path: path.to_owned(), data, tensors, metadata })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    /// The header's `__metadata__` (empty if absent).
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.data.bytes().len()
    }

    /// The bytes of a tensor of this file.
    pub fn bytes(&self, t: &TensorEntry) -> &[u8] {
        // Ranges come from the validated header of this very file.
        &self.data.bytes()[t.range.clone()]
    }

    /// Asks the kernel to start reading the pages of `t` into the page cache (readahead,
    /// `MADV_WILLNEED`) without waiting for them: called for the next tensor while this
    /// one is processed, so reading from disk overlaps quantizing. Only advice: an
    /// unsupported system ignores it.
    pub fn will_need(&self, t: &TensorEntry) {
        let Data::Map(map) = &self.data else { return };
        // From the page holding its first byte (madvise wants an aligned start).
        let start = t.range.start / page_size() * page_size();
        let _ = map.advise_range(memmap2::Advice::WillNeed, start, t.range.end - start);
    }

    /// Drops the pages of `t` from this process's memory (they stay in the page cache
    /// and come back on the next access), so that reading a model tensor by tensor keeps
    /// the resident set near one tensor rather than growing to the file.
    pub fn release(&self, t: &TensorEntry) {
        let Data::Map(map) = &self.data else { return };
        let page = page_size();
        // Whole pages inside the tensor only: a neighbour's first or last page stays.
        let start = t.range.start.div_ceil(page) * page;
        let end = t.range.end / page * page;
        if end > start {
            // SAFETY: MADV_DONTNEED on a read-only file mapping only drops our page-table
            // entries: the next access reads the same bytes back from the file. No
            // reference into the range is held by this module across the call; slices
            // handed out earlier stay valid (they re-fault).
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// The page size `release` rounds to. On a system with larger pages the kernel refuses
/// the unaligned advice (ignored): pages are then simply not released early.
fn page_size() -> usize {
    4096
}

/// A clear reason for a header the safetensors parser rejects.
fn describe(e: &SafeTensorError, len: usize) -> String {
    match e {
        SafeTensorError::HeaderTooSmall => format!("{len} bytes, too short for a header (truncated?)"),
        SafeTensorError::InvalidHeaderLength => {
            format!("the header length points past the end of the file ({len} bytes; truncated?)")
        }
        SafeTensorError::MetadataIncompleteBuffer => {
            format!("the data section does not match the header's tensors ({len} bytes in all; truncated?)")
        }
        SafeTensorError::HeaderTooLarge => "the header length is implausibly large (not a safetensors file?)".into(),
        other => other.to_string(),
    }
}
