//! Everything that can go wrong, with the file and tensor it concerns, and the exit
//! code each kind maps to (stable: scripts may rely on them, docs/CLI.md lists them).

use std::path::PathBuf;

use blockscale::checkpoint::CheckpointError;

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
    pub const INTERRUPTED: u8 = blockscale::checkpoint::interrupt::INTERRUPTED;
}

/// A failed `blockscale` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A checkpoint that cannot be read or written (the file and tensor named).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
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

impl CliError {
    /// The process exit code (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        use CheckpointError as C;
        match self {
            Self::Checkpoint(C::Read { .. } | C::NotSafetensors { .. } | C::Checkpoint { .. } | C::Tensor { .. }) => {
                exit::INPUT
            }
            Self::Checkpoint(C::OutputExists { .. } | C::Write { .. }) => exit::OUTPUT,
            Self::Checkpoint(C::Unsupported(_)) | Self::Unsupported(_) | Self::Cuda(_) => exit::UNSUPPORTED,
            Self::Checkpoint(C::Invalid(_)) | Self::Usage(_) => exit::USAGE,
            Self::NonFinite { .. } => exit::NON_FINITE,
        }
    }

    /// A stable machine-readable name for the kind (the `kind` of `--json` errors).
    pub fn kind(&self) -> &'static str {
        use CheckpointError as C;
        match self {
            Self::Checkpoint(C::Read { .. }) => "read",
            Self::Checkpoint(C::NotSafetensors { .. }) => "not-safetensors",
            Self::Checkpoint(C::Checkpoint { .. }) => "checkpoint",
            Self::Checkpoint(C::Tensor { .. }) => "tensor",
            Self::NonFinite { .. } => "non-finite",
            Self::Checkpoint(C::OutputExists { .. }) => "output-exists",
            Self::Checkpoint(C::Write { .. }) => "write",
            Self::Checkpoint(C::Unsupported(_)) | Self::Unsupported(_) => "unsupported",
            Self::Checkpoint(C::Invalid(_)) | Self::Usage(_) => "usage",
            Self::Cuda(_) => "cuda",
        }
    }

    /// A tensor error ([`CheckpointError::Tensor`]).
    pub fn tensor(path: impl Into<PathBuf>, tensor: impl Into<String>, reason: impl Into<String>) -> Self {
        CheckpointError::tensor(path, tensor, reason).into()
    }

    /// Reading `path` failed ([`CheckpointError::Read`]).
    pub fn read(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CheckpointError::Read { path: path.into(), source }.into()
    }

    /// Writing `path` failed ([`CheckpointError::Write`]).
    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CheckpointError::Write { path: path.into(), source }.into()
    }

    /// The error as the JSON object `--json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "error": { "kind": self.kind(), "exit_code": self.exit_code(), "message": self.to_string() }
        });
        let (path, tensor) = match self {
            Self::Checkpoint(e) => (e.path(), e.tensor_name()),
            Self::NonFinite { path, tensor, .. } => (Some(path.as_path()), Some(tensor.as_str())),
            _ => (None, None),
        };
        if let Some(p) = path {
            v["error"]["file"] = p.display().to_string().into();
        }
        if let Some(t) = tensor {
            v["error"]["tensor"] = t.into();
        }
        v
    }
}
