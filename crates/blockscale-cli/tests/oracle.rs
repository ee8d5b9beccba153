//! The `blockscale` command against an independent Python oracle (tests/oracle/oracle.py,
//! written from the formats' published descriptions with numpy, ml_dtypes and
//! safetensors):
//!
//! - NVFP4 checkpoints we write (ModelOpt and compressed-tensors conventions) must
//!   dequantize, by the oracle, to what `blockscale dequantize` gives.
//! - FP8 checkpoints we write (DeepSeek-V3 blocks, ModelOpt per tensor) must hold, byte
//!   for byte, the scales and codes the oracle computes from the original weights by
//!   the published recipe.
//! - Checkpoints in the layouts of others (gpt-oss MXFP4, DeepSeek-V3 FP8) written by
//!   the oracle must dequantize to the values the oracle computes for them.
//!
//! The oracle runs with `PYTHONPATH` at `BLOCKSCALE_PYTHONPATH` or
//! `target/python-oracles` (`cargo xtask setup-python`); without it the tests skip
//! with a message, or fail under CI / `BLOCKSCALE_REQUIRE_ORACLES=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use blockscale::rng::SplitMix64;
use half::{bf16, f16};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

// ---- Locating and running the oracle (the pattern of blockscale-formats' oracle tests).

/// The target dir these tests were built in (`CARGO_TARGET_DIR`, else `target/`), where
/// `cargo xtask setup-python` installs: cargo's `CARGO_TARGET_TMPDIR` is its `tmp/`.
fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("..")
}

/// Whether a missing oracle must fail the test (`CI` set and not false, or
/// `BLOCKSCALE_REQUIRE_ORACLES=1`) rather than skip it.
fn oracle_required() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var("BLOCKSCALE_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// Skips (prints why and returns) or, under CI, fails.
fn skip_or_fail(what: &str) {
    if oracle_required() {
        panic!("{what}; under CI a missing oracle is a failure. Run `cargo xtask test`, which installs it.");
    }
    eprintln!("SKIPPED: {what}. Run `cargo xtask test` (it installs the oracles under target/).");
}

/// The folder holding the oracle's Python packages.
fn python_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("BLOCKSCALE_PYTHONPATH").map(PathBuf::from).into_iter().collect();
    candidates.push(target_dir().join("python-oracles"));
    candidates.into_iter().find(|p| ["ml_dtypes", "numpy", "safetensors"].iter().all(|m| p.join(m).is_dir()))
}

struct Oracle {
    python: String,
    path: PathBuf,
    script: PathBuf,
}

impl Oracle {
    /// The oracle and a fresh temporary folder, or None (the test skips) without Python.
    fn with_dir() -> Option<(Self, tempfile::TempDir)> {
        Some((Self::find()?, tempfile::tempdir().unwrap()))
    }

