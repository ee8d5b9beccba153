//! GPU GEMM throughput beside cuBLAS, measured in the same run: cuBLAS BF16 (through
//! cudarc's `CudaBlas`) and cuBLASLt FP8 with per-tensor scales and with DeepSeek's
//! blockwise scales (1x128 activations x 128x128 weights), each with the best of the
//! library's top heuristic algorithms. Every blockscale kernel prints its time, TFLOP/s
//! and its ratio to the anchors of the same shape.
//!
//! Run on a GPU machine: `gpu-bundle/run.sh bench` (the `cargo xtask bench --backend
//! cuda` flow), with cuBLAS on the library path. Operands are quantized from random
//! bf16 data on the device with swizzled scales (what quantize writes for NVFP4 and MX);
//! outputs are bf16. Times are CUDA-event medians (7 repetitions of 10 launches after
//! 3 warm-up launches). `BLOCKSCALE_BENCH_FILTER=text` keeps the cases whose label
//! contains `text`.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use blockscale_cuda::cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas};
use blockscale_cuda::cudarc::cublaslt::{result as lt, sys as ltsys};
use blockscale_cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use blockscale_cuda::{
    Device, DeviceEpilogue, DeviceMatrix, DeviceMatrixMut, DeviceQuantized, QuantizeOptions, gemm_into,
    gemm_weight_only_into, gemm_weight_only_workspace_size, gemm_workspace_size, quantize,
};
use blockscale_formats::{Fp8Tile, ScaleLayout, Scheme};
use common::time;
use half::bf16;

fn random_bf16(dev: &Device, len: usize, seed: u64) -> CudaSlice<bf16> {
    let mut s = seed;
    let host: Vec<bf16> = (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            bf16::from_f32(((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect();
    dev.stream().clone_htod(&host).unwrap()
}

fn random_u8(dev: &Device, len: usize, seed: u64) -> CudaSlice<u8> {
    let mut s = seed;
    // E4M3 codes with |x| <= 1 (no NaN): sign bit, exponent field below 8.
    let host: Vec<u8> = (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as u8) & 0xbf
        })
        .collect();
    dev.stream().clone_htod(&host).unwrap()
}

/// cuBLASLt FP8 (E4M3) GEMM `D (bf16, M x N row-major) = A (M x K) . B (N x K)^T`, with
/// per-tensor or DeepSeek blockwise scales. Holds its descriptors; `run` launches.
struct LtFp8 {
    handle: ltsys::cublasLtHandle_t,
    desc: ltsys::cublasLtMatmulDesc_t,
    layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    algos: Vec<ltsys::cublasLtMatmulAlgo_t>,
    workspace: CudaSlice<u8>,
}

impl LtFp8 {
    /// `None` when cuBLASLt has no algorithm for the mode on this GPU.
    #[allow(clippy::too_many_arguments)]
    fn new(
        stream: &Arc<CudaStream>,
        (m, n, k): (usize, usize, usize),
        blockwise: bool,
        sfa: u64,
        sfb: u64,
    ) -> Option<Self> {
        use ltsys::cublasLtMatmulDescAttributes_t as Attr;
        let handle = lt::create_handle().ok()?;
        let desc =
            lt::create_matmul_desc(ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F, ltsys::cudaDataType::CUDA_R_32F)
                .ok()?;
        // Column-major view: cuBLAS's A is our B (K x N, transposed), its B our A (K x M).
        let set = |attr: Attr, ptr: *const c_void, size: usize| {
            // SAFETY: `ptr` points at a live value of `size` bytes of the type `attr` takes.
            unsafe { lt::set_matmul_desc_attribute(desc, attr, ptr, size) }.ok()
        };
        let ta = blas::cublasOperation_t::CUBLAS_OP_T;
        let tb = blas::cublasOperation_t::CUBLAS_OP_N;
        set(Attr::CUBLASLT_MATMUL_DESC_TRANSA, (&raw const ta).cast(), size_of_val(&ta))?;
        set(Attr::CUBLASLT_MATMUL_DESC_TRANSB, (&raw const tb).cast(), size_of_val(&tb))?;
        if blockwise {
            let mode_a = ltsys::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F as i32;
            let mode_b = ltsys::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F as i32;
            set(Attr::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, (&raw const mode_a).cast(), 4)?;
            set(Attr::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, (&raw const mode_b).cast(), 4)?;
        }
        set(Attr::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, (&raw const sfb).cast(), 8)?;
        set(Attr::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, (&raw const sfa).cast(), 8)?;
        let e4m3 = ltsys::cudaDataType::CUDA_R_8F_E4M3;
        let la = lt::create_matrix_layout(e4m3, k as u64, n as u64, k as i64).ok()?;
        let lb = lt::create_matrix_layout(e4m3, k as u64, m as u64, k as i64).ok()?;
        let ld = lt::create_matrix_layout(ltsys::cudaDataType::CUDA_R_16BF, n as u64, m as u64, n as i64).ok()?;
        let pref = lt::create_matmul_pref().ok()?;
        let ws_bytes: usize = 64 << 20;
        // SAFETY: the attribute takes a u64 byte count, passed by pointer.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&raw const ws_bytes).cast(),
                8,
            )
        }
        .ok()?;
        // SAFETY: zeroed heuristic results are plain data; cuBLASLt fills `got` of them.
        let mut results: [ltsys::cublasLtMatmulHeuristicResult_t; 8] = unsafe { std::mem::zeroed() };
        let mut got = 0;
        // SAFETY: every descriptor is live; `results` holds 8 entries.
        let status = unsafe {
            ltsys::cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 8, results.as_mut_ptr(), &mut got)
        };
        // SAFETY: `pref` is live and no longer used.
        unsafe { lt::destroy_matmul_pref(pref) }.ok()?;
        if status != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || got == 0 {
            return None;
        }
        let algos = results[..got as usize].iter().map(|r| r.algo).collect();
        let workspace = stream.alloc_zeros::<u8>(ws_bytes).ok()?;
        Some(Self { handle, desc, layouts: [la, lb, ld], algos, workspace })
    }

    /// Launches algorithm `i` on `stream`.
    fn run(&mut self, stream: &Arc<CudaStream>, i: usize, a: u64, b: u64, d: u64) {
        let (one, zero) = (1f32, 0f32);
        let (ws, _guard) = self.workspace.device_ptr_mut(stream);
        let [la, lb, ld] = self.layouts;
        // SAFETY: the descriptors are live, the pointers are device buffers of the sizes
        // the layouts state, and the workspace holds the bytes the preference allowed.
        unsafe {
            lt::matmul(
                self.handle,
                self.desc,
                (&raw const one).cast(),
                (&raw const zero).cast(),
                b as *const c_void,
                la,
                a as *const c_void,
                lb,
                d as *const c_void,
                ld,
                d as *mut c_void,
                ld,
                &self.algos[i],
                ws as *mut c_void,
                64 << 20,
                stream.cu_stream() as ltsys::cudaStream_t,
            )
        }
        .unwrap();
    }

    /// The best median over the heuristic's algorithms.
    fn best(&mut self, stream: &Arc<CudaStream>, a: u64, b: u64, d: u64) -> f64 {
        (0..self.algos.len()).map(|i| time(stream, 10, || self.run(stream, i, a, b, d))).fold(f64::INFINITY, f64::min)
    }
}

