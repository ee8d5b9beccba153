//! What can be wrong with a golden file, as opposed to a numeric mismatch.

use std::path::PathBuf;

/// A golden file that cannot be used: unreadable, not safetensors, truncated, with a
/// missing or mistyped tensor, or metadata from another version. Numeric mismatches are
/// not errors: they are reported per case by [`crate::verify`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoldenError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a safetensors file, or cut short (header or data).
    #[error(
        "{path}: not a readable safetensors file ({reason}); a truncated or corrupted golden file? regenerate with `cargo xtask golden`"
    )]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A tensor the case needs is absent.
    #[error("{path}: tensor {tensor:?} is missing")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
    },
    /// A tensor with the wrong dtype.
    #[error("{path}: tensor {tensor:?} is {actual}, expected {expected}")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the case needs.
        expected: String,
        /// What the file has.
        actual: String,
    },
    /// A tensor with the wrong shape.
    #[error("{path}: tensor {tensor:?} has shape {actual:?}, expected {expected:?}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the case needs.
        expected: Vec<usize>,
        /// What the file has.
        actual: Vec<usize>,
    },
    /// A metadata entry that is missing or does not parse.
    #[error("{path}: metadata {key:?}: {problem}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// The file was written by another version of the golden format or of blockscale.
    #[error(
        "{path}: written for {what} {found}, this is {ours}; regenerate with `cargo xtask golden` (a visible commit)"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// `golden format` or `blockscale`.
        what: &'static str,
        /// The file's version.
        found: String,
        /// This build's version.
        ours: String,
    },
}
