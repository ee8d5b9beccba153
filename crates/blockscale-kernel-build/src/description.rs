//! [`KernelBuild`]: everything `kernels/` says about how it is compiled.

use std::path::{Path, PathBuf};

use crate::flags::FLAGS_FILE;
use crate::sources::{self, Shim};
use crate::{Arch, Error, NvccFlags};

/// The kernel build description of a workspace: what build.rs compiles and
/// `cargo xtask kernels` checks, read from `kernels/` alone.
#[derive(Clone, Debug)]
pub struct KernelBuild {
    /// The kernels folder, `<root>/kernels`.
    pub kernels: PathBuf,
    /// The module kernels ([`sources::module_sources`]), each compiled into one fatbin.
    pub modules: Vec<PathBuf>,
    /// The module kernels' flags, `kernels/nvcc_flags.txt`.
    pub flags: NvccFlags,
    /// The target architectures: those of the `-gencode` lines of [`Self::flags`], in
    /// their order. Never empty.
    pub archs: Vec<Arch>,
    /// The CUTLASS shims' folder, `kernels/cutlass`.
    pub cutlass: PathBuf,
    /// The CUTLASS shims ([`sources::cutlass_shims`]), each for one of [`Self::archs`].
    pub shims: Vec<Shim>,
    /// The shims' flags, `kernels/cutlass/nvcc_flags.txt` (empty when there is no
    /// shim); [`NvccFlags::for_arch`] adds each shim's target.
    pub shim_flags: NvccFlags,
}

impl KernelBuild {
    /// Reads the description of the workspace at `root`.
    pub fn read(root: &Path) -> Result<Self, Error> {
        let kernels = root.join("kernels");
        let flags_file = kernels.join(FLAGS_FILE);
        let flags = NvccFlags::read(&flags_file)?;
        let archs = flags.archs()?;
        if archs.is_empty() {
            return Err(Error::NoArchs { path: flags_file });
        }
        let modules = sources::module_sources(&kernels)?;
        let cutlass = kernels.join(sources::CUTLASS_DIR);
        let shims = sources::cutlass_shims(&cutlass, &archs)?;
        let shim_flags =
            if shims.is_empty() { NvccFlags::default() } else { NvccFlags::read(&cutlass.join(FLAGS_FILE))? };
        Ok(KernelBuild { kernels, modules, flags, archs, cutlass, shims, shim_flags })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's own `kernels/` reads: module kernels outside `cutlass/` and
    /// `common/`, each shim for one of the architectures.
    #[test]
    fn reads_the_workspace_kernels() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let build = KernelBuild::read(&root).expect("the workspace's kernels/ is well-formed");
        assert!(!build.archs.is_empty());
        assert!(build.modules.iter().any(|m| m.ends_with("quant/quantize.cu")));
        let common = build.kernels.join(sources::COMMON_DIR);
        assert!(build.modules.iter().all(|m| !m.starts_with(&build.cutlass) && !m.starts_with(&common)));
        assert!(!build.shims.is_empty());
        assert!(build.shims.iter().all(|s| build.archs.contains(&s.arch)));
        assert!(build.shim_flags.archs().is_ok_and(|a| a.is_empty()), "a shim's target comes from its name");
    }
}
