//! Damaged and lying input files (issue 16, "bad input, fuzzed"): headers whose offsets
//! overlap or run past the end, checkpoints whose index disagrees with their shards,
//! invalid per-tensor and block scales. Each is a typed input error (exit 3) naming the
//! file and tensor, and nothing is left behind; a format's own NaN block scale is not an
//! error but a NaN block. Expected values come from the formats' definitions (E2M1 code
//! 2 is 1.0, E4M3 0x38 is 1.0, UE8M0 0x7f is 2^0), never from the code under test.

mod common;

use std::path::Path;

use common::*;
use safetensors::Dtype;

/// Runs `dequantize in -o out` and requires an input error naming every one of `names`,
/// with no output (nor a temporary of it) left beside `out`.
fn refused(input: &Path, names: &[&str]) {
    let dir = input.parent().unwrap();
    let out = dir.join("out-of-refused");
    let o = run(&["dequantize", s(input), "-o", s(&out)]);
    let e = stderr(&o);
    assert_eq!(code(&o), 3, "{e}");
    for n in names {
        assert!(e.contains(n), "{n:?} not in: {e}");
    }
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("out-of-refused"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A safetensors file with this header JSON and `data_len` data bytes, written by hand
/// (the safetensors writer refuses inconsistent headers).
fn raw(path: &Path, header: &str, data_len: usize) {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    bytes.resize(bytes.len() + data_len, 0x3f);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn headers_with_overlapping_or_out_of_range_offsets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, header, len) in [
        (
            "overlap.safetensors",
            r#"{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[4,12]}}"#,
            12,
        ),
        ("past-end.safetensors", r#"{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}"#, 4),
        ("gap.safetensors", r#"{"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}"#, 8),
        ("lying-shape.safetensors", r#"{"a":{"dtype":"BF16","shape":[5],"data_offsets":[0,8]}}"#, 8),
        ("huge-shape.safetensors", r#"{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}}"#, 8),
    ] {
        let p = dir.path().join(name);
        raw(&p, header, len);
        let o = run(&["inspect", s(&p)]);
        assert_eq!(code(&o), 3, "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(name) && stderr(&o).contains("not a readable safetensors file"), "{}", stderr(&o));
        refused(&p, &[name]);
    }
}

/// A folder of two shards and an index; `edit` changes the index's weight_map.
fn sharded(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> std::path::PathBuf {
    let model = dir.join("model");
    std::fs::create_dir(&model).unwrap();
    let t = model_tensors(3);
    write(&model.join("model-00001-of-00002.safetensors"), &t[..2]);
    write(&model.join("model-00002-of-00002.safetensors"), &t[2..]);
    let mut map = serde_json::Map::new();
    for (i, x) in t.iter().enumerate() {
        map.insert(x.0.clone(), format!("model-0000{}-of-00002.safetensors", 1 + i / 2).into());
    }
    edit(&mut map);
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map });
    std::fs::write(model.join("model.safetensors.index.json"), index.to_string()).unwrap();
    model
}

#[test]
fn shards_that_disagree_with_their_index_are_refused_with_the_tensor_named() {
    const NORM: &str = "model.layers.0.input_layernorm.weight";
    const Q: &str = "model.layers.0.self_attn.q_proj.weight";
    // The consistent folder reads.
    let dir = tempfile::tempdir().unwrap();
    let model = sharded(dir.path(), |_| {});
    ok(&["inspect", s(&model)]);
    ok(&["dequantize", s(&model), "-o", s(&dir.path().join("d"))]);

    type Edit = fn(&mut serde_json::Map<String, serde_json::Value>);
    let cases: [(&str, Edit, &[&str]); 4] = [
        // A tensor the index lists that its shard does not hold.
        (
            "listed, not held",
            |m| {
                m.insert("model.layers.9.mlp.up_proj.weight".into(), "model-00002-of-00002.safetensors".into());
            },
            &["model.layers.9.mlp.up_proj.weight", "model.safetensors.index.json", "does not hold it"],
        ),
        // A tensor a shard holds that the index does not list.
        (
            "held, not listed",
            |m| {
                m.remove(NORM);
            },
            &[NORM, "model-00002-of-00002.safetensors", "not listed in the index"],
        ),
        // A tensor in another shard than the index says.
        (
            "misplaced",
            |m| {
                m.insert(Q.into(), "model-00002-of-00002.safetensors".into());
            },
            &[Q, "model-00001-of-00002.safetensors", "places it in model-00002-of-00002.safetensors"],
        ),
        // A shard the index lists that is absent.
        (
            "absent shard",
            |m| {
                m.insert(NORM.into(), "model-00003-of-00003.safetensors".into());
            },
            &["model-00003-of-00003.safetensors", "missing"],
        ),
    ];
    for (what, edit, names) in cases {
        let dir = tempfile::tempdir().unwrap();
        let model = sharded(dir.path(), edit);
        let o = run(&["inspect", s(&model)]);
        assert_eq!(code(&o), 3, "{what}: {}", stderr(&o));
        refused(&model, names);
        let out = dir.path().join("q");
        let o = run(&["quantize", s(&model), "-o", s(&out), "--scheme", "nvfp4"]);
        assert_eq!(code(&o), 3, "{what}: {}", stderr(&o));
        assert!(!out.exists(), "{what}: quantize left {out:?}");
    }
}

fn f32_tensor(name: &str, shape: Vec<usize>, v: &[f32]) -> Tensor {
    (name.into(), Dtype::F32, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

fn dequantized(input: &Path, name: &str) -> Vec<f32> {
    let out = input.with_extension("out.safetensors");
    ok(&["dequantize", s(input), "-o", s(&out), "--dtype", "f32", "--force"]);
    f32s(&read(&out)[name].2)
}

#[test]
fn per_tensor_scales_must_be_finite_and_positive() {
    // ModelOpt FP8: E4M3 0x38 is 1.0, times weight_scale.
    let fp8 = |scale: f32| {
        vec![
            ("l.weight".to_string(), Dtype::F8_E4M3, vec![1, 4], vec![0x38; 4]),
            f32_tensor("l.weight_scale", vec![], &[scale]),
        ]
    };
    let (_dir, p) = input_file("in.safetensors", &fp8(0.5));
    assert_eq!(dequantized(&p, "l.weight"), [0.5; 4]);
    // A zero FP8 scale is what `quantize --scheme fp8-per-tensor` writes for an all-zero
    // weight (amax / 448 = 0): it decodes to zeros.
    write(&p, &fp8(0.0));
    assert_eq!(dequantized(&p, "l.weight"), [0.0; 4]);
    // ModelOpt NVFP4 (weight_scale_2) and compressed-tensors (weight_global_scale).
    let nvfp4 = |scale: f32| {
        vec![
            ("l.weight".to_string(), Dtype::U8, vec![1, 8], vec![0x22; 8]),
            ("l.weight_scale".to_string(), Dtype::F8_E4M3, vec![1, 1], vec![0x38]),
            f32_tensor("l.weight_scale_2", vec![], &[scale]),
        ]
    };
    let ct = |scale: f32| {
        vec![
            ("l.weight_packed".to_string(), Dtype::U8, vec![1, 8], vec![0x22; 8]),
            ("l.weight_scale".to_string(), Dtype::F8_E4M3, vec![1, 1], vec![0x38]),
            f32_tensor("l.weight_global_scale", vec![1], &[scale]),
        ]
    };
    for bad in [0.0, -0.0, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let fp8_bad = (bad != 0.0).then(|| (fp8(bad), "l.weight_scale"));
        for (tensors, name) in
            [(nvfp4(bad), "l.weight_scale_2"), (ct(bad), "l.weight_global_scale")].into_iter().chain(fp8_bad)
        {
            write(&p, &tensors);
            refused(&p, &["in.safetensors", name]);
        }
    }
}

#[test]
fn block_scales_nan_is_a_nan_block_and_invalid_encodings_are_refused() {
    // ModelOpt NVFP4, two blocks of 16 codes 2 (1.0): UE4M3 0x7f is the NaN block
    // (`quantize --non-finite poison` writes it), 0x38 is 1.0.
    let nvfp4 = |s0: u8| {
        vec![
            ("l.weight".to_string(), Dtype::U8, vec![1, 16], vec![0x22; 16]),
            ("l.weight_scale".to_string(), Dtype::F8_E4M3, vec![1, 2], vec![s0, 0x38]),
            f32_tensor("l.weight_scale_2", vec![], &[1.0]),
        ]
    };
    let (_dir, p) = input_file("in.safetensors", &nvfp4(0x7f));
    let v = dequantized(&p, "l.weight");
    assert!(v[..16].iter().all(|x| x.is_nan()) && v[16..] == [1.0; 16], "{v:?}");
    // A UE4M3 byte with the sign bit set is no value of the format.
    for b in [0x80, 0xb8, 0xff] {
        write(&p, &nvfp4(b));
        refused(&p, &["l.weight_scale", "sign bit"]);
    }
    // gpt-oss MXFP4: UE8M0 0xff is the format's NaN, a NaN block; 0x7f is 2^0.
    write(
        &p,
        &[
            ("m_blocks".to_string(), Dtype::U8, vec![1, 2, 16], vec![0x22; 32]),
            ("m_scales".to_string(), Dtype::U8, vec![1, 2], vec![0xff, 0x7f]),
        ],
    );
    let v = dequantized(&p, "m");
    assert!(v[..32].iter().all(|x| x.is_nan()) && v[32..] == [1.0; 32], "{v:?}");
    // DeepSeek FP8: weight_scale_inv is a plain f32 no writer stores as NaN, Inf or
    // negative; zero is a block of zeros.
    let ds = |scale: f32| {
        vec![
            ("l.weight".to_string(), Dtype::F8_E4M3, vec![2, 3], vec![0x38; 6]),
            f32_tensor("l.weight_scale_inv", vec![1, 1], &[scale]),
        ]
    };
    write(&p, &ds(2.0));
    assert_eq!(dequantized(&p, "l.weight"), [2.0; 6]);
    write(&p, &ds(0.0));
    assert_eq!(dequantized(&p, "l.weight"), [0.0; 6]);
    for bad in [f32::NAN, f32::INFINITY, -1.0] {
        write(&p, &ds(bad));
        refused(&p, &["l.weight_scale_inv", "scale [0, 0]"]);
    }
}

#[test]
fn scale_tensors_of_the_wrong_dtype_or_shape_are_named_for_every_convention() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.safetensors");
    let cases: Vec<(Vec<Tensor>, &str)> = vec![
        // ModelOpt NVFP4: F32 block scales.
        (
            vec![
                ("l.weight".into(), Dtype::U8, vec![1, 8], vec![0x22; 8]),
                f32_tensor("l.weight_scale", vec![1, 1], &[1.0]),
                f32_tensor("l.weight_scale_2", vec![], &[1.0]),
            ],
            "l.weight_scale",
        ),
        // compressed-tensors: a per-tensor scale of two values.
        (
            vec![
                ("l.weight_packed".into(), Dtype::U8, vec![1, 8], vec![0x22; 8]),
                ("l.weight_scale".into(), Dtype::F8_E4M3, vec![1, 1], vec![0x38]),
                f32_tensor("l.weight_global_scale", vec![2], &[1.0, 1.0]),
            ],
            "l.weight_global_scale",
        ),
        // gpt-oss: scales for another K.
        (
            vec![
                ("m_blocks".into(), Dtype::U8, vec![1, 2, 16], vec![0x22; 32]),
                ("m_scales".into(), Dtype::U8, vec![1, 3], vec![0x7f; 3]),
            ],
            "m_scales",
        ),
        // DeepSeek: bf16 weight_scale_inv.
        (
            vec![
                ("l.weight".into(), Dtype::F8_E4M3, vec![2, 3], vec![0x38; 6]),
                ("l.weight_scale_inv".into(), Dtype::BF16, vec![1, 1], vec![0x80, 0x3f]),
            ],
            "l.weight_scale_inv",
        ),
        // DeepSeek: scales for 256 rows.
        (
            vec![
                ("l.weight".into(), Dtype::F8_E4M3, vec![2, 3], vec![0x38; 6]),
                f32_tensor("l.weight_scale_inv", vec![2, 1], &[1.0, 1.0]),
            ],
            "l.weight_scale_inv",
        ),
        // ModelOpt FP8: an f16 per-tensor scale.
        (
            vec![
                ("l.weight".into(), Dtype::F8_E4M3, vec![1, 4], vec![0x38; 4]),
                ("l.weight_scale".into(), Dtype::F16, vec![], vec![0x00, 0x3c]),
            ],
            "l.weight_scale",
        ),
    ];
    for (tensors, name) in cases {
        write(&p, &tensors);
        refused(&p, &["in.safetensors", name]);
    }
}
