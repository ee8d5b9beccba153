//! `cargo xtask kernels`: compiles every own kernel source for each target architecture
//! with the flags build.rs uses, prints per-kernel registers, spills and stack, fails on
//! any spill, stack frame or serialized wgmma (ptxas C7510-C7515), and checks in the sm_120a SASS that each quantize kernel
//! converts with the hardware instruction for its element format. The CUTLASS GEMM shims
//! are not compiled again: build.rs's cache entries (ptxas report and cubin, listed in
//! `<target dir>/cutlass-cache/manifest.txt`) are read, and each kernel must have no spills, no
//! stack, no serialized wgmma (ptxas warning C7510) and its tensor-core instruction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup_cuda;
use crate::util::{root, target_dir};

/// The architectures of the fatbin (as in kernels/nvcc_flags.txt).
const ARCHS: [&str; 2] = ["sm_90a", "sm_120a"];

/// ptxas's account of one kernel on one architecture.
#[derive(Clone, Copy, Default)]
struct Usage {
    registers: u32,
    spill_bytes: u32,
    stack_bytes: u32,
}

/// The SASS conversion each quantize kernel must contain on sm_120a, by name prefix.
/// INT4 rounds in software on every architecture.
const SASS_EXPECTED: &[(&str, &str)] = &[
    ("quantize_nvfp4_", "F2FP.SATFINITE.E2M1"),
    ("quantize_mxfp4_", "F2FP.SATFINITE.E2M1"),
    ("quantize_mxfp6_e2m3_", "F2FP.SATFINITE.E2M3"),
    ("quantize_mxfp6_e3m2_", "F2FP.SATFINITE.E3M2"),
    ("quantize_mxfp8_e4m3_", "F2FP.SATFINITE.E4M3"),
    ("quantize_mxfp8_e5m2_", "F2FP.SATFINITE.E5M2"),
    ("quantize_fp8_block_", "F2FP.SATFINITE.E4M3"),
];

/// The tensor-core instruction each CUTLASS shim's kernels must contain, by shim prefix.
/// On sm_120a: the block-scaled MMAs (OMMA.SF for the FP4 kinds, QMMA.SF for
/// mxf8f6f4, with the element and scale types of the pair), and for FP8 block the plain
/// FP8 MMA (its scales are applied in f32 by the mainloop).
const GEMM_SASS: &[(&str, &str)] = &[
    ("sm90_bf16_", "HGMMA."),
    ("sm90_fp8_block_", "QGMMA."),
    ("sm120_nvfp4_", "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3"),
    ("sm120_mxfp4_", "OMMA.SF.16864.F32.E2M1.E2M1.E8"),
    ("sm120_mxfp8_e4m3_", "QMMA.SF.16832.F32.E4M3.E4M3.E8"),
    ("sm120_mxfp8_e5m2_", "QMMA.SF.16832.F32.E5M2.E5M2.E8"),
    ("sm120_mxfp8_mxfp6_", "QMMA.SF.16832.F32.E4M3.E2M3.E8"),
    ("sm120_fp8_block_", "QMMA.16832.F32.E4M3.E4M3"),
];

/// The mainloop's pipeline stages, read from a CUTLASS kernel's mangled name (the first
/// template argument of its `Mainloop...` dispatch policy): with the 128-wide tiles each
/// stage holds one A and one B tile in shared memory.
fn stages(kernel: &str) -> Option<u32> {
    let rest = &kernel[kernel.find("Mainloop")?..];
    let rest = &rest[rest.find("ILi")? + 3..];
    rest[..rest.find('E')?].parse().ok()
}

