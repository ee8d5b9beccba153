//! The GEMV on [`PreparedWeights`] (`kernels/gemv/prepared.cu`): launch plan and launch.

use blockscale_formats::Scheme;
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

use super::{GemvInput, check_request};
use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::launch::{Kernel, MAX_CLUSTER, Order};
use crate::ffi::names::KernelName;
use crate::ffi::params::PgemvParams;
use crate::gemm::{DeviceEpilogue, DeviceMatrixMut, check_output};
use crate::prepared::{Acts, Fast, decoded_rows_bytes, scale_add, stage_scale_bytes};
use crate::quantize::DeviceMatrix;
use crate::{CudaError, Device};

/// Threads per CTA (`kThreads` in prepared.cu).
const THREADS: u32 = 128;
/// Slabs per chunk (`kChunk`): the unit of work a warp takes.
const CHUNK: usize = 4;
/// Warps per CTA.
const WARPS: usize = 4;
/// The most activation rows whose split-K partials a spread plan leaves in the workspace
/// ([`Plan::new_spread`]): with more, adding them in a cluster costs less (NVFP4, 4096 x
/// 4096, M = 16 on an H200, graph: 11.0 µs in clusters, 11.3 spread).
const SPREAD_PARTIAL_ROWS: usize = 8;
/// Row tiles the per-device counters cover (`Device::GEMV_COUNTERS`).
const MAX_TILES: usize = crate::device::GEMV_COUNTERS;

/// One side of a GEMV on prepared weights.
pub(crate) struct FastSide<'a> {
    pub(crate) w: &'a Fast,
    pub(crate) alpha: f32,
    pub(crate) epilogue: &'a DeviceEpilogue<'a>,
}

/// Stages of each warp's ring (`depth<MT>()`): 4 for M <= 8, 3 for M <= 16.
fn depth(m: usize) -> usize {
    if m > 8 { 3 } else { 4 }
}

/// 16-row groups per CTA (`Traits::kG`).
fn groups(scheme: Scheme) -> usize {
    if scheme.element().bits() == 4 { 4 } else { 2 }
}

/// The kernel's dynamic shared memory: 4 warps x stages x (groups x (one slab's codes,
/// 128 x bits bytes, and its scales as a stage holds them) + 1 KiB of activations per 8
/// activation rows; prepared.cu `stage_bytes`).
fn smem_bytes(scheme: Scheme, m: usize) -> usize {
    let code = 128 * scheme.element().bits() as usize;
    let scales = stage_scale_bytes(scheme);
    let tiles = if m > 8 { 2 } else { 1 };
    WARPS * depth(m) * (groups(scheme) * (code + scales) + tiles * 1024)
}

/// How a GEMV on prepared weights is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    tiles: usize,
    splits: usize,
    chunks_per_split: usize,
    workspace: usize,
    /// Every CTA is resident at once (tiles x splits within the GPU's slots): the kernel
    /// lets the next one on the stream launch from its start.
    one_wave: bool,
    /// The splits of a tile are one cluster (at least two activation rows, one wave of 2
    /// to [`MAX_CLUSTER`] splits whose clusters the GPU holds all at once, and where
    /// spreading the grid is on, more than [`SPREAD_PARTIAL_ROWS`] rows): they add their
    /// sums through distributed shared memory, with no partials in the workspace and no
    /// counters. The grid is then splits x tiles (clusters run along x).
    cluster: bool,
}

impl Plan {
    /// Whether the splits leave partial sums in the workspace for the last CTA of each tile.
    fn partials(&self) -> bool {
        self.splits > 1 && !self.cluster
    }

