//! The host-to-host pipeline (`HostPipeline`, `quantize_host_into`,
//! `dequantize_host_into`) against the CPU backend: identical bytes for every scheme,
//! option set and input type on ragged shapes cut into many chunks (staging sizes from
//! one row to a few tiles), every output byte written, strided and non-contiguous
//! inputs, one pipeline reused across shapes and types, the NaN/Inf errors at the CPU's
//! row and column (in the first chunk, a later one, the last), the typed errors, and a
//! caller's stream without cudarc's event tracking.
//!
//! Needs a GPU of compute capability 9.0 or 12.x. Without one every test prints why and
//! passes, unless BLOCKSCALE_REQUIRE_GPU=1.

mod common;

use blockscale_cpu as cpu;
use blockscale_cuda::{
    self as gpu, CudaError, Device, DeviceElement, HostPipeline, dequantize_host_into, dequantize_host_with,
    quantize_host_into, quantize_host_with,
};
use blockscale_formats::{GlobalScale, GlobalScaleSource, NonFinite, QuantRequest, QuantizedMatrix, Scheme};
use common::device;
use common::quant::{assert_same, callers_device, cpu_opts, data, option_sets};
use half::{bf16, f16};
use ndarray::{Array2, ArrayView2, s};

/// Quantizes `x` through `pipe` with every option set of `scheme`, into buffers filled
/// with a poison byte first (so an unwritten byte shows), and dequantizes the CPU's
/// result through it to every output type; all against the CPU.
fn check<T: DeviceElement + cpu::Input>(
    dev: &Device,
    pipe: &mut HostPipeline,
    x: ArrayView2<'_, T>,
    scheme: Scheme,
    what: &str,
) {
    let (rows, k) = x.dim();
    for opts in option_sets(scheme, k) {
        let label = format!("{what} {rows}x{k} chunk {} {scheme} {opts:?}", pipe.chunk_bytes());
        let c = cpu::quantize(x, scheme, &cpu_opts(&opts)).unwrap();
        let g = quantize_host_with(dev, pipe, x, scheme, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_same(&g, &c, &label);

        let request = QuantRequest::new(scheme, rows, k, &opts).unwrap();
        let mut codes = vec![0xa5u8; request.shape().data_bytes];
        let mut scales = vec![0xa5u8; request.scale_bytes()];
        let global = quantize_host_into(dev, pipe, x, scheme, &opts, &mut codes, &mut scales).unwrap();
        let (mut want_codes, mut want_scales) = (vec![0u8; codes.len()], vec![0u8; scales.len()]);
        let want_global = cpu::quantize_into(x, scheme, &cpu_opts(&opts), &mut want_codes, &mut want_scales).unwrap();
        assert!(codes == want_codes, "{label}: codes written into the caller's buffer");
        assert!(scales == want_scales, "{label}: scales written into the caller's buffer");
        assert_eq!(global, want_global, "{label}: global scale");

        dequantized::<f32>(dev, pipe, &c, &label);
        dequantized::<bf16>(dev, pipe, &c, &label);
        dequantized::<f16>(dev, pipe, &c, &label);
    }
}

/// `q` dequantized through the pipeline to `O`, into a NaN-poisoned buffer, against the
/// CPU, bit for bit.
fn dequantized<O: DeviceElement + cpu::Source>(dev: &Device, pipe: &mut HostPipeline, q: &QuantizedMatrix, what: &str) {
    let want = cpu::dequantize::<O>(q);
    let mut out = vec![O::from_f32(f32::NAN); q.rows() * q.k()];
    dequantize_host_into(dev, pipe, q, &mut out).unwrap_or_else(|e| panic!("{what}: {e}"));
    if let Some(i) =
        out.iter().zip(want.iter()).position(|(a, b)| a.to_f32_exact().to_bits() != b.to_f32_exact().to_bits())
    {
        panic!(
            "{what}: {} dequantized value ({}, {}): GPU {:?} CPU {:?}",
            O::KIND.name(),
            i / q.k(),
            i % q.k(),
            out[i],
            want.as_slice().unwrap()[i]
        );
    }
}

#[test]
fn every_scheme_matches_the_cpu_across_chunks() {
    let Some(dev) = device() else { return };
    // Ragged shapes (rows not a multiple of 128, K of 2 and 3 128-blocks) and staging
    // sizes from one row per chunk (row tiles where the layout needs them) to a few
    // tiles: every shape goes through in several chunks, the last one partial.
    for (rows, k, chunk, seed) in [(300, 256, 1, 1u64), (389, 384, 100_000, 2), (1, 128, 1, 3), (130, 256, 40_000, 4)] {
        let mut pipe = HostPipeline::with_chunk_bytes(&dev, chunk).unwrap();
        let x32 = Array2::from_shape_vec((rows, k), data(rows * k, seed, true)).unwrap();
        let xb = x32.mapv(bf16::from_f32);
        let xh = x32.mapv(f16::from_f32);
        for scheme in Scheme::ALL {
            check(&dev, &mut pipe, x32.view(), scheme, "f32");
            check(&dev, &mut pipe, xb.view(), scheme, "bf16");
            check(&dev, &mut pipe, xh.view(), scheme, "f16");
        }
    }
}

#[test]
fn one_pipeline_serves_many_shapes_and_types() {
    let Some(dev) = device() else { return };
    // Default staging; shapes that grow, shrink and grow again, so buffers are reused
    // at the wrong size for the last call as often as they are grown.
    let mut pipe = HostPipeline::new(&dev).unwrap();
    for (i, (rows, k)) in [(64, 4096), (1000, 1024), (3, 512), (2048, 2048), (129, 4096)].into_iter().enumerate() {
        let x = Array2::from_shape_vec((rows, k), data(rows * k, 20 + i as u64, i % 2 == 1)).unwrap();
        for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3, Scheme::Fp8Block(blockscale_formats::Fp8Tile::Tile128x128)] {
            if i % 2 == 0 {
                check(&dev, &mut pipe, x.mapv(bf16::from_f32).view(), scheme, "reused bf16");
            } else {
                check(&dev, &mut pipe, x.view(), scheme, "reused f32");
            }
        }
    }
    assert!(pipe.pinned_bytes() > 0);
}