    /// The oracle, or `None` after skipping (or panics under CI) if it cannot run.
    fn find() -> Option<Self> {
        let Some(path) = python_path() else {
            skip_or_fail("ml_dtypes, numpy and safetensors not found (BLOCKSCALE_PYTHONPATH or target/python-oracles)");
            return None;
        };
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        if let Err(e) = Command::new(&python).arg("--version").output() {
            skip_or_fail(&format!("cannot run {python}: {e}"));
            return None;
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/oracle.py");
        Some(Self { python, path, script })
    }

    fn run<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&self, args: I) {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script).args(args).env("PYTHONPATH", &self.path);
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", self.python));
        assert!(
            out.status.success(),
            "the oracle failed ({}): {cmd:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs `blockscale` and panics with its output if it fails; returns its stdout.
fn blockscale<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_blockscale"));
    cmd.args(args);
    let out = cmd.output().expect("cannot run blockscale");
    assert!(
        out.status.success(),
        "blockscale failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

// ---- Reading and writing safetensors files.

struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Tensor {
    /// The values as f32, converted exactly (F32, BF16 and F16 only).
    fn f32s(&self, name: &str) -> Vec<f32> {
        let d = &self.data;
        match self.dtype {
            Dtype::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::BF16 => d.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F16 => d.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => panic!("{name}: {other:?} is not a float dtype that converts exactly to f32"),
        }
    }

    fn bf16_bits(&self, name: &str) -> Vec<u16> {
        assert_eq!(self.dtype, Dtype::BF16, "{name}");
        self.data.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
    }
}

struct File {
    tensors: BTreeMap<String, Tensor>,
    /// The oracle's list of tensors that are (or must be) the output of dequantization.
    dequantized: BTreeSet<String>,
    /// The `__metadata__`.
    metadata: BTreeMap<String, String>,
}

impl File {
    fn read(path: &Path) -> Self {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (_, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
        let metadata: BTreeMap<String, String> = metadata.metadata().clone().unwrap_or_default().into_iter().collect();
        let dequantized = match metadata.get("dequantized") {
            Some(list) => serde_json::from_str(list).unwrap(),
            None => BTreeSet::new(),
        };
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let tensors = st
            .iter()
            .map(|(name, t)| {
                (name.to_string(), Tensor { dtype: t.dtype(), shape: t.shape().to_vec(), data: t.data().to_vec() })
            })
            .collect();
        Self { tensors, dequantized, metadata }
    }

    fn get(&self, name: &str) -> &Tensor {
        self.tensors.get(name).unwrap_or_else(|| panic!("no tensor {name}"))
    }

    fn names(&self) -> BTreeSet<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }
}

// ---- The BF16 checkpoint we quantize.

/// Uniform in (0, 1), from the project's seeded generator.
fn open_unit(rng: &mut SplitMix64) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Standard normal (Box-Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    (-2.0 * open_unit(rng).ln()).sqrt() * (std::f64::consts::TAU * open_unit(rng)).cos()
}

/// A bf16 input tensor: its name, shape and values.
struct Input {
    name: &'static str,
    shape: Vec<usize>,
    values: Vec<bf16>,
}

/// Heavy-tailed weights like a transformer's: a normal times a log-normal (so single
/// values reach many sigmas), rows whose magnitudes span 2^-10 .. 2^4 (block scales
/// from E4M3's subnormals to its top), a few outlier columns, scattered exact zeros, an
/// all-zero row and aligned all-zero 16-blocks.
fn weight(rng: &mut SplitMix64, rows: usize, cols: usize) -> Vec<bf16> {
    let outlier_cols: Vec<usize> = (0..3).map(|_| rng.below(cols)).collect();
    let mut w = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row_scale = 2f64.powf(-10.0 + 14.0 * open_unit(rng));
        for c in 0..cols {
            let mut x = normal(rng) * (0.8 * normal(rng)).exp() * row_scale;
            if outlier_cols.contains(&c) {
                x *= 20.0;
            }
            if rng.below(100) == 0 || r == 5 {
                x = 0.0;
            }
            w.push(bf16::from_f64(x));
        }
        if rng.below(4) == 0 {
            let b = rng.below(cols / 16);
            w[r * cols + 16 * b..r * cols + 16 * (b + 1)].fill(bf16::ZERO);
        }
    }
    w
}

/// Writes the checkpoint: two 2-D linear weights (which `quantize` takes by default; 130
/// rows is no multiple of anything) and a 1-D norm weight (which it must leave alone).
fn write_checkpoint(path: &Path) -> Vec<Input> {
    write_inputs(path, checkpoint_inputs())
}

/// The tensors of [`write_checkpoint`].
/// [`checkpoint_inputs`] and an all-zero `8 x k` weight, `zero_proj` (a writer's scale 0).
/// [`checkpoint_inputs`], an all-zero weight of K `k`, and `extra`.
fn checkpoint_inputs_with_zeros(k: usize, extra: Input) -> Vec<Input> {
    let mut inputs = checkpoint_inputs();
    inputs.push(Input {
        name: "model.layers.0.mlp.zero_proj.weight",
        shape: vec![8, k],
        values: vec![bf16::ZERO; 8 * k],
    });
    inputs.push(extra);
    inputs
}

fn checkpoint_inputs() -> Vec<Input> {
    let mut rng = SplitMix64::new(0x0b5e_c0de_5eed_0001);
    vec![
        Input {
            name: "model.layers.0.self_attn.q_proj.weight",
            shape: vec![64, 256],
            values: weight(&mut rng, 64, 256),
        },
        Input { name: "model.layers.0.mlp.up_proj.weight", shape: vec![130, 512], values: weight(&mut rng, 130, 512) },
        Input {
            name: "model.layers.0.input_layernorm.weight",
            shape: vec![256],
            values: (0..256).map(|_| bf16::from_f64(1.0 + 0.1 * normal(&mut rng))).collect(),
        },
    ]
}

/// Writes `inputs` as a safetensors file, and returns them.
fn write_inputs(path: &Path, inputs: Vec<Input>) -> Vec<Input> {
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|t| t.values.iter().flat_map(|v| v.to_le_bytes()).collect()).collect();
    let views: Vec<(&str, TensorView)> = inputs
        .iter()
        .zip(&bytes)
        .map(|(t, b)| (t.name, TensorView::new(Dtype::BF16, t.shape.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
    inputs
}

// ---- Comparisons.

/// The distance in units in the last place between two finite f32 (on the line of f32
/// bit patterns ordered by value, where -0 and +0 are the same point).
fn ulps(a: f32, b: f32) -> u64 {
    let line = |x: f32| {
        let bits = x.to_bits();
        if bits >> 31 == 1 { -i64::from(bits & 0x7fff_ffff) } else { i64::from(bits) }
    };
    line(a).abs_diff(line(b))
}

/// Quantizes the checkpoint with `convention`, dequantizes it with the oracle's
/// `oracle_command` and with `blockscale dequantize --dtype f32`, and compares: every
/// quantized weight within `max_ulps` (0: bit for bit), every other tensor unchanged.
/// `layer_tensors` are the suffixes of the tensors the convention writes for a
/// quantized `P.weight`, with their dtypes. Returns (bit-identical values, values).
fn nvfp4_round_trip(
    convention: &str,
    oracle_command: &str,
    layer_tensors: &[(&str, Dtype)],
    max_ulps: u64,
) -> Option<(usize, usize)> {
    let oracle = Oracle::find()?;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("model.safetensors");
    let quantized = dir.path().join("nvfp4.safetensors");
    let theirs = dir.path().join("oracle.safetensors");
    let ours = dir.path().join("blockscale.safetensors");
    let inputs = write_checkpoint(&input);

    blockscale(
        [OsStr::new("quantize"), input.as_os_str(), OsStr::new("-o"), quantized.as_os_str()]
            .into_iter()
            .chain(["--scheme", "nvfp4", "--convention", convention, "-q"].map(OsStr::new)),
    );
    // The convention's tensors, named and typed as documented.
    let q = File::read(&quantized);
    let want_names = check_layer_tensors(&q, &inputs, layer_tensors, convention);
    assert_eq!(q.names(), want_names.iter().map(String::as_str).collect(), "{convention}: the tensors written");

    oracle.run([OsStr::new(oracle_command), quantized.as_os_str(), theirs.as_os_str()]);
    blockscale(
        [OsStr::new("dequantize"), quantized.as_os_str(), OsStr::new("-o"), ours.as_os_str()]
            .into_iter()
            .chain(["--dtype", "f32", "-q"].map(OsStr::new)),
    );
    let (theirs, ours) = (File::read(&theirs), File::read(&ours));
    assert_eq!(ours.names(), theirs.names(), "{convention}: tensors after dequantize");
    let quantized_names: BTreeSet<String> =
        inputs.iter().filter(|t| t.shape.len() == 2).map(|t| t.name.into()).collect();
    assert_eq!(theirs.dequantized, quantized_names, "{convention}: the layers the oracle dequantized");

    let (mut identical, mut total) = (0, 0);
    for t in &inputs {
        let original: Vec<f32> = t.values.iter().map(|v| v.to_f32()).collect();
        let (o, th) = (ours.get(t.name), theirs.get(t.name));
        assert_eq!(o.shape, t.shape, "{}", t.name);
        assert_eq!(th.shape, t.shape, "{}", t.name);
        if t.shape.len() != 2 {
            // Not quantized: the exact input values, whatever float dtype carries them.
            assert!(o.f32s(t.name).iter().zip(&original).all(|(a, b)| a.to_bits() == b.to_bits()), "{}", t.name);
            continue;
        }
        assert_eq!(o.dtype, Dtype::F32, "{}", t.name);
        let (o, th) = (o.f32s(t.name), th.f32s(t.name));
        for (i, (&a, &b)) in o.iter().zip(&th).enumerate() {
            assert!(a.is_finite() && b.is_finite(), "{} [{i}]: blockscale {a}, oracle {b}", t.name);
            let d = ulps(a, b);
            assert!(
                d <= max_ulps,
                "{} [{i}]: blockscale {a:e} ({:#010x}), oracle {b:e} ({:#010x}), {d} ulps apart",
                t.name,
                a.to_bits(),
                b.to_bits()
            );
            identical += usize::from(a.to_bits() == b.to_bits());
        }
        total += o.len();
        // Both agreeing proves nothing if the quantizer wrote nonsense: the values must
        // also be NVFP4's approximation of the input, and exact zeros stay zeros.
        let (mut err, mut energy) = (0f64, 0f64);
        for (&a, &x) in o.iter().zip(&original) {
            if x == 0.0 {
                assert_eq!(a, 0.0, "{}: an exact zero came back as {a}", t.name);
            }
            err += f64::from(a - x).powi(2);
            energy += f64::from(x).powi(2);
        }
        let rel = (err / energy).sqrt();
        assert!(rel < 0.2, "{}: relative RMS error {rel} is not NVFP4's", t.name);
    }
    Some((identical, total))
}

/// The oracle checks itself: its code tables against ml_dtypes, its dequantizers and
/// writers against element-by-element loops (independent of the CLI).
#[test]
fn oracle_selftest() {
    if let Some(oracle) = Oracle::find() {
        oracle.run(["selftest"]);
    }
}

#[test]
fn modelopt_nvfp4_matches_oracle_bit_for_bit() {
    // W = (e2m1 * scale) * scale_2: the first product is exact in f32, so one f32
    // rounding; any correct implementation gets the same bits.
    let layer = [(".weight", Dtype::U8), (".weight_scale", Dtype::F8_E4M3), (".weight_scale_2", Dtype::F32)];
    let Some((identical, total)) = nvfp4_round_trip("modelopt", "dequantize-modelopt", &layer, 0) else { return };
    assert_eq!(identical, total);
}

#[test]
fn compressed_tensors_nvfp4_matches_oracle_within_one_ulp() {
    // The documented formula divides by the encode scale (weight_global_scale); we
    // multiply by its f32 reciprocal, which is itself rounded, so a value may land on
    // the neighbouring f32: at most 1 ulp apart, compared on the f32 bit patterns.
    // How many differ depends on the global scale's mantissa (for NVFP4-quantized
    // heavy-tailed data simulations gave a median of ~80% identical and a worst case
    // of ~33% per tensor), so the floor here is a quarter: a systematic error fails it.
    let layer =
        [(".weight_packed", Dtype::U8), (".weight_scale", Dtype::F8_E4M3), (".weight_global_scale", Dtype::F32)];
    let Some((identical, total)) = nvfp4_round_trip("compressed-tensors", "dequantize-compressed", &layer, 1) else {
        return;
    };
    eprintln!("compressed-tensors: {identical} of {total} values bit-identical to the oracle's division");
    assert!(identical * 4 >= total, "only {identical} of {total} values bit-identical");
}

/// Checks that each 2-D input became `layer_tensors` (suffixes of its layer prefix, each
/// of its dtype) and every other input stayed BF16; returns every name the file must
/// hold. `what` labels the failures.
fn check_layer_tensors(q: &File, inputs: &[Input], layer_tensors: &[(&str, Dtype)], what: &str) -> BTreeSet<String> {
    let mut want_names = BTreeSet::new();
    for t in inputs {
        if t.shape.len() == 2 {
            let prefix = t.name.strip_suffix(".weight").unwrap();
            for &(suffix, dtype) in layer_tensors {
                let name = format!("{prefix}{suffix}");
                assert_eq!(q.get(&name).dtype, dtype, "{what}: {name}");
                want_names.insert(name);
            }
        } else {
            assert_eq!(q.get(t.name).dtype, Dtype::BF16, "{what}: {} must stay as it was", t.name);
            want_names.insert(t.name.to_string());
        }
    }
    want_names
}

/// Has the oracle write a checkpoint in a layout of others with the values it must
/// dequantize to, then checks `blockscale dequantize` with `--dtype f32` (bit for bit)
/// and `--dtype bf16` (the f32 values rounded to nearest-even, as the reference
/// implementations cast their f32 result).
fn third_party(command: &str, seed: u64) {
    third_party_at(command, seed, false, &[]);
}

/// [`third_party`] for a checkpoint folder (`model.safetensors` and config.json) when
/// `folder`, and `inspect --json` naming each dequantized weight's format, `formats`:
/// `(weight, format)`.
fn third_party_at(command: &str, seed: u64, folder: bool, formats: &[(&str, &str)]) {
    let Some((oracle, dir)) = Oracle::with_dir() else { return };
    let input = dir.path().join(if folder { "checkpoint" } else { "model.safetensors" });
    let expected = dir.path().join("expected.safetensors");
    oracle.run([
        OsStr::new(command),
        input.as_os_str(),
        expected.as_os_str(),
        OsStr::new("--seed"),
        OsStr::new(&seed.to_string()),
    ]);
    let expected = File::read(&expected);
    assert!(!expected.dequantized.is_empty());

    if !formats.is_empty() {
        let report: serde_json::Value =
            serde_json::from_str(&blockscale([OsStr::new("inspect"), input.as_os_str(), OsStr::new("--json")]))
                .unwrap();
        let got: BTreeMap<&str, &str> = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| Some((t["weight"].as_str()?, t["scheme"].as_str()?)))
            .collect();
        assert_eq!(got, formats.iter().copied().collect(), "{command}: inspect's formats");
    }

    for dtype in ["f32", "bf16"] {
        let out = dir.path().join(format!("{dtype}.safetensors"));
        blockscale(
            [OsStr::new("dequantize"), input.as_os_str(), OsStr::new("-o"), out.as_os_str()]
                .into_iter()
                .chain(["--dtype", dtype, "-q"].map(OsStr::new)),
        );
        let ours = File::read(&if folder { out.join("model.safetensors") } else { out });
        // Every expected tensor, and nothing else (no scales, no packed codes).
        assert_eq!(ours.names(), expected.names(), "{command} --dtype {dtype}: tensors");
        for (name, want) in &expected.tensors {
            let got = ours.get(name);
            assert_eq!(got.shape, want.shape, "{command}: {name}");
            let want = want.f32s(name);
            if !expected.dequantized.contains(name) {
                // Not quantized: the exact values, whatever float dtype carries them.
                let got = got.f32s(name);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{command} --dtype {dtype}: {name} changed");
            } else if dtype == "f32" {
                assert_eq!(got.dtype, Dtype::F32, "{command}: {name}");
                for (i, (a, b)) in got.f32s(name).iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{command}: {name} [{i}]: blockscale {a:e}, oracle {b:e}");
                }
            } else {
                for (i, (&a, b)) in got.bf16_bits(name).iter().zip(&want).enumerate() {
                    let b = bf16::from_f32(*b);
                    assert_eq!(
                        a,
                        b.to_bits(),
                        "{command} bf16: {name} [{i}]: blockscale {}, oracle {b}",
                        bf16::from_bits(a)
                    );
                }
            }
        }
    }
}

#[test]
fn gpt_oss_mxfp4_dequantizes_as_the_oracle() {
    third_party("write-gptoss", 1);
}

#[test]
fn deepseek_fp8_dequantizes_as_the_oracle() {
    third_party("write-deepseek", 2);
}

#[test]
fn modelopt_fp8_per_tensor_dequantizes_as_the_oracle() {
    third_party("write-modelopt-fp8", 3);
}

/// Every tensor of `ours` equals the oracle's (`theirs`) bit for bit as f32 (the
/// quantized weights, which must be F32, and the others converted exactly).
fn same_f32_bits(what: &str, ours: &File, theirs: &File) {
    assert_eq!(ours.names(), theirs.names(), "{what}: tensors");
    for (name, want) in &theirs.tensors {
        let got = ours.get(name);
        assert_eq!(got.shape, want.shape, "{what}: {name}");
        if theirs.dequantized.contains(name) {
            assert_eq!(got.dtype, Dtype::F32, "{what}: {name}");
        }
        for (i, (a, b)) in got.f32s(name).iter().zip(want.f32s(name)).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{what}: {name} [{i}]: blockscale {a:e}, oracle {b:e}");
        }
    }
}

/// `blockscale quantize INPUT -o OUTPUT ARGS... -q`.
fn quantize(input: &Path, output: &Path, args: &[&str]) {
    blockscale(
        [OsStr::new("quantize"), input.as_os_str(), OsStr::new("-o"), output.as_os_str()]
            .into_iter()
            .chain(args.iter().map(OsStr::new).chain([OsStr::new("-q")])),
    );
}

/// `blockscale dequantize INPUT -o OUTPUT --dtype f32 -q`, read back.
fn dequantize_f32(input: &Path, output: &Path) -> File {
    blockscale(
        [OsStr::new("dequantize"), input.as_os_str(), OsStr::new("-o"), output.as_os_str()]
            .into_iter()
            .chain(["--dtype", "f32", "-q"].map(OsStr::new)),
    );
    File::read(output)
}

/// What `blockscale inspect --json` says of each quantized weight: (convention, scheme) by name.
fn inspected_weights(path: &Path) -> BTreeMap<String, (String, String)> {
    let v: serde_json::Value =
        serde_json::from_str(&blockscale([OsStr::new("inspect"), path.as_os_str(), OsStr::new("--json")])).unwrap();
    v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["scheme"].is_null())
        .map(|t| {
            let text = |k: &str| t[k].as_str().unwrap().to_owned();
            (text("name"), (text("convention"), text("scheme")))
        })
        .collect()
}

