//! Our encoders and decoders against NVIDIA's own host conversion functions
//! (`cuda_fp8.h`, `cuda_fp6.h`, `cuda_fp4.h` from the pinned PyPI toolchain), compiled
//! with g++ into a small program (tests/oracle/nvidia_oracle.cpp): byte equality for
//! every f16 and every bf16 input, for over a million chosen f32 inputs, and for the
//! decoded value of every code.
//!
//! The headers come from `cargo xtask setup-cuda` (or `BLOCKSCALE_CUDA_HOME`,
//! `CUDA_HOME`, `CUDA_PATH`). Without them the tests skip with a message, except under
//! `CI=true`, where a missing oracle fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, E8M0Rounding, UE8M0};
use half::{bf16, f16};

const COLUMNS: [&str; 11] = [
    "e4m3 satfinite",
    "e4m3 nosat",
    "e5m2 satfinite",
    "e5m2 nosat",
    "e2m1",
    "e2m3",
    "e3m2",
    "e8m0 rz satfinite",
    "e8m0 rz nosat",
    "e8m0 rp satfinite",
    "e8m0 rp nosat",
];

fn cuda_home() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ["BLOCKSCALE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    candidates.push(common::workspace_root().join("target/cuda-13.0/nvidia/cu13"));
    candidates.into_iter().find(|p| p.join("include/cuda_fp4.h").is_file())
}

/// Builds the oracle once per test process; `None` (after printing why) if the
/// headers or g++ are missing.
fn oracle() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BIN.get_or_init(|| {
        let home = cuda_home().ok_or_else(|| "CUDA headers (cuda_fp4.h) not found".to_string())?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/nvidia_oracle.cpp");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvidia_oracle");
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        let out = Command::new(&cxx)
            .args(["-std=c++17", "-O2", "-o"])
            .arg(&bin)
            .arg(&src)
            .arg(format!("-I{}", home.join("include").display()))
            .output()
            .map_err(|e| format!("could not run {cxx}: {e}"))?;
        if !out.status.success() {
            // A compile failure with headers present is a real failure, not a skip.
            panic!("building the NVIDIA oracle failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(bin)
    });
    match built {
        Ok(p) => Some(p.as_path()),
        Err(why) => {
            common::skip_or_fail(&format!("NVIDIA oracle unavailable: {why}"));
            None
        }
    }
}

fn run_oracle(bin: &Path, mode: &str, input: &[u8]) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let tag = format!("{}-{}", mode, std::process::id());
    let (inp, outp) = (dir.join(format!("oracle-in-{tag}")), dir.join(format!("oracle-out-{tag}")));
    std::fs::write(&inp, input).unwrap();
    let status = Command::new(bin).arg(mode).arg(&inp).arg(&outp).status().unwrap();
    assert!(status.success(), "oracle failed in mode {mode}");
    let out = std::fs::read(&outp).unwrap();
    let _ = std::fs::remove_file(&inp);
    let _ = std::fs::remove_file(&outp);
    out
}

