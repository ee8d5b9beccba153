//! Every bad input gets a clear error naming file and tensor, with its stable exit
//! code, and a failed or refused run leaves no output behind.

mod common;

use common::*;
use safetensors::Dtype;

#[test]
fn not_safetensors_and_truncated_files_are_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"this is not a safetensors file at all").unwrap();
    let o = run(&["inspect", s(&junk)]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("junk.safetensors") && stderr(&o).contains("not a readable safetensors file"));

    let good = dir.path().join("good.safetensors");
    write(&good, &model_tensors(1));
    let bytes = std::fs::read(&good).unwrap();
    for (name, cut) in [("header.safetensors", 20), ("data.safetensors", bytes.len() - 100), ("empty.safetensors", 0)] {
        let p = dir.path().join(name);
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let out = dir.path().join(format!("out-{name}"));
        let o = run(&["quantize", s(&p), "-o", s(&out), "--scheme", "nvfp4"]);
        assert_eq!(code(&o), 3, "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(name) && stderr(&o).contains("truncated"), "{name}: {}", stderr(&o));
        assert!(!out.exists());
    }
    let o = run(&["inspect", s(&dir.path().join("missing.safetensors"))]);
    assert_eq!(code(&o), 3);
    let empty_dir = dir.path().join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    let o = run(&["inspect", s(&empty_dir)]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("no .safetensors files"));
}

