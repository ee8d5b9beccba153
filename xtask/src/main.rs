//! `cargo xtask`: the project's automation (matklad's xtask convention).
//!
//! `main` parses and dispatches; each task lives in its own module.

mod bench;
mod bench_checkpoint;
mod fuzz;
mod golden;
mod gpu_bundle;
mod kernels;
mod peers;
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
    --no-fuzz       skip the 30 s run of each fuzz target (which runs only when the
                    nightly toolchain and cargo-fuzz are installed, else is skipped)
  fuzz [TARGET]   build the cargo-fuzz targets of fuzz/ (header, dequantize, index,
                  golden; needs `cargo +nightly` and `cargo install cargo-fuzz`) and run
                  TARGET, or each, seeded; crashes are saved under fuzz/artifacts/
    --seconds N     how long each runs (default 600)
  setup-cuda      install the pinned CUDA 13.0 toolchain from PyPI into target/
    --force         reinstall even if present
  setup-python    install the Python test oracles (ml_dtypes, numpy, safetensors) into target/
  kernels         per-kernel registers and spills (must be zero) for sm_90a and sm_120a,
                  and the sm_120a SASS check for the hardware conversions
  bench           benchmarks, each with its anchor measured in the same run
    --backend B     cpu (default: criterion) or cuda (needs a GPU here)
  bench-checkpoint
                  quantize a generated 2 GB bf16 checkpoint to NVFP4 with the release
                  CLI: throughput vs in-memory quantize, peak RSS (/usr/bin/time -v)
  peers           check what `quantize` writes with the libraries that load it:
                  compressed-tensors' dequantizers and ModelOpt's quantizers (installs
                  PyTorch and them from PyPI under target/peers, ~6 GB; not in CI)
    --force         reinstall the peers
  golden          write tests/golden/*.safetensors from the CPU reference (seeded)
    --seed N        the generator's seed (default 0x5eedb10c)
    --full          larger shapes, into target/golden-full/ (not committed)
    --out DIR       write somewhere else
  verify          recompute every golden case with a backend and compare
    --backend B     cpu, cuda (needs a GPU; fails without one) or all
    --filter TEXT   only the cases whose name contains TEXT
    --dir DIR       another golden directory (e.g. target/golden-full)
  gpu-bundle      build the CUDA tests and benches into gpu-bundle/ with a run script
  help            this text

Every path under target/ above (the installed toolchains, generated files, the built
binaries the tasks run) is under $CARGO_TARGET_DIR instead when that is set.
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
    let mut values = std::collections::HashMap::new();
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        if ["--backend", "--seed", "--out", "--filter", "--dir", "--seconds"].contains(&a) {
            let Some(v) = rest.get(i + 1) else { bail!("{a} needs a value\n\n{HELP}") };
            if a == "--backend" {
                backend = Some(v.clone());
            } else {
                values.insert(a, v.clone());
            }
            i += 2;
            continue;
        }
        if let Some(b) = a.strip_prefix("--backend=") {
            backend = Some(b.to_string());
        } else if task == "fuzz" && !a.starts_with('-') && !values.contains_key("target") {
            values.insert("target", a.to_string());
        } else if !["--force", "--no-lint", "--no-fuzz", "--full"].contains(&a) {
            bail!("unknown option {a:?}\n\n{HELP}");
        }
        i += 1;
    }
    match task {
        "test" => test::run(!flag("--no-lint"), !flag("--no-fuzz")),
        "fuzz" => {
            let seconds = match values.get("--seconds") {
                Some(s) => s.parse().map_err(|_| anyhow::anyhow!("--seconds {s:?}: not a number"))?,
                None => 600,
            };
            fuzz::run(values.get("target").map(String::as_str), seconds)
        }
        "setup-cuda" => setup_cuda::cuda(flag("--force")).map(|home| {
            println!("CUDA toolchain ready: {}", home.display());
        }),
        "setup-python" => setup_cuda::python(flag("--force")).map(|dir| {
            println!("Python oracles ready: {}", dir.display());
        }),
        "gpu-bundle" => gpu_bundle::run(),
        "kernels" => kernels::run(),
        "bench" => bench::run(backend.as_deref().unwrap_or("cpu")),
        "bench-checkpoint" => bench_checkpoint::run(),
        "peers" => peers::run_all(flag("--force")),
        "golden" => {
            let seed = match values.get("--seed") {
                Some(s) => {
                    let t = s.trim_start_matches("0x");
                    u64::from_str_radix(t, if s.starts_with("0x") { 16 } else { 10 })
                        .map_err(|_| anyhow::anyhow!("--seed {s:?}: not a number"))?
                }
                None => golden::SEED,
            };
            golden::run(flag("--full"), seed, values.get("--out").map(Into::into))
        }
        "verify" => match backend {
            Some(b) => {
                verify::run(&b, values.get("--filter").map(String::as_str), values.get("--dir").map(String::as_str))
            }
            None => bail!("verify needs --backend (cpu, cuda or all)\n\n{HELP}"),
        },
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n\n{HELP}"),
    }
}
