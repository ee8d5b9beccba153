//! Block-scaled GEMM on the device: `D = act(alpha * A . B^T + bias)`, both operands
//! K-major, the same products as blockscale-cpu's `gemm` and `gemm_weight_only`.
//!
//! On Hopper (sm_90a) two kernel families do the work (docs/KERNELS.md has the details
//! and the error bounds):
//!
//! - **BF16 tensor cores** for NVFP4 and MX pairs and for weight-only products: every
//!   element times its block scale is exact in bf16 for NVFP4 and MX, so the dequantize
//!   kernels write both operands as bf16 into the device's workspace and a CUTLASS
//!   warp-specialized BF16 GEMM multiplies them with f32 accumulation. Weight-only
//!   activations are used in place when they are bf16 with an aligned row stride;
//!   f16 and f32 activations are split into two or three bf16 pieces whose sum is the
//!   activation exactly (K grows by that factor). INT4-G32 and FP8-block weights are
//!   rounded once to bf16 (their element times scale has more than 8 bits).
//! - **FP8 blockwise tensor cores** for FP8 block operands (1x128 or 128x128 activations
//!   x 128x128 weights): up to M = 128 blockscale's own warp-specialized `wgmma` kernel
//!   (`fgemm.rs`, `kernels/gemm/fgemm.cu`: TMA, K split across a cluster or weight tiles
//!   multicast to pairs of activation tiles), above it
//!   CUTLASS's blockwise-scaled FP8 GEMM; both promote each 128-K partial sum into f32
//!   with both scales.
//!
//! Both fuse the epilogue (alpha, per-column bias, activation) and write bf16, f16 or
//! f32. The kernels' TMA epilogue needs 16-byte output rows: an N that is not a multiple
//! of 8 is computed as the next multiple with zero rows of B, and such outputs, like
//! those whose row stride or address is not 16-byte aligned, are written to the
//! workspace and copied.
//!
//! On SM120 (sm_120a, compute capability 12.x) the tensor cores take the block scales
//! themselves: one CUTLASS kernel per pair reads both operands and their swizzled scales
//! in place (NVFP4, MXFP4, MXFP8 E4M3 or E5M2, MXFP8 E4M3 x MXFP6 E2M3, FP8 block), bf16
//! output; what that tier has no kernel for is [`CudaError::NoGemmKernel`] (`sm120.rs`).

mod fgemm;
mod prepare;
mod prepared;
mod sm120;

pub use prepared::{
    gemm_prepared, gemm_prepared_host, gemm_prepared_into, gemm_prepared_workspace_size, gemm_weight_only_prepared,
    gemm_weight_only_prepared_host, gemm_weight_only_prepared_into, gemm_weight_only_prepared_workspace_size,
};

use std::ffi::c_int;
use std::sync::OnceLock;

use blockscale_formats::{Epilogue, Fp8Tile, QuantizedMatrix, Scheme};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use ndarray::{Array2, ArrayView2};

use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::cutlass::{BsGemmArgs, Family, OutKind, Shim};
use crate::quantize::DeviceMatrix;
use crate::{Arch, CudaError, Device};

/// A row-major matrix in device memory that a GEMM writes: `rows x cols` elements, row
/// `r` starting at element `r * row_stride` of `data`.
#[derive(Debug)]
pub struct DeviceMatrixMut<'a, T> {
    /// The elements.
    pub data: &'a mut CudaSlice<T>,
    /// Rows (M).
    pub rows: usize,
    /// Columns (N).
    pub cols: usize,
    /// Elements from one row's start to the next's (at least `cols`).
    pub row_stride: usize,
}

impl<'a, T> DeviceMatrixMut<'a, T> {
    /// A contiguous `rows x cols` matrix.
    pub fn new(data: &'a mut CudaSlice<T>, rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, row_stride: cols }
    }
}

/// The epilogue of the device GEMMs: alpha, a per-column bias in device memory (N f32
/// values) and an activation. `Epilogue::default()` resolves alpha from the operands'
/// NVFP4 per-tensor scales, as on the CPU.
pub type DeviceEpilogue<'a> = Epilogue<'a, CudaSlice<f32>>;

/// The left operand of a GEMM: a quantized matrix, or bf16 / f16 / f32 activations.
pub(crate) enum Lhs<'a, I> {
    Quantized(&'a DeviceQuantized),
    Activations(DeviceMatrix<'a, I>),
}

impl<I> Lhs<'_, I> {
    fn rows_k(&self) -> (usize, usize) {
        match self {
            Self::Quantized(a) => (a.shape().rows, a.shape().k),
            Self::Activations(x) => (x.rows, x.k),
        }
    }
}

