//! quantize -> dequantize through files, for every scheme and convention, single files
//! and sharded folders. The expected values come from the library's own quantize and
//! dequantize on the same inputs (tested on their own against independent oracles):
//! what is checked here is that the command stores and reads back every byte, scale
//! and per-tensor factor under the right names. tests/oracle.rs checks the conventions
//! against a Python implementation of their documented formulas.

mod common;

use blockscale::{DequantizeOptions, QuantizeOptions, ScaleLayout, Scheme, dequantize_slice, quantize_slice};
use common::*;
use half::bf16;
use safetensors::Dtype;

/// The library's dequantized f32 values of bf16 `input` under `scheme`.
fn expected(input: &[u8], rows: usize, k: usize, scheme: Scheme, layout: ScaleLayout) -> Vec<u32> {
    let v: Vec<bf16> = input.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect();
    let q = quantize_slice(&v, rows, k, scheme, &QuantizeOptions::default().with_scale_layout(layout)).unwrap();
    let mut out = vec![0f32; rows * k];
    dequantize_slice(&q, &mut out, &DequantizeOptions::default()).unwrap();
    out.iter().map(|x| x.to_bits()).collect()
}

fn bits(b: &[u8]) -> Vec<u32> {
    f32s(b).iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_scheme_and_layout_round_trips_in_the_native_convention() {
    let tensors = model_tensors(11);
    let (dir, input) = input_file("model.safetensors", &tensors);
    for scheme in Scheme::ALL {
        for layout in [ScaleLayout::Linear, ScaleLayout::Swizzled128x4] {
            if !scheme.supports_layout(layout) {
                continue;
            }
            let lname = if layout == ScaleLayout::Linear { "linear" } else { "swizzled" };
            let q = dir.path().join(format!("q-{}-{lname}.safetensors", scheme.name()));
            let d = dir.path().join(format!("d-{}-{lname}.safetensors", scheme.name()));
            ok(&["quantize", s(&input), "-o", s(&q), "--scheme", scheme.name(), "--scale-layout", lname, "-q"]);
            ok(&["dequantize", s(&q), "-o", s(&d), "--dtype", "f32", "-q"]);
            let qt = read(&q);
            assert!(qt.contains_key("model.layers.0.mlp.down_proj.weight.codes"), "{scheme}");
            assert!(!qt.contains_key("model.layers.0.mlp.down_proj.weight"), "{scheme}");
            let out = read(&d);
            assert_eq!(out.len(), tensors.len(), "{scheme}: one output per input tensor");
            for (name, dtype, shape, bytes) in &tensors {
                let (od, os, ob) = &out[name];
                assert_eq!(os, shape, "{scheme} {name}");
                if name.ends_with("proj.weight") {
                    assert_eq!(*od, Dtype::F32);
                    let want = expected(bytes, shape[0], shape[1], scheme, layout);
                    assert!(bits(ob) == want, "{scheme} {lname} {name}: values differ from the library's");
                } else {
                    // Embeddings (excluded by default) and 1-D tensors pass through.
                    assert_eq!((od, ob), (dtype, bytes), "{scheme} {name}");
                }
            }
        }
    }
}

#[test]
fn modelopt_and_compressed_tensors_store_nvfp4_under_their_names() {
    let tensors = model_tensors(5);
    let (dir, input) = input_file("in.safetensors", &tensors);
    let (_, _, shape, bytes) = &tensors[2];
    let want = expected(bytes, shape[0], shape[1], Scheme::NvFp4, ScaleLayout::Linear);
    for (conv, data, scale, global) in [
        ("modelopt", "weight", "weight_scale", "weight_scale_2"),
        ("compressed-tensors", "weight_packed", "weight_scale", "weight_global_scale"),
    ] {
        let q = dir.path().join(format!("{conv}.safetensors"));
        let d = dir.path().join(format!("{conv}-f32.safetensors"));
        ok(&["quantize", s(&input), "-o", s(&q), "--scheme", "nvfp4", "--convention", conv, "-q"]);
        let qt = read(&q);
        let p = "model.layers.0.mlp.down_proj";
        assert_eq!(qt[&format!("{p}.{data}")].0, Dtype::U8);
        assert_eq!(qt[&format!("{p}.{data}")].1, vec![130, 256]);
        assert_eq!(qt[&format!("{p}.{scale}")].0, Dtype::F8_E4M3);
        assert_eq!(qt[&format!("{p}.{scale}")].1, vec![130, 32]);
        assert_eq!(qt[&format!("{p}.{global}")].0, Dtype::F32);
        // A single file carries the convention's config in its metadata.
        let raw = std::fs::read(&q).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&raw).unwrap();
        let meta = meta.metadata().clone().unwrap();
        assert_eq!(meta["format"], "pt");
        assert!(meta["quantization_config"].contains(if conv == "modelopt" {
            "\"modelopt\""
        } else {
            "nvfp4-pack-quantized"
        }));
        assert!(meta["quantization_config"].contains("model.embed_tokens"), "the ignore list names the embedding");
        ok(&["dequantize", s(&q), "-o", s(&d), "--dtype", "f32", "-q"]);
        let out = read(&d);
        assert!(bits(&out[&format!("{p}.weight")].2) == want, "{conv}");
        assert!(!out.contains_key(&format!("{p}.{global}")), "{conv}: scale tensors are consumed");
    }
    // The two conventions hold the same codes and scales; their global scales are
    // reciprocal (decode vs encode).
    let (mo, ct) =
        (read(&dir.path().join("modelopt.safetensors")), read(&dir.path().join("compressed-tensors.safetensors")));
    let p = "model.layers.0.self_attn.q_proj";
    assert_eq!(mo[&format!("{p}.weight")].2, ct[&format!("{p}.weight_packed")].2);
    assert_eq!(mo[&format!("{p}.weight_scale")].2, ct[&format!("{p}.weight_scale")].2);
    let (dec, enc) =
        (f32s(&mo[&format!("{p}.weight_scale_2")].2)[0], f32s(&ct[&format!("{p}.weight_global_scale")].2)[0]);
    assert_eq!(dec, 1.0 / enc);
    let amax = weights(6, 64, 256).iter().map(|x| bf16::from_f32(*x).to_f32().abs()).fold(0f32, f32::max);
    assert_eq!(enc, 2688.0 / amax, "weight_global_scale = 2688 / amax");
}

