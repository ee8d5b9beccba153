//! `cargo xtask`: the project's automation (matklad's xtask convention).
//!
//! `main` parses and dispatches; each task lives in its own module.

mod setup_cuda;
mod test;
mod util;

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
  help            this text
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((t, r)) => (t.as_str(), r),
        None => ("help", &[][..]),
    };
    let flag = |name: &str| rest.iter().any(|a| a == name);
    if let Some(unknown) = rest.iter().find(|a| !["--force", "--no-lint"].contains(&a.as_str())) {
        bail!("unknown option {unknown:?}\n\n{HELP}");
    }
    match task {
        "test" => test::run(!flag("--no-lint")),
        "setup-cuda" => setup_cuda::cuda(flag("--force")).map(|home| {
            println!("CUDA toolchain ready: {}", home.display());
        }),
        "setup-python" => setup_cuda::python(flag("--force")).map(|dir| {
            println!("Python oracles ready: {}", dir.display());
        }),
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n\n{HELP}"),
    }
}
