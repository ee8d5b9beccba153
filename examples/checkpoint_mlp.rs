//! One decoder layer's MLP loaded from a quantized checkpoint and run: the gate, up and
//! down projections read with `blockscale::checkpoint::Reader` into `QuantizedMatrix`
//! values, the SwiGLU forward `down(silu(gate(x)) * up(x))` on the chosen backend, and
//! its SQNR against the same layer in full precision.
//!
//! ```text
//! cargo run --release --example checkpoint_mlp                      # built-in layer
//! cargo run --release --example checkpoint_mlp -- MODEL [--layer 3] [--tokens 16]
//! cargo run --release --features cuda --example checkpoint_mlp -- --backend cuda
//! ```
//!
//! Without a path it generates a bf16 layer (hidden 1024, intermediate 2816,
//! transformer-like outliers), writes it as a ModelOpt NVFP4 and a compressed-tensors
//! INT4 (groups of 128) checkpoint into a temporary folder, and runs both against the
//! bf16 layer. With a path (a `.safetensors` file or a model folder in any convention
//! blockscale reads) the reference is the checkpoint's own weights dequantized and
//! multiplied in f64, so the SQNR then measures the kernels, not the quantization.
//! `--tokens 1` (the default) runs the gated GEMV and the GEMV of decoding, more tokens
//! the weight-only GEMM of prefill, all on weights prepared once (`Backend::prepare`).

use std::path::{Path, PathBuf};

use blockscale::checkpoint::{Dtype, Reader, Weight, by_name, save};
use blockscale::formats::rng::SplitMix64;
use blockscale::half::bf16;
use blockscale::ndarray::{Array1, Array2, ArrayView2, Axis};
use blockscale::{Activation, Backend, Epilogue, Prepared, QuantizeOptions, QuantizedMatrix, Scheme};

type Failure = Box<dyn std::error::Error>;

struct Args {
    path: Option<PathBuf>,
    layer: usize,
    tokens: usize,
    backend: String,
}

fn parse_args() -> Result<Args, Failure> {
    let mut args = Args { path: None, layer: 0, tokens: 1, backend: "cpu".into() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--layer" => args.layer = value("--layer")?.parse()?,
            "--tokens" => args.tokens = value("--tokens")?.parse()?,
            "--backend" => args.backend = value("--backend")?,
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}").into()),
            path => args.path = Some(path.into()),
        }
    }
    if args.tokens == 0 {
        return Err("--tokens must be at least 1".into());
    }
    Ok(args)
}

