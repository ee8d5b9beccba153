//! Weight-only GEMM on [`PreparedWeights`]: bf16 or f16 activations times weights
//! decoded in registers inside the main loop, no dequantize pass. Which kernel runs:
//!
//! - M up to 16: the GEMV on the same weights.
//! - Hopper, bf16 activations (f16 for INT4 and FP8 block), M up to 1024 (INT4-G32: 256;
//!   from M = 17 on large weights, from M = 65 on small ones): `kernels/gemm/wgemm.cu`,
//!   warp-specialized `wgmma` with the decoded weights as its register operand.
//! - Otherwise up to M = 256 on Hopper (any M on SM120): `kernels/gemm/pgemm.cu`, the
//!   same decode into `mma.sync`.
//! - Larger M on Hopper: the weights decoded to bf16 in the workspace and CUTLASS's BF16
//!   GEMM (faster there: docs/DECISIONS.md #40 and #42).
//!
//! Quantized pairs on the same weights ([`gemm_prepared`]: NVFP4 or MX activations) take
//! the same kernels, the activations decoded to bf16 on their way into the workspace:
//! the GEMV up to M = 16, the wgmma kernel's tiling decodes them (Hopper, M up to 1024),
//! pgemm reads them decoded (SM120), CUTLASS's BF16 GEMM takes both operands decoded
//! above (docs/DECISIONS.md #47).

use blockscale_formats::{Epilogue, QuantizedMatrix, Scheme};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use ndarray::{Array2, ArrayView2};

use super::{DeviceEpilogue, DeviceMatrixMut, check_output, on_device, to_host};
use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::launch::{Kernel, MAX_CLUSTER, Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::PgemmParams;
use crate::gemv::{GEMV_MAX_ROWS, GemvInput};
use crate::prepared::{Acts, Fast, Inner, PreparedWeights, scale_add, stage_scale_bytes};
use crate::quantize::DeviceMatrix;
use crate::{CudaError, Device};

/// Threads per CTA (`kThreads`).
const THREADS: u32 = 128;
/// Stages of the ring (`kDepth`).
const DEPTH: usize = 4;
/// Bytes per activation row in a stage (`kActPitch`).
const ACT_PITCH: usize = 144;
/// Weight rows per CTA: two 4-group units of the layout (`kUnits`).
const TILE_N: usize = 128;
/// Activation rows per CTA (`BM`).
const TILE_M: usize = 64;
/// The fewest 64-element slabs a K split keeps.
const MIN_SPLIT_SLABS: usize = 8;
/// The largest M pgemm takes on Hopper; above it the weights are decoded to bf16 into
/// the workspace and CUTLASS's BF16 GEMM runs (measured on an H200: at M = 128 pgemm
/// takes 0.55-0.65x the time of that path, at M = 512 1.8x; see docs/KERNELS.md).
/// `BLOCKSCALE_GEMM_FUSED_MAX_M` overrides it.
const FUSED_MAX_M: usize = 256;

/// Threads per CTA of the Hopper wgmma kernel (wgemm.cu `kThreads`: two consumer
/// warpgroups and a producer warpgroup).
const WG_THREADS: u32 = 384;
/// Activation rows per CTA of the wgmma kernel (`BM`).
const WG_TILE: usize = 128;
/// Weight rows per CTA of the wgmma kernel (`BN`).
const WG_TILE_N: usize = 128;
/// Stages of its ring (`kDepth`).
const WG_DEPTH: usize = 6;
/// Floats a row of the epilogue's f32 sums (wgmma.cuh `kSumsLd`: padded by 4 against bank
/// conflicts).
const WG_SUMS_LD: usize = WG_TILE_N + 4;
/// Bytes of one (128-row tile, slab) of the activations in the order the wgmma kernel
/// reads them (`kActTile`).
const WG_ACT_TILE: usize = 128 * 128;

/// Whether the wgmma kernel may run (`BLOCKSCALE_GEMM_WGMMA=0` turns it off, for
/// comparisons).
fn wgmma_enabled() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| crate::tuning::env_on("BLOCKSCALE_GEMM_WGMMA"))
}

/// Whether the wgmma kernel takes f16 activations with `scheme`: INT4 and FP8 block,
/// whose elements are exact in f16 and whose scales enter in f32. (NVFP4 and MX weights
/// carry their block scale inside the bf16 weight, which f16's range cannot always
/// hold; with f16 activations they keep pgemm's two bf16 pieces.)
fn f16_wgmma(scheme: Scheme) -> bool {
    matches!(scheme, Scheme::Int4G32 | Scheme::Int4G128 | Scheme::Fp8Block(_))
}

/// The largest M the wgmma kernel takes; above it the prepared weights are decoded to
/// bf16 and CUTLASS's BF16 GEMM runs, which measured faster at M = 2048 (H100,
/// docs/DECISIONS.md #42).
const WGMMA_MAX_M: usize = 1024;
/// The same for INT4-G32 with bf16 activations, whose scale step every 32 elements
/// drains the tensor cores once a slab: the bf16 decode and CUTLASS measured as fast at
/// M = 512 and faster at 1024 (H200, docs/DECISIONS.md #43). With f16 activations that
/// route takes twice as long, and INT4-G32 keeps [`WGMMA_MAX_M`].
const WGMMA_G32_MAX_M: usize = 256;

/// The largest M the wgmma kernel takes for `scheme` and f16 (or bf16) activations:
/// `BLOCKSCALE_GEMM_WGMMA_MAX_M` where it is set (read once; for every scheme), else
/// [`WGMMA_MAX_M`] or [`WGMMA_G32_MAX_M`].
fn wgmma_max_m(scheme: Scheme, f16: bool) -> usize {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let set = *S.get_or_init(|| crate::tuning::env_usize("BLOCKSCALE_GEMM_WGMMA_MAX_M"));
    set.unwrap_or(if scheme == Scheme::Int4G32 && !f16 { WGMMA_G32_MAX_M } else { WGMMA_MAX_M })
}

/// Up to M = 64 the wgmma kernel (128 activation rows a tile) takes only weights of at
/// least this many elements: on smaller ones pgemm's 64-row tiles measured faster.
const WGMMA_SMALL_M_WEIGHTS: usize = 1 << 26;

/// Whether the wgmma kernel runs `m` activation rows (f16 or not) times `rows` x `k`
/// weights of `scheme` here: Hopper, bf16 activations (f16 for INT4 and FP8 block), M
/// beyond the GEMV's and within the range where it measured fastest.
fn uses_wgmma(dev: &Device, scheme: Scheme, (m, rows, k): (usize, usize, usize), f16: bool) -> bool {
    let in_range = m > GEMV_MAX_ROWS && m <= wgmma_max_m(scheme, f16) && (m > 64 || rows * k >= WGMMA_SMALL_M_WEIGHTS);
    dev.arch() == crate::Arch::Sm90 && (!f16 || f16_wgmma(scheme)) && in_range && wgmma_enabled()
}

/// The pre-scaled schemes (NVFP4, MX) may take the wgmma kernel's wide tiles
/// (`wgemm_{scheme}_wide`: 256 activation rows, the decode spent once per 256) only
/// above this M; `BLOCKSCALE_GEMM_WGMMA_WIDE_MIN_M` overrides it (a large value turns
/// them off).
const WGMMA_WIDE_MIN_M: usize = 128;
/// How much faster a wide tile's product runs than two 128-row tiles' (H200, NVFP4 and
/// MXFP8 E4M3 at 256 x 28672 x 8192, where both fill the same waves: 1.17 and 1.23;
/// docs/DECISIONS.md #65), the margin [`wide_tiles`] asks of them.
const WGMMA_WIDE_GAIN: f64 = 1.15;
/// The split tail's least K, in slabs: each half saves half a tile's main loop (at least
/// 16 slabs, about 6 µs on an H200) against the halves' adds through distributed shared
/// memory (about 3 µs for a 128 x 128 tile; docs/DECISIONS.md #68).
const TAIL_MIN_SLABS: usize = 32;
/// How the wgmma plan treats a last wave that is at most half full (`BLOCKSCALE_GEMM_TAIL`:
/// `0` never splits it, `1` splits it wherever the shape allows, whatever K; unset, the
/// rule of [`Plan::wgmma`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TailRule {
    Never,
    Rule,
    Always,
}