#[test]
fn misaligned_k_names_the_tensor_and_the_way_out() {
    let (dir, input) =
        input_file("in.safetensors", &[bf16_weight("a.weight", 1, 8, 64), bf16_weight("odd.weight", 2, 8, 40)]);
    let out = dir.path().join("out.safetensors");
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4"]);
    assert_eq!(code(&o), 3);
    let e = stderr(&o);
    assert!(e.contains("\"odd.weight\"") && e.contains("--exclude"), "{e}");
    assert!(!out.exists());
    ok(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4", "--exclude", "odd.*", "-q"]);
    // 64 is a multiple of 16 and 32, not of 128.
    let o = run(&["quantize", s(&input), "-o", s(&dir.path().join("fp8.safetensors")), "--scheme", "fp8-block"]);
    assert_eq!(code(&o), 3);
}

#[test]
fn non_finite_weights_are_fatal_unless_poisoned() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let mut w = weights(3, 16, 64);
    w[5 * 64 + 17] = f32::INFINITY;
    w[9 * 64 + 40] = f32::NAN;
    write(
        &input,
        &[bf16_weight("clean.weight", 1, 16, 64), ("bad.weight".into(), Dtype::BF16, vec![16, 64], bf16_bytes(&w))],
    );
    let out = dir.path().join("out.safetensors");
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "mxfp4", "--json"]);
    assert_eq!(code(&o), 4);
    let e = stderr(&o);
    assert!(e.contains("\"bad.weight\"") && e.contains("row 5, column 17") && e.contains("--non-finite poison"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "non-finite");
    assert_eq!(v["error"]["tensor"], "bad.weight");
    assert_eq!(v["error"]["exit_code"], 4);
    assert!(!out.exists(), "nothing written");
    assert!(leftovers(dir.path(), &["in.safetensors"]).is_empty(), "no temporary left behind");

    let o = ok(&["quantize", s(&input), "-o", s(&out), "--scheme", "mxfp4", "--non-finite", "poison", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bad = v["quantized"].as_array().unwrap().iter().find(|q| q["name"] == "bad.weight").unwrap();
    assert_eq!(bad["poisoned_blocks"], 2);
    assert!(stderr(&o).contains("2 blocks held NaN/Inf"));
}

#[test]
fn existing_outputs_are_kept_without_force() {
    let (dir, input) = input_file("in.safetensors", &model_tensors(2));
    let out = dir.path().join("out.safetensors");
    std::fs::write(&out, b"precious").unwrap();
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4"]);
    assert_eq!(code(&o), 5);
    assert!(stderr(&o).contains("--force"));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    ok(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4", "--force", "-q"]);
    assert!(read(&out).contains_key("model.layers.0.mlp.down_proj.weight.codes"));
    assert_eq!(leftovers(dir.path(), &["in.safetensors", "out.safetensors"]), Vec::<String>::new());
    let o = run(&["dequantize", s(&out), "-o", s(&out), "--force"]);
    assert_eq!(code(&o), 2, "the output is the input");

    // A folder output is replaced as a whole with --force, and kept without.
    let model = folder(dir.path(), "model", &[("model.safetensors", model_tensors(3))]);
    let q = dir.path().join("q");
    std::fs::create_dir(&q).unwrap();
    std::fs::write(q.join("old.txt"), "old").unwrap();
    assert_eq!(code(&run(&["quantize", s(&model), "-o", s(&q), "--scheme", "mxfp8-e4m3"])), 5);
    assert!(q.join("old.txt").exists());
    ok(&["quantize", s(&model), "-o", s(&q), "--scheme", "mxfp8-e4m3", "--force", "-q"]);
    assert!(!q.join("old.txt").exists() && q.join("model.safetensors").exists());
    assert_eq!(leftovers(dir.path(), &["in.safetensors", "out.safetensors", "model", "q"]), Vec::<String>::new());
}

#[test]
fn a_failure_in_a_later_shard_leaves_no_folder() {
    let mut w = weights(3, 16, 64);
    w[0] = f32::NAN;
    let nan: Tensor = ("z.weight".into(), Dtype::BF16, vec![16, 64], bf16_bytes(&w));
    let dir = tempfile::tempdir().unwrap();
    let model = folder(dir.path(), "model", &[("a.safetensors", model_tensors(4)), ("b.safetensors", vec![nan])]);
    let q = dir.path().join("q");
    let o = run(&["quantize", s(&model), "-o", s(&q), "--scheme", "nvfp4"]);
    assert_eq!(code(&o), 4);
    assert!(stderr(&o).contains("b.safetensors"));
    assert!(!q.exists());
    assert_eq!(leftovers(dir.path(), &["model"]), Vec::<String>::new());
}

#[test]
fn mismatched_scale_tensors_are_named() {
    let (dir, input) = input_file("in.safetensors", &model_tensors(8));
    let q = dir.path().join("q.safetensors");
    ok(&["quantize", s(&input), "-o", s(&q), "--scheme", "nvfp4", "--convention", "modelopt", "-q"]);
    let mut t: Vec<Tensor> = read(&q).into_iter().map(|(n, (d, sh, b))| (n, d, sh, b)).collect();
    let p = "model.layers.0.mlp.down_proj.weight_scale";
    let i = t.iter().position(|x| x.0 == p).unwrap();
    t[i].2 = vec![65, 64]; // same bytes, wrong shape
    let bad = dir.path().join("bad.safetensors");
    write(&bad, &t);
    let o = run(&["dequantize", s(&bad), "-o", s(&dir.path().join("d.safetensors"))]);
    assert_eq!(code(&o), 3);
    let e = stderr(&o);
    assert!(e.contains(p) && e.contains("[65, 64]") && e.contains("[130, 32]"), "{e}");
    // A scale of the wrong dtype.
    t[i].2 = vec![130, 32];
    t[i].1 = Dtype::U8;
    write(&bad, &t);
    let o = run(&["inspect", s(&bad)]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("is U8, expected F8_E4M3"), "{}", stderr(&o));
}

#[test]
fn unsupported_requests_are_refused_before_reading() {
    let (_dir, input, out) = input_and_output(&model_tensors(2));
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "mxfp4", "--convention", "modelopt"]);
    assert_eq!(code(&o), 6);
    assert!(stderr(&o).contains("--convention native"));
    let o =
        run(&["quantize", s(&input), "-o", s(&out), "--scheme", "mxfp8-e4m3", "--convention", "compressed-tensors"]);
    assert_eq!(code(&o), 6);
    assert!(stderr(&o).contains("nvfp4, mxfp4, int4-g32, int4-g128 and fp8-block"), "{}", stderr(&o));
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp5"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("nvfp5") && stderr(&o).contains("mxfp6-e2m3"));
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "fp8-block", "--scale-layout", "swizzled"]);
    assert_eq!(code(&o), 6);
    let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4", "--include", "a[b"]);
    assert_eq!(code(&o), 2);
    #[cfg(not(feature = "cuda"))]
    {
        let o = run(&["quantize", s(&input), "-o", s(&out), "--scheme", "nvfp4", "--backend", "cuda"]);
        assert_eq!(code(&o), 6);
        assert!(stderr(&o).contains("--features cuda"));
        let o = run(&["dequantize", s(&input), "-o", s(&out), "--backend", "cuda"]);
        assert_eq!(code(&o), 6);
        assert!(stderr(&o).contains("--features cuda"));
    }
    assert!(!out.exists());
}

