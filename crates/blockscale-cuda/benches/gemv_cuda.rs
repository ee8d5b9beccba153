//! GPU GEMV (decode) throughput with a cold L2, beside anchors measured in the same run:
//! a device-to-device copy (the bandwidth roof), cuBLAS BF16 at M = 1 on bf16 weights
//! and cuBLASLt FP8 (E4M3, per-tensor scales) on the same shape.
//!
//! Cold L2: every timed call reads a different copy of the weights, cycling through
//! enough copies to hold four times the L2 (the anchors rotate the same way). Weight
//! bytes are the codes plus the scales; "% copy" is weight bytes per second over the
//! copy's bytes (read + written) per second. Times are CUDA-event medians (7 repetitions
//! of one pass over the copies after 3 warm-up passes); "graph" rows replay one CUDA
//! graph holding a pass over the copies, where launch overhead is smallest.
//!
//! Run on a GPU machine: `gpu-bundle/run.sh bench` (the `cargo xtask bench --backend
//! cuda` flow), with cuBLAS on the library path. `BLOCKSCALE_BENCH_FILTER=text` keeps the
//! cases whose label contains `text`; `BLOCKSCALE_BENCH_PREPARED=1` (or `_PLAIN=1`) times
//! only the prepared (or checkpoint-layout) weights; `BLOCKSCALE_BENCH_GRAPH=1` adds a
//! graph row for every M, not only M = 1, and every scheme's rows of M > 1.
//!
//! Why this bench stays beside the facade's (benches/backend.rs): the facade's
//! `Backend::Cuda` calls take host arrays and copy them over PCIe on every call; this bench
//! times the GEMV kernels alone on device buffers (cold L2, graph replay, the fused
//! epilogue and the gated form), which only this crate exposes.

mod common;

use blockscale_cuda::cudarc::cublas::{CudaBlas, Gemm};
use blockscale_cuda::cudarc::driver::sys::CUdevice_attribute;
use blockscale_cuda::cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use blockscale_cuda::{
    Activation, Device, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized, DeviceScales, GatedWeights,
    GemvWeights, PreparedWeights, QuantizeOptions, gemv_gated_into, gemv_into, gemv_workspace_size, quantize,
};
use blockscale_formats::{DataLayout, Fp8Tile, ScaleLayout, Scheme};
use common::anchors::{LtFp8, bf16_gemm_config, device_and_blas, random_bf16, random_u8};
use common::time;
use half::bf16;

/// Bytes the rotating copies of a weight matrix must cover: four L2s.
fn cold_bytes(dev: &Device) -> usize {
    let l2 = dev.context().attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).unwrap_or(50 << 20);
    4 * l2.max(1) as usize
}

fn copies_for(dev: &Device, bytes: usize) -> usize {
    cold_bytes(dev).div_ceil(bytes).max(1)
}

fn weight_bytes(w: &DeviceQuantized) -> usize {
    w.data().len()
        + match w.scales() {
            DeviceScales::Bytes(v) => v.len(),
            DeviceScales::F32(v) => 4 * v.len(),
            DeviceScales::F16(v) => 2 * v.len(),
        }
}

/// Quantized copies (at least `min`) of one random N x K matrix (swizzled scales where the
/// scheme takes them, as quantize writes by default).
fn weight_copies(
    dev: &Device,
    (n, k): (usize, usize),
    scheme: Scheme,
    interleaved: bool,
    min: usize,
) -> Vec<DeviceQuantized> {
    let x = random_bf16(dev, n * k, 11);
    let layout = if scheme.supports_layout(ScaleLayout::Swizzled128x4) {
        ScaleLayout::Swizzled128x4
    } else {
        ScaleLayout::Linear
    };
    let mut opts = QuantizeOptions::default().with_scale_layout(layout);
    if interleaved {
        opts = opts.with_data_layout(DataLayout::BlockInterleaved);
    }
    let first = quantize(dev, DeviceMatrix::new(&x, n, k), scheme, &opts).unwrap();
    let copies = copies_for(dev, weight_bytes(&first)).max(min);
    let mut all = vec![first];
    for _ in 1..copies {
        all.push(quantize(dev, DeviceMatrix::new(&x, n, k), scheme, &opts).unwrap());
    }
    all
}

/// Calls per timed repetition: a pass over the copies, at least 10.
fn calls(count: usize) -> usize {
    count.max(10)
}