    /// At most how many CTAs an SM should hold for the grid to spread evenly over `sms`
    /// SMs: ceil(CTAs / SMs) for a one-wave grid, where that is fewer than the kernel's
    /// `per_sm` (the launch then pads its shared memory: [`Device::spread_smem`]). The
    /// scheduler otherwise fills some SMs to `per_sm` while the kernel before, under
    /// programmatic dependent launch, still holds slots on others, and the crowded SMs,
    /// whose CTAs share their issue slots, set the GEMV's time (docs/DECISIONS.md #68).
    /// None for clustered plans (their cluster counts were taken unpadded) and grids of
    /// more than a wave.
    fn spread(&self, sms: usize, per_sm: usize) -> Option<u32> {
        let ctas = self.tiles * self.splits;
        let even = ctas.div_ceil(sms.max(1));
        (self.one_wave && !self.cluster && even < per_sm).then_some(even as u32)
    }
}

/// The most K splits of `chunks` chunks: a split keeps at least one chunk per warp (and
/// there is always one).
fn max_splits(chunks: usize) -> usize {
    (chunks / WARPS).max(1).min(chunks.max(1))
}

/// How full the waves are when `ctas` CTAs run on `slots` resident ones.
fn wave_fill(ctas: usize, slots: usize) -> f64 {
    ctas as f64 / (ctas.div_ceil(slots) * slots) as f64
}

impl Plan {
    /// `slots`: CTAs resident at once on the whole GPU; `clusters(s)`: how many clusters
    /// of s CTAs it holds at once (0: none, or clusters are off).
    fn new(
        scheme: Scheme,
        (m, n, slabs): (usize, usize, usize),
        gated: bool,
        slots: usize,
        clusters: &dyn Fn(usize) -> usize,
    ) -> Self {
        let gout = groups(scheme) / if gated { 2 } else { 1 };
        let tiles = n.div_ceil(16).div_ceil(gout);
        let chunks = slabs / CHUNK;
        let wanted = if tiles <= slots {
            // Every CTA is resident at once: split K as far as one wave of CTAs holds,
            // which gives small matrices more warps to hide latency with.
            slots / tiles
        } else {
            // More than a wave, and the last may run nearly empty: up to 4 splits of at
            // least one chunk per warp when they fill the waves clearly better.
            let mut best = (1, wave_fill(tiles, slots));
            for s in 2..=4 {
                if chunks / s < WARPS {
                    break;
                }
                let fill = wave_fill(tiles * s, slots);
                if fill > best.1 + 0.05 {
                    best = (s, fill);
                }
            }
            best.0
        };
        let wanted = super::split_override().unwrap_or(wanted);
        Self::with_splits((m, n, tiles, chunks), gated, slots, clusters, wanted)
    }

    /// As [`Plan::new`] on a GPU of `sms` SMs whose one-wave unclustered grids are spread
    /// evenly ([`Plan::spread`]): the K splits that give the busiest SM the least work (its
    /// CTAs times a CTA's chunks); at equal work those that put at least two CTAs on it
    /// (more warps to hide latency with), then the fewest (each split adds partials, a
    /// counter and the last CTA's adds to the call). Such a plan takes no cluster, so it
    /// is spread, except where its partials would hold more than [`SPREAD_PARTIAL_ROWS`]
    /// activation rows and `new`'s plan adds them in a cluster instead. NVFP4 on an H200,
    /// graph replay: 16384 x 2048 takes 1 split instead of 2 (M = 1 10.1 -> 7.9 µs, M = 16
    /// 13.0 -> 10.3), 4096 x 4096 keeps 4 but unclustered from M = 2 to 8 (M = 2 8.4 ->
    /// 6.3 µs) and in clusters at M = 16 (docs/DECISIONS.md #68). Grids of more than a
    /// wave, and a split override, plan as `new` does.
    fn new_spread(
        scheme: Scheme,
        (m, n, slabs): (usize, usize, usize),
        gated: bool,
        (slots, sms): (usize, usize),
        clusters: &dyn Fn(usize) -> usize,
    ) -> Self {
        let base = Self::new(scheme, (m, n, slabs), gated, slots, clusters);
        if !base.one_wave || super::split_override().is_some() {
            return base;
        }
        let (tiles, chunks) = (base.tiles, slabs / CHUNK);
        let cost = |s: usize| {
            let per_split = chunks.div_ceil(s).max(1);
            let per_sm = (tiles * chunks.div_ceil(per_split)).div_ceil(sms.max(1));
            (per_sm * per_split, per_sm < 2, s)
        };
        let best = (1..=max_splits(chunks)).filter(|&s| tiles * s <= slots).min_by_key(|&s| cost(s)).unwrap_or(1);
        let spread = Self::with_splits((m, n, tiles, chunks), gated, slots, &|_| 0, best);
        if spread.partials() && m > SPREAD_PARTIAL_ROWS && base.cluster { base } else { spread }
    }

