//! `cargo xtask peers`: checks what `blockscale quantize` writes against the libraries
//! users load checkpoints with. compressed-tensors' own dequantizers read each
//! compressed-tensors (and DeepSeek-layout) output to the values `blockscale dequantize`
//! gives, and ModelOpt's NVFP4 and FP8 quantizers produce the bytes blockscale writes
//! for the ModelOpt recipes. Installs PyTorch (CPU use only), compressed-tensors and
//! nvidia-modelopt from PyPI under `target/peers` (about 6 GB); not part of CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup_cuda::python_interpreter;
use crate::util::{cargo, root, run, target_dir};

/// The peers, pinned (the versions the results in docs/CLI.md were taken with).
pub const PEER_PACKAGES: &[&str] = &["torch==2.15.0", "compressed-tensors==0.20.0", "nvidia-modelopt==0.47.0"];

/// How a case's output is checked.
#[derive(Clone, Copy)]
enum Peer {
    /// compressed-tensors' `CompressedTensorsDequantizer` against `blockscale dequantize`.
    CompressedTensors,
    /// compressed-tensors' `FP8BlockDequantizer` (DeepSeek layout) against `blockscale dequantize`.
    Fp8Block,
    /// ModelOpt's `NVFP4QTensor.quantize` bytes against the written ones.
    ModeloptNvfp4,
    /// ModelOpt's `FP8QTensor.quantize` bytes against the written ones.
    ModeloptFp8,
}

/// One `quantize` invocation and the peer that judges it.
struct Case {
    name: &'static str,
    args: &'static [&'static str],
    peer: Peer,
    /// For a dequantizer peer, the dtype it computes in (and so the one to compare at):
    /// compressed-tensors unpacks FP4 to bf16, multiplies INT4 in its scale's dtype
    /// (f16 here), and FP8 in f32; FP8BlockDequantizer works in f32.
    dtype: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "compressed-tensors nvfp4",
        args: &["--scheme", "nvfp4", "--convention", "compressed-tensors"],
        peer: Peer::CompressedTensors,
        dtype: "bf16",
    },
    Case {
        name: "compressed-tensors mxfp4",
        args: &["--scheme", "mxfp4", "--convention", "compressed-tensors"],
        peer: Peer::CompressedTensors,
        dtype: "bf16",
    },
    Case {
        name: "compressed-tensors int4-g32",
        args: &["--scheme", "int4-g32", "--convention", "compressed-tensors"],
        peer: Peer::CompressedTensors,
        dtype: "f16",
    },
    Case {
        name: "compressed-tensors int4-g128",
        args: &["--scheme", "int4-g128", "--convention", "compressed-tensors"],
        peer: Peer::CompressedTensors,
        dtype: "f16",
    },
    Case {
        name: "compressed-tensors fp8-block",
        args: &["--scheme", "fp8-block", "--convention", "compressed-tensors"],
        peer: Peer::CompressedTensors,
        dtype: "f32",
    },
    Case {
        name: "deepseek fp8-block",
        args: &["--scheme", "fp8-block", "--convention", "deepseek"],
        peer: Peer::Fp8Block,
        dtype: "f32",
    },
    Case {
        name: "modelopt nvfp4 --recipe modelopt (calibrated)",
        args: &[
            "--scheme",
            "nvfp4",
            "--convention",
            "modelopt",
            "--recipe",
            "modelopt",
            "--calibration",
            "acts.safetensors",
        ],
        peer: Peer::ModeloptNvfp4,
        dtype: "",
    },
    Case {
        name: "modelopt fp8 (per tensor)",
        args: &["--scheme", "fp8-per-tensor", "--convention", "modelopt"],
        peer: Peer::ModeloptFp8,
        dtype: "",
    },
];

/// Where the peers are installed (a `--target` directory for `PYTHONPATH`).
fn peers_dir() -> PathBuf {
    target_dir().join("peers")
}

