//! Where builds go and where `cargo xtask setup-cuda` installs the toolchain: the rule
//! xtask and blockscale-cuda's build.rs share, so the build finds what xtask installed
//! and xtask reads what the build cached.

use std::path::{Path, PathBuf};

/// The variable that moves the target dir.
pub const TARGET_DIR_ENV: &str = "CARGO_TARGET_DIR";

/// The target dir of the workspace at `root`: `CARGO_TARGET_DIR` when set and not empty
/// (a relative one taken from the workspace root, where xtask runs its nested cargo),
/// else `<root>/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os(TARGET_DIR_ENV) {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// Where `cargo xtask setup-cuda` installs the CUDA toolchain (the PyPI wheels, under a
/// pip `--target` folder) in the target dir `target`.
pub fn cuda_prefix(target: &Path) -> PathBuf {
    target.join("cuda-13.0")
}

/// The CUDA home inside [`cuda_prefix`]: holds `bin/nvcc`, `include/` and `lib/`.
pub fn cuda_home(target: &Path) -> PathBuf {
    cuda_prefix(target).join("nvidia").join("cu13")
}

/// Where `cargo xtask setup-cuda` installs CUTLASS (the wheel's files under a pip
/// `--target` folder) in the target dir `target`.
pub fn cutlass_prefix(target: &Path) -> PathBuf {
    target.join("cutlass-4.2")
}

/// The CUTLASS source tree inside [`cutlass_prefix`]: holds `include/` and `tools/`,
/// like a CUTLASS checkout.
pub fn cutlass_source(target: &Path) -> PathBuf {
    cutlass_prefix(target).join("cutlass_library").join("source")
}
