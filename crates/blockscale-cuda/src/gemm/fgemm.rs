//! Block-scaled FP8 pairs on Hopper's FP8 tensor cores: `kernels/gemm/fgemm.cu`, a
//! warp-specialized `wgmma` kernel that reads both operands in place with TMA and applies
//! the scales in f32 as the format defines them: FP8 block (activations with 1x128 or
//! 128x128 scales times FP8 128x128 weights) once per 128 of K, MXFP8 x MXFP8 (E4M3 or
//! E5M2 on either side, UE8M0 scales) once per 32. K splits across the CTAs of a cluster,
//! which add their sums through distributed shared memory in split order (deterministic,
//! no workspace). Tiles of 64 activation rows up to M = 64, where 128-row tiles would
//! fill at most half the SMs and where only 64-row ones fill their waves ([`tile_m`]),
//! 128 rows otherwise; above M = 128 the planner weighs both heights with their K splits
//! ([`heights`], [`choose_tile`]). Where K is not split, two activation
//! tiles of FP8 block pairs share each weight tile: a cluster of two CTAs, each copying
//! half of it into both by multicast ([`Plan::choose`]; DECISIONS.md #57).
//!
//! It runs FP8 block pairs of up to 128 rows (256 where K is at most 8192, 512 where it
//! is at most 2048: [`FP8_BOUNDS`]) whose tiles fill their waves;
//! CUTLASS's blockwise kernel (`mod.rs`) takes the rest, where it measured faster
//! (docs/DECISIONS.md #44 has the numbers). MXFP8 pairs with K a multiple of 128 and
//! row-major codes take it up to [`MX_MAX_M`] = 512 rows (the alternative is a dequantize
//! pass and a BF16 GEMM; DECISIONS #46). `BLOCKSCALE_GEMM_FP8_WGMMA_MAX_M` and
//! `BLOCKSCALE_GEMM_MX_WGMMA_MAX_M` (read once) move the bounds (0 turns the kernel off);
//! `gpu-bundle/run.sh test` runs the GEMM tests a second time with the bounds at 512 and
//! 1024, so that both tile heights, the clusters and the pairs are covered;
//! `BLOCKSCALE_GEMM_FP8_PAIRS=0` turns the pairs off.

use blockscale_formats::{Activation, DataLayout, Fp8Tile, ScaleLayout, Scheme};
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

use super::{DeviceEpilogue, DeviceMatrixMut, check_epilogue, check_output};
use crate::buffer::{DeviceElement, DeviceQuantized};
use crate::ffi::driver::{self, TmaElement};
use crate::ffi::launch::{Kernel, MAX_CLUSTER, Order, launch};
use crate::ffi::names::KernelName;
use crate::ffi::params::{FgemmArgs, FgemmParams, PgemmParams, TensorMap};
use crate::tuning::env_usize;
use crate::{Arch, CudaError, Device};

/// Threads per CTA (`kThreads`: two consumer warpgroups and a producer warpgroup).
const THREADS: u32 = 384;
/// Weight rows of a tile (`BN`).
const TILE: usize = 128;
/// Elements of K per block (the scales' block and the kernel's stage).
const BLOCK_K: usize = 128;

/// The pair's formats, one set of kernels each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// FP8 block activations (1x128 or 128x128 scales) x FP8 128x128 weights.
    Fp8Block,
    /// MXFP8 x MXFP8; whether the activations', the weights' elements are E5M2.
    Mx { a_e5m2: bool, b_e5m2: bool },
}

impl Format {
    /// The kernels' format for `a` x `b`, if they have one.
    fn of(a: &DeviceQuantized, b: &DeviceQuantized) -> Option<Self> {
        let e5m2 = |s: Scheme| match s {
            Scheme::MxFp8E4M3 => Some(false),
            Scheme::MxFp8E5M2 => Some(true),
            _ => None,
        };
        match (a.scheme(), b.scheme()) {
            (Scheme::Fp8Block(_), Scheme::Fp8Block(Fp8Tile::Tile128x128)) => Some(Self::Fp8Block),
            (sa, sb) => Some(Self::Mx { a_e5m2: e5m2(sa)?, b_e5m2: e5m2(sb)? }),
        }
    }

    fn is_mx(self) -> bool {
        matches!(self, Self::Mx { .. })
    }

    /// The kernel for tiles of `tm` activation rows.
    fn kernel_name(self, tm: usize) -> KernelName<FgemmArgs> {
        let mx = match self {
            Self::Fp8Block => None,
            Self::Mx { a_e5m2, b_e5m2 } => Some((a_e5m2, b_e5m2)),
        };
        KernelName::fgemm(mx, tm == 64)
    }
}