    /// The plan of `wanted` K splits (clamped to at least one chunk a warp) of `tiles` row
    /// tiles over `chunks` chunks.
    fn with_splits(
        (m, n, tiles, chunks): (usize, usize, usize, usize),
        gated: bool,
        slots: usize,
        clusters: &dyn Fn(usize) -> usize,
        wanted: usize,
    ) -> Self {
        let wanted = wanted.clamp(1, max_splits(chunks));
        let chunks_per_split = chunks.div_ceil(wanted).max(1);
        let splits = chunks.div_ceil(chunks_per_split).max(1);
        let mats = if gated { 2 } else { 1 };
        let one_wave = tiles * splits <= slots;
        // One activation row's partials are small enough that the last CTA adding them
        // through L2 costs no more than the cluster's barriers (measured: slightly less);
        // from two rows on, the cluster was faster on an unspread grid (docs/DECISIONS.md
        // #55; `new_spread` weighs it against a spread grid).
        let cluster = m >= 2 && one_wave && (2..=MAX_CLUSTER).contains(&splits) && clusters(splits) >= tiles;
        let workspace = if splits > 1 && !cluster { splits * mats * m * n * 4 } else { 0 };
        Self { tiles, splits, chunks_per_split, workspace, one_wave, cluster }
    }
}

/// The kernel and its plan.
fn prepare(dev: &Device, w: &Fast, m: usize, gated: bool, f16: bool) -> Result<(Kernel<PgemvParams>, Plan), CudaError> {
    let smem = smem_bytes(w.scheme, m);
    let kernel = dev.function_with_threads(&KernelName::pgemv(w.scheme, m, f16), THREADS, smem)?;
    // Plan from the bf16 kernel of the same M so the workspace needs no type.
    let planner = if f16 {
        dev.function_with_threads(&KernelName::pgemv(w.scheme, m, false), THREADS, smem)?
    } else {
        kernel.clone()
    };
    let slots = dev.sm_count() as usize * planner.blocks_per_sm as usize;
    let counts = if super::gemv_clusters() {
        let name = KernelName::pgemv(w.scheme, m, false);
        crate::device::active_clusters(dev, &planner, &name, (THREADS, smem))
    } else {
        [0; MAX_CLUSTER + 1]
    };
    let plan = if super::gemv_spread() {
        Plan::new_spread(w.scheme, (m, w.rows, w.slabs), gated, (slots, dev.sm_count() as usize), &|s| counts[s])
    } else {
        Plan::new(w.scheme, (m, w.rows, w.slabs), gated, slots, &|s| counts[s])
    };
    if plan.tiles > MAX_TILES {
        return Err(CudaError::TooLarge { rows: w.rows, k: w.k, limit: "the GEMV's row tiles exceed 65536" });
    }
    Ok((kernel, plan))
}

/// Workspace bytes of a GEMV of `m` rows on `w` (see [`super::gemv_workspace_size`]).
pub(super) fn workspace_size(dev: &Device, m: usize, w: &Fast, gated: bool) -> Result<usize, CudaError> {
    Ok(prepare(dev, w, m, gated, false)?.1.workspace)
}

/// Workspace bytes of the GEMV's own plan (`plan`) and of `decoded` bytes of bf16
/// activation rows after it, if any: (where they start, the total).
fn decoded_at(plan: usize, decoded: usize) -> (usize, usize) {
    if decoded > 0 {
        let at = plan.next_multiple_of(256);
        (at, at + decoded)
    } else {
        (0, plan)
    }
}

