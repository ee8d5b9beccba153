//! # blockscale-checkpoint
//!
//! Quantized safetensors checkpoints as blockscale reads and writes them: NVIDIA
//! ModelOpt (NVFP4, FP8), compressed-tensors (NVFP4, MXFP4, INT4, FP8), OpenAI gpt-oss
//! (MXFP4), DeepSeek-V3 (FP8 128x128) and blockscale's native files, each weight read
//! into a [`QuantizedMatrix`](blockscale_formats::QuantizedMatrix) ready for `gemm` /
//! `gemv` on either backend, and written from one.
//!
//! The `blockscale` facade re-exports this crate as `blockscale::checkpoint` (feature
//! `checkpoint`, on by default); the `blockscale` command's `quantize`, `dequantize` and
//! `inspect` are built on it. It depends on the formats crate only: quantizing and
//! dequantizing library schemes is the backends' work.
//!
//! - Reading: [`Reader`] opens a file or a sharded folder, recognises every weight
//!   ([`CONVENTIONS`]: one file each under [`convention`]) and hands them out one at a
//!   time as [`Weight`]s, with bounded memory (memory maps, pages released as weights
//!   are taken); [`Reader::plain_tensors`] gives the rest.
//! - Conventions: [`Convention`] (name, detection, and for those blockscale writes,
//!   [`Writes`]: planned tensors, their bytes, the configs declaring them).
//! - The safetensors layer: [`Shard`] (one mapped file), [`Checkpoint`] (the shards,
//!   index and side files of a folder), [`Catalog`] (tensors by name across shards),
//!   [`ShardWriter`] (a file written tensor by tensor from a planned header),
//!   [`Output`] (a destination that appears complete or not at all), [`dtypes`];
//!   [`save`] writes a small quantized file in one call.
//!
//! ```no_run
//! use blockscale_checkpoint::{Reader, Weight};
//!
//! let reader = Reader::open("model.safetensors".as_ref())?;
//! let up = reader.weight("model.layers.0.mlp.up_proj.weight").expect("present")?;
//! if let Weight::Matrix { q, input_scale, .. } = up.weight {
//!     println!("{} ({}): {} x {}, activation scale {input_scale:?}", up.found.format, up.found.convention, q.rows(), q.k());
//! }
//! # Ok::<(), blockscale_checkpoint::CheckpointError>(())
//! ```

// `unsafe` only where a file is memory-mapped (shard.rs and mapped.rs, with their
// SAFETY lines).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod catalog;
mod configs;
pub mod convention;
mod declared;
mod decode;
pub mod dtypes;
mod error;
mod folder;
mod found;
pub mod interrupt;
#[allow(unsafe_code)]
mod mapped;
mod output;
mod reader;
pub mod recipe;
mod save;
#[allow(unsafe_code)]
mod shard;
mod side_files;
pub mod values;
mod writer;

/// The safetensors dtype every tensor entry carries.
pub use safetensors::Dtype;

pub use catalog::Catalog;
pub use configs::Configs;
pub use convention::{
    CONVENTIONS, Convention, Writes, by_name, check_coverage, check_declared, detect, encode, layer_prefix, recognise,
    writers,
};
pub use declared::Declared;
pub use decode::{Weight, matrix, transpose_experts, values as decode_values, weight};
pub use error::CheckpointError;
pub use folder::Checkpoint;
pub use found::{Decode, Found, GlobalSource};
pub use output::{Output, OutputKind, same_path_check};
pub use reader::{Loaded, PlainTensor, Reader};
pub use save::{PlainData, save};
pub use shard::{Shard, TensorEntry};
pub use side_files::{copy_others, write_index};
pub use writer::{MappedSlot, PlannedTensor, ShardWriter, SlotWriter};
