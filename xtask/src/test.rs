//! `cargo xtask test`: everything CI checks, in one command.

use anyhow::Result;

use crate::setup_cuda;
use crate::util::{self, cargo};

/// Installs the oracles when missing, then runs fmt, clippy and every test with the
/// oracle locations in the environment. Under `CI=true` the oracle tests treat a
/// missing oracle as a failure.
pub fn run(lint: bool) -> Result<()> {
    let cuda_home = setup_cuda::cuda(false)?;
    let python_dir = setup_cuda::python(false)?;

    if lint {
        util::run(cargo().args(["fmt", "--all", "--", "--check"]))?;
        util::run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
        util::run(cargo().args([
            "clippy",
            "-p",
            "blockscale-formats",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    util::run(
        cargo()
            .args(["test", "--workspace"])
            .env("BLOCKSCALE_CUDA_HOME", &cuda_home)
            .env("BLOCKSCALE_PYTHONPATH", &python_dir),
    )?;
    // The main job of the README, as a user runs it.
    util::run(cargo().args(["run", "--release", "--quiet", "--example", "formats"]))?;
    eprintln!("xtask test: all checks passed");
    Ok(())
}
