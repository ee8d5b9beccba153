//! Which files under `kernels/` are compiled, and how: module kernels (each a fatbin
//! the crate embeds) and CUTLASS shims (each an object for one architecture).

use std::path::{Path, PathBuf};

use crate::{Arch, Error};

/// The folder of `kernels/` holding headers shared by the module kernels (never
/// compiled on its own).
pub const COMMON_DIR: &str = "common";

/// The folder of `kernels/` holding the CUTLASS shims (compiled to objects and linked,
/// not embedded).
pub const CUTLASS_DIR: &str = "cutlass";

/// The module kernels: every `.cu` under `kernels` at any depth except in `common/` and
/// `cutlass/`, sorted by path. None found is an error.
pub fn module_sources(kernels: &Path) -> Result<Vec<PathBuf>, Error> {
    let found: Vec<PathBuf> =
        files_under(kernels, &[COMMON_DIR, CUTLASS_DIR])?.into_iter().filter(|p| is_cuda_source(p)).collect();
    if found.is_empty() {
        return Err(Error::NoSources { dir: kernels.to_path_buf() });
    }
    Ok(found)
}

/// What any module kernel may include: every file under `kernels` at any depth that is
/// not a `.cu` source, except in `cutlass/` (headers, and `nvcc_flags.txt`), sorted by
/// path. build.rs keys its module cache on them.
pub fn module_headers(kernels: &Path) -> Result<Vec<PathBuf>, Error> {
    Ok(files_under(kernels, &[CUTLASS_DIR])?.into_iter().filter(|p| !is_cuda_source(p)).collect())
}

/// Every file under `kernels` at any depth, outside the folders named `skip`, sorted.
fn files_under(kernels: &Path, skip: &[&str]) -> Result<Vec<PathBuf>, Error> {
    let mut found = Vec::new();
    let mut dirs = vec![kernels.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for path in entries(&dir)? {
            if path.is_dir() {
                if path.file_name().is_some_and(|n| skip.iter().all(|s| n != *s)) {
                    dirs.push(path);
                }
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// One CUTLASS shim: a `.cu` of `kernels/cutlass/` compiled for the one architecture
/// its name starts with ([`Arch::shim_prefix`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shim {
    /// The source file.
    pub source: PathBuf,
    /// The file name without `.cu`: names its object and its cache entry.
    pub stem: String,
    /// The architecture it is compiled for.
    pub arch: Arch,
}

/// The CUTLASS shims: the `.cu` files directly in `dir`, sorted by path, each with the
/// architecture of `archs` whose [`Arch::shim_prefix`] starts its name. No `dir` means
/// no shims; a shim that matches no architecture is an error.
pub fn cutlass_shims(dir: &Path, archs: &[Arch]) -> Result<Vec<Shim>, Error> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut sources: Vec<PathBuf> = entries(dir)?.into_iter().filter(|p| !p.is_dir() && is_cuda_source(p)).collect();
    sources.sort();
    sources
        .into_iter()
        .map(|source| {
            let stem = source.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            match archs.iter().find(|a| stem.starts_with(&a.shim_prefix())) {
                Some(arch) => Ok(Shim { arch: arch.clone(), stem, source }),
                None => Err(Error::ShimArch {
                    prefixes: archs.iter().map(Arch::shim_prefix).collect::<Vec<_>>().join(", "),
                    shim: source,
                }),
            }
        })
        .collect()
}

/// The paths in `dir`.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = std::fs::read_dir(dir).map_err(Error::io(dir))?;
    read.map(|e| e.map(|e| e.path()).map_err(Error::io(dir))).collect()
}

/// A `.cu` file.
fn is_cuda_source(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "cu")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("blockscale-kernel-build-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("creating a temp dir");
            TempDir(dir)
        }

        fn touch(&self, files: &[&str]) {
            for f in files {
                let path = self.0.join(f);
                std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("creating a folder");
                std::fs::write(path, "").expect("writing a file");
            }
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn archs() -> Vec<Arch> {
        ["sm_90a", "sm_120a"].iter().map(|n| Arch::new(n).expect("a valid name")).collect()
    }

    #[test]
    fn finds_module_kernels_outside_common_and_cutlass() {
        let tmp = TempDir::new("modules");
        tmp.touch(&[
            "quant/quantize.cu",
            "quant/dequantize.cu",
            "gemm/deep/nested.cu",
            "gemm/wgmma.cuh",
            "common/convert.cuh",
            "common/stray.cu",
            "cutlass/sm90_bf16_bf16.cu",
            "nvcc_flags.txt",
            "top.cu",
        ]);
        let found = module_sources(&tmp.0).expect("readable");
        let rel: Vec<String> = found
            .iter()
            .map(|p| p.strip_prefix(&tmp.0).expect("under the root").to_string_lossy().into_owned())
            .collect();
        assert_eq!(rel, ["gemm/deep/nested.cu", "quant/dequantize.cu", "quant/quantize.cu", "top.cu"]);
        let headers = module_headers(&tmp.0).expect("readable");
        let rel: Vec<String> = headers
            .iter()
            .map(|p| p.strip_prefix(&tmp.0).expect("under the root").to_string_lossy().into_owned())
            .collect();
        assert_eq!(rel, ["common/convert.cuh", "gemm/wgmma.cuh", "nvcc_flags.txt"]);
    }

    #[test]
    fn no_module_kernel_is_an_error() {
        let tmp = TempDir::new("empty");
        tmp.touch(&["common/convert.cuh", "cutlass/sm90_bf16_bf16.cu"]);
        assert!(matches!(module_sources(&tmp.0), Err(Error::NoSources { .. })));
        assert!(matches!(module_sources(&tmp.0.join("absent")), Err(Error::Io { .. })));
    }

    #[test]
    fn gives_each_shim_the_architecture_of_its_prefix() {
        let tmp = TempDir::new("shims");
        tmp.touch(&["sm90_bf16_f16.cu", "sm120_nvfp4_bf16.cu", "sm90_gemm.cuh", "nvcc_flags.txt", "sub/sm90_x.cu"]);
        let shims = cutlass_shims(&tmp.0, &archs()).expect("readable");
        let got: Vec<(&str, &str)> = shims.iter().map(|s| (s.stem.as_str(), s.arch.name())).collect();
        assert_eq!(got, [("sm120_nvfp4_bf16", "sm_120a"), ("sm90_bf16_f16", "sm_90a")]);
        assert_eq!(shims[1].source, tmp.0.join("sm90_bf16_f16.cu"));
        assert_eq!(cutlass_shims(&tmp.0.join("absent"), &archs()).expect("no folder, no shims"), []);

        tmp.touch(&["sm100_other.cu"]);
        assert!(matches!(cutlass_shims(&tmp.0, &archs()), Err(Error::ShimArch { .. })));
    }
}