/// Where an operand comes from once prepared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Source {
    /// The operand's own buffer, with this row stride (elements).
    InPlace(usize),
    /// Written into the workspace at this offset.
    Workspace(usize),
}

/// The GEMM to run, decided from the operands before anything is queued.
struct Plan {
    family: Family,
    config: c_int,
    m: usize,
    /// N as the kernel sees it: rounded up to 8, since the TMA epilogue needs rows of a
    /// 16-byte multiple. Columns from `n` on are computed from zero rows of B and dropped.
    n_gemm: usize,
    k: usize,
    /// bf16 pieces per activation (K of the bf16 GEMM is `pieces * k`).
    pieces: usize,
    a: Source,
    b: Source,
    /// FP8: A's scales (in place when already in the layout the configuration reads).
    sfa: Option<Source>,
    sfa_mn_major: bool,
    /// The staged output's offset and row stride, when the caller's cannot be used.
    staged: Option<(usize, usize)>,
    /// Where the bias is copied and padded to `n_gemm` values, when `n_gemm > n`.
    bias_ws: Option<usize>,
    /// The tile scheduler's swizzle (CTAs that walk the grid together).
    swizzle: c_int,
    cutlass_ws: usize,
    total: usize,
}

/// Tuning overrides for benchmarks: `BLOCKSCALE_GEMM_CONFIG` (0 large tiles, 1 small),
/// `BLOCKSCALE_GEMM_RASTER` (0 heuristic, 1 along M, 2 along N), `BLOCKSCALE_GEMM_SWIZZLE`.
fn tuning() -> (Option<c_int>, c_int, Option<c_int>) {
    static T: OnceLock<(Option<c_int>, c_int, Option<c_int>)> = OnceLock::new();
    *T.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<c_int>().ok());
        (var("BLOCKSCALE_GEMM_CONFIG"), var("BLOCKSCALE_GEMM_RASTER").unwrap_or(0), var("BLOCKSCALE_GEMM_SWIZZLE"))
    })
}

fn out_kind<O: DeviceElement>() -> OutKind {
    match O::SUFFIX {
        "bf16" => OutKind::Bf16,
        "f16" => OutKind::F16,
        _ => OutKind::F32,
    }
}

/// The shim of a family for output `O`, or the typed error for a combination without one.
fn shim_for<O: DeviceElement>(arch: Arch, family: Family) -> Result<Shim, CudaError> {
    Shim::of(family, out_kind::<O>())
        .ok_or(CudaError::NoGemmKernel { arch, what: "f16 or f32 output (the SM120 kernels write bf16)" })
}

const fn align256(x: usize) -> usize {
    x.div_ceil(256) * 256
}

/// Checks the epilogue against N and returns alpha.
fn check_epilogue(epilogue: &DeviceEpilogue<'_>, alpha: f32, n: usize) -> Result<f32, CudaError> {
    if let Some(bias) = epilogue.bias
        && bias.len() != n
    {
        return Err(CudaError::BiasLength { expected: n, actual: bias.len() });
    }
    if !alpha.is_finite() {
        return Err(CudaError::InvalidAlpha(alpha));
    }
    Ok(alpha)
}

/// Checks the output's shape, stride and length (its alignment only decides staging).
pub(crate) fn check_output<O>(out: &DeviceMatrixMut<'_, O>, m: usize, n: usize) -> Result<(), CudaError> {
    if out.rows != m || out.cols != n {
        return Err(CudaError::OutputShape { rows: out.rows, cols: out.cols, m, n });
    }
    if out.row_stride < n {
        return Err(CudaError::StrideTooSmall { what: "output", row_stride: out.row_stride, width: n });
    }
    let needed = (m - 1) * out.row_stride + n;
    if out.data.len() < needed {
        return Err(CudaError::BufferLength { what: "output", expected: needed, actual: out.data.len() });
    }
    Ok(())
}

/// The sizes CUTLASS takes are `int`.
fn check_int(m: usize, n: usize, k: usize) -> Result<(), CudaError> {
    let limit = i32::MAX as usize;
    if m > limit || n > limit || k > limit / 3 {
        return Err(CudaError::TooLarge {
            rows: m.max(n),
            k,
            limit: "M and N must be below 2^31 and K below 2^31 / 3",
        });
    }
    Ok(())
}

