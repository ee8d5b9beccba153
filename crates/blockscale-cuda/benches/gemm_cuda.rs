//! GPU GEMM throughput beside cuBLAS, measured in the same run: cuBLAS BF16 (through
//! cudarc's `CudaBlas`) and cuBLASLt FP8 with per-tensor scales and with DeepSeek's
//! blockwise scales (1x128 activations x 128x128 weights), each with the best of the
//! library's top heuristic algorithms. Every blockscale kernel prints its time, TFLOP/s
//! and its ratio to the anchors of the same shape.
//!
//! Run on a GPU machine: `gpu-bundle/run.sh bench` (the `cargo xtask bench --backend
//! cuda` flow), with cuBLAS on the library path. Operands are quantized from random
//! bf16 data on the device with swizzled scales (what quantize writes for NVFP4 and MX);
//! outputs are bf16. The NVFP4 and MX pairs are also timed on prepared weights
//! (`gemm_prepared`, rows "... prepared"). Times are CUDA-event medians (7 repetitions of 10 launches after
//! 3 warm-up launches); products up to M = 512 on prepared weights are also replayed
//! from a CUDA graph (its own cuBLAS anchor beside). `BLOCKSCALE_BENCH_FILTER=text` keeps
//! the cases whose label contains `text`, `BLOCKSCALE_BENCH_WEIGHT_ONLY=1` runs only the
//! weight-only products, `BLOCKSCALE_BENCH_M=32,64` replaces their batch sizes (and
//! those of the DeepSeek-V3 table of FP8 block pairs, which
//! `BLOCKSCALE_BENCH_DEEPSEEK=0` skips).
//!
//! Why this bench stays beside the facade's (benches/backend.rs): the facade's
//! `Backend::Cuda` calls take host arrays and copy them over PCIe on every call; this bench
//! times the GEMM kernels alone on device buffers (`gemm_into`, `gemm_weight_only_into`,
//! preallocated outputs and workspace) against cuBLAS, which only this crate exposes.

mod common;

use blockscale_cuda::cudarc::cublas::{CudaBlas, Gemm};
use blockscale_cuda::cudarc::driver::{DevicePtr, DevicePtrMut};
use blockscale_cuda::{
    Device, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized, PreparedWeights, QuantizeOptions,
    gemm_into, gemm_prepared_into, gemm_prepared_workspace_size, gemm_weight_only_into, gemm_weight_only_prepared_into,
    gemm_weight_only_prepared_workspace_size, gemm_weight_only_workspace_size, gemm_workspace_size, quantize,
};
use blockscale_formats::{Fp8Tile, ScaleLayout, Scheme};
use common::anchors::{LtFp8, bf16_gemm_config, device_and_blas, random_bf16, random_f16, random_u8};
use common::{graph_time, time};
use half::{bf16, f16};

/// The anchors of one shape, in seconds (`None`: cuBLASLt offers no algorithm).
struct Anchors {
    bf16: f64,
    fp8_tensor: Option<f64>,
    fp8_block: Option<f64>,
}

fn anchors(dev: &Device, blas: &CudaBlas, (m, n, k): (usize, usize, usize)) -> Anchors {
    let stream = dev.stream();
    let a = random_bf16(dev, m * k, 1);
    let b = random_bf16(dev, n * k, 2);
    let mut d = stream.alloc_zeros::<bf16>(m * n).unwrap();
    // Row-major D (M x N) is column-major D^T (N x M) = B^T-as-stored (op T) . A.
    let cfg = bf16_gemm_config((m, n, k));
    // SAFETY: the buffers hold the elements the configuration addresses.
    let bf16_t = time(stream, 10, || unsafe { blas.gemm(cfg, &b, &a, &mut d) }.unwrap());
    drop((a, b));

    let (a8, b8) = (random_u8(dev, m * k, 7), random_u8(dev, n * k, 8));
    let ones = stream.clone_htod(&vec![1f32; 1]).unwrap();
    let kb = k / 128;
    let sfa = stream.clone_htod(&vec![1.5e-3f32; m * kb]).unwrap();
    let sfb = stream.clone_htod(&vec![1.5e-3f32; n.div_ceil(128) * kb]).unwrap();
    let (pa, _ga) = a8.device_ptr(stream);
    let (pb, _gb) = b8.device_ptr(stream);
    let (p1, _g1) = ones.device_ptr(stream);
    let (psa, _gsa) = sfa.device_ptr(stream);
    let (psb, _gsb) = sfb.device_ptr(stream);
    let (pd, _gd) = d.device_ptr_mut(stream);
    let fp8_tensor = LtFp8::new(stream, (m, n, k), false, p1, p1).map(|mut l| l.best(stream, pa, pb, pd));
    let fp8_block = LtFp8::new(stream, (m, n, k), true, psa, psb).map(|mut l| l.best(stream, pa, pb, pd));
    Anchors { bf16: bf16_t, fp8_tensor, fp8_block }
}

