//! Helpers shared by the tasks.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of this crate's manifest directory).
pub fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().expect("xtask lives one level below the workspace root").to_path_buf()
}

/// The cargo that runs us, for nested invocations.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
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
