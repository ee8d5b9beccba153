//! `cargo xtask test`: everything CI checks, in one command.

use anyhow::Result;

use crate::setup_cuda;
use crate::util::{self, cargo};

/// Installs the oracles when missing, then runs fmt, clippy (also for the formats
/// crate without `alloc`), every test including the ignored exhaustive sweeps with the
/// oracle locations in the environment (blockscale-cuda's GPU tests skip without a
/// GPU), `verify --backend cpu` over the golden files, the kernel checks of `cargo
/// xtask kernels`, the README's main command (`blockscale eval --demo`), the
/// formats example and, when the nightly toolchain and cargo-fuzz are installed (and
/// `fuzz` is set), 30 s of each fuzz target (skipped with a message otherwise). Under
/// `CI=true` the oracle tests treat a missing oracle as a failure; outside CI they
/// skip with a message; this command installs them first and requires them.
pub fn run(lint: bool, fuzz: bool) -> Result<()> {
    let cuda_home = setup_cuda::cuda(false)?;
    let python_dir = setup_cuda::python(false)?;

    if lint {
        util::run(cargo().args(["fmt", "--all", "--", "--check"]))?;
        util::run(cargo().args(["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"]))?;
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
    // `--include-ignored` adds the sweeps over all 2^32 f32 inputs (a few minutes).
    // The oracles were just installed, so a missing one is a failure here too.
    util::run(
        cargo()
            .args(["test", "--workspace", "--", "--include-ignored"])
            .env("BLOCKSCALE_CUDA_HOME", &cuda_home)
            .env("BLOCKSCALE_PYTHONPATH", &python_dir)
            .env("BLOCKSCALE_REQUIRE_ORACLES", "1"),
    )?;
    // Every golden case recomputed by the CPU backend: a change to the CPU numerics
    // fails here until the files are regenerated on purpose (`cargo xtask golden`).
    crate::verify::run("cpu", None, None)?;
    // Registers, spills and the sm_120a SASS conversions of every kernel.
    crate::kernels::run()?;
    // The main job of the README, as a user runs it, and the formats example.
    let plot = util::target_dir().join("eval-demo.svg");
    util::run(
        cargo()
            .args(["run", "--release", "--quiet", "-p", "blockscale-cli", "--", "eval", "--demo", "--force", "--plot"])
            .arg(&plot),
    )?;
    util::run(cargo().args(["run", "--release", "--quiet", "--example", "formats"]))?;
    // A quantized MLP layer written, loaded through `blockscale::checkpoint` and run, and
    // a program outside the workspace reading a checkpoint of every convention (its own
    // lock file, this target dir: the shared dependencies are built once).
    util::run(cargo().args(["run", "--release", "--quiet", "--example", "checkpoint_mlp"]))?;
    let external = util::root().join("tests/external-reader/Cargo.toml");
    util::run(
        cargo()
            .args(["run", "--release", "--quiet", "--manifest-path"])
            .arg(&external)
            .env("CARGO_TARGET_DIR", util::target_dir()),
    )?;
    // Bad input: each cargo-fuzz target briefly (the long runs are `cargo xtask fuzz`).
    if fuzz {
        crate::fuzz::smoke()?;
    }
    eprintln!("xtask test: all checks passed");
    Ok(())
}
