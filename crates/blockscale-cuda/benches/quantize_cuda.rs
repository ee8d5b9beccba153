//! GPU quantization and dequantization throughput, beside a device-to-device copy
//! measured in the same run. Run on a GPU machine (`gpu-bundle/run.sh bench`, or
//! `cargo bench -p blockscale-cuda --bench quantize_cuda` where Rust and a GPU meet).
//!
//! Large case: an 8192 x 8192 bf16 matrix; the NVFP4 per-tensor scale is given (the amax
//! pass is timed separately); swizzled scales for NVFP4 and MX. Bandwidth counts bytes
//! read plus bytes written; the copy anchor moves 256 MiB (128 MiB read, 128 written).
//! Small cases (1, 16, 128 rows x 4096) show the per-launch cost. Times are CUDA-event
//! times of back-to-back launches into preallocated buffers, median of 7 repetitions of
//! 20 launches.
//!
//! Why this bench stays beside the facade's (benches/backend.rs): the facade's
//! `Backend::Cuda` calls take host arrays and copy them over PCIe on every call, which
//! costs far more than the kernels at any size; this bench times the kernels on device
//! buffers (`quantize_into`, `dequantize_into`), which only this crate exposes.

mod common;

use blockscale_cuda::cudarc::driver::CudaSlice;
use blockscale_cuda::{
    Device, DeviceMatrix, DeviceQuantized, GlobalScaleSource, NonFinite, QuantizeOptions, dequantize_into, quantize,
    quantize_into,
};
use blockscale_formats::{DataLayout, Fp8Tile, GlobalScale, ScaleLayout, Scheme};
use common::time;
use half::bf16;

fn input(dev: &Device, rows: usize, k: usize) -> CudaSlice<bf16> {
    let mut rng = blockscale_formats::rng::SplitMix64::new(0x5eed);
    let host: Vec<bf16> = (0..rows * k)
        .map(|_| {
            let u = rng.uniform_f32(-1.0, 1.0);
            bf16::from_f32(u * if rng.below(1024) == 0 { 20.0 } else { 1.0 })
        })
        .collect();
    dev.stream().clone_htod(&host).unwrap()
}