/// When the wgmma plan spreads tiles' slabs over the grid (stream-K, [`Plan::stream_k`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamK {
    /// Never.
    Never,
    /// The last wave of a plan of more tiles than slots, by the rule of [`Plan::stream_k`].
    Rule,
    /// That last wave wherever the shape allows, whatever K.
    Always,
    /// That, and every tile of a plan of fewer tiles than slots in place of its K splits
    /// (a measurement switch: measured slower than the splits at N = 7168, K = 2048;
    /// docs/DECISIONS.md #73).
    Everywhere,
}

/// The stream-K rule (`BLOCKSCALE_GEMM_SK`: `0` never, `1` wherever the kernel and shape
/// allow it on a last wave, `2` on every tile too; unset, the rule of [`Plan::stream_k`]).
fn sk_rule() -> StreamK {
    static S: std::sync::OnceLock<StreamK> = std::sync::OnceLock::new();
    *S.get_or_init(|| match crate::tuning::env_usize("BLOCKSCALE_GEMM_SK") {
        Some(0) => StreamK::Never,
        Some(1) => StreamK::Always,
        Some(_) => StreamK::Everywhere,
        None => StreamK::Rule,
    })
}
/// Slabs of main loop a stream-K tile's partial sums cost (written by each later range,
/// read back by the first: 64 KiB each way through L2), which a CTA's share must save.
const SK_COST_SLABS: usize = 8;
/// Bytes of one stream-K partial: 256 consumer threads x 64 f32 accumulators.
const SK_PARTIAL_BYTES: usize = 256 * 64 * 4;

fn tail_rule() -> TailRule {
    static S: std::sync::OnceLock<TailRule> = std::sync::OnceLock::new();
    *S.get_or_init(|| match crate::tuning::env_usize("BLOCKSCALE_GEMM_TAIL") {
        Some(0) => TailRule::Never,
        Some(_) => TailRule::Always,
        None => TailRule::Rule,
    })
}

/// At most this many persistent wgmma CTAs (`BLOCKSCALE_GEMM_WGMMA_CTAS`; unset: one per
/// slot of the GPU). The GPU bundle's tests cap it so that small shapes take several
/// waves and a split tail.
fn wgmma_ctas_cap() -> Option<usize> {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *S.get_or_init(|| crate::tuning::env_usize("BLOCKSCALE_GEMM_WGMMA_CTAS").filter(|&c| c >= 2))
}

/// Activation rows of a wide tile (`BMW`).
const WG_WIDE_TILE: usize = 256;
/// Activation rows a round of the wide tiles' epilogue (`kSumRows`).
const WG_WIDE_SUM_ROWS: usize = 64;
/// Hopper's dynamic shared memory a CTA (`kSmemLimit`).
const WG_SMEM_LIMIT: usize = 227 << 10;

/// Whether the wgmma kernel runs `m` x `n` outputs (K of `slabs` slabs) of `scheme` on
/// wide tiles with `slots` persistent CTAs: the pre-scaled schemes (those without an f16
/// wgmma kernel) above [`WGMMA_WIDE_MIN_M`], where the wide tiles need no K split (at
/// least half as many tiles as slots; their split-K epilogue measured slow) and the
/// busiest CTA's work, a wide tile counted as two 128-row ones made [`WGMMA_WIDE_GAIN`]
/// faster, is no more than with 128-row tiles ([`half_tiles`]: whole waves, less half a
/// tile where the last wave splits). That counts what each tiling pads M to: at M = 300
/// two wide tiles cover 512 rows and three 128-row ones 384. (M = 512, N = 28672: 448
/// wide tiles, 3.5 waves of 132 with the split tail, against 896 in 7; M = 512, N = 4096:
/// 64 wide tiles would split K.) `BLOCKSCALE_GEMM_WGMMA_WIDE=1` takes them wherever the
/// scheme and M allow (K split or not: the tests' second pass), `=0` never.
fn wide_tiles(scheme: Scheme, (m, n, slabs): (usize, usize, usize), f16: bool, slots: usize) -> bool {
    static S: std::sync::OnceLock<(usize, Option<usize>)> = std::sync::OnceLock::new();
    let (min, forced) = *S.get_or_init(|| {
        let min = crate::tuning::env_usize("BLOCKSCALE_GEMM_WGMMA_WIDE_MIN_M").unwrap_or(WGMMA_WIDE_MIN_M);
        (min, crate::tuning::env_usize("BLOCKSCALE_GEMM_WGMMA_WIDE"))
    });
    if f16 || f16_wgmma(scheme) || m <= min || slots == 0 || forced == Some(0) {
        return false;
    }
    if forced.is_some() {
        return true;
    }
    let tiles_n = n.div_ceil(WG_TILE_N);
    let (wide, narrow) = (tiles_n * m.div_ceil(WG_WIDE_TILE), tiles_n * m.div_ceil(WG_TILE));
    let work = |tiles: usize| half_tiles(tiles, slots, slabs, tail_rule()) as f64;
    2 * wide > slots && 2.0 * work(wide) <= WGMMA_WIDE_GAIN * work(narrow)
}

/// The busiest persistent CTA's work, in half tiles, for `tiles` tiles on `slots` CTAs
/// and K of `slabs` slabs: whole waves, less half a tile where [`Plan::wgmma`] would
/// split a last wave at most half full (taking the grid of clusters of two as every
/// slot).
fn half_tiles(tiles: usize, slots: usize, slabs: usize, rule: TailRule) -> usize {
    2 * tiles.div_ceil(slots.max(1)) - usize::from(tail_splits(tiles, slots, slabs, rule))
}

/// Whether `rule` lets the last wave of `tiles` tiles on a grid of `grid` CTAs split in K
/// halves: more tiles than the grid, the ones left over its whole waves at most half of
/// it, and (`Rule`) K of at least [`TAIL_MIN_SLABS`] slabs.
fn tail_splits(tiles: usize, grid: usize, slabs: usize, rule: TailRule) -> bool {
    let fits = grid > 0 && tiles > grid && {
        let left = tiles % grid;
        left > 0 && 2 * left <= grid
    };
    fits && match rule {
        TailRule::Never => false,
        TailRule::Always => true,
        TailRule::Rule => slabs >= TAIL_MIN_SLABS,
    }
}

/// The wgmma kernel's dynamic shared memory: stages of (activation tile + the tile's
/// 16-row groups' codes and scales, rounded up to 1 KiB), the epilogue's tile of f32
/// sums (rows of [`WG_SUMS_LD`] floats) and 1 KiB of alignment slack; wgemm.cu
/// `smem_bytes`. Wide tiles (`wide_smem_bytes`): stages of two activation tiles and the
/// codes and scales, as many as fit beside [`WG_WIDE_SUM_ROWS`] rows of sums, up to
/// [`WG_DEPTH`].
fn wg_smem_bytes(scheme: Scheme, wide: bool) -> usize {
    let code = 128 * scheme.element().bits() as usize;
    let weights = WG_TILE_N / 16 * (code + stage_scale_bytes(scheme));
    if wide {
        let stage = (2 * WG_ACT_TILE + weights).next_multiple_of(1024);
        let fixed = WG_WIDE_SUM_ROWS * WG_SUMS_LD * 4 + 1024;
        WG_DEPTH.min((WG_SMEM_LIMIT - fixed) / stage) * stage + fixed
    } else {
        let stage = (WG_ACT_TILE + weights).next_multiple_of(1024);
        WG_DEPTH * stage + WG_TILE * WG_SUMS_LD * 4 + 1024
    }
}

fn fused_max_m() -> usize {
    static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *S.get_or_init(|| crate::tuning::env_usize("BLOCKSCALE_GEMM_FUSED_MAX_M").unwrap_or(FUSED_MAX_M))
}