/// Median seconds per call of `call(i)` cycling i over `count` copies.
fn cold_time(dev: &Device, count: usize, mut call: impl FnMut(usize)) -> f64 {
    let mut i = 0;
    time(dev.stream(), calls(count), || {
        call(i % count);
        i += 1;
    })
}

/// Median seconds per call when one pass over the copies is replayed as a CUDA graph.
fn graph_time(dev: &Device, count: usize, mut call: impl FnMut(usize)) -> f64 {
    common::graph_time(dev, calls(count), |i| call(i % count))
}

/// Anchors of one shape, seconds per call at M = 1 (`None`: cuBLASLt has no algorithm).
struct Anchors {
    bf16: f64,
    fp8: Option<f64>,
}

fn anchors(dev: &Device, blas: &CudaBlas, n: usize, k: usize) -> Anchors {
    let stream = dev.stream();
    let copies = copies_for(dev, n * k * 2);
    let ws: Vec<CudaSlice<bf16>> = (0..copies).map(|i| random_bf16(dev, n * k, 20 + i as u64)).collect();
    let x = random_bf16(dev, k, 3);
    let mut y = stream.alloc_zeros::<bf16>(n).unwrap();
    // Row-major y (1 x N) is column-major y^T (N x 1) = W (op T on the stored K x N) . x.
    let cfg = bf16_gemm_config((1, n, k));
    // SAFETY: the buffers hold the elements the configuration addresses.
    let bf16_t = cold_time(dev, copies, |i| unsafe { blas.gemm(cfg, &ws[i], &x, &mut y) }.unwrap());
    drop(ws);

    let copies = copies_for(dev, n * k);
    let w8: Vec<CudaSlice<u8>> = (0..copies).map(|i| random_u8(dev, n * k, 40 + i as u64)).collect();
    let x8 = random_u8(dev, 16 * k, 4);
    let one = stream.clone_htod(&[1f32]).unwrap();
    let mut d = stream.alloc_zeros::<bf16>(16 * n).unwrap();
    let (px, _gx) = x8.device_ptr(stream);
    let (p1, _g1) = one.device_ptr(stream);
    let (pd, _gd) = d.device_ptr_mut(stream);
    let ptrs: Vec<u64> = w8.iter().map(|w| w.device_ptr(stream).0).collect();
    let fp8 = LtFp8::new(stream, (1, n, k), false, p1, p1).map(|mut lt| {
        (0..lt.algorithms())
            .map(|a| cold_time(dev, copies, |i| lt.run(stream, a, px, ptrs[i], pd)))
            .fold(f64::INFINITY, f64::min)
    });
    Anchors { bf16: bf16_t, fp8 }
}

struct Row<'a> {
    label: &'a str,
    m: usize,
    t: f64,
    bytes: usize,
}

fn print_row(r: &Row<'_>, copy_gbs: f64, an: &Anchors) {
    let gbs = r.bytes as f64 / r.t / 1e9;
    println!(
        "| {:<38} | {:>2} | {:>8.1} | {:>7.0} | {:>6.1}% | {:>7.2} | {:>7} |",
        r.label,
        r.m,
        r.t * 1e6,
        gbs,
        100.0 * gbs / copy_gbs,
        an.bf16 / r.t,
        an.fp8.map_or("n/a".to_string(), |f| format!("{:.2}", f / r.t)),
    );
}

const SCHEMES: [(&str, Scheme, bool); 10] = [
    ("nvfp4", Scheme::NvFp4, false),
    ("mxfp4", Scheme::MxFp4, false),
    ("mxfp6-e2m3", Scheme::MxFp6E2M3, false),
    ("mxfp6-e3m2", Scheme::MxFp6E3M2, false),
    ("mxfp8-e4m3", Scheme::MxFp8E4M3, false),
    ("mxfp8-e5m2", Scheme::MxFp8E5M2, false),
    ("fp8-block 128x128", Scheme::Fp8Block(Fp8Tile::Tile128x128), false),
    ("int4-g32", Scheme::Int4G32, false),
    ("int4-g32 interleaved", Scheme::Int4G32, true),
    ("int4-g128", Scheme::Int4G128, false),
];

/// Whether the environment variable `name` is set to `1` (this bench's switches).
fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// `BLOCKSCALE_BENCH_PLAIN=1`: the checkpoint-layout kernels only.
fn only_plain() -> bool {
    flag("BLOCKSCALE_BENCH_PLAIN")
}

