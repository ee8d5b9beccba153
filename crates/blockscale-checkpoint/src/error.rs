//! Everything that can go wrong reading or writing a checkpoint, with the file and
//! tensor it concerns.

use std::path::PathBuf;

/// A checkpoint that cannot be read or written as asked.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a safetensors file, or a truncated or corrupt one.
    #[error("{path}: not a readable safetensors file: {reason}")]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A folder without safetensors files, an index naming missing shards, a config
    /// that cannot be read or updated.
    #[error("{path}: {reason}")]
    Checkpoint {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor that cannot be read or written as asked (a companion tensor with the
    /// wrong dtype or shape, a damaged scale, a size that overflows).
    #[error("{path}: tensor {tensor:?}: {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The output exists and replacing it was not asked for.
    #[error("{path} exists; pass --force to replace it")]
    OutputExists {
        /// The output.
        path: PathBuf,
    },
    /// Writing failed (the partial output has been removed).
    #[error("{path}: writing failed{hint}: {source}", hint = if is_disk_full(source) { " (disk full)" } else { "" })]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A format, convention or scheme combination that is not supported (a scheme a
    /// convention cannot store, a compressed-tensors config blockscale does not read).
    #[error("{0}")]
    Unsupported(String),
    /// A request that does not make sense for this checkpoint (an output of the wrong
    /// kind, the input as its own output, a shape no scheme can hold).
    #[error("{0}")]
    Invalid(String),
}

fn is_disk_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

impl CheckpointError {
    /// A [`CheckpointError::Tensor`].
    pub fn tensor(path: impl Into<PathBuf>, tensor: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Tensor { path: path.into(), tensor: tensor.into(), reason: reason.into() }
    }

    /// The file the error concerns, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Read { path, .. }
            | Self::NotSafetensors { path, .. }
            | Self::Checkpoint { path, .. }
            | Self::Tensor { path, .. }
            | Self::OutputExists { path }
            | Self::Write { path, .. } => Some(path),
            Self::Unsupported(_) | Self::Invalid(_) => None,
        }
    }

    /// The tensor the error concerns, if any.
    pub fn tensor_name(&self) -> Option<&str> {
        match self {
            Self::Tensor { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}