#[test]
fn the_modelopt_recipe_is_refused_where_it_does_not_apply() {
    let (_dir, input, out) = input_and_output(&model_tensors(2));
    let base = ["quantize", s(&input), "-o", s(&out), "--recipe", "modelopt"];
    for (extra, why) in [
        (&["--scheme", "mxfp4"][..], "an NVFP4 recipe"),
        (&["--scheme", "nvfp4", "--backend", "cuda"][..], "CPU only"),
        (&["--scheme", "nvfp4", "--non-finite", "poison"][..], "no NaN blocks"),
        (&["--scheme", "nvfp4", "--scale-layout", "swizzled"][..], "linear scales"),
    ] {
        let o = run(&[&base[..], extra].concat());
        assert_eq!(code(&o), 6, "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--recipe modelopt") && stderr(&o).contains(why), "{extra:?}: {}", stderr(&o));
    }
    // NaN/Inf is an error naming its place, as with blockscale's recipe.
    let mut w = weights(3, 16, 64);
    w[5 * 64 + 17] = f32::NAN;
    write(&input, &[("bad.weight".into(), Dtype::BF16, vec![16, 64], bf16_bytes(&w))]);
    let o = run(&[&base[..], &["--scheme", "nvfp4"]].concat());
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("\"bad.weight\"") && stderr(&o).contains("row 5, column 17"), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn dequantize_refuses_what_it_would_hand_back_still_quantized() {
    let dir = tempfile::tempdir().unwrap();
    // An FP8 E5M2 weight no convention explains: refused, not copied as FP8.
    let fp8 = dir.path().join("e5m2.safetensors");
    let mut tensors = model_tensors(3);
    tensors.push(("model.layers.0.mlp.up_proj.weight".into(), Dtype::F8_E5M2, vec![4, 32], vec![0x3c; 128]));
    write(&fp8, &tensors);
    let out = dir.path().join("out.safetensors");
    let o = run(&["dequantize", s(&fp8), "-o", s(&out)]);
    assert_eq!(code(&o), 6, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("\"model.layers.0.mlp.up_proj.weight\"") && e.contains("F8_E5M2"), "{e}");
    assert!(e.contains("supported:") && e.contains("nothing was written"), "{e}");
    assert_eq!(leftovers(dir.path(), &["e5m2.safetensors"]), Vec::<String>::new());

    // A folder whose config declares a quantization of which nothing is found.
    let folder = folder(dir.path(), "bnb", &[("model.safetensors", model_tensors(4))]);
    std::fs::write(folder.join("config.json"), r#"{"quantization_config": {"quant_method": "bitsandbytes"}}"#).unwrap();
    let out = dir.path().join("bnb-out");
    let o = run(&["dequantize", s(&folder), "-o", s(&out)]);
    assert_eq!(code(&o), 6, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("config.json declares a quantization (quant_method: \"bitsandbytes\")"), "{e}");
    assert!(!out.exists());
    assert_eq!(leftovers(dir.path(), &["e5m2.safetensors", "bnb"]), Vec::<String>::new());

    // The same folder without the declaration is plain bf16: copied, as before.
    std::fs::write(folder.join("config.json"), r#"{"hidden_size": 256}"#).unwrap();
    let o = run(&["dequantize", s(&folder), "-o", s(&out)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn fp8_block_configs_are_checked_against_the_weights() {
    // DeepSeek-V3.1 layout: F8_E4M3 weight [200, 300], F32 weight_scale_inv [2, 3].
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("ds");
    std::fs::create_dir(&folder).unwrap();
    let weight =
        ("model.layers.0.mlp.down_proj.weight".to_string(), Dtype::F8_E4M3, vec![200, 300], vec![0x38; 60_000]);
    let scales = |s: [f32; 6]| -> Tensor {
        let bytes = s.iter().flat_map(|v| v.to_le_bytes()).collect();
        ("model.layers.0.mlp.down_proj.weight_scale_inv".into(), Dtype::F32, vec![2, 3], bytes)
    };
    let config = |qc: &str| std::fs::write(folder.join("config.json"), format!(r#"{{"quantization_config": {qc}}}"#));
    let pow2 = [0.5, 0.25, 2.0f32.powi(-7), 1.0, 2.0f32.powi(-12), 4.0];
    write(&folder.join("model.safetensors"), &[weight.clone(), scales(pow2)]);
    let out = dir.path().join("out");
    let dequantize = |out: &std::path::Path| run(&["dequantize", s(&folder), "-o", s(out), "--force"]);

    // Powers of two under scale_fmt "ue8m0", 128 x 128 blocks: read.
    config(r#"{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}"#).unwrap();
    let o = dequantize(&out);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Qwen3 FP8 writes the same without scale_fmt: float32 scales, any value.
    let mut not_pow2 = pow2;
    not_pow2[5] = 0.75;
    write(&folder.join("model.safetensors"), &[weight.clone(), scales(not_pow2)]);
    config(r#"{"quant_method": "fp8", "weight_block_size": [128, 128]}"#).unwrap();
    assert_eq!(code(&dequantize(&out)), 0);

    // The same scale under "ue8m0": the tensor and the scale's position are named.
    config(r#"{"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}"#).unwrap();
    let out2 = dir.path().join("out2");
    let o = dequantize(&out2);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("weight_scale_inv") && e.contains("scale [1, 2] is 7.5e-1, not a power of two"), "{e}");
    assert!(!out2.exists());

    // Another block size or scale format: refused, nothing written.
    for qc in [
        r#"{"quant_method": "fp8", "weight_block_size": [64, 64]}"#,
        r#"{"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "e5m2"}"#,
    ] {
        config(qc).unwrap();
        let o = dequantize(&out2);
        assert_eq!(code(&o), 6, "{qc}: {}", stderr(&o));
        assert!(stderr(&o).contains("nothing was written"), "{}", stderr(&o));
        assert!(!out2.exists());
    }
}

#[test]
fn the_fp8_writers_refuse_what_their_layouts_cannot_hold() {
    let (dir, input, out) =
        input_and_output(&[bf16_weight("a.weight", 1, 130, 256), bf16_weight("odd.weight", 2, 8, 200)]);

    // A scheme the convention cannot store, named with the one it can.
    let o = quantize(&input, &out, &["--scheme", "nvfp4", "--convention", "deepseek"]);
    assert_eq!(code(&o), 6);
    assert!(stderr(&o).contains("deepseek convention stores fp8-block") && stderr(&o).contains("nvfp4"));
    let o = quantize(&input, &out, &["--scheme", "fp8-block-1x128", "--convention", "deepseek"]);
    assert_eq!(code(&o), 6, "{}", stderr(&o));
    for convention in ["native", "compressed-tensors", "deepseek"] {
        let o = quantize(&input, &out, &["--scheme", "fp8-per-tensor", "--convention", convention]);
        assert_eq!(code(&o), 6, "{convention}");
        assert!(stderr(&o).contains("--convention modelopt"), "{convention}: {}", stderr(&o));
    }
    // Options that do not apply: activation scales for dynamic DeepSeek activations,
    // poisoned blocks without blocks.
    let acts = dir.path().join("acts.safetensors");
    write(&acts, &[bf16_weight("a", 3, 2, 256)]);
    let o = quantize(&input, &out, &["--scheme", "fp8-block", "--convention", "deepseek", "--calibration", s(&acts)]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--calibration"));
    let o =
        quantize(&input, &out, &["--scheme", "fp8-per-tensor", "--convention", "modelopt", "--non-finite", "poison"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no blocks"), "{}", stderr(&o));

    // K = 200 is no multiple of 128: the tensor is named, and why DeepSeek's own layout
    // would take it; N = 130 is fine (a partial last tile row).
    let o = quantize(&input, &out, &["--scheme", "fp8-block", "--convention", "deepseek"]);
    assert_eq!(code(&o), 3);
    let e = stderr(&o);
    assert!(e.contains("\"odd.weight\"") && e.contains("multiple of 128") && e.contains("--exclude"), "{e}");
    assert!(!out.exists());
    let o = quantize(&input, &out, &["--scheme", "fp8-block", "--convention", "deepseek", "--exclude", "odd*", "-q"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn fp8_per_tensor_names_a_non_finite_weight_and_a_zero_calibration() {
    let mut w = weights(3, 16, 64);
    w[9 * 64 + 40] = f32::NAN;
    let (dir, input, out) = input_and_output(&[("bad.weight".into(), Dtype::BF16, vec![16, 64], bf16_bytes(&w))]);
    let args = ["quantize", s(&input), "-o", s(&out), "--scheme", "fp8-per-tensor", "--convention", "modelopt"];
    let o = run(&args);
    assert_eq!(code(&o), 4);
    let e = stderr(&o);
    assert!(e.contains("\"bad.weight\"") && e.contains("row 9, column 40"), "{e}");
    assert!(leftovers(dir.path(), &["in.safetensors"]).is_empty(), "nothing written");

    write(&input, &[bf16_weight("l.weight", 1, 16, 64)]);
    let acts = dir.path().join("acts.safetensors");
    write(&acts, &[("l".into(), Dtype::F32, vec![4], vec![0; 16])]);
    let o = run(&[&args[..], &["--calibration", s(&acts)]].concat());
    assert_eq!(code(&o), 3);
    let e = stderr(&o);
    assert!(e.contains("acts.safetensors") && e.contains("\"l\"") && e.contains("all zeros"), "{e}");
    assert!(!out.exists());
}

#[test]
fn int4_g128_refuses_what_it_cannot_write_and_names_bad_weights() {
    let (dir, input, out) =
        input_and_output(&[bf16_weight("a.weight", 1, 16, 256), bf16_weight("odd.weight", 2, 8, 96)]);
    let int4 = |extra: &[&str]| quantize(&input, &out, &[&["--scheme", "int4-g128"][..], extra].concat());
    // A library scheme: the native and compressed-tensors conventions store it.
    for convention in ["modelopt", "deepseek"] {
        let o = int4(&["--convention", convention]);
        assert_eq!(code(&o), 6, "{convention}");
        assert!(stderr(&o).contains("--convention native"), "{convention}: {}", stderr(&o));
    }
    let acts = dir.path().join("acts.safetensors");
    write(&acts, &[bf16_weight("a", 3, 2, 256)]);
    let o = int4(&["--convention", "compressed-tensors", "--calibration", s(&acts)]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--calibration gives activation scales"), "{}", stderr(&o));
    // K = 96 is no multiple of 128: the tensor is named with the way out.
    let o = int4(&["--convention", "compressed-tensors"]);
    assert_eq!(code(&o), 3);
    let e = stderr(&o);
    assert!(e.contains("\"odd.weight\"") && e.contains("multiple of") && e.contains("--exclude"), "{e}");
    assert!(!out.exists());

    // A NaN: an error naming row and column, or with --non-finite poison a NaN group.
    let mut w = weights(3, 4, 256);
    w[2 * 256 + 130] = f32::NAN;
    write(&input, &[("bad.weight".into(), Dtype::BF16, vec![4, 256], bf16_bytes(&w))]);
    let o = int4(&["--convention", "compressed-tensors"]);
    assert_eq!(code(&o), 4);
    let e = stderr(&o);
    assert!(e.contains("\"bad.weight\"") && e.contains("row 2, column 130"), "{e}");
    assert!(leftovers(dir.path(), &["in.safetensors", "acts.safetensors"]).is_empty(), "nothing written");
    let o = int4(&["--convention", "compressed-tensors", "--non-finite", "poison", "-q"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = read(&out);
    let scales: Vec<f32> =
        t["bad.weight_scale"].2.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
    assert_eq!(scales.len(), 8);
    assert_eq!(
        scales.iter().map(|x| x.is_nan()).collect::<Vec<_>>(),
        [false, false, false, false, false, true, false, false]
    );
}

#[test]
fn compressed_tensors_configs_blockscale_does_not_decode_are_refused() {
    // A pack-quantized INT4 layer: [4, 32] in int32 words of eight nibbles (all code 9,
    // value 1), BF16 scales per channel, weight_shape.
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("w4a16");
    std::fs::create_dir(&folder).unwrap();
    let p = "model.layers.0.mlp.down_proj";
    let mut tensors: Vec<Tensor> = vec![
        (format!("{p}.weight_packed"), Dtype::I32, vec![4, 4], 0x9999_9999u32.to_le_bytes().repeat(16)),
        (format!("{p}.weight_scale"), Dtype::BF16, vec![4, 1], bf16_bytes(&[0.5, 0.25, 1.0, 2.0])),
        (format!("{p}.weight_shape"), Dtype::I64, vec![2], [4i64, 32].iter().flat_map(|d| d.to_le_bytes()).collect()),
    ];
    write(&folder.join("model.safetensors"), &tensors);
    let config = |format: &str, weights: &str| {
        let qc = format!(
            r#"{{"quant_method": "compressed-tensors", "format": "{format}", "quantization_status": "compressed",
                "config_groups": {{"group_0": {{"targets": ["Linear"], "weights": {weights}}}}}}}"#
        );
        std::fs::write(folder.join("config.json"), format!(r#"{{"quantization_config": {qc}}}"#)).unwrap();
    };
    let out = dir.path().join("out");
    let dequantize = || run(&["dequantize", s(&folder), "-o", s(&out), "--dtype", "f32"]);
    let refused = |what: &[&str]| {
        let o = dequantize();
        assert_eq!(code(&o), 6, "{}", stderr(&o));
        let e = stderr(&o);
        assert!(what.iter().all(|w| e.contains(w)) && e.contains("nothing was written"), "{what:?}: {e}");
        assert!(!out.exists());
        assert_eq!(leftovers(dir.path(), &["w4a16"]), Vec::<String>::new());
    };

    // Read: per channel, value 1 times the row's scale.
    let channel = r#"{"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": true, "actorder": null}"#;
    config("pack-quantized", channel);
    assert_eq!(code(&dequantize()), 0);
    let got = read(&out.join("model.safetensors"));
    let values = f32s(&got[&format!("{p}.weight")].2);
    assert_eq!(values, [0.5, 0.25, 1.0, 2.0].iter().flat_map(|&s| [s; 32]).collect::<Vec<f32>>());
    std::fs::remove_dir_all(&out).unwrap();

    // Activation ordering by group (weight_g_idx), declared or only present.
    config(
        "pack-quantized",
        r#"{"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "actorder": "group"}"#,
    );
    refused(&["\"group_0\"", "actorder \"group\"", "weight_g_idx"]);
    config("pack-quantized", channel);
    tensors.push((format!("{p}.weight_g_idx"), Dtype::I32, vec![32], vec![0; 128]));
    write(&folder.join("model.safetensors"), &tensors);
    refused(&[&format!("{p}.weight_g_idx"), "activation-ordered"]);
    tensors.pop();
    write(&folder.join("model.safetensors"), &tensors);

    // A format or a num_bits / type / strategy blockscale does not decode.
    config("marlin-24", channel);
    refused(&["format \"marlin-24\"", "pack-quantized (INT4"]);
    config("pack-quantized", r#"{"num_bits": 8, "type": "int", "strategy": "channel"}"#);
    refused(&["num_bits 8", "4-bit integers only"]);
    config("float-quantized", r#"{"num_bits": 8, "type": "float", "strategy": "token"}"#);
    refused(&["strategy \"token\""]);
    // inspect refuses them too (exit code as dequantize's).
    assert_eq!(code(&run(&["inspect", s(&folder)])), 6);
}

#[test]
fn a_per_channel_fp8_scale_without_a_config_is_read() {
    // ModelOpt-style names without a config, one F32 scale per row ([N, 1]): code 0x38 is
    // 1.0, so each row comes back as its scale.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("fp8.safetensors");
    let scales = [0.5f32, 0.125, 3.0];
    write(
        &input,
        &[
            ("l.weight".into(), Dtype::F8_E4M3, vec![3, 16], vec![0x38; 48]),
            ("l.weight_scale".into(), Dtype::F32, vec![3, 1], scales.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ],
    );
    let out = dir.path().join("out.safetensors");
    ok(&["dequantize", s(&input), "-o", s(&out), "--dtype", "f32", "-q"]);
    let values = f32s(&read(&out)["l.weight"].2);
    assert_eq!(values, scales.iter().flat_map(|&s| [s; 16]).collect::<Vec<f32>>());
}

/// A file-size limit (`ulimit -f`, with SIGXFSZ ignored so that the write fails with
/// EFBIG instead of killing the process) stands in for a full disk: the first shard
/// fits, the second does not. The error names the file being written, and neither the
/// output folder nor a temporary is left.
#[test]
fn an_output_that_cannot_be_written_is_an_error_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // NVFP4 of 64 x 1024: 32 KiB of codes and 4 KiB of scales; of 512 x 1024, 288 KiB.
    let (a, b) = (bf16_weight("a.weight", 1, 64, 1024), bf16_weight("b.weight", 2, 512, 1024));
    let model = folder(dir.path(), "model", &[("a.safetensors", vec![a]), ("b.safetensors", vec![b])]);
    let q = dir.path().join("q");
    let o = std::process::Command::new("bash")
        .args(["-c", "trap '' XFSZ; ulimit -f 128; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_blockscale"))
        .args(["quantize", s(&model), "-o", s(&q), "--scheme", "nvfp4", "--convention", "modelopt"])
        .output()
        .expect("bash runs");
    assert_eq!(code(&o), 5, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("b.safetensors") && e.contains("writing failed"), "{e}");
    assert!(!q.exists());
    assert_eq!(leftovers(dir.path(), &["model"]), Vec::<String>::new());
}
