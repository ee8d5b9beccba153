//! The compile caches. build.rs keeps what nvcc produced in folders of the target dir,
//! keyed by a hash of everything that goes in ([`Key`]), and lists what the last build
//! used in a manifest; `cargo xtask kernels` reads ptxas's reports and the cubins from
//! there instead of compiling again. A cache outlives `OUT_DIR` on purpose: it survives
//! `cargo clean -p blockscale-cuda`, profile and feature changes (clippy, the test and
//! release profiles, xtask's own build each run the build script) and sits where xtask
//! finds it. Two caches:
//!
//! - [`Cache::cutlass`]: each CUTLASS shim (about a minute of nvcc each) as an object,
//!   a cubin and a ptxas report, for the shim's one architecture;
//! - [`Cache::modules`]: each module kernel as its fatbin, one cubin and one ptxas
//!   report per target architecture.

use std::path::{Path, PathBuf};

use crate::Error;

/// A compile cache in the target dir: `<target>/cutlass-cache` or
/// `<target>/kernel-cache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    /// The cache folder.
    dir: PathBuf,
}

/// One cached compile: the folder holding what nvcc produced from one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The source's file stem ([`crate::sources::Shim::stem`], or a module's): names
    /// its files and its folder.
    pub stem: String,
    /// The architectures it was compiled for, by name (`sm_90a`), comma-separated: one
    /// for a CUTLASS shim, every target for a module.
    pub arch: String,
    /// The entry's folder.
    pub dir: PathBuf,
}

/// The cache key: 64-bit FNV-1a over every input of a compile (no dependency for a
/// hash; the key only has to change when an input does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub u64);

impl Default for Key {
    fn default() -> Self {
        Key(0xcbf2_9ce4_8422_2325)
    }
}