/// The 2-D weights among `inputs`, the ones `quantize` takes.
fn linear_names(inputs: &[Input]) -> BTreeSet<String> {
    inputs.iter().filter(|t| t.shape.len() == 2).map(|t| t.name.to_owned()).collect()
}

#[test]
fn deepseek_fp8_writer_follows_the_recipe_and_dequantizes_as_native_fp8_block() {
    // The oracle recomputes every 128x128 tile's weight_scale_inv (amax / 448) and every
    // E4M3 code from the original weights (130 rows: a partial last tile row) and
    // compares them byte for byte, then dequantizes with DeepSeek's formula (code *
    // weight_scale_inv). blockscale's own dequantization of that checkpoint, and of the
    // native fp8-block one (the same quantization under its own names), must give
    // those values bit for bit.
    let Some((oracle, dir)) = Oracle::with_dir() else { return };
    let p = |name: &str| dir.path().join(name);
    let inputs = write_checkpoint(&p("model.safetensors"));
    quantize(
        &p("model.safetensors"),
        &p("deepseek.safetensors"),
        &["--scheme", "fp8-block", "--convention", "deepseek"],
    );
    quantize(&p("model.safetensors"), &p("native.safetensors"), &["--scheme", "fp8-block"]);
    let (input, deepseek, expected) = (p("model.safetensors"), p("deepseek.safetensors"), p("oracle.safetensors"));
    oracle.run([OsStr::new("check-deepseek"), input.as_os_str(), deepseek.as_os_str(), expected.as_os_str()]);
    let theirs = File::read(&p("oracle.safetensors"));
    assert_eq!(theirs.dequantized, linear_names(&inputs));
    same_f32_bits("deepseek", &dequantize_f32(&p("deepseek.safetensors"), &p("d1.safetensors")), &theirs);
    same_f32_bits("native fp8-block", &dequantize_f32(&p("native.safetensors"), &p("d2.safetensors")), &theirs);

    // DeepSeek-V3's config, in the single file's metadata.
    let q = File::read(&p("deepseek.safetensors"));
    let qc: serde_json::Value = serde_json::from_str(&q.metadata["quantization_config"]).unwrap();
    assert_eq!(
        qc,
        serde_json::json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                           "weight_block_size": [128, 128]})
    );
    let seen = inspected_weights(&p("deepseek.safetensors"));
    let want: BTreeMap<String, (String, String)> = linear_names(&inputs)
        .into_iter()
        .map(|n| (n, ("deepseek".to_owned(), "fp8-block-128x128".to_owned())))
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn modelopt_fp8_per_tensor_writer_follows_the_recipe() {
    // The oracle recomputes each weight_scale (amax over the whole tensor / 448), every
    // E4M3 code (ml_dtypes' cast of the float32 w / scale) and the calibrated layer's
    // input_scale (activation amax / 448) from the originals, byte for byte. One weight
    // is all zeros: blockscale's documented scale 0 and zero codes.
    let Some((oracle, dir)) = Oracle::with_dir() else { return };
    let p = |name: &str| dir.path().join(name);
    // amax 1.078125 (bf16 0x3f8a), and three values (about 4.9e-5, 9.9e-5, 2.0e-4) whose
    // codes differ (0x0a/0x0b, 0x12/0x13, 0x1a/0x1b) between w / scale, ModelOpt's
    // division, and w * (1 / scale), a multiplication by the rounded reciprocal (found
    // by a search over bf16 values).
    let ties = [0x3f8a, 0x384f, 0x38cf, 0x394f].map(bf16::from_bits).to_vec();
    let ties = Input { name: "model.layers.0.mlp.ties_proj.weight", shape: vec![2, 2], values: ties };
    let inputs = write_inputs(&p("model.safetensors"), checkpoint_inputs_with_zeros(48, ties));
    // Activations for the q_proj layer only.
    let mut rng = SplitMix64::new(11);
    let acts: Vec<u8> = (0..4 * 256).flat_map(|_| (3.0 * normal(&mut rng) as f32).to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, vec![4, 256], &acts).unwrap();
    safetensors::serialize_to_file([("model.layers.0.self_attn.q_proj", view)], None, &p("acts.safetensors")).unwrap();

    let args = ["--scheme", "fp8-per-tensor", "--convention", "modelopt", "--calibration"];
    let calibration = p("acts.safetensors");
    let calibration = calibration.to_str().unwrap();
    quantize(&p("model.safetensors"), &p("fp8.safetensors"), &[&args[..], &[calibration]].concat());
    oracle.run([
        OsStr::new("check-modelopt-fp8"),
        p("model.safetensors").as_os_str(),
        p("fp8.safetensors").as_os_str(),
        OsStr::new("--calibration"),
        OsStr::new(calibration),
    ]);
    let q = File::read(&p("fp8.safetensors"));
    assert!(q.tensors.contains_key("model.layers.0.self_attn.q_proj.input_scale"));
    assert!(!q.tensors.contains_key("model.layers.0.mlp.up_proj.input_scale"));
    let hf: serde_json::Value = serde_json::from_str(&q.metadata["hf_quant_config"]).unwrap();
    assert_eq!(hf["quantization"]["quant_algo"], "FP8");
    let qc: serde_json::Value = serde_json::from_str(&q.metadata["quantization_config"]).unwrap();
    assert_eq!((qc["quant_method"].as_str(), qc["quant_algo"].as_str()), (Some("modelopt"), Some("FP8")));

    // Read back: w = code * weight_scale (checked against the oracle's dequantizer of
    // this layout in modelopt_fp8_per_tensor_dequantizes_as_the_oracle); here, close to
    // the original as FP8 with one scale can be, and exact zeros stay zeros.
    let ours = dequantize_f32(&p("fp8.safetensors"), &p("back.safetensors"));
    for t in inputs.iter().filter(|t| t.shape.len() == 2) {
        let got = ours.get(t.name).f32s(t.name);
        let amax = t.values.iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
        for (i, (&a, x)) in got.iter().zip(&t.values).enumerate() {
            let x = x.to_f32();
            // E4M3 keeps 3 mantissa bits down to 2^-6 * scale (half a step: |x| / 16),
            // then steps of 2^-9 * scale; before it, ModelOpt's quotient is rounded to
            // the weight's bf16 (8 significant bits: at most |x| / 256 more); a hair more
            // for the f32 roundings.
            let bound = ((x.abs() / 16.0).max(amax / 448.0 / 1024.0) + x.abs() / 256.0) * 1.0001;
            assert!((a - x).abs() <= bound, "{} [{i}]: {x} came back as {a} (amax {amax})", t.name);
            if x == 0.0 {
                assert_eq!(a, 0.0, "{} [{i}]", t.name);
            }
        }
    }
    let seen = inspected_weights(&p("fp8.safetensors"));
    let want: BTreeMap<String, (String, String)> =
        linear_names(&inputs).into_iter().map(|n| (n, ("modelopt".to_owned(), "fp8-per-tensor".to_owned()))).collect();
    assert_eq!(seen, want);
}

