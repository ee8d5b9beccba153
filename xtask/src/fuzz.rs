//! `cargo xtask fuzz`: the cargo-fuzz targets of fuzz/ (nightly toolchain and
//! cargo-fuzz), each for a while, seeded; `cargo xtask test` runs each for 30 s when
//! both are installed and says that it skips them otherwise.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util;

/// The targets, in the order they run.
pub const TARGETS: [&str; 4] = ["header", "dequantize", "index", "golden"];

/// `cargo +nightly ...` through the rustup proxy, from fuzz/, without the variables
/// of the cargo that runs xtask (which would pin the stable toolchain).
fn nightly() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(util::root().join("fuzz"));
    for v in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC", "RUSTC_WRAPPER"] {
        cmd.env_remove(v);
    }
    cmd
}

/// Why the fuzz targets cannot run here (no nightly toolchain or no cargo-fuzz), or
/// `None` when they can.
pub fn missing() -> Option<&'static str> {
    let ok = |args: &[&str]| nightly().args(args).output().is_ok_and(|o| o.status.success());
    if !ok(&["--version"]) {
        Some("no nightly toolchain (rustup toolchain install nightly)")
    } else if !ok(&["fuzz", "--version"]) {
        Some("no cargo-fuzz (cargo install cargo-fuzz)")
    } else {
        None
    }
}

/// Seeds of `target` besides its corpus: the committed `fuzz/seeds/<target>`, and for
/// `golden` the four smallest golden files (copied under target/, not committed twice).
fn seeds(target: &str) -> Result<Vec<PathBuf>> {
    let committed = util::root().join("fuzz/seeds").join(target);
    let mut dirs: Vec<PathBuf> = committed.is_dir().then_some(committed).into_iter().collect();
    if target == "golden" {
        let dir = util::target_dir().join("fuzz-seeds/golden");
        std::fs::create_dir_all(&dir)?;
        let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(util::root().join("tests/golden"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        for (_, p) in files.iter().take(4) {
            let name = p.file_name().context("a golden file has a name")?;
            std::fs::copy(p, dir.join(name))?;
        }
        dirs.push(dir);
    }
    Ok(dirs)
}

/// Builds the targets (release, with debug assertions and overflow checks) and runs
/// `only` (or every target) for `seconds` each; a crash fails with the target's name
/// (the input is saved under `fuzz/artifacts/<target>/`).
pub fn run(only: Option<&str>, seconds: u64) -> Result<()> {
    if let Some(why) = missing() {
        bail!("cannot fuzz: {why}");
    }
    let targets: Vec<&str> = match only {
        Some(t) if TARGETS.contains(&t) => vec![t],
        Some(t) => bail!("unknown fuzz target {t:?} (targets: {})", TARGETS.join(", ")),
        None => TARGETS.to_vec(),
    };
    util::run(nightly().args(["fuzz", "build", "-O", "-a"]))?;
    for t in targets {
        let corpus = util::root().join("fuzz/corpus").join(t);
        std::fs::create_dir_all(&corpus)?;
        let mut cmd = nightly();
        cmd.args(["fuzz", "run", "-O", "-a", t]).arg(&corpus).args(seeds(t)?).args([
            "--".to_owned(),
            format!("-max_total_time={seconds}"),
            "-timeout=10".to_owned(),
            "-rss_limit_mb=2048".to_owned(),
            "-print_final_stats=1".to_owned(),
        ]);
        util::run(&mut cmd).with_context(|| format!("fuzz target {t} failed: see fuzz/artifacts/{t}/"))?;
    }
    Ok(())
}

/// `cargo xtask test`'s fuzz step: every target for 30 s, or a line saying why not.
pub fn smoke() -> Result<()> {
    match missing() {
        Some(why) => {
            eprintln!("xtask test: skipping the fuzz targets: {why}");
            Ok(())
        }
        None => run(None, 30),
    }
}