#[test]
fn calibration_gives_activation_scales() {
    let (dir, input) = input_file("in.safetensors", &model_tensors(9));
    let acts = dir.path().join("acts.safetensors");
    let a = weights(77, 16, 256);
    let amax = a.iter().map(|x| x.abs()).fold(0f32, f32::max);
    write(
        &acts,
        &[(
            "model.layers.0.self_attn.q_proj".into(),
            Dtype::F32,
            vec![16, 256],
            a.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )],
    );
    let q = dir.path().join("mo.safetensors");
    ok(&[
        "quantize",
        s(&input),
        "-o",
        s(&q),
        "--scheme",
        "nvfp4",
        "--convention",
        "modelopt",
        "--calibration",
        s(&acts),
        "-q",
    ]);
    let t = read(&q);
    let is = f32s(&t["model.layers.0.self_attn.q_proj.input_scale"].2)[0];
    assert_eq!(is, 1.0 / (2688.0 / amax), "input_scale is the decode scale of the activations' amax");
    assert!(!t.contains_key("model.layers.0.mlp.down_proj.input_scale"), "no calibration data, no input_scale");
    let c = dir.path().join("ct.safetensors");
    ok(&[
        "quantize",
        s(&input),
        "-o",
        s(&c),
        "--scheme",
        "nvfp4",
        "--convention",
        "compressed-tensors",
        "--calibration",
        s(&acts),
        "-q",
    ]);
    assert_eq!(f32s(&read(&c)["model.layers.0.self_attn.q_proj.input_global_scale"].2)[0], 2688.0 / amax);
}