/// Whether a product of `m` activation rows takes the fused kernel here.
fn fused(dev: &Device, m: usize) -> bool {
    dev.arch() == crate::Arch::Sm120 || m <= fused_max_m()
}

/// Writes the prepared weights `w` (codes and scales at `ptrs`) as bf16, row-major with
/// row stride `ld` elements, at `to`.
pub(crate) fn launch_dequantize(dev: &Device, w: &Fast, ptrs: (u64, u64), to: u64, ld: usize) -> Result<(), CudaError> {
    let kernel = dev.function(&KernelName::pgemm_dequant(w.scheme))?;
    let jobs = w.rows.div_ceil(16) * w.k.div_ceil(64);
    let config = dev.grid_stride(32 * jobs as u64, &kernel);
    let params = PgemmParams {
        w: ptrs.0,
        s: ptrs.1,
        out: to,
        out_stride: ld as u64,
        n: w.rows as u32,
        k: w.k as u32,
        slabs: w.slabs as u32,
        scale_add: scale_add(w.scheme, w.shift),
        ..PgemmParams::default()
    };
    // The launch contract (ffi): the prepared codes and scales hold every (row group,
    // slab) the grid decodes, and the caller gives a destination of N rows of `ld >= K`
    // bf16 elements (the GEMM's workspace, sized by its plan).
    launch(dev.stream(), &kernel, config, Order::Serial, &params)
        .map_err(CudaError::driver("launching the prepared weights' dequantization"))
}

/// The kernel's dynamic shared memory: stages x (8 groups' codes and scales + 64
/// activation rows of ACT_PITCH bytes); pgemm.cu `stage_bytes`.
fn smem_bytes(scheme: Scheme) -> usize {
    let code = 128 * scheme.element().bits() as usize;
    let scales = stage_scale_bytes(scheme);
    DEPTH * (8 * (code + scales) + TILE_M * ACT_PITCH)
}

/// How the GEMM is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    tiles_n: usize,
    tiles_m: usize,
    splits: usize,
    slabs_per_split: usize,
    /// Bytes of the wgmma kernel's activation tiles at the start of the workspace (0
    /// for pgemm).
    image: usize,
    /// CTAs of the grid: one per tile and split for pgemm; for the persistent wgmma
    /// kernel no more than fit the GPU at once.
    ctas: usize,
    /// Workspace bytes: the activation tiles, then the split-K partial sums.
    workspace: usize,
    /// The wgmma kernel on wide tiles (256 activation rows; `tiles_m` counts them).
    wide: bool,
    /// The wgmma kernel's split tail: its last `tail` tiles (the last wave's) take two
    /// CTAs each, the K halves, in clusters of two (`splits` = 1); 0: none.
    tail: usize,
    /// The wgmma kernel's stream-K: its last `sk_tiles` tiles' slabs spread over every
    /// CTA, `sk_slabs` each; 0: none.
    sk_tiles: usize,
    sk_slabs: usize,
}

impl Plan {
    /// pgemm's plan: 64 x 128 tiles, `image` bytes of decoded activations first in the
    /// workspace.
    fn new((m, n, slabs): (usize, usize, usize), slots: usize, image: usize) -> Self {
        Self::tiled((m, n, slabs), slots, (TILE_N, TILE_M), image)
    }

    /// The wgmma kernel's plan: tiles of 128 weight rows by `tile_m` (128, or 256 for
    /// wide tiles) activation rows on at most `slots` persistent CTAs, the
    /// activation tiles first in the workspace. K splits only while the tiles leave slots
    /// idle, each split of at least [`MIN_SPLIT_SLABS`] slabs, the splits of a tile one
    /// cluster of at most [`MAX_CLUSTER`] CTAs, as many as the GPU holds every tile's
    /// cluster at once (`active(s)`: clusters of s CTAs resident at once). The splits add
    /// their sums in the cluster: the workspace holds only the activation tiles.
    ///
    /// With more tiles than slots and the last wave at most half full (the tiles left
    /// over a whole number of waves of a grid of clusters of two), those last tiles split
    /// K in halves, the two CTAs of a cluster adding them (a split tail): the call then
    /// takes the whole waves and half a tile instead of one more tile. `rule` says when:
    /// where that is shorter and K has at least [`TAIL_MIN_SLABS`] slabs (`Rule`),
    /// wherever the shape allows (`Always`) or never. Without a split tail, a last wave
    /// may instead be spread over every CTA by slabs (stream-K, [`Plan::stream_k`], as
    /// `sk` says); [`StreamK::Everywhere`] also spreads every tile of a plan of fewer
    /// tiles than slots, in place of its K splits.
    fn wgmma(
        (m, n, slabs): (usize, usize, usize),
        tile_m: usize,
        slots: usize,
        active: &dyn Fn(usize) -> usize,
        rule: TailRule,
        sk: StreamK,
    ) -> Self {
        // The activation tiles are of 128 rows whatever the GEMM's tile height.
        let image = m.div_ceil(WG_TILE) * slabs * WG_ACT_TILE;
        let (tiles_n, tiles_m) = (n.div_ceil(WG_TILE_N), m.div_ceil(tile_m));
        let tiles = tiles_n * tiles_m;
        // (Everywhere: no K splits; stream_k spreads the tiles instead.)
        let most = if tiles < slots && sk != StreamK::Everywhere {
            (slots / tiles).min(slabs / MIN_SPLIT_SLABS).clamp(1, MAX_CLUSTER)
        } else {
            1
        };
        // s splits of an even number of slabs (the pair-scaled schemes' scale steps).
        let split = |s: usize| {
            let per = slabs.div_ceil(s).next_multiple_of(2);
            (slabs.div_ceil(per), per)
        };
        let (splits, slabs_per_split) =
            (2..=most).rev().map(split).find(|&(s, _)| s > 1 && active(s) >= tiles).unwrap_or((1, slabs));
        let ctas = if splits > 1 { tiles * splits } else { tiles.min(slots) };
        let plain = Self {
            tiles_n,
            tiles_m,
            splits,
            slabs_per_split,
            image,
            ctas,
            workspace: image,
            wide: false,
            tail: 0,
            sk_tiles: 0,
            sk_slabs: 0,
        };
        // The split tail: a grid of clusters of two, its whole waves first; by the rule,
        // only where the busiest CTA's work in half tiles is less than without it.
        let grid = slots.min(2 * active(2)) & !1;
        let shorter = || 2 * (tiles / grid) + 1 < 2 * tiles.div_ceil(slots);
        if splits > 1
            || tiles <= slots
            || !tail_splits(tiles, grid, slabs, rule)
            || (rule == TailRule::Rule && !shorter())
        {
            return plain.stream_k(slabs, slots, sk);
        }
        Self { ctas: grid, tail: tiles % grid, ..plain }
    }

    /// Stream-K (wgmma.cuh `sk_setup`) for a plan of more tiles than `slots` without a
    /// split tail: after the whole waves, the last wave's tiles' slabs spread evenly over
    /// every CTA (an even number each), the CTA holding a tile's first slab adding the
    /// others' partial sums, which the workspace holds after the activation tiles
    /// (`ceil(slabs / share)` slots a tile, one per later range at most). `sk` says when:
    /// where a CTA's share of the last wave plus [`SK_COST_SLABS`] is less than a tile's
    /// slabs, with at least [`TAIL_MIN_SLABS`] of them (`Rule`), wherever possible
    /// (`Always`), or never; `Everywhere` also spreads every tile of a plan of fewer tiles
    /// than slots (which then has no K splits). (The kernel takes it on 128-row tiles of
    /// the schemes other than INT4-G32; the caller clears it elsewhere.)
    fn stream_k(self, slabs: usize, slots: usize, sk: StreamK) -> Self {
        let tiles = self.tiles_n * self.tiles_m;
        // Fewer tiles than slots: every tile's slabs (Everywhere), where each CTA's share
        // is less than a tile's.
        let every = tiles < slots && sk == StreamK::Everywhere;
        if self.splits > 1 || self.tail > 0 || (tiles <= slots && !every) || sk == StreamK::Never {
            return self;
        }
        let left = tiles % slots;
        let share = (left * slabs).div_ceil(slots).next_multiple_of(2);
        let wanted = match sk {
            StreamK::Rule => slabs >= TAIL_MIN_SLABS && share + SK_COST_SLABS < slabs,
            _ => !every || share < slabs,
        };
        if left == 0 || !wanted {
            return self;
        }
        let partials = left * slabs.div_ceil(share) * SK_PARTIAL_BYTES;
        Self { ctas: slots, sk_tiles: left, sk_slabs: share, workspace: self.image + partials, ..self }
    }

