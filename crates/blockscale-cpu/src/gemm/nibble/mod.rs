//! Weight-only GEMV and small GEMM with 4-bit weights (E2M1 for NVFP4/MXFP4, offset-8
//! INT4 for INT4-G32) and f32 activations:
//!
//! ```text
//! out[m * N + n] = vscale * Σ_kb s(n, kb) * Σ_{k in block kb} x[m, k] * values[code(n, k)]
//! ```
//!
//! `values` maps a code to a small integer (E2M1 codes give twice their value), `vscale`
//! undoes that factor, and `s(n, kb)` is the block scale (a byte code through a LUT, or
//! an f16). There is no epilogue: the caller applies alpha, bias and activation.
//!
//! # Exact mode
//!
//! The activations are used as given. Each block's sum `P = Σ x_k * values_k` is
//! accumulated in f32 (products and FMAs in any order), multiplied by the block scale
//! in f32 and added to f32 accumulators in any order; the total is multiplied by
//! `vscale` once at the end. Every term `t_k = x_k * values_k * vscale * s` then passes
//! through at most `block` roundings inside its block (its product and the block's
//! additions), one for the scale, `K / block` accumulation roundings and a few for the
//! final lane reduction and `vscale`, so with `u = 2^-24`, `n = block + K / block + 2`
//! and `γ_n = n u / (1 - n u)`, barring underflow and overflow:
//!
//! ```text
//! |out - exact| <= γ_n * Σ_k |x_k * values_k * vscale * s(n, kb(k))|     (≈ n * 2^-24 * Σ|t_k|)
//! ```
//!
//! where `exact` is the real-arithmetic value on the given f32 inputs and decoded scales.
//! A NaN scale, a NaN or infinite activation make the output NaN or infinite as IEEE
//! arithmetic says.
//!
//! The AVX-512 BF16 kernel (see "Paths") takes only rows whose values are zero or
//! normal bf16, so every `x_k * values_k` is exact in f32 (8 + 4 significant bits).
//! `vdpbf16ps` adds two such products to a lane per instruction (RNE; counted as two
//! roundings, fewer if the hardware fuses them). A lane holds four elements of one
//! block per 64-element chunk and starts from zero, so a term sees at most 3
//! roundings there, then 1 in the FMA that scales the chunk into the running total,
//! at most `ceil(K / 64) - 1` in the later chunks' FMAs, 4 in the fixed 16-lane
//! reduction and 1 for `vscale`: `n = ceil(K / 64) + 8`, which is at most
//! `block + K / block + 2` for block 16 and 32, so the bound above holds unchanged.
//! `vdpbf16ps` also flushes subnormal results to zero, so a chunk's partial sum below
//! `2^-126` in magnitude is lost (an absolute error under `2^-126`); the bound, like
//! the f32 paths', assumes no underflow. Rows with a bf16 subnormal (which the
//! instruction would read as zero), an infinity, a NaN or any value that is not a
//! bf16 take the f32 kernel instead, row by row.
//!
//! # Int8 mode
//!
//! Each activation row is cut into 32-element blocks (the last one 16 elements when
//! `K` is an odd multiple of 16), quantized like llama.cpp's Q8_0 but with the division
//! and ties-to-even rounding spelled out: `d = amax / 127` (f32) and
//! `q = clamp(round_ties_even(x / d), -127, 127)` (all zero when `d == 0`). Each weight
//! block's integer dot product `I = Σ q_k * values_k` is exact in i32; the output is
//! `vscale * Σ_kb I * (d * s(n, kb))` in f32. Per element the quantization error is
//! `|x - d q| <= d * (1/2 + 2^-17) + 2^-143` (the last term only matters when `d` is
//! subnormal), so barring overflow
//!
//! ```text
//! |out - exact| <= Σ_k |x_k - d q_k| * |values_k * vscale * s|
//!                + γ_n * Σ_k |d q_k * values_k * vscale * s|          (n as above)
//! ```
//!
//! A row holding a NaN or an infinity is not quantized: it takes the Exact computation,
//! so NaN and infinities propagate (the weights are then streamed a second time).
//!
//! # Paths
//!
//! [`Isa::Portable`] is plain safe Rust; [`Isa::Avx2`] (which additionally needs FMA,
//! else the portable code runs) splits 32 nibbles with one shift and mask and maps them
//! with one `pshufb`, against activations permuted once per call into even/odd order
//! per 32-block. Exact mode decodes each weight row once into an i8 buffer and reuses
//! it for every activation row (up to four per pass, or four weight rows at a time when
//! `M = 1`); Int8 mode uses `maddubs` with the abs/sign trick and one i32-to-f32
//! conversion per 32 elements. With `wide` set (the caller's ISA is AVX-512), on a
//! CPU with AVX-512 F/BW/BF16, Exact mode sends rows of zero or normal bf16 values to
//! the AVX-512 BF16 kernel (`avx512.rs`): 32 bytes of a weight row are widened to
//! 16-bit lanes, split into low and high nibbles, mapped to bf16 values with one
//! `vpermw` each and multiplied with the activations (converted once per call to bf16
//! in the matching even/odd order) by two `vdpbf16ps`, 64 elements per FMA into the
//! total. The paths compute the same quantity with different rounding orders; all
//! meet the bounds above. Work is split over rayon by chunks of output rows `n`,
//! never along `K`, so results do not depend on the thread count.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;

