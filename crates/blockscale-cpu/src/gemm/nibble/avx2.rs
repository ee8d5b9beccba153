//! AVX2 + FMA (+F16C for f16 scales) kernels.
//!
//! A 32-element chunk of a weight row is 16 bytes. Broadcast to both 128-bit lanes,
//! shifted right by 4 in the upper lane and masked, it gives the 16 low-nibble codes
//! (even elements) in the lower lane and the 16 high-nibble codes (odd elements) in the
//! upper lane; one `pshufb` maps them to their i8 values. The activations were permuted
//! once per call into the same even/odd order (`super::permute_even_odd`), so lane `l`
//! of a weight vector always meets lane `l` of the matching activation vector.
//! With 16-element blocks a chunk holds two blocks: block A is elements 0..16 (even and
//! odd quarters 0 and 2 of the chunk), block B elements 16..32 (quarters 1 and 3).
//!
//! A tile is `MR` activation rows times `NR` weight rows; each decoded chunk is reused
//! for all `MR` rows, and the weight rows of a tile stay in L1 while the next `MR`
//! activation rows run, so weights come from memory once per call.
//!
//! Every function is `unsafe` (or only callable from one) and needs AVX2, FMA and
//! F16C: `super::effective` only lets `Isa::Avx2` through after checking all three.

use core::arch::x86_64::*;

use crate::gemm::lanes::hsum8;

use super::{NibbleWeights, Scales, XBLOCK};

/// Where a tile finds its block scales: inline byte lookups, or f32 decoded in advance
/// (f16 scales, converted with F16C per row).
struct TileScales<const NR: usize> {
    /// Scale index of (row j of the tile, column 0).
    base: [usize; NR],
    stride: usize,
    bytes: *const u8,
    lut: *const f32,
    /// `NR` rows of `cols` decoded f16 scales.
    buf: *const f32,
    cols: usize,
}

impl<const NR: usize> TileScales<NR> {
    /// Scale (row j, column kb) of the tile.
    ///
    /// # Safety
    /// `j < NR`, `kb < cols`, and the pointers valid for the tile's rows (checked by
    /// the entry points).
    #[inline(always)]
    unsafe fn get<const F16: bool>(&self, j: usize, kb: usize) -> f32 {
        // SAFETY: the caller keeps (j, kb) inside the tile; the entry points checked
        // that every index of these rows lies inside `bytes` / `buf`, and a byte code
        // indexes the 256-entry LUT.
        unsafe {
            if F16 {
                *self.buf.add(j * self.cols + kb)
            } else {
                let code = *self.bytes.add(self.base[j] + (kb >> 2) * self.stride + (kb & 3));
                *self.lut.add(usize::from(code))
            }
        }
    }
}

/// The shared state of one task.
struct Task<'a> {
    w: &'a NibbleWeights<'a>,
    n0: usize,
    /// Decoded f16 scales of the current tile's rows (empty for byte scales).
    f16_buf: Vec<f32>,
}

impl Task<'_> {
    /// Scales of rows `n0 + r .. n0 + r + NR`, decoding f16 ones into `f16_buf`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scales<const NR: usize>(&mut self, r: usize) -> TileScales<NR> {
        let cols = self.w.k / self.w.block;
        let n = self.n0 + r;
        match self.w.scales {
            Scales::Bytes { data, lut, index } => TileScales {
                base: core::array::from_fn(|j| index.row_base(n + j)),
                stride: index.stride(),
                bytes: data.as_ptr(),
                lut: lut.as_ptr(),
                buf: core::ptr::null(),
                cols,
            },
            Scales::F16 { data, index } => {
                self.f16_buf.resize(NR * cols, 0.0);
                for (j, dst) in self.f16_buf.chunks_exact_mut(cols).enumerate() {
                    let base = index.row_base(n + j);
                    let groups = cols / 4;
                    for (g, d4) in dst[..groups * 4].chunks_exact_mut(4).enumerate() {
                        let src = &data[base + g * index.stride()..][..4];
                        // SAFETY: `src` is 4 f16 (8 bytes) and `d4` 4 f32, both bounds-checked
                        // slices; F16C converts every f16 exactly.
                        unsafe {
                            let v = _mm_cvtph_ps(_mm_loadl_epi64(src.as_ptr().cast()));
                            _mm_storeu_ps(d4.as_mut_ptr(), v);
                        }
                    }
                    for (c, s) in dst.iter_mut().enumerate().skip(groups * 4) {
                        *s = data[index.at(n + j, c)].to_f32();
                    }
                }
                TileScales {
                    base: [0; NR],
                    stride: 0,
                    bytes: core::ptr::null(),
                    lut: core::ptr::null(),
                    buf: self.f16_buf.as_ptr(),
                    cols,
                }
            }
        }
    }
}