    fn tiled(
        (m, n, slabs): (usize, usize, usize),
        slots: usize,
        (tile_n, tile_m): (usize, usize),
        image: usize,
    ) -> Self {
        let tiles_n = n.div_ceil(tile_n);
        let tiles_m = m.div_ceil(tile_m);
        let ctas = tiles_n * tiles_m;
        // Split K while the tiles leave slots idle, keeping MIN_SPLIT_SLABS slabs a split.
        let wanted = if ctas < slots { (slots / ctas).min(slabs / MIN_SPLIT_SLABS).max(1) } else { 1 };
        let slabs_per_split = slabs.div_ceil(wanted).next_multiple_of(2);
        let splits = slabs.div_ceil(slabs_per_split);
        let workspace = image + if splits > 1 { splits * m * n * 4 } else { 0 };
        Self {
            tiles_n,
            tiles_m,
            splits,
            slabs_per_split,
            image,
            ctas: tiles_n * tiles_m * splits,
            workspace,
            wide: false,
            tail: 0,
            sk_tiles: 0,
            sk_slabs: 0,
        }
    }
}

/// The fused kernel and its launch plan: the wgmma kernel where `uses_wgmma` said so
/// (`wgmma`), pgemm otherwise.
/// `image`: pgemm's workspace bytes for the activations ahead of its partial sums
/// ([`Acts::decoded_bytes`]); the wgmma plan sizes its activation tiles itself.
fn plan(
    dev: &Device,
    w: &Fast,
    (m, image): (usize, usize),
    f16: bool,
    wgmma: bool,
) -> Result<(Kernel<PgemmParams>, Plan), CudaError> {
    let (kernel, plan) = if wgmma {
        // Every scheme has a wgmma kernel for bf16 activations, the post-scaled ones for
        // f16 (see `f16_wgmma`).
        let wide = wide_tiles(w.scheme, (m, w.rows, w.slabs), f16, dev.sm_count() as usize);
        let name = if wide { KernelName::wgemm_wide(w.scheme) } else { KernelName::wgemm(w.scheme, f16) };
        let smem = wg_smem_bytes(w.scheme, wide);
        let kernel = dev.function_with_threads(&name, WG_THREADS, smem)?;
        let slots = dev.sm_count() as usize * kernel.blocks_per_sm as usize;
        let slots = wgmma_ctas_cap().map_or(slots, |c| c.min(slots));
        let counts = crate::device::active_clusters(dev, &kernel, &name, (WG_THREADS, smem));
        let tile_m = if wide { WG_WIDE_TILE } else { WG_TILE };
        // Stream-K on the 128-row tiles of every scheme but INT4-G32 (wgemm.cu `stream_k`).
        let sk = if wide || w.scheme == Scheme::Int4G32 { StreamK::Never } else { sk_rule() };
        let plan = Plan::wgmma((m, w.rows, w.slabs), tile_m, slots, &|s| counts[s], tail_rule(), sk);
        (kernel, Plan { wide, ..plan })
    } else {
        let kernel = dev.function_with_threads(&KernelName::pgemm(w.scheme, f16), THREADS, smem_bytes(w.scheme))?;
        let slots = dev.sm_count() as usize * kernel.blocks_per_sm as usize;
        (kernel, Plan::new((m, w.rows, w.slabs), slots, image))
    };
    if plan.tiles_n * plan.tiles_m > crate::device::GEMV_COUNTERS || plan.tiles_m > 65535 {
        return Err(CudaError::TooLarge { rows: w.rows, k: w.k, limit: "the GEMM's tiles exceed 65536" });
    }
    Ok((kernel, plan))
}

/// Checks and queues the GEMM (M > 16) or the GEMV (M <= 16) on prepared weights.
fn run<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let f = match &w.inner {
        // Kept in its checkpoint layout: the general weight-only GEMM.
        Inner::Plain { w, .. } => {
            return if grow {
                let alpha = epilogue.alpha_weight_only(w.scheme(), w.global_scale());
                super::run(dev, super::Lhs::Activations(x), w, alpha, epilogue, out, true)
            } else {
                super::gemm_weight_only_into(dev, x, w, epilogue, out)
            };
        }
        Inner::Fast(f) => f,
    };
    if x.rows <= GEMV_MAX_ROWS && x.rows > 0 {
        return crate::gemv::gemv_run(dev, x, w.into(), epilogue, out, grow);
    }
    let f16 = I::SUFFIX == "f16";
    let wgmma = uses_wgmma(dev, f.scheme, (x.rows, f.rows, f.k), f16);
    if !wgmma && !fused(dev, x.rows) {
        // Large M: bf16 weights in the workspace, CUTLASS's BF16 GEMM.
        super::check_activations(&x)?;
        let alpha = epilogue.alpha_weight_only(f.scheme, f.global_scale) * f.dequant_factor();
        return super::run_rhs(dev, super::Lhs::Activations(x), super::Rhs::Prepared(f), alpha, epilogue, out, grow);
    }
    if x.k != f.k {
        return Err(CudaError::KMismatch { a: x.k, b: f.k });
    }
    let stream = dev.stream();
    let (x_ptr, g_x) = x.data.device_ptr(stream);
    crate::checks::check_matrix::<I>(x.rows, x.k, x.row_stride, x.data.len(), x_ptr, "activations")?;
    let alpha = epilogue.alpha_weight_only(f.scheme, f.global_scale);
    let acts = Acts::Plain { ptr: x_ptr, stride: x.row_stride, f16 };
    launch_fused(dev, f, (acts, x.rows), Route { wgmma, grow }, alpha, epilogue, out)?;
    drop(g_x);
    Ok(())
}

/// Which fused kernel runs (`wgmma`: wgemm.cu, else pgemm.cu) and whether the
/// workspace may grow.
#[derive(Clone, Copy)]
struct Route {
    wgmma: bool,
    grow: bool,
}