#[test]
fn compressed_tensors_mxfp4_dequantizes_as_the_oracle() {
    let p = "model.layers.0.";
    let formats = [(&*format!("{p}self_attn.q_proj.weight"), "mxfp4"), (&format!("{p}mlp.down_proj.weight"), "mxfp4")];
    third_party_at("write-ct-mxfp4", 4, true, &formats);
}

#[test]
fn compressed_tensors_int4_dequantizes_as_the_oracle() {
    // Groups of 32 and 128, per channel, asymmetric: each a config group of its own.
    let names = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.down_proj"]
        .map(|l| format!("model.layers.0.{l}.weight"));
    let formats = ["int4-g32", "int4-g128", "int4-per-channel", "int4-g128-asym"];
    let formats: Vec<(&str, &str)> = names.iter().map(String::as_str).zip(formats).collect();
    third_party_at("write-ct-int4", 5, true, &formats);
}

#[test]
fn compressed_tensors_fp8_dequantizes_as_the_oracle() {
    // Per tensor (which ModelOpt's names would also fit: told apart by the config), per
    // channel, 128 x 128 blocks.
    let names = ["self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"].map(|l| format!("model.layers.0.{l}.weight"));
    let formats = ["fp8-per-tensor", "fp8-per-channel", "fp8-block-128x128"];
    let formats: Vec<(&str, &str)> = names.iter().map(String::as_str).zip(formats).collect();
    third_party_at("write-ct-fp8", 6, true, &formats);
}

