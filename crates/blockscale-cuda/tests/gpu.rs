//! The CUDA kernels against the CPU backend (itself checked against an independent
//! reference and NVIDIA's conversion functions): identical bytes for every scheme,
//! recipe, rule, layout and input type, on random data with NaN/Inf, ties and tiny
//! values, on every f16 and every bf16 bit pattern, and identical dequantized values.
//!
//! Needs a GPU of compute capability 9.0 or 12.x. Without one every test prints why and
//! passes, unless BLOCKSCALE_REQUIRE_GPU=1 (set by the GPU bundle's run script), which
//! turns the skip into a failure.

mod common;

use blockscale_cpu as cpu;
use blockscale_cuda::{self as gpu, Device, DeviceMatrix, DeviceQuantized};
use blockscale_formats::{DataLayout, GlobalScaleSource, NonFinite, ScaleLayout, Scheme};
use common::device;
use common::quant::{assert_same, callers_device, cpu_opts, data, option_sets};
use half::{bf16, f16};
use ndarray::Array2;

fn check_scheme<T: gpu::DeviceElement + cpu::Input>(dev: &Device, x: &Array2<T>, scheme: Scheme, what: &str) {
    let (rows, k) = x.dim();
    for opts in option_sets(scheme, k) {
        let label = format!("{what} {scheme} {opts:?}");
        let g = gpu::quantize_host(dev, x.view(), scheme, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
        let c = cpu::quantize(x.view(), scheme, &cpu_opts(&opts)).unwrap();
        assert_same(&g, &c, &label);
        // Dequantized values, every output type.
        let gd = gpu::dequantize_host::<f32>(dev, &c).unwrap();
        let cd = cpu::dequantize::<f32>(&c);
        assert!(gd.iter().map(|v| v.to_bits()).eq(cd.iter().map(|v| v.to_bits())), "{label}: f32 dequant");
        let gd = gpu::dequantize_host::<bf16>(dev, &c).unwrap();
        let cd = cpu::dequantize::<bf16>(&c);
        assert!(gd.iter().map(|v| v.to_bits()).eq(cd.iter().map(|v| v.to_bits())), "{label}: bf16 dequant");
        let gd = gpu::dequantize_host::<f16>(dev, &c).unwrap();
        let cd = cpu::dequantize::<f16>(&c);
        assert!(gd.iter().map(|v| v.to_bits()).eq(cd.iter().map(|v| v.to_bits())), "{label}: f16 dequant");
        assert_eq!((rows, k), (c.rows(), c.k()));
    }
}

#[test]
fn every_scheme_matches_the_cpu_on_random_data() {
    let Some(dev) = device() else { return };
    for (rows, k, seed) in [(1, 128, 1u64), (130, 256, 2), (257, 384, 3), (64, 4096, 4)] {
        let raw = data(rows * k, seed, true);
        let x32 = Array2::from_shape_vec((rows, k), raw.clone()).unwrap();
        let xb = x32.mapv(bf16::from_f32);
        let xh = x32.mapv(f16::from_f32);
        for scheme in Scheme::ALL {
            check_scheme(&dev, &x32, scheme, "f32");
            check_scheme(&dev, &xb, scheme, "bf16");
            check_scheme(&dev, &xh, scheme, "f16");
        }
    }
}

#[test]
fn every_f16_and_bf16_pattern_matches_the_cpu() {
    let Some(dev) = device() else { return };
    // All 65536 patterns as one 256 x 256 matrix per type (NaN/Inf poison their blocks),
    // in order and in a scrambled order, so each value meets many block scales.
    let perms: [fn(usize) -> usize; 2] = [|i| i, |i| (i * 40503) % 65536];
    for perm in perms {
        let xb = Array2::from_shape_fn((256, 256), |(r, c)| bf16::from_bits(perm(r * 256 + c) as u16));
        let xh = Array2::from_shape_fn((256, 256), |(r, c)| f16::from_bits(perm(r * 256 + c) as u16));
        for scheme in Scheme::ALL {
            check_scheme(&dev, &xb, scheme, "all bf16");
            check_scheme(&dev, &xh, scheme, "all f16");
        }
    }
}

#[test]
fn non_finite_errors_match_the_cpu() {
    let Some(dev) = device() else { return };
    let (rows, k) = (300, 256);
    for scheme in Scheme::ALL {
        for (r, c) in [(0usize, 0usize), (129, 77), (299, 255)] {
            let mut x = Array2::<f32>::from_shape_fn((rows, k), |(i, j)| ((i * 7 + j) % 11) as f32 - 5.0);
            x[(r, c)] = f32::NAN;
            x[(299, 0)] = f32::INFINITY;
            let opts = gpu::QuantizeOptions::default();
            let g = gpu::quantize_host(&dev, x.view(), scheme, &opts).unwrap_err();
            let c_err = cpu::quantize(x.view(), scheme, &cpu::QuantizeOptions::default()).unwrap_err();
            match (g, c_err) {
                (gpu::CudaError::NonFinite { row, col, .. }, cpu::CpuError::NonFinite { row: cr, col: cc, .. }) => {
                    assert_eq!((row, col), (cr, cc), "{scheme}")
                }
                (g, c) => panic!("{scheme}: GPU {g} / CPU {c}"),
            }
        }
    }
}

#[test]
fn strided_device_input_and_device_round_trip() {
    let Some(dev) = device() else { return };
    let (rows, k, stride) = (200, 256, 264);
    let raw = data(rows * stride, 9, false);
    let xs: Vec<bf16> = raw.iter().map(|&v| bf16::from_f32(v)).collect();
    let on_dev = dev.stream().clone_htod(&xs).unwrap();
    let contiguous = Array2::from_shape_fn((rows, k), |(r, c)| xs[r * stride + c]);
    for scheme in Scheme::ALL {
        let opts = gpu::QuantizeOptions::default();
        let m = DeviceMatrix { data: &on_dev, rows, k, row_stride: stride };
        let q = gpu::quantize(&dev, m, scheme, &opts).unwrap();
        let c = cpu::quantize(contiguous.view(), scheme, &cpu_opts(&opts)).unwrap();
        assert_same(&q.to_host(&dev).unwrap(), &c, &format!("strided {scheme}"));
        // Device to device: dequantize into a strided output.
        let mut out = dev.stream().alloc_zeros::<f32>(rows * stride).unwrap();
        gpu::dequantize_into(&dev, &q, &mut out, stride).unwrap();
        let host = dev.stream().clone_dtoh(&out).unwrap();
        let want = cpu::dequantize::<f32>(&c);
        for r in 0..rows {
            for col in 0..k {
                assert_eq!(host[r * stride + col].to_bits(), want[(r, col)].to_bits(), "{scheme} ({r}, {col})");
            }
            assert!(host[r * stride + k..(r + 1) * stride].iter().all(|&v| v == 0.0), "wrote past a row");
        }
        let back = DeviceQuantized::from_host(&dev, &c).unwrap().to_host(&dev).unwrap();
        assert_same(&back, &c, "host round trip");
    }
}

/// With cudarc's event tracking (Device::new), a read of the output on another stream
/// waits for the quantize kernel: the launch wrappers hold cudarc's guards across the
/// launch. The stream is kept busy first, and the other stream copies the last codes
/// the kernel writes, so that an event recorded before the launch would let it read
/// them while the kernel is still running.
#[test]
fn other_streams_wait_for_the_kernel() {
    let Some(dev) = device() else { return };
    let other = dev.context().new_stream().unwrap();
    let (rows, k) = (4096, 8192);
    let x: Vec<bf16> = data(rows * k, 11, false).into_iter().map(bf16::from_f32).collect();
    let xd = dev.stream().clone_htod(&x).unwrap();
    let m = DeviceMatrix::new(&xd, rows, k);
    // Poison and a given amax: nothing is read back, so the host does not wait.
    let opts = gpu::QuantizeOptions::default()
        .with_global_scale(GlobalScaleSource::Amax(4.0))
        .with_non_finite(NonFinite::Poison);
    let layouts = (ScaleLayout::Linear, DataLayout::RowMajor);
    let mut busy = DeviceQuantized::alloc(&dev, Scheme::NvFp4, rows, k, layouts.0, layouts.1).unwrap();
    let mut out = DeviceQuantized::alloc(&dev, Scheme::NvFp4, rows, k, layouts.0, layouts.1).unwrap();
    dev.synchronize().unwrap();
    for _ in 0..5 {
        gpu::quantize_into(&dev, m, &opts, &mut busy).unwrap();
    }
    gpu::quantize_into(&dev, m, &opts, &mut out).unwrap();
    let n = out.data().len();
    let mut tail = other.alloc_zeros::<u8>(256).unwrap();
    other.memcpy_dtod(&out.data().slice(n - 256..), &mut tail).unwrap();
    let seen = other.clone_dtoh(&tail).unwrap();
    let ordered = out.to_host(&dev).unwrap();
    assert!(seen == ordered.data()[n - 256..], "another stream read the codes before the kernel finished");
}

#[test]
fn callers_stream_without_event_tracking() {
    // Every buffer below is used on the device's one stream.
    let Some(dev) = callers_device() else { return };
    let (rows, k) = (33, 512);
    let x = Array2::from_shape_vec((rows, k), data(rows * k, 5, false)).unwrap().mapv(bf16::from_f32);
    for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3] {
        check_scheme(&dev, &x, scheme, "caller's stream");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let buf = dev.stream().alloc_zeros::<f32>(1000).unwrap();
    let opts = gpu::QuantizeOptions::default();
    let q = |m: DeviceMatrix<'_, f32>, s: Scheme| gpu::quantize(&dev, m, s, &opts).map(|_| ()).unwrap_err();
    assert!(matches!(q(DeviceMatrix::new(&buf, 2, 24), Scheme::NvFp4), gpu::CudaError::Format(_)));
    assert!(matches!(q(DeviceMatrix::new(&buf, 0, 32), Scheme::MxFp4), gpu::CudaError::Format(_)));
    assert!(matches!(q(DeviceMatrix::new(&buf, 10, 128), Scheme::MxFp4), gpu::CudaError::BufferLength { .. }));
    assert!(matches!(
        q(DeviceMatrix { data: &buf, rows: 2, k: 32, row_stride: 34 }, Scheme::MxFp4),
        gpu::CudaError::BadStride { .. }
    ));
    assert!(matches!(
        q(DeviceMatrix { data: &buf, rows: 2, k: 32, row_stride: 16 }, Scheme::MxFp4),
        gpu::CudaError::BadStride { .. }
    ));
    let swz = gpu::QuantizeOptions::default().with_scale_layout(ScaleLayout::Swizzled128x4);
    let e = gpu::quantize(&dev, DeviceMatrix::new(&buf, 2, 128), Scheme::Int4G32, &swz).unwrap_err();
    assert!(e.to_string().contains("ScaleLayout::Linear"), "{e}");
    // Beyond the kernels' 32-bit indices or tile grid: refused before any allocation.
    assert!(matches!(q(DeviceMatrix::new(&buf, 1 << 32, 32), Scheme::MxFp4), gpu::CudaError::TooLarge { .. }));
    let tiles = Scheme::Fp8Block(blockscale_formats::Fp8Tile::Tile128x128);
    assert!(matches!(q(DeviceMatrix::new(&buf, 65536 * 128, 128), tiles), gpu::CudaError::TooLarge { .. }));
    assert!(matches!(Device::new(99), Err(gpu::CudaError::NoDevice { ordinal: 99, .. })));
}

/// Every kernel once on a small matrix with a partial band, NaN/Inf and every layout:
/// what `run.sh sanitize` runs under compute-sanitizer (memcheck, racecheck).
#[test]
fn sanitizer_smoke() {
    let Some(dev) = device() else { return };
    let (rows, k) = (130, 256);
    let x = Array2::from_shape_vec((rows, k), data(rows * k, 17, true)).unwrap().mapv(bf16::from_f32);
    for scheme in Scheme::ALL {
        for opts in option_sets(scheme, k).into_iter().take(2) {
            let g = gpu::quantize_host(&dev, x.view(), scheme, &opts).unwrap();
            let c = cpu::quantize(x.view(), scheme, &cpu_opts(&opts)).unwrap();
            assert_same(&g, &c, &format!("sanitizer {scheme}"));
            let _ = gpu::dequantize_host::<bf16>(&dev, &g).unwrap();
        }
    }
    // The amax pass.
    let _ = gpu::quantize_host(
        &dev,
        x.view(),
        Scheme::NvFp4,
        &gpu::QuantizeOptions::default().with_non_finite(NonFinite::Poison),
    )
    .unwrap();
}