impl Key {
    /// Mixes `bytes` into the key.
    pub fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Cache {
    /// The CUTLASS shims' cache of the target dir `target` ([`crate::dirs::target_dir`]).
    pub fn cutlass(target: &Path) -> Self {
        Cache { dir: target.join("cutlass-cache") }
    }

    /// The module kernels' cache of the target dir `target`.
    pub fn modules(target: &Path) -> Self {
        Cache { dir: target.join("kernel-cache") }
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the entry of `stem` whose inputs hash to `key`.
    pub fn entry_dir(&self, stem: &str, key: Key) -> PathBuf {
        self.dir.join(format!("{stem}-{:016x}", key.0))
    }

    /// Whether a folder name is that of an entry of `stem` (any key).
    pub fn is_entry_of(name: &str, stem: &str) -> bool {
        name.strip_prefix(stem)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|key| key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// Removes the entries of `keep`'s stem other than `keep` (older versions of it).
    pub fn remove_stale(&self, keep: &CacheEntry) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        for e in rd.flatten() {
            let path = e.path();
            if Self::is_entry_of(&e.file_name().to_string_lossy(), &keep.stem) && path != keep.dir {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    /// The manifest: one `stem arch folder` line per entry of the last build.
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
    /// A CUTLASS shim's object file, linked into blockscale-cuda.
    pub fn object(&self) -> PathBuf {
        self.dir.join(format!("{}.o", self.stem))
    }

    /// A CUTLASS shim's cubin (kept by nvcc's `--keep`), for the SASS checks.
    pub fn cubin(&self) -> PathBuf {
        self.dir.join(format!("{}.cubin", self.stem))
    }

    /// ptxas's `-v` report on a CUTLASS shim's kernels.
    pub fn ptxas_log(&self) -> PathBuf {
        self.dir.join("ptxas.log")
    }

    /// A module's fatbin, embedded in blockscale-cuda.
    pub fn fatbin(&self) -> PathBuf {
        self.dir.join(format!("{}.fatbin", self.stem))
    }

    /// A module's cubin for architecture `arch` (`sm_90a`), under the name nvcc's
    /// `--keep` gives it (`<stem>.compute_90a.cubin`).
    pub fn arch_cubin(&self, arch: &str) -> PathBuf {
        self.dir.join(format!("{}.{}.cubin", self.stem, arch.replacen("sm_", "compute_", 1)))
    }

    /// ptxas's `-v` report on a module's kernels for architecture `arch`.
    pub fn arch_ptxas_log(&self, arch: &str) -> PathBuf {
        self.dir.join(format!("ptxas.{arch}.log"))
    }

    /// The architectures of [`Self::arch`], by name.
    pub fn archs(&self) -> impl Iterator<Item = &str> {
        self.arch.split(',').filter(|a| !a.is_empty())
    }
}

/// ptxas's `-v` report of one nvcc run over several architectures, cut into one report
/// per architecture: each line goes to the architecture of the last `Compiling entry
/// function '...' for 'sm_..'` line before it (lines before the first go nowhere).
/// Architectures in order of first appearance.
pub fn split_ptxas(log: &str) -> Vec<(String, String)> {
    let mut parts: Vec<(String, String)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if line.contains("Compiling entry function")
            && let Some(arch) = line.rsplit(" for '").next().and_then(|r| r.strip_suffix('\''))
        {
            current = Some(match parts.iter().position(|(a, _)| a == arch) {
                Some(i) => i,
                None => {
                    parts.push((arch.to_string(), String::new()));
                    parts.len() - 1
                }
            });
        }
        if let Some(i) = current {
            parts[i].1.push_str(line);
            parts[i].1.push('\n');
        }
    }
    parts
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
        let cache = Cache::cutlass(Path::new("/t"));
        assert_eq!(cache.dir(), Path::new("/t/cutlass-cache"));
        assert_eq!(Cache::modules(Path::new("/t")).dir(), Path::new("/t/kernel-cache"));
        let dir = cache.entry_dir("sm90_bf16_bf16", Key(0x0aae_d6eb_1fea_283e));
        assert_eq!(dir, Path::new("/t/cutlass-cache/sm90_bf16_bf16-0aaed6eb1fea283e"));
        assert!(Cache::is_entry_of("sm90_bf16_bf16-0aaed6eb1fea283e", "sm90_bf16_bf16"));
        assert!(!Cache::is_entry_of("sm90_bf16_bf16-0aaed6eb1fea283e.tmp12", "sm90_bf16_bf16"));
        assert!(!Cache::is_entry_of("sm90_bf16_f16-71aff58c30688e6e", "sm90_bf16"));
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

    #[test]
    fn names_a_module_entry_s_files_per_architecture() {
        let cache = Cache::modules(Path::new("/t"));
        let dir = cache.entry_dir("wgemm", Key(1));
        assert_eq!(dir, Path::new("/t/kernel-cache/wgemm-0000000000000001"));
        let entry = CacheEntry { stem: "wgemm".into(), arch: "sm_90a,sm_120a".into(), dir };
        assert_eq!(entry.archs().collect::<Vec<_>>(), ["sm_90a", "sm_120a"]);
        assert_eq!(entry.fatbin().file_name().unwrap_or_default(), "wgemm.fatbin");
        assert_eq!(entry.arch_cubin("sm_120a").file_name().unwrap_or_default(), "wgemm.compute_120a.cubin");
        assert_eq!(entry.arch_ptxas_log("sm_90a").file_name().unwrap_or_default(), "ptxas.sm_90a.log");
        // "prepare" and "prepared" are two modules: neither's entries are the other's.
        assert!(!Cache::is_entry_of("prepared-0000000000000001", "prepare"));
    }

    /// FNV-1a's published test vectors (the empty input is the offset basis).
    #[test]
    fn keys_are_fnv1a() {
        let key = |bytes: &[u8]| {
            let mut k = Key::default();
            k.add(bytes);
            k.0
        };
        assert_eq!(key(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(key(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn splits_a_two_architecture_report() {
        let log = "ptxas info    : 0 bytes gmem\n\
                   ptxas info    : Compiling entry function 'k1' for 'sm_90a'\n\
                   ptxas info    : Used 54 registers\n\
                   ptxas info    : Compiling entry function 'k1' for 'sm_120a'\n\
                   ptxas info    : Used 40 registers\n\
                   ptxas info    : Compiling entry function 'k2' for 'sm_90a'\n\
                   ptxas warning : C7512 in 'k2'\n";
        let parts = split_ptxas(log);
        let archs: Vec<&str> = parts.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(archs, ["sm_90a", "sm_120a"]);
        assert!(parts[0].1.contains("54 registers") && parts[0].1.contains("C7512") && !parts[0].1.contains("40"));
        assert!(parts[1].1.contains("40 registers") && !parts[1].1.contains("gmem"));
    }
}
