//! How the build finds nvcc and CUTLASS, and the environment variables that decide it.

use std::path::{Path, PathBuf};

use crate::dirs;

/// Every environment variable this crate reads (a build script reruns when one
/// changes): those of [`find_nvcc`], [`cutlass_dir`] and [`dirs::target_dir`].
pub const ENV_VARS: &[&str] = &["NVCC", "CUDA_HOME", "CUDA_PATH", "PATH", "CUTLASS_DIR", dirs::TARGET_DIR_ENV];

/// nvcc: `NVCC` (that file, or none when it does not exist), else `bin/nvcc` of
/// `CUDA_HOME` or `CUDA_PATH`, else the first on `PATH`, else the toolchain
/// `cargo xtask setup-cuda` installs in the target dir `target` ([`dirs::cuda_home`]).
pub fn find_nvcc(target: &Path) -> Option<PathBuf> {
    let exists = |p: PathBuf| p.is_file().then_some(p);
    if let Some(p) = std::env::var_os("NVCC") {
        return exists(PathBuf::from(p));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var)
            && let Some(p) = exists(PathBuf::from(home).join("bin/nvcc"))
        {
            return Some(p);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if let Some(p) = exists(dir.join("nvcc")) {
                return Some(p);
            }
        }
    }
    exists(dirs::cuda_home(target).join("bin/nvcc"))
}

/// The CUTLASS source tree to compile the shims against: `CUTLASS_DIR` (a CUTLASS
/// checkout, or the wheel's `cutlass_library/source`), else the copy
/// `cargo xtask setup-cuda` installs in the target dir `target`
/// ([`dirs::cutlass_source`]). Either should hold `include/cutlass/cutlass.h` and
/// `tools/util/include/`; the caller checks.
pub fn cutlass_dir(target: &Path) -> PathBuf {
    std::env::var_os("CUTLASS_DIR").map(PathBuf::from).unwrap_or_else(|| dirs::cutlass_source(target))
}