#[test]
fn strided_and_non_contiguous_inputs() {
    let Some(dev) = device() else { return };
    let mut pipe = HostPipeline::with_chunk_bytes(&dev, 20_000).unwrap();
    let (rows, k) = (260, 256);
    let wide = Array2::from_shape_vec((rows, k + 64), data(rows * (k + 64), 31, false)).unwrap().mapv(bf16::from_f32);
    // Contiguous rows at a row stride of k + 64.
    let strided = wide.slice(s![.., 16..16 + k]);
    // Columns not contiguous: the transpose of a k x rows array.
    let tall = Array2::from_shape_vec((k, rows), data(rows * k, 32, false)).unwrap().mapv(bf16::from_f32);
    let transposed = tall.t();
    for scheme in Scheme::ALL {
        check(&dev, &mut pipe, strided, scheme, "strided");
        check(&dev, &mut pipe, transposed, scheme, "transposed");
    }
}

#[test]
fn non_finite_errors_match_the_cpu() {
    let Some(dev) = device() else { return };
    // 8 KiB chunks of f32 rows of 256: 8 rows per chunk (one tile where tiles are
    // needed), so the three positions sit in the first, a middle and the last chunk.
    let mut pipe = HostPipeline::with_chunk_bytes(&dev, 8 << 10).unwrap();
    let (rows, k) = (300, 256);
    let given = GlobalScaleSource::Given(GlobalScale::from_amax(6.0).unwrap());
    for scheme in Scheme::ALL {
        let sources: &[GlobalScaleSource] = if scheme == Scheme::NvFp4 {
            &[GlobalScaleSource::TensorAmax, given]
        } else {
            &[GlobalScaleSource::TensorAmax]
        };
        for &source in sources {
            for (r, c) in [(0usize, 0usize), (129, 77), (299, 255)] {
                let mut x = Array2::<f32>::from_shape_fn((rows, k), |(i, j)| ((i * 7 + j) % 11) as f32 - 5.0);
                x[(r, c)] = f32::NAN;
                x[(299, 0)] = f32::INFINITY;
                let opts = gpu::QuantizeOptions::default().with_global_scale(source);
                let g = quantize_host_with(&dev, &mut pipe, x.view(), scheme, &opts).unwrap_err();
                let want = cpu::quantize(x.view(), scheme, &cpu_opts(&opts)).unwrap_err();
                match (g, want) {
                    (
                        CudaError::NonFinite { row, col, value },
                        cpu::CpuError::NonFinite { row: wr, col: wc, value: wv },
                    ) => assert_eq!((row, col, value.to_bits()), (wr, wc, wv.to_bits()), "{scheme} {source:?}"),
                    (g, c) => panic!("{scheme} {source:?}: GPU {g} / CPU {c}"),
                }
                // The pipeline is usable after the error.
                let clean = Array2::<f32>::from_shape_fn((rows, k), |(i, j)| ((i + j) % 5) as f32);
                let q = quantize_host_with(&dev, &mut pipe, clean.view(), scheme, &opts).unwrap();
                assert_same(&q, &cpu::quantize(clean.view(), scheme, &cpu_opts(&opts)).unwrap(), "after an error");
            }
        }
    }
}

