//! A second, independent oracle: ml_dtypes (the numpy dtypes JAX and TensorFlow use).
//! Every code must decode to ml_dtypes' value. Encoding agrees wherever the two
//! libraries define the same thing; where they differ by design the test pins the
//! difference down, so docs/NUMERICS.md stays true:
//!
//! - NaN input: NVIDIA (and we) give +MAX for FP4/FP6 and `0x7f` for FP8; ml_dtypes
//!   gives a zero for FP4/FP6 (with the sign bit opposite to the NaN's: +NaN gives
//!   -0) and a NaN keeping the input's sign for FP8 (`0x7e`/`0xfe` for E5M2).
//! - E4M3 and E5M2: ml_dtypes' casts are the non-saturating ones (`from_*_nosat`).
//! - E8M0: ml_dtypes rounds to the nearest power of two and maps 0 and negatives to
//!   NaN; NVIDIA rounds toward zero or +Inf and uses |x|. They agree on exact powers
//!   of two in range.

mod common;

use std::path::PathBuf;
use std::process::Command;

use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, E8M0Rounding, UE8M0};
use half::{bf16, f16};

fn python_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("BLOCKSCALE_PYTHONPATH").map(PathBuf::from).into_iter().collect();
    candidates.push(common::target_dir().join("python-oracles"));
    candidates.into_iter().find(|p| p.join("ml_dtypes").is_dir())
}

/// Runs the script; `None` after skipping (or panics under CI) if ml_dtypes is missing.
fn oracle_output() -> Option<Vec<u8>> {
    let Some(path) = python_path() else {
        common::skip_or_fail("ml_dtypes not found (BLOCKSCALE_PYTHONPATH or target/python-oracles)");
        return None;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/ml_dtypes_oracle.py");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ml_dtypes-{}", std::process::id()));
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python).arg(&script).arg(&out).env("PYTHONPATH", &path).status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("the ml_dtypes oracle script failed ({s})"),
        Err(e) => {
            common::skip_or_fail(&format!("cannot run {python}: {e}"));
            return None;
        }
    }
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    Some(bytes)
}

struct Format {
    name: &'static str,
    codes: usize,
    decode: fn(u8) -> f32,
    /// Our conversion with ml_dtypes' semantics, or None where they differ by design.
    encode: fn(f32) -> Option<u8>,
}

/// A minifloat's row: ml_dtypes rounds NaN its own way, so NaN inputs are left out.
macro_rules! minifloat {
    ($name:literal, $T:ident, $codes:literal, $encode:ident) => {
        Format {
            name: $name,
            codes: $codes,
            decode: |c| $T::from_bits(c).to_f32(),
            encode: |x| (!x.is_nan()).then(|| $T::$encode(x).to_bits()),
        }
    };
}

fn formats() -> [Format; 6] {
    [
        minifloat!("e2m1", E2M1, 16, from_f32),
        minifloat!("e2m3", E2M3, 64, from_f32),
        minifloat!("e3m2", E3M2, 64, from_f32),
        minifloat!("e4m3", E4M3, 256, from_f32_nosat),
        minifloat!("e5m2", E5M2, 256, from_f32_nosat),
        Format {
            name: "e8m0",
            codes: 256,
            decode: |c| UE8M0::from_bits(c).to_f32(),
            encode: |x| {
                let exact_pow2 = x > 0.0 && x.is_finite() && {
                    let b = x.to_bits();
                    if b < 0x0080_0000 { b == 0x0040_0000 } else { b & 0x7f_ffff == 0 }
                };
                exact_pow2.then(|| UE8M0::from_f32(x, E8M0Rounding::PosInf).to_bits())
            },
        },
    ]
}

#[test]
fn ml_dtypes_agrees() {
    let Some(out) = oracle_output() else { return };
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &out[at..at + n];
        at += n;
        s
    };
    let mut compared = 0usize;
    let mut nan_differences = Vec::new();
    for f in formats() {
        let decoded = take(f.codes * 4);
        for c in 0..f.codes {
            let theirs = f32::from_le_bytes(decoded[4 * c..4 * c + 4].try_into().unwrap());
            let ours = (f.decode)(c as u8);
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "{} code {c:#04x}: ml_dtypes {theirs}, ours {ours}",
                f.name
            );
        }
        for (what, values) in [("f16", take(65536)), ("bf16", take(65536))] {
            for (bits, &theirs) in values.iter().enumerate() {
                let x = if what == "f16" {
                    f16::from_bits(bits as u16).to_f32()
                } else {
                    bf16::from_bits(bits as u16).to_f32()
                };
                match (f.encode)(x) {
                    Some(ours) => {
                        assert_eq!(ours, theirs, "{} from {what} {bits:#06x} ({x:e})", f.name);
                        compared += 1;
                    }
                    None if x.is_nan() => nan_differences.push((f.name, x.is_sign_negative(), theirs)),
                    None => {}
                }
            }
        }
    }
    assert_eq!(at, out.len(), "unexpected oracle output length");
    assert!(compared > 600_000, "only {compared} encodings compared");
    // The documented NaN difference, exactly.
    for (name, negative, theirs) in nan_differences {
        let want = match name {
            "e2m1" => Some(if negative { 0x00 } else { 0x08 }),
            "e2m3" | "e3m2" => Some(if negative { 0x00 } else { 0x20 }),
            "e4m3" => Some(if negative { 0xff } else { 0x7f }),
            "e5m2" => Some(if negative { 0xfe } else { 0x7e }),
            _ => None, // e8m0: every NaN is 0xff in both
        };
        if let Some(want) = want {
            assert_eq!(theirs, want, "ml_dtypes' NaN encoding for {name} changed: update docs/NUMERICS.md");
        } else {
            assert_eq!(theirs, 0xff);
        }
    }
}