use rayon::prelude::*;

use crate::kernels::Isa;

/// Packed 4-bit weights, `n x k`, with their block scales.
pub(crate) struct NibbleWeights<'a> {
    /// Row-major `[n, k / 2]` bytes; byte `j` of a row holds element `2j` in the low
    /// nibble and `2j + 1` in the high nibble.
    pub data: &'a [u8],
    /// Output features (rows of W).
    pub n: usize,
    /// Reduction length, a multiple of `block`.
    pub k: usize,
    /// Elements per scale block: 16 (NVFP4) or 32 (MXFP4, INT4-G32).
    pub block: usize,
    /// Code to integer value: E2M1 codes give twice their value (0, 1, 2, 3, 4, 6, 8, 12
    /// and the negatives for codes 8..15, -0 being 0); offset-8 INT4 gives `code - 8`.
    pub values: [i8; 16],
    /// Element value = `values[code] * vscale` (0.5 for E2M1, 1 for INT4).
    pub vscale: f32,
    /// The block scales.
    pub scales: Scales<'a>,
}

/// Block scales of a [`NibbleWeights`].
pub(crate) enum Scales<'a> {
    /// One byte per scale (UE4M3 or UE8M0 codes) decoded through `lut` (256 f32; may hold NaN).
    Bytes { data: &'a [u8], lut: &'a [f32; 256], index: ScaleIndex },
    /// f16 scales (INT4-G32).
    F16 { data: &'a [half::f16], index: ScaleIndex },
}

impl Scales<'_> {
    pub(crate) fn index(&self) -> ScaleIndex {
        match *self {
            Self::Bytes { index, .. } | Self::F16 { index, .. } => index,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Bytes { data, .. } => data.len(),
            Self::F16 { data, .. } => data.len(),
        }
    }
}

/// Where scale (row, col) of an `n x cols` scale matrix is stored; `cols = k / block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScaleIndex {
    /// Row-major.
    Linear { cols: usize },
    /// The tensor cores' `[rows/128, cols/4, 32, 4, 4]` layout (see
    /// `blockscale_formats::layout`).
    Swizzled128x4 { cols: usize },
}

impl ScaleIndex {
    /// Logical scale columns.
    pub(crate) fn cols(self) -> usize {
        match self {
            Self::Linear { cols } | Self::Swizzled128x4 { cols } => cols,
        }
    }

    /// Index of scale (row, col): `row_base(row) + (col / 4) * stride() + col % 4`.
    #[inline]
    pub(crate) fn at(self, row: usize, col: usize) -> usize {
        self.row_base(row) + (col / 4) * self.stride() + col % 4
    }

