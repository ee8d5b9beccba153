//! Our encoders and decoders against NVIDIA's own host conversion functions
//! (`cuda_fp8.h`, `cuda_fp6.h`, `cuda_fp4.h` from the pinned PyPI toolchain), compiled
//! with g++ into a small program (tests/oracle/nvidia_oracle.cpp): byte equality for
//! every f16 and every bf16 input, for over a million chosen f32 inputs, for several
//! million f64 inputs aimed at double rounding (`__nv_cvt_double_to_*`), in every
//! rounding mode the headers accept (round-to-nearest-even, and round-toward-zero for
//! FP4/FP6 and E8M0), and for the decoded value of every code.
//!
//! The headers come from `cargo xtask setup-cuda` (or `BLOCKSCALE_CUDA_HOME`,
//! `CUDA_HOME`, `CUDA_PATH`). Without them the tests skip with a message, except under
//! `CI=true`, where a missing oracle fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, E8M0Rounding, UE4M3, UE8M0};
use half::{bf16, f16};

/// The oracle's output columns, in its order (tests/oracle/nvidia_oracle.cpp).
const COLUMNS: [&str; N] = [
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
    "e2m1 rz",
    "e2m3 rz",
    "e3m2 rz",
];
const N: usize = 14;
/// Columns whose NaN rule differs between NVIDIA's float and double conversions.
const FP8_COLUMNS: [usize; 4] = [0, 1, 2, 3];

fn cuda_home() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ["BLOCKSCALE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    candidates.push(common::target_dir().join("cuda-13.0/nvidia/cu13"));
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

/// Our conversions of one input type, in the oracle's column order.
macro_rules! ours {
    ($name:ident($T:ty): $from:ident, $nosat:ident, $rz:ident) => {
        fn $name(x: $T) -> [u8; N] {
            [
                E4M3::$from(x).to_bits(),
                E4M3::$nosat(x).to_bits(),
                E5M2::$from(x).to_bits(),
                E5M2::$nosat(x).to_bits(),
                E2M1::$from(x).to_bits(),
                E2M3::$from(x).to_bits(),
                E3M2::$from(x).to_bits(),
                UE8M0::$from(x, E8M0Rounding::Zero).to_bits(),
                UE8M0::$nosat(x, E8M0Rounding::Zero).to_bits(),
                UE8M0::$from(x, E8M0Rounding::PosInf).to_bits(),
                UE8M0::$nosat(x, E8M0Rounding::PosInf).to_bits(),
                E2M1::$rz(x).to_bits(),
                E2M3::$rz(x).to_bits(),
                E3M2::$rz(x).to_bits(),
            ]
        }
    };
}
ours!(ours_f32(f32): from_f32, from_f32_nosat, from_f32_rz);
ours!(ours_f64(f64): from_f64, from_f64_nosat, from_f64_rz);
ours!(ours_f16(f16): from_f16, from_f16_nosat, from_f16_rz);
ours!(ours_bf16(bf16): from_bf16, from_bf16_nosat, from_bf16_rz);

/// Counts, per column, the inputs where `ours` differs from the oracle's bytes, with
/// the first few of each written to `report`. `skip(input, column)` leaves a cell out.
fn mismatches<T: Copy + std::fmt::LowerHex>(
    report: &mut String,
    what: &str,
    inputs: &[T],
    theirs: &[u8],
    ours: impl Fn(T) -> [u8; N],
    skip: impl Fn(T, usize) -> bool,
) -> [usize; N] {
    assert_eq!(theirs.len(), inputs.len() * N, "oracle output length for {what}");
    let mut counts = [0usize; N];
    for (&input, t) in inputs.iter().zip(theirs.chunks_exact(N)) {
        let o = ours(input);
        for c in 0..N {
            if o[c] != t[c] && !skip(input, c) {
                counts[c] += 1;
                if counts[c] <= 5 {
                    *report +=
                        &format!("  {what} {input:#x} {}: NVIDIA {:#04x}, ours {:#04x}\n", COLUMNS[c], t[c], o[c]);
                }
            }
        }
    }
    counts
}

/// Compares column by column and panics with the first mismatches of each.
fn compare<T: Copy + std::fmt::LowerHex>(what: &str, inputs: &[T], theirs: &[u8], ours: impl Fn(T) -> [u8; N]) {
    compare_except(what, inputs, theirs, ours, |_, _| false);
}

/// [`compare`], leaving out the cells `skip` names.
fn compare_except<T: Copy + std::fmt::LowerHex>(
    what: &str,
    inputs: &[T],
    theirs: &[u8],
    ours: impl Fn(T) -> [u8; N],
    skip: impl Fn(T, usize) -> bool,
) {
    let mut report = String::new();
    let total: usize = mismatches(&mut report, what, inputs, theirs, ours, skip).iter().sum();
    assert!(total == 0, "{total} mismatches against NVIDIA ({what}):\n{report}");
}

/// The f64 inputs and NVIDIA's double conversions of them, computed once per process.
fn f64_results(bin: &Path) -> &'static (Vec<u64>, Vec<u8>) {
    static RESULTS: OnceLock<(Vec<u64>, Vec<u8>)> = OnceLock::new();
    RESULTS.get_or_init(|| {
        let inputs = common::f64_oracle_inputs();
        let bytes: Vec<u8> = inputs.iter().flat_map(|b| b.to_le_bytes()).collect();
        let theirs = run_oracle(bin, "D", &bytes);
        (inputs, theirs)
    })
}

