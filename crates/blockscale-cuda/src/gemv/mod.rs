//! GEMV for decode: `y = act(alpha * x . W^T + bias)` for 1 to 16 activation rows, and
//! the gated `y = act_gate(alpha_g x Wg^T + b_g) * act_up(alpha_u x Wu^T + b_u)` of
//! SwiGLU MLPs, both matrices read in one pass (`kernels/gemv/gemv.cu`).
//!
//! Every weight scheme (NVFP4, MXFP4, MXFP6, MXFP8, FP8 block 1x128 and 128x128, INT4-G32
//! row-major or block-interleaved), bf16 or f16 activations, bf16 / f16 / f32 output, on
//! Hopper and SM120. The weights are read once whatever M is; each block's sum comes
//! from the tensor cores (exact products, f32 sums) and is scaled and accumulated in f32,
//! so exact data gives the CPU reference's bits (docs/KERNELS.md, "GEMV").

use blockscale_formats::{Epilogue, Fp8Tile, QuantizedMatrix, Scheme};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use half::{bf16, f16};
use ndarray::{Array2, ArrayView2};

use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::launch::{Kernel, Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::{GemvParams, MatrixFields};
use crate::gemm::{DeviceEpilogue, DeviceMatrixMut, alloc_output, check_output, on_device, to_host};
use crate::prepared::{Inner, PreparedWeights};
use crate::quantize::DeviceMatrix;
use crate::{CudaError, Device};

/// The most activation rows one GEMV call takes; more is a GEMM
/// ([`crate::gemm_weight_only`]).
pub const GEMV_MAX_ROWS: usize = 16;

/// Threads per CTA (`kThreads` in gemv.cu): four warps.
const THREADS: u32 = 128;
/// cp.async stages per warp (`kStages`).
const STAGES: usize = 3;
/// K elements per step (`kStepK`).
const STEP_K: usize = 128;

/// The activation types of the GEMV: bf16 and f16 (f32 activations go through
/// [`crate::gemm_weight_only`], or convert them first). Sealed by [`DeviceElement`]'s
/// [`Source`](blockscale_formats::Source) bound.
pub trait GemvInput: DeviceElement {}
impl GemvInput for bf16 {}
impl GemvInput for f16 {}

mod prepared;
pub(crate) use prepared::{FastSide, quantized_workspace_size, run_quantized};

/// The weights a GEMV reads: a matrix in its checkpoint / quantize layout, or one
/// prepared once for the fast kernels ([`PreparedWeights`]; a prepared matrix that had
/// to keep its own layout counts as the first). `&DeviceQuantized` and
/// `&PreparedWeights` convert into it, so every GEMV function takes either.
#[derive(Clone, Copy, Debug)]
pub enum GemvWeights<'a> {
    /// The checkpoint / quantize layout (the general kernel).
    Quantized(&'a DeviceQuantized),
    /// The prepared layout (the fast kernels).
    Prepared(&'a PreparedWeights),
}

impl<'a> From<&'a DeviceQuantized> for GemvWeights<'a> {
    fn from(w: &'a DeviceQuantized) -> Self {
        Self::Quantized(w)
    }
}

impl<'a> From<&'a PreparedWeights> for GemvWeights<'a> {
    fn from(w: &'a PreparedWeights) -> Self {
        match &w.inner {
            Inner::Plain { w, .. } => Self::Quantized(w),
            Inner::Fast(_) => Self::Prepared(w),
        }
    }
}

impl GemvWeights<'_> {
    fn scheme(&self) -> Scheme {
        match self {
            Self::Quantized(w) => w.scheme(),
            Self::Prepared(w) => w.scheme(),
        }
    }

    fn shape(&self) -> (usize, usize) {
        match self {
            Self::Quantized(w) => (w.shape().rows, w.shape().k),
            Self::Prepared(w) => w.shape(),
        }
    }

    fn global_scale(&self) -> Option<blockscale_formats::GlobalScale> {
        match self {
            Self::Quantized(w) => w.global_scale(),
            Self::Prepared(w) => w.global_scale(),
        }
    }
}