    /// Index of scale (row, 0).
    #[inline]
    pub(crate) fn row_base(self, row: usize) -> usize {
        match self {
            Self::Linear { cols } => row * cols,
            Self::Swizzled128x4 { cols } => blockscale_formats::layout::swizzled_offset(row, 0, cols),
        }
    }

    /// Distance between the scales of columns `c` and `c + 4` of one row.
    #[inline]
    pub(crate) fn stride(self) -> usize {
        match self {
            Self::Linear { .. } => 4,
            Self::Swizzled128x4 { .. } => 512,
        }
    }

    /// Entries the scales of rows `0..rows` need (padding of the last swizzle tile included).
    pub(crate) fn storage_len(self, rows: usize) -> usize {
        match self {
            Self::Linear { cols } => rows * cols,
            Self::Swizzled128x4 { cols } => rows.div_ceil(128) * 128 * cols.div_ceil(4) * 4,
        }
    }
}

/// How the activations enter the dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ActMode {
    /// f32 as given.
    Exact,
    /// Quantized on the fly to i8 per 32-element block (Q8_0-like).
    Int8,
}

/// Elements per activation quantization block (Int8 mode) and per SIMD chunk.
const XBLOCK: usize = 32;

/// `out[m * N + n] = vscale * Σ_kb s(n, kb) * Σ_k x[m, k] * values[code(n, k)]` for the
/// row-major `m x k` activations `x` (see the module doc for both modes and their error
/// bounds). `parallel` spreads chunks of `n` over rayon's pool. `wide` allows the
/// AVX-512 BF16 kernel of the Exact mode (see "Paths" in the module doc) when `path`
/// is [`Isa::Avx2`] and the CPU has it; without it the AVX-512 kernel never runs.
///
/// # Panics
/// If `block` is not 16 or 32, `k` not a multiple of `block`, or a slice is shorter
/// than the shapes need (`out` must hold exactly `m * n`).
pub(crate) fn gemm_nibble(
    isa: Isa,
    x: &[f32],
    m: usize,
    w: &NibbleWeights,
    mode: ActMode,
    parallel: bool,
    out: &mut [f32],
) {
    let (n, k) = (w.n, w.k);
    assert!(w.block == 16 || w.block == 32, "block must be 16 or 32, got {}", w.block);
    assert!(k.is_multiple_of(w.block), "k = {k} is not a multiple of block = {}", w.block);
    assert!(x.len() >= m * k, "x holds {} values, {m} x {k} needed", x.len());
    assert!(w.data.len() >= n * (k / 2), "weights hold {} bytes, {} needed", w.data.len(), n * (k / 2));
    let index = w.scales.index();
    assert_eq!(index.cols(), k / w.block, "scale columns");
    assert!(w.scales.len() >= index.storage_len(n), "scales hold {} entries", w.scales.len());
    assert_eq!(out.len(), m * n, "out length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let x = &x[..m * k];
    match mode {
        ActMode::Exact => {
            #[cfg(target_arch = "x86_64")]
            if isa.bf16() {
                // Rows of zero or normal bf16 take the BF16 kernel, the others the f32 one.
                let bf16: Vec<bool> = x.chunks_exact(k).map(|r| r.iter().all(|&v| bf16_normal(v))).collect();
                split_rows(x, m, k, n, &bf16, out, |sub, rows, o, bf16| {
                    if bf16 {
                        run_bf16(sub, rows, w, parallel, o);
                    } else {
                        run_exact(isa, sub, rows, w, parallel, o);
                    }
                });
                return;
            }
            run_exact(isa, x, m, w, parallel, out);
        }
        ActMode::Int8 => {
            // Rows with NaN or Inf take the Exact computation; the others are quantized.
            let finite: Vec<bool> = x.chunks_exact(k).map(|r| r.iter().all(|v| v.is_finite())).collect();
            split_rows(x, m, k, n, &finite, out, |sub, rows, o, finite| {
                if finite {
                    run_int8(isa, sub, rows, w, parallel, o);
                } else {
                    run_exact(isa, sub, rows, w, parallel, o);
                }
            });
        }
    }
}

/// Whether `v` is zero or a normal bf16: the low 16 bits of its pattern zero, finite,
/// and not a bf16 subnormal (which `vdpbf16ps` would read as zero).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn bf16_normal(v: f32) -> bool {
    let b = v.to_bits();
    let exp = b & 0x7f80_0000;
    b & 0xffff == 0 && exp != 0x7f80_0000 && (exp != 0 || b & 0x7fff_ffff == 0)
}