impl Drop for LtFp8 {
    fn drop(&mut self) {
        // SAFETY: the handles were created by `new` and are destroyed once.
        unsafe {
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

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
    let cfg = GemmConfig {
        transa: blas::cublasOperation_t::CUBLAS_OP_T,
        transb: blas::cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha: bf16::ONE,
        lda: k as i32,
        ldb: k as i32,
        beta: bf16::ZERO,
        ldc: n as i32,
    };
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
    let dev = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no usable GPU: {e}");
            std::process::exit(1);
        }
    };
    let blas = match CudaBlas::new(dev.stream().clone()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cuBLAS cannot be loaded (is it on LD_LIBRARY_PATH?): {e}");
            std::process::exit(1);
        }
    };
    let filter = std::env::var("BLOCKSCALE_BENCH_FILTER").unwrap_or_default();
    println!("{} ({:?}, {} SMs)", dev.name(), dev.arch(), dev.sm_count());
    println!("GEMM, bf16 output; ratios are anchor time / blockscale time (above 1: faster than the anchor).");
    let shapes = [
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (4096, 7168, 2048),
        (128, 7168, 2048),
        (128, 4096, 4096),
        (512, 4096, 4096),
    ];
    let epi = DeviceEpilogue::default();
    for (m, n, k) in shapes {
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
        let pairs: [(&str, Scheme, Scheme); 5] = [
            ("nvfp4 x nvfp4", Scheme::NvFp4, Scheme::NvFp4),
            ("mxfp4 x mxfp4", Scheme::MxFp4, Scheme::MxFp4),
            ("mxfp8 x mxfp8", Scheme::MxFp8E4M3, Scheme::MxFp8E4M3),
            ("mxfp8 x mxfp6-e2m3", Scheme::MxFp8E4M3, Scheme::MxFp6E2M3),
            ("fp8-block 1x128 x 128x128", Scheme::Fp8Block(Fp8Tile::Row1x128), Scheme::Fp8Block(Fp8Tile::Tile128x128)),
        ];
        for (name, sa, sb) in pairs {
            let label = format!("{name} {shape}");
            if !label.contains(&filter) {
                continue;
            }
            let (a, b) = (quantized(&dev, m, k, sa, 3), quantized(&dev, n, k, sb, 4));
            // A pair this device's tier has no kernel for is reported, not timed.
            match gemm_workspace_size::<bf16>(&dev, &a, &b, n) {
                Ok(bytes) => dev.reserve_workspace(bytes).unwrap(),
                Err(e) => {
                    println!("| {name:<34} | n/a: {e}");
                    continue;
                }
            }
            let call = || gemm_into(&dev, &a, &b, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
            let t = time(dev.stream(), 10, call);
            row(name, flop, t, &an);
        }
        if n == 4096 && k == 4096 {
            let x = random_bf16(&dev, m * k, 5);
            for (name, scheme) in
                [("bf16 x nvfp4 (weight-only)", Scheme::NvFp4), ("bf16 x int4-g32 (weight-only)", Scheme::Int4G32)]
            {
                let label = format!("{name} {shape}");
                if !label.contains(&filter) {
                    continue;
                }
                let w = quantized(&dev, n, k, scheme, 6);
                let xm = DeviceMatrix::new(&x, m, k);
                match gemm_weight_only_workspace_size::<bf16, bf16>(&dev, xm, &w, n) {
                    Ok(bytes) => dev.reserve_workspace(bytes).unwrap(),
                    Err(e) => {
                        println!("| {name:<34} | n/a: {e}");
                        continue;
                    }
                }
                let call = || gemm_weight_only_into(&dev, xm, &w, &epi, DeviceMatrixMut::new(&mut d, m, n)).unwrap();
                let t = time(dev.stream(), 10, call);
                row(name, flop, t, &an);
            }
        }
    }
}