/// What a tile reads and writes besides its activations.
#[derive(Clone, Copy)]
struct Tile<'s, const NR: usize> {
    k: usize,
    /// Weight row 0 of the tile; row j at `wp + j * k / 2`.
    wp: *const u8,
    sc: &'s TileScales<NR>,
    tbl: __m256i,
    vscale: f32,
    /// Output (activation row 0, weight row 0); (i, j) at `out + j * m + i`.
    out: *mut f32,
    m: usize,
}

impl<const NR: usize> Tile<'_, NR> {
    /// Writes the tile's totals: `out[j * m + i] = vscale * (sum of the lanes of acc[i][j])`.
    ///
    /// # Safety
    /// `out` writable at `j * m + i` for `i < MR`, `j < NR`.
    #[inline(always)]
    unsafe fn store<const MR: usize>(&self, acc: &[[__m256; NR]; MR]) {
        for (i, a) in acc.iter().enumerate() {
            for (j, &v) in a.iter().enumerate() {
                // SAFETY: the caller guarantees `out[j * m + i]` is writable.
                unsafe { *self.out.add(j * self.m + i) = hsum8(v) * self.vscale };
            }
        }
    }
}

/// Checks what every kernel reads; returns the number of output rows.
fn check(w: &NibbleWeights, x_len: usize, m: usize, n0: usize, out_len: usize) -> usize {
    assert!(m > 0 && out_len.is_multiple_of(m));
    let rows = out_len / m;
    assert!(n0 + rows <= w.n && x_len >= m * w.k && w.data.len() >= w.n * (w.k / 2));
    assert!(w.block == 16 || w.block == 32);
    assert!(w.k.is_multiple_of(w.block) && (w.block == 16 || w.k.is_multiple_of(XBLOCK)));
    let index = match w.scales {
        Scales::Bytes { data, index, .. } => {
            assert!(data.len() >= index.storage_len(w.n));
            index
        }
        Scales::F16 { data, index } => {
            assert!(data.len() >= index.storage_len(w.n));
            index
        }
    };
    assert_eq!(index.cols(), w.k / w.block);
    rows
}

/// The i8 values of the 32 codes in the 16 bytes at `p`: even elements in the lower
/// lane, odd elements in the upper lane.
///
/// # Safety
/// 16 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode32(p: *const u8, tbl: __m256i) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let b = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(p.cast()) });
    let nib = _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
    _mm256_shuffle_epi8(tbl, nib)
}

/// The i8 values of the 16 codes in the 8 bytes at `p`: even elements in bytes 0..8,
/// odd elements in bytes 8..16.
///
/// # Safety
/// 8 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode16(p: *const u8, tbl: __m256i) -> __m128i {
    // SAFETY: the caller guarantees 8 readable bytes.
    let b = unsafe { _mm_loadl_epi64(p.cast()) };
    let nib = _mm_and_si128(_mm_unpacklo_epi64(b, _mm_srli_epi16::<4>(b)), _mm_set1_epi8(0x0f));
    _mm_shuffle_epi8(_mm256_castsi256_si128(tbl), nib)
}

/// The 8 i8 at `p` as f32.
///
/// # Safety
/// 8 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_at(p: *const i8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable bytes.
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(unsafe { _mm_loadl_epi64(p.cast()) }))
}

/// Decodes `rows` weight rows of `k` codes at `wp` into their i8 values at `dst`
/// (row r at `dst + r * k`), each 32-chunk (16 for a last half chunk) in even/odd order.
///
/// # Safety
/// `wp` readable for `rows * k / 2` bytes, `dst` writable for `rows * k`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_rows(wp: *const u8, k: usize, rows: usize, tbl: __m256i, dst: *mut i8) {
    let (kh, chunks) = (k / 2, k / 32);
    for r in 0..rows {
        // SAFETY: every read is inside row r's kh bytes and every write inside its k bytes.
        unsafe {
            for c in 0..chunks {
                _mm256_storeu_si256(dst.add(r * k + 32 * c).cast(), decode32(wp.add(r * kh + 16 * c), tbl));
            }
            if !k.is_multiple_of(32) {
                _mm_storeu_si128(dst.add(r * k + 32 * chunks).cast(), decode16(wp.add(r * kh + 16 * chunks), tbl));
            }
        }
    }
}