/// The weights (B) of a GEMM: a quantized matrix in its checkpoint layout, or prepared
/// weights (weight-only products at large M: dequantized to bf16 in the workspace).
#[derive(Clone, Copy)]
pub(crate) enum Rhs<'a> {
    Quantized(&'a DeviceQuantized),
    Prepared(&'a crate::prepared::Fast),
}

impl Rhs<'_> {
    fn rows_k(&self) -> (usize, usize) {
        match self {
            Self::Quantized(b) => (b.shape().rows, b.shape().k),
            Self::Prepared(f) => (f.rows, f.k),
        }
    }

    fn scheme(&self) -> Scheme {
        match self {
            Self::Quantized(b) => b.scheme(),
            Self::Prepared(f) => f.scheme,
        }
    }
}

impl Plan {
    /// Decides the kernel, the preparation and the workspace layout.
    fn new<I: DeviceElement, O: DeviceElement>(
        dev: &Device,
        lhs: &Lhs<'_, I>,
        b: Rhs<'_>,
        out_aligned: bool,
    ) -> Result<Self, CudaError> {
        if dev.arch() == Arch::Sm120 {
            let Rhs::Quantized(b) = b else { return Err(sm120::weight_only()) };
            return Self::new_sm120::<I, O>(dev, lhs, b, out_aligned);
        }
        let (n, k) = b.rows_k();
        let (m, lhs_k) = lhs.rows_k();
        if lhs_k != k {
            return Err(CudaError::KMismatch { a: lhs_k, b: k });
        }
        check_int(m, n, k)?;
        let n_gemm = n.next_multiple_of(8);
        let padded = n_gemm != n;
        let (override_config, _, override_swizzle) = tuning();
        let mut offset = 0usize;
        let mut take = |bytes: usize| {
            let at = offset;
            offset += align256(bytes);
            at
        };

        // FP8 block activations x 128x128 weights: the blockwise FP8 kernel.
        let fp8_a = match lhs {
            Lhs::Quantized(a) => matches!(a.scheme(), Scheme::Fp8Block(_)),
            Lhs::Activations(_) => false,
        };
        let fp8 = fp8_a && b.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128);
        let (family, pieces, a, b_src, sfa, sfa_mn_major, config) = if fp8 {
            let tiles = matches!(lhs, Lhs::Quantized(a) if a.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128));
            // Small M: 64 x 128 ping-pong tiles reading K-major scales; else 128 x 128
            // cooperative tiles reading M-major ones (docs/KERNELS.md, "GEMM tiles"),
            // which CUTLASS loads 16 bytes at a time: M must be a multiple of 4.
            let config = override_config.unwrap_or(if m <= 128 || !m.is_multiple_of(4) { 1 } else { 0 });
            let mn_major = config == 0;
            let sfa =
                if !tiles && !mn_major { Source::InPlace(k / 128) } else { Source::Workspace(take(m * (k / 128) * 4)) };
            // Ragged N: B is copied with zero rows up to n_gemm (its 128x128 tile scales
            // already cover them).
            let b_src = if padded { Source::Workspace(take(n_gemm * k)) } else { Source::InPlace(k) };
            (Family::Fp8Block, 1, Source::InPlace(k), b_src, Some(sfa), mn_major, config)
        } else {
            let (a_src, pieces) = match lhs {
                Lhs::Quantized(_) => (Source::Workspace(take(m * k * 2)), 1),
                Lhs::Activations(x) => {
                    let pieces = match I::SUFFIX {
                        "bf16" => 1,
                        "f16" => 2,
                        _ => 3,
                    };
                    // In place when TMA can read it: bf16 rows 16-byte aligned (cudarc's
                    // allocations are 256-byte aligned).
                    if pieces == 1 && (x.row_stride * size_of::<I>()).is_multiple_of(16) {
                        (Source::InPlace(x.row_stride), 1)
                    } else {
                        (Source::Workspace(take(m * k * pieces * 2)), pieces)
                    }
                }
            };
            let b_src = Source::Workspace(take(n_gemm * k * pieces * 2));
            // Large tiles (128 x 256) when they fill the GPU once, else 128 x 128.
            let large_tiles = m.div_ceil(128) * n.div_ceil(256);
            let config = override_config.unwrap_or(if large_tiles >= dev.sm_count() as usize { 0 } else { 1 });
            (Family::Bf16, pieces, a_src, b_src, None, false, config)
        };
        // Grids of many waves reuse operands in L2 better when CTAs walk it in groups:
        // measured on the H100 at 8192^3 (docs/KERNELS.md, "GEMM tiles"): FP8 +12% with
        // groups of 4, BF16 +10% with 2; at 4096^3 grouping lost 1-3%.
        let sms = dev.sm_count() as usize;
        let swizzle = override_swizzle.unwrap_or(match family {
            Family::Fp8Block if config == 0 && m.div_ceil(128) * n_gemm.div_ceil(128) >= 16 * sms => 4,
            Family::Bf16 if config == 0 && m.div_ceil(128) * n_gemm.div_ceil(256) >= 8 * sms => 2,
            _ => 1,
        });
        let elem = size_of::<O>();
        let staged = if out_aligned && !padded { None } else { Some((take(m * n_gemm * elem), n_gemm)) };
        let bias_ws = padded.then(|| take(n_gemm * 4));
        let cutlass_at = offset;
        let plan = Self {
            family,
            config,
            m,
            n_gemm,
            k,
            pieces,
            a,
            b: b_src,
            sfa,
            sfa_mn_major,
            staged,
            bias_ws,
            swizzle,
            cutlass_ws: cutlass_at,
            total: cutlass_at,
        };
        plan.with_cutlass_workspace::<O>(dev)
    }

    /// The sm_120a plan: both operands read in place (B copied with zero rows only when
    /// N is not a multiple of what the kernel computes), the scales in place.
    fn new_sm120<I: DeviceElement, O: DeviceElement>(
        dev: &Device,
        lhs: &Lhs<'_, I>,
        b: &DeviceQuantized,
        out_aligned: bool,
    ) -> Result<Self, CudaError> {
        let Lhs::Quantized(a) = lhs else { return Err(sm120::weight_only()) };
        let (m, n, k) = (a.shape().rows, b.shape().rows, b.shape().k);
        check_int(m, n, k)?;
        let operand =
            |q: &DeviceQuantized| sm120::Operand { scheme: q.scheme(), k: q.shape().k, scales: q.scale_layout() };
        let kind = sm120::check(operand(a), operand(b), out_kind::<O>())?;
        let n_gemm = n.next_multiple_of(sm120::n_multiple(kind));
        let padded = n_gemm != n;
        let mut offset = 0usize;
        let mut take = |bytes: usize| {
            let at = offset;
            offset += align256(bytes);
            at
        };
        let b_src =
            if padded { Source::Workspace(take(n_gemm * sm120::row_bytes(kind, k))) } else { Source::InPlace(k) };
        // FP8 activations with 128 x 128 tiles: their scales are expanded to one per row.
        let sfa = if a.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128) {
            Source::Workspace(take(m * (k / 128) * 4))
        } else {
            Source::InPlace(0)
        };
        let staged = if out_aligned && !padded { None } else { Some((take(m * n_gemm * size_of::<O>()), n_gemm)) };
        let bias_ws = padded.then(|| take(n_gemm * 4));
        let plan = Self {
            family: Family::Sm120(kind),
            config: 0,
            m,
            n_gemm,
            k,
            pieces: 1,
            a: Source::InPlace(k),
            b: b_src,
            sfa: Some(sfa),
            sfa_mn_major: false,
            staged,
            bias_ws,
            swizzle: tuning().2.unwrap_or(1),
            cutlass_ws: offset,
            total: offset,
        };
        plan.with_cutlass_workspace::<O>(dev)
    }

    /// Asks the shim whether it can run this plan and how much workspace CUTLASS needs
    /// (its tile scheduler's), and adds that to the total.
    fn with_cutlass_workspace<O: DeviceElement>(mut self, dev: &Device) -> Result<Self, CudaError> {
        // Placeholder addresses: the query reads sizes and strides only.
        let args = self.args(&Addresses::default(), 1.0, 0, dev.sm_count());
        let need = shim_for::<O>(dev.arch(), self.family)?.workspace(&args)?;
        self.total = self.cutlass_ws + align256(need as usize);
        Ok(self)
    }

    /// The shim's arguments for these buffer addresses.
    fn args(&self, at: &Addresses, alpha: f32, activation: c_int, sms: u32) -> BsGemmArgs {
        let k = self.pieces * self.k;
        let place = |s: Source, own: u64| match s {
            Source::InPlace(ld) => (own, ld as i64),
            Source::Workspace(o) => (at.ws + o as u64, k as i64),
        };
        let (a, lda) = place(self.a, at.a);
        let (b, ldb) = place(self.b, at.b);
        let sfa = self.sfa.map_or(0, |s| place(s, at.sfa).0);
        let (d, ldd) = match self.staged {
            Some((o, ld)) => (at.ws + o as u64, ld),
            None => (at.d, at.ldd),
        };
        let bias = match self.bias_ws {
            Some(o) if at.bias != 0 => at.ws + o as u64,
            _ => at.bias,
        };
        let (_, raster, _) = tuning();
        BsGemmArgs {
            a,
            b,
            sfa,
            sfb: at.sfb,
            d,
            bias,
            workspace: at.ws + self.cutlass_ws as u64,
            workspace_bytes: (self.total - self.cutlass_ws) as u64,
            lda,
            ldb,
            ldd: ldd as i64,
            m: self.m as c_int,
            n: self.n_gemm as c_int,
            k: k as c_int,
            sm_count: sms as c_int,
            alpha,
            activation,
            config: self.config,
            sfa_mn_major: self.sfa_mn_major as c_int,
            raster,
            swizzle: self.swizzle,
        }
    }
}

