//! `blockscale bench`: the quick run's JSON document, and the CUDA backend's refusal in
//! a build without it.

use std::process::Command;
use std::time::Instant;

fn blockscale() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blockscale"))
}

#[test]
fn quick_json_run() {
    let start = Instant::now();
    let out = blockscale().args(["bench", "--quick", "--json"]).output().unwrap();
    let took = start.elapsed();
    assert!(out.status.success(), "exit {:?}; stderr: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["backend"], "cpu");
    assert_eq!(doc["quick"], true);
    let threads = doc["machine"]["threads"].as_u64().expect("machine.threads");
    assert!(threads >= 1);
    assert!(doc["machine"]["cpu"].is_string() || doc["machine"]["cpu"].is_null());

    let cases = doc["cases"].as_array().expect("cases");
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().expect("name")).collect();
    for scheme in [
        "nvfp4 (given global scale)",
        "nvfp4 (+ tensor amax pass)",
        "mxfp4",
        "mxfp6-e2m3",
        "mxfp6-e3m2",
        "mxfp8-e4m3",
        "mxfp8-e5m2",
        "fp8-block-1x128",
        "fp8-block-128x128",
        "int4-g32",
    ] {
        assert!(names.contains(&format!("quantize {scheme}").as_str()), "quantize {scheme} missing: {names:?}");
    }
    for needle in ["dequantize nvfp4", "dequantize mxfp4", "dequantize mxfp8-e4m3", "gemm nvfp4", "gemm mxfp8-e4m3"] {
        assert!(names.iter().any(|n| n.starts_with(needle)), "{needle} missing: {names:?}");
    }
    assert!(names.iter().filter(|n| n.starts_with("gemv")).count() >= 2, "gemv cases missing: {names:?}");

    for c in cases {
        let name = c["name"].as_str().unwrap();
        for key in ["seconds", "throughput", "anchor_throughput", "ratio"] {
            let v = c[key].as_f64().unwrap_or_else(|| panic!("{name}: {key} is not a number: {}", c[key]));
            assert!(v.is_finite() && v > 0.0, "{name}: {key} = {v}");
        }
        let unit = c["unit"].as_str().unwrap();
        assert!(unit == "G elem/s" || unit == "GFLOP/s", "{name}: unit {unit}");
        assert!(!c["anchor"].as_str().expect("anchor").is_empty());
    }
    eprintln!("bench --quick --json took {took:?}");
}

#[test]
fn quick_table_run() {
    let out = blockscale().args(["bench", "--quick"]).output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("case") && l.contains("ratio")), "{text}");
    assert!(text.contains("quantize nvfp4 (given global scale)"), "{text}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_backend_needs_the_feature() {
    let out = blockscale().args(["bench", "--backend", "cuda"]).output().unwrap();
    assert_eq!(out.status.code(), Some(6));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features cuda"), "{err}");

    let out = blockscale().args(["bench", "--backend", "cuda", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(6));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "unsupported");
    assert_eq!(doc["error"]["exit_code"], 6);
}