/// The 16-entry value table in both lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn table(values: &[i8; 16]) -> __m256i {
    // SAFETY: `values` is 16 readable bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(values.as_ptr().cast()) })
}

/// Weight rows per tile when there is a single activation row (more independent
/// accumulators); with several activation rows a tile takes one weight row and up to
/// four activation rows.
const NR1: usize = 4;
const MR: usize = 4;

/// The activations of one mode as its tiles read them: what [`task`], the loop over a
/// task's weight rows and activation rows written once for both modes, asks of a mode.
trait Acts {
    /// Readies weight rows `wp` (`nr` rows of `k / 2` bytes) for the tiles.
    ///
    /// # Safety
    /// AVX2, FMA and F16C present; `wp` readable for `nr <= NR1` rows.
    unsafe fn ready(&mut self, wp: *const u8, k: usize, nr: usize, tbl: __m256i);

    /// One tile: `out[j * m + i] = vscale * Σ ...` for activation rows `i0..i0 + MR`
    /// and the tile's `NR` weight rows (the rows last readied).
    ///
    /// # Safety
    /// AVX2, FMA and F16C present; activation rows `i0..i0 + MR` exist, the weight rows
    /// of `t` (`NR` rows of `k / 2` bytes at `t.wp`, and their scales `t.sc`) too, `out`
    /// is writable at `j * m + i` for `i < MR`, `j < NR`; `k` a multiple of `BLOCK`,
    /// and of 32 unless `BLOCK` is 16.
    unsafe fn tile<const BLOCK: usize, const MR: usize, const NR: usize, const F16: bool>(
        &self,
        i0: usize,
        t: &Tile<'_, NR>,
    );
}

/// Exact mode: permuted f32 activations, weight rows decoded once into `wv` (room for
/// [`NR1`] rows).
struct Exact<'a> {
    xp: &'a [f32],
    wv: Vec<i8>,
}

impl Acts for Exact<'_> {
    #[inline(always)]
    unsafe fn ready(&mut self, wp: *const u8, k: usize, nr: usize, tbl: __m256i) {
        // SAFETY: the caller's guarantee for `wp`; `wv` holds `NR1 * k >= nr * k` bytes.
        unsafe { decode_rows(wp, k, nr, tbl, self.wv.as_mut_ptr()) };
    }

    /// Weight rows `wv` (decoded by `ready`) widened to f32 per 8, FMAs with the
    /// activations per block half, one FMA per block into the totals.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const BLOCK: usize, const MR: usize, const NR: usize, const F16: bool>(
        &self,
        i0: usize,
        t: &Tile<'_, NR>,
    ) {
        let Tile { k, sc, .. } = *t;
        let (x, wv) = (self.xp[i0 * k..].as_ptr(), self.wv.as_ptr());
        let chunks = k / 32;
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        for c in 0..chunks {
            for j in 0..NR {
                // SAFETY (this block): 16 * c + 16 <= kh bytes of row j; 32 * c + 32 <= k f32 of
                // row i; (j, kb) inside the tile.
                unsafe {
                    let p = wv.add(j * k + 32 * c);
                    let w0 = widen_at(p);
                    let w1 = widen_at(p.add(8));
                    let w2 = widen_at(p.add(16));
                    let w3 = widen_at(p.add(24));
                    // A 32-block's scale, or the scales of the chunk's two 16-blocks.
                    let (sa, sb) = if BLOCK == 32 {
                        let s = _mm256_set1_ps(sc.get::<F16>(j, c));
                        (s, s)
                    } else {
                        (_mm256_set1_ps(sc.get::<F16>(j, 2 * c)), _mm256_set1_ps(sc.get::<F16>(j, 2 * c + 1)))
                    };
                    for (i, a) in acc.iter_mut().enumerate() {
                        let xp = x.add(i * k + 32 * c);
                        // Block A's elements (quarters 0 and 2) and block B's (quarters 1 and 3).
                        let pa =
                            _mm256_fmadd_ps(w2, _mm256_loadu_ps(xp.add(16)), _mm256_mul_ps(w0, _mm256_loadu_ps(xp)));
                        let pb = _mm256_fmadd_ps(
                            w3,
                            _mm256_loadu_ps(xp.add(24)),
                            _mm256_mul_ps(w1, _mm256_loadu_ps(xp.add(8))),
                        );
                        a[j] = if BLOCK == 32 {
                            _mm256_fmadd_ps(_mm256_add_ps(pa, pb), sa, a[j])
                        } else {
                            _mm256_fmadd_ps(pb, sb, _mm256_fmadd_ps(pa, sa, a[j]))
                        };
                    }
                }
            }
        }
        if !k.is_multiple_of(32) {
            // A last 16-element block (BLOCK 16 only): 8 bytes, 16 activations [even | odd].
            for j in 0..NR {
                // SAFETY: 16 * chunks + 8 == kh bytes of row j; 32 * chunks + 16 == k f32.
                unsafe {
                    let p = wv.add(j * k + 32 * chunks);
                    let w0 = widen_at(p);
                    let w2 = widen_at(p.add(8));
                    let s = _mm256_set1_ps(sc.get::<F16>(j, 2 * chunks));
                    for (i, a) in acc.iter_mut().enumerate() {
                        let xp = x.add(i * k + 32 * chunks);
                        let p = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xp.add(8)), _mm256_mul_ps(w0, _mm256_loadu_ps(xp)));
                        a[j] = _mm256_fmadd_ps(p, s, a[j]);
                    }
                }
            }
        }
        // SAFETY: the caller guarantees the tile's outputs are writable.
        unsafe { t.store(&acc) };
    }
}