/// Quantizes the checkpoint with `--convention compressed-tensors --scheme scheme` and
/// with the native convention: the oracle's dequantization of the compressed-tensors
/// file (from the published formula), `blockscale dequantize` of it, and `blockscale
/// dequantize` of the native file must agree bit for bit. `layer_tensors`: the
/// suffixes and dtypes the convention writes for a quantized `P.weight`; `format`: the
/// config's `format`.
fn compressed_tensors_writer(scheme: &str, format: &str, layer_tensors: &[(&str, Dtype)]) {
    let Some((oracle, dir)) = Oracle::with_dir() else { return };
    let path = |name: &str| dir.path().join(name);
    let inputs = write_checkpoint(&path("model.safetensors"));
    for (convention, out) in [("compressed-tensors", "ct.safetensors"), ("native", "native.safetensors")] {
        blockscale(
            [OsStr::new("quantize"), path("model.safetensors").as_os_str(), OsStr::new("-o"), path(out).as_os_str()]
                .into_iter()
                .chain(["--scheme", scheme, "--convention", convention, "-q"].map(OsStr::new)),
        );
    }
    // The convention's tensors, named and typed as documented, and its config.
    let q = File::read(&path("ct.safetensors"));
    let want_names = check_layer_tensors(&q, &inputs, layer_tensors, scheme);
    assert_eq!(q.names(), want_names.iter().map(String::as_str).collect(), "{scheme}: the tensors written");
    let bytes = std::fs::read(path("ct.safetensors")).unwrap();
    let (_, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
    let qc: serde_json::Value =
        serde_json::from_str(&metadata.metadata().as_ref().unwrap()["quantization_config"]).unwrap();
    assert_eq!((qc["quant_method"].as_str(), qc["format"].as_str()), (Some("compressed-tensors"), Some(format)));
    assert_eq!(qc["quantization_status"], "compressed");

    oracle.run([
        OsStr::new("dequantize-ct"),
        path("ct.safetensors").as_os_str(),
        path("oracle.safetensors").as_os_str(),
    ]);
    for (from, to) in [("ct.safetensors", "ours-ct.safetensors"), ("native.safetensors", "ours-native.safetensors")] {
        blockscale(
            [OsStr::new("dequantize"), path(from).as_os_str(), OsStr::new("-o"), path(to).as_os_str()]
                .into_iter()
                .chain(["--dtype", "f32", "-q"].map(OsStr::new)),
        );
    }
    let theirs = File::read(&path("oracle.safetensors"));
    let ours = File::read(&path("ours-ct.safetensors"));
    let native = File::read(&path("ours-native.safetensors"));
    let quantized: BTreeSet<String> = inputs.iter().filter(|t| t.shape.len() == 2).map(|t| t.name.into()).collect();
    assert_eq!(theirs.dequantized, quantized, "{scheme}: the layers the oracle dequantized");
    assert_eq!(ours.names(), native.names(), "{scheme}");
    assert_eq!(theirs.names(), native.names(), "{scheme}");
    for t in &inputs {
        let want = native.get(t.name);
        for (who, got) in [("oracle", theirs.get(t.name)), ("blockscale", ours.get(t.name))] {
            assert_eq!(got.shape, want.shape, "{scheme}: {who}: {}", t.name);
            let (got, want) = (got.f32s(t.name), want.f32s(t.name));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{scheme}: {who}: {} [{i}]: {a:e}, native {b:e}", t.name);
            }
        }
        if t.shape.len() == 2 {
            // Agreeing proves nothing if the quantizer wrote nonsense: the values must be
            // the scheme's approximation of the input.
            let original = t.values.iter().map(|v| f64::from(v.to_f32()));
            let got = ours.get(t.name).f32s(t.name);
            let (err, energy) =
                original.zip(&got).fold((0.0, 0.0), |(e, s), (x, &a)| (e + (f64::from(a) - x).powi(2), s + x.powi(2)));
            let rel = (err / energy).sqrt();
            assert!(rel < 0.2, "{scheme}: {}: relative RMS error {rel}", t.name);
        }
    }
}