#[test]
fn bad_arguments_are_typed_errors() {
    let Some(dev) = device() else { return };
    let mut pipe = HostPipeline::new(&dev).unwrap();
    let x = Array2::<f32>::zeros((4, 64));
    let opts = gpu::QuantizeOptions::default();
    let (mut codes, mut scales) = (vec![0u8; 4 * 32], vec![0u8; 4 * 4]);
    let e = quantize_host_into(&dev, &mut pipe, x.view(), Scheme::NvFp4, &opts, &mut codes[1..], &mut scales);
    assert!(matches!(e, Err(CudaError::BufferLength { expected: 128, actual: 127, .. })), "{e:?}");
    let e = quantize_host_into(&dev, &mut pipe, x.view(), Scheme::NvFp4, &opts, &mut codes, &mut scales[..3]);
    assert!(matches!(e, Err(CudaError::BufferLength { expected: 16, actual: 3, .. })), "{e:?}");
    let odd = Array2::<f32>::zeros((4, 24));
    let e = quantize_host_with(&dev, &mut pipe, odd.view(), Scheme::NvFp4, &opts);
    assert!(matches!(e, Err(CudaError::Format(_))), "{e:?}");
    let q = quantize_host_with(&dev, &mut pipe, x.view(), Scheme::NvFp4, &opts).unwrap();
    let mut out = vec![0f32; 255];
    let e = dequantize_host_into(&dev, &mut pipe, &q, &mut out);
    assert!(matches!(e, Err(CudaError::BufferLength { expected: 256, actual: 255, .. })), "{e:?}");
    // A pipeline belongs to the device (stream) it was made for.
    let other = Device::new(0).unwrap();
    let e = dequantize_host_with::<f32>(&other, &mut pipe, &q);
    assert!(matches!(e, Err(CudaError::ForeignPipeline)), "{e:?}");
}

#[test]
fn callers_stream_without_event_tracking() {
    // Every buffer is used on the device's stream or, in the pipeline, ordered by the
    // pipeline's own events across its two streams.
    let Some(dev) = callers_device() else { return };
    let mut pipe = HostPipeline::with_chunk_bytes(&dev, 64 << 10).unwrap();
    let (rows, k) = (1000, 1024);
    let x = Array2::from_shape_vec((rows, k), data(rows * k, 5, false)).unwrap().mapv(bf16::from_f32);
    for scheme in [Scheme::NvFp4, Scheme::MxFp8E4M3, Scheme::Int4G32] {
        check(&dev, &mut pipe, x.view(), scheme, "caller's stream");
    }
}

/// The pipeline's kernels and copies once each, small, with NaN/Inf: what `run.sh
/// sanitize` runs under compute-sanitizer.
#[test]
fn pipeline_sanitizer_smoke() {
    let Some(dev) = device() else { return };
    let mut pipe = HostPipeline::with_chunk_bytes(&dev, 1).unwrap();
    let (rows, k) = (260, 256);
    let x = Array2::from_shape_vec((rows, k), data(rows * k, 41, true)).unwrap().mapv(bf16::from_f32);
    for scheme in Scheme::ALL {
        for opts in option_sets(scheme, k).into_iter().take(2) {
            let c = cpu::quantize(x.view(), scheme, &cpu_opts(&opts)).unwrap();
            let g = quantize_host_with(&dev, &mut pipe, x.view(), scheme, &opts).unwrap();
            assert_same(&g, &c, &format!("sanitizer {scheme}"));
            dequantized::<bf16>(&dev, &mut pipe, &c, "sanitizer");
        }
    }
    let tensor_amax = gpu::QuantizeOptions::default().with_non_finite(NonFinite::Poison);
    let _ = quantize_host_with(&dev, &mut pipe, x.view(), Scheme::NvFp4, &tensor_amax).unwrap();
}
