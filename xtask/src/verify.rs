//! `cargo xtask verify --backend cpu|cuda|all [--filter TEXT] [--dir DIR]`: recomputes
//! every golden case (tests/golden/, written by `cargo xtask golden`) with the backend
//! and compares, through the `blockscale-golden` binary. One line per check, a summary,
//! a non-zero exit on any failure. A backend that cannot run (no GPU, no CUDA toolchain)
//! is an error, never a silent skip.
//!
//! `--backend cuda` also runs blockscale-cuda's GPU suite, which compares every kernel
//! with the CPU on many more cases (every f16 and bf16 pattern, strided inputs).

use anyhow::{Result, bail};

use crate::setup_cuda;
use crate::util::{self, cargo};

pub fn run(backend: &str, filter: Option<&str>, dir: Option<&str>) -> Result<()> {
    if !["cpu", "cuda", "all"].contains(&backend) {
        bail!("unknown backend {backend:?}: expected cpu, cuda or all");
    }
    let gpu = backend != "cpu";
    let mut cmd = cargo();
    cmd.args(["run", "--release", "-q", "-p", "blockscale-golden"]);
    if gpu {
        setup_cuda::cuda(false)?;
        cmd.args(["--features", "cuda"]);
    }
    cmd.args(["--", "--backend", backend]);
    if let Some(f) = filter {
        cmd.args(["--filter", f]);
    }
    if let Some(d) = dir {
        cmd.args(["--dir", d]);
    }
    util::run(&mut cmd)?;
    if gpu {
        util::run(
            cargo()
                .args(["test", "--release", "-p", "blockscale-cuda", "--test", "gpu", "--", "--test-threads=1"])
                .env("BLOCKSCALE_REQUIRE_GPU", "1"),
        )?;
    }
    Ok(())
}