/// Checks the epilogue and output and queues the fused GEMM on `f` for `m` rows of
/// `acts`: the activation tiles (wgmma) or decoded activations (pgemm, quantized
/// activations) into the workspace first, the split-K reduction after. `alpha` is the
/// user's; the layout's factor is applied here.
fn launch_fused<O: DeviceElement>(
    dev: &Device,
    f: &Fast,
    (acts, m): (Acts<'_>, usize),
    route: Route,
    alpha: f32,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let (n, k) = (f.rows, f.k);
    let alpha = alpha * f.layout_factor();
    if !alpha.is_finite() {
        return Err(CudaError::InvalidAlpha(alpha));
    }
    if let Some(bias) = epilogue.bias
        && bias.len() != n
    {
        return Err(CudaError::BiasLength { expected: n, actual: bias.len() });
    }
    check_output(&out, m, n)?;
    let wgmma = route.wgmma;
    let image = if wgmma { 0 } else { acts.decoded_bytes(m, k) };
    let (kernel, plan) = plan(dev, f, (m, image), acts.f16(), wgmma)?;
    let mut scratch = dev.scratch_for(plan.workspace, route.grow && plan.workspace > 0)?;
    let crate::device::Scratch { workspace, counters } = &mut *scratch;
    if plan.sk_tiles > 0 && counters.is_none() {
        return Err(CudaError::WorkspaceTooSmall { needed: plan.workspace, available: 0 });
    }
    let (ws_ptr, g_ws) = crate::device::scratch_ptr(workspace, plan.workspace > 0, stream);
    let (cnt_ptr, g_cnt) = crate::device::scratch_ptr(counters, plan.sk_tiles > 0, stream);
    let out_stride = out.row_stride;
    let (out_ptr, g_out) = out.data.device_ptr_mut(stream);
    let (w_ptr, g_w) = f.codes.device_ptr(stream);
    let (s_ptr, g_s) = f.scales.device_ptr(stream);
    let (bias_ptr, g_b) = crate::device::optional_ptr(epilogue.bias, stream);
    let (x_ptr, x_stride) = match acts {
        Acts::Plain { ptr, stride, .. } => (ptr, stride),
        // Decoded into the workspace below.
        Acts::Quantized(_) => (ws_ptr, k),
    };
    let mut params = PgemmParams {
        x: x_ptr,
        w: w_ptr,
        s: s_ptr,
        bias: bias_ptr,
        out: out_ptr,
        partial: ws_ptr + plan.image as u64,
        x_stride: x_stride as u64,
        out_stride: out_stride as u64,
        alpha,
        scale_add: scale_add(f.scheme, f.shift),
        m: m as u32,
        n: n as u32,
        k: k as u32,
        slabs: f.slabs as u32,
        out_kind: O::OUT_KIND,
        activation: super::activation_code(epilogue.activation) as u32,
        splits: plan.splits as u32,
        slabs_per_split: plan.slabs_per_split as u32,
        tail: plan.tail as u32,
        sk_tiles: plan.sk_tiles as u32,
        sk_slabs: plan.sk_slabs as u32,
        counters: cnt_ptr,
    };
    // Whole 8-element chunks: K is a multiple of every scheme's block, 16 at the least.
    debug_assert!(k % 16 == 0, "the weights hold whole blocks along K");
    if wgmma {
        // The activations in the wgmma kernel's tile order, into the workspace.
        let tiles = PgemmParams { out: ws_ptr, ..params };
        // Eight threads per (row, slab).
        let items = (m.div_ceil(WG_TILE) * WG_TILE * f.slabs * 8) as u64;
        match acts {
            Acts::Plain { .. } => {
                let tiling = dev.function(&KernelName::wgemm_acts(f.scheme))?;
                let config = dev.grid_stride(items, &tiling);
                // The launch contract (ffi): the kernel reads the checked activations (M
                // rows of K at their stride, nothing past K) and writes tiles_m x slabs
                // tiles of WG_ACT_TILE bytes at the start of the workspace, which the
                // plan sized for them.
                launch(stream, &tiling, config, Order::DEPENDENT, &tiles)
            }
            Acts::Quantized(a) => {
                let tiling = dev.function(&KernelName::wgemm_acts_quantized(a.scheme()))?;
                let config = dev.grid_stride(items, &tiling);
                let (a_data, g_ad) = a.data().device_ptr(stream);
                let (a_scales, g_as) = a.scales().ptr(stream);
                let source = crate::dequantize::dequant_params(a, (a_data, a_scales), 0, 0, 1.0);
                // The launch contract (ffi): `source` describes `a`, a validated
                // DeviceQuantized of M x K (its codes and scales have the sizes its shape
                // implies); the output of `tiles` is the workspace's tiles_m x slabs tiles
                // of WG_ACT_TILE bytes, as above. The guards keep `a` alive until the
                // launch is queued.
                let queued = launch(stream, &tiling, config, Order::DEPENDENT, &(source, tiles));
                drop((g_ad, g_as));
                queued
            }
        }
        .map_err(CudaError::driver("launching the wgmma GEMM's activation tiling"))?;
        params.x = ws_ptr;
    } else if let Acts::Quantized(a) = acts {
        // pgemm reads bf16 rows: the activations decoded as `dequantize` does.
        crate::dequantize::launch_dequantize(dev, a, ws_ptr, k, "bf16", 1.0)?;
    }
    let config = if wgmma {
        // Persistent: each CTA takes tiles ctas apart (wgemm.cu `tile_at`).
        LaunchConfig {
            grid_dim: (plan.ctas as u32, 1, 1),
            block_dim: (WG_THREADS, 1, 1),
            shared_mem_bytes: wg_smem_bytes(f.scheme, plan.wide) as u32,
        }
    } else {
        LaunchConfig {
            grid_dim: (plan.tiles_n as u32, plan.tiles_m as u32, plan.splits as u32),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: smem_bytes(f.scheme) as u32,
        }
    };
    let cluster = match (wgmma, plan.tail) {
        (false, _) => 1,
        (true, 0) => plan.splits as u32,
        (true, _) => 2,
    };
    // The launch contract (ffi): the prepared codes and scales hold whole pairs of 4-group
    // units (128 rows) and a multiple of 4 slabs, so every copy of the grid's tiles is
    // inside them; the activations were checked for M rows of K at a stride keeping rows
    // 16-byte aligned, or decoded into the workspace at the start (K a multiple of 16: rows
    // of 32-byte multiples) (pgemm zero-fills past M and K; the wgmma kernel reads instead
    // the tiles written by the launch above, whole tiles of slabs the weights hold), the
    // output for M x N at its stride, the bias for N values, the workspace for pgemm's
    // split-K partial sums after the activations (the wgmma kernel adds its splits in the
    // cluster); the dynamic shared memory is what pgemm.cu or wgemm.cu lays out (each traps
    // if given less). Before its griddepcontrol.wait the kernel reads only the prepared
    // weights. The guards keep every buffer alive and ordered until the launch is queued on
    // this device's stream. With K split on the wgmma kernel, the splits of a tile are one
    // cluster (at most MAX_CLUSTER): the grid is one CTA per tile and split, a multiple of
    // the cluster, as wgemm.cu's tile order expects; with a split tail, the persistent
    // grid is of clusters of two, all resident at once, and its whole waves (the tiles
    // before the tail) a multiple of it, so each tail tile's halves meet in one cluster.
    launch(stream, &kernel, config, Order::Dependent { cluster }, &params)
        .map_err(CudaError::driver("launching the GEMM on prepared weights"))?;
    if plan.splits > 1 && !wgmma {
        let reduce = dev.function(&KernelName::pgemm_reduce())?;
        let config = dev.grid_stride((m * n) as u64, &reduce);
        // As above: the reduction reads the partial sums the GEMM wrote into the workspace
        // (splits x M x N f32, after its griddepcontrol.wait for the GEMM) and writes the
        // checked output.
        launch(stream, &reduce, config, Order::DEPENDENT, &params)
            .map_err(CudaError::driver("launching the GEMM's split-K reduction"))?;
    }
    drop((g_ws, g_cnt, g_out, g_w, g_s, g_b));
    Ok(())
}

/// Weight-only GEMM on prepared weights: activations `x` (M x K bf16 or f16 on the
/// device, rows 16-byte aligned) times `w` (N x K), into a new contiguous M x N buffer of
/// `O`. The weights are decoded in registers inside the main loop (no dequantize pass);
/// M up to 16 runs the GEMV. Grows the device's workspace if the shape splits K.
///
/// # Errors
/// [`CudaError::KMismatch`], [`CudaError::BadStride`], [`CudaError::BufferLength`] and
/// [`CudaError::Misaligned`] for `x`, [`CudaError::BiasLength`],
/// [`CudaError::InvalidAlpha`], [`CudaError::TooLarge`], [`CudaError::OutOfMemory`],
/// [`CudaError::Driver`].
pub fn gemm_weight_only_prepared<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    let (m, n) = (x.rows, w.shape().0);
    if m == 0 {
        return Err(blockscale_formats::FormatError::EmptyShape { rows: 0, cols: x.k }.into());
    }
    let mut out = super::alloc_output::<O>(dev, m, n)?;
    run(dev, x, w, epilogue, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemm_weight_only_prepared`] into caller memory: allocates nothing and never
/// synchronizes (reserve [`gemm_weight_only_prepared_workspace_size`] first when it is
/// not zero), so it can be captured in a CUDA graph.
///
/// # Errors
/// As [`gemm_weight_only_prepared`], plus [`CudaError::OutputShape`],
/// [`CudaError::StrideTooSmall`], [`CudaError::BufferLength`] for the output and
/// [`CudaError::WorkspaceTooSmall`].
pub fn gemm_weight_only_prepared_into<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    run(dev, x, w, epilogue, out, false)
}

/// Workspace bytes [`gemm_weight_only_prepared_into`] needs for these activations,
/// weights and output type with an output row stride of `out_row_stride` elements.
/// Reserve it with [`Device::reserve_workspace`] before capturing a graph.
///
/// # Errors
/// As [`gemm_weight_only_prepared`].
pub fn gemm_weight_only_prepared_workspace_size<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: DeviceMatrix<'_, I>,
    w: &PreparedWeights,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    match &w.inner {
        Inner::Plain { w: q, .. } => super::gemm_weight_only_workspace_size::<I, O>(dev, x, q, out_row_stride),
        Inner::Fast(_) if x.rows <= GEMV_MAX_ROWS => crate::gemv::gemv_workspace_size(dev, x.rows, w, false),
        Inner::Fast(f) => {
            let f16 = I::SUFFIX == "f16";
            let wgmma = uses_wgmma(dev, f.scheme, (x.rows, f.rows, f.k), f16);
            if !wgmma && !fused(dev, x.rows) {
                super::weight_only_workspace::<I, O>(dev, x, super::Rhs::Prepared(f), out_row_stride)
            } else {
                Ok(plan(dev, f, (x.rows, 0), f16, wgmma)?.1.workspace)
            }
        }
    }
}

/// Host convenience for [`gemm_weight_only_prepared`]: copies `x` and the bias over, runs
/// the product and copies the M x N result back (waiting for it).
///
/// # Errors
/// As [`gemm_weight_only_prepared`].
pub fn gemm_weight_only_prepared_host<I: GemvInput, O: DeviceElement>(
    dev: &Device,
    x: ArrayView2<'_, I>,
    w: &PreparedWeights,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    crate::gemv::on_host_rows(dev, x, w.shape(), |xm| {
        on_device(dev, epilogue, |epi| gemm_weight_only_prepared::<I, O>(dev, xm, w, epi))
    })
}

/// Where a quantized pair on prepared weights runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PairRoute {
    /// Up to 16 rows: the GEMV on the prepared weights, the activations decoded into
    /// its workspace.
    Gemv,
    /// The fused kernels: the wgmma one (`true`) or pgemm.
    Fused(bool),
    /// Both operands decoded to bf16 and CUTLASS's BF16 GEMM (Hopper, M above the wgmma
    /// kernel's range).
    Cutlass,
}

/// Checks the pair and picks its route.
fn pair_route(dev: &Device, a: &DeviceQuantized, f: &Fast) -> Result<PairRoute, CudaError> {
    super::check_schemes((a.scheme(), a.shape().k), (f.scheme, f.k))?;
    if matches!(f.scheme, Scheme::Fp8Block(_)) {
        return Err(CudaError::UnsupportedPair {
            a: a.scheme(),
            b: f.scheme,
            hint: "FP8 block pairs run on the FP8 tensor cores from the checkpoint layout: multiply them with gemm",
        });
    }
    let m = a.shape().rows;
    if m <= GEMV_MAX_ROWS {
        return Ok(PairRoute::Gemv);
    }
    // The weight-only product's rule: the activations are bf16 by the time the kernels
    // read them.
    let wgmma = uses_wgmma(dev, f.scheme, (m, f.rows, f.k), false);
    Ok(if wgmma || fused(dev, m) { PairRoute::Fused(wgmma) } else { PairRoute::Cutlass })
}

/// Checks and queues a quantized pair on prepared weights.
fn run_pair<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
    grow: bool,
) -> Result<(), CudaError> {
    let f = match &w.inner {
        // Kept in its checkpoint layout: the pair GEMM.
        Inner::Plain { w, .. } => {
            super::check_pair(a, w)?;
            let alpha = epilogue.alpha_quantized(a.global_scale(), w.global_scale());
            return super::run(dev, super::Lhs::<half::bf16>::Quantized(a), w, alpha, epilogue, out, grow);
        }
        Inner::Fast(f) => f,
    };
    let alpha = epilogue.alpha_quantized(a.global_scale(), f.global_scale);
    match pair_route(dev, a, f)? {
        PairRoute::Gemv => {
            let side = crate::gemv::FastSide { w: f, alpha, epilogue };
            crate::gemv::run_quantized(dev, a, side, out, grow)
        }
        PairRoute::Fused(wgmma) => {
            launch_fused(dev, f, (Acts::Quantized(a), a.shape().rows), Route { wgmma, grow }, alpha, epilogue, out)
        }
        PairRoute::Cutlass => {
            let (lhs, rhs) = (super::Lhs::<half::bf16>::Quantized(a), super::Rhs::Prepared(f));
            super::run_rhs(dev, lhs, rhs, alpha * f.dequant_factor(), epilogue, out, grow)
        }
    }
}

/// The GEMM of quantized activations `a` (M x K: NVFP4 or MX, on the device) and
/// prepared weights `w` (N x K), into a new contiguous M x N buffer of `O`: the pairs of
/// [`gemm`](super::gemm) (NVFP4 x NVFP4, any MX x any MX) on the weights the GEMV and
/// the weight-only GEMM read. The activations are decoded to bf16 exactly on their way
/// into the kernels' workspace (they are small next to the weights); the weights are
/// decoded in registers inside the main loop, as in [`gemm_weight_only_prepared`] (M up
/// to 16: the GEMV). Weights kept in their checkpoint layout run
/// [`gemm`](super::gemm). Grows the device's workspace if needed; nothing is waited for.
///
/// ```no_run
/// use blockscale_cuda::{Device, DeviceEpilogue, DeviceQuantized, PreparedWeights, gemm_prepared};
/// # fn f(dev: &Device, a: &DeviceQuantized, w: &PreparedWeights) -> Result<(), blockscale_cuda::CudaError> {
/// let d = gemm_prepared::<half::bf16>(dev, a, w, &DeviceEpilogue::default())?; // M x N
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`CudaError::UnsupportedPair`] (also for FP8 block, whose pairs read the checkpoint
/// layout: use [`gemm`](super::gemm)), [`CudaError::KMismatch`],
/// [`CudaError::BiasLength`], [`CudaError::InvalidAlpha`], [`CudaError::TooLarge`],
/// [`CudaError::OutOfMemory`], [`CudaError::Cutlass`], [`CudaError::Driver`].
pub fn gemm_prepared<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
) -> Result<CudaSlice<O>, CudaError> {
    let (m, n) = (a.shape().rows, w.shape().0);
    let mut out = super::alloc_output::<O>(dev, m, n)?;
    run_pair(dev, a, w, epilogue, DeviceMatrixMut::new(&mut out, m, n), true)?;
    Ok(out)
}

/// [`gemm_prepared`] into caller memory: allocates nothing and never synchronizes
/// (reserve [`gemm_prepared_workspace_size`] first when it is not zero), so it can be
/// captured in a CUDA graph.
///
/// # Errors
/// As [`gemm_prepared`], plus [`CudaError::OutputShape`], [`CudaError::StrideTooSmall`],
/// [`CudaError::BufferLength`] for the output and [`CudaError::WorkspaceTooSmall`].
pub fn gemm_prepared_into<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    w: &PreparedWeights,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    run_pair(dev, a, w, epilogue, out, false)
}