pub fn run() -> Result<()> {
    let home = setup_cuda::cuda(false)?;
    let nvdisasm = setup_cuda::nvdisasm(false)?;
    let nvcc = home.join("bin").join("nvcc");
    let kernels = root().join("kernels");
    let flags = read_flags(&kernels.join("nvcc_flags.txt"))?;
    let out = target_dir().join("kernels-check");
    std::fs::create_dir_all(&out)?;

    let mut usage: BTreeMap<String, [Option<Usage>; 2]> = BTreeMap::new();
    let mut problems = Vec::new();
    for src in sources(&kernels)? {
        let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("kernel").to_string();
        for (a, arch) in ARCHS.iter().enumerate() {
            let cubin = out.join(format!("{stem}.{arch}.cubin"));
            let log = compile(&nvcc, &flags, arch, &src, &cubin)?;
            // wgmma serialized by ptxas (C7510-C7515: a call, too few registers, or a
            // register operand written while its group is in flight) loses its overlap.
            for code in ["C7510", "C7511", "C7512", "C7513", "C7514", "C7515"] {
                if log.contains(code) {
                    problems.push(format!("{stem} on {arch}: ptxas serialized wgmma instructions ({code})"));
                }
            }
            for (name, u) in parse_ptxas(&log) {
                usage.entry(name).or_default()[a] = Some(u);
            }
            if *arch == "sm_120a" {
                problems.extend(check_sass(&nvdisasm, &cubin)?);
            }
        }
    }

    println!("{:<36} {:>22} {:>22}", "kernel", "sm_90a regs/spill/stack", "sm_120a regs/spill/stack");
    for (name, per_arch) in &usage {
        let cell = |u: &Option<Usage>| {
            u.map_or("-".to_string(), |u| format!("{} / {} / {}", u.registers, u.spill_bytes, u.stack_bytes))
        };
        println!("{name:<36} {:>22} {:>22}", cell(&per_arch[0]), cell(&per_arch[1]));
        for (arch, u) in ARCHS.iter().zip(per_arch) {
            match u {
                None => problems.push(format!("{name}: not compiled for {arch}")),
                Some(u) if u.spill_bytes > 0 || u.stack_bytes > 0 => problems.push(format!(
                    "{name} on {arch}: {} bytes spilled, {} bytes of stack (must be zero)",
                    u.spill_bytes, u.stack_bytes
                )),
                Some(_) => {}
            }
        }
    }
    let gemm_kernels = check_cutlass(&nvdisasm, &mut problems)?;
    if problems.is_empty() {
        println!(
            "\nkernels: {} kernels and {gemm_kernels} CUTLASS GEMM kernels, no spills, sm_120a SASS conversions \
             and GEMM tensor-core instructions present",
            usage.len()
        );
        Ok(())
    } else {
        bail!("kernel checks failed:\n  {}", problems.join("\n  "))
    }
}

/// The CUTLASS shims from build.rs's cache (building the crate first if the manifest is
/// missing): per kernel registers, spills, stack; C7510; the tensor-core instruction.
/// Returns the number of kernels checked.
fn check_cutlass(nvdisasm: &Path, problems: &mut Vec<String>) -> Result<usize> {
    let cache = target_dir().join("cutlass-cache");
    let manifest = cache.join("manifest.txt");
    // The manifest lists what the last build linked; build to make it current (a no-op
    // when nothing changed, and it never recompiles a cached shim).
    crate::util::run(crate::util::cargo().args(["build", "-q", "-p", "blockscale-cuda"]))?;
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let mut shims: Vec<(String, String, PathBuf)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(stem), Some(arch), Some(dir)) => shims.push((stem.into(), arch.into(), PathBuf::from(dir))),
            _ => bail!("{}: malformed line {line:?}", manifest.display()),
        }
    }
    println!(
        "\n{:<28} {:<8} {:>8} {:>14} {:>10} {:>7}  tensor-core MMA",
        "CUTLASS shim", "arch", "kernels", "regs", "spill/stack", "stages"
    );
    let mut count = 0;
    for (stem, arch, dir) in &shims {
        let log =
            std::fs::read_to_string(dir.join("ptxas.log")).with_context(|| format!("reading {stem}'s ptxas report"))?;
        let kernels = parse_ptxas(&log);
        if kernels.is_empty() {
            problems.push(format!("{stem}: its ptxas report lists no kernel"));
        }
        if log.contains("C7510") {
            problems.push(format!("{stem}: ptxas serialized wgmma instructions (C7510): a function call in a kernel"));
        }
        let regs: Vec<String> = kernels.iter().map(|(_, u)| u.registers.to_string()).collect();
        let (spill, stack) = kernels.iter().fold((0, 0), |(a, b), (_, u)| (a + u.spill_bytes, b + u.stack_bytes));
        if spill > 0 || stack > 0 {
            problems.push(format!("{stem}: {spill} bytes spilled, {stack} bytes of stack (must be zero)"));
        }
        let cubin = dir.join(format!("{stem}.cubin"));
        let output =
            Command::new(nvdisasm).arg(&cubin).output().with_context(|| format!("running {}", nvdisasm.display()))?;
        if !output.status.success() {
            bail!("nvdisasm failed on {}: {}", cubin.display(), String::from_utf8_lossy(&output.stderr));
        }
        let sass = String::from_utf8_lossy(&output.stdout);
        let want = GEMM_SASS.iter().find(|(p, _)| stem.starts_with(p)).map(|(_, i)| *i);
        let found = match want {
            Some(instr) => {
                let n = sass.matches(instr).count();
                if n == 0 {
                    problems.push(format!("{stem} ({arch}): no {instr} in its SASS"));
                }
                format!("{n} x {}", instr.trim_end_matches('.'))
            }
            None => {
                problems.push(format!("{stem}: no expected tensor-core instruction is listed for it in xtask"));
                "-".into()
            }
        };
        let stage_counts: Vec<String> =
            kernels.iter().map(|(name, _)| stages(name).map_or("?".into(), |s| s.to_string())).collect();
        println!(
            "{stem:<28} {arch:<8} {:>8} {:>14} {:>10} {:>7}  {found}",
            kernels.len(),
            regs.join(","),
            format!("{spill}/{stack}"),
            stage_counts.join(",")
        );
        count += kernels.len();
    }
    Ok(count)
}