/// Two weight matrices of the same scheme and shape with their epilogues, for
/// [`gemv_gated`]: `y = act_gate(gate) * act_up(up)`, each side with its own alpha (from
/// its NVFP4 per-tensor scale by default) and optional bias. Both prepared, or neither.
#[derive(Clone, Copy, Debug)]
pub struct GatedWeights<'a> {
    /// The gate projection (N x K).
    pub gate: GemvWeights<'a>,
    /// The gate's epilogue (SwiGLU: `Activation::Silu`).
    pub gate_epilogue: DeviceEpilogue<'a>,
    /// The up projection (N x K).
    pub up: GemvWeights<'a>,
    /// The up side's epilogue (SwiGLU: identity).
    pub up_epilogue: DeviceEpilogue<'a>,
}

impl<'a> GatedWeights<'a> {
    /// SwiGLU: `silu(x Wg^T) * (x Wu^T)`, alphas from the weights' per-tensor scales.
    pub fn swiglu(gate: impl Into<GemvWeights<'a>>, up: impl Into<GemvWeights<'a>>) -> Self {
        Self {
            gate: gate.into(),
            gate_epilogue: DeviceEpilogue::default().with_activation(blockscale_formats::Activation::Silu),
            up: up.into(),
            up_epilogue: DeviceEpilogue::default(),
        }
    }
}

/// The kernel's shared memory per CTA for `scheme` (gemv.cu's `Traits::kWarpBytes`
/// times four warps; the kernel faults if given less).
fn smem_bytes(scheme: Scheme) -> usize {
    let bits = scheme.element().bits() as usize;
    let (rows, pitch) = match bits {
        4 => (64, 80),
        6 => (32, 112),
        _ => (32, 160),
    };
    let unit = if scheme == Scheme::NvFp4 { 16 } else { 32 };
    let units = STEP_K / unit;
    let size = scheme.scale_format().bytes();
    let units_per_scale = scheme.block_size() / unit;
    // Whole 4-byte words per row (INT4-G128's one f16 a step takes a word).
    let stage = rows * pitch + rows * (units / units_per_scale * size).max(4);
    let warp = STAGES * stage + rows * units * 4;
    4 * warp
}

/// Weight rows one CTA covers (output rows: half of them when gated).
fn rows_per_cta(scheme: Scheme) -> usize {
    if scheme.element().bits() == 4 { 64 } else { 32 }
}

/// Tuning override for benchmarks: `BLOCKSCALE_GEMV_SPLITS` (CTAs along K).
fn split_override() -> Option<usize> {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *S.get_or_init(|| crate::tuning::env_usize("BLOCKSCALE_GEMV_SPLITS"))
}

/// Tuning switch for benchmarks: `BLOCKSCALE_GEMV_EARLY_LAUNCH=0` keeps a one-wave GEMV on
/// prepared weights from letting the next kernel launch at its start (the trigger then
/// follows its main loop, as for larger grids).
fn early_launch() -> bool {
    static E: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *E.get_or_init(|| crate::tuning::env_on("BLOCKSCALE_GEMV_EARLY_LAUNCH"))
}

/// Tuning switch for benchmarks: `BLOCKSCALE_GEMV_CLUSTERS=0` makes a one-wave GEMV on
/// prepared weights add its K splits through the workspace and the last CTA of each tile
/// (as larger grids do) instead of in a cluster.
fn gemv_clusters() -> bool {
    static C: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *C.get_or_init(|| crate::tuning::env_on("BLOCKSCALE_GEMV_CLUSTERS"))
}

/// Tuning switch for benchmarks: `BLOCKSCALE_GEMV_SPREAD=0` launches a one-wave GEMV on
/// prepared weights with its own shared memory, however unevenly its CTAs then share the
/// SMs (by default it pads the shared memory so that ceil(CTAs / SMs) fit an SM).
fn gemv_spread() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| crate::tuning::env_on("BLOCKSCALE_GEMV_SPREAD"))
}

/// How a GEMV is launched: tiles of rows x splits of K, and the split-K workspace.
#[derive(Clone, Copy, Debug)]
struct Plan {
    tiles: usize,
    splits: usize,
    steps_per_split: usize,
    smem: usize,
    workspace: usize,
}

