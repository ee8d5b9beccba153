//! `Reader` lookups by name on a checkpoint of many small weights: every weight taken by
//! its name, and every plain tensor, against the anchor of taking the same weights in
//! file order through `Reader::weights` (one catalog for the whole walk), measured in the
//! same run. A lookup by name used to index every tensor again (quadratic in the model's
//! tensor count); it now uses the index built when the reader opened.
//!
//! `cargo bench -p blockscale-checkpoint --bench reader` runs criterion, then prints a
//! best-of-5 summary with the ratios; `-- --summary-only` skips criterion.

use std::hint::black_box;
use std::time::Instant;

use blockscale_checkpoint::{Dtype, Reader, by_name, save};
use blockscale_formats::{DataLayout, QuantizedMatrix, QuantizedParts, ScaleData, ScaleLayout, Scheme};
use criterion::Criterion;

/// Weights (and as many plain tensors) in the checkpoint.
const WEIGHTS: usize = 4096;

/// A 16 x 32 MXFP4 matrix (its values do not matter here).
fn matrix() -> QuantizedMatrix {
    QuantizedMatrix::from_parts(QuantizedParts {
        scheme: Scheme::MxFp4,
        rows: 16,
        k: 32,
        data: (0..16 * 16).map(|i| i as u8).collect(),
        data_layout: DataLayout::RowMajor,
        scales: ScaleData::Bytes(vec![127; 16]),
        scale_layout: ScaleLayout::Linear,
        global_scale: None,
    })
    .expect("a valid 16 x 32 MXFP4 matrix")
}

fn best_of_5(f: &dyn Fn()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("model.safetensors");
    let q = matrix();
    let weights = (0..WEIGHTS).map(|i| (format!("model.layers.{i}.mlp.up_proj.weight"), q.clone())).collect();
    let plain =
        (0..WEIGHTS).map(|i| (format!("model.layers.{i}.norm.weight"), Dtype::F32, vec![4], vec![0; 16])).collect();
    let native = by_name("native").and_then(|c| c.writes()).expect("the native writer");
    save(&path, native, weights, plain, false).expect("the checkpoint written");
    let reader = Reader::open(&path).expect("the checkpoint read back");
    let names: Vec<String> = reader.found().iter().map(|f| f.output.clone()).collect();
    let plain_names: Vec<String> = reader.plain_tensors().map(|t| t.name.to_owned()).collect();
    assert_eq!((names.len(), plain_names.len()), (WEIGHTS, WEIGHTS));

    let in_order = || {
        for w in reader.weights() {
            black_box(w.expect("a weight"));
        }
    };
    let by_weight_name = || {
        for n in &names {
            black_box(reader.weight(n).expect("found").expect("a weight"));
        }
    };
    let by_plain_name = || {
        for n in &plain_names {
            black_box(reader.plain_tensor(n).expect("found"));
        }
    };

    if !std::env::args().any(|a| a == "--summary-only") {
        let mut c = Criterion::default().sample_size(10).configure_from_args();
        let mut g = c.benchmark_group(format!("reader {WEIGHTS} weights"));
        g.bench_function("every weight in file order (anchor)", |b| b.iter(in_order));
        g.bench_function("every weight by name", |b| b.iter(by_weight_name));
        g.bench_function("every plain tensor by name", |b| b.iter(by_plain_name));
        g.finish();
    }

    let cases: [(&str, &dyn Fn()); 3] = [
        ("every weight in file order (anchor)", &in_order),
        ("every weight by name", &by_weight_name),
        ("every plain tensor by name", &by_plain_name),
    ];
    let times: Vec<f64> = cases.iter().map(|(_, f)| best_of_5(*f)).collect();
    println!("\nreader, {WEIGHTS} weights of 16 x 32 MXFP4 and {WEIGHTS} plain tensors in one file, best of 5");
    println!("{:<42} {:>12} {:>24}", "case", "time", "x anchor (file order)");
    for ((name, _), t) in cases.iter().zip(&times) {
        println!("{name:<42} {:>9.3} ms {:>23.2}x", t * 1e3, t / times[0]);
    }
}