#[test]
fn sharded_folders_round_trip_with_their_index_and_side_files() {
    let t = model_tensors(21);
    let extra = bf16_weight("model.layers.1.mlp.up_proj.weight", 99, 96, 512);
    let dir = tempfile::tempdir().unwrap();
    let shards = [
        ("model-00001-of-00002.safetensors", t[..2].to_vec()),
        ("model-00002-of-00002.safetensors", vec![t[2].clone(), t[3].clone(), extra.clone()]),
    ];
    let model = folder(dir.path(), "model", &shards);
    let mut map = serde_json::Map::new();
    for (n, ..) in &t[..2] {
        map.insert(n.clone(), "model-00001-of-00002.safetensors".into());
    }
    for n in [&t[2].0, &t[3].0, &extra.0] {
        map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
    }
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map });
    std::fs::write(model.join("model.safetensors.index.json"), index.to_string()).unwrap();
    std::fs::write(model.join("config.json"), r#"{"model_type": "llama", "hidden_size": 256}"#).unwrap();
    std::fs::write(model.join("tokenizer.json"), "{}").unwrap();

    let q = dir.path().join("q");
    ok(&["quantize", s(&model), "-o", s(&q), "--scheme", "nvfp4", "--convention", "modelopt", "-q"]);
    let ix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(q.join("model.safetensors.index.json")).unwrap()).unwrap();
    let wm = ix["weight_map"].as_object().unwrap();
    assert_eq!(wm["model.layers.1.mlp.up_proj.weight_scale_2"], "model-00002-of-00002.safetensors");
    assert_eq!(wm["model.layers.0.self_attn.q_proj.weight_scale"], "model-00001-of-00002.safetensors");
    let total = ix["metadata"]["total_size"].as_u64().unwrap();
    let sizes: u64 = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        .iter()
        .map(|f| read(&q.join(f)).values().map(|(_, _, b)| b.len() as u64).sum::<u64>())
        .sum();
    assert_eq!(total, sizes, "total_size is the tensors' bytes");
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(q.join("hf_quant_config.json")).unwrap()).unwrap();
    assert_eq!(hf["quantization"]["quant_algo"], "NVFP4");
    assert_eq!(hf["quantization"]["group_size"], 16);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(q.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(cfg["quantization_config"]["quant_method"], "modelopt");
    assert_eq!(std::fs::read_to_string(q.join("tokenizer.json")).unwrap(), "{}");

    let d = dir.path().join("d");
    ok(&["dequantize", s(&q), "-o", s(&d), "--dtype", "f32", "-q"]);
    assert!(!d.join("hf_quant_config.json").exists(), "the quantization config no longer applies");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("config.json")).unwrap()).unwrap();
    assert!(cfg.get("quantization_config").is_none());
    let out = read(&d.join("model-00002-of-00002.safetensors"));
    let (_, _, shape, bytes) = &extra;
    let want = expected(bytes, shape[0], shape[1], Scheme::NvFp4, ScaleLayout::Linear);
    assert!(bits(&out["model.layers.1.mlp.up_proj.weight"].2) == want);
    let ix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("model.safetensors.index.json")).unwrap()).unwrap();
    assert_eq!(ix["weight_map"].as_object().unwrap().len(), 5, "back to the original five tensors");

    // inspect sees the convention in the folder.
    let o = ok(&["inspect", s(&q), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["conventions"]["modelopt"], 3);
    assert_eq!(v["files"].as_array().unwrap().len(), 2);
}

