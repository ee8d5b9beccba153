//! The CUTLASS object cache. A CUTLASS shim takes about a minute to compile, so
//! blockscale-cuda's build.rs keeps each compiled shim (object, cubin, ptxas report) in
//! `<target dir>/cutlass-cache/`, keyed by a hash of its inputs, and lists what it
//! linked in a manifest; `cargo xtask kernels` reads the reports and cubins from there
//! instead of compiling the shims again. The cache outlives `OUT_DIR` on purpose: it
//! survives `cargo clean -p blockscale-cuda`, profile changes and the nested builds of
//! xtask, and sits where xtask finds it.

use std::path::{Path, PathBuf};

use crate::Error;

/// The cache in the target dir `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutlassCache {
    /// `<target>/cutlass-cache`.
    dir: PathBuf,
}

/// One cached shim: the folder holding its object, cubin and ptxas report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The shim's file stem ([`crate::sources::Shim::stem`]).
    pub stem: String,
    /// The architecture it was compiled for (its name, e.g. `sm_90a`).
    pub arch: String,
    /// The entry's folder.
    pub dir: PathBuf,
}

impl CutlassCache {
    /// The cache of the target dir `target` ([`crate::dirs::target_dir`]).
    pub fn new(target: &Path) -> Self {
        CutlassCache { dir: target.join("cutlass-cache") }
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the entry of shim `stem` whose inputs hash to `key`.
    pub fn entry_dir(&self, stem: &str, key: u64) -> PathBuf {
        self.dir.join(format!("{stem}-{key:016x}"))
    }

    /// Whether a folder name is that of an entry of shim `stem` (any key).
    pub fn is_entry_of(name: &str, stem: &str) -> bool {
        name.strip_prefix(stem)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|key| key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// The manifest: one `stem arch folder` line per shim of the last build.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.txt")
    }

    /// Writes the manifest listing `entries`.
    pub fn write_manifest(&self, entries: &[CacheEntry]) -> Result<(), Error> {
        let text: String = entries.iter().map(|e| format!("{} {} {}\n", e.stem, e.arch, e.dir.display())).collect();
        std::fs::write(self.manifest(), text).map_err(Error::io(self.manifest()))
    }

    /// Reads the manifest the last build wrote.
    pub fn read_manifest(&self) -> Result<Vec<CacheEntry>, Error> {
        let path = self.manifest();
        let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
        parse_manifest(&text).map_err(|line| Error::Manifest { path, line })
    }
}

impl CacheEntry {
    /// The shim's object file, linked into blockscale-cuda.
    pub fn object(&self) -> PathBuf {
        self.dir.join(format!("{}.o", self.stem))
    }

    /// The shim's cubin (kept by nvcc's `--keep`), for the SASS checks.
    pub fn cubin(&self) -> PathBuf {
        self.dir.join(format!("{}.cubin", self.stem))
    }

    /// ptxas's `-v` report on the shim's kernels.
    pub fn ptxas_log(&self) -> PathBuf {
        self.dir.join("ptxas.log")
    }
}

/// The entries of a manifest's text, or the first malformed line.
fn parse_manifest(text: &str) -> Result<Vec<CacheEntry>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(stem), Some(arch), Some(dir)) => {
                    Ok(CacheEntry { stem: stem.into(), arch: arch.into(), dir: PathBuf::from(dir) })
                }
                _ => Err(line.to_string()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_entries_and_their_files() {
        let cache = CutlassCache::new(Path::new("/t"));
        assert_eq!(cache.dir(), Path::new("/t/cutlass-cache"));
        let dir = cache.entry_dir("sm90_bf16_bf16", 0x0aae_d6eb_1fea_283e);
        assert_eq!(dir, Path::new("/t/cutlass-cache/sm90_bf16_bf16-0aaed6eb1fea283e"));
        assert!(CutlassCache::is_entry_of("sm90_bf16_bf16-0aaed6eb1fea283e", "sm90_bf16_bf16"));
        assert!(!CutlassCache::is_entry_of("sm90_bf16_bf16-0aaed6eb1fea283e.tmp12", "sm90_bf16_bf16"));
        assert!(!CutlassCache::is_entry_of("sm90_bf16_f16-71aff58c30688e6e", "sm90_bf16"));
        let entry = CacheEntry { stem: "sm90_bf16_bf16".into(), arch: "sm_90a".into(), dir };
        assert_eq!(entry.object().file_name().unwrap_or_default(), "sm90_bf16_bf16.o");
        assert_eq!(entry.cubin().file_name().unwrap_or_default(), "sm90_bf16_bf16.cubin");
        assert_eq!(entry.ptxas_log().file_name().unwrap_or_default(), "ptxas.log");
    }

    #[test]
    fn parses_the_manifest() {
        let text = "sm120_nvfp4_bf16 sm_120a /t/cutlass-cache/sm120_nvfp4_bf16-fba1c5c9dce22b65\n\n\
                    sm90_bf16_bf16 sm_90a /a folder/with spaces\n";
        let entries = parse_manifest(text).expect("well-formed");
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].stem.as_str(), entries[0].arch.as_str()), ("sm120_nvfp4_bf16", "sm_120a"));
        assert_eq!(entries[1].dir, Path::new("/a folder/with spaces"));
        assert_eq!(parse_manifest("sm90_bf16_bf16 sm_90a\n"), Err("sm90_bf16_bf16 sm_90a".to_string()));
    }
}