/// The fewest 128-element steps a split keeps (two per warp).
const MIN_SPLIT_STEPS: usize = 8;

/// How full the last wave of `ctas` CTAs is on `slots` resident ones, as the fraction of
/// all waves' slots that do work.
fn wave_fill(ctas: usize, slots: usize) -> f64 {
    ctas as f64 / (ctas.div_ceil(slots) * slots) as f64
}

impl Plan {
    /// `slots`: CTAs resident at once on the whole GPU (SMs x CTAs per SM) with `smem`
    /// bytes of shared memory each.
    fn new(
        scheme: Scheme,
        (m, n, k): (usize, usize, usize),
        gated: bool,
        (sms, slots, smem): (usize, usize, usize),
    ) -> Self {
        let rows = rows_per_cta(scheme) / if gated { 2 } else { 1 };
        let tiles = n.div_ceil(rows);
        let steps = k.div_ceil(STEP_K);
        let wanted = if tiles < sms {
            // Too few row tiles to fill the GPU: enough splits of K to give every SM two
            // CTAs, each keeping at least two steps.
            (2 * sms).div_ceil(tiles).min((steps / 2).max(1))
        } else {
            // Enough tiles, but the last wave may run nearly empty (448 NVFP4 tiles of
            // a 28672-row matrix on 396 H100 slots fill 57% of two waves): split K (up to
            // 4 ways, at least 8 steps each) when that fills the waves clearly better.
            let mut best = (1, wave_fill(tiles, slots));
            for s in 2..=4 {
                if steps.div_ceil(s) < MIN_SPLIT_STEPS {
                    break;
                }
                let fill = wave_fill(tiles * s, slots);
                if fill > best.1 + 0.05 {
                    best = (s, fill);
                }
            }
            best.0
        };
        let wanted = split_override().unwrap_or(wanted).clamp(1, steps.min(65535));
        let steps_per_split = steps.div_ceil(wanted);
        let splits = steps.div_ceil(steps_per_split);
        let mats = if gated { 2 } else { 1 };
        let workspace = if splits > 1 { splits * mats * m * n * 4 } else { 0 };
        Self { tiles, splits, steps_per_split, smem, workspace }
    }
}

/// The GEMV kernel for `scheme`, `m` rows and the activation type (loaded once with its
/// shared memory allowed and its occupancy counted), and its plan for an N x K weight
/// matrix. The plan comes from the bf16 kernel's occupancy whatever the activation type,
/// so [`gemv_workspace_size`] needs no type.
fn prepare(
    dev: &Device,
    scheme: Scheme,
    (m, n, k): (usize, usize, usize),
    gated: bool,
    f16: bool,
) -> Result<(Kernel<GemvParams>, Plan), CudaError> {
    let smem = smem_bytes(scheme);
    let planner = dev.function_with_smem(&KernelName::gemv(scheme, m, false), smem)?;
    let per_sm = planner.blocks_per_sm as usize;
    let sms = dev.sm_count() as usize;
    let plan = Plan::new(scheme, (m, n, k), gated, (sms, sms * per_sm, smem));
    let kernel = if f16 { dev.function_with_smem(&KernelName::gemv(scheme, m, true), smem)? } else { planner };
    Ok((kernel, plan))
}

/// The weights of one side, checked against the first.
struct Side<'a> {
    w: GemvWeights<'a>,
    alpha: f32,
    epilogue: &'a DeviceEpilogue<'a>,
}

/// The general kernel's side: the checkpoint layout.
struct PlainSide<'a> {
    w: &'a DeviceQuantized,
    alpha: f32,
    epilogue: &'a DeviceEpilogue<'a>,
}

fn check_rows(m: usize) -> Result<(), CudaError> {
    if m == 0 || m > GEMV_MAX_ROWS {
        return Err(CudaError::GemvRows { m });
    }
    Ok(())
}

