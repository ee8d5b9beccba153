//! Helpers shared by the tasks.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of this crate's manifest directory).
pub fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().expect("xtask lives one level below the workspace root").to_path_buf()
}

/// Where builds and everything installed or generated "under target/" go:
/// `CARGO_TARGET_DIR` if set (a relative one taken from the workspace root, where the
/// nested cargo runs), else `<root>/target`. The rule is
/// `blockscale_kernel_build::dirs::target_dir`, by which blockscale-cuda's build.rs
/// finds the toolchain and keeps its CUTLASS cache.
pub fn target_dir() -> PathBuf {
    blockscale_kernel_build::dirs::target_dir(&root())
}

/// The cargo that runs us, for nested invocations: from the workspace root, with
/// `CARGO_TARGET_DIR` (when set) made absolute, so it, its build scripts and tests see
/// the directory [`target_dir`] names.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    if std::env::var_os("CARGO_TARGET_DIR").is_some_and(|d| !d.is_empty()) {
        cmd.env("CARGO_TARGET_DIR", target_dir());
    }
    cmd
}

/// Runs a command, echoing it, and fails with its status if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {}", describe(cmd));
    let status = cmd.status().with_context(|| format!("could not start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}
