//! Helpers of the stages' unit tests: parsed arguments and small safetensors inputs.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::Dtype;

use blockscale::checkpoint::{PlannedTensor, ShardWriter};
use crate::cli::{Cli, Command, QuantizeArgs};

/// `blockscale quantize ARGV...`, parsed.
pub fn args(argv: &[&str]) -> QuantizeArgs {
    use clap::Parser;
    match Cli::parse_from(["blockscale", "quantize"].iter().chain(argv)).command {
        Command::Quantize(a) => a,
        _ => unreachable!(),
    }
}

/// bf16 bytes of `n` values that every scheme quantizes without complaint.
pub fn bf16_values(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| half::bf16::from_f32((i % 13) as f32 / 4.0 - 1.5).to_le_bytes()).collect()
}

/// Writes a safetensors file holding `tensors` (name, shape, bf16 bytes).
pub fn write_bf16(path: &Path, tensors: &[(&str, Vec<usize>, Vec<u8>)]) {
    let planned: Vec<PlannedTensor> =
        tensors.iter().map(|(n, s, _)| PlannedTensor::new(*n, Dtype::BF16, s.clone())).collect();
    let mut w = ShardWriter::create(path, &planned, &BTreeMap::new()).unwrap();
    for (n, _, b) in tensors {
        w.write(n, b).unwrap();
    }
    w.finish().unwrap();
}

/// A file with one 2 x 64 weight `l.weight` and one 1-D `norm` (copied unchanged).
pub fn small_model(path: &Path) {
    write_bf16(path, &[("l.weight", vec![2, 64], bf16_values(128)), ("norm", vec![4], bf16_values(4))]);
}

/// A temporary folder holding [`small_model`] as `m.safetensors`, and the parsed
/// `quantize m.safetensors -o o.safetensors EXTRA...` of it: the folder (removed when
/// dropped), the output path and the arguments.
pub fn small_job(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, QuantizeArgs) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.safetensors");
    small_model(&input);
    let out = dir.path().join("o.safetensors");
    let argv = [&[input.to_str().unwrap(), "-o", out.to_str().unwrap()][..], extra].concat();
    let a = args(&argv);
    (dir, out, a)
}
