//! `cargo xtask setup-cuda` and `setup-python`: pinned toolchains from PyPI under
//! `target/` (or `CARGO_TARGET_DIR`: [`crate::util::target_dir`]), installed once and
//! reused.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use blockscale_kernel_build::dirs;

use crate::util::{run, target_dir};

/// The CUDA packages, pinned to one 13.0.x release (mixing releases breaks nvcc), and
/// matching the GPU machines' driver. `nvidia-cuda-runtime` carries the headers
/// (`cuda_fp8.h`, `cuda_fp6.h`, `cuda_fp4.h`) whose host functions are our oracle.
pub const CUDA_PACKAGES: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-runtime==13.0.88",
];

/// CUTLASS 4.2, headers only (BSD-3; its wheel carries the C++ sources under
/// `cutlass_library/source/include`): the SM90 and SM120 GEMM shims in kernels/cutlass/
/// instantiate its templates. Nothing is vendored: build.rs reads it from here.
pub const CUTLASS_PACKAGES: &[&str] = &["nvidia-cutlass==4.2.0.0"];

/// nvdisasm for the SASS checks of `cargo xtask kernels`. PyPI has no 13.0.x build of
/// it (the first is 13.2), so it lives in its own prefix, apart from the pinned
/// compiler; a newer disassembler reads the 13.0 cubins.
pub const NVDISASM_PACKAGES: &[&str] = &["nvidia-cuda-nvdisasm==13.2.86"];

/// The Python oracles: ml_dtypes (a second, independent element-format oracle), and
/// safetensors (the reference reader/writer the CLI's checkpoint oracle uses; its
/// `safetensors.numpy` needs nothing beyond numpy, so `--no-deps` is enough).
pub const PYTHON_PACKAGES: &[&str] = &["ml_dtypes==0.6.0", "numpy==2.4.6", "safetensors==0.8.0"];

/// Where `setup-cuda` installs: `CUDA_HOME` is `<this>/nvidia/cu13`. build.rs finds it
/// there (`blockscale_kernel_build::dirs`).
pub fn cuda_prefix() -> PathBuf {
    dirs::cuda_prefix(&target_dir())
}

/// The CUDA home inside the install prefix (holds `bin/nvcc` and `include/`).
pub fn cuda_home() -> PathBuf {
    dirs::cuda_home(&target_dir())
}

/// Where `setup-python` installs (a `--target` directory for `PYTHONPATH`).
pub fn python_dir() -> PathBuf {
    target_dir().join("python-oracles")
}

/// Installs the CUDA toolchain unless a complete install with the same pins exists.
pub fn cuda(force: bool) -> Result<PathBuf> {
    let home = cuda_home();
    let ready = home.join("bin").join("nvcc").is_file() && home.join("include").join("cuda_fp4.h").is_file();
    pip_install(&cuda_prefix(), CUDA_PACKAGES, force || !ready)?;
    if !home.join("include").join("cuda_fp4.h").is_file() {
        bail!("pip finished but {} has no include/cuda_fp4.h", home.display());
    }
    // The GEMM shims need CUTLASS, and libcudart_static (from nvidia-cuda-runtime above)
    // to link them.
    if !home.join("lib").join("libcudart_static.a").is_file() {
        bail!("pip finished but {} has no lib/libcudart_static.a", home.display());
    }
    cutlass(force)?;
    Ok(home)
}

/// Where `setup-cuda` installs CUTLASS (the wheel's files under a `--target` directory),
/// where build.rs finds it (`blockscale_kernel_build::dirs`).
pub fn cutlass_prefix() -> PathBuf {
    dirs::cutlass_prefix(&target_dir())
}

/// The CUTLASS include directory inside the install prefix (holds `cutlass/` and `cute/`).
pub fn cutlass_include() -> PathBuf {
    dirs::cutlass_source(&target_dir()).join("include")
}

/// Installs CUTLASS's headers unless present with the same pin; returns the include
/// directory.
pub fn cutlass(force: bool) -> Result<PathBuf> {
    let include = cutlass_include();
    let ready = include.join("cutlass").join("cutlass.h").is_file();
    pip_install(&cutlass_prefix(), CUTLASS_PACKAGES, force || !ready)?;
    if !include.join("cutlass").join("cutlass.h").is_file() {
        bail!("pip finished but {} has no cutlass/cutlass.h", include.display());
    }
    Ok(include)
}

/// Installs nvdisasm unless present with the same pin; returns the binary.
pub fn nvdisasm(force: bool) -> Result<PathBuf> {
    let prefix = target_dir().join("nvdisasm-13.2");
    let bin = prefix.join("nvidia").join("cu13").join("bin").join("nvdisasm");
    pip_install(&prefix, NVDISASM_PACKAGES, force || !bin.is_file())?;
    if !bin.is_file() {
        bail!("pip finished but {} is missing", bin.display());
    }
    Ok(bin)
}

/// Installs the Python oracles unless present with the same pins.
pub fn python(force: bool) -> Result<PathBuf> {
    let dir = python_dir();
    pip_install(&dir, PYTHON_PACKAGES, force || !dir.join("ml_dtypes").is_dir())?;
    Ok(dir)
}

/// `pip install --no-deps --target prefix packages`, skipped when a stamp file shows
/// the same package list is already installed there.
fn pip_install(prefix: &Path, packages: &[&str], needed: bool) -> Result<()> {
    stamped_install(prefix, packages, needed, || {
        std::fs::create_dir_all(prefix)?;
        let python = python_interpreter()?;
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target"])
            .arg(prefix)
            .args(packages);
        run(&mut cmd).context(
            "installing from PyPI failed: is pypi.org reachable? (the packages are listed in \
             xtask/src/setup_cuda.rs)",
        )
    })
}

/// Runs `install` into `prefix`, emptied first, and stamps it with `packages`
/// (`.blockscale-pins`); skipped, unless `needed`, when the stamp there shows the same
/// package list is already installed.
pub fn stamped_install(
    prefix: &Path,
    packages: &[&str],
    needed: bool,
    install: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let stamp = prefix.join(".blockscale-pins");
    let want = packages.join("\n");
    if !needed && std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    if prefix.exists() {
        std::fs::remove_dir_all(prefix).with_context(|| format!("removing {}", prefix.display()))?;
    }
    install()?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// `$PYTHON`, else `python3`, else `python`.
pub fn python_interpreter() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PYTHON") {
        return Ok(p.into());
    }
    for name in ["python3", "python"] {
        if Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Ok(name.into());
        }
    }
    bail!("no Python interpreter found: install python3 (with pip) or set PYTHON")
}
