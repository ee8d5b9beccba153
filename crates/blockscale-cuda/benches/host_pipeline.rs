//! Host-to-host quantization and dequantization of a checkpoint's worth of weights: 24
//! bf16 matrices of 4096 x 10240 (2.01 GB) in pageable host memory, the shapes of the
//! `--backend cuda` end-to-end table in docs/BENCHMARKS.md. Three ways, each over all 24
//! weights into preallocated host buffers: the old host path (`quantize_host` /
//! `dequantize_host`: pageable copies, one at a time), the pipeline (`quantize_host_into`
//! / `dequantize_host_into` through one `HostPipeline`, at several chunk sizes), and
//! blockscale-cpu's `quantize_into` / `dequantize_slice` on all cores. Also the device
//! open (lazy modules) against loading every module, and anchors: a parallel host copy of
//! the same bytes, and a pinned host-to-device copy.
//!
//! Times are wall-clock seconds for the 24 weights, best of 3 (range), GB/s counting the
//! bf16 bytes (quantize: read; dequantize: written). Run on a GPU machine
//! (`cargo bench -p blockscale-cuda --bench host_pipeline`, or the built binary there).

use std::time::Instant;

use blockscale_cpu as cpu;
use blockscale_cuda::{
    Device, GlobalScaleSource, HostPipeline, NonFinite, QuantizeOptions, dequantize_host, dequantize_host_into,
    quantize_host, quantize_host_into,
};
use blockscale_formats::{GlobalScale, QuantRequest, ScaleLayout, Scheme};
use half::bf16;
use rayon::prelude::*;

const WEIGHTS: usize = 24;
const ROWS: usize = 4096;
const K: usize = 10240;

/// Best and worst of `reps` timed runs of `f`, in seconds.
fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    let times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    (times.iter().copied().fold(f64::MAX, f64::min), times.iter().copied().fold(0.0, f64::max))
}

fn report(name: &str, (best, worst): (f64, f64), bytes: usize) {
    println!("{name:<44} {best:>8.3} s {:>8.3}-{worst:<8.3} {:>7.2} GB/s", best, bytes as f64 / best / 1e9);
}

/// Seeded bf16 weights with a few outliers, one seed per matrix.
fn weights() -> Vec<Vec<bf16>> {
    (0..WEIGHTS)
        .into_par_iter()
        .map(|w| {
            let mut rng = blockscale_formats::rng::SplitMix64::new(0x5eed + w as u64);
            (0..ROWS * K)
                .map(|_| {
                    let u = rng.uniform_f32(-1.0, 1.0);
                    bf16::from_f32(u * if rng.below(4096) == 0 { 16.0 } else { 0.05 })
                })
                .collect()
        })
        .collect()
}