#[test]
fn fp8_writers_declare_their_configs_in_a_folder_and_read_back() {
    let t = model_tensors(31);
    let dir = tempfile::tempdir().unwrap();
    let model = folder(dir.path(), "model", &[("model.safetensors", t.clone())]);
    std::fs::write(model.join("config.json"), r#"{"model_type": "llama", "hidden_size": 256}"#).unwrap();
    let json = |p: std::path::PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (q_proj, down_proj) = (&t[1], &t[2]);

    // DeepSeek: quant_method fp8 in config.json, no side file; the embedding (excluded
    // by default) listed as not converted.
    let ds = dir.path().join("ds");
    ok(&["quantize", s(&model), "-o", s(&ds), "--scheme", "fp8-block", "--convention", "deepseek", "-q"]);
    assert!(!ds.join("hf_quant_config.json").exists());
    let cfg = json(ds.join("config.json"));
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(
        cfg["quantization_config"],
        serde_json::json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                           "weight_block_size": [128, 128], "modules_to_not_convert": ["model.embed_tokens"]})
    );
    let q = read(&ds.join("model.safetensors"));
    let (dtype, shape, _) = &q["model.layers.0.mlp.down_proj.weight_scale_inv"];
    assert_eq!((*dtype, shape.as_slice()), (Dtype::F32, &[2, 4][..]), "[ceil(130/128), 512/128]");
    assert_eq!(q["model.layers.0.mlp.down_proj.weight"].0, Dtype::F8_E4M3);
    let d = dir.path().join("ds-back");
    ok(&["dequantize", s(&ds), "-o", s(&d), "--dtype", "f32", "-q"]);
    assert!(json(d.join("config.json")).get("quantization_config").is_none());
    let back = read(&d.join("model.safetensors"));
    let tile = Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128);
    for (name, _, shape, bytes) in [q_proj, down_proj] {
        assert!(bits(&back[name].2) == expected(bytes, shape[0], shape[1], tile, ScaleLayout::Linear), "{name}");
    }
    let v: serde_json::Value = serde_json::from_slice(&ok(&["inspect", s(&ds), "--json"]).stdout).unwrap();
    assert_eq!(v["conventions"]["deepseek"], 2, "two weights");

    // ModelOpt FP8 per tensor: quant_algo FP8 in hf_quant_config.json and config.json.
    let mo = dir.path().join("mo");
    ok(&["quantize", s(&model), "-o", s(&mo), "--scheme", "fp8-per-tensor", "--convention", "modelopt", "-q"]);
    let hf = json(mo.join("hf_quant_config.json"));
    assert_eq!(hf["quantization"]["quant_algo"], "FP8");
    assert_eq!(hf["quantization"]["exclude_modules"], serde_json::json!(["model.embed_tokens"]));
    let qc = &json(mo.join("config.json"))["quantization_config"];
    assert_eq!((qc["quant_method"].as_str(), qc["quant_algo"].as_str()), (Some("modelopt"), Some("FP8")));
    let q = read(&mo.join("model.safetensors"));
    let (dtype, shape, scale) = &q["model.layers.0.mlp.down_proj.weight_scale"];
    assert_eq!((*dtype, shape.len()), (Dtype::F32, 0), "one f32 of shape []");
    let amax = bf16s(&down_proj.3).iter().fold(0f32, |m, x| m.max(x.abs()));
    assert_eq!(f32s(scale)[0], amax / 448.0);
    assert!(!q.contains_key("model.layers.0.mlp.down_proj.input_scale"), "no calibration, no input_scale");
    let d = dir.path().join("mo-back");
    ok(&["dequantize", s(&mo), "-o", s(&d), "--dtype", "f32", "-q"]);
    assert!(!d.join("hf_quant_config.json").exists());
    assert!(json(d.join("config.json")).get("quantization_config").is_none());
    let back = read(&d.join("model.safetensors"));
    // w = code * scale: the largest |w| is stored as E4M3's largest code, 448, and comes
    // back as 448 * scale.
    let w = f32s(&back["model.layers.0.mlp.down_proj.weight"].2);
    assert_eq!(w.iter().fold(0f32, |m, x| m.max(x.abs())), 448.0 * f32s(scale)[0]);
    let v: serde_json::Value = serde_json::from_slice(&ok(&["inspect", s(&mo), "--json"]).stdout).unwrap();
    assert_eq!(v["conventions"]["modelopt"], 2, "two weights");
}

#[test]
fn eval_reads_the_weights_quantize_would_quantize() {
    let (_dir, input) = input_file("in.safetensors", &model_tensors(3));
    let o = ok(&["eval", s(&input), "--schemes", "nvfp4,mxfp8-e4m3", "--json", "-q"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let tensors: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["tensor"].as_str().unwrap()).collect();
    assert_eq!(
        tensors.into_iter().collect::<Vec<_>>(),
        ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight"],
        "2-D weights only, the embedding excluded as quantize does"
    );
    assert_eq!(rows.len(), 4);
    let o = ok(&["eval", s(&input), "--schemes", "nvfp4", "--json", "--max-tensors", "1", "--include", "*down*"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);
    assert_eq!(v["rows"][0]["tensor"], "model.layers.0.mlp.down_proj.weight");
    let o = run(&["eval", s(&input), "--include", "nothing*"]);
    assert_eq!(o.status.code(), Some(3));
}