/// Runs `f(rows_x, rows, out_rows, class)` on the rows of `x` (`m x k`) of each class,
/// all at once when they share one, and scatters the `rows x n` results into `out`.
fn split_rows<F>(x: &[f32], m: usize, k: usize, n: usize, class: &[bool], out: &mut [f32], mut f: F)
where
    F: FnMut(&[f32], usize, &mut [f32], bool),
{
    if let Some(&c) = class.first()
        && class.iter().all(|&v| v == c)
    {
        f(x, m, out, c);
        return;
    }
    for want in [true, false] {
        let rows: Vec<usize> = (0..m).filter(|&r| class[r] == want).collect();
        let sub: Vec<f32> = rows.iter().flat_map(|&r| &x[r * k..(r + 1) * k]).copied().collect();
        let mut o = vec![0.0; rows.len() * n];
        f(&sub, rows.len(), &mut o, want);
        for (i, &r) in rows.iter().enumerate() {
            out[r * n..(r + 1) * n].copy_from_slice(&o[i * n..(i + 1) * n]);
        }
    }
}

/// Activations reordered per 32-element chunk (16 for a last half chunk): the even
/// elements first, then the odd ones, matching low and high nibbles of the weights.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn permute_even_odd<T: Copy>(row: &[T], out: &mut [T]) {
    for (src, dst) in row.chunks(XBLOCK).zip(out.chunks_mut(XBLOCK)) {
        let h = src.len() / 2;
        for i in 0..h {
            dst[i] = src[2 * i];
            dst[h + i] = src[2 * i + 1];
        }
    }
}

/// Q8_0-like quantization of one finite row: `d[b] = amax / 127`,
/// `q = clamp(round_ties_even(x / d), -127, 127)` per 32-element block.
pub(crate) fn quantize_row(row: &[f32], q: &mut [i8], d: &mut [f32]) {
    for ((src, dst), db) in row.chunks(XBLOCK).zip(q.chunks_mut(XBLOCK)).zip(d.iter_mut()) {
        let amax = src.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let scale = amax / 127.0;
        *db = scale;
        for (o, &v) in dst.iter_mut().zip(src) {
            *o = if scale == 0.0 { 0 } else { round_small(v / scale).clamp(-127.0, 127.0) as i8 };
        }
    }
}

/// `y.round_ties_even()` for `|y| <= 2^22` (here `|x / d|` is at most 127 and a hair),
/// without the library call `round_ties_even` becomes on baseline x86-64: adding and
/// subtracting 1.5 * 2^23 rounds to an integer, ties to even, in the default rounding
/// mode.
#[inline(always)]
fn round_small(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (y + MAGIC) - MAGIC
}

/// Output rows per rayon task: enough tasks to balance two busy cores, each with at
/// least ~32 KiB of weights.
fn rows_per_task(n: usize, row_bytes: usize, parallel: bool) -> usize {
    if !parallel {
        return n;
    }
    let tasks = 8 * rayon::current_num_threads();
    let min_rows = (32 * 1024 / row_bytes.max(1)).max(1);
    n.div_ceil(tasks).max(min_rows).next_multiple_of(4).min(n)
}