/// Int8 mode: permuted i8 activations `qp` and their factors `d` (`xb` per row).
struct Int8<'a> {
    qp: &'a [i8],
    d: &'a [f32],
    xb: usize,
}

impl Acts for Int8<'_> {
    /// Nothing to ready: the tiles decode the weights in registers.
    #[inline(always)]
    unsafe fn ready(&mut self, _: *const u8, _: usize, _: usize, _: __m256i) {}

    /// `maddubs` with the abs/sign trick on the weights decoded in registers, one
    /// i32-to-f32 conversion per 32 elements.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const BLOCK: usize, const MR: usize, const NR: usize, const F16: bool>(
        &self,
        i0: usize,
        t: &Tile<'_, NR>,
    ) {
        let Tile { k, wp, sc, tbl, .. } = *t;
        let kh = k / 2;
        let chunks = k / 32;
        let xb = self.xb;
        let (q, d) = (self.qp[i0 * k..].as_ptr(), self.d[i0 * xb..].as_ptr());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        for c in 0..chunks {
            for j in 0..NR {
                // SAFETY (this block): 16 * c + 16 <= kh bytes of weight row j, 32 * c + 32 <= k
                // bytes of activation row i, c < xb factors of row i; (j, kb) inside the tile.
                unsafe {
                    let v = decode32(wp.add(j * kh + 16 * c), tbl);
                    let va = _mm256_abs_epi8(v);
                    let s = if BLOCK == 32 {
                        _mm256_set1_ps(sc.get::<F16>(j, c))
                    } else {
                        // i32 lanes after madd: [A A B B | A A B B].
                        let sa = _mm256_set1_ps(sc.get::<F16>(j, 2 * c));
                        let sb = _mm256_set1_ps(sc.get::<F16>(j, 2 * c + 1));
                        _mm256_blend_ps::<0b1100_1100>(sa, sb)
                    };
                    for (i, a) in acc.iter_mut().enumerate() {
                        let qv = _mm256_loadu_si256(q.add(i * k + 32 * c).cast());
                        let dv = _mm256_set1_ps(*d.add(i * xb + c));
                        // |w| * (q * sign(w)): u8 x i8 pairs, |sum| <= 2 * 127 * 128 fits i16.
                        let prod = _mm256_maddubs_epi16(va, _mm256_sign_epi8(qv, v));
                        let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(prod, ones));
                        a[j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(s, dv), a[j]);
                    }
                }
            }
        }
        if !k.is_multiple_of(32) {
            for j in 0..NR {
                // SAFETY: 16 * chunks + 8 == kh bytes of row j, 32 * chunks + 16 == k bytes
                // of activation row i, chunks == xb - 1.
                unsafe {
                    let v = decode16(wp.add(j * kh + 16 * chunks), tbl);
                    let va = _mm_abs_epi8(v);
                    let s = sc.get::<F16>(j, 2 * chunks);
                    for (i, a) in acc.iter_mut().enumerate() {
                        let qv = _mm_loadu_si128(q.add(i * k + 32 * chunks).cast());
                        let c = _mm_set1_ps(s * *d.add(i * xb + chunks));
                        let prod = _mm_maddubs_epi16(va, _mm_sign_epi8(qv, v));
                        let dot = _mm_cvtepi32_ps(_mm_madd_epi16(prod, _mm256_castsi256_si128(ones)));
                        let lo = _mm_fmadd_ps(dot, c, _mm256_castps256_ps128(a[j]));
                        a[j] = _mm256_insertf128_ps::<0>(a[j], lo);
                    }
                }
            }
        }
        // SAFETY: the caller guarantees the tile's outputs are writable.
        unsafe { t.store(&acc) };
    }
}