/// fgemm.cu `Shape<tm, mx>::kSmem` for tiles of `tm` activation rows: as many stages of
/// (the activation tile, the 16 KiB weight tile, the scales: 1 KiB for FP8 block; for MX
/// the activations' as f32, tm x 16 bytes, and both operands' bytes, (tm + 128) x 4, in
/// whole KiB) as fit in 227 KiB beside the epilogue's 32 KiB staging area and 1 KiB of
/// alignment slack.
const fn smem(tm: usize, mx: bool) -> usize {
    let scales = if mx { (tm * 16 + (tm + 128) * 4).next_multiple_of(1024) } else { 1024 };
    let stage = tm * BLOCK_K + TILE * BLOCK_K + scales;
    let staging = 32 * 1024;
    let depth = (227 * 1024 - 1024 - staging) / stage;
    depth * stage + staging + 1024
}
const _: () = assert!(
    smem(64, false) <= 227 << 10
        && smem(128, false) <= 227 << 10
        && smem(64, true) <= 227 << 10
        && smem(128, true) <= 227 << 10,
    "within Hopper's shared memory per CTA"
);

/// `BLOCKSCALE_GEMM_FP8_TILE_M` (64 or 128; read once; for measurements), else `None`.
fn tile_m_override() -> Option<usize> {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *S.get_or_init(|| env_usize("BLOCKSCALE_GEMM_FP8_TILE_M").filter(|&t| t == 64 || t == 128))
}

/// Activation rows a tile: 64 up to M = 64 (the 128-row tile would be half padding),
/// where 128-row tiles would fill at most half the SMs (twice the tiles rather than a K
/// split), and where 64-row tiles fill their waves and 128-row ones do not ([`fills`]:
/// 128 x 24576 x 1536 is 192 128-row tiles on 132 SMs, 73%, or 384 64-row ones, 97%,
/// which took 18.1-18.2 µs against CUTLASS's 19.8-20.9 on an H100, DECISIONS.md #60);
/// else 128.
fn tile_m(m: usize, n: usize, slots: usize) -> usize {
    let tiles = |tm: usize| m.div_ceil(tm) * n.div_ceil(TILE);
    let small = m <= 64 || 2 * tiles(128) <= slots || (!fills(tiles(128), slots) && fills(tiles(64), slots));
    tile_m_override().unwrap_or(if small { 64 } else { 128 })
}

/// The fewest K blocks a split keeps.
const MIN_SPLIT_BLOCKS: usize = 4;
/// The default bounds of FP8 block pairs on this kernel, (largest M, longest K) pairs
/// (H100, DeepSeek-V3's shapes):
/// - M <= 128 at any K: at least as fast as CUTLASS at every shape it takes (128 x 32768 x
///   512 about even, 128 x 7168 x 16384 with pairs); slower at every one at M = 512
///   (DECISIONS.md #44, #57).
/// - M <= 256 up to K = 8192: 1.13-1.38x CUTLASS at the five shapes with K up to 7168,
///   0.83x at K = 16384, where its promotion's scale loads bound it (#58, #59).
/// - M <= 512 up to K = 2048: 0.93x CUTLASS's time at 32768 x 512, 0.95-0.98x at
///   7168 x 2048, 1.02-1.04x at 24576 x 1536; slower at every shape with K of 7168 or
///   more and at M = 1024 (#60).
const FP8_BOUNDS: [(usize, usize); 3] = [(128, usize::MAX), (256, 8192), (512, 2048)];

/// The largest M an MXFP8 pair takes this kernel at by default. Its scales cost two f32
/// operations per output every 32 of K, which bounds it near half the FP8 tensor cores'
/// rate: at M = 128 it took half the dequantize path's time, at M = 512 3-6% less, at
/// M = 4096 twice as long (H100, N = K = 4096; docs/DECISIONS.md #46).
const MX_MAX_M: usize = 512;

/// Whether FP8 block pairs of `m` rows and reduction `k` may take this kernel:
/// `BLOCKSCALE_GEMM_FP8_WGMMA_MAX_M` (read once) bounds M at every K where it is set;
/// else one of [`FP8_BOUNDS`] holds.
fn within_max_m(m: usize, k: usize) -> bool {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    match *S.get_or_init(|| env_usize("BLOCKSCALE_GEMM_FP8_WGMMA_MAX_M")) {
        Some(max) => m <= max,
        None => default_max_m(m, k),
    }
}

/// The default bound of [`within_max_m`].
fn default_max_m(m: usize, k: usize) -> bool {
    FP8_BOUNDS.iter().any(|&(max_m, max_k)| m <= max_m && k <= max_k)
}

/// `BLOCKSCALE_GEMM_MX_WGMMA_MAX_M` (read once), else [`MX_MAX_M`].
fn mx_max_m() -> usize {
    static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *S.get_or_init(|| env_usize("BLOCKSCALE_GEMM_MX_WGMMA_MAX_M").unwrap_or(MX_MAX_M))
}