/// The device addresses a GEMM reads and writes (0 where unused).
#[derive(Default)]
struct Addresses {
    ws: u64,
    a: u64,
    b: u64,
    sfa: u64,
    sfb: u64,
    d: u64,
    ldd: usize,
    bias: u64,
}

pub(crate) fn activation_code(a: blockscale_formats::Activation) -> c_int {
    use blockscale_formats::Activation::*;
    match a {
        Identity => 0,
        GeluTanh => 1,
        GeluErf => 2,
        Silu => 3,
    }
}

/// Plans, checks the workspace (growing it when `grow`), queues the preparation, the
/// GEMM and the output copy.
fn run<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    lhs: Lhs<'_, I>,
    b: &DeviceQuantized,
    alpha: f32,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    if let Lhs::Quantized(a) = &lhs
        && fgemm::applies(dev, a, b)
    {
        return fgemm::run(dev, a, b, alpha, epilogue, out);
    }
    run_rhs(dev, lhs, Rhs::Quantized(b), alpha, epilogue, out, grow)
}

/// [`run`] on either kind of weights.
pub(crate) fn run_rhs<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    lhs: Lhs<'_, I>,
    b: Rhs<'_>,
    alpha: f32,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let (m, n) = (lhs.rows_k().0, b.rows_k().0);
    let alpha = check_epilogue(epilogue, alpha, n)?;
    check_output(&out, m, n)?;
    let out_stride = out.row_stride;
    // cudarc's guards (`g_*`) live until everything is queued, so that with event
    // tracking on the recorded reads and writes cover the kernels.
    let (out_ptr, g_out) = out.data.device_ptr_mut(stream);
    let aligned = out_ptr.is_multiple_of(16) && (out_stride * size_of::<O>()).is_multiple_of(16);
    let plan = Plan::new::<I, O>(dev, &lhs, b, aligned)?;
    let mut scratch = dev.scratch_for(plan.total, grow)?;
    let (ws, g_ws) = crate::device::scratch_ptr(&mut scratch.workspace, true, stream);

    let (a_data, g_a) = match &lhs {
        Lhs::Quantized(a) => a.data().device_ptr(stream),
        Lhs::Activations(x) => x.data.device_ptr(stream),
    };
    let (a_scales, g_sa) = match &lhs {
        Lhs::Quantized(a) => {
            let (p, g) = a.scales().ptr(stream);
            (p, Some(g))
        }
        Lhs::Activations(_) => (0, None),
    };
    let ((b_data, g_bd), (b_scales, g_bs)) = match b {
        Rhs::Quantized(b) => (b.data().device_ptr(stream), b.scales().ptr(stream)),
        Rhs::Prepared(f) => (f.codes.device_ptr(stream), f.scales.device_ptr(stream)),
    };
    let (bias, g_bias) = crate::device::optional_ptr(epilogue.bias, stream);

    // Operand preparation.
    let kk = plan.pieces * plan.k;
    if let Source::Workspace(o) = plan.a {
        match &lhs {
            Lhs::Quantized(a) => crate::dequantize::launch_dequantize(dev, a, ws + o as u64, kk, "bf16", 1.0)?,
            Lhs::Activations(x) => {
                prepare::split(dev, I::SUFFIX, a_data, x.row_stride, m, plan.k, plan.pieces, ws + o as u64)?
            }
        }
    }
    let pad_rows = plan.n_gemm - n;
    if let Source::Workspace(o) = plan.b {
        let at = ws + o as u64;
        if let Family::Sm120(kind) = plan.family {
            let row = sm120::row_bytes(kind, plan.k);
            prepare::copy_and_pad(dev, b_data, at, n * row, pad_rows * row)?;
        } else if plan.family == Family::Fp8Block {
            prepare::copy_and_pad(dev, b_data, at, n * plan.k, pad_rows * plan.k)?;
        } else {
            for piece in 0..plan.pieces {
                let to = at + (piece * plan.k * 2) as u64;
                match b {
                    Rhs::Quantized(b) => crate::dequantize::launch_dequantize(dev, b, to, kk, "bf16", 1.0)?,
                    Rhs::Prepared(f) => prepared::launch_dequantize(dev, f, (b_data, b_scales), to, kk)?,
                }
            }
            prepare::zero_bytes(dev, at + (n * kk * 2) as u64, pad_rows * kk * 2)?;
        }
    }
    if let (Some(o), true) = (plan.bias_ws, bias != 0) {
        prepare::copy_and_pad(dev, bias, ws + o as u64, n * 4, pad_rows * 4)?;
    }
    if let (Some(Source::Workspace(o)), Lhs::Quantized(a)) = (plan.sfa, &lhs) {
        let tiles = a.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128);
        prepare::fp8_scales(dev, a_scales, ws + o as u64, m, plan.k / 128, tiles, plan.sfa_mn_major)?;
    }

    // The GEMM.
    let at = Addresses { ws, a: a_data, b: b_data, sfa: a_scales, sfb: b_scales, d: out_ptr, ldd: out_stride, bias };
    let args = plan.args(&at, alpha, activation_code(epilogue.activation), dev.sm_count());
    // The launch contract (ffi): every address in `args` was checked for the extent the
    // kernel reads or writes: the quantized operands are validated DeviceQuantized buffers
    // of the shapes in `args`, the activations and the output were checked against their
    // shapes and strides, the workspace holds `plan.total` bytes, which covers every offset
    // and CUTLASS's `workspace_bytes`. The guards keep them alive and ordered until the
    // launch is queued on `stream`, the stream this device's work goes to.
    shim_for::<O>(dev.arch(), plan.family)?.launch(stream, &args)?;
    if let Some((o, ld)) = plan.staged {
        prepare::copy_out(dev, O::SUFFIX, ws + o as u64, ld, out_ptr, out_stride, m, n)?;
    }
    drop((g_out, g_ws, g_a, g_sa, g_bd, g_bs, g_bias));
    Ok(())
}

