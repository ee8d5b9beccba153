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
//! [`Path::Portable`] is plain safe Rust; [`Path::Avx2`] (which additionally needs FMA,
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

use crate::kernels::Path;

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
    fn index(&self) -> ScaleIndex {
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
            Self::Swizzled128x4 { cols } => {
                (row / 128) * cols.div_ceil(4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4
            }
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
/// is [`Path::Avx2`] and the CPU has it; without it the AVX-512 kernel never runs.
///
/// # Panics
/// If `block` is not 16 or 32, `k` not a multiple of `block`, or a slice is shorter
/// than the shapes need (`out` must hold exactly `m * n`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_nibble(
    path: Path,
    x: &[f32],
    m: usize,
    w: &NibbleWeights,
    mode: ActMode,
    wide: bool,
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
    let path = effective(path);
    let x = &x[..m * k];
    match mode {
        ActMode::Exact => {
            #[cfg(target_arch = "x86_64")]
            if wide && path == Path::Avx2 && crate::avx512_available() {
                // Rows of zero or normal bf16 take the BF16 kernel, the others the f32 one.
                let bf16: Vec<bool> = x.chunks_exact(k).map(|r| r.iter().all(|&v| bf16_normal(v))).collect();
                split_rows(x, m, k, n, &bf16, out, |sub, rows, o, bf16| {
                    if bf16 {
                        run_bf16(sub, rows, w, parallel, o);
                    } else {
                        run_exact(path, sub, rows, w, parallel, o);
                    }
                });
                return;
            }
            let _ = wide;
            run_exact(path, x, m, w, parallel, out);
        }
        ActMode::Int8 => {
            // Rows with NaN or Inf take the Exact computation; the others are quantized.
            let finite: Vec<bool> = x.chunks_exact(k).map(|r| r.iter().all(|v| v.is_finite())).collect();
            split_rows(x, m, k, n, &finite, out, |sub, rows, o, finite| {
                if finite {
                    run_int8(path, sub, rows, w, parallel, o);
                } else {
                    run_exact(path, sub, rows, w, parallel, o);
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

/// The path that really runs: AVX2 also needs FMA.
fn effective(path: Path) -> Path {
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 if !is_x86_feature_detected!("fma") => Path::Portable,
        p => p,
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
fn quantize_row(row: &[f32], q: &mut [i8], d: &mut [f32]) {
    for ((src, dst), db) in row.chunks(XBLOCK).zip(q.chunks_mut(XBLOCK)).zip(d.iter_mut()) {
        let amax = src.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let scale = amax / 127.0;
        *db = scale;
        for (o, &v) in dst.iter_mut().zip(src) {
            *o = if scale == 0.0 { 0 } else { (v / scale).round_ties_even().clamp(-127.0, 127.0) as i8 };
        }
    }
}

/// Output rows per rayon task: enough tasks to balance two busy cores, each with at
/// least ~32 KiB of weights.
fn rows_per_task(n: usize, k: usize, parallel: bool) -> usize {
    if !parallel {
        return n;
    }
    let tasks = 8 * rayon::current_num_threads();
    let min_rows = (32 * 1024 / (k / 2).max(1)).max(1);
    n.div_ceil(tasks).max(min_rows).next_multiple_of(4).min(n)
}

/// Runs `task(n0, out_t)` over chunks of rows, where `out_t` is the `[rows, m]`
/// (transposed) output of rows `n0..`, then writes `out[m * N + n]`.
fn run_tasks<F>(m: usize, n: usize, k: usize, parallel: bool, out: &mut [f32], task: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let rows = rows_per_task(n, k, parallel);
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

fn run_exact(path: Path, x: &[f32], m: usize, w: &NibbleWeights, parallel: bool, out: &mut [f32]) {
    let k = w.k;
    match path {
        Path::Portable => run_tasks(m, w.n, k, parallel, out, |n0, o| portable::exact_rows(x, m, w, n0, o)),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            let mut xp = vec![0.0; m * k];
            for (src, dst) in x.chunks_exact(k).zip(xp.chunks_exact_mut(k)) {
                permute_even_odd(src, dst);
            }
            // SAFETY: `effective` only keeps `Path::Avx2` when AVX2, F16C and FMA are all
            // present; `gemm_nibble` checked every length the kernel reads.
            run_tasks(m, w.n, k, parallel, out, |n0, o| unsafe { avx2::exact_rows(&xp, m, w, n0, o) });
        }
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
    // SAFETY: `gemm_nibble` only calls this after `crate::avx512_available()`, and
    // checked every length the kernel reads (which checks them again).
    run_tasks(m, w.n, k, parallel, out, |n0, o| unsafe { avx512::exact_rows(&xb, m, w, n0, o) });
}

/// Int8 mode on rows that are all finite.
fn run_int8(path: Path, x: &[f32], m: usize, w: &NibbleWeights, parallel: bool, out: &mut [f32]) {
    let k = w.k;
    let xblocks = k.div_ceil(XBLOCK);
    let mut q = vec![0i8; m * k];
    let mut d = vec![0f32; m * xblocks];
    for ((src, qr), dr) in x.chunks_exact(k).zip(q.chunks_exact_mut(k)).zip(d.chunks_exact_mut(xblocks)) {
        quantize_row(src, qr, dr);
    }
    match path {
        Path::Portable => run_tasks(m, w.n, k, parallel, out, |n0, o| portable::int8_rows(&q, &d, m, w, n0, o)),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            let mut qp = vec![0i8; m * k];
            for (src, dst) in q.chunks_exact(k).zip(qp.chunks_exact_mut(k)) {
                permute_even_odd(src, dst);
            }
            // SAFETY: as in `run_exact`.
            run_tasks(m, w.n, k, parallel, out, |n0, o| unsafe { avx2::int8_rows(&qp, &d, m, w, n0, o) });
        }
    }
}

#[cfg(test)]
mod tests {
    use blockscale_formats::{E2M1, ScaleLayout, UE4M3, UE8M0};
    use half::f16;
    use proptest::prelude::*;

    use super::*;

    thread_local! {
        /// Calls of the AVX-512 BF16 kernel on this thread (`run_bf16` runs on the caller's).
        pub(super) static BF16_RUNS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    }

    fn bf16_runs() -> usize {
        BF16_RUNS.with(|c| c.get())
    }

    /// splitmix64: seeded, reproducible inputs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        /// Uniform in [-1, 1).
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        /// Block 32, UE8M0 byte scales, E2M1 values.
        Mxfp4,
        /// Block 16, UE4M3 byte scales, E2M1 values.
        Nvfp4,
        /// Block 32, f16 scales, offset-8 INT4 values.
        Int4,
    }

    const KINDS: [Kind; 3] = [Kind::Mxfp4, Kind::Nvfp4, Kind::Int4];

    impl Kind {
        fn block(self) -> usize {
            if self == Kind::Nvfp4 { 16 } else { 32 }
        }
        fn values(self) -> ([i8; 16], f32) {
            match self {
                Kind::Int4 => (core::array::from_fn(|c| c as i8 - 8), 1.0),
                _ => (core::array::from_fn(|c| (E2M1::from_bits(c as u8).to_f32() * 2.0) as i8), 0.5),
            }
        }
    }

    fn ue8m0_lut() -> [f32; 256] {
        core::array::from_fn(|b| UE8M0::from_bits(b as u8).to_f32())
    }

    fn ue4m3_lut() -> [f32; 256] {
        core::array::from_fn(|b| UE4M3::from_bits(b as u8).to_f32())
    }

    /// Owned test problem.
    struct Problem {
        kind: Kind,
        n: usize,
        k: usize,
        data: Vec<u8>,
        /// Logical scales, row-major `n x cols`: byte codes, or f16.
        codes: Vec<u8>,
        halves: Vec<f16>,
        lut: [f32; 256],
    }

    /// How scales are drawn.
    #[derive(Clone, Copy, PartialEq)]
    enum Draw {
        /// Spread over a few binades (the codes vary).
        Random,
        /// Powers of two in [1/4, 4]: every partial sum of integer inputs is exact.
        PowersOfTwo,
    }

    impl Problem {
        fn new(kind: Kind, n: usize, k: usize, draw: Draw, rng: &mut Rng) -> Self {
            let data = (0..n * k / 2).map(|_| rng.next() as u8).collect();
            let cols = k / kind.block();
            let pow2 = |rng: &mut Rng| rng.below(5) as i32 - 2;
            let (codes, halves, lut) = match kind {
                Kind::Mxfp4 => {
                    let c = (0..n * cols)
                        .map(
                            |_| if draw == Draw::Random { 120 + rng.below(14) } else { (127 + pow2(rng)) as u64 } as u8,
                        )
                        .collect();
                    (c, vec![], ue8m0_lut())
                }
                Kind::Nvfp4 => {
                    // UE4M3: 0x38 is 1.0; each +8 doubles.
                    let c = (0..n * cols)
                        .map(|_| if draw == Draw::Random { 0x08 + rng.below(0x70) } else { (0x38 + 8 * pow2(rng)) as u64 } as u8)
                        .collect();
                    (c, vec![], ue4m3_lut())
                }
                Kind::Int4 => {
                    let h = (0..n * cols)
                        .map(|_| {
                            if draw == Draw::Random {
                                f16::from_f32(0.01 + 2.0 * rng.unit().abs())
                            } else {
                                f16::from_f32((pow2(rng) as f32).exp2())
                            }
                        })
                        .collect();
                    (vec![], h, [0.0; 256])
                }
            };
            Self { kind, n, k, data, codes, halves, lut }
        }

        fn cols(&self) -> usize {
            self.k / self.kind.block()
        }

        /// The logical scale (row, col) as f64.
        fn scale(&self, r: usize, c: usize) -> f64 {
            let i = r * self.cols() + c;
            if self.kind == Kind::Int4 {
                self.halves[i].to_f64()
            } else {
                f64::from(self.lut[usize::from(self.codes[i])])
            }
        }

        /// Element (r, k) as f64: `values[code] * vscale`.
        fn weight(&self, r: usize, k: usize) -> f64 {
            let b = self.data[r * self.k / 2 + k / 2];
            let code = if k.is_multiple_of(2) { b & 0xf } else { b >> 4 };
            let (values, vscale) = self.kind.values();
            f64::from(values[usize::from(code)]) * f64::from(vscale)
        }

        /// Runs the kernel with the scales stored in `layout`.
        fn run(
            &self,
            kernel: Kernel,
            layout: ScaleLayout,
            x: &[f32],
            m: usize,
            mode: ActMode,
            parallel: bool,
        ) -> Vec<f32> {
            let cols = self.cols();
            let index = match layout {
                ScaleLayout::Linear => ScaleIndex::Linear { cols },
                ScaleLayout::Swizzled128x4 => ScaleIndex::Swizzled128x4 { cols },
            };
            let bytes = blockscale_formats::layout::convert_vec(&self.codes, ScaleLayout::Linear, layout, self.n, cols);
            let halves =
                blockscale_formats::layout::convert_vec(&self.halves, ScaleLayout::Linear, layout, self.n, cols);
            let (bytes, halves) = (bytes.unwrap_or_default(), halves.unwrap_or_default());
            let scales = if self.kind == Kind::Int4 {
                Scales::F16 { data: &halves, index }
            } else {
                Scales::Bytes { data: &bytes, lut: &self.lut, index }
            };
            let (values, vscale) = self.kind.values();
            let w = NibbleWeights {
                data: &self.data,
                n: self.n,
                k: self.k,
                block: self.kind.block(),
                values,
                vscale,
                scales,
            };
            // Poisoned, so an unwritten output shows.
            let mut out = vec![f32::NAN; m * self.n];
            gemm_nibble(kernel.0, x, m, &w, mode, kernel.1, parallel, &mut out);
            out
        }

        /// f64 reference for activations `xs` (already quantized for Int8): per (row, n)
        /// the value and `Σ |x * w * s|`.
        fn reference(&self, xs: &[f64], m: usize) -> Vec<(f64, f64)> {
            let (k, block) = (self.k, self.kind.block());
            let mut out = vec![(0.0, 0.0); m * self.n];
            for i in 0..m {
                for r in 0..self.n {
                    let (mut v, mut a) = (0.0, 0.0);
                    for c in 0..self.cols() {
                        let s = self.scale(r, c);
                        let mut p = 0.0;
                        for kk in c * block..(c + 1) * block {
                            let t = xs[i * k + kk] * self.weight(r, kk);
                            p += t;
                            a += (t * s).abs();
                        }
                        v += p * s;
                    }
                    out[i * self.n + r] = (v, a);
                }
            }
            out
        }

        /// `γ_n` of the documented bound.
        fn gamma(&self) -> f64 {
            let n = (self.kind.block() + self.cols() + 2) as f64;
            let u = 2f64.powi(-24);
            n * u / (1.0 - n * u)
        }
    }

    /// A path and the `wide` flag of `gemm_nibble`.
    type Kernel = (Path, bool);

    /// Every kernel this CPU runs: portable, AVX2, and AVX2 with the AVX-512 BF16
    /// kernel allowed (it runs on bf16 activations).
    fn paths() -> Vec<Kernel> {
        let mut p = vec![(Path::Portable, false)];
        if crate::kernels::avx2_available() {
            p.push((Path::select(crate::Simd::Avx2).unwrap(), false));
        }
        if crate::avx512_available() {
            p.push((Path::select(crate::Simd::Avx512).unwrap(), true));
        }
        p
    }

    /// The test's own Q8_0-like quantization, per the module doc: (d*q per element, d per element).
    fn quantize_ref(x: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
        let mut dq = vec![0.0; x.len()];
        let mut ds = vec![0.0; x.len()];
        for (r, row) in x.chunks(k).enumerate() {
            for (b, blk) in row.chunks(32).enumerate() {
                let amax = blk.iter().map(|v| v.abs()).fold(0f32, f32::max);
                let d = amax / 127.0;
                for (j, &v) in blk.iter().enumerate() {
                    let q = if d == 0.0 { 0.0 } else { (v / d).round_ties_even().clamp(-127.0, 127.0) };
                    dq[r * k + b * 32 + j] = f64::from(d) * f64::from(q);
                    ds[r * k + b * 32 + j] = f64::from(d);
                }
            }
        }
        (dq, ds)
    }

    fn random_x(rng: &mut Rng, len: usize) -> Vec<f32> {
        // A few binades, some exact zeros and a zero block now and then.
        let mut x: Vec<f32> = (0..len).map(|_| rng.unit() * (rng.below(6) as f32 - 2.0).exp2()).collect();
        for v in x.iter_mut().filter(|_| rng.below(16) == 0) {
            *v = 0.0;
        }
        x
    }

    fn check_exact(p: &Problem, x: &[f32], m: usize, label: &str) {
        let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let reference = p.reference(&xs, m);
        for path in paths() {
            for layout in ScaleLayout::ALL {
                for parallel in [false, true] {
                    let out = p.run(path, layout, x, m, ActMode::Exact, parallel);
                    for (idx, (&o, &(v, a))) in out.iter().zip(&reference).enumerate() {
                        let bound = p.gamma() * a * (1.0 + 1e-9) + a * 2f64.powi(-45);
                        let err = (f64::from(o) - v).abs();
                        assert!(
                            err <= bound,
                            "{label} {path:?} {layout} par={parallel} out[{idx}] = {o}, want {v} (err {err:e} > bound {bound:e})"
                        );
                    }
                }
            }
        }
    }

    fn check_int8(p: &Problem, x: &[f32], m: usize, label: &str) {
        let (dq, ds) = quantize_ref(x, p.k);
        let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let quantized = p.reference(&dq, m);
        let exact = p.reference(&xs, m);
        // Σ_k (d (1/2 + 2^-17) + 2^-143) |w s| per output.
        let qerr: Vec<f64> = {
            let unit: Vec<f64> = ds.iter().map(|&d| d * (0.5 + 2f64.powi(-17)) + 2f64.powi(-143)).collect();
            p.reference(&unit, m).iter().map(|a| a.1).collect()
        };
        for path in paths() {
            for layout in ScaleLayout::ALL {
                let out = p.run(path, layout, x, m, ActMode::Int8, true);
                for (idx, &o) in out.iter().enumerate() {
                    let (vq, aq) = quantized[idx];
                    let round = p.gamma() * aq * (1.0 + 1e-9) + aq * 2f64.powi(-45);
                    let err = (f64::from(o) - vq).abs();
                    assert!(
                        err <= round,
                        "{label} {path:?} {layout} out[{idx}] = {o}, quantized ref {vq} (err {err:e} > {round:e})"
                    );
                    let err = (f64::from(o) - exact[idx].0).abs();
                    let bound = qerr[idx] + round;
                    assert!(
                        err <= bound,
                        "{label} {path:?} {layout} out[{idx}] = {o}, exact {} (err {err:e} > {bound:e})",
                        exact[idx].0
                    );
                }
            }
        }
    }

    /// (m, n, k) shapes per kind: n not a multiple of 4, over one swizzle band, K with a
    /// partial last scale group and (NVFP4) an odd number of 16-blocks.
    fn shapes(kind: Kind) -> Vec<(usize, usize, usize)> {
        let b = kind.block();
        let mut s = vec![(1, 1, b), (1, 7, 3 * b), (3, 5, 6 * b), (16, 13, 8 * b), (17, 130, 5 * b), (1, 131, 16 * b)];
        if kind == Kind::Nvfp4 {
            s.extend([(1, 9, 48), (3, 6, 80), (17, 4, 16)]);
        }
        s
    }

    #[test]
    fn scale_index_matches_formats_layout() {
        for cols in [1, 3, 4, 7, 64] {
            for rows in [1, 31, 128, 129, 300] {
                let lin = ScaleIndex::Linear { cols };
                let swz = ScaleIndex::Swizzled128x4 { cols };
                assert_eq!(lin.storage_len(rows), ScaleLayout::Linear.storage_len(rows, cols).unwrap());
                assert_eq!(swz.storage_len(rows), ScaleLayout::Swizzled128x4.storage_len(rows, cols).unwrap());
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(lin.at(r, c), ScaleLayout::Linear.offset(r, c, cols));
                        assert_eq!(swz.at(r, c), ScaleLayout::Swizzled128x4.offset(r, c, cols));
                    }
                }
            }
        }
    }

    #[test]
    fn exact_random_within_bound() {
        let mut rng = Rng(1);
        for kind in KINDS {
            for (m, n, k) in shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
                let x = random_x(&mut rng, m * k);
                check_exact(&p, &x, m, &format!("{kind:?} {m}x{n}x{k}"));
            }
        }
    }

    #[test]
    fn exact_integer_inputs_bit_identical() {
        let mut rng = Rng(2);
        for kind in KINDS {
            for (m, n, k) in shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
                let x: Vec<f32> = (0..m * k).map(|_| rng.below(17) as f32 - 8.0).collect();
                let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let reference = p.reference(&xs, m);
                for path in paths() {
                    for layout in ScaleLayout::ALL {
                        let out = p.run(path, layout, &x, m, ActMode::Exact, true);
                        for (i, (&o, &(v, _))) in out.iter().zip(&reference).enumerate() {
                            assert_eq!(f64::from(o), v, "{kind:?} {m}x{n}x{k} {path:?} {layout} out[{i}]");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn int8_integer_inputs_bit_identical() {
        // Each 32-block holds ±127, so d = 1 and q = x: the Int8 result is exact too.
        let mut rng = Rng(3);
        for kind in KINDS {
            for (m, n, k) in shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
                let mut x: Vec<f32> = (0..m * k).map(|_| rng.below(255) as f32 - 127.0).collect();
                for row in x.chunks_mut(k) {
                    for blk in row.chunks_mut(32) {
                        let j = rng.below(blk.len() as u64) as usize;
                        blk[j] = if rng.below(2) == 0 { 127.0 } else { -127.0 };
                    }
                }
                let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let reference = p.reference(&xs, m);
                for path in paths() {
                    for layout in ScaleLayout::ALL {
                        let out = p.run(path, layout, &x, m, ActMode::Int8, true);
                        for (i, (&o, &(v, _))) in out.iter().zip(&reference).enumerate() {
                            assert_eq!(f64::from(o), v, "{kind:?} {m}x{n}x{k} {path:?} {layout} out[{i}]");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn int8_random_within_bound() {
        let mut rng = Rng(4);
        for kind in KINDS {
            for (m, n, k) in shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
                let x = random_x(&mut rng, m * k);
                check_int8(&p, &x, m, &format!("{kind:?} {m}x{n}x{k}"));
            }
        }
    }

    #[test]
    fn nan_scale_gives_nan_row() {
        let mut rng = Rng(5);
        for kind in [Kind::Mxfp4, Kind::Nvfp4] {
            let (m, n, k) = (3, 9, 4 * kind.block());
            let mut p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let nan_code = if kind == Kind::Mxfp4 { 0xff } else { 0x7f };
            assert!(p.lut[nan_code].is_nan());
            let cols = p.cols();
            p.codes[5 * cols + 2] = nan_code as u8;
            let mut x = random_x(&mut rng, m * k);
            x[k..2 * k].fill(0.0); // 0 * NaN is NaN too
            for path in paths() {
                for layout in ScaleLayout::ALL {
                    for mode in [ActMode::Exact, ActMode::Int8] {
                        let out = p.run(path, layout, &x, m, mode, false);
                        for (i, o) in out.iter().enumerate() {
                            assert_eq!(o.is_nan(), i % n == 5, "{kind:?} {path:?} {layout} {mode:?} out[{i}] = {o}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn int8_non_finite_row_takes_exact() {
        let mut rng = Rng(6);
        for kind in KINDS {
            let (m, n, k) = (5, 11, 8 * kind.block());
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let mut x = random_x(&mut rng, m * k);
            x[k + 7] = f32::INFINITY;
            x[3 * k + 1] = f32::NAN;
            let finite_rows: Vec<f32> = [0, 2, 4].iter().flat_map(|&r| x[r * k..(r + 1) * k].to_vec()).collect();
            for path in paths() {
                for layout in ScaleLayout::ALL {
                    let out = p.run(path, layout, &x, m, ActMode::Int8, true);
                    let exact = p.run(path, layout, &x, m, ActMode::Exact, true);
                    let int8 = p.run(path, layout, &finite_rows, 3, ActMode::Int8, true);
                    for r in 0..m {
                        for j in 0..n {
                            let o = out[r * n + j];
                            let want = match r {
                                1 | 3 => exact[r * n + j],
                                _ => int8[r / 2 * n + j],
                            };
                            assert_eq!(o.to_bits(), want.to_bits(), "{kind:?} {path:?} {layout} row {r} col {j}");
                            if r == 3 {
                                assert!(o.is_nan());
                            }
                            if r == 1 {
                                // Inf times a mixed-sign row: +-Inf or NaN, never finite.
                                assert!(!o.is_finite());
                            }
                        }
                    }
                }
            }
        }
    }

    /// `v` truncated to bf16.
    fn bf16(v: f32) -> f32 {
        f32::from_bits(v.to_bits() & 0xffff_0000)
    }

    /// `γ_n` of the BF16 kernel: `n = ceil(K / 64) + 8`.
    fn gamma_bf16(k: usize) -> f64 {
        let n = (k.div_ceil(64) + 8) as f64;
        let u = 2f64.powi(-24);
        n * u / (1.0 - n * u)
    }

    /// Shapes for the BF16 kernel: K with every remainder mod 64 the block allows, N
    /// not a multiple of 4, M = 1, 3, 16 and one over a tile.
    fn bf16_shapes(kind: Kind) -> Vec<(usize, usize, usize)> {
        let b = kind.block();
        let mut s = vec![
            (1, 1, b),
            (1, 7, 3 * b),
            (3, 5, 6 * b),
            (16, 13, 8 * b),
            (16, 37, 7 * b),
            (17, 130, 5 * b),
            (1, 262, 40 * b),
            (3, 133, 11 * b),
        ];
        if kind == Kind::Nvfp4 {
            s.extend([(1, 9, 48), (3, 6, 80), (16, 4, 16), (1, 11, 112), (16, 6, 176)]);
        }
        s
    }

    /// Whether this CPU runs the BF16 kernel (else the tests below check the f32 paths only).
    fn wide_kernel() -> bool {
        crate::avx512_available()
    }

    #[test]
    fn bf16_random_within_bound() {
        let mut rng = Rng(7);
        for kind in KINDS {
            for (m, n, k) in bf16_shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
                let x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
                let label = format!("bf16 {kind:?} {m}x{n}x{k}");
                let before = bf16_runs();
                check_exact(&p, &x, m, &label);
                if wide_kernel() {
                    assert!(bf16_runs() > before, "{label}: the BF16 kernel did not run");
                    // The BF16 kernel's own, tighter bound.
                    let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                    let reference = p.reference(&xs, m);
                    let kernel = (Path::select(crate::Simd::Avx512).unwrap(), true);
                    for layout in ScaleLayout::ALL {
                        let out = p.run(kernel, layout, &x, m, ActMode::Exact, true);
                        for (idx, (&o, &(v, a))) in out.iter().zip(&reference).enumerate() {
                            let bound = gamma_bf16(k) * a * (1.0 + 1e-9) + a * 2f64.powi(-45);
                            let err = (f64::from(o) - v).abs();
                            assert!(
                                err <= bound,
                                "{label} {layout} out[{idx}] = {o}, want {v} (err {err:e} > {bound:e})"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_integer_inputs_bit_identical() {
        let mut rng = Rng(8);
        for kind in KINDS {
            for (m, n, k) in bf16_shapes(kind) {
                let p = Problem::new(kind, n, k, Draw::PowersOfTwo, &mut rng);
                let x: Vec<f32> = (0..m * k).map(|_| rng.below(17) as f32 - 8.0).collect();
                let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let reference = p.reference(&xs, m);
                let before = bf16_runs();
                for path in paths() {
                    for layout in ScaleLayout::ALL {
                        for parallel in [false, true] {
                            let out = p.run(path, layout, &x, m, ActMode::Exact, parallel);
                            for (i, (&o, &(v, _))) in out.iter().zip(&reference).enumerate() {
                                assert_eq!(f64::from(o), v, "{kind:?} {m}x{n}x{k} {path:?} {layout} out[{i}]");
                            }
                        }
                    }
                }
                assert!(!wide_kernel() || bf16_runs() > before, "{kind:?} {m}x{n}x{k}: the BF16 kernel did not run");
            }
        }
    }

    #[test]
    fn bf16_nan_scale_gives_nan_row() {
        let mut rng = Rng(9);
        for kind in [Kind::Mxfp4, Kind::Nvfp4] {
            for (m, k) in [(1, 4 * kind.block()), (3, 5 * kind.block()), (16, 3 * kind.block())] {
                let n = 9;
                let mut p = Problem::new(kind, n, k, Draw::Random, &mut rng);
                let nan_code = if kind == Kind::Mxfp4 { 0xff } else { 0x7f };
                let cols = p.cols();
                p.codes[5 * cols + cols - 1] = nan_code as u8;
                let mut x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
                x[..k].fill(0.0); // 0 * NaN is NaN too
                let before = bf16_runs();
                for path in paths() {
                    for layout in ScaleLayout::ALL {
                        let out = p.run(path, layout, &x, m, ActMode::Exact, false);
                        for (i, o) in out.iter().enumerate() {
                            assert_eq!(o.is_nan(), i % n == 5, "{kind:?} m={m} {path:?} {layout} out[{i}] = {o}");
                        }
                    }
                }
                assert!(!wide_kernel() || bf16_runs() > before);
            }
        }
    }

    #[test]
    fn bf16_other_rows_take_f32_kernel() {
        // Rows holding a bf16 subnormal, an f32 that is no bf16, an infinity or a NaN take
        // the AVX2 f32 kernel; the other rows give what they give alone in the BF16 kernel.
        let mut rng = Rng(10);
        let odd = [
            f32::from_bits(0x0020_0000), // bf16 subnormal
            -f32::from_bits(0x0001_0000),
            1.0 + f32::EPSILON, // not a bf16
            f32::INFINITY,
            f32::NAN,
        ];
        for kind in KINDS {
            let (m, n, k) = (7, 11, 6 * kind.block());
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let mut x: Vec<f32> = random_x(&mut rng, m * k).into_iter().map(bf16).collect();
            for (r, &v) in [1, 2, 3, 5, 6].iter().zip(&odd) {
                x[r * k + 3] = v;
            }
            let good: Vec<f32> = [0, 4].iter().flat_map(|&r| x[r * k..(r + 1) * k].to_vec()).collect();
            for (path, wide) in paths() {
                for layout in ScaleLayout::ALL {
                    let out = p.run((path, wide), layout, &x, m, ActMode::Exact, true);
                    let f32_kernel = p.run((path, false), layout, &x, m, ActMode::Exact, true);
                    let alone = p.run((path, wide), layout, &good, 2, ActMode::Exact, true);
                    for r in 0..m {
                        for j in 0..n {
                            let want = match r {
                                0 | 4 => alone[r / 4 * n + j],
                                _ => f32_kernel[r * n + j],
                            };
                            let o = out[r * n + j];
                            assert_eq!(
                                o.to_bits(),
                                want.to_bits(),
                                "{kind:?} {path:?} {wide} {layout} row {r} col {j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn zero_k_and_zero_rows() {
        let lut = ue8m0_lut();
        let w = NibbleWeights {
            data: &[],
            n: 3,
            k: 0,
            block: 32,
            values: Kind::Mxfp4.values().0,
            vscale: 0.5,
            scales: Scales::Bytes { data: &[], lut: &lut, index: ScaleIndex::Linear { cols: 0 } },
        };
        for path in paths() {
            let mut out = vec![f32::NAN; 6];
            gemm_nibble(path.0, &[], 2, &w, ActMode::Exact, path.1, true, &mut out);
            assert_eq!(out, vec![0.0; 6]);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random shapes and values, both modes, every path and layout.
        #[test]
        fn random_shapes_within_bound(kind in 0usize..3, m in 1usize..20, n in 1usize..40, blocks in 1usize..12, seed in any::<u64>()) {
            let kind = KINDS[kind];
            let k = blocks * kind.block();
            let mut rng = Rng(seed);
            let p = Problem::new(kind, n, k, Draw::Random, &mut rng);
            let x = random_x(&mut rng, m * k);
            check_exact(&p, &x, m, "proptest");
            check_int8(&p, &x, m, "proptest");
            let x: Vec<f32> = x.into_iter().map(bf16).collect();
            check_exact(&p, &x, m, "proptest bf16");
        }
    }
}