/// Workspace bytes [`gemm_prepared_into`] needs for these operands and output type with
/// an output row stride of `out_row_stride` elements. Reserve it with
/// [`Device::reserve_workspace`] before capturing a graph.
///
/// # Errors
/// As [`gemm_prepared`].
pub fn gemm_prepared_workspace_size<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    w: &PreparedWeights,
    out_row_stride: usize,
) -> Result<usize, CudaError> {
    let f = match &w.inner {
        Inner::Plain { w, .. } => return super::gemm_workspace_size::<O>(dev, a, w, out_row_stride),
        Inner::Fast(f) => f,
    };
    let m = a.shape().rows;
    match pair_route(dev, a, f)? {
        PairRoute::Gemv => crate::gemv::quantized_workspace_size(dev, m, f),
        PairRoute::Fused(wgmma) => {
            let image = if wgmma { 0 } else { Acts::Quantized(a).decoded_bytes(m, f.k) };
            Ok(plan(dev, f, (m, image), false, wgmma)?.1.workspace)
        }
        PairRoute::Cutlass => super::pair_workspace::<O>(dev, a, super::Rhs::Prepared(f), out_row_stride),
    }
}

/// Host convenience for [`gemm_prepared`]: copies `a` and the bias over, runs the product
/// and copies the M x N result back (waiting for it).
///
/// # Errors
/// As [`gemm_prepared`].
pub fn gemm_prepared_host<O: DeviceElement>(
    dev: &Device,
    a: &QuantizedMatrix,
    w: &PreparedWeights,
    epilogue: &Epilogue<'_>,
) -> Result<Array2<O>, CudaError> {
    // The pair rule first, before anything is uploaded.
    super::check_schemes((a.scheme(), a.shape().k), (w.scheme(), w.shape().1))?;
    let da = DeviceQuantized::from_host(dev, a)?;
    let y = on_device(dev, epilogue, |epi| gemm_prepared::<O>(dev, &da, w, epi))?;
    to_host(dev, &y, a.shape().rows, w.shape().0)
}

