//! Safetensors checkpoints on disk: finding the shards of a file or folder, reading
//! them through memory maps tensor by tensor, and writing new ones that appear
//! complete or not at all, with a folder's index and side files.

pub mod interrupt;
mod output;
mod shard;
mod side_files;
mod source;
mod writer;

pub use output::{Output, OutputKind, same_path_check};
pub use shard::{Shard, TensorEntry};
pub use side_files::{copy_others, write_index};
pub use source::Checkpoint;
pub use writer::{PlannedTensor, ShardWriter, SlotWriter};

/// Bytes of a tensor of `dtype` and `shape` (sub-byte dtypes rounded up to whole bytes),
/// `None` on overflow.
pub fn tensor_bytes(dtype: safetensors::Dtype, shape: &[usize]) -> Option<usize> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    n.checked_mul(dtype.bitsize()).map(|bits| bits.div_ceil(8))
}