#[test]
fn compressed_tensors_mxfp4_writer_matches_the_oracle_and_native() {
    compressed_tensors_writer(
        "mxfp4",
        "mxfp4-pack-quantized",
        &[(".weight_packed", Dtype::U8), (".weight_scale", Dtype::U8)],
    );
}

#[test]
fn compressed_tensors_int4_writer_matches_the_oracle_and_native() {
    let layer = [(".weight_packed", Dtype::I32), (".weight_scale", Dtype::F16), (".weight_shape", Dtype::I64)];
    compressed_tensors_writer("int4-g32", "pack-quantized", &layer);
}

#[test]
fn compressed_tensors_fp8_block_writer_matches_the_oracle_and_native() {
    let layer = [(".weight", Dtype::F8_E4M3), (".weight_scale", Dtype::F32)];
    compressed_tensors_writer("fp8-block", "float-quantized", &layer);
}

#[test]
fn compressed_tensors_int4_g128_writer_follows_the_rule() {
    // The oracle recomputes every f16 group scale and every packed code from the originals by the
    // documented rule, byte for byte; a zero weight (scales 0) and one whose amax / 7 is
    // past f16's range (saturated scale) join the checkpoint. Then the oracle's
    // dequantization of the file by the published pack-quantized formula and blockscale's
    // must agree bit for bit.
    let Some((oracle, dir)) = Oracle::with_dir() else { return };
    let p = |name: &str| dir.path().join(name);
    let big = (0..512).map(|i| bf16::from_f32(if i % 64 == 0 { 1.0e6 } else { (i as f32 - 256.0) * 1.5e3 }));
    let big = Input { name: "model.layers.0.mlp.big_proj.weight", shape: vec![2, 256], values: big.collect() };
    let inputs = write_inputs(&p("model.safetensors"), checkpoint_inputs_with_zeros(256, big));
    quantize(
        &p("model.safetensors"),
        &p("ct.safetensors"),
        &["--scheme", "int4-g128", "--convention", "compressed-tensors"],
    );
    oracle.run([
        OsStr::new("check-ct-int4"),
        p("model.safetensors").as_os_str(),
        p("ct.safetensors").as_os_str(),
        OsStr::new("--group"),
        OsStr::new("128"),
    ]);
    let q = File::read(&p("ct.safetensors"));
    let layer = [(".weight_packed", Dtype::I32), (".weight_scale", Dtype::F16), (".weight_shape", Dtype::I64)];
    let want_names = check_layer_tensors(&q, &inputs, &layer, "int4-g128");
    assert_eq!(q.names(), want_names.iter().map(String::as_str).collect());
    let qc: serde_json::Value = serde_json::from_str(&q.metadata["quantization_config"]).unwrap();
    assert_eq!(
        (qc["quant_method"].as_str(), qc["format"].as_str()),
        (Some("compressed-tensors"), Some("pack-quantized"))
    );
    let weights = &qc["config_groups"]["group_0"]["weights"];
    assert_eq!((weights["group_size"].as_u64(), weights["symmetric"].as_bool()), (Some(128), Some(true)));

    oracle.run([OsStr::new("dequantize-ct"), p("ct.safetensors").as_os_str(), p("oracle.safetensors").as_os_str()]);
    let theirs = File::read(&p("oracle.safetensors"));
    let ours = dequantize_f32(&p("ct.safetensors"), &p("ours.safetensors"));
    assert_eq!(theirs.dequantized, linear_names(&inputs));
    for t in &inputs {
        let (a, b) = (theirs.get(t.name).f32s(t.name), ours.get(t.name).f32s(t.name));
        assert_eq!(a.len(), b.len(), "{}", t.name);
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{} [{i}]: oracle {a:e}, blockscale {b:e}", t.name);
        }
    }
    // `inspect` names a packed weight by its codes tensor.
    let want: BTreeMap<String, (String, String)> = linear_names(&inputs)
        .into_iter()
        .map(|n| (n + "_packed", ("compressed-tensors".to_owned(), "int4-g128".to_owned())))
        .collect();
    assert_eq!(inspected_weights(&p("ct.safetensors")), want);
}