/// `BLOCKSCALE_BENCH_PREPARED=1`: the prepared-weights kernels only.
fn only_prepared() -> bool {
    flag("BLOCKSCALE_BENCH_PREPARED")
}

/// `BLOCKSCALE_BENCH_GRAPH=1`: every M's row timed in a CUDA graph too (kernel time without
/// the host's launch rate, which sets the eager rows of the small shapes).
fn graph_all() -> bool {
    flag("BLOCKSCALE_BENCH_GRAPH")
}

/// One scheme's rows of the table.
struct Case<'a> {
    name: &'a str,
    n: usize,
    k: usize,
    bytes: usize,
    half_bytes: usize,
    detail: bool,
    ms: &'a [usize],
}

/// Times one weight set (copies for the cold L2, and pairs of half-height copies for
/// the gated form) and prints its rows; returns the M = 1 time.
fn rows(
    dev: &Device,
    c: Case<'_>,
    ws: &[GemvWeights<'_>],
    half: &[GemvWeights<'_>],
    xs: &CudaSlice<bf16>,
    copy_gbs: f64,
    an: &Anchors,
) -> f64 {
    let (n, k, bytes, name) = (c.n, c.k, c.bytes, c.name);
    let epi = DeviceEpilogue::default();
    let bias = dev.stream().clone_htod(&vec![0.25f32; n]).unwrap();
    let mut y = dev.stream().alloc_zeros::<bf16>(16 * n).unwrap();
    let mut run = |m: usize, e: &DeviceEpilogue<'_>, graph: bool| {
        dev.reserve_workspace(gemv_workspace_size(dev, m, ws[0], false).unwrap()).unwrap();
        let xm = DeviceMatrix::new(xs, m, k);
        let mut call = |i: usize| gemv_into(dev, xm, ws[i], e, DeviceMatrixMut::new(&mut y, m, n)).unwrap();
        if graph { graph_time(dev, ws.len(), call) } else { cold_time(dev, ws.len(), &mut call) }
    };
    let t1 = run(1, &epi, false);
    print_row(&Row { label: name, m: 1, t: t1, bytes }, copy_gbs, an);
    if !c.detail {
        return t1;
    }
    let tg = run(1, &epi, true);
    print_row(&Row { label: &format!("{name} (graph)"), m: 1, t: tg, bytes }, copy_gbs, an);
    for &m in c.ms {
        let t = run(m, &epi, false);
        print_row(&Row { label: &format!("{name} (M={m}: {:.2}x M=1)", t / t1), m, t, bytes }, copy_gbs, an);
        if graph_all() {
            let t = run(m, &epi, true);
            let label = format!("{name} (graph, M={m}: {:.2}x M=1)", t / tg);
            print_row(&Row { label: &label, m, t, bytes }, copy_gbs, an);
        }
    }
    let fused = DeviceEpilogue::default().with_bias(&bias).with_activation(Activation::Silu);
    let te = run(1, &fused, false);
    print_row(
        &Row { label: &format!("{name} +bias+silu ({:+.1}%)", 100.0 * (te / t1 - 1.0)), m: 1, t: te, bytes },
        copy_gbs,
        an,
    );
    // Gated: gate and up of N/2 rows each, the same weight bytes as one N-row GEMV.
    let pairs = half.len() / 2;
    if pairs > 0 {
        dev.reserve_workspace(gemv_workspace_size(dev, 1, half[0], true).unwrap()).unwrap();
        let xm = DeviceMatrix::new(xs, 1, k);
        let tgate = cold_time(dev, pairs, |i| {
            let gw = GatedWeights::swiglu(half[2 * i], half[2 * i + 1]);
            gemv_gated_into(dev, xm, &gw, DeviceMatrixMut::new(&mut y, 1, n / 2)).unwrap()
        });
        let hb = c.half_bytes;
        let label = format!("{name} gated 2x{} ({:.3}x plain)", n / 2, tgate / t1 * bytes as f64 / (2 * hb) as f64);
        print_row(&Row { label: &label, m: 1, t: tgate, bytes: 2 * hb }, copy_gbs, an);
    }
    t1
}

fn main() {
    let (dev, blas) = device_and_blas();
    let filter = std::env::var("BLOCKSCALE_BENCH_FILTER").unwrap_or_default();
    println!(
        "{} ({:?}, {} SMs), cold-L2 rotation over {} MiB",
        dev.name(),
        dev.arch(),
        dev.sm_count(),
        cold_bytes(&dev) >> 20
    );

    // Anchor: a device-to-device copy of 512 MiB.
    let bytes = 512usize << 20;
    let src = dev.stream().alloc_zeros::<u8>(bytes).unwrap();
    let mut dst = dev.stream().alloc_zeros::<u8>(bytes).unwrap();
    let t = time(dev.stream(), 5, || dev.stream().memcpy_dtod(&src, &mut dst).unwrap());
    let copy_gbs = 2.0 * bytes as f64 / t / 1e9;
    println!("device-to-device copy (anchor): {copy_gbs:.0} GB/s (read + written)");
    drop((src, dst));

    for (n, k) in [(28672, 8192), (16384, 2048), (4096, 4096)] {
        let an = anchors(&dev, &blas, n, k);
        println!("\n== N={n} K={k}");
        println!(
            "anchors, M=1, cold: cuBLAS bf16 {:.1} us ({:.0} GB/s) | cuBLASLt fp8 per-tensor {}",
            an.bf16 * 1e6,
            (n * k * 2) as f64 / an.bf16 / 1e9,
            an.fp8.map_or("n/a".into(), |t| format!("{:.1} us ({:.0} GB/s)", t * 1e6, (n * k) as f64 / t / 1e9)),
        );
        println!(
            "| {:<38} | {:>2} | {:>8} | {:>7} | {:>7} | {:>7} | {:>7} |",
            "kernel", "M", "us", "GB/s", "% copy", "x bf16", "x fp8"
        );
        println!("|{:-<40}|{:->4}|{:->10}|{:->9}|{:->9}|{:->9}|{:->9}|", "", "", "", "", "", "", "");
        for (name, scheme, interleaved) in SCHEMES {
            let label = format!("{name} {n}x{k}");
            if !label.contains(&filter) {
                continue;
            }
            let ws = weight_copies(&dev, (n, k), scheme, interleaved, 1);
            let bytes = weight_bytes(&ws[0]);
            let half: Vec<DeviceQuantized> = weight_copies(&dev, (n / 2, k), scheme, interleaved, 2);
            let hb = weight_bytes(&half[0]);
            let xs = random_bf16(&dev, 16 * k, 5);
            let detail = scheme == Scheme::NvFp4 || n == 28672 || graph_all();
            let plain: Vec<GemvWeights<'_>> = ws.iter().map(GemvWeights::from).collect();
            let plain_half: Vec<GemvWeights<'_>> = half.iter().map(GemvWeights::from).collect();
            let t1 = if only_prepared() {
                f64::NAN
            } else {
                let c = Case { name, n, k, bytes, half_bytes: hb, detail, ms: &[4, 16] };
                rows(&dev, c, &plain, &plain_half, &xs, copy_gbs, &an)
            };
            // The same weights prepared once (the fast kernels); INT4's interleaved layout
            // prepares to the same bytes as its row-major one, so it is timed once.
            if interleaved || only_plain() {
                continue;
            }
            let prep = |v: Vec<DeviceQuantized>| -> Vec<PreparedWeights> {
                v.into_iter().map(|w| PreparedWeights::from_device(&dev, w).unwrap()).collect()
            };
            let (pws, phalf) = (prep(ws), prep(half));
            if let Some(r) = pws[0].unprepared_reason() {
                println!("| {name} prepared: kept its checkpoint layout ({r}) |");
                continue;
            }
            let pw: Vec<GemvWeights<'_>> = pws.iter().map(GemvWeights::from).collect();
            let ph: Vec<GemvWeights<'_>> = phalf.iter().map(GemvWeights::from).collect();
            let pname = format!("{name} prepared");
            let tp = rows(
                &dev,
                Case { name: &pname, n, k, bytes, half_bytes: hb, detail, ms: &[2, 4, 8, 16] },
                &pw,
                &ph,
                &xs,
                copy_gbs,
                &an,
            );
            // The checkpoint layout's row is skipped under BLOCKSCALE_BENCH_PREPARED.
            if t1.is_finite() {
                println!("| {:<38} | {:>2} | prepared / checkpoint layout: {:.2}x faster |", name, 1, t1 / tp);
            }
        }
    }
}