/// Checks that a quantized pair multiplies.
pub(crate) fn check_pair(a: &DeviceQuantized, b: &DeviceQuantized) -> Result<(), CudaError> {
    check_schemes((a.scheme(), a.shape().k), (b.scheme(), b.shape().k))
}

/// The pair rule on schemes and K alone (also for host matrices, before any upload).
pub(crate) fn check_schemes((sa, ka): (Scheme, usize), (sb, kb): (Scheme, usize)) -> Result<(), CudaError> {
    sa.pairs_with(sb).map_err(|hint| CudaError::UnsupportedPair { a: sa, b: sb, hint })?;
    if ka != kb {
        return Err(CudaError::KMismatch { a: ka, b: kb });
    }
    Ok(())
}

/// A new contiguous M x N output, left unset: the GEMMs and GEMVs write every one of the
/// m x n outputs before anything reads them (the values are only meaningful after the
/// queued work).
pub(crate) fn alloc_output<O: DeviceElement>(dev: &Device, m: usize, n: usize) -> Result<CudaSlice<O>, CudaError> {
    dev.alloc_unset::<O>(m * n, "the output")
}

/// The GEMM of two quantized device matrices, `a` (M x K) and `b` (N x K), into a new
/// contiguous M x N device buffer of `O` (bf16, f16 or f32). The pairs are the CPU's:
/// NVFP4 x NVFP4, any MX x any MX, FP8 block x FP8 block. Grows the device's workspace
/// if needed; nothing is waited for.
///
/// ```no_run
/// use blockscale_cuda::{Device, DeviceEpilogue, DeviceQuantized, gemm};
/// # fn f(dev: &Device, a: &DeviceQuantized, b: &DeviceQuantized) -> Result<(), blockscale_cuda::CudaError> {
/// let d = gemm::<half::bf16>(dev, a, b, &DeviceEpilogue::default())?; // M x N
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`CudaError::UnsupportedPair`], [`CudaError::KMismatch`], [`CudaError::BiasLength`],
/// [`CudaError::InvalidAlpha`], [`CudaError::NoGemmKernel`] on a device without GEMM
/// kernels, [`CudaError::TooLarge`], [`CudaError::OutOfMemory`], [`CudaError::Cutlass`],
/// [`CudaError::Driver`].
pub fn gemm<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    b: &DeviceQuantized,
    epilogue: &DeviceEpilogue<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    check_pair(a, b)?;
    let (m, n) = (a.shape().rows, b.shape().rows);
    let mut out = alloc_output::<O>(dev, m, n)?;
    let alpha = epilogue.alpha_quantized(a.global_scale(), b.global_scale());
    run(dev, Lhs::<half::bf16>::Quantized(a), b, alpha, epilogue, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemm`] into caller memory: allocates nothing and never synchronizes, so it can be
/// captured in a CUDA graph. Scratch space comes from the device's workspace, which must
/// already be large enough: reserve [`gemm_workspace_size`] bytes with
/// [`Device::reserve_workspace`] (an earlier [`gemm`] of the same shapes into a
/// contiguous output grows it too).
///
/// To capture it, turn cudarc's cross-stream event tracking off for the capture
/// (`dev.context().disable_event_tracking()`, whose safety notes in cudarc say when that
/// is sound): with it on, the launch waits on events recorded before the capture began,
/// which invalidates the capture. The crate's test `gemm_into_replays_in_a_cuda_graph`
/// shows the whole sequence.
///
/// ```no_run
/// use blockscale_cuda::{Device, DeviceEpilogue, DeviceMatrixMut, DeviceQuantized, gemm_into, gemm_workspace_size};
/// # fn f(dev: &Device, a: &DeviceQuantized, b: &DeviceQuantized) -> Result<(), blockscale_cuda::CudaError> {
/// let (m, n) = (a.shape().rows, b.shape().rows);
/// let mut d = dev.stream().alloc_zeros::<half::bf16>(m * n).unwrap();
/// dev.reserve_workspace(gemm_workspace_size::<half::bf16>(dev, a, b, n)?)?;
/// gemm_into(dev, a, b, &DeviceEpilogue::default(), DeviceMatrixMut::new(&mut d, m, n))?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`gemm`], plus [`CudaError::OutputShape`], [`CudaError::StrideTooSmall`] and
/// [`CudaError::BufferLength`] for the output, and [`CudaError::WorkspaceTooSmall`].
pub fn gemm_into<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    b: &DeviceQuantized,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    check_pair(a, b)?;
    let alpha = epilogue.alpha_quantized(a.global_scale(), b.global_scale());
    run(dev, Lhs::<half::bf16>::Quantized(a), b, alpha, epilogue, out, false)
}