/// Runs `task(n0, out_t)` over chunks of rows (weight rows of `row_bytes` bytes), where
/// `out_t` is the `[rows, m]` (transposed) output of rows `n0..`, then writes
/// `out[m * N + n]`.
pub(super) fn run_tasks<F>(m: usize, n: usize, row_bytes: usize, parallel: bool, out: &mut [f32], task: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let rows = rows_per_task(n, row_bytes, parallel);
    let go = |buf: &mut [f32]| {
        if parallel {
            buf.par_chunks_mut(rows * m).enumerate().for_each(|(i, o)| task(i * rows, o));
        } else {
            buf.chunks_mut(rows * m).enumerate().for_each(|(i, o)| task(i * rows, o));
        }
    };
    if m == 1 {
        go(out);
    } else {
        let mut t = vec![0.0; m * n];
        go(&mut t);
        for (j, col) in t.chunks_exact(m).enumerate() {
            for (i, &v) in col.iter().enumerate() {
                out[i * n + j] = v;
            }
        }
    }
}

fn run_exact(isa: Isa, x: &[f32], m: usize, w: &NibbleWeights, parallel: bool, out: &mut [f32]) {
    let k = w.k;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => {
            let mut xp = vec![0.0; m * k];
            for (src, dst) in x.chunks_exact(k).zip(xp.chunks_exact_mut(k)) {
                permute_even_odd(src, dst);
            }
            // SAFETY: both ISAs are only selected where AVX2, F16C and FMA are all
            // present; `gemm_nibble` checked every length the kernel reads.
            run_tasks(m, w.n, k / 2, parallel, out, |n0, o| unsafe { avx2::exact_rows(&xp, m, w, n0, o) });
        }
        _ => run_tasks(m, w.n, k / 2, parallel, out, |n0, o| portable::exact_rows(x, m, w, n0, o)),
    }
}

/// Exact mode with the AVX-512 BF16 kernel, on rows of zero or normal bf16 values.
#[cfg(target_arch = "x86_64")]
fn run_bf16(x: &[f32], m: usize, w: &NibbleWeights, parallel: bool, out: &mut [f32]) {
    #[cfg(test)]
    tests::BF16_RUNS.with(|c| c.set(c.get() + 1));
    let k = w.k;
    let kp = k.next_multiple_of(avx512::CHUNK);
    let mut xb = vec![0u16; m * kp];
    for (src, dst) in x.chunks_exact(k).zip(xb.chunks_exact_mut(kp)) {
        avx512::bf16_row(src, dst);
    }
    // SAFETY: `gemm_nibble` only calls this where `Isa::bf16` holds (AVX-512 F, BW and
    // BF16), and checked every length the kernel reads (which checks them again).
    run_tasks(m, w.n, k / 2, parallel, out, |n0, o| unsafe { avx512::exact_rows(&xb, m, w, n0, o) });
}

/// Int8 mode on rows that are all finite.
fn run_int8(isa: Isa, x: &[f32], m: usize, w: &NibbleWeights, parallel: bool, out: &mut [f32]) {
    let k = w.k;
    let xblocks = k.div_ceil(XBLOCK);
    let mut q = vec![0i8; m * k];
    let mut d = vec![0f32; m * xblocks];
    for ((src, qr), dr) in x.chunks_exact(k).zip(q.chunks_exact_mut(k)).zip(d.chunks_exact_mut(xblocks)) {
        quantize_row(src, qr, dr);
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => {
            let mut qp = vec![0i8; m * k];
            for (src, dst) in q.chunks_exact(k).zip(qp.chunks_exact_mut(k)) {
                permute_even_odd(src, dst);
            }
            // SAFETY: as in `run_exact`.
            run_tasks(m, w.n, k / 2, parallel, out, |n0, o| unsafe { avx2::int8_rows(&qp, &d, m, w, n0, o) });
        }
        _ => run_tasks(m, w.n, k / 2, parallel, out, |n0, o| portable::int8_rows(&q, &d, m, w, n0, o)),
    }
}

#[cfg(test)]
pub(super) mod tests;