#[cfg(test)]
mod tests {
    use blockscale_formats::Fp8Tile;

    use super::*;

    #[test]
    fn small_m_splits_k_to_fill_the_gpu() {
        // M = 128, N = K = 4096: 32 x 2 tiles on 396 slots (three CTAs an SM): 6 splits
        // of 12 slabs (the last 4).
        let p = Plan::new((128, 4096, 64), 396, 0);
        assert_eq!((p.tiles_n, p.tiles_m, p.splits, p.slabs_per_split), (32, 2, 6, 12));
        assert_eq!(p.workspace, 6 * 128 * 4096 * 4);
        // M = 4096: 2048 CTAs, no split.
        let big = Plan::new((4096, 4096, 64), 396, 0);
        assert_eq!((big.tiles_m, big.splits, big.workspace), (64, 1, 0));
        // K = 512 (8 slabs): never split.
        assert_eq!(Plan::new((32, 256, 8), 396, 0).splits, 1);
        // Quantized activations on pgemm: their bf16 rows first, the partial sums after.
        assert_eq!(Acts::Plain { ptr: 0, stride: 4096, f16: false }.decoded_bytes(128, 4096), 0);
        let q = Plan::new((128, 4096, 64), 396, 128 * 4096 * 2);
        assert_eq!((q.image, q.workspace), (128 * 4096 * 2, 128 * 4096 * 2 + 6 * 128 * 4096 * 4));
    }

    #[test]
    fn wgmma_plan_tiles_128_by_128_on_persistent_ctas() {
        // One CTA an SM: 132 / s clusters of s CTAs at once (real GPUs hold fewer of the
        // larger ones: their GPCs do not divide evenly).
        let ideal = |s: usize| 132 / s;
        // M = 128, N = K = 4096 on 132 SMs: 32 tiles, 4 splits of 16 slabs (clusters of
        // 4), 128 CTAs; the workspace holds one 128-row block of activation tiles (64
        // slabs of 16 KiB) and nothing else (the splits add their sums in the cluster).
        let p = Plan::wgmma((128, 4096, 64), 128, 132, &ideal, TailRule::Rule, StreamK::Never);
        assert_eq!((p.tiles_n, p.tiles_m, p.splits, p.slabs_per_split, p.ctas), (32, 1, 4, 16, 128));
        assert_eq!((p.image, p.workspace), (64 * 16384, 64 * 16384));
        // If only 30 clusters of 4 fit at once: 3 splits (of 22, 22 and 20 slabs).
        let p = Plan::wgmma(
            (128, 4096, 64),
            128,
            132,
            &|s| if s == 4 { 30 } else { ideal(s) },
            TailRule::Rule,
            StreamK::Never,
        );
        assert_eq!((p.splits, p.slabs_per_split, p.ctas), (3, 22, 96));
        // No cluster fits: no split.
        assert_eq!(Plan::wgmma((128, 4096, 64), 128, 132, &|_| 0, TailRule::Rule, StreamK::Never).splits, 1);
        // M = 128, N = 7168, K = 2048: 56 tiles, 2 splits of 16 slabs.
        let p = Plan::wgmma((128, 7168, 32), 128, 132, &ideal, TailRule::Rule, StreamK::Never);
        assert_eq!((p.splits, p.slabs_per_split, p.ctas), (2, 16, 112));
        // A single tile splits into a cluster of at most 8, each split at least 8 slabs.
        assert_eq!(Plan::wgmma((64, 128, 256), 128, 132, &ideal, TailRule::Rule, StreamK::Never).splits, 8);
        assert_eq!(Plan::wgmma((64, 128, 24), 128, 132, &ideal, TailRule::Rule, StreamK::Never).splits, 3);
        // M = 300, N = 28672: 224 x 3 tiles on 132 CTAs, no split.
        let q = Plan::wgmma((300, 28672, 128), 128, 132, &ideal, TailRule::Rule, StreamK::Never);
        assert_eq!((q.tiles_n, q.tiles_m, q.splits, q.ctas), (224, 3, 1, 132));
        assert_eq!((q.image, q.workspace), (3 * 128 * 16384, 3 * 128 * 16384));
        // N = 130: two tiles.
        assert_eq!(Plan::wgmma((64, 130, 4), 128, 132, &ideal, TailRule::Rule, StreamK::Never).tiles_n, 2);
    }

    #[test]
    fn wgmma_plan_splits_a_last_wave_at_most_half_full() {
        let ideal = |s: usize| 132 / s;
        let tail = |(m, n, slabs), tile_m, active: &dyn Fn(usize) -> usize, rule| {
            let p = Plan::wgmma((m, n, slabs), tile_m, 132, active, rule, StreamK::Never);
            (p.splits, p.tail, p.ctas)
        };
        // M = 512, N = 28672, K = 8192 on wide tiles: 448 tiles, 3 waves of 132 and 52
        // left, which split in halves: 3.5 tiles a CTA instead of 4.
        assert_eq!(tail((512, 28672, 128), 256, &ideal, TailRule::Rule), (1, 52, 132));
        // Only 64 clusters of two fit: 3 waves of 128 and 64 halves.
        assert_eq!(tail((512, 28672, 128), 256, &|s| if s == 2 { 64 } else { ideal(s) }, TailRule::Rule), (1, 64, 128));
        // M = 300, N = 28672: 672 tiles, 12 left over 5 waves.
        assert_eq!(tail((300, 28672, 128), 128, &ideal, TailRule::Rule), (1, 12, 132));
        // A last wave more than half full (224 tiles: 92 left) stays whole.
        assert_eq!(tail((256, 28672, 128), 256, &ideal, TailRule::Rule), (1, 0, 132));
        // Short K: the halves' adds would cost more than half a tile saves, unless forced.
        assert_eq!(tail((300, 5980, 8), 128, &ideal, TailRule::Rule), (1, 0, 132));
        assert_eq!(tail((300, 5980, 8), 128, &ideal, TailRule::Always), (1, 9, 132));
        // Never; and no cluster of two fits.
        assert_eq!(tail((512, 28672, 128), 256, &ideal, TailRule::Never), (1, 0, 132));
        assert_eq!(tail((512, 28672, 128), 256, &|s| usize::from(s == 1) * 132, TailRule::Always), (1, 0, 132));
        // A grid capped at 4 CTAs (the GPU bundle's test pass): 141 tiles, 1 left.
        let p = Plan::wgmma((300, 5980, 8), 128, 4, &ideal, TailRule::Always, StreamK::Never);
        assert_eq!((p.tail, p.ctas), (1, 4));
        // Where K splits (fewer tiles than slots) there is no tail.
        assert_eq!(tail((128, 4096, 64), 128, &ideal, TailRule::Always), (4, 0, 128));
    }