fn ours_f32(x: f32) -> [u8; 11] {
    [
        E4M3::from_f32(x).to_bits(),
        E4M3::from_f32_nosat(x).to_bits(),
        E5M2::from_f32(x).to_bits(),
        E5M2::from_f32_nosat(x).to_bits(),
        E2M1::from_f32(x).to_bits(),
        E2M3::from_f32(x).to_bits(),
        E3M2::from_f32(x).to_bits(),
        UE8M0::from_f32(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_f32_nosat(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_f32(x, E8M0Rounding::PosInf).to_bits(),
        UE8M0::from_f32_nosat(x, E8M0Rounding::PosInf).to_bits(),
    ]
}

fn ours_f16(x: f16) -> [u8; 11] {
    [
        E4M3::from_f16(x).to_bits(),
        E4M3::from_f16_nosat(x).to_bits(),
        E5M2::from_f16(x).to_bits(),
        E5M2::from_f16_nosat(x).to_bits(),
        E2M1::from_f16(x).to_bits(),
        E2M3::from_f16(x).to_bits(),
        E3M2::from_f16(x).to_bits(),
        UE8M0::from_f16(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_f16_nosat(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_f16(x, E8M0Rounding::PosInf).to_bits(),
        UE8M0::from_f16_nosat(x, E8M0Rounding::PosInf).to_bits(),
    ]
}

fn ours_bf16(x: bf16) -> [u8; 11] {
    [
        E4M3::from_bf16(x).to_bits(),
        E4M3::from_bf16_nosat(x).to_bits(),
        E5M2::from_bf16(x).to_bits(),
        E5M2::from_bf16_nosat(x).to_bits(),
        E2M1::from_bf16(x).to_bits(),
        E2M3::from_bf16(x).to_bits(),
        E3M2::from_bf16(x).to_bits(),
        UE8M0::from_bf16(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_bf16_nosat(x, E8M0Rounding::Zero).to_bits(),
        UE8M0::from_bf16(x, E8M0Rounding::PosInf).to_bits(),
        UE8M0::from_bf16_nosat(x, E8M0Rounding::PosInf).to_bits(),
    ]
}

/// Compares column by column and panics with the first mismatches of each.
fn compare(what: &str, inputs: &[u32], theirs: &[u8], ours: impl Fn(u32) -> [u8; 11]) {
    assert_eq!(theirs.len(), inputs.len() * 11, "oracle output length for {what}");
    let mut report = String::new();
    let mut mismatches = [0usize; 11];
    for (i, &input) in inputs.iter().enumerate() {
        let o = ours(input);
        for c in 0..11 {
            let t = theirs[i * 11 + c];
            if o[c] != t {
                mismatches[c] += 1;
                if mismatches[c] <= 5 {
                    report +=
                        &format!("  {what} {:#010x} {}: NVIDIA {t:#04x}, ours {:#04x}\n", input, COLUMNS[c], o[c]);
                }
            }
        }
    }
    let total: usize = mismatches.iter().sum();
    assert!(total == 0, "{total} mismatches against NVIDIA ({what}):\n{report}");
}

#[test]
fn every_f16_matches_nvidia() {
    let Some(bin) = oracle() else { return };
    let inputs: Vec<u32> = (0..=u16::MAX as u32).collect();
    let bytes: Vec<u8> = inputs.iter().flat_map(|&b| (b as u16).to_le_bytes()).collect();
    let theirs = run_oracle(bin, "h", &bytes);
    compare("f16", &inputs, &theirs, |b| ours_f16(f16::from_bits(b as u16)));
    // The f32 path on the same (exact) values must agree too.
    compare("f16 as f32", &inputs, &theirs, |b| ours_f32(f16::from_bits(b as u16).to_f32()));
}

#[test]
fn every_bf16_matches_nvidia() {
    let Some(bin) = oracle() else { return };
    let inputs: Vec<u32> = (0..=u16::MAX as u32).collect();
    let bytes: Vec<u8> = inputs.iter().flat_map(|&b| (b as u16).to_le_bytes()).collect();
    let theirs = run_oracle(bin, "b", &bytes);
    compare("bf16", &inputs, &theirs, |b| ours_bf16(bf16::from_bits(b as u16)));
    compare("bf16 as f32", &inputs, &theirs, |b| ours_f32(bf16::from_bits(b as u16).to_f32()));
}

#[test]
fn f32_inputs_match_nvidia() {
    let Some(bin) = oracle() else { return };
    let inputs = common::f32_oracle_inputs();
    assert!(inputs.len() >= 1_000_000, "only {} f32 oracle inputs", inputs.len());
    let bytes: Vec<u8> = inputs.iter().flat_map(|b| b.to_le_bytes()).collect();
    let theirs = run_oracle(bin, "f", &bytes);
    compare("f32", &inputs, &theirs, |b| ours_f32(f32::from_bits(b)));
}

#[test]
fn decoding_matches_nvidia() {
    let Some(bin) = oracle() else { return };
    let out = run_oracle(bin, "d", &[]);
    let words: Vec<u16> = out.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(words.len(), 256 + 256 + 64 + 64 + 16 + 256);
    let (e4m3, rest) = words.split_at(256);
    let (e5m2, rest) = rest.split_at(256);
    let (e2m3, rest) = rest.split_at(64);
    let (e3m2, rest) = rest.split_at(64);
    let (e2m1, e8m0) = rest.split_at(16);
    let same = |ours: f32, theirs: f32| ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan());
    for c in 0..=255u8 {
        let t = f16::from_bits(e4m3[c as usize]).to_f32();
        assert!(same(E4M3::from_bits(c).to_f32(), t), "e4m3 {c:#04x}: NVIDIA {t}");
        let t = f16::from_bits(e5m2[c as usize]).to_f32();
        assert!(same(E5M2::from_bits(c).to_f32(), t), "e5m2 {c:#04x}: NVIDIA {t}");
        let t = bf16::from_bits(e8m0[c as usize]).to_f32();
        assert!(same(UE8M0::from_bits(c).to_f32(), t), "e8m0 {c:#04x}: NVIDIA {t}");
    }
    for c in 0..64u8 {
        let t = f16::from_bits(e2m3[c as usize]).to_f32();
        assert!(same(E2M3::from_bits(c).to_f32(), t), "e2m3 {c:#04x}: NVIDIA {t}");
        let t = f16::from_bits(e3m2[c as usize]).to_f32();
        assert!(same(E3M2::from_bits(c).to_f32(), t), "e3m2 {c:#04x}: NVIDIA {t}");
    }
    for c in 0..16u8 {
        let t = f16::from_bits(e2m1[c as usize]).to_f32();
        assert!(same(E2M1::from_bits(c).to_f32(), t), "e2m1 {c:#03x}: NVIDIA {t}");
    }
}