/// Every `.cu` under kernels/ except the shared headers in common/, sorted.
fn sources(kernels: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut dirs = vec![kernels.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            // common/ holds headers; cutlass/ is built (and cached) by build.rs.
            if path.is_dir() && path.file_name().is_some_and(|n| n != "common" && n != "cutlass") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "cu") {
                found.push(path);
            }
        }
    }
    found.sort();
    if found.is_empty() {
        bail!("no .cu files under {}", kernels.display());
    }
    Ok(found)
}

/// The flags file without its `-gencode` lines (each compile here names one target).
fn read_flags(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with("-gencode"))
        .map(str::to_string)
        .collect())
}

/// Compiles one source to a cubin for `arch` and returns ptxas's verbose report.
fn compile(nvcc: &Path, flags: &[String], arch: &str, src: &Path, cubin: &Path) -> Result<String> {
    let compute = arch.replace("sm_", "compute_");
    let output = Command::new(nvcc)
        .args(flags)
        .arg(format!("-gencode=arch={compute},code={arch}"))
        .args(["-cubin", "-Xptxas", "-v", "-o"])
        .arg(cubin)
        .arg(src)
        .output()
        .with_context(|| format!("running {}", nvcc.display()))?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        bail!("nvcc failed on {} for {arch}:\n{log}", src.display());
    }
    Ok(log)
}

/// Per-kernel usage from `-Xptxas -v` output: "Function properties for NAME" is followed
/// by the stack/spill line, then "Used N registers".
fn parse_ptxas(log: &str) -> Vec<(String, Usage)> {
    let mut found = Vec::new();
    let mut current: Option<(String, Usage)> = None;
    let number_before = |line: &str, word: &str| -> u32 {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.windows(2).find(|w| w[1].trim_end_matches(',') == word).and_then(|w| w[0].parse().ok()).unwrap_or(0)
    };
    for line in log.lines() {
        if let Some(name) = line.split("Function properties for ").nth(1) {
            if let Some(done) = current.take() {
                found.push(done);
            }
            current = Some((name.trim().to_string(), Usage::default()));
        } else if let Some((_, u)) = current.as_mut() {
            if line.contains("bytes stack frame") {
                u.stack_bytes = number_before(line, "bytes");
                let spill = line.split(',').map(|part| number_before(part, "bytes")).skip(1).sum();
                u.spill_bytes = spill;
            } else if line.contains("registers") {
                u.registers = number_before(line, "registers");
            }
        }
    }
    found.extend(current);
    found
}

/// Disassembles an sm_120a cubin and checks each quantize kernel's conversion.
fn check_sass(nvdisasm: &Path, cubin: &Path) -> Result<Vec<String>> {
    let output =
        Command::new(nvdisasm).arg(cubin).output().with_context(|| format!("running {}", nvdisasm.display()))?;
    if !output.status.success() {
        bail!("nvdisasm failed on {}: {}", cubin.display(), String::from_utf8_lossy(&output.stderr));
    }
    let sass = String::from_utf8_lossy(&output.stdout);
    // Functions start at labels `.text.NAME:`.
    let mut functions: Vec<(&str, String)> = Vec::new();
    for line in sass.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix(".text.").and_then(|n| n.strip_suffix(':')) {
            functions.push((name, String::new()));
        } else if let Some((_, body)) = functions.last_mut() {
            body.push_str(t);
            body.push('\n');
        }
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for (name, body) in &functions {
        if let Some((_, instr)) = SASS_EXPECTED.iter().find(|(prefix, _)| name.starts_with(prefix)) {
            checked += 1;
            if !body.contains(instr) {
                problems.push(format!("{name} (sm_120a): no {instr} in its SASS"));
            }
        }
    }
    let needs_check = functions.iter().any(|(n, _)| n.starts_with("quantize_"));
    if needs_check && checked == 0 {
        problems.push(format!("{}: quantize kernels found but none matched the SASS table", cubin.display()));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_verbose_output() {
        let log = "ptxas info    : Compiling entry function 'k1' for 'sm_90a'\n\
                   ptxas info    : Function properties for k1\n\
                   \x20   16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 54 registers, used 0 barriers\n\
                   ptxas info    : Function properties for k2\n\
                   \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                   ptxas info    : Used 40 registers, used 1 barriers, 512 bytes smem\n";
        let got = parse_ptxas(log);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].0.as_str(), got[0].1.registers, got[0].1.spill_bytes, got[0].1.stack_bytes),
            ("k1", 54, 12, 16)
        );
        assert_eq!(
            (got[1].0.as_str(), got[1].1.registers, got[1].1.spill_bytes, got[1].1.stack_bytes),
            ("k2", 40, 0, 0)
        );
    }
}