/// `BLOCKSCALE_GEMM_FP8_PAIRS` (read once; for tests and measurements): 0 no pairs, 2
/// pairs wherever K is not split; else (1, unset) the rule of [`Plan::choose`].
fn pairs_setting() -> usize {
    static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *S.get_or_init(|| env_usize("BLOCKSCALE_GEMM_FP8_PAIRS").unwrap_or(1))
}

/// Whether pairs of activation tiles may share each weight tile (multicast): FP8 block
/// with two activation tiles or more. (MXFP8 is bound by its scale work, not by its
/// operand traffic: DECISIONS.md #46.)
fn pairable(format: Format, m: usize, tm: usize) -> bool {
    pairs_setting() != 0 && !format.is_mx() && m.div_ceil(tm) >= 2
}

/// `BLOCKSCALE_GEMM_FP8_SPLITS`: the most K splits (read once; for measurements).
fn max_splits() -> usize {
    static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *S.get_or_init(|| env_usize("BLOCKSCALE_GEMM_FP8_SPLITS").unwrap_or(usize::MAX))
}

/// Whether this kernel runs `a` x `b` here: Hopper, and FP8 block activations times FP8
/// 128x128 weights with M up to [`within_max_m`]'s bound and tiles that fill their waves (see
/// [`fills_waves`]), or MXFP8 x MXFP8 with row-major codes, K a multiple of 128 (whole
/// stages; each row's four scales of a stage are one aligned word) and M up to
/// [`mx_max_m`].
pub(super) fn applies(dev: &Device, a: &DeviceQuantized, b: &DeviceQuantized) -> bool {
    let (m, n, k) = (a.shape().rows, b.shape().rows, b.shape().k);
    if dev.arch() != Arch::Sm90 {
        return false;
    }
    match Format::of(a, b) {
        Some(Format::Fp8Block) => within_max_m(m, k) && fills_waves(m, n, dev.sm_count() as usize),
        Some(Format::Mx { .. }) => {
            // The kernel addresses each operand's scales in 32-bit words.
            let scale_bytes = |rows: usize| rows.next_multiple_of(128) * (k / 32).next_multiple_of(4);
            m <= mx_max_m()
                && k.is_multiple_of(BLOCK_K)
                && scale_bytes(m.max(n)) < 1 << 34
                && a.data_layout() == DataLayout::RowMajor
                && b.data_layout() == DataLayout::RowMajor
        }
        None => false,
    }
}

/// Whether the kernel's tiles keep the SMs busy: up to one wave (K splits fill it), or
/// waves at least 80% full. CUTLASS's ping-pong kernel, whose two consumer warpgroups
/// take separate tiles, does better on the rest: at M = 64, N = 24576 (192 tiles on 132
/// SMs, 73%) it took 16.5 µs against 19.5 (H100).
fn fills_waves(m: usize, n: usize, slots: usize) -> bool {
    fills(m.div_ceil(tile_m(m, n, slots)) * n.div_ceil(TILE), slots)
}

/// Whether `tiles` tiles keep `slots` SMs busy: at most one wave, or waves at least 80%
/// full.
fn fills(tiles: usize, slots: usize) -> bool {
    tiles <= slots || 5 * tiles >= 4 * tiles.div_ceil(slots) * slots
}

/// What a CTA's fixed costs (pipeline fill, epilogue, its share of a reduction) weigh
/// in K blocks, in the plan's count of waves x (blocks a split + this).
const SPLIT_COST_BLOCKS: usize = 4;

/// A plan's cost in K blocks: waves x (blocks a split + [`SPLIT_COST_BLOCKS`]).
const fn split_cost(waves: usize, blocks_per_split: usize) -> usize {
    waves * (blocks_per_split + SPLIT_COST_BLOCKS)
}

/// How the kernel is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    tiles_n: usize,
    /// Activation tiles (with pairs an even count: a last odd one pairs with zeros).
    tiles_m: usize,
    /// Pairs of activation tiles share each weight tile: clusters of two CTAs (never
    /// with a K split).
    pair: bool,
    /// K splits: with more than one, the splits of a tile are one cluster of CTAs that
    /// add their sums through distributed shared memory.
    splits: usize,
    blocks_per_split: usize,
    /// CTAs of the grid: persistent ones (no more than the GPU holds at once), or with
    /// splits one per tile and split.
    ctas: usize,
}