fn main() -> Result<(), Failure> {
    let args = parse_args()?;
    let backend = match args.backend.as_str() {
        "cpu" => Backend::Cpu,
        #[cfg(feature = "cuda")]
        "cuda" => Backend::cuda(0)?,
        other => return Err(format!("unknown backend {other:?} (cpu, or cuda with --features cuda)").into()),
    };
    match &args.path {
        Some(path) => {
            let mlp = load(path, args.layer)?;
            let hidden = mlp.gate.k();
            let x = activations(args.tokens, hidden);
            let reference = forward_reference(&x, &dequantized(&mlp))?;
            report(path, &mlp, &backend, &x, &reference)?;
        }
        None => {
            let (hidden, intermediate) = (1024, 2816);
            let layer = BfLayer::generate(hidden, intermediate);
            let x = activations(args.tokens, hidden);
            let full = layer.as_f32();
            let reference = forward_reference(&x, &full)?;
            let dir = std::env::temp_dir().join(format!("blockscale-mlp-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            for (convention, scheme, file) in [
                ("modelopt", Scheme::NvFp4, "modelopt-nvfp4.safetensors"),
                ("compressed-tensors", Scheme::Int4G128, "ct-int4-g128.safetensors"),
            ] {
                let path = dir.join(file);
                layer.write(&path, convention, scheme)?;
                let mlp = load(&path, 0)?;
                report(&path, &mlp, &backend, &x, &reference)?;
                let back = dequantized(&mlp);
                let [g, u, d] = [0, 1, 2].map(|i| sqnr(back[i].iter().copied().zip(full[i].iter().copied())));
                println!("  weights' SQNR: gate {g:.2} dB, up {u:.2} dB, down {d:.2} dB");
            }
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(())
}

/// The three projections of one MLP: gate and up `[intermediate, hidden]`, down
/// `[hidden, intermediate]`.
struct Mlp {
    gate: QuantizedMatrix,
    up: QuantizedMatrix,
    down: QuantizedMatrix,
    format: String,
    convention: &'static str,
}

/// Layer `layer`'s MLP from the checkpoint at `path` (Llama / Qwen / Mistral names).
fn load(path: &Path, layer: usize) -> Result<Mlp, Failure> {
    let reader = Reader::open(path)?;
    let take = |proj: &str| -> Result<(QuantizedMatrix, String, &'static str), Failure> {
        let name = format!("model.layers.{layer}.mlp.{proj}.weight");
        let loaded = reader.weight(&name).ok_or_else(|| format!("{}: no quantized {name}", path.display()))??;
        match loaded.weight {
            Weight::Matrix { q, transpose_experts: None, .. } => Ok((q, loaded.found.format, loaded.found.convention)),
            _ => Err(format!("{name} is {}, which has no blockscale kernel", loaded.found.format).into()),
        }
    };
    let (gate, format, convention) = take("gate_proj")?;
    let (up, ..) = take("up_proj")?;
    let (down, ..) = take("down_proj")?;
    Ok(Mlp { gate, up, down, format, convention })
}

/// Runs the MLP on `backend` and prints its SQNR against `reference`.
fn report(path: &Path, mlp: &Mlp, backend: &Backend, x: &Array2<bf16>, reference: &Array2<f64>) -> Result<(), Failure> {
    let prepared = [backend.prepare(&mlp.gate)?, backend.prepare(&mlp.up)?, backend.prepare(&mlp.down)?];
    // Once to warm up (a GPU's first launches load its kernels), then timed.
    forward(backend, &prepared, x.view())?;
    let start = std::time::Instant::now();
    let y = forward(backend, &prepared, x.view())?;
    let seconds = start.elapsed().as_secs_f64();
    let snr = sqnr(y.iter().map(|&y| f64::from(y)).zip(reference.iter().copied()));
    println!(
        "{}: {} ({}), MLP {} -> {} -> {}, {} token(s) on {}: output SQNR {snr:.2} dB, {:.2} ms",
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        mlp.format,
        mlp.convention,
        mlp.gate.k(),
        mlp.gate.rows(),
        mlp.down.rows(),
        x.nrows(),
        backend.name(),
        seconds * 1e3
    );
    Ok(())
}

/// `10 log10(sum r^2 / sum (y - r)^2)` over `(y, r)` pairs, in dB.
fn sqnr<A: Into<f64>, B: Into<f64>>(pairs: impl Iterator<Item = (A, B)>) -> f64 {
    let (signal, noise) = pairs.fold((0f64, 0f64), |(s, n), (y, r)| {
        let (y, r) = (y.into(), r.into());
        (s + r * r, n + (y - r) * (y - r))
    });
    10.0 * (signal / noise.max(f64::MIN_POSITIVE)).log10()
}

/// `down(silu(gate(x)) * up(x))` on the backend, on weights prepared once (on a GPU:
/// on the device, in the fast kernels' layout): for one token the gated GEMV (gate and
/// up in one pass, SiLU in the gate's epilogue) and the GEMV, for more the weight-only
/// GEMM; the product rounded to bf16 as an engine feeds the down projection.
fn forward(
    backend: &Backend,
    [gate, up, down]: &[Prepared; 3],
    x: ArrayView2<'_, bf16>,
) -> Result<Array2<f32>, Failure> {
    let silu = Epilogue::default().with_activation(Activation::Silu);
    let plain = Epilogue::default();
    if x.nrows() == 1 {
        let h: Array1<bf16> = backend.gemv_gated_prepared(x.row(0), (gate, &silu), (up, &plain))?;
        let y: Array1<f32> = backend.gemv_prepared(h.view(), down, &plain)?;
        return Ok(y.insert_axis(Axis(0)));
    }
    let g: Array2<f32> = backend.gemm_weight_only_prepared(x, gate, &silu)?;
    let u: Array2<f32> = backend.gemm_weight_only_prepared(x, up, &plain)?;
    let h = Array2::from_shape_fn(g.dim(), |i| bf16::from_f32(g[i] * u[i]));
    Ok(backend.gemm_weight_only_prepared(h.view(), down, &plain)?)
}

/// The same forward in f64 from f32 weights: the reference.
fn forward_reference(x: &Array2<bf16>, [gate, up, down]: &[Array2<f32>; 3]) -> Result<Array2<f64>, Failure> {
    let x = x.mapv(|v| f64::from(v.to_f32()));
    let wide = |w: &Array2<f32>| w.mapv(f64::from);
    let g = x.dot(&wide(gate).t());
    let u = x.dot(&wide(up).t());
    let h = Array2::from_shape_fn(g.dim(), |i| g[i] / (1.0 + (-g[i]).exp()) * u[i]);
    Ok(h.dot(&wide(down).t()))
}

/// A checkpoint's own weights, dequantized on the CPU (the reference for a given path).
fn dequantized(mlp: &Mlp) -> [Array2<f32>; 3] {
    [&mlp.gate, &mlp.up, &mlp.down].map(|q| Backend::Cpu.dequantize::<f32>(q).expect("the CPU dequantizes any matrix"))
}

/// Activations for `tokens` tokens: unit-scale values with a few outlier channels.
fn activations(tokens: usize, hidden: usize) -> Array2<bf16> {
    let mut rng = SplitMix64::new(0x5eed);
    Array2::from_shape_fn((tokens, hidden), |(_, c)| {
        let outlier = if c % 97 == 0 { 8.0 } else { 1.0 };
        bf16::from_f32(rng.uniform_f32(-1.0, 1.0) * outlier)
    })
}

/// A bf16 MLP layer.
struct BfLayer {
    gate: Array2<bf16>,
    up: Array2<bf16>,
    down: Array2<bf16>,
}

impl BfLayer {
    /// Deterministic transformer-like weights: about N(0, 1/sqrt(fan-in)) with heavy tails.
    fn generate(hidden: usize, intermediate: usize) -> Self {
        let mut rng = SplitMix64::new(7);
        let mut matrix = |rows: usize, k: usize| {
            let std = 1.0 / (k as f32).sqrt();
            Array2::from_shape_fn((rows, k), |_| {
                // A sum of uniforms (close to normal), one weight in 2000 six times larger.
                let z: f32 = (0..4).map(|_| rng.uniform_f32(-1.0, 1.0)).sum::<f32>() * 0.866;
                let tail = if rng.below(2000) == 0 { 6.0 } else { 1.0 };
                bf16::from_f32(z * std * tail)
            })
        };
        Self {
            gate: matrix(intermediate, hidden),
            up: matrix(intermediate, hidden),
            down: matrix(hidden, intermediate),
        }
    }

    fn as_f32(&self) -> [Array2<f32>; 3] {
        [&self.gate, &self.up, &self.down].map(|w| w.mapv(bf16::to_f32))
    }

    /// Quantizes the layer on the CPU and writes it under `convention` at `path`, with
    /// the layer's norm as a plain tensor beside it.
    fn write(&self, path: &Path, convention: &str, scheme: Scheme) -> Result<(), Failure> {
        let writes = by_name(convention).and_then(|c| c.writes()).ok_or("not a convention blockscale writes")?;
        let options = QuantizeOptions::default();
        let mut weights = Vec::new();
        for (proj, w) in [("gate_proj", &self.gate), ("up_proj", &self.up), ("down_proj", &self.down)] {
            weights.push((
                format!("model.layers.0.mlp.{proj}.weight"),
                Backend::Cpu.quantize(w.view(), scheme, &options)?,
            ));
        }
        let norm = (0..self.gate.ncols()).flat_map(|_| bf16::ONE.to_le_bytes()).collect();
        let plain = vec![(
            "model.layers.0.post_attention_layernorm.weight".to_owned(),
            Dtype::BF16,
            vec![self.gate.ncols()],
            norm,
        )];
        save(path, writes, weights, plain, true)?;
        Ok(())
    }
}