/// Workspace bytes of the GEMV of `m` rows of quantized activations (`K = w.k`) on `w`.
pub(crate) fn quantized_workspace_size(dev: &Device, m: usize, w: &Fast) -> Result<usize, CudaError> {
    Ok(decoded_at(workspace_size(dev, m, w, false)?, decoded_rows_bytes(m, w.k)).1)
}

/// Checks and queues the GEMV on prepared weights.
pub(super) fn run<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    sides: &[FastSide<'_>],
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let w = sides[0].w;
    if let Some(other) = sides.get(1) {
        let v = other.w;
        if (v.scheme, v.rows, v.k) != (w.scheme, w.rows, w.k) {
            return Err(CudaError::GatedMismatch { gate: (w.scheme, w.rows, w.k), up: (v.scheme, v.rows, v.k) });
        }
    }
    let alphas: Vec<f32> = sides.iter().map(|s| s.alpha * s.w.layout_factor()).collect();
    let checks: Vec<_> = sides.iter().zip(&alphas).map(|(s, &a)| (a, s.epilogue)).collect();
    check_request(&x, (w.rows, w.k), &checks, &out)?;
    let (x_ptr, g_x) = x.data.device_ptr(dev.stream());
    crate::checks::check_matrix::<I>(x.rows, w.k, x.row_stride, x.data.len(), x_ptr, "activations")?;
    let acts = Acts::Plain { ptr: x_ptr, stride: x.row_stride, f16: I::SUFFIX == "f16" };
    launch(dev, (acts, x.rows), sides, &alphas, out, grow)?;
    drop(g_x);
    Ok(())
}

/// Checks and queues the GEMV of quantized activations `a` (NVFP4 or MX, at most 16
/// rows, K checked against `side`'s weights by the caller) on prepared weights:
/// `side.alpha` is the pair's.
pub(crate) fn run_quantized<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    side: FastSide<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let m = a.shape().rows;
    super::check_rows(m)?;
    let alpha = side.alpha * side.w.layout_factor();
    super::check_shape_and_epilogue((side.w.rows, side.w.k), &[(alpha, side.epilogue)])?;
    check_output(&out, m, side.w.rows)?;
    launch(dev, (Acts::Quantized(a), m), &[side], &[alpha], out, grow)
}

