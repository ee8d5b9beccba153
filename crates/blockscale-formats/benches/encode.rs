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
use blockscale_formats::{E4M3, E8M0Rounding, UE8M0, slice};
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
fn kernels(inp: &Inputs) -> Vec<(&'static str, usize, Kernel<'_>)> {
    let mut e4m3 = vec![E4M3::ZERO; N];
    let mut e4m3_b = vec![E4M3::ZERO; N];
    let mut e2m1 = vec![0u8; N / 2];
    let mut e2m1_b = vec![0u8; N / 2];
    let mut ue8m0 = vec![UE8M0::MIN; N];
    let mut ue8m0_b = vec![UE8M0::MIN; N];
    let mut copy32 = vec![0f32; N];
    let mut copy16 = vec![bf16::ZERO; N];
    vec![
        ("memcpy f32 (anchor)", 4, Box::new(move || copy32.copy_from_slice(black_box(&inp.f32s)))),
        (
            "f32 -> e2m1 packed",
            4,
            Box::new(move || slice::encode_e2m1_packed(black_box(&inp.f32s), &mut e2m1).unwrap()),
        ),
        ("f32 -> e4m3", 4, Box::new(move || slice::encode(black_box(&inp.f32s), &mut e4m3).unwrap())),
        (
            "f32 -> ue8m0 (rp)",
            4,
            Box::new(move || slice::encode_ue8m0(black_box(&inp.f32s), E8M0Rounding::PosInf, &mut ue8m0).unwrap()),
        ),
        ("memcpy bf16 (anchor)", 2, Box::new(move || copy16.copy_from_slice(black_box(&inp.bf16s)))),
        (
            "bf16 -> e2m1 packed",
            2,
            Box::new(move || slice::encode_e2m1_packed(black_box(&inp.bf16s), &mut e2m1_b).unwrap()),
        ),
        ("bf16 -> e4m3", 2, Box::new(move || slice::encode(black_box(&inp.bf16s), &mut e4m3_b).unwrap())),
        (
            "bf16 -> ue8m0 (rp)",
            2,
            Box::new(move || slice::encode_ue8m0(black_box(&inp.bf16s), E8M0Rounding::PosInf, &mut ue8m0_b).unwrap()),
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