/// The checks every GEMV makes before anything is queued: M, K, the 32-bit limits of
/// the kernels, each side's bias and alpha, and the output (the caller checks the
/// activations' buffer with its device address).
fn check_request<I: GemvInput, O: DeviceElement>(
    x: &DeviceMatrix<'_, I>,
    (n, k): (usize, usize),
    sides: &[(f32, &DeviceEpilogue<'_>)],
    out: &DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    let m = x.rows;
    check_rows(m)?;
    if x.k != k {
        return Err(CudaError::KMismatch { a: x.k, b: k });
    }
    check_shape_and_epilogue((n, k), sides)?;
    check_output(out, m, n)
}

/// The weights' size limits and each side's bias length and alpha.
fn check_shape_and_epilogue((n, k): (usize, usize), sides: &[(f32, &DeviceEpilogue<'_>)]) -> Result<(), CudaError> {
    // The kernels keep row and per-step byte counts in 32 bits (gemv.cu, FastCopies;
    // interleaved weights move 64 N bytes per step; prepared.cu likewise).
    if n >= 1 << 26 || k >= 1 << 28 {
        return Err(CudaError::TooLarge { rows: n, k, limit: "N must be below 2^26 and K below 2^28" });
    }
    for &(alpha, epilogue) in sides {
        if let Some(bias) = epilogue.bias
            && bias.len() != n
        {
            return Err(CudaError::BiasLength { expected: n, actual: bias.len() });
        }
        if !alpha.is_finite() {
            return Err(CudaError::InvalidAlpha(alpha));
        }
    }
    Ok(())
}

/// Checks everything and queues the GEMV on the kernels the weights' layout takes.
fn run<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    sides: &[Side<'_>],
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let plain: Vec<PlainSide<'_>> = sides
        .iter()
        .filter_map(|s| match s.w {
            GemvWeights::Quantized(w) => Some(PlainSide { w, alpha: s.alpha, epilogue: s.epilogue }),
            GemvWeights::Prepared(_) => None,
        })
        .collect();
    if plain.len() == sides.len() {
        return run_plain(dev, x, &plain, out, grow);
    }
    let fast: Vec<prepared::FastSide<'_>> = sides
        .iter()
        .filter_map(|s| match (s.w, s.w) {
            (GemvWeights::Prepared(w), _) => match &w.inner {
                Inner::Fast(f) => Some(prepared::FastSide { w: f, alpha: s.alpha, epilogue: s.epilogue }),
                Inner::Plain { .. } => None,
            },
            _ => None,
        })
        .collect();
    if fast.len() != sides.len() {
        return Err(CudaError::MixedPreparation);
    }
    prepared::run(dev, x, &fast, out, grow)
}

/// The general kernel on the checkpoint layout (and its split-K reduction).
fn run_plain<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    sides: &[PlainSide<'_>],
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let w = sides[0].w;
    let (n, k) = (w.shape().rows, w.shape().k);
    let m = x.rows;
    check_gated_pair(sides)?;
    let checks: Vec<_> = sides.iter().map(|s| (s.alpha, s.epilogue)).collect();
    check_request(&x, (n, k), &checks, &out)?;
    let (x_ptr, g_x) = x.data.device_ptr(stream);
    crate::checks::check_matrix::<I>(m, k, x.row_stride, x.data.len(), x_ptr, "activations")?;

    let gated = sides.len() == 2;
    let (kernel, plan) = prepare(dev, w.scheme(), (m, n, k), gated, I::SUFFIX == "f16")?;
    let mut scratch = dev.scratch_for(plan.workspace, grow && plan.workspace > 0)?;
    let (ws_ptr, g_ws) = crate::device::scratch_ptr(&mut scratch.workspace, plan.workspace > 0, stream);
    let out_stride = out.row_stride;
    let (out_ptr, g_out) = out.data.device_ptr_mut(stream);

    let mut params = GemvParams {
        x: x_ptr,
        x_stride: x.row_stride as u64,
        out: out_ptr,
        out_stride: out_stride as u64,
        partial: ws_ptr,
        m: m as u32,
        // Read by the `_m16` kernels, which take either type.
        act_f16: (I::SUFFIX == "f16") as u32,
        out_kind: O::OUT_KIND,
        gated: gated as u32,
        ..weight_params(w, &plan)
    };
    let mut guards = Vec::with_capacity(6);
    for (i, side) in sides.iter().enumerate() {
        let (d, g) = side.w.data().device_ptr(stream);
        guards.push(g);
        let (s, g) = side.w.scales().ptr(stream);
        guards.push(g);
        params.w[i] = d;
        params.s[i] = s;
        params.alpha[i] = side.alpha;
        params.activation[i] = crate::gemm::activation_code(side.epilogue.activation) as u32;
        if let Some(b) = side.epilogue.bias {
            let (p, g) = b.device_ptr(stream);
            guards.push(g);
            params.bias[i] = p;
        }
    }

    launch_plain(dev, &kernel, &plan, &params, m * n)?;
    drop((g_x, g_ws, g_out, guards));
    Ok(())
}

/// A gated pair's two matrices agree in shape and layouts.
fn check_gated_pair(sides: &[PlainSide<'_>]) -> Result<(), CudaError> {
    let [gate, up] = sides else { return Ok(()) };
    let (w, v) = (gate.w, up.w);
    if v.shape() != w.shape() || v.scale_layout() != w.scale_layout() || v.data_layout() != w.data_layout() {
        return Err(CudaError::GatedMismatch {
            gate: (w.scheme(), w.shape().rows, w.shape().k),
            up: (v.scheme(), v.shape().rows, v.shape().k),
        });
    }
    Ok(())
}

/// The parameters the weights `w` and the plan decide (pointers and the rest default).
fn weight_params(w: &DeviceQuantized, plan: &Plan) -> GemvParams {
    GemvParams {
        matrix: MatrixFields::of(&w.request),
        tiles: (w.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128)) as u32,
        splits: plan.splits as u32,
        steps_per_split: plan.steps_per_split as u32,
        // 16-byte copies when every weight row starts 16-byte aligned (cudarc's
        // allocations are 256-byte aligned).
        ch16: w.shape().row_bytes.is_multiple_of(16) as u32,
        ..GemvParams::default()
    }
}

/// Queues the general kernel with `params` and, with K split, its reduction over the
/// `outputs` = M x N results. Only for [`run_plain`], which validated every buffer
/// `params` points at and holds their guards across this call.
fn launch_plain(
    dev: &Device,
    kernel: &Kernel<GemvParams>,
    plan: &Plan,
    params: &GemvParams,
    outputs: usize,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let config = LaunchConfig {
        grid_dim: (plan.tiles as u32, plan.splits as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: plan.smem as u32,
    };
    // The launch contract (ffi): the weights are validated DeviceQuantized buffers (codes
    // and scales of the sizes their shape implies; gate and up checked equal in shape and
    // layouts); the kernel reads rows below N and scale columns below scale_cols only,
    // zero-filling the rest. The activations were checked for M rows of K at their stride
    // with 16-byte aligned rows, the output for M x N at its stride, the bias for N values,
    // the workspace for the split-K partials; the dynamic shared memory is what gemv.cu
    // lays out (it traps otherwise). The guards keep every buffer alive and ordered until
    // the launch is queued on this device's stream (the caller holds them past this call).
    launch(stream, kernel, config, Order::Serial, params).map_err(CudaError::driver("launching the GEMV"))?;
    if plan.splits > 1 {
        let reduce = dev.function(&KernelName::gemv_reduce())?;
        let config = dev.grid_stride(outputs as u64, &reduce);
        // As above: the reduction reads the partials the GEMV wrote into the workspace
        // (splits x mats x M x N f32) and writes the checked output.
        launch(stream, &reduce, config, Order::Serial, params)
            .map_err(CudaError::driver("launching the GEMV reduction"))?;
    }
    Ok(())
}

/// Workspace bytes [`gemv_into`] (`gated` false) or [`gemv_gated_into`] (`gated` true)
/// needs for `m` activation rows and weights `w`: the split-K partial sums when N is too
/// small to fill the GPU, else 0. Reserve it with [`Device::reserve_workspace`] before
/// capturing a CUDA graph.
///
/// # Errors
/// [`CudaError::GemvRows`] for `m` outside 1..=16, [`CudaError::Driver`] when the kernel
/// cannot be loaded.
pub fn gemv_workspace_size<'w>(
    dev: &Device,
    m: usize,
    w: impl Into<GemvWeights<'w>>,
    gated: bool,
) -> Result<usize, CudaError> {
    check_rows(m)?;
    match w.into() {
        GemvWeights::Quantized(w) => {
            Ok(prepare(dev, w.scheme(), (m, w.shape().rows, w.shape().k), gated, false)?.1.workspace)
        }
        GemvWeights::Prepared(w) => match &w.inner {
            Inner::Fast(f) => prepared::workspace_size(dev, m, f, gated),
            Inner::Plain { w, .. } => {
                Ok(prepare(dev, w.scheme(), (m, w.shape().rows, w.shape().k), gated, false)?.1.workspace)
            }
        },
    }
}

/// `y = act(alpha * x . W^T + bias)`: activations `x` (M x K bf16 or f16 on the device,
/// M from 1 to 16, rows 16-byte aligned) times quantized weights `w` (N x K, any scheme
/// and layout), into a new contiguous M x N buffer of `O` (bf16, f16 or f32). `alpha`
/// defaults to NVFP4 weights' decode factor. Grows the device's workspace if the shape
/// needs split-K; nothing is waited for.
///
/// ```no_run
/// use blockscale_cuda::{Device, DeviceEpilogue, DeviceMatrix, DeviceQuantized, gemv};
/// # fn f(dev: &Device, x: &blockscale_cuda::cudarc::driver::CudaSlice<half::bf16>, w: &DeviceQuantized) -> Result<(), blockscale_cuda::CudaError> {
/// let k = w.shape().k;
/// let y = gemv::<half::bf16, half::bf16>(dev, DeviceMatrix::new(x, 1, k), w, &DeviceEpilogue::default())?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`CudaError::GemvRows`] for M outside 1..=16, [`CudaError::KMismatch`],
/// [`CudaError::BadStride`], [`CudaError::BufferLength`] and [`CudaError::Misaligned`] for
/// `x`, [`CudaError::BiasLength`], [`CudaError::InvalidAlpha`], [`CudaError::TooLarge`],
/// [`CudaError::OutOfMemory`], [`CudaError::Driver`].
pub fn gemv<'w, I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: impl Into<GemvWeights<'w>>,
    epilogue: &DeviceEpilogue<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    check_rows(x.rows)?;
    let w = w.into();
    let (m, n) = (x.rows, w.shape().0);
    let mut out = alloc_output::<O>(dev, m, n)?;
    gemv_run(dev, x, w, epilogue, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemv`] into caller memory: allocates nothing and never synchronizes, so it can be
/// captured in a CUDA graph (reserve [`gemv_workspace_size`] first when it is not zero;
/// see [`crate::gemm_into`] for the capture sequence).
///
/// # Errors
/// As [`gemv`], plus [`CudaError::OutputShape`], [`CudaError::StrideTooSmall`] and
/// [`CudaError::BufferLength`] for the output, and [`CudaError::WorkspaceTooSmall`].
pub fn gemv_into<'w, I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: impl Into<GemvWeights<'w>>,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    gemv_run(dev, x, w.into(), epilogue, out, false)
}

pub(crate) fn gemv_run<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: GemvWeights<'_>,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let alpha = epilogue.alpha_weight_only(w.scheme(), w.global_scale());
    run(dev, x, &[Side { w, alpha, epilogue }], out, grow)
}

fn gated_run<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    weights: &GatedWeights<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let side = |w: GemvWeights<'_>, e| (w.scheme(), w.global_scale(), e);
    let (gs, gg, ge) = side(weights.gate, &weights.gate_epilogue);
    let (us, ug, ue) = side(weights.up, &weights.up_epilogue);
    let sides = [
        Side { w: weights.gate, alpha: ge.alpha_weight_only(gs, gg), epilogue: ge },
        Side { w: weights.up, alpha: ue.alpha_weight_only(us, ug), epilogue: ue },
    ];
    run(dev, x, &sides, out, grow)
}

/// The gated GEMV of SwiGLU-style MLPs: `y = act_g(alpha_g x Wg^T + b_g) *
/// act_u(alpha_u x Wu^T + b_u)`, both weight matrices (same scheme, shape and layouts)
/// read in one pass, into a new M x N buffer of `O`.
///
/// ```no_run
/// use blockscale_cuda::{Device, DeviceMatrix, DeviceQuantized, GatedWeights, gemv_gated};
/// # fn f(dev: &Device, x: &blockscale_cuda::cudarc::driver::CudaSlice<half::bf16>, wg: &DeviceQuantized, wu: &DeviceQuantized) -> Result<(), blockscale_cuda::CudaError> {
/// let k = wg.shape().k;
/// let h = gemv_gated::<half::bf16, half::bf16>(dev, DeviceMatrix::new(x, 1, k), &GatedWeights::swiglu(wg, wu))?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`gemv`], plus [`CudaError::GatedMismatch`] when the two matrices differ in scheme,
/// shape or layout.
pub fn gemv_gated<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    weights: &GatedWeights<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    check_rows(x.rows)?;
    let (m, n) = (x.rows, weights.gate.shape().0);
    let mut out = alloc_output::<O>(dev, m, n)?;
    gated_run(dev, x, weights, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemv_gated`] into caller memory (no allocation, no synchronization; reserve
/// [`gemv_workspace_size`] with `gated` true first when it is not zero).
///
/// # Errors
/// As [`gemv_gated`] and [`gemv_into`].
pub fn gemv_gated_into<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    weights: &GatedWeights<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    gated_run(dev, x, weights, out, false)
}

/// Host convenience for [`gemv`]: copies `x` (M x K, M <= 16), the weights and the bias
/// over, runs the GEMV and copies the M x N result back (waiting for it).
///
/// # Errors
/// As [`gemv`].
pub fn gemv_host<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    w: &QuantizedMatrix,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    check_rows(x.nrows())?;
    on_host_rows(dev, x, (w.rows(), w.k()), |xm| {
        let dw = DeviceQuantized::from_host(dev, w)?;
        on_device(dev, epilogue, |epi| gemv::<I, O>(dev, xm, &dw, epi))
    })
}

/// Host convenience for [`gemv`] on weights already prepared on the device: copies `x`
/// (M x K, M <= 16) and the bias over, runs the GEMV and copies the M x N result back
/// (waiting for it). The weights stay where they are.
///
/// # Errors
/// As [`gemv`].
pub fn gemv_prepared_host<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    w: &PreparedWeights,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    check_rows(x.nrows())?;
    on_host_rows(dev, x, w.shape(), |xm| on_device(dev, epilogue, |epi| gemv::<I, O>(dev, xm, w, epi)))
}

/// Host convenience for [`gemv_gated`] on weights prepared on the device (both, of one
/// scheme and shape): copies `x` (M x K, M <= 16) and the biases over, runs the gated
/// GEMV with each side's epilogue and copies the M x N result back (waiting for it).
///
/// # Errors
/// As [`gemv_gated`].
pub fn gemv_gated_prepared_host<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    (gate, gate_epilogue): (&PreparedWeights, &Epilogue<'_>),
    (up, up_epilogue): (&PreparedWeights, &Epilogue<'_>),
) -> Result<Array2<O>, CudaError> {
    check_rows(x.nrows())?;
    on_host_rows(dev, x, gate.shape(), |xm| {
        on_device(dev, gate_epilogue, |ge| {
            on_device(dev, up_epilogue, |ue| {
                let w = GatedWeights { gate: gate.into(), gate_epilogue: *ge, up: up.into(), up_epilogue: *ue };
                gemv_gated::<I, O>(dev, xm, &w)
            })
        })
    })
}

/// What the host conveniences share: copies the host activations `x` to the device with
/// rows padded to 8 elements (16 bytes), as the kernels read them, after checking their
/// K against the weights' `(n, k)`; runs `f` on them and copies its M x N result back
/// (waiting for it).
pub(crate) fn on_host_rows<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    (n, weights_k): (usize, usize),
    f: impl FnOnce(DeviceMatrix<'_, I>) -> Result<CudaSlice<O>, CudaError>,
) -> Result<Array2<O>, CudaError> {
    let (m, k) = x.dim();
    if k != weights_k {
        return Err(CudaError::KMismatch { a: k, b: weights_k });
    }
    let stride = k.next_multiple_of(8);
    let mut host = vec![I::default(); m * stride];
    for (r, row) in x.rows().into_iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            host[r * stride + c] = *v;
        }
    }
    let dx = dev.stream().clone_htod(&host).map_err(CudaError::alloc("the activations", host.len() * 2))?;
    let y = f(DeviceMatrix { data: &dx, rows: m, k, row_stride: stride })?;
    to_host(dev, &y, m, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The launch plan is host arithmetic: checked here without a GPU (H100: 132 SMs,
    // three CTAs each).
    const SMS: usize = 132;
    const SLOTS: usize = 396;

    #[test]
    fn few_rows_split_k_to_give_every_sm_two_ctas() {
        // 40 rows of NVFP4 are one tile; K = 4096 is 32 steps: 16 splits of 2 steps.
        let p = Plan::new(Scheme::NvFp4, (3, 40, 4096), false, (SMS, SLOTS, smem_bytes(Scheme::NvFp4)));
        assert_eq!((p.tiles, p.splits, p.steps_per_split), (1, 16, 2));
        assert_eq!(p.workspace, 16 * 3 * 40 * 4);
        // Gated: both matrices' partials.
        let g = Plan::new(Scheme::NvFp4, (3, 40, 4096), true, (SMS, SLOTS, smem_bytes(Scheme::NvFp4)));
        assert_eq!(g.workspace, g.splits * 2 * 3 * 40 * 4);
        // Too short a K to split: one pass, no workspace.
        let short = Plan::new(Scheme::MxFp8E4M3, (1, 40, 128), false, (SMS, SLOTS, smem_bytes(Scheme::MxFp8E4M3)));
        assert_eq!((short.splits, short.workspace), (1, 0));
    }

    #[test]
    fn a_mostly_empty_last_wave_is_filled_by_splitting_k() {
        // 448 tiles on 396 slots fill 57% of two waves; 4 splits of 16 steps fill 90%.
        let p = Plan::new(Scheme::NvFp4, (1, 28672, 8192), false, (SMS, SLOTS, smem_bytes(Scheme::NvFp4)));
        assert_eq!((p.tiles, p.splits, p.steps_per_split), (448, 4, 16));
        // 396 tiles fill their one wave exactly: no split.
        let full = Plan::new(Scheme::NvFp4, (1, 396 * 64, 8192), false, (SMS, SLOTS, smem_bytes(Scheme::NvFp4)));
        assert_eq!(full.splits, 1);
        // A split keeps at least 8 steps: K = 1024 (8 steps) is never split here.
        let short = Plan::new(Scheme::NvFp4, (1, 28672, 1024), false, (SMS, SLOTS, smem_bytes(Scheme::NvFp4)));
        assert_eq!(short.splits, 1);
    }

    #[test]
    fn shared_memory_matches_the_kernel_layout() {
        // gemv.cu: 4 warps x (3 stages x (rows x pitch + rows x scale bytes) + rows x
        // units x 4), the numbers its static layout gives.
        assert_eq!(smem_bytes(Scheme::NvFp4), 4 * (3 * (64 * 80 + 64 * 8) + 64 * 8 * 4));
        assert_eq!(smem_bytes(Scheme::MxFp4), 4 * (3 * (64 * 80 + 64 * 4) + 64 * 4 * 4));
        assert_eq!(smem_bytes(Scheme::Int4G32), 4 * (3 * (64 * 80 + 64 * 8) + 64 * 4 * 4));
        assert_eq!(smem_bytes(Scheme::Int4G128), 4 * (3 * (64 * 80 + 64 * 4) + 64 * 4 * 4));
        assert_eq!(smem_bytes(Scheme::MxFp6E2M3), 4 * (3 * (32 * 112 + 32 * 4) + 32 * 4 * 4));
        assert_eq!(smem_bytes(Scheme::MxFp8E5M2), 4 * (3 * (32 * 160 + 32 * 4) + 32 * 4 * 4));
        assert_eq!(smem_bytes(Scheme::Fp8Block(Fp8Tile::Tile128x128)), 4 * (3 * (32 * 160 + 32 * 4) + 32 * 4 * 4));
    }
}
