//! The nvcc flags files (`kernels/nvcc_flags.txt`, `kernels/cutlass/nvcc_flags.txt`):
//! their one parser.

use std::path::Path;

use crate::{Arch, Error};

/// The name of a flags file, in `kernels/` (the module kernels) and `kernels/cutlass/`
/// (the CUTLASS shims).
pub const FLAGS_FILE: &str = "nvcc_flags.txt";

/// The flags of one `nvcc_flags.txt`, in the file's order: one flag per line, `#`
/// starting a comment (a whole line or the rest of one), blank lines ignored. Each line
/// is one argument of nvcc, spaces included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvccFlags {
    /// The flags, trimmed, comments removed.
    flags: Vec<String>,
}

impl NvccFlags {
    /// Parses the text of a flags file.
    pub fn parse(text: &str) -> Self {
        let flags = text
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default().trim())
            .filter(|flag| !flag.is_empty())
            .map(String::from)
            .collect();
        NvccFlags { flags }
    }

    /// Reads and parses the flags file at `path`.
    pub fn read(path: &Path) -> Result<Self, Error> {
        std::fs::read_to_string(path).map(|text| Self::parse(&text)).map_err(Error::io(path))
    }

    /// Every flag as written, `-gencode` lines included: what compiles a fatbin for all
    /// the file's architectures.
    pub fn all(&self) -> &[String] {
        &self.flags
    }

    /// The architectures the `-gencode` lines compile for, in the file's order.
    pub fn archs(&self) -> Result<Vec<Arch>, Error> {
        self.flags.iter().filter(|f| is_gencode(f)).map(|f| Arch::from_gencode(f)).collect()
    }

    /// The flags that compile for `arch` alone: those of the file without its `-gencode`
    /// lines, then `arch`'s `-gencode`.
    pub fn for_arch(&self, arch: &Arch) -> Vec<String> {
        let mut flags: Vec<String> = self.flags.iter().filter(|f| !is_gencode(f)).cloned().collect();
        flags.push(arch.gencode());
        flags
    }
}

/// Whether a flag names a compilation target (`-gencode=...`, `-gencode ...`).
fn is_gencode(flag: &str) -> bool {
    flag.starts_with("-gencode")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# nvcc flags: a whole-line comment\n\
                        \n\
                        -gencode=arch=compute_90a,code=sm_90a\n\
                        \x20 -gencode=arch=compute_120a,code=sm_120a   # Blackwell GeForce\n\
                        \t\n\
                        -O3\n\
                        \x20  # an indented comment\n\
                        -std=c++17# no space before the comment\n\
                        -DNDEBUG\n";

    #[test]
    fn drops_comments_and_blank_lines() {
        let flags = NvccFlags::parse(FILE);
        assert_eq!(
            flags.all(),
            [
                "-gencode=arch=compute_90a,code=sm_90a",
                "-gencode=arch=compute_120a,code=sm_120a",
                "-O3",
                "-std=c++17",
                "-DNDEBUG"
            ]
        );
        assert!(NvccFlags::parse("# only comments\n\n  # and blanks\n").all().is_empty());
    }

    #[test]
    fn takes_the_architectures_from_the_gencode_lines() {
        let flags = NvccFlags::parse(FILE);
        let archs = flags.archs().expect("well-formed -gencode lines");
        let names: Vec<&str> = archs.iter().map(Arch::name).collect();
        assert_eq!(names, ["sm_90a", "sm_120a"]);
        assert_eq!(
            flags.for_arch(&archs[1]),
            ["-O3", "-std=c++17", "-DNDEBUG", "-gencode=arch=compute_120a,code=sm_120a"]
        );
        // The CUTLASS flags name no target: the shim's architecture is appended.
        let shim = NvccFlags::parse("-O3\n--expt-relaxed-constexpr # CUTLASS\n");
        assert_eq!(shim.archs().expect("no -gencode line"), []);
        assert_eq!(
            shim.for_arch(&archs[0]),
            ["-O3", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a"]
        );
    }

    #[test]
    fn rejects_a_gencode_of_another_form() {
        let flags = NvccFlags::parse("-gencode arch=compute_90a,code=sm_90a\n");
        assert!(matches!(flags.archs(), Err(Error::Gencode { .. })));
    }

    #[test]
    fn reports_the_missing_file() {
        let missing = Path::new("/nonexistent/blockscale/nvcc_flags.txt");
        match NvccFlags::read(missing) {
            Err(Error::Io { path, .. }) => assert_eq!(path, missing),
            other => panic!("expected an Io error, got {other:?}"),
        }
    }
}
