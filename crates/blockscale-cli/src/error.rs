//! Everything that can go wrong, with the file and tensor it concerns, and the exit
//! code each kind maps to (stable: scripts may rely on them, docs/CLI.md lists them).

use std::path::PathBuf;

/// Exit codes of the `blockscale` command.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// A bad command line (clap's own code).
    pub const USAGE: u8 = 2;
    /// The input cannot be used: unreadable, not safetensors, truncated, unsupported
    /// dtype or shape, inconsistent scale tensors, unknown convention.
    pub const INPUT: u8 = 3;
    /// NaN or Inf in a weight under `--non-finite error`.
    pub const NON_FINITE: u8 = 4;
    /// The output cannot be written: it exists (no `--force`), disk full, permissions.
    pub const OUTPUT: u8 = 5;
    /// A backend, scheme or convention this build or machine does not support.
    pub const UNSUPPORTED: u8 = 6;
    /// Interrupted by Ctrl-C or SIGTERM (the unfinished output removed): 128 + SIGINT,
    /// as shells report an interrupted command.
    pub const INTERRUPTED: u8 = 130;
}

/// A failed `blockscale` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
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
    /// A folder without safetensors files, or an index naming missing shards.
    #[error("{path}: {reason}")]
    Checkpoint {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor that cannot be processed as asked.
    #[error("{path}: tensor {tensor:?}: {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// NaN or Inf in a weight.
    #[error(
        "{path}: tensor {tensor:?} holds {value} at row {row}, column {col} \
         (`quantize --non-finite poison` stores such blocks as NaN blocks instead)"
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Row of the first non-finite value.
        row: usize,
        /// Column of the first non-finite value.
        col: usize,
        /// The value.
        value: f32,
    },
    /// The output exists.
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
    /// A scheme, convention or backend combination that is not supported.
    #[error("{0}")]
    Unsupported(String),
    /// A bad option value that clap cannot check (a scheme name, a glob).
    #[error("{0}")]
    Usage(String),
    /// An error of the CUDA backend.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    #[error("CUDA: {0}")]
    Cuda(String),
}

fn is_disk_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

impl CliError {
    /// The process exit code (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Read { .. } | Self::NotSafetensors { .. } | Self::Checkpoint { .. } | Self::Tensor { .. } => {
                exit::INPUT
            }
            Self::NonFinite { .. } => exit::NON_FINITE,
            Self::OutputExists { .. } | Self::Write { .. } => exit::OUTPUT,
            Self::Unsupported(_) | Self::Cuda(_) => exit::UNSUPPORTED,
            Self::Usage(_) => exit::USAGE,
        }
    }

    /// A stable machine-readable name for the kind (the `kind` of `--json` errors).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::NotSafetensors { .. } => "not-safetensors",
            Self::Checkpoint { .. } => "checkpoint",
            Self::Tensor { .. } => "tensor",
            Self::NonFinite { .. } => "non-finite",
            Self::OutputExists { .. } => "output-exists",
            Self::Write { .. } => "write",
            Self::Unsupported(_) => "unsupported",
            Self::Usage(_) => "usage",
            Self::Cuda(_) => "cuda",
        }
    }

    /// A [`CliError::Tensor`].
    pub fn tensor(path: impl Into<PathBuf>, tensor: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Tensor { path: path.into(), tensor: tensor.into(), reason: reason.into() }
    }

    /// The error as the JSON object `--json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "error": { "kind": self.kind(), "exit_code": self.exit_code(), "message": self.to_string() }
        });
        let (path, tensor) = match self {
            Self::Read { path, .. }
            | Self::NotSafetensors { path, .. }
            | Self::Checkpoint { path, .. }
            | Self::OutputExists { path }
            | Self::Write { path, .. } => (Some(path), None),
            Self::Tensor { path, tensor, .. } | Self::NonFinite { path, tensor, .. } => (Some(path), Some(tensor)),
            _ => (None, None),
        };
        if let Some(p) = path {
            v["error"]["file"] = p.display().to_string().into();
        }
        if let Some(t) = tensor {
            v["error"]["tensor"] = t.clone().into();
        }
        v
    }
}