impl Plan {
    /// 128 x `tm` tiles over `blocks` K blocks on `slots` CTAs. K splits only while the
    /// tiles leave CTAs idle, each split of at least [`MIN_SPLIT_BLOCKS`] blocks (every
    /// split costs a pipeline fill and its share of the reduction), the splits of a tile
    /// one cluster of at most [`MAX_CLUSTER`]: the count that makes waves of clusters
    /// (`active(s)`: how many clusters of s CTAs the GPU holds at once) x (blocks a
    /// split + [`SPLIT_COST_BLOCKS`]) smallest, the fewer on a tie. With `pair`: no split,
    /// the tiles in clusters of two (an even count of activation tiles and an even grid).
    fn new(
        (m, n, blocks): (usize, usize, usize),
        slots: usize,
        tm: usize,
        pair: bool,
        active: &dyn Fn(usize) -> usize,
    ) -> Self {
        let width = if pair { 2 } else { 1 };
        let tiles_n = n.div_ceil(TILE);
        let tiles_m = m.div_ceil(tm).next_multiple_of(width);
        let tiles = tiles_n * tiles_m;
        let most = if tiles < slots && !pair {
            (blocks / MIN_SPLIT_BLOCKS).min(max_splits()).clamp(1, MAX_CLUSTER)
        } else {
            1
        };
        let waves = |s: usize| if s == 1 { 1 } else { tiles.div_ceil(active(s).max(1)) };
        let cost = |s: usize| split_cost(waves(s), blocks.div_ceil(s));
        let wanted = (1..=most).min_by_key(|&s| (cost(s), s)).unwrap_or(1);
        let blocks_per_split = blocks.div_ceil(wanted);
        let splits = blocks.div_ceil(blocks_per_split);
        let ctas = if splits > 1 { tiles * splits } else { tiles.min(slots / width * width) };
        Self { tiles_n, tiles_m, pair, splits, blocks_per_split, ctas }
    }

    /// Pairs where allowed (`pairable`), where the plan without them does not split K and
    /// its CTAs fill at least 3/4 of the SMs (`everywhere`: regardless of that): then the
    /// L2 feeds most SMs, and pairs read each weight tile from it once instead of twice
    /// (128 x 7168 x 16384, 112 CTAs: 50.5-51.4 against 59.4-60.3 µs; 128 x 7168 x 2048
    /// even). With fewer CTAs they lost (128 x 4096 x 7168, 64 CTAs: 20.8-21.0 against
    /// 18.6-18.7 µs), and with K split the splits already share each tile (pairs with
    /// splits measured slower). H100, docs/DECISIONS.md #57.
    fn choose(
        shape: (usize, usize, usize),
        slots: usize,
        tm: usize,
        (pairable, everywhere): (bool, bool),
        active: &dyn Fn(usize) -> usize,
    ) -> Self {
        let single = Self::new(shape, slots, tm, false, active);
        let fills = 4 * single.ctas >= 3 * slots;
        if pairable && single.splits == 1 && (fills || everywhere) {
            Self::new(shape, slots, tm, true, active)
        } else {
            single
        }
    }

    /// CTAs a cluster: a tile's splits, or a pair.
    fn cluster(&self) -> u32 {
        if self.pair { 2 } else { self.splits as u32 }
    }

    /// The cost [`Plan::new`] minimizes, comparable across tile heights: waves x (blocks a
    /// split + [`SPLIT_COST_BLOCKS`]) x the tile's height in 64-row units (a block of a
    /// 128-row tile is twice the tensor work of a 64-row one; `active` as for `new`,
    /// for this plan's kernel).
    fn cost(&self, tm: usize, active: &dyn Fn(usize) -> usize) -> usize {
        let tiles = self.tiles_n * self.tiles_m;
        let waves =
            if self.splits > 1 { tiles.div_ceil(active(self.splits).max(1)) } else { tiles.div_ceil(self.ctas.max(1)) };
        split_cost(waves, self.blocks_per_split) * (tm / 64)
    }
}

/// The tile heights the planner weighs for `m` x `n`: [`tile_m`]'s, and above M = 128,
/// where that is 64 rows (128-row tiles would fill at most half the SMs) and the height
/// is not forced, 128 as well ([`choose_tile`]).
fn heights(m: usize, n: usize, slots: usize) -> Vec<usize> {
    let tm = tile_m(m, n, slots);
    if tm == 64 && m > 128 && tile_m_override().is_none() { vec![64, 128] } else { vec![tm] }
}

/// The tile height of `heights` whose plan costs least by [`Plan::cost`] (on a tie the
/// later, taller one: fewer CTAs, fewer fills), and its plan. 256 x 2112 x 7168 is 68
/// 64-row tiles of 56 blocks, unsplit cost 60, or 34 128-row tiles, in three splits of
/// 19 cost 46 where 34 clusters of three fit at once. (It measured 28.6 µs on the first
/// plan and 20.0 on another H100 whose plan split K: DECISIONS.md #58, #60.)
/// `active(tm, s)`: clusters of s CTAs of the `tm` kernel the GPU holds at once;
/// `pairs(tm)`: [`Plan::choose`]'s flags for that height.
fn choose_tile(
    (m, n, blocks): (usize, usize, usize),
    slots: usize,
    heights: &[usize],
    pairs: &dyn Fn(usize) -> (bool, bool),
    active: &dyn Fn(usize, usize) -> usize,
) -> (usize, Plan) {
    let mut best: Option<(usize, Plan, usize)> = None;
    for &tm in heights {
        let plan = Plan::choose((m, n, blocks), slots, tm, pairs(tm), &|s| active(tm, s));
        let cost = plan.cost(tm, &|s| active(tm, s));
        if best.as_ref().is_none_or(|&(_, _, c)| cost <= c) {
            best = Some((tm, plan, cost));
        }
    }
    let (tm, plan, _) = best.expect("at least one tile height");
    (tm, plan)
}

