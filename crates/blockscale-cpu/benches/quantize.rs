//! Quantize and dequantize an 8192 x 8192 bf16 matrix (swizzled scales for the NVFP4
//! and MX schemes), on one thread and on all of them, beside a memcpy of the same input
//! bytes measured in the same run.
//!
//! `cargo bench -p blockscale-cpu --bench quantize` runs criterion, then prints a
//! best-of-5 summary table with the ratios; `-- --summary-only` skips criterion.
//!
//! Why this bench stays beside the facade's (benches/backend.rs, every scheme through
//! `Backend::Cpu` at 1024 x 4096): it times the crate's slice entry points on a matrix
//! larger than the L3, one thread against all, the NVFP4 amax pass against a given scale,
//! and dequantization into a preallocated buffer (`dequantize_slice`), which the facade's
//! allocating `dequantize` does not reach.

use std::hint::black_box;
use std::time::{Duration, Instant};

use blockscale_cpu::{DequantizeOptions, GlobalScaleSource, QuantizeOptions, dequantize_slice, quantize_slice};
use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{Fp8Tile, GlobalScale, ScaleLayout, Scheme};
use criterion::{Criterion, Throughput};
use half::bf16;

const N: usize = 8192;

fn input() -> Vec<bf16> {
    let mut rng = SplitMix64::new(0x5eed);
    (0..N * N)
        .map(|_| {
            let s = rng.next_u64();
            // Sum of two uniforms: a bell shape, plus occasional outliers.
            let u = ((s >> 40) as f32 + ((s >> 16) & 0xff_ffff) as f32) / (1u64 << 24) as f32 - 1.0;
            let outlier = if (s >> 8) & 1023 == 0 { 20.0 } else { 1.0 };
            bf16::from_f32(u * outlier)
        })
        .collect()
}

struct Case {
    name: String,
    run: Box<dyn Fn()>,
    anchor: bool,
}

fn cases() -> Vec<Case> {
    let x: &'static [bf16] = Box::leak(input().into_boxed_slice());
    let mut v = Vec::new();
    let copy_dst: &'static mut [bf16] = Box::leak(vec![bf16::ZERO; N * N].into_boxed_slice());
    let copy_dst = std::sync::Mutex::new(copy_dst);
    v.push(Case {
        name: "memcpy 128 MiB bf16 (anchor)".into(),
        run: Box::new(move || copy_dst.lock().unwrap().copy_from_slice(black_box(x))),
        anchor: true,
    });
    let given = GlobalScaleSource::Given(GlobalScale::from_amax(20.0).unwrap());
    let schemes = [
        ("nvfp4", Scheme::NvFp4, ScaleLayout::Swizzled128x4, given),
        ("nvfp4 +amax pass", Scheme::NvFp4, ScaleLayout::Swizzled128x4, GlobalScaleSource::TensorAmax),
        ("mxfp4", Scheme::MxFp4, ScaleLayout::Swizzled128x4, GlobalScaleSource::TensorAmax),
        ("mxfp8-e4m3", Scheme::MxFp8E4M3, ScaleLayout::Swizzled128x4, GlobalScaleSource::TensorAmax),
        ("fp8-block-1x128", Scheme::Fp8Block(Fp8Tile::Row1x128), ScaleLayout::Linear, GlobalScaleSource::TensorAmax),
        (
            "fp8-block-128x128",
            Scheme::Fp8Block(Fp8Tile::Tile128x128),
            ScaleLayout::Linear,
            GlobalScaleSource::TensorAmax,
        ),
    ];
    for single in [true, false] {
        let threads = if single { "1 thread".to_string() } else { format!("{} threads", rayon::current_num_threads()) };
        for (name, scheme, layout, global) in schemes {
            let opts = QuantizeOptions::default()
                .with_scale_layout(layout)
                .with_global_scale(global)
                .with_single_thread(single);
            v.push(Case {
                name: format!("quantize {name}, {threads}"),
                run: Box::new(move || {
                    black_box(quantize_slice(black_box(x), N, N, scheme, &opts).unwrap());
                }),
                anchor: false,
            });
        }
        for (name, scheme, layout) in [
            ("nvfp4", Scheme::NvFp4, ScaleLayout::Swizzled128x4),
            ("mxfp4", Scheme::MxFp4, ScaleLayout::Swizzled128x4),
            ("mxfp8-e4m3", Scheme::MxFp8E4M3, ScaleLayout::Swizzled128x4),
        ] {
            let q = quantize_slice(x, N, N, scheme, &QuantizeOptions::default().with_scale_layout(layout)).unwrap();
            let out: &'static mut [bf16] = Box::leak(vec![bf16::ZERO; N * N].into_boxed_slice());
            let out = std::sync::Mutex::new(out);
            let opts = DequantizeOptions { single_threaded: single, ..Default::default() };
            v.push(Case {
                name: format!("dequantize {name} -> bf16, {threads}"),
                run: Box::new(move || dequantize_slice(&q, &mut out.lock().unwrap(), &opts).unwrap()),
                anchor: false,
            });
        }
    }
    v
}

fn bench(c: &mut Criterion, cases: &[Case]) {
    let mut group = c.benchmark_group("cpu_8192x8192_bf16");
    group.throughput(Throughput::Elements((N * N) as u64)).sample_size(10).measurement_time(Duration::from_secs(5));
    for case in cases {
        group.bench_function(&case.name, |b| b.iter(|| (case.run)()));
    }
    group.finish();
}

fn summary(cases: &[Case]) {
    println!("\nsummary: {N} x {N} bf16 input, best of 5");
    println!("{:<42} {:>9} {:>10} {:>12}", "case", "ms", "G elem/s", "memcpy/case");
    let mut anchor = f64::NAN;
    for case in cases {
        (case.run)();
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                (case.run)();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        if case.anchor {
            anchor = best;
        }
        let rate = (N * N) as f64 / best / 1e9;
        println!("{:<42} {:>9.2} {:>10.3} {:>11.2}x", case.name, best * 1e3, rate, anchor / best);
    }
    println!("(memcpy/case: the case's time relative to copying its input; 1.0 = as fast as memcpy)");
}

fn main() {
    let cases = cases();
    if !std::env::args().any(|a| a == "--summary-only") {
        let mut c = Criterion::default().configure_from_args();
        bench(&mut c, &cases);
        c.final_summary();
    }
    summary(&cases);
}
