//! `cargo xtask peers`: checks what `blockscale quantize` writes against the libraries
//! users load checkpoints with. compressed-tensors' own dequantizers read each
//! compressed-tensors (and DeepSeek-layout) output to the values `blockscale dequantize`
//! gives, and ModelOpt's NVFP4 and FP8 quantizers produce the bytes blockscale writes
//! for the ModelOpt recipes. Installs PyTorch (CPU use only), compressed-tensors and
//! nvidia-modelopt from PyPI under `target/peers` (about 6 GB); not part of CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup_cuda::{python_interpreter, stamped_install};
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
    /// `--scheme`.
    scheme: &'static str,
    /// `--convention`.
    convention: &'static str,
    /// Further `quantize` arguments.
    args: &'static [&'static str],
    peer: Peer,
    /// For a dequantizer peer, the dtype it computes in (and so the one to compare at):
    /// compressed-tensors unpacks FP4 to bf16, multiplies INT4 in its scale's dtype
    /// (f16 here), and FP8 in f32; FP8BlockDequantizer works in f32.
    dtype: &'static str,
}

impl Case {
    /// `quantize --scheme scheme --convention convention`, judged by `peer`.
    const fn new(
        name: &'static str,
        scheme: &'static str,
        convention: &'static str,
        peer: Peer,
        dtype: &'static str,
    ) -> Self {
        Self { name, scheme, convention, args: &[], peer, dtype }
    }

    /// With `args` after `--scheme` and `--convention`.
    const fn with_args(self, args: &'static [&'static str]) -> Self {
        Self { args, ..self }
    }
}

const CASES: &[Case] = &[
    Case::new("compressed-tensors nvfp4", "nvfp4", "compressed-tensors", Peer::CompressedTensors, "bf16"),
    Case::new("compressed-tensors mxfp4", "mxfp4", "compressed-tensors", Peer::CompressedTensors, "bf16"),
    Case::new("compressed-tensors int4-g32", "int4-g32", "compressed-tensors", Peer::CompressedTensors, "f16"),
    Case::new("compressed-tensors int4-g128", "int4-g128", "compressed-tensors", Peer::CompressedTensors, "f16"),
    Case::new("compressed-tensors fp8-block", "fp8-block", "compressed-tensors", Peer::CompressedTensors, "f32"),
    Case::new("deepseek fp8-block", "fp8-block", "deepseek", Peer::Fp8Block, "f32"),
    Case::new("modelopt nvfp4 --recipe modelopt (calibrated)", "nvfp4", "modelopt", Peer::ModeloptNvfp4, "")
        .with_args(&["--recipe", "modelopt", "--calibration", "acts.safetensors"]),
    Case::new("modelopt fp8 (per tensor)", "fp8-per-tensor", "modelopt", Peer::ModeloptFp8, ""),
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
    stamped_install(dir, PEER_PACKAGES, force, || {
        let mut cmd = Command::new(python_interpreter()?);
        cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
            .arg(dir)
            .args(PEER_PACKAGES);
        run(&mut cmd).context("installing the peers from PyPI failed: is pypi.org reachable?")
    })
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
    let quantize = ["quantize", "orig", "-o", &q, "-q", "--scheme", case.scheme, "--convention", case.convention];
    blockscale(cli, work, &[&quantize[..], case.args].concat())?;
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
