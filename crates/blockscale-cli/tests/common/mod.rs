//! Helpers of the CLI's integration tests: small seeded checkpoints and running the
//! binary.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use blockscale::rng::SplitMix64;
use half::bf16;
use safetensors::{Dtype, SafeTensors};

/// A tensor to write: name, dtype, shape, little-endian bytes.
pub type Tensor = (String, Dtype, Vec<usize>, Vec<u8>);

/// Seeded values with heavy tails, a few exact zero blocks and one outlier column.
pub fn weights(seed: u64, rows: usize, k: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..rows * k)
        .map(|i| {
            let (r, c) = (i / k, i % k);
            if r % 7 == 3 && c < 32 {
                return 0.0;
            }
            let u = rng.unit_f64() - 0.5;
            let heavy = u / (0.55 - u.abs()); // tails far heavier than a Gaussian
            let v = heavy * 0.02 * if c == 5 { 30.0 } else { 1.0 };
            v as f32
        })
        .collect()
}

/// bf16 bytes of `v` (round to nearest even).
pub fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| bf16::from_f32(x).to_le_bytes()).collect()
}

/// A bf16 tensor of seeded weights.
pub fn bf16_weight(name: &str, seed: u64, rows: usize, k: usize) -> Tensor {
    (name.into(), Dtype::BF16, vec![rows, k], bf16_bytes(&weights(seed, rows, k)))
}

/// Writes a safetensors file with `{"format": "pt"}` metadata.
pub fn write(path: &Path, tensors: &[Tensor]) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path).unwrap();
}

/// A fresh temporary folder holding `name`, a safetensors file of `tensors`: the folder
/// (removed when dropped) and the file's path.
pub fn input_file(name: &str, tensors: &[Tensor]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    write(&path, tensors);
    (dir, path)
}

/// [`input_file`] `in.safetensors`, and the path of an output `o.safetensors` beside it.
pub fn input_and_output(tensors: &[Tensor]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, input) = input_file("in.safetensors", tensors);
    let out = dir.path().join("o.safetensors");
    (dir, input, out)
}

/// A new folder `parent/name` holding a safetensors file of each `(file, tensors)`.
pub fn folder(parent: &Path, name: &str, files: &[(&str, Vec<Tensor>)]) -> PathBuf {
    let folder = parent.join(name);
    std::fs::create_dir(&folder).unwrap();
    for (file, tensors) in files {
        write(&folder.join(file), tensors);
    }
    folder
}

/// A small model: two linear weights (one with 130 rows), an embedding, a norm.
pub fn model_tensors(seed: u64) -> Vec<Tensor> {
    vec![
        bf16_weight("model.embed_tokens.weight", seed, 32, 256),
        bf16_weight("model.layers.0.self_attn.q_proj.weight", seed + 1, 64, 256),
        bf16_weight("model.layers.0.mlp.down_proj.weight", seed + 2, 130, 512),
        ("model.layers.0.input_layernorm.weight".into(), Dtype::BF16, vec![256], bf16_bytes(&[1.0; 256])),
    ]
}

/// Runs `blockscale args...`.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockscale")).args(args).output().expect("the binary runs")
}

/// Runs `blockscale quantize input -o out args...`.
pub fn quantize(input: &Path, out: &Path, args: &[&str]) -> Output {
    run(&[&["quantize", s(input), "-o", s(out)][..], args].concat())
}

/// The exit code of a finished run.
pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

/// A run's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Names in `dir` other than `keep`: temporaries left behind would show up here.
pub fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

/// Runs and requires success.
pub fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "blockscale {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// Reads every tensor of a file: name -> (dtype, shape, bytes).
pub fn read(path: &Path) -> HashMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors().into_iter().map(|(n, t)| (n, (t.dtype(), t.shape().to_vec(), t.data().to_vec()))).collect()
}

/// f32 values of little-endian bytes.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Values of bf16 bytes as f32.
pub fn bf16s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
}

/// `path` as a string argument.
pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}
