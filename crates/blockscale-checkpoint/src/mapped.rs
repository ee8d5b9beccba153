//! A tensor's slot of a file being written, memory mapped so that its producer writes
//! in place (`ShardWriter::claim_mapped`). The crate's other `unsafe`, beside the input
//! maps of `shard.rs`.

use std::fs::File;

use memmap2::{MmapMut, MmapOptions};

/// `len` bytes of a file from `offset`, mapped shared and writable.
pub struct SlotMap(Option<MmapMut>);

/// Maps `len` bytes of `file` from `offset` (any offset: memmap2 maps from the page
/// holding it and hands out the range).
pub fn map(file: &File, offset: u64, len: usize) -> std::io::Result<SlotMap> {
    if len == 0 {
        // An empty mapping is an error to the system; an empty slot needs none.
        return Ok(SlotMap(None));
    }
    // SAFETY: the file is a temporary this process created for its output (the writer's
    // own, inside a folder or name no other program is told about) and sized before any
    // slot is claimed, so the range lies inside it and nothing else truncates or writes
    // it while the map lives; the map is shared, so the bytes reach the file; each slot
    // is claimed once, so no two maps of this process alias.
    let map = unsafe { MmapOptions::new().offset(offset).len(len).map_mut(file)? };
    Ok(SlotMap(Some(map)))
}

impl SlotMap {
    /// The mapped bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or(&mut [])
    }

    /// Their number.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }
}