/// Exact mode for rows `n0..n0 + out_t.len() / m` of the output, `out_t` being
/// `[rows, m]`; `xp` holds the `m x k` activations permuted by
/// `super::permute_even_odd`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn exact_rows(xp: &[f32], m: usize, w: &NibbleWeights, n0: usize, out_t: &mut [f32]) {
    let rows = check(w, xp.len(), m, n0, out_t.len());
    // SAFETY: `check` verified every length the tiles read and write; the caller
    // guarantees the features this function enables for the inlined loops.
    unsafe { dispatch(Exact { xp, wv: vec![0; NR1 * w.k] }, m, w, n0, rows, out_t) }
}

/// Int8 mode for rows `n0..`: `qp` holds the `m x k` quantized activations permuted
/// by `super::permute_even_odd`, `d` their `m x k.div_ceil(32)` factors.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn int8_rows(qp: &[i8], d: &[f32], m: usize, w: &NibbleWeights, n0: usize, out_t: &mut [f32]) {
    let rows = check(w, qp.len(), m, n0, out_t.len());
    let xb = w.k.div_ceil(XBLOCK);
    assert!(d.len() >= m * xb);
    // SAFETY: as in `exact_rows`.
    unsafe { dispatch(Int8 { qp, d, xb }, m, w, n0, rows, out_t) }
}

/// [`task`] with the block size and scale kind of `w` as const parameters.
///
/// # Safety
/// As [`exact_rows`], with the lengths checked, inlined into a function that enables
/// AVX2, FMA and F16C.
#[inline(always)]
unsafe fn dispatch<A: Acts>(mut acts: A, m: usize, w: &NibbleWeights, n0: usize, rows: usize, out_t: &mut [f32]) {
    let f16 = matches!(w.scales, Scales::F16 { .. });
    // SAFETY: the caller's guarantee.
    unsafe {
        match (w.block, f16) {
            (16, false) => task::<A, 16, false>(&mut acts, m, w, n0, rows, out_t),
            (16, true) => task::<A, 16, true>(&mut acts, m, w, n0, rows, out_t),
            (_, false) => task::<A, 32, false>(&mut acts, m, w, n0, rows, out_t),
            (_, true) => task::<A, 32, true>(&mut acts, m, w, n0, rows, out_t),
        }
    }
}

/// Output rows `n0..n0 + rows` for every activation row: four weight rows at a time
/// against a single activation row, else one weight row against up to [`MR`]
/// activation rows at a time.
///
/// # Safety
/// As [`dispatch`].
#[inline(always)]
unsafe fn task<A: Acts, const BLOCK: usize, const F16: bool>(
    acts: &mut A,
    m: usize,
    w: &NibbleWeights,
    n0: usize,
    rows: usize,
    out_t: &mut [f32],
) {
    let k = w.k;
    // SAFETY: the caller guarantees the features.
    let tbl = unsafe { table(&w.values) };
    let mut task = Task { w, n0, f16_buf: Vec::new() };
    let mut r = 0;
    while r < rows {
        let wp = w.data[(n0 + r) * (k / 2)..].as_ptr();
        let o = out_t[r * m..].as_mut_ptr();
        // SAFETY: rows r..r + nr exist (nr <= rows - r), activation rows i..i + mr < m,
        // and `out_t` holds `rows * m` values.
        unsafe {
            if m == 1 && rows - r >= NR1 {
                let sc = task.scales::<NR1>(r);
                let t = Tile { k, wp, sc: &sc, tbl, vscale: w.vscale, out: o, m };
                acts.ready(wp, k, NR1, tbl);
                acts.tile::<BLOCK, 1, NR1, F16>(0, &t);
                r += NR1;
                continue;
            }
            let sc = task.scales::<1>(r);
            acts.ready(wp, k, 1, tbl);
            let mut i = 0;
            while i < m {
                let t = Tile { k, wp, sc: &sc, tbl, vscale: w.vscale, out: o.add(i), m };
                match (m - i).min(MR) {
                    1 => acts.tile::<BLOCK, 1, 1, F16>(i, &t),
                    2 => acts.tile::<BLOCK, 2, 1, F16>(i, &t),
                    3 => acts.tile::<BLOCK, 3, 1, F16>(i, &t),
                    _ => acts.tile::<BLOCK, MR, 1, F16>(i, &t),
                }
                i += MR;
            }
        }
        r += 1;
    }
}
