//! A target architecture: its name and the nvcc flag and file-name prefix it gives.

use std::fmt;

use crate::Error;

/// A GPU architecture the kernels are compiled for, such as `sm_90a`: named once, by a
/// `-gencode` line of `kernels/nvcc_flags.txt` ([`crate::NvccFlags::archs`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// `sm_` followed by the digits and an optional lowercase suffix.
    name: String,
}

impl Arch {
    /// The architecture named `name` (`sm_90a`, `sm_120a`, `sm_80`), or `None` when
    /// `name` is not `sm_` + digits + optional lowercase letters.
    pub fn new(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("sm_")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let valid = digits > 0 && rest[digits..].bytes().all(|b| b.is_ascii_lowercase());
        valid.then(|| Arch { name: name.to_string() })
    }

    /// The architecture a `-gencode=arch=compute_N,code=sm_N` flag compiles SASS for.
    pub fn from_gencode(flag: &str) -> Result<Self, Error> {
        let bad = || Error::Gencode { flag: flag.to_string() };
        let spec = flag.strip_prefix("-gencode=arch=").ok_or_else(bad)?;
        let (compute, code) = spec.split_once(",code=").ok_or_else(bad)?;
        let arch = Arch::new(code).ok_or_else(bad)?;
        if compute != arch.compute() {
            return Err(bad());
        }
        Ok(arch)
    }

    /// The name, e.g. `sm_90a`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The virtual architecture of the same generation, e.g. `compute_90a`.
    pub fn compute(&self) -> String {
        self.name.replacen("sm_", "compute_", 1)
    }

    /// The nvcc flag that compiles SASS for this architecture (and nothing else), e.g.
    /// `-gencode=arch=compute_90a,code=sm_90a`.
    pub fn gencode(&self) -> String {
        format!("-gencode=arch={},code={}", self.compute(), self.name)
    }

    /// The file-name prefix of the CUTLASS shims written for this architecture: `sm`,
    /// the digits, `_` (`sm90_` for `sm_90a`, `sm120_` for `sm_120a`).
    pub fn shim_prefix(&self) -> String {
        let digits: String = self.name["sm_".len()..].chars().take_while(char::is_ascii_digit).collect();
        format!("sm{digits}_")
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_flags_and_prefixes() {
        let arch = Arch::new("sm_120a").expect("a valid name");
        assert_eq!(arch.name(), "sm_120a");
        assert_eq!(arch.compute(), "compute_120a");
        assert_eq!(arch.gencode(), "-gencode=arch=compute_120a,code=sm_120a");
        assert_eq!(arch.shim_prefix(), "sm120_");
        assert_eq!(Arch::new("sm_90a").map(|a| a.shim_prefix()).as_deref(), Some("sm90_"));
        for bad in ["sm90a", "sm_", "sm_a", "compute_90a", "sm_90A", "sm_90a "] {
            assert_eq!(Arch::new(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_gencode_flags() {
        let arch = Arch::from_gencode("-gencode=arch=compute_90a,code=sm_90a").expect("a gencode flag");
        assert_eq!(arch.name(), "sm_90a");
        assert_eq!(Arch::from_gencode(&arch.gencode()).expect("round trip"), arch);
        for bad in [
            "-gencode arch=compute_90a,code=sm_90a",
            "-gencode=arch=compute_90a,code=compute_90a",
            "-gencode=arch=compute_90,code=sm_90a",
            "-gencode=arch=compute_90a",
        ] {
            assert!(matches!(Arch::from_gencode(bad), Err(Error::Gencode { .. })), "{bad:?}");
        }
    }
}
