//! `blockscale eval` end to end: the demo weights, JSON, the plot, and a bad scheme.

use std::process::{Command, Output};

fn blockscale(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockscale")).args(args).output().expect("blockscale runs")
}

const DEMO_TENSORS: [&str; 7] = [
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
];

#[test]
fn demo_json_has_a_row_per_tensor_and_scheme_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("eval.svg");
    let out =
        blockscale(&["eval", "--demo", "--json", "--schemes", "nvfp4,mxfp8-e4m3", "--plot", plot.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(v["version"], 1);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), DEMO_TENSORS.len() * 2);
    assert_eq!(v["skipped"].as_array().unwrap().len(), 0);

    let row = |tensor: &str, scheme: &str| {
        rows.iter()
            .find(|r| r["tensor"] == tensor && r["scheme"] == scheme)
            .unwrap_or_else(|| panic!("no row for {tensor} {scheme}"))
    };
    for t in DEMO_TENSORS {
        let nv = row(t, "nvfp4");
        let mx = row(t, "mxfp8-e4m3");
        for r in [nv, mx] {
            for field in ["rows", "k", "sqnr_db", "cosine", "max_abs", "max_rel", "rmse", "bytes_in", "bytes_out"] {
                assert!(r[field].is_number(), "{t}: {field} = {}", r[field]);
            }
            for field in ["compression", "bits_per_weight", "quantize_s"] {
                assert!(r[field].is_number(), "{t}: {field} = {}", r[field]);
            }
            let weights = r["rows"].as_u64().unwrap() * r["k"].as_u64().unwrap();
            assert_eq!(r["bytes_in"].as_u64().unwrap(), 2 * weights, "{t}: bf16 input");
            assert_eq!(r["k"].as_u64().unwrap() % 128, 0);
        }
        // Three more mantissa bits per element: MXFP8 is far more accurate than NVFP4 on
        // any tensor, at the price of nearly twice the bits.
        let (nv_db, mx_db) = (nv["sqnr_db"].as_f64().unwrap(), mx["sqnr_db"].as_f64().unwrap());
        assert!(mx_db > nv_db + 6.0, "{t}: MXFP8 {mx_db} dB vs NVFP4 {nv_db} dB");
        assert!(nv_db > 10.0, "{t}: NVFP4 {nv_db} dB");
        assert!(nv["bits_per_weight"].as_f64().unwrap() < 4.6);
        assert_eq!(mx["bits_per_weight"], 8.25);
        assert!(mx["cosine"].as_f64().unwrap() > nv["cosine"].as_f64().unwrap());
    }

    let summary = v["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 2);
    assert_eq!(summary[0]["scheme"], "nvfp4");
    assert_eq!(summary[1]["scheme"], "mxfp8-e4m3");
    for s in summary {
        assert_eq!(s["tensors"], 7);
        let (mean, min) = (s["mean_sqnr_db"].as_f64().unwrap(), s["min_sqnr_db"].as_f64().unwrap());
        assert!(min <= mean);
        let ratio = s["bytes_in"].as_f64().unwrap() / s["bytes_out"].as_f64().unwrap();
        assert!((ratio - s["compression"].as_f64().unwrap()).abs() < 1e-9);
    }

    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(svg.contains("blockscale eval: SQNR per scheme and tensor"));
    assert!(svg.contains("SQNR (dB)"));
    assert!(svg.contains("layers.0.mlp.down_proj"));

    // A second run refuses to replace the plot, exit code 5, and leaves it alone.
    let again = blockscale(&["eval", "--demo", "--quiet", "--schemes", "nvfp4", "--plot", plot.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(5), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&plot).unwrap(), svg);
}

#[test]
fn demo_table_lists_every_tensor() {
    let out = blockscale(&["eval", "--demo", "--quiet", "--schemes", "mxfp4,int4-g32"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("tensor"));
    for t in DEMO_TENSORS {
        assert_eq!(text.lines().filter(|l| l.starts_with(t)).count(), 2, "{t} in\n{text}");
    }
    assert!(text.contains("mean SQNR dB"));
}

#[test]
fn unknown_scheme_is_a_usage_error_naming_it() {
    let out = blockscale(&["eval", "--demo", "--schemes", "nvfp4,mxfp5"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mxfp5") && stderr.contains("mxfp6-e2m3"), "{stderr}");
    assert!(out.stdout.is_empty());

    // With --json, the error is also a JSON object on stdout.
    let out = blockscale(&["eval", "--demo", "--json", "--schemes", "mxfp5"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "usage");
    assert!(v["error"]["message"].as_str().unwrap().contains("mxfp5"));
}