fn main() {
    // Opening the device, in its parts: the driver's initialisation (the first call),
    // then the context and stream; then what loading every module would add.
    let t = Instant::now();
    if let Err(e) = Device::count() {
        eprintln!("no usable GPU: {e}");
        std::process::exit(1);
    }
    let init = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let dev = Device::new(0).unwrap();
    let open = t.elapsed().as_secs_f64();
    println!(
        "{} ({:?}, {} SMs), {} host threads",
        dev.name(),
        dev.arch(),
        dev.sm_count(),
        rayon::current_num_threads()
    );
    println!("\ndriver initialisation (Device::count, the process's first CUDA call): {:.1} ms", init * 1e3);
    println!("Device::new (context and stream; modules load on first use): {:.1} ms", open * 1e3);
    let t = Instant::now();
    let second = Device::new(0).unwrap();
    println!("Device::new again (driver up, primary context retained): {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    second.load_kernels().unwrap();
    println!(
        "Device::load_kernels (every module, what Device::new loaded eagerly before): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    drop(second);
    let t = Instant::now();
    let mut pipe = HostPipeline::new(&dev).unwrap();
    println!(
        "HostPipeline::new ({} MiB chunks, {} MB pinned): {:.1} ms",
        pipe.chunk_bytes() >> 20,
        pipe.pinned_bytes() / 1_000_000,
        t.elapsed().as_secs_f64() * 1e3
    );

    let t = Instant::now();
    let w = weights();
    let bytes = WEIGHTS * ROWS * K * 2;
    println!(
        "\n{WEIGHTS} weights of {ROWS} x {K} bf16, {:.2} GB, generated in {:.1} s",
        bytes as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    println!("{:<44} {:>10} {:>17} {:>12}", "case", "best", "range", "GB/s");

    // Anchor: the host copy the pipeline makes (pageable to pageable here, all cores).
    let mut sink = vec![bf16::ZERO; ROWS * K];
    report(
        "anchor: host copy, all cores",
        time(3, || {
            for m in &w {
                sink.par_chunks_mut(128 << 10).zip(m.par_chunks(128 << 10)).for_each(|(d, s)| d.copy_from_slice(s));
            }
        }),
        bytes,
    );
    drop(sink);

    let opts = |layout: ScaleLayout, source: GlobalScaleSource| {
        QuantizeOptions::default().with_scale_layout(layout).with_global_scale(source).with_non_finite(NonFinite::Error)
    };
    let given = GlobalScaleSource::Given(GlobalScale::from_amax(16.0).unwrap());
    let cases = [
        ("nvfp4 (tensor amax)", Scheme::NvFp4, opts(ScaleLayout::Swizzled128x4, GlobalScaleSource::TensorAmax)),
        ("nvfp4 (given scale)", Scheme::NvFp4, opts(ScaleLayout::Swizzled128x4, given)),
        ("mxfp8-e4m3", Scheme::MxFp8E4M3, opts(ScaleLayout::Swizzled128x4, GlobalScaleSource::TensorAmax)),
        (
            "fp8-block-128x128",
            Scheme::Fp8Block(blockscale_formats::Fp8Tile::Tile128x128),
            opts(ScaleLayout::Linear, GlobalScaleSource::TensorAmax),
        ),
    ];
    let t = Instant::now();
    {
        // The first call: the quantize module's load and the whole-input device buffer.
        let (scheme, o) = (Scheme::NvFp4, &cases[0].2);
        let r = QuantRequest::new(scheme, ROWS, K, o).unwrap();
        let (mut d, mut s) = (vec![0u8; r.shape().data_bytes], vec![0u8; r.scale_bytes()]);
        let view = ndarray::ArrayView2::from_shape((ROWS, K), &w[0][..]).unwrap();
        quantize_host_into(&dev, &mut pipe, view, scheme, o, &mut d, &mut s).unwrap();
    }
    println!(
        "first pipelined call, one weight (module load, whole-input buffer): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    for (name, scheme, o) in cases {
        let r = QuantRequest::new(scheme, ROWS, K, &o).unwrap();
        let (mut data, mut scales) = (vec![0u8; r.shape().data_bytes], vec![0u8; r.scale_bytes()]);
        let views: Vec<_> = w.iter().map(|m| ndarray::ArrayView2::from_shape((ROWS, K), &m[..]).unwrap()).collect();
        println!("\nquantize {name}");
        report(
            "old: quantize_host",
            time(3, || {
                for v in &views {
                    std::hint::black_box(quantize_host(&dev, *v, scheme, &o).unwrap());
                }
            }),
            bytes,
        );
        for chunk in [8usize << 20, 16 << 20, 32 << 20, 64 << 20] {
            let mut p = HostPipeline::with_chunk_bytes(&dev, chunk).unwrap();
            report(
                &format!("pipeline: quantize_host_into, {} MiB chunks", chunk >> 20),
                time(3, || {
                    for v in &views {
                        quantize_host_into(&dev, &mut p, *v, scheme, &o, &mut data, &mut scales).unwrap();
                    }
                }),
                bytes,
            );
        }
        let co = cpu::QuantizeOptions::default()
            .with_scale_layout(o.scale_layout)
            .with_global_scale(o.global_scale)
            .with_non_finite(o.non_finite);
        let (mut cd, mut cs) = (vec![0u8; data.len()], vec![0u8; scales.len()]);
        report(
            "cpu: quantize_into, all cores",
            time(3, || {
                for v in &views {
                    cpu::quantize_into(*v, scheme, &co, &mut cd, &mut cs).unwrap();
                }
            }),
            bytes,
        );
        assert!(cd == data && cs == scales, "{name}: the pipeline's bytes differ from the CPU's");

        // Dequantize the last weight's quantization, 24 times over (the same bytes move).
        let q = cpu::quantize(views[WEIGHTS - 1], scheme, &co).unwrap();
        let mut out = vec![bf16::ZERO; ROWS * K];
        println!("dequantize {name} to bf16");
        report(
            "old: dequantize_host",
            time(3, || {
                for _ in 0..WEIGHTS {
                    std::hint::black_box(dequantize_host::<bf16>(&dev, &q).unwrap());
                }
            }),
            bytes,
        );
        report(
            "pipeline: dequantize_host_into, 32 MiB chunks",
            time(3, || {
                for _ in 0..WEIGHTS {
                    dequantize_host_into(&dev, &mut pipe, &q, &mut out).unwrap();
                }
            }),
            bytes,
        );
        let mut cpu_out = vec![bf16::ZERO; ROWS * K];
        report(
            "cpu: dequantize_slice, all cores",
            time(3, || {
                for _ in 0..WEIGHTS {
                    cpu::dequantize_slice(&q, &mut cpu_out, &cpu::DequantizeOptions::default()).unwrap();
                }
            }),
            bytes,
        );
        assert!(
            out.iter().zip(&cpu_out).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: the pipeline's values differ from the CPU's"
        );
    }
}