/// The workspace bytes [`gemm_into`] needs for these operands and an output with
/// `out_row_stride` (an output TMA cannot write is staged in the workspace).
///
/// # Errors
/// As [`gemm`].
pub fn gemm_workspace_size<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    b: &DeviceQuantized,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    check_pair(a, b)?;
    if fgemm::applies(dev, a, b) {
        return fgemm::workspace_size(dev, a, b);
    }
    pair_workspace::<O>(dev, a, Rhs::Quantized(b), out_row_stride)
}

/// The workspace of a quantized pair on the bf16 decode or CUTLASS's FP8 kernel.
pub(crate) fn pair_workspace<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    b: Rhs<'_>,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    let aligned = (out_row_stride * size_of::<O>()).is_multiple_of(16);
    Ok(Plan::new::<half::bf16, O>(dev, &Lhs::Quantized(a), b, aligned)?.total)
}

/// The workspace bytes [`gemm_weight_only_into`] needs for these activations, weights,
/// output type and output row stride (elements). Reserve it with
/// [`Device::reserve_workspace`] before capturing a graph.
///
/// # Errors
/// As [`gemm_weight_only`].
pub fn gemm_weight_only_workspace_size<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &DeviceQuantized,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    weight_only_workspace::<I, O>(dev, x, Rhs::Quantized(w), out_row_stride)
}

