//! `cargo xtask kernels`: checks what blockscale-cuda's build.rs compiled, without
//! compiling anything again. It builds the crate (a no-op when nothing changed) and reads
//! build.rs's cache entries (`blockscale_kernel_build::cache`, listed in the manifests of
//! `<target dir>/kernel-cache/` and `<target dir>/cutlass-cache/`). For every own kernel
//! on each target architecture it prints registers, spills and stack and fails on any
//! spill, stack frame or serialized wgmma (ptxas C7510-C7515), and it checks in the
//! sm_120a SASS that each quantize kernel converts with the hardware instruction for
//! its element format. Each CUTLASS GEMM kernel must have no spills, no stack, no
//! serialized wgmma (ptxas warning C7510) and its tensor-core instruction.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use blockscale_formats::{ElementFormat, Scheme};
use blockscale_kernel_build::KernelBuild;
use blockscale_kernel_build::cache::Cache;

use crate::setup_cuda;
use crate::util::{root, target_dir};

/// The architecture whose SASS has the hardware conversions [`sass_expected`] checks
/// (one of the targets of kernels/nvcc_flags.txt).
const SASS_CHECK_ARCH: &str = "sm_120a";

/// ptxas's account of one kernel on one architecture.
#[derive(Clone, Copy, Default)]
struct Usage {
    registers: u32,
    spill_bytes: u32,
    stack_bytes: u32,
}

/// The SASS conversion each quantize kernel must contain on sm_120a, by name prefix:
/// for every scheme of [`Scheme::ALL`] with a float element, `quantize_{scheme}_` and
/// `F2FP.SATFINITE.{ELEMENT}`. INT4 rounds in software on every architecture.
fn sass_expected() -> Vec<(String, String)> {
    Scheme::ALL
        .into_iter()
        .filter(|s| s.element() != ElementFormat::Int4)
        .map(|s| {
            let name = s.name().replace('-', "_");
            (format!("quantize_{name}_"), format!("F2FP.SATFINITE.{}", s.element().name().to_uppercase()))
        })
        .collect()
}

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
    setup_cuda::cuda(false)?;
    let nvdisasm = setup_cuda::nvdisasm(false)?;
    let build = KernelBuild::read(&root())?;
    let archs = &build.archs;
    // The manifests list what the last build compiled; build to make them current (a
    // no-op when nothing changed, and it never recompiles a cached kernel).
    crate::util::run(crate::util::cargo().args(["build", "-q", "-p", "blockscale-cuda"]))?;
    let modules = Cache::modules(&target_dir()).read_manifest()?;

    let mut usage: BTreeMap<String, Vec<Option<Usage>>> = BTreeMap::new();
    let mut problems = Vec::new();
    if !archs.iter().any(|a| a.name() == SASS_CHECK_ARCH) {
        problems.push(format!("the SASS checks' {SASS_CHECK_ARCH} is not a target of kernels/nvcc_flags.txt"));
    }
    if modules.len() != build.modules.len() {
        problems.push(format!(
            "the kernel cache lists {} modules, kernels/ has {}",
            modules.len(),
            build.modules.len()
        ));
    }
    for module in &modules {
        let stem = &module.stem;
        for (a, arch) in archs.iter().enumerate() {
            if !module.archs().any(|m| m == arch.name()) {
                problems.push(format!("{stem}: the kernel cache has no build for {arch}"));
                continue;
            }
            let cubin = module.arch_cubin(arch.name());
            let log_path = module.arch_ptxas_log(arch.name());
            let log = std::fs::read_to_string(&log_path).with_context(|| format!("reading {}", log_path.display()))?;
            // wgmma serialized by ptxas (C7510-C7515: a call, too few registers, or a
            // register operand written while its group is in flight) loses its overlap.
            for code in ["C7510", "C7511", "C7512", "C7513", "C7514", "C7515"] {
                if log.contains(code) {
                    problems.push(format!("{stem} on {arch}: ptxas serialized wgmma instructions ({code})"));
                }
            }
            for (name, u) in parse_ptxas(&log) {
                usage.entry(name).or_insert_with(|| vec![None; archs.len()])[a] = Some(u);
            }
            if arch.name() == SASS_CHECK_ARCH {
                problems.extend(check_sass(&nvdisasm, &cubin)?);
            }
        }
    }

    let header: String = archs.iter().map(|arch| format!(" {:>22}", format!("{arch} regs/spill/stack"))).collect();
    println!("{:<36}{header}", "kernel");
    for (name, per_arch) in &usage {
        let cell = |u: &Option<Usage>| {
            u.map_or("-".to_string(), |u| format!("{} / {} / {}", u.registers, u.spill_bytes, u.stack_bytes))
        };
        let cells: String = per_arch.iter().map(|u| format!(" {:>22}", cell(u))).collect();
        println!("{name:<36}{cells}");
        for (arch, u) in archs.iter().zip(per_arch) {
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
            "\nkernels: {} kernels and {gemm_kernels} CUTLASS GEMM kernels, no spills, {SASS_CHECK_ARCH} SASS conversions \
             and GEMM tensor-core instructions present",
            usage.len()
        );
        Ok(())
    } else {
        bail!("kernel checks failed:\n  {}", problems.join("\n  "))
    }
}

/// The CUTLASS shims from build.rs's cache (`run` built the crate): per kernel
/// registers, spills, stack; C7510; the tensor-core instruction.
/// Returns the number of kernels checked.
fn check_cutlass(nvdisasm: &Path, problems: &mut Vec<String>) -> Result<usize> {
    let shims = Cache::cutlass(&target_dir()).read_manifest()?;
    println!(
        "\n{:<28} {:<8} {:>8} {:>14} {:>10} {:>7}  tensor-core MMA",
        "CUTLASS shim", "arch", "kernels", "regs", "spill/stack", "stages"
    );
    let mut count = 0;
    for shim in &shims {
        let (stem, arch) = (&shim.stem, &shim.arch);
        let log =
            std::fs::read_to_string(shim.ptxas_log()).with_context(|| format!("reading {stem}'s ptxas report"))?;
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
        let cubin = shim.cubin();
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
    let expected = sass_expected();
    for (name, body) in &functions {
        if let Some((_, instr)) = expected.iter().find(|(prefix, _)| name.starts_with(prefix.as_str())) {
            checked += 1;
            if !body.contains(instr.as_str()) {
                problems.push(format!("{name} ({SASS_CHECK_ARCH}): no {instr} in its SASS"));
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
    fn every_float_scheme_has_its_hardware_conversion() {
        let want = [
            ("quantize_nvfp4_", "E2M1"),
            ("quantize_mxfp4_", "E2M1"),
            ("quantize_mxfp6_e2m3_", "E2M3"),
            ("quantize_mxfp6_e3m2_", "E3M2"),
            ("quantize_mxfp8_e4m3_", "E4M3"),
            ("quantize_mxfp8_e5m2_", "E5M2"),
            ("quantize_fp8_block_1x128_", "E4M3"),
            ("quantize_fp8_block_128x128_", "E4M3"),
        ];
        let want: Vec<(String, String)> =
            want.iter().map(|(p, e)| (p.to_string(), format!("F2FP.SATFINITE.{e}"))).collect();
        assert_eq!(sass_expected(), want);
    }

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