fn quantized(dev: &Device, rows: usize, k: usize, scheme: Scheme, seed: u64) -> DeviceQuantized {
    let x = random_bf16(dev, rows * k, seed);
    let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        ScaleLayout::Swizzled128x4
    } else {
        ScaleLayout::Linear
    };
    let opts = QuantizeOptions::default().with_scale_layout(layout);
    quantize(dev, DeviceMatrix::new(&x, rows, k), scheme, &opts).unwrap()
}

fn row(label: &str, flop: f64, t: f64, anchors: &Anchors) {
    let ratio = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{:.3}", a / t));
    println!(
        "| {label:<34} | {:>9.1} | {:>6.0} | {:>7.3} | {:>7} | {:>7} |",
        t * 1e6,
        flop / t / 1e12,
        anchors.bf16 / t,
        ratio(anchors.fp8_tensor),
        ratio(anchors.fp8_block)
    );
}

fn main() {
    let (dev, blas) = device_and_blas();
    let filter = std::env::var("BLOCKSCALE_BENCH_FILTER").unwrap_or_default();
    println!("{} ({:?}, {} SMs)", dev.name(), dev.arch(), dev.sm_count());
    println!("GEMM, bf16 output; ratios are anchor time / blockscale time (above 1: faster than the anchor).");
    let shapes: &[(usize, usize, usize)] = if std::env::var("BLOCKSCALE_BENCH_WEIGHT_ONLY").is_ok_and(|v| v == "1") {
        &[]
    } else {
        &[
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (4096, 7168, 2048),
            (128, 7168, 2048),
            (128, 4096, 4096),
            (512, 4096, 4096),
        ]
    };
    let epi = DeviceEpilogue::default();
    for &(m, n, k) in shapes {
        let shape = format!("{m}x{n}x{k}");
        let flop = 2.0 * (m * n * k) as f64;
        let an = anchors(&dev, &blas, (m, n, k));
        let tf = |t: f64| flop / t / 1e12;
        println!("\n== M={m} N={n} K={k}");
        println!(
            "anchors: cuBLAS bf16 {:.1} us ({:.0} TFLOP/s) | cuBLASLt fp8 per-tensor {} | cuBLASLt fp8 blockwise {}",
            an.bf16 * 1e6,
            tf(an.bf16),
            an.fp8_tensor.map_or("n/a".into(), |t| format!("{:.1} us ({:.0})", t * 1e6, tf(t))),
            an.fp8_block.map_or("n/a".into(), |t| format!("{:.1} us ({:.0})", t * 1e6, tf(t))),
        );
        println!(
            "| {:<34} | {:>9} | {:>6} | {:>7} | {:>7} | {:>7} |",
            "kernel", "us", "TF/s", "/bf16", "/fp8-t", "/fp8-b"
        );
        println!("|{:-<36}|{:->11}|{:->8}|{:->9}|{:->9}|{:->9}|", "", "", "", "", "", "");
        let mut d = dev.stream().alloc_zeros::<bf16>(m * n).unwrap();
        let pairs: [(&str, Scheme, Scheme); 6] = [
            ("nvfp4 x nvfp4", Scheme::NvFp4, Scheme::NvFp4),
            ("mxfp4 x mxfp4", Scheme::MxFp4, Scheme::MxFp4),
            ("mxfp8 x mxfp8", Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
            ("mxfp8-e5m2 x mxfp8-e5m2", Scheme::MxFp8E5M2, Scheme::MxFp8E5M2),
            ("mxfp8 x mxfp6-e2m3", Scheme::MxFp8E4M3, Scheme::MxFp6E2M3),
            ("fp8-block 1x128 x 128x128", Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
        ];
        for (name, sa, sb) in pairs {
            let plain = format!("{name} {shape}").contains(&filter);
            // The same pair on prepared weights (`gemm_prepared`; FP8 block pairs read
            // the checkpoint layout).
            let prepared = !matches!(sb, Scheme::Fp8Block(_)) && format!("{name} prepared {shape}").contains(&filter);
            if !plain && !prepared {
                continue;
            }
            let (a, b) = (quantized(&dev, m, k, sa, 3), quantized(&dev, n, k, sb, 4));
            if plain {
                // A pair this device's tier has no kernel for is reported, not timed.
                match gemm_workspace_size::<bf16>(&dev, &a, &b, n) {
                    Ok(bytes) => {
                        dev.reserve_workspace(bytes).unwrap();
                        let call = || gemm_into(&dev, &a, &b, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                        row(name, flop, time(dev.stream(), 10, call), &an);
                    }
                    Err(e) => println!("| {name:<34} | n/a: {e}"),
                }
            }
            if prepared {
                let pw = PreparedWeights::from_device(&dev, b).unwrap();
                let label = format!("{name} prepared");
                match gemm_prepared_workspace_size::<bf16>(&dev, &a, &pw, n) {
                    Ok(bytes) => {
                        dev.reserve_workspace(bytes).unwrap();
                        let call =
                            || gemm_prepared_into(&dev, &a, &pw, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                        row(&label, flop, time(dev.stream(), 10, call), &an);
                    }
                    Err(e) => println!("| {label:<34} | n/a: {e}"),
                }
            }
        }
    }
    if std::env::var("BLOCKSCALE_BENCH_DEEPSEEK").map_or(true, |v| v != "0") && !shapes.is_empty() {
        deepseek(&dev, &blas, &filter);
    }
    weight_only(&dev, &blas, &filter);
}

/// M from `BLOCKSCALE_BENCH_M` (a comma-separated list), else `default`.
fn batch_sizes(default: &[usize]) -> Vec<usize> {
    std::env::var("BLOCKSCALE_BENCH_M")
        .ok()
        .map(|v| v.split(',').filter_map(|m| m.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// FP8 block pairs (1x128 activations x 128x128 weights) on DeepSeek-V3's linear shapes
/// (N x K) beside cuBLASLt's blockwise and per-tensor FP8, as DeepGEMM reports them.
fn deepseek(dev: &Device, blas: &CudaBlas, filter: &str) {
    let epi = DeviceEpilogue::default();
    let shapes = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)];
    println!("\n== DeepSeek-V3 shapes, FP8 block 1x128 x 128x128 (under each row: cuBLASLt blockwise / per-tensor us)");
    println!(
        "| {:<34} | {:>9} | {:>6} | {:>7} | {:>7} | {:>7} |",
        "M x N x K", "us", "TF/s", "/bf16", "/fp8-t", "/fp8-b"
    );
    for m in batch_sizes(&[64, 128, 512, 4096]) {
        for &(n, k) in &shapes {
            let label = format!("fp8-block deepseek {m}x{n}x{k}");
            if !label.contains(filter) {
                continue;
            }
            let flop = 2.0 * (m * n * k) as f64;
            let an = anchors(dev, blas, (m, n, k));
            let a = quantized(dev, m, k, Scheme::Fp8Block(Fp8Tile::Row1x128), 3);
            let b = quantized(dev, n, k, Scheme::Fp8Block(Fp8Tile::Tile128x128), 4);
            let mut d = dev.stream().alloc_zeros::<bf16>(m * n).unwrap();
            dev.reserve_workspace(gemm_workspace_size::<bf16>(dev, &a, &b, n).unwrap()).unwrap();
            let call = || gemm_into(dev, &a, &b, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
            let t = time(dev.stream(), 10, call);
            let us = |a: Option<f64>| a.map_or("n/a".to_string(), |a| format!("{:.1}", a * 1e6));
            row(&format!("{m}x{n}x{k}"), flop, t, &an);
            println!("|   anchors {} / {}", us(an.fp8_block), us(an.fp8_tensor));
        }
    }
}

/// The weight-only products (bf16 activations x quantized weights) beside cuBLAS BF16 on
/// bf16 weights: the general path (weights dequantized to bf16 in a separate pass, then a
/// BF16 GEMM) and the fused kernel on prepared weights, at prefill sizes on a dense and
/// two MLP-like shapes.
fn weight_only(dev: &Device, blas: &CudaBlas, filter: &str) {
    let epi = DeviceEpilogue::default();
    // BLOCKSCALE_BENCH_M (a comma-separated list) replaces the batch sizes.
    let ms = batch_sizes(&[128, 512, 4096]);
    for (n, k) in [(4096, 4096), (28672, 8192), (7168, 2048)] {
        for &m in &ms {
            let shape = format!("{m}x{n}x{k}");
            let flop = 2.0 * (m * n * k) as f64;
            let stream = dev.stream();
            let (a, b) = (random_bf16(dev, m * k, 1), random_bf16(dev, n * k, 2));
            let mut d = stream.alloc_zeros::<bf16>(m * n).unwrap();
            let cfg = bf16_gemm_config((m, n, k));
            // SAFETY: the buffers hold the elements the configuration addresses.
            let t_bf16 = time(stream, 10, || unsafe { blas.gemm(cfg, &b, &a, &mut d) }.unwrap());
            // The anchor replayed from a graph too, for the graph rows below.
            // SAFETY: as above.
            let t_bf16_graph = graph_time(dev, 10, |_| unsafe { blas.gemm(cfg, &b, &a, &mut d) }.unwrap());
            drop(b);
            let an = Anchors { bf16: t_bf16, fp8_tensor: None, fp8_block: None };
            let an_graph = Anchors { bf16: t_bf16_graph, fp8_tensor: None, fp8_block: None };
            println!(
                "\n== weight-only M={m} N={n} K={k}: cuBLAS bf16 {:.1} us ({:.0} TFLOP/s), graph {:.1} us",
                t_bf16 * 1e6,
                flop / t_bf16 / 1e12,
                t_bf16_graph * 1e6
            );
            let xm = DeviceMatrix::new(&a, m, k);
            for (name, scheme) in [
                ("nvfp4", Scheme::NvFp4),
                ("mxfp4", Scheme::MxFp4),
                ("int4-g32", Scheme::Int4G32),
                ("int4-g128", Scheme::Int4G128),
                ("mxfp8-e4m3", Scheme::MxFp8E4M3),
                ("fp8-block 128x128", Scheme::Fp8Block(Fp8Tile::Tile128x128)),
            ] {
                if !format!("bf16 x {name} {shape}").contains(filter) {
                    continue;
                }
                let w = quantized(dev, n, k, scheme, 6);
                if matches!(scheme, Scheme::NvFp4 | Scheme::Int4G32) && m <= 512 {
                    // The general path, for the ratio the prepared kernel is to beat.
                    let bytes = gemm_weight_only_workspace_size::<bf16, bf16>(dev, xm, &w, n).unwrap();
                    dev.reserve_workspace(bytes).unwrap();
                    let call = || gemm_weight_only_into(dev, xm, &w, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                    row(&format!("bf16 x {name} (dequantize + bf16)"), flop, time(stream, 10, call), &an);
                }
                let pw = PreparedWeights::from_device(dev, w).unwrap();
                let bytes = gemm_weight_only_prepared_workspace_size::<bf16, bf16>(dev, xm, &pw, n).unwrap();
                dev.reserve_workspace(bytes).unwrap();
                let mut call =
                    || gemm_weight_only_prepared_into(dev, xm, &pw, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                row(&format!("bf16 x {name} prepared"), flop, time(stream, 10, &mut call), &an);
                if m <= 512 {
                    // Small products are near the host's launch rate: the same calls
                    // replayed from a CUDA graph.
                    row(&format!("bf16 x {name} prepared (graph)"), flop, graph_time(dev, 10, |_| call()), &an_graph);
                }
                if matches!(scheme, Scheme::NvFp4 | Scheme::MxFp4) {
                    // The pair on the same prepared weights (`gemm_prepared`): NVFP4
                    // activations with NVFP4 weights, MXFP8 E4M3 with MXFP4.
                    let (act, sa) =
                        if scheme == Scheme::NvFp4 { ("nvfp4", Scheme::NvFp4) } else { ("mxfp8", Scheme::MxFp8E4M3) };
                    let qa = quantize(dev, xm, sa, &QuantizeOptions::default()).unwrap();
                    let bytes = gemm_prepared_workspace_size::<bf16>(dev, &qa, &pw, n).unwrap();
                    dev.reserve_workspace(bytes).unwrap();
                    let call = || gemm_prepared_into(dev, &qa, &pw, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                    row(&format!("{act} x {name} prepared pair"), flop, time(stream, 10, call), &an);
                }
                if m <= 512 && matches!(scheme, Scheme::Int4G32 | Scheme::Int4G128 | Scheme::Fp8Block(_)) {
                    // f16 activations (W4A16 checkpoints often run them): the same weights.
                    let xh = random_f16(dev, m * k, 1);
                    let xhm = DeviceMatrix::new(&xh, m, k);
                    let bytes = gemm_weight_only_prepared_workspace_size::<f16, bf16>(dev, xhm, &pw, n).unwrap();
                    dev.reserve_workspace(bytes).unwrap();
                    let call = || {
                        gemm_weight_only_prepared_into(dev, xhm, &pw, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap()
                    };
                    row(&format!("f16 x {name} prepared"), flop, time(stream, 10, call), &an);
                }
            }
        }
    }
}
