//! Slice encoders on 16M values, one core: f32 and bf16 to E2M1 (packed), E4M3 and
//! UE8M0, each beside a plain memcpy of the same input bytes measured in the same run.
//!
//! `cargo bench -p blockscale-formats --bench encode` runs criterion and then prints a
//! summary table (best of several runs) with the ratio to memcpy.
//!
//! Why this bench stays beside the facade's (benches/backend.rs): it times the element
//! encoders alone, the scalar kernels below every quantizer, which no `Backend` call
//! reaches on their own.

use std::hint::black_box;
use std::time::{Duration, Instant};

use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{E4M3, E8M0Rounding, Source, UE8M0, slice};
use criterion::{Criterion, Throughput, criterion_group};
use half::bf16;

const N: usize = 16 << 20;

/// Seeded activation-like data (never zeros): Gaussian-ish with a spread of exponents.
fn data() -> Vec<f32> {
    let mut rng = SplitMix64::new(0x5eed);
    (0..N)
        .map(|_| {
            let s = rng.next_u64();
            let u = ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
            let e = ((s >> 20) & 15) as i32 - 8;
            u * 2f32.powi(e) * 7.0
        })
        .collect()
}

struct Inputs {
    f32s: Vec<f32>,
    bf16s: Vec<bf16>,
}

fn inputs() -> Inputs {
    let f32s = data();
    let bf16s = f32s.iter().map(|&x| bf16::from_f32(x)).collect();
    Inputs { f32s, bf16s }
}

type Kernel<'a> = Box<dyn FnMut() + 'a>;

/// (name, input bytes per element, kernel) for every encoder, plus the memcpy anchors.
fn kernels(inp: &Inputs) -> Vec<(String, usize, Kernel<'_>)> {
    let mut kernels = kernels_of("f32", &inp.f32s);
    kernels.extend(kernels_of("bf16", &inp.bf16s));
    kernels
}

/// The memcpy anchor and the encoders of one input type, named after it (`label`).
fn kernels_of<'a, S: Source>(label: &str, src: &'a [S]) -> Vec<(String, usize, Kernel<'a>)> {
    let bytes = size_of::<S>();
    let n = src.len();
    let mut copy = vec![S::default(); n];
    let mut e2m1 = vec![0u8; n / 2];
    let mut e4m3 = vec![E4M3::ZERO; n];
    let mut ue8m0 = vec![UE8M0::MIN; n];
    vec![
        (format!("memcpy {label} (anchor)"), bytes, Box::new(move || copy.copy_from_slice(black_box(src)))),
        (
            format!("{label} -> e2m1 packed"),
            bytes,
            Box::new(move || slice::encode_e2m1_packed(black_box(src), &mut e2m1).unwrap()),
        ),
        (format!("{label} -> e4m3"), bytes, Box::new(move || slice::encode(black_box(src), &mut e4m3).unwrap())),
        (
            format!("{label} -> ue8m0 (rp)"),
            bytes,
            Box::new(move || slice::encode_ue8m0(black_box(src), E8M0Rounding::PosInf, &mut ue8m0).unwrap()),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let inp = inputs();
    let mut group = c.benchmark_group("encode_16M");
    group.throughput(Throughput::Elements(N as u64)).sample_size(10).measurement_time(Duration::from_secs(4));
    for (name, _, mut k) in kernels(&inp) {
        group.bench_function(name, |b| b.iter(&mut k));
    }
    group.finish();
}

/// Best-of-7 timing of every kernel, printed with the ratio to the memcpy of the
/// same input bytes.
fn summary() {
    let inp = inputs();
    println!("\nsummary: {N} elements, one core, best of 7");
    println!("{:<22} {:>10} {:>12} {:>14}", "kernel", "ms", "G elem/s", "vs memcpy");
    let mut anchor = f64::NAN;
    for (name, _, mut k) in kernels(&inp) {
        k();
        let best = (0..7)
            .map(|_| {
                let t = Instant::now();
                k();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        if name.starts_with("memcpy") {
            anchor = best;
        }
        println!("{name:<22} {:>10.2} {:>12.3} {:>13.2}x", best * 1e3, N as f64 / best / 1e9, anchor / best);
    }
    println!("(ratio > 1: the encoder takes less time than copying its input)");
}

criterion_group!(benches, bench);

fn main() {
    let filter_summary_only = std::env::args().any(|a| a == "--summary-only");
    if !filter_summary_only {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    summary();
}