    #[test]
    fn wgmma_shared_memory_matches_the_kernel_layout() {
        // wgemm.cu: kDepth x (16 KiB + 8 x (code + scale step), rounded up to 1 KiB)
        // + 66 KiB of sums (128 rows of 132 floats) + 1 KiB.
        assert_eq!(wg_smem_bytes(Scheme::NvFp4, false), 6 * 21 * 1024 + 67 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::MxFp6E2M3, false), 6 * 23 * 1024 + 67 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::MxFp8E5M2, false), 6 * 25 * 1024 + 67 * 1024);
        // INT4-G128: 512 + 32 bytes a group; FP8 block: 1024 + the 1x128 rows' 64 (the
        // 128x128 tile scale is read from global memory, not staged).
        assert_eq!(wg_smem_bytes(Scheme::Int4G128, false), 6 * 21 * 1024 + 67 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::Fp8Block(Fp8Tile::Tile128x128), false), 6 * 24 * 1024 + 67 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::Fp8Block(Fp8Tile::Row1x128), false), 6 * 25 * 1024 + 67 * 1024);
        // Within Hopper's 227 KiB a CTA.
        for s in Scheme::ALL {
            assert!(wg_smem_bytes(s, false) <= 227 << 10 && wg_smem_bytes(s, true) <= 227 << 10, "{s:?}");
        }
        assert!(f16_wgmma(Scheme::Int4G32) && !f16_wgmma(Scheme::NvFp4));
        assert_eq!(wg_smem_bytes(Scheme::Int4G32, false), 6 * 21 * 1024 + 67 * 1024);
        // Wide tiles (wgemm.cu `wide_smem_bytes`): stages of 32 KiB of activation tiles
        // + the codes and scales, rounded up to 1 KiB, as many as fit (at most six)
        // beside 64 rows of 132-float sums (33 KiB) + 1 KiB.
        assert_eq!(wg_smem_bytes(Scheme::NvFp4, true), 5 * 37 * 1024 + 34 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::MxFp4, true), 5 * 37 * 1024 + 34 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::MxFp6E3M2, true), 4 * 39 * 1024 + 34 * 1024);
        assert_eq!(wg_smem_bytes(Scheme::MxFp8E4M3, true), 4 * 41 * 1024 + 34 * 1024);
    }

    #[test]
    fn wide_tiles_where_they_need_no_split_and_fill_their_waves() {
        // The bench shapes on 132 SMs (H100 and H200), as measured (DECISIONS #65).
        let wide = |m, n| wide_tiles(Scheme::NvFp4, (m, n, 64), false, 132);
        assert!(wide(256, 28672) && wide(512, 28672) && wide(512, 7168) && wide(1024, 28672));
        // 64 and 32 wide tiles would split K; 56 too.
        assert!(!wide(512, 4096) && !wide(256, 4096) && !wide(256, 7168));
        // M = 300: two wide tiles pad it to 512 rows (448 tiles, 3.5 waves with the split
        // tail: 7 half tiles of twice the work) where three 128-row tiles pad it to 384
        // (672 tiles, 5.5 waves: 11 half tiles).
        assert!(!wide(300, 28672));
        // M <= 128, the post-scaled schemes and f16 activations: never.
        assert!(!wide(128, 28672) && !wide(100, 28672));
        assert!(!wide_tiles(Scheme::Int4G128, (512, 28672, 128), false, 132));
        assert!(!wide_tiles(Scheme::MxFp4, (512, 28672, 128), true, 132));
        assert!(wide_tiles(Scheme::MxFp8E4M3, (1024, 4096, 64), false, 132));
    }

    #[test]
    fn wgmma_plan_spreads_a_last_wave_more_than_half_full_by_slabs() {
        let ideal = |s: usize| 132 / s;
        let sk = |(m, n, slabs), slots, rule| {
            let p = Plan::wgmma((m, n, slabs), 128, slots, &ideal, TailRule::Rule, rule);
            (p.tail, p.sk_tiles, p.sk_slabs, p.ctas, p.workspace - p.image)
        };
        // M = 128, N = 28672, K = 8192: 224 tiles, 92 left after a wave; their 92 x 128
        // slabs over 132 CTAs, 90 each (even), so each tile has a later range at most
        // twice: 2 partial slots a tile.
        assert_eq!(sk((128, 28672, 128), 132, StreamK::Rule), (0, 92, 90, 132, 92 * 2 * SK_PARTIAL_BYTES));
        // A last wave at most half full takes the split tail instead.
        assert_eq!(sk((300, 28672, 128), 132, StreamK::Rule).0, 12);
        // Short K, unless forced; never; fewer tiles than slots (K splits).
        assert_eq!(sk((128, 28672, 16), 132, StreamK::Rule).1, 0);
        assert_eq!(sk((128, 28672, 16), 132, StreamK::Always), (0, 92, 12, 132, 92 * 2 * SK_PARTIAL_BYTES));
        assert_eq!(sk((128, 28672, 128), 132, StreamK::Never).1, 0);
        assert_eq!(sk((128, 4096, 64), 132, StreamK::Always).1, 0);
        // Four CTAs (the GPU bundle's pass): 141 tiles, 1 left, its 8 slabs 2 a CTA (4
        // ranges: 3 partial slots at most, 4 counted).
        assert_eq!(sk((300, 5980, 8), 4, StreamK::Always), (0, 1, 2, 4, 4 * SK_PARTIAL_BYTES));
        // The tail first where it is taken.
        let p = Plan::wgmma((300, 5980, 8), 128, 4, &ideal, TailRule::Always, StreamK::Always);
        assert_eq!((p.tail, p.sk_tiles, p.ctas), (1, 0, 4));
        // Everywhere: fewer tiles than slots spread every tile instead of splitting K.
        // 128 x 4096 x 4096: 32 tiles of 64 slabs, 16 a CTA (4 ranges a tile, 3 of them
        // later); 128 x 7168 x 2048: 56 tiles of 32 slabs, 14 a CTA (3 ranges at most).
        let every = |(m, n, slabs)| {
            let p = Plan::wgmma((m, n, slabs), 128, 132, &ideal, TailRule::Rule, StreamK::Everywhere);
            (p.splits, p.sk_tiles, p.sk_slabs, p.ctas, p.workspace - p.image)
        };
        assert_eq!(every((128, 4096, 64)), (1, 32, 16, 132, 32 * 4 * SK_PARTIAL_BYTES));
        assert_eq!(every((128, 7168, 32)), (1, 56, 14, 132, 56 * 3 * SK_PARTIAL_BYTES));
        // More tiles than slots: the last wave's rule, as Always.
        assert_eq!(every((128, 28672, 128)), (1, 92, 90, 132, 92 * 2 * SK_PARTIAL_BYTES));
    }

    #[test]
    fn half_tiles_count_whole_waves_less_a_split_tail() {
        assert_eq!(half_tiles(448, 132, 128, TailRule::Rule), 7);
        assert_eq!(half_tiles(448, 132, 16, TailRule::Rule), 8);
        assert_eq!(half_tiles(448, 132, 16, TailRule::Always), 7);
        assert_eq!(half_tiles(448, 132, 128, TailRule::Never), 8);
        // A last wave more than half full, one wave, and an exact number of waves.
        assert_eq!(half_tiles(224, 132, 128, TailRule::Always), 4);
        assert_eq!(half_tiles(100, 132, 128, TailRule::Always), 2);
        assert_eq!(half_tiles(264, 132, 128, TailRule::Always), 4);
    }

    #[test]
    fn shared_memory_matches_the_kernel_layout() {
        // pgemm.cu: kDepth x (8 x (code + scale step) + 64 x 144).
        assert_eq!(smem_bytes(Scheme::NvFp4), 4 * (8 * (512 + 64) + 64 * 144));
        assert_eq!(smem_bytes(Scheme::MxFp8E4M3), 4 * (8 * (1024 + 32) + 64 * 144));
        assert_eq!(smem_bytes(Scheme::Fp8Block(Fp8Tile::Tile128x128)), 4 * (8 * 1024 + 64 * 144));
        // Within SM120's 99 KiB.
        for s in Scheme::ALL {
            assert!(smem_bytes(s) <= 99 << 10, "{s:?}");
        }
    }
}