/// Plans and queues the checked GEMV: the quantized activations' decode into the
/// workspace first, where there are any.
fn launch<O: DeviceElement>(
    dev: &Device,
    (acts, m): (Acts<'_>, usize),
    sides: &[FastSide<'_>],
    alphas: &[f32],
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let w = sides[0].w;
    let (n, k) = (w.rows, w.k);
    let gated = sides.len() == 2;
    let (kernel, plan) = prepare(dev, w, m, gated, acts.f16())?;
    let ring = smem_bytes(w.scheme, m);
    let smem = match plan.spread(dev.sm_count() as usize, kernel.blocks_per_sm as usize) {
        Some(per_sm) if super::gemv_spread() => dev.spread_smem(&kernel, ring, per_sm)?,
        _ => ring,
    };
    let (decoded, total) = decoded_at(plan.workspace, acts.decoded_bytes(m, k));
    let mut scratch = dev.scratch_for(total, grow && total > 0)?;
    let crate::device::Scratch { workspace, counters } = &mut *scratch;
    if plan.partials() && counters.is_none() {
        return Err(CudaError::WorkspaceTooSmall { needed: total, available: 0 });
    }
    let (ws_ptr, g_ws) = crate::device::scratch_ptr(workspace, total > 0, stream);
    let (cnt_ptr, g_cnt) = crate::device::scratch_ptr(counters, plan.partials(), stream);
    let (x_ptr, x_stride) = match acts {
        Acts::Plain { ptr, stride, .. } => (ptr, stride),
        Acts::Quantized(a) => {
            // bf16 rows of K (a multiple of 16: 16-byte aligned) after the partials.
            let at = ws_ptr + decoded as u64;
            crate::dequantize::launch_dequantize(dev, a, at, k, "bf16", 1.0)?;
            (at, k)
        }
    };
    let out_stride = out.row_stride;
    let (out_ptr, g_out) = out.data.device_ptr_mut(stream);

    let mut params = PgemvParams {
        x: x_ptr,
        out: out_ptr,
        partial: ws_ptr,
        counters: cnt_ptr,
        x_stride: x_stride as u64,
        out_stride: out_stride as u64,
        m: m as u32,
        n: n as u32,
        k: k as u32,
        slabs: w.slabs as u32,
        chunks: (w.slabs / CHUNK) as u32,
        out_kind: O::OUT_KIND,
        gated: gated as u32,
        splits: plan.splits as u32,
        chunks_per_split: plan.chunks_per_split as u32,
        early_dependents: (plan.one_wave && super::early_launch()) as u32,
        ..PgemvParams::default()
    };
    let mut guards = Vec::with_capacity(6);
    for (i, side) in sides.iter().enumerate() {
        let (d, g) = side.w.codes.device_ptr(stream);
        guards.push(g);
        let (s, g) = side.w.scales.device_ptr(stream);
        guards.push(g);
        params.w[i] = d;
        params.s[i] = s;
        params.alpha[i] = alphas[i];
        params.scale_add[i] = scale_add(side.w.scheme, side.w.shift);
        params.activation[i] = crate::gemm::activation_code(side.epilogue.activation) as u32;
        if let Some(b) = side.epilogue.bias {
            let (p, g) = b.device_ptr(stream);
            guards.push(g);
            params.bias[i] = p;
        }
    }
    let config = LaunchConfig {
        grid_dim: if plan.cluster {
            (plan.splits as u32, plan.tiles as u32, 1)
        } else {
            (plan.tiles as u32, plan.splits as u32, 1)
        },
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // The launch contract (ffi): the prepared codes and scales were made by PreparedLayout
    // for this scheme and shape (row groups padded to whole CTA tiles, slabs to whole
    // chunks), so every load the plan's grid issues is inside them; gate and up were
    // checked equal in scheme and shape; the dynamic shared memory is the ring prepared.cu
    // lays out or more (padded to spread the grid; it traps if given less). The
    // activations were checked for M rows of K at their stride with 16-byte aligned rows,
    // or decoded just before into the workspace after the partials (M rows of K bf16, K a
    // multiple of 16; the kernel reads them after its griddepcontrol.wait) (the kernel
    // zero-fills past M and K), the output for M x N at its stride, the bias for N values,
    // the workspace for the split-K partials and the counters for the plan's tiles (zero
    // between launches: the last CTA of each tile resets its counter), or, for a
    // clustered plan, clusters of its 2 to MAX_CLUSTER splits along x, which the kernel
    // reads from %cluster_nctarank. The guards keep every buffer alive and ordered until
    // the launch is queued on this device's stream. Before its griddepcontrol.wait the kernel reads
    // only the prepared weights, which nothing writes after PreparedWeights uploaded them.
    let order = Order::Dependent { cluster: if plan.cluster { plan.splits as u32 } else { 1 } };
    crate::ffi::launch::launch(stream, &kernel, config, order, &params)
        .map_err(CudaError::driver("launching the GEMV on prepared weights"))?;
    drop((g_ws, g_cnt, g_out, guards));
    Ok(())
}

#[cfg(test)]
mod tests {
    use blockscale_formats::Fp8Tile;

    use super::*;

    /// Room for any number of clusters, and for none.
    const ALL: fn(usize) -> usize = |_| usize::MAX;
    const NONE: fn(usize) -> usize = |_| 0;

    #[test]
    fn one_wave_grids_spread_evenly_over_the_sms() {
        // 64 tiles x 4 splits on 132 SMs of 4 slots: at most 2 a SM.
        let p = Plan::new(Scheme::NvFp4, (1, 4096, 64), false, 528, &NONE);
        assert_eq!((p.tiles, p.splits), (64, 4));
        assert_eq!(p.spread(132, 4), Some(2));
        // 448 CTAs need 4 a SM: nothing to spread.
        let big = Plan::new(Scheme::NvFp4, (1, 28672, 128), false, 528, &NONE);
        assert_eq!(big.spread(132, 4), None);
        // More than a wave: no spreading.
        let multi = Plan::new(Scheme::NvFp4, (1, 28672, 128), false, 396, &NONE);
        assert!(!multi.one_wave);
        assert_eq!(multi.spread(132, 3), None);
        // Clustered plans keep their shared memory.
        let four = Plan::new(Scheme::NvFp4, (4, 4096, 64), false, 528, &ALL);
        assert!(four.cluster);
        assert_eq!(four.spread(132, 4), None);
    }

    #[test]
    fn spread_plans_split_k_to_unload_the_busiest_sm() {
        let spread = |m, (n, slabs), slots| Plan::new_spread(Scheme::NvFp4, (m, n, slabs), false, (slots, 132), &ALL);
        // 16384 x 2048 (256 tiles, 8 chunks) on 132 SMs of 4 slots: one split (2 CTAs of 8
        // chunks on the busiest SM) rather than two (4 of 4), no partials, at any M.
        for m in [1, 2, 16] {
            let p = spread(m, (16384, 32), 528);
            assert_eq!((p.tiles, p.splits, p.workspace, p.cluster), (256, 1, 0, false), "M = {m}");
            assert_eq!(p.spread(132, 4), Some(2));
        }
        // 4096 x 4096 (64 tiles, 16 chunks): 4 splits (2 CTAs of 4), not 2 (1 of 8: the
        // same work with half the warps) nor 1 (64 SMs idle), their partials in the
        // workspace up to 8 rows...
        for m in [1, 2, 8] {
            let p = spread(m, (4096, 64), 528);
            assert_eq!((p.tiles, p.splits, p.chunks_per_split, p.cluster), (64, 4, 4, false), "M = {m}");
            assert_eq!(p.workspace, 4 * m * 4096 * 4);
            assert_eq!(p.spread(132, 4), Some(2));
        }
        // ... and 16 rows' partials in clusters, as `new` plans them.
        let p = spread(16, (4096, 64), 528);
        assert!(p.cluster);
        assert_eq!(p, Plan::new(Scheme::NvFp4, (16, 4096, 64), false, 528, &ALL));
        // Unless the GPU cannot hold the clusters: then spread, through the workspace.
        let p = Plan::new_spread(Scheme::NvFp4, (16, 4096, 64), false, (528, 132), &NONE);
        assert!(!p.cluster && p.partials());
        // 28672 x 8192: one wave unsplit, as `new` plans it.
        let p = spread(1, (28672, 128), 528);
        assert_eq!(p, Plan::new(Scheme::NvFp4, (1, 28672, 128), false, 528, &NONE));
        // More than a wave: as `new`.
        for m in [1, 4] {
            let p = spread(m, (28672, 128), 396);
            assert_eq!(p, Plan::new(Scheme::NvFp4, (m, 28672, 128), false, 396, &ALL));
        }
    }

    #[test]
    fn a_mostly_empty_last_wave_is_filled_by_splitting_k() {
        // 448 NVFP4 tiles of 64 rows on 396 slots fill 57% of two waves; 4 splits of 8
        // chunks (two per warp) fill 90%.
        let p = Plan::new(Scheme::NvFp4, (1, 28672, 128), false, 396, &ALL);
        assert_eq!((p.tiles, p.splits, p.chunks_per_split), (448, 4, 8));
        assert_eq!(p.workspace, 4 * 28672 * 4);
        // Two waves: the next kernel launches only after the main loop.
        assert!(!p.one_wave);
        // On 660 slots (five CTAs an SM) they all run at once: no split.
        let one = Plan::new(Scheme::NvFp4, (1, 28672, 128), false, 660, &ALL);
        assert_eq!((one.splits, one.workspace), (1, 0));
        assert!(one.one_wave);
        // 256 tiles of a 16384 x 2048 matrix fill 39% of 660 slots; two splits of one
        // chunk per warp fill 78%.
        let small = Plan::new(Scheme::NvFp4, (1, 16384, 32), false, 660, &ALL);
        assert_eq!((small.tiles, small.splits, small.chunks_per_split), (256, 2, 4));
        assert!(small.one_wave);
        // One activation row: the partials go through the workspace.
        assert!(!small.cluster && small.partials());
        assert_eq!(small.workspace, 2 * 16384 * 4);
        // Four rows, one wave of two splits: a cluster each, no partials in the workspace.
        let four = Plan::new(Scheme::NvFp4, (4, 16384, 32), false, 660, &ALL);
        assert!(four.cluster && !four.partials());
        assert_eq!((four.splits, four.workspace), (2, 0));
        // Unless clusters are off, or the GPU cannot hold all 256 clusters at once.
        for room in [NONE, |_| 255] {
            let plain = Plan::new(Scheme::NvFp4, (4, 16384, 32), false, 660, &room);
            assert!(!plain.cluster && plain.partials());
            assert_eq!(plain.workspace, 2 * 4 * 16384 * 4);
        }
    }

    #[test]
    fn few_rows_split_k_but_keep_a_chunk_per_warp() {
        // 40 rows: one tile; K = 4096 is 64 slabs, 16 chunks: at most 4 splits (one
        // chunk per warp).
        let p = Plan::new(Scheme::MxFp4, (3, 40, 64), false, 396, &ALL);
        assert_eq!((p.tiles, p.splits, p.chunks_per_split), (1, 4, 4));
        // K = 256: one chunk, no split, no workspace.
        let short = Plan::new(Scheme::MxFp4, (1, 40, 4), false, 396, &ALL);
        assert_eq!((short.splits, short.workspace), (1, 0));
        // Gated 8-bit: one 16-row group of each matrix per CTA.
        let g = Plan::new(Scheme::MxFp8E4M3, (1, 64, 64), true, 396, &NONE);
        assert_eq!(g.tiles, 4);
        assert_eq!(g.workspace, g.splits * 2 * 64 * 4);
        // Two rows as clusters (4 splits, one wave): no workspace.
        let gc = Plan::new(Scheme::MxFp8E4M3, (2, 64, 64), true, 396, &ALL);
        assert!(gc.cluster);
        assert_eq!((gc.splits, gc.workspace), (4, 0));
    }

    #[test]
    fn shared_memory_matches_the_kernel_layout() {
        // prepared.cu: kWarps x depth<MT> x (G x (code_slab_bytes + stage_scale_bytes) +
        // MT x 1024).
        assert_eq!(smem_bytes(Scheme::NvFp4, 1), 4 * 4 * (4 * (512 + 64) + 1024));
        assert_eq!(smem_bytes(Scheme::MxFp4, 8), 4 * 4 * (4 * (512 + 32) + 1024));
        assert_eq!(smem_bytes(Scheme::Int4G32, 9), 4 * 3 * (4 * (512 + 64) + 2048));
        assert_eq!(smem_bytes(Scheme::Int4G128, 1), 4 * 4 * (4 * (512 + 32) + 1024));
        assert_eq!(smem_bytes(Scheme::MxFp6E3M2, 1), 4 * 4 * (2 * (768 + 32) + 1024));
        assert_eq!(smem_bytes(Scheme::MxFp8E4M3, 16), 4 * 3 * (2 * (1024 + 32) + 2048));
        assert_eq!(smem_bytes(Scheme::Fp8Block(Fp8Tile::Tile128x128), 1), 4 * 4 * (2 * 1024 + 1024));
        assert_eq!(smem_bytes(Scheme::Fp8Block(Fp8Tile::Row1x128), 1), 4 * 4 * (2 * (1024 + 64) + 1024));
        // Four CTAs fit the 228 KiB of an H100 / H200 SM; one fits SM120's 99 KiB.
        for s in Scheme::ALL {
            for m in [1, 16] {
                assert!(4 * (smem_bytes(s, m) + 1024) <= 228 << 10, "{s:?} M={m}");
            }
        }
    }
}
