//! `cargo xtask`: the project's automation (matklad's xtask convention).
//!
//! `main` parses and dispatches; each task lives in its own module.

mod bench;
mod gpu_bundle;
mod kernels;
mod setup_cuda;
mod test;
mod util;
mod verify;

use anyhow::{Result, bail};

const HELP: &str = "\
cargo xtask <task>

tasks:
  test            fmt check, clippy -D warnings, every test (NVIDIA and ml_dtypes
                  oracles included; installs them under target/ when missing)
    --no-lint       skip fmt and clippy
  setup-cuda      install the pinned CUDA 13.0 toolchain from PyPI into target/
    --force         reinstall even if present
  setup-python    install the Python test oracles (ml_dtypes, numpy) into target/
  kernels         per-kernel registers and spills (must be zero) for sm_90a and sm_120a,
                  and the sm_120a SASS check for the hardware conversions
  bench           benchmarks, each with its anchor measured in the same run
    --backend B     cpu (default: criterion) or cuda (needs a GPU here)
  verify          check a backend against the reference
    --backend B     cuda: every kernel against the CPU on this machine's GPU (fails
                    without one); cpu and all arrive with the golden files
  gpu-bundle      build the CUDA tests and benches into gpu-bundle/ with a run script
  help            this text
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((t, r)) => (t.as_str(), r),
        None => ("help", &[][..]),
    };
    let flag = |name: &str| rest.iter().any(|a| a == name);
    // `--backend B` (or `--backend=B`); the rest are plain flags.
    let mut backend = None;
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        if a == "--backend" {
            let Some(b) = rest.get(i + 1) else { bail!("--backend needs a value (cpu or cuda)\n\n{HELP}") };
            backend = Some(b.clone());
            i += 2;
            continue;
        }
        if let Some(b) = a.strip_prefix("--backend=") {
            backend = Some(b.to_string());
        } else if !["--force", "--no-lint"].contains(&a) {
            bail!("unknown option {a:?}\n\n{HELP}");
        }
        i += 1;
    }
    match task {
        "test" => test::run(!flag("--no-lint")),
        "setup-cuda" => setup_cuda::cuda(flag("--force")).map(|home| {
            println!("CUDA toolchain ready: {}", home.display());
        }),
        "setup-python" => setup_cuda::python(flag("--force")).map(|dir| {
            println!("Python oracles ready: {}", dir.display());
        }),
        "gpu-bundle" => gpu_bundle::run(),
        "kernels" => kernels::run(),
        "bench" => bench::run(backend.as_deref().unwrap_or("cpu")),
        "verify" => match backend {
            Some(b) => verify::run(&b),
            None => bail!("verify needs --backend (cuda)\n\n{HELP}"),
        },
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n\n{HELP}"),
    }
}
