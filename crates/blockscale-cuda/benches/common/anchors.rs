//! The anchors' side of the GPU benches: random device data and a cuBLASLt FP8 GEMM
//! (per-tensor or DeepSeek blockwise scales) driven through cudarc's raw bindings.
//! Not every bench uses every item.
#![allow(dead_code)]

use std::ffi::c_void;
use std::sync::Arc;

use blockscale_cuda::Device;
use blockscale_cuda::cudarc::cublas::{CudaBlas, GemmConfig, sys as blas};
use blockscale_cuda::cudarc::cublaslt::{result as lt, sys as ltsys};
use blockscale_cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, DeviceRepr};
use half::{bf16, f16};

use super::time;

/// `len` seeded values uniform in [-1, 1), converted by `from_f32`, on the device.
fn random_values<T: DeviceRepr>(dev: &Device, len: usize, seed: u64, from_f32: fn(f32) -> T) -> CudaSlice<T> {
    let mut rng = blockscale_formats::rng::SplitMix64::new(seed);
    let host: Vec<T> = (0..len).map(|_| from_f32(rng.uniform_f32(-1.0, 1.0))).collect();
    dev.stream().clone_htod(&host).unwrap()
}

pub fn random_bf16(dev: &Device, len: usize, seed: u64) -> CudaSlice<bf16> {
    random_values(dev, len, seed, bf16::from_f32)
}

pub fn random_f16(dev: &Device, len: usize, seed: u64) -> CudaSlice<f16> {
    random_values(dev, len, seed, f16::from_f32)
}

pub fn random_u8(dev: &Device, len: usize, seed: u64) -> CudaSlice<u8> {
    let mut rng = blockscale_formats::rng::SplitMix64::new(seed);
    // E4M3 codes with |x| <= 1 (no NaN): sign bit, exponent field below 8.
    let host: Vec<u8> = (0..len).map(|_| ((rng.next_u64() >> 33) as u8) & 0xbf).collect();
    dev.stream().clone_htod(&host).unwrap()
}

/// cuBLASLt FP8 (E4M3) GEMM `D (bf16, M x N row-major) = A (M x K) . B (N x K)^T`, with
/// per-tensor or DeepSeek blockwise scales. Holds its descriptors; `run` launches.
pub struct LtFp8 {
    handle: ltsys::cublasLtHandle_t,
    desc: ltsys::cublasLtMatmulDesc_t,
    layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    algos: Vec<ltsys::cublasLtMatmulAlgo_t>,
    workspace: CudaSlice<u8>,
}

impl LtFp8 {
    /// `None` when cuBLASLt has no algorithm for the mode on this GPU.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
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

    /// How many algorithms the heuristic offered.
    pub fn algorithms(&self) -> usize {
        self.algos.len()
    }

    /// Launches algorithm `i` on `stream`.
    pub fn run(&mut self, stream: &Arc<CudaStream>, i: usize, a: u64, b: u64, d: u64) {
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
    pub fn best(&mut self, stream: &Arc<CudaStream>, a: u64, b: u64, d: u64) -> f64 {
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

/// The first GPU and cuBLAS on its stream, or the process exits saying why.
pub fn device_and_blas() -> (Device, CudaBlas) {
    let dev = super::device_or_exit();
    match CudaBlas::new(dev.stream().clone()) {
        Ok(b) => (dev, b),
        Err(e) => {
            eprintln!("cuBLAS cannot be loaded (is it on LD_LIBRARY_PATH?): {e}");
            std::process::exit(1);
        }
    }
}

/// cuBLAS's configuration for row-major `D (M x N) = A (M x K) . B (N x K)^T` in bf16:
/// column-major `D^T = B^T-as-stored (op T) . A`, so call `gemm(cfg, b, a, d)`.
pub fn bf16_gemm_config((m, n, k): (usize, usize, usize)) -> GemmConfig<bf16> {
    GemmConfig {
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
    }
}