/// Every value of a 16-bit float type `T` (`what`, the oracle's mode `mode`) through
/// `ours`, and through the f32 path on the same (exact) values, must match NVIDIA; so
/// must the f64 path (NVIDIA's host functions widen to double themselves), except for
/// the sign and payload of an FP8 NaN, where the f64 rule is the double conversion's.
fn every_16_bit_value_matches<T: Copy>(
    what: &str,
    mode: &str,
    from_bits: fn(u16) -> T,
    ours: fn(T) -> [u8; N],
    to_f32: fn(T) -> f32,
    to_f64: fn(T) -> f64,
) {
    let Some(bin) = oracle() else { return };
    let inputs: Vec<u32> = (0..=u16::MAX as u32).collect();
    let bytes: Vec<u8> = inputs.iter().flat_map(|&b| (b as u16).to_le_bytes()).collect();
    let theirs = run_oracle(bin, mode, &bytes);
    let x = |b: u32| from_bits(b as u16);
    compare(what, &inputs, &theirs, |b| ours(x(b)));
    compare(&format!("{what} as f32"), &inputs, &theirs, |b| ours_f32(to_f32(x(b))));
    compare_except(
        &format!("{what} as f64"),
        &inputs,
        &theirs,
        |b| ours_f64(to_f64(x(b))),
        |b, c| to_f32(x(b)).is_nan() && FP8_COLUMNS.contains(&c),
    );
}

#[test]
fn every_f16_matches_nvidia() {
    every_16_bit_value_matches("f16", "h", f16::from_bits, ours_f16, f16::to_f32, f16::to_f64);
}

#[test]
fn every_bf16_matches_nvidia() {
    every_16_bit_value_matches("bf16", "b", bf16::from_bits, ours_bf16, bf16::to_f32, bf16::to_f64);
}

#[test]
fn f32_inputs_match_nvidia() {
    let Some(bin) = oracle() else { return };
    let inputs = common::f32_oracle_inputs();
    assert!(inputs.len() >= 1_000_000, "only {} f32 oracle inputs", inputs.len());
    let bytes: Vec<u8> = inputs.iter().flat_map(|b| b.to_le_bytes()).collect();
    let theirs = run_oracle(bin, "f", &bytes);
    compare("f32", &inputs, &theirs, |b| ours_f32(f32::from_bits(b)));
    compare_except(
        "f32 as f64",
        &inputs,
        &theirs,
        |b| ours_f64(f32::from_bits(b) as f64),
        |b, c| f32::from_bits(b).is_nan() && FP8_COLUMNS.contains(&c),
    );
}

#[test]
fn f64_inputs_match_nvidia() {
    let Some(bin) = oracle() else { return };
    let (inputs, theirs) = f64_results(bin);
    assert!(inputs.len() >= 5_000_000, "only {} f64 oracle inputs", inputs.len());
    compare("f64", inputs, theirs, |b| ours_f64(f64::from_bits(b)));
    // UE4M3 has no NVIDIA conversion: it is E4M3's saturating one for x >= +0.
    for (&b, t) in inputs.iter().zip(theirs.chunks_exact(N)) {
        let x = f64::from_bits(b);
        let want = if x.is_nan() {
            0x7f
        } else if x.is_sign_negative() {
            0
        } else {
            t[0]
        };
        assert_eq!(UE4M3::from_f64(x).to_bits(), want, "ue4m3 from f64 {b:#x}");
    }
}

/// The issue this API fixes: narrowing an f64 to f32 and converting that rounds twice.
/// Against NVIDIA's double conversions it goes wrong on thousands of the oracle's f64
/// inputs in every column, counting only inputs inside the f32 range (whose f32 is
/// finite: a genuine second rounding, not an overflow to Inf) and not NaN (which
/// differs by rule, see the E4M3 and E5M2 docs), while `from_f64` goes wrong on none.
/// The per-column assertion also keeps the input set honest: if it stopped holding
/// double-rounding hazards, the narrowed path would stop failing and this test would
/// say so.
#[test]
fn narrowing_f64_to_f32_first_differs_from_nvidia() {
    let Some(bin) = oracle() else { return };
    let (inputs, theirs) = f64_results(bin);
    let in_f32_range = |b: u64| (f64::from_bits(b) as f32).is_finite();
    let via_f32 = |b: u64| ours_f32(f64::from_bits(b) as f32);
    let mut report = String::new();
    let rounding = mismatches(&mut report, "f64 via f32", inputs, theirs, via_f32, |b, _| !in_f32_range(b));
    let range = mismatches(&mut report, "f64 via f32", inputs, theirs, via_f32, |b, _| {
        let x = f64::from_bits(b);
        in_f32_range(b) || x.is_nan()
    });
    let direct = mismatches(&mut report, "f64", inputs, theirs, |b| ours_f64(f64::from_bits(b)), |_, _| false);
    let mut table = format!("  {:<18} {:>16} {:>16} {:>9}\n", "", "via f32: rounding", "via f32: range", "from_f64");
    for c in 0..N {
        table += &format!("  {:<18} {:>16} {:>16} {:>9}\n", COLUMNS[c], rounding[c], range[c], direct[c]);
    }
    let finite = inputs.iter().filter(|&&b| in_f32_range(b)).count();
    eprintln!(
        "{} f64 inputs ({finite} narrow to a finite f32), mismatches against NVIDIA's double conversions:\n{table}",
        inputs.len()
    );
    assert_eq!(direct, [0; N], "from_f64 differs from NVIDIA:\n{report}");
    for c in 0..N {
        assert!(
            rounding[c] >= 1000,
            "narrowing to f32 first differs on only {} in-range inputs for {}:\n{table}",
            rounding[c],
            COLUMNS[c]
        );
    }
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