fn main() {
    let dev = common::device_or_exit();
    println!("{} ({:?}, {} SMs)", dev.name(), dev.arch(), dev.sm_count());

    // Anchor: a device-to-device copy of 128 MiB.
    let bytes = 128usize << 20;
    let src = dev.stream().alloc_zeros::<u8>(bytes).unwrap();
    let mut dst = dev.stream().alloc_zeros::<u8>(bytes).unwrap();
    let t = time(dev.stream(), 20, || dev.stream().memcpy_dtod(&src, &mut dst).unwrap());
    let copy_gbs = 2.0 * bytes as f64 / t / 1e9;
    println!("\ndevice-to-device copy (anchor): {:.1} us, {copy_gbs:.0} GB/s (read + written)", t * 1e6);
    drop((src, dst));

    let given = GlobalScaleSource::Given(GlobalScale::from_amax(20.0).unwrap());
    let schemes: [(&str, Scheme, ScaleLayout); 10] = [
        ("nvfp4", Scheme::NvFp4, ScaleLayout::Swizzled128x4),
        ("mxfp4", Scheme::MxFp4, ScaleLayout::Swizzled128x4),
        ("mxfp8-e4m3", Scheme::MxFp8E4M3, ScaleLayout::Swizzled128x4),
        ("mxfp8-e5m2", Scheme::MxFp8E5M2, ScaleLayout::Swizzled128x4),
        ("mxfp6-e2m3", Scheme::MxFp6E2M3, ScaleLayout::Swizzled128x4),
        ("mxfp6-e3m2", Scheme::MxFp6E3M2, ScaleLayout::Swizzled128x4),
        ("fp8-block-1x128", Scheme::Fp8Block(Fp8Tile::Row1x128), ScaleLayout::Linear),
        ("fp8-block-128x128", Scheme::Fp8Block(Fp8Tile::Tile128x128), ScaleLayout::Linear),
        ("int4-g32", Scheme::Int4G32, ScaleLayout::Linear),
        ("int4-g128", Scheme::Int4G128, ScaleLayout::Linear),
    ];

    let (rows, k) = (8192usize, 8192usize);
    let x = input(&dev, rows, k);
    let m = DeviceMatrix::new(&x, rows, k);
    println!("\n{rows} x {k} bf16 ({} MiB in)", (rows * k * 2) >> 20);
    println!("{:<30} {:>10} {:>10} {:>10}", "case", "us", "GB/s", "vs copy");
    let report = |name: &str, t: f64, moved: usize| {
        let gbs = moved as f64 / t / 1e9;
        println!("{name:<30} {:>10.1} {gbs:>10.0} {:>9.1}%", t * 1e6, 100.0 * gbs / copy_gbs);
    };
    for (name, scheme, layout) in schemes {
        let opts = QuantizeOptions::default()
            .with_scale_layout(layout)
            .with_global_scale(if scheme == Scheme::NvFp4 { given } else { GlobalScaleSource::TensorAmax })
            .with_non_finite(NonFinite::Poison);
        let mut out = DeviceQuantized::alloc(&dev, scheme, rows, k, layout, DataLayout::RowMajor).unwrap();
        let t = time(dev.stream(), 20, || quantize_into(&dev, m, &opts, &mut out).unwrap());
        let moved = rows * k * 2
            + out.shape().data_bytes
            + out.shape().scale_len(layout).unwrap() * scheme.scale_format().bytes();
        report(&format!("quantize {name}"), t, moved);
    }
    // The NVFP4 tensor-amax pass alone (reads the input once, then a 4-byte read back).
    let nv =
        QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4).with_non_finite(NonFinite::Poison);
    let mut out =
        DeviceQuantized::alloc(&dev, Scheme::NvFp4, rows, k, ScaleLayout::Swizzled128x4, DataLayout::RowMajor).unwrap();
    let with_amax = time(dev.stream(), 20, || quantize_into(&dev, m, &nv, &mut out).unwrap());
    report(
        "quantize nvfp4 + amax pass",
        with_amax,
        rows * k * 2 * 2 + out.shape().data_bytes + out.shape().scale_len(ScaleLayout::Swizzled128x4).unwrap(),
    );
    for (name, scheme, layout) in [schemes[0], schemes[1], schemes[2]] {
        let q = quantize(
            &dev,
            m,
            scheme,
            &QuantizeOptions::default().with_scale_layout(layout).with_global_scale(if scheme == Scheme::NvFp4 {
                given
            } else {
                GlobalScaleSource::TensorAmax
            }),
        )
        .unwrap();
        let mut y = dev.stream().alloc_zeros::<bf16>(rows * k).unwrap();
        let t = time(dev.stream(), 20, || dequantize_into(&dev, &q, &mut y, k).unwrap());
        let moved = rows * k * 2 + q.shape().data_bytes + q.shape().scale_len(layout).unwrap();
        report(&format!("dequantize {name} -> bf16"), t, moved);
    }

    small_shapes(&dev, "blockscale's own stream (cudarc event tracking on)", given);
    // The same through a caller's stream on a context with cudarc's cross-stream event
    // tracking off, as an engine that orders its own streams would run it.
    let ctx = blockscale_cuda::cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: this context's buffers are used on one stream only.
    unsafe { ctx.disable_event_tracking() };
    let own = Device::from_stream(ctx.new_stream().unwrap()).unwrap();
    small_shapes(&own, "caller's stream, event tracking off", given);
}

/// Per-call times of small quantizations (launch overhead included).
fn small_shapes(dev: &Device, what: &str, given: GlobalScaleSource) {
    println!("\nsmall shapes, {what} (per call, launch included; NVFP4 given scale, MXFP8)");
    println!("{:<30} {:>10}", "case", "us");
    for r in [1usize, 16, 128] {
        let xs = input(dev, r, 4096);
        let ms = DeviceMatrix::new(&xs, r, 4096);
        for (name, scheme) in [("nvfp4", Scheme::NvFp4), ("mxfp8-e4m3", Scheme::MxFp8E4M3)] {
            let layout = ScaleLayout::Swizzled128x4;
            let opts = QuantizeOptions::default()
                .with_scale_layout(layout)
                .with_global_scale(if scheme == Scheme::NvFp4 { given } else { GlobalScaleSource::TensorAmax })
                .with_non_finite(NonFinite::Poison);
            let mut out = DeviceQuantized::alloc(dev, scheme, r, 4096, layout, DataLayout::RowMajor).unwrap();
            let t = time(dev.stream(), 20, || quantize_into(dev, ms, &opts, &mut out).unwrap());
            println!("{:<30} {:>10.2}", format!("quantize {name} {r} x 4096"), t * 1e6);
        }
    }
}