/// The kernel for these operands, its tile height and shared memory, and its plan.
fn plan(
    dev: &Device,
    format: Format,
    (m, n, k): (usize, usize, usize),
) -> Result<(Kernel<FgemmArgs>, usize, usize, Plan), CudaError> {
    // One CTA an SM (the shared memory allows no more).
    let slots = dev.sm_count() as usize;
    // The kernel of every height the planner weighs (their cluster counts differ with
    // their shared memory).
    let hs = heights(m, n, slots);
    let mut loaded = hs
        .iter()
        .map(|&tm| {
            let (name, bytes) = (format.kernel_name(tm), smem(tm, format.is_mx()));
            let kernel = dev.function_with_threads(&name, THREADS, bytes)?;
            let counts = crate::device::active_clusters(dev, &kernel, &name, (THREADS, bytes));
            Ok((kernel, bytes, counts))
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    let at = |tm: usize| hs.iter().position(|&h| h == tm).expect("a height of `hs`");
    let pairs = |tm: usize| (pairable(format, m, tm), pairs_setting() == 2);
    let (tm, plan) = choose_tile((m, n, k / BLOCK_K), slots, &hs, &pairs, &|tm, s| loaded[at(tm)].2[s]);
    let (kernel, bytes, _) = loaded.swap_remove(at(tm));
    Ok((kernel, tm, bytes, plan))
}

/// The format of a pair [`applies`] accepted.
fn format_of(a: &DeviceQuantized, b: &DeviceQuantized) -> Result<Format, CudaError> {
    Format::of(a, b).ok_or(CudaError::UnsupportedPair { a: a.scheme(), b: b.scheme(), hint: "no FP8 wgmma kernel" })
}

/// The workspace bytes [`run`] needs: none (K splits add their sums in shared memory);
/// the kernel is loaded, so that a device that cannot is an error here already.
pub(super) fn workspace_size(dev: &Device, a: &DeviceQuantized, b: &DeviceQuantized) -> Result<usize, CudaError> {
    plan(dev, format_of(a, b)?, (a.shape().rows, b.shape().rows, b.shape().k))?;
    Ok(0)
}

/// The tensor map of a rows x k matrix of bytes at `ptr` (row stride k) read in boxes of
/// `box_rows` x 128 bytes, 128-byte swizzled, zeros past the last row.
fn tensor_map(ptr: u64, rows: usize, k: usize, box_rows: usize) -> Result<TensorMap, CudaError> {
    driver::tensor_map(ptr, TmaElement::U8, (rows, k, k), (box_rows, BLOCK_K))
        .map_err(CudaError::driver("encoding an FP8 operand's tensor map"))
}

/// The tensor map the kernel stores an M x N output of 16-bit values (bf16 or f16) at
/// `ptr` through, row stride `stride` elements, in boxes of `tm` rows x 64 columns (one
/// consumer warpgroup's outputs of a tile), where TMA can store it: 16-byte aligned rows
/// (else `None`: the kernel stores the outputs itself, as it does f32 ones).
fn output_map(ptr: u64, (m, n, stride): (usize, usize, usize), tm: usize) -> Result<Option<TensorMap>, CudaError> {
    if !ptr.is_multiple_of(16) || !(2 * stride).is_multiple_of(16) || 2 * stride >= 1 << 40 {
        return Ok(None);
    }
    driver::tensor_map(ptr, TmaElement::U16, (m, n, stride), (tm, TILE / 2))
        .map(Some)
        .map_err(CudaError::driver("encoding the output's tensor map"))
}

/// Checks and queues `a` (M x K) x `b` (N x K) on the FP8 wgmma kernel; the caller
/// checked the pair and that [`applies`] holds.
pub(super) fn run<O: DeviceElement>(
    dev: &Device,
    a: &DeviceQuantized,
    b: &DeviceQuantized,
    alpha: f32,
    epilogue: &DeviceEpilogue<'_>,
    out: DeviceMatrixMut<'_, O>,
) -> Result<(), CudaError> {
    let stream = dev.stream();
    let (m, n, k) = (a.shape().rows, b.shape().rows, b.shape().k);
    debug_assert!(k.is_multiple_of(BLOCK_K), "the kernel takes whole 128-element blocks");
    let format = format_of(a, b)?;
    let alpha = check_epilogue(epilogue, alpha, n)?;
    check_output(&out, m, n)?;
    super::check_int(m, n, k)?;
    let (kernel, tm, bytes, plan) = plan(dev, format, (m, n, k))?;
    // The kernel counts tiles x splits in 32 bits.
    if plan.tiles_n * plan.tiles_m * plan.splits > i32::MAX as usize {
        return Err(CudaError::TooLarge { rows: m.max(n), k, limit: "the GEMM's tiles exceed 2^31" });
    }
    let out_stride = out.row_stride;
    let (out_ptr, g_out) = out.data.device_ptr_mut(stream);
    let (a_ptr, g_a) = a.data().device_ptr(stream);
    let (b_ptr, g_b) = b.data().device_ptr(stream);
    let (sa_ptr, g_sa) = a.scales().ptr(stream);
    let (sb_ptr, g_sb) = b.scales().ptr(stream);
    let (bias_ptr, g_bias) = crate::device::optional_ptr(epilogue.bias, stream);
    // TMA reads 16-byte aligned rows: K is a multiple of 128, the buffers are cudarc
    // allocations (256-byte aligned).
    for (what, ptr) in [("FP8 activations", a_ptr), ("FP8 weights", b_ptr)] {
        if !ptr.is_multiple_of(16) {
            return Err(CudaError::Misaligned { what, address: ptr });
        }
    }
    let ta = tensor_map(a_ptr, m, k, tm)?;
    // Pairs: each CTA copies its 64-row half of the weight tile (into both CTAs).
    let tb = tensor_map(b_ptr, n, k, if plan.pair { TILE / 2 } else { TILE })?;
    // 16-bit outputs without an activation by TMA stores (K split adds its sums in the
    // cluster and stores them itself).
    let td = if O::OUT_KIND == 2 || plan.splits > 1 || epilogue.activation != Activation::Identity {
        None
    } else {
        output_map(out_ptr, (m, n, out_stride), tm)?
    };
    let params = FgemmParams {
        g: PgemmParams {
            bias: bias_ptr,
            out: out_ptr,
            out_stride: out_stride as u64,
            alpha,
            m: m as u32,
            n: n as u32,
            k: k as u32,
            slabs: (k / BLOCK_K) as u32,
            out_kind: O::OUT_KIND,
            activation: super::activation_code(epilogue.activation) as u32,
            splits: plan.splits as u32,
            slabs_per_split: plan.blocks_per_split as u32,
            ..PgemmParams::default()
        },
        sa: sa_ptr,
        sb: sb_ptr,
        a_tiles: (a.scheme() == Scheme::Fp8Block(Fp8Tile::Tile128x128)) as u32,
        scale_cols: if format.is_mx() { b.shape().scale_cols as u32 } else { 0 },
        swizzled: u32::from(a.scale_layout() == ScaleLayout::Swizzled128x4)
            | u32::from(b.scale_layout() == ScaleLayout::Swizzled128x4) << 1,
        pair: plan.pair as u32,
        store_map: td.is_some() as u32,
    };
    let config =
        LaunchConfig { grid_dim: (plan.ctas as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: bytes as u32 };
    // The launch contract (ffi): the tensor maps describe the validated FP8 codes (M x K
    // and N x K bytes, rows of K); the scales are validated scales of those shapes (FP8
    // block: [M][K/128] or [ceil(M/128)][K/128], [ceil(N/128)][K/128] f32; MX: K/32 =
    // scale_cols bytes a row, row-major or Swizzled128x4 as `swizzled` says, K a multiple
    // of 128 so that each row's four scales of a block are one aligned word); the output
    // was checked for M x N at its stride (its tensor map, with store_map, describes
    // exactly those M rows of N 16-bit values), the bias for N values. The kernel traps if given
    // less shared memory than it lays out, and reads the activations and their scales only
    // after its griddepcontrol.wait. With K split the grid is tiles x splits CTAs in
    // clusters of `splits` (at most 8, a divisor of the grid), as the kernel expects
    // whenever g.splits > 1, and it reads peers' shared memory only between its cluster
    // barriers. With pairs (g.pair; never with splits) the clusters are two CTAs (the
    // persistent grid even), the weight map's boxes 64 rows, and the kernel multicasts
    // into and arrives on its peer's shared memory only between its first and last
    // cluster barriers. The guards keep every buffer alive and ordered until the launch
    // is queued.
    let cluster = plan.cluster();
    launch(stream, &kernel, config, Order::Dependent { cluster }, &(params, ta, tb, td.unwrap_or_default()))
        .map_err(CudaError::driver("launching the FP8 wgmma GEMM"))?;
    drop((g_out, g_a, g_b, g_sa, g_sb, g_bias));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_bound_follows_k() {
        // Up to 128 rows at any K; 256 up to K = 8192; 512 up to K = 2048.
        assert!(default_max_m(128, 16384) && !default_max_m(129, 16384));
        assert!(default_max_m(256, 8192) && !default_max_m(256, 8320) && !default_max_m(257, 7168));
        assert!(default_max_m(512, 2048) && default_max_m(512, 512) && !default_max_m(512, 2176));
        assert!(!default_max_m(513, 512) && !default_max_m(1024, 2048));
    }

    #[test]
    fn shared_memory_matches_the_kernel_layout() {
        // fgemm.cu Shape: 128-row tiles 5 x (16 + 16 + 1 KiB) + 32 KiB of staging + 1 KiB;
        // 64-row tiles 7 x (8 + 16 + 1 KiB) + 32 KiB + 1 KiB.
        assert_eq!(smem(128, false), 5 * 33 * 1024 + 33 * 1024);
        assert_eq!(smem(64, false), 7 * 25 * 1024 + 33 * 1024);
        // MX: 128-row tiles 5 x (16 + 16 + 3 KiB) + 32 + 1 KiB; 64-row 7 x (8 + 16 + 2 KiB)
        // + 32 + 1 KiB.
        assert_eq!(smem(128, true), 5 * 35 * 1024 + 33 * 1024);
        assert_eq!(smem(64, true), 7 * 26 * 1024 + 33 * 1024);
        let name = |f: Format, tm| f.kernel_name(tm).as_str().to_string();
        assert_eq!(
            (name(Format::Fp8Block, 64), name(Format::Fp8Block, 128)),
            ("fgemm_fp8_block_m64".into(), "fgemm_fp8_block".into())
        );
        let mixed = Format::Mx { a_e5m2: false, b_e5m2: true };
        assert_eq!((name(mixed, 64), name(mixed, 128)), ("fgemm_mx_e4m3_e5m2_m64".into(), "fgemm_mx_e4m3_e5m2".into()));
    }

    #[test]
    fn k_splits_into_clusters_that_fit_the_gpu() {
        // One CTA an SM: 132 / s clusters of s CTAs at once (real GPUs hold fewer of the
        // larger ones: their SMs come in GPCs).
        let fit = |s: usize| 132 / s;
        // M = 128, N = 7168, K = 2048, 128-row tiles: 56 tiles of 16 blocks; two splits
        // of 8 (one wave of 56 clusters: 12), not four (two waves: 16).
        let p = Plan::new((128, 7168, 16), 132, 128, false, &fit);
        assert_eq!((p.tiles_n, p.tiles_m, p.splits, p.blocks_per_split, p.ctas), (56, 1, 2, 8, 112));
        // 64 x 2112 x 7168: 17 tiles of 56 blocks: seven splits of 8 (18 clusters of 7 fit).
        let c = Plan::new((64, 2112, 56), 132, 64, false, &fit);
        assert_eq!((c.splits, c.blocks_per_split, c.ctas), (7, 8, 119));
        // With only 16 clusters of 6-8 held at once and 18 of up to 5: five of 12.
        let gpcs = |s: usize| if s <= 5 { 18 } else { 16 };
        assert_eq!(Plan::new((64, 2112, 56), 132, 64, false, &gpcs).splits, 5);
        // No cluster fits: no split.
        let none = |_: usize| 0;
        let e = Plan::new((128, 7168, 16), 132, 128, false, &none);
        assert_eq!((e.splits, e.ctas), (1, 56));
        // 256 tiles: more than the SMs, never split; persistent CTAs.
        let f = Plan::new((64, 32768, 4), 132, 64, false, &fit);
        assert_eq!((f.splits, f.ctas), (1, 132));
        // 64-row tiles: M = 128, N = 7168 is 112 tiles.
        let t = Plan::new((128, 7168, 16), 132, 64, false, &none);
        assert_eq!((t.tiles_m, t.splits, t.ctas), (2, 1, 112));
        assert_eq!((tile_m(128, 7168, 132), tile_m(512, 4096, 132), tile_m(64, 32768, 132)), (64, 128, 64));
        // 192 128-row tiles fill 73% of two waves, 384 64-row ones 97% of three.
        assert_eq!((tile_m(128, 24576, 132), tile_m(128, 32768, 132), tile_m(256, 24576, 132)), (64, 128, 128));
        assert!(fills_waves(128, 24576, 132) && !fills(192, 132) && fills(384, 132));
        // Waves: 192 tiles on 132 SMs (73%) go to CUTLASS, 256 (97%) and 56 stay.
        assert!(!fills_waves(64, 24576, 132) && fills_waves(64, 32768, 132) && fills_waves(64, 7168, 132));
        // K = 128: one block, never split.
        assert_eq!(Plan::new((64, 256, 1), 132, 128, false, &fit).splits, 1);
    }

    #[test]
    fn tile_height_and_split_chosen_together() {
        let fit = |_: usize, s: usize| 132 / s;
        let no_pairs = |_: usize| (false, false);
        // Both heights above M = 128 where tile_m gives 64 rows; else tile_m's alone.
        assert_eq!(
            (heights(256, 2112, 132), heights(128, 2112, 132), heights(512, 7168, 132)),
            (vec![64, 128], vec![64], vec![128])
        );
        let pairs = |tm: usize| (pairable(Format::Fp8Block, 256, tm), false);
        // 256 x 2112 x 7168: 128-row tiles in three splits (cost 46) against 64-row tiles
        // in three splits over two waves of clusters (46 too: the taller win the tie).
        let (tm, p) = choose_tile((256, 2112, 56), 132, &heights(256, 2112, 132), &pairs, &fit);
        assert_eq!((tm, p.tiles_m, p.splits, p.ctas), (128, 2, 3, 102));
        assert_eq!(p.cost(128, &|s| 132 / s), 46);
        // Where no cluster fits, neither height splits: 68 64-row tiles (60) against 34
        // 128-row ones (120), and the 64-row tiles stay.
        let none = |_: usize, _: usize| 0;
        let short = Plan::new((256, 2112, 56), 132, 64, false, &|s| none(64, s));
        assert_eq!((short.splits, short.cost(64, &|s| none(64, s))), (1, 60));
        assert_eq!(choose_tile((256, 2112, 56), 132, &heights(256, 2112, 132), &pairs, &none), (64, short));
        // 128 x 2112 x 7168 (64-row tiles at M <= 128 as before), 192 x 2112 x 7168 (51
        // tiles in two splits: 32 against 46) and 256 x 4096 x 7168 (128 unsplit tiles:
        // 60 against 64) keep 64-row tiles.
        assert_eq!(choose_tile((128, 2112, 56), 132, &heights(128, 2112, 132), &no_pairs, &fit).0, 64);
        assert_eq!(choose_tile((192, 2112, 56), 132, &heights(192, 2112, 132), &no_pairs, &fit).0, 64);
        assert_eq!(choose_tile((256, 4096, 56), 132, &heights(256, 4096, 132), &pairs, &fit).0, 64);
        // Where tile_m takes 128-row tiles, nothing changes.
        let (tm, q) = choose_tile((512, 7168, 16), 132, &heights(512, 7168, 132), &no_pairs, &fit);
        assert_eq!((tm, q), (128, Plan::new((512, 7168, 16), 132, 128, false, &|s| 132 / s)));
    }

    #[test]
    fn pairs_where_k_is_not_split() {
        let fit = |s: usize| 132 / s;
        // M = 128, N = 7168, K = 2048 in 64-row tiles: 112 tiles, no split without pairs,
        // so 56 pairs in clusters of two.
        let p = Plan::choose((128, 7168, 16), 132, 64, (true, false), &fit);
        assert_eq!((p.pair, p.tiles_m, p.splits, p.ctas, p.cluster()), (true, 2, 1, 112, 2));
        // 128 x 2112 x 7168: 34 tiles split K without pairs; no pairs then.
        let q = Plan::choose((128, 2112, 56), 132, 64, (true, true), &fit);
        assert_eq!((q.pair, q.splits, q.cluster() as usize), (false, q.splits, q.splits));
        assert!(q.splits > 1);
        // An odd count of activation tiles pairs its last with a tile past M.
        let r = Plan::choose((192, 7168, 16), 132, 64, (true, false), &fit);
        assert_eq!((r.pair, r.tiles_m, r.splits, r.ctas), (true, 4, 1, 132));
        // Persistent grids hold whole pairs.
        let odd = Plan::choose((512, 32768, 4), 131, 128, (true, false), &fit);
        assert_eq!((odd.pair, odd.ctas, odd.cluster()), (true, 130, 2));
        // Not pairable: the plan without pairs.
        let single = Plan::new((128, 7168, 16), 132, 64, false, &fit);
        assert_eq!(Plan::choose((128, 7168, 16), 132, 64, (false, true), &fit), single);
        // 64 unsplit CTAs (no cluster fits, so no split): pairs only when asked everywhere.
        let none = |_: usize| 0;
        let few = Plan::choose((128, 4096, 56), 132, 64, (true, false), &none);
        assert_eq!((few.pair, few.splits, few.ctas), (false, 1, 64));
        assert!(Plan::choose((128, 4096, 56), 132, 64, (true, true), &none).pair);
        // FP8 block from two activation tiles up, never MXFP8.
        let mx = Format::Mx { a_e5m2: false, b_e5m2: false };
        assert!(pairable(Format::Fp8Block, 65, 64) && !pairable(Format::Fp8Block, 64, 64) && !pairable(mx, 128, 64));
    }
}
