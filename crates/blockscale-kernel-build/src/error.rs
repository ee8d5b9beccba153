//! What can be wrong with the kernel build description.

use std::path::PathBuf;

/// A kernel build description that cannot be read: a missing file or folder, a
/// `-gencode` flag of another form, a CUTLASS shim whose name names no architecture,
/// or a malformed compile cache manifest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or folder could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A `-gencode` flag not of the form `-gencode=arch=compute_N,code=sm_N` (the
    /// same `N`, an optional letter suffix such as `a` included).
    #[error("{flag:?} is not of the form -gencode=arch=compute_N,code=sm_N")]
    Gencode {
        /// The flag as written.
        flag: String,
    },
    /// The kernels' flags file lists no `-gencode` target.
    #[error("{path} has no -gencode line: it lists the target architectures")]
    NoArchs {
        /// The flags file.
        path: PathBuf,
    },
    /// No kernel source was found.
    #[error("no .cu files under {dir}")]
    NoSources {
        /// The kernels folder.
        dir: PathBuf,
    },
    /// A CUTLASS shim whose file name starts with no architecture's prefix.
    #[error("{shim}: a CUTLASS shim's name starts with its architecture's prefix ({prefixes})")]
    ShimArch {
        /// The shim's source.
        shim: PathBuf,
        /// The prefixes the target architectures give, comma-separated.
        prefixes: String,
    },
    /// A line of a compile cache's manifest that is not `stem arch folder`.
    #[error("{path}: malformed line {line:?}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// The line.
        line: String,
    },
}

impl Error {
    /// An [`Error::Io`] on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