/// The workspace bytes of a weight-only product on either kind of weights.
pub(crate) fn weight_only_workspace<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: Rhs<'_>,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    check_activations(&x)?;
    let aligned = (out_row_stride * size_of::<O>()).is_multiple_of(16);
    Ok(Plan::new::<I, O>(dev, &Lhs::Activations(x), w, aligned)?.total)
}

/// Checks weight-only activations: rows, stride and buffer length (any stride works:
/// what TMA cannot read is copied into the workspace).
pub(crate) fn check_activations<I>(x: &DeviceMatrix<'_, I>) -> Result<(), CudaError> {
    if x.rows == 0 {
        return Err(blockscale_formats::FormatError::EmptyShape { rows: 0, cols: x.k }.into());
    }
    if x.row_stride < x.k {
        return Err(CudaError::StrideTooSmall { what: "activations", row_stride: x.row_stride, width: x.k });
    }
    let needed = (x.rows - 1) * x.row_stride + x.k;
    if x.data.len() < needed {
        return Err(CudaError::BufferLength { what: "activations", expected: needed, actual: x.data.len() });
    }
    Ok(())
}

/// Weight-only GEMM: activations `x` (M x K of bf16, f16 or f32 in device memory, any
/// row stride) times quantized weights `w` (N x K, any scheme), into a new contiguous
/// M x N buffer of `O`. For prefill sizes (M > 16); decode sizes work too, at GEMM speed.
///
/// # Errors
/// As [`gemm`], plus [`CudaError::BufferLength`] / [`CudaError::StrideTooSmall`] for `x`.
pub fn gemm_weight_only<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &DeviceQuantized,
    epilogue: &DeviceEpilogue<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    check_activations(&x)?;
    let (m, n) = (x.rows, w.shape().rows);
    let mut out = alloc_output::<O>(dev, m, n)?;
    let alpha = epilogue.alpha_weight_only(w.scheme(), w.global_scale());
    run(dev, Lhs::Activations(x), w, alpha, epilogue, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemm_weight_only`] into caller memory (no allocation, no synchronization; the
/// device's workspace must be large enough, see [`gemm_into`]).
///
/// # Errors
/// As [`gemm_weight_only`] and [`gemm_into`].
pub fn gemm_weight_only_into<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &DeviceQuantized,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    check_activations(&x)?;
    let alpha = epilogue.alpha_weight_only(w.scheme(), w.global_scale());
    run(dev, Lhs::Activations(x), w, alpha, epilogue, out, false)
}

/// Runs `f` with a host epilogue turned into a device one (its bias copied over).
pub(crate) fn on_device<R>(
    dev: &Device,
    epilogue: &Epilogue<'_>,
    f: impl FnOnce(&DeviceEpilogue<'_>) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    let bias = epilogue
        .bias
        .map(|b| dev.stream().clone_htod(b).map_err(CudaError::alloc("the bias", b.len() * 4)))
        .transpose()?;
    f(&DeviceEpilogue { alpha: epilogue.alpha, bias: bias.as_ref(), activation: epilogue.activation })
}

pub(crate) fn to_host<O: DeviceElement>(
    dev: &Device,
    d: &CudaSlice<O>,
    m: usize,
    n: usize,
) -> Result<Array2<O>, CudaError> {
    let host = dev.stream().clone_dtoh(d).map_err(CudaError::driver("copying the output to the host"))?;
    Ok(Array2::from_shape_vec((m, n), host).expect("m x n values"))
}

/// Host convenience: copies two quantized matrices and the bias to the device, runs
/// [`gemm`] and copies the M x N result back (waiting for it).
///
/// # Errors
/// As [`gemm`].
pub fn gemm_host<O: DeviceElement>(
    dev: &Device,
    a: &QuantizedMatrix,
    b: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    check_schemes((a.scheme(), a.k()), (b.scheme(), b.k()))?;
    let (da, db) = (DeviceQuantized::from_host(dev, a)?, DeviceQuantized::from_host(dev, b)?);
    let d = on_device(dev, epilogue, |epi| gemm::<O>(dev, &da, &db, epi))?;
    to_host(dev, &d, a.rows(), b.rows())
}

/// Host convenience for [`gemm_weight_only`]: `x` is any 2-D array of bf16, f16 or f32.
///
/// # Errors
/// As [`gemm_weight_only`].
pub fn gemm_weight_only_host<I: DeviceElement, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    w: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    let (m, k) = x.dim();
    if k != w.k() {
        return Err(CudaError::KMismatch { a: k, b: w.k() });
    }
    let host = x.as_standard_layout();
    let flat = host.as_slice().expect("standard layout is contiguous");
    let dx = dev.stream().clone_htod(flat).map_err(CudaError::alloc("the activations", std::mem::size_of_val(flat)))?;
    let dw = DeviceQuantized::from_host(dev, w)?;
    let d = on_device(dev, epilogue, |epi| gemm_weight_only::<I, O>(dev, DeviceMatrix::new(&dx, m, k), &dw, epi))?;
    to_host(dev, &d, m, w.rows())
}