/// Installs the peers, builds the release CLI, runs every case; fails if any differs.
pub fn run_all(force: bool) -> Result<()> {
    let dir = peers_dir();
    install(&dir, force)?;
    run(cargo().args(["build", "--release", "-p", "blockscale-cli"]))?;
    let cli = target_dir().join("release").join("blockscale");
    let work = target_dir().join("peers-run");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let script = root().join("xtask").join("peers.py");
    let python = |args: &[&str]| -> Result<String> {
        let out = Command::new("python3")
            .arg(&script)
            .args(args)
            .env("PYTHONPATH", &dir)
            .current_dir(&work)
            .output()
            .context("could not start python3")?;
        if !out.status.success() {
            bail!("peers.py {}: {}", args.join(" "), last_line(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    python(&["make-checkpoint", "orig", "acts.safetensors"])?;
    let mut rows = Vec::new();
    for case in CASES {
        let verdict = run_case(case, &cli, &work, &python).unwrap_or_else(|e| (false, format!("{e:#}")));
        rows.push((case, verdict));
    }
    println!("\n| case | compared at | result | detail |\n|---|---|---|---|");
    for (case, (same, detail)) in &rows {
        let at = if case.dtype.is_empty() { "bytes" } else { case.dtype };
        println!("| {} | {at} | {} | {detail} |", case.name, if *same { "same" } else { "DIFFERS" });
    }
    let bad = rows.iter().filter(|(_, (same, _))| !same).count();
    if bad > 0 {
        bail!("{bad} of {} peer checks failed", rows.len());
    }
    Ok(())
}

/// Installs the peers with their dependencies, unless an install with the same pins is
/// there (`.blockscale-pins`).
fn install(dir: &Path, force: bool) -> Result<()> {
    let stamp = dir.join(".blockscale-pins");
    let want = PEER_PACKAGES.join("\n");
    if !force && std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let mut cmd = Command::new(python_interpreter()?);
    cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(dir)
        .args(PEER_PACKAGES);
    run(&mut cmd).context("installing the peers from PyPI failed: is pypi.org reachable?")?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// `(same, detail)` for one case.
fn run_case(
    case: &Case,
    cli: &Path,
    work: &Path,
    python: &dyn Fn(&[&str]) -> Result<String>,
) -> Result<(bool, String)> {
    let slug: String = case.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let q = format!("{slug}.q");
    blockscale(cli, work, &[&["quantize", "orig", "-o", &q, "-q"], case.args].concat())?;
    let line = match case.peer {
        Peer::CompressedTensors | Peer::Fp8Block => {
            let (peer_out, ours) = (format!("{slug}.peer.safetensors"), format!("{slug}.ours"));
            let command =
                if matches!(case.peer, Peer::CompressedTensors) { "ct-dequantize" } else { "fp8block-dequantize" };
            python(&[command, &q, &peer_out, "--dtype", case.dtype])?;
            blockscale(cli, work, &["dequantize", &q, "-o", &ours, "--dtype", case.dtype, "-q"])?;
            python(&["compare", &peer_out, &ours])?
        }
        Peer::ModeloptNvfp4 => python(&["modelopt-nvfp4", "orig", &q, "--calibration", "acts.safetensors"])?,
        Peer::ModeloptFp8 => python(&["modelopt-fp8", "orig", &q])?,
    };
    let v: serde_json::Value = serde_json::from_str(&line).with_context(|| format!("peers.py printed {line:?}"))?;
    Ok((v["same"].as_bool().unwrap_or(false), v["detail"].as_str().unwrap_or("").to_owned()))
}

fn blockscale(cli: &Path, work: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(cli).args(args).current_dir(work).output().context("could not start blockscale")?;
    if !out.status.success() {
        bail!("blockscale {}: {}", args.join(" "), last_line(&out.stderr));
    }
    Ok(())
}

/// The `error:` line of a failed command's stderr, else its last line.
fn last_line(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let mut lines = s.lines().map(str::trim).filter(|l| !l.is_empty());
    let error = lines.clone().find(|l| l.starts_with("error:") || l.contains("Error:"));
    error.or_else(|| lines.next_back()).unwrap_or("(no output)").to_owned()
}
