//! AVX-512 BF16 kernel of the Exact mode, for activation rows whose values are all
//! zero or normal bf16 (`super::gemm_nibble` checks that and when it may run).
//!
//! A chunk is 64 elements of a weight row, 32 bytes. `vpmovzxbw` widens them to 32
//! u16 lanes; a mask leaves the low nibbles (elements 0, 2, .., 62), a shift the high
//! nibbles (elements 1, 3, .., 63), and one `vpermw` each maps the codes to the bf16
//! bits of their values (small integers, exact in bf16). The activations were
//! converted once per call to bf16 in the same order ([`bf16_row`]: per 64-chunk the
//! even elements, then the odd ones, zero padded to a multiple of 64), so two
//! `vdpbf16ps` (even with even, odd with odd) leave in f32 lane `l` the sum of the
//! chunk's elements `4l..4l + 4`: lanes 0..8 belong to the chunk's first 32-block and
//! 8..16 to its second, or with 16-blocks lanes `4b..4b + 4` to block `b`. One FMA
//! with a vector of the lanes' block scales adds the chunk to the running total; the
//! 16 lanes are summed by a fixed tree at the end and multiplied by `vscale`.
//!
//! A last partial chunk (16, 32 or 48 elements) reads only its bytes (masked load);
//! the missing codes decode to `values[0]` and meet zero activations, and their lanes
//! get scale 0, so they add exact zeros.
//!
//! Tiles: with one activation row, four weight rows at a time (independent chains);
//! with several, one weight row decoded once per chunk and used for up to [`MR`]
//! activation rows. Each output sees the same operations in the same order whatever
//! the tile, so results do not depend on how rows are split into tasks.

use core::arch::x86_64::*;

use super::{NibbleWeights, Scales};
use crate::gemm::bf16::bh;
use crate::gemm::lanes::hsum16;

/// Elements per chunk (one 32-byte weight load, two 32-lane bf16 vectors).
pub(super) const CHUNK: usize = 64;

/// Activation rows per tile when `m > 1`: 16 totals stay in registers.
const MR: usize = 16;

/// Weight rows per tile when `m == 1`.
const NR1: usize = 4;

/// `row` (every value a bf16, i.e. the low 16 bits of its f32 pattern zero) as bf16
/// bits into `dst` (`row.len()` rounded up to [`CHUNK`]): per 64-chunk the even
/// elements, then the odd ones; zeros past the end of the row.
pub(super) fn bf16_row(row: &[f32], dst: &mut [u16]) {
    assert_eq!(dst.len(), row.len().next_multiple_of(CHUNK));
    dst.fill(0);
    for (src, d) in row.chunks(CHUNK).zip(dst.chunks_exact_mut(CHUNK)) {
        for (e, &v) in src.iter().enumerate() {
            d[e / 2 + (e % 2) * (CHUNK / 2)] = (v.to_bits() >> 16) as u16;
        }
    }
}

/// The bf16 weights of a chunk's 32 bytes: (even elements, odd elements).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn decode(b: __m256i, tbl: __m512i) -> (__m512bh, __m512bh) {
    let w = _mm512_cvtepu8_epi16(b);
    let lo = _mm512_and_si512(w, _mm512_set1_epi16(0x0f));
    let hi = _mm512_srli_epi16::<4>(w);
    (bh(_mm512_permutexvar_epi16(lo, tbl)), bh(_mm512_permutexvar_epi16(hi, tbl)))
}

/// Loop-invariant data of one call.
struct Consts {
    k: usize,
    /// `k` rounded up to [`CHUNK`]: the length of an activation row.
    kp: usize,
    /// Bytes per weight row.
    kh: usize,
    /// Scale columns per chunk (2 or 4).
    spc: usize,
    /// f32 per row of a scale buffer.
    sstride: usize,
    /// Lane `l` takes scale `sidx[l]` of the chunk's group.
    sidx: __m512i,
    /// Code to bf16 bits, in lanes 0..16.
    tbl: __m512i,
    /// Bytes of a last partial chunk (0 if none) as a load mask.
    tail: __mmask64,
    vscale: f32,
}

/// One tile: `out[j * m + i] = vscale * Σ ...` for activation rows `x + i * kp` and
/// weight rows `wp + j * kh`, with block scales `sc + j * sstride`.
///
/// # Safety
/// AVX-512 F/BW/BF16 present; `x` readable for `MI` rows of `kp` u16, `wp` for `NJ`
/// rows of `kh` bytes, `sc` for `NJ` rows of `sstride` f32 (`sstride >= k / 64 * spc
/// + 4`), `out` writable at `j * m + i` for `i < MI`, `j < NJ`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const MI: usize, const NJ: usize>(
    c: &Consts,
    x: *const u16,
    wp: *const u8,
    sc: *const f32,
    out: *mut f32,
    m: usize,
) {
    let full = c.k / CHUNK;
    let zero = _mm512_setzero_ps();
    let mut tot = [[zero; NJ]; MI];
    // SAFETY (both blocks): chunk `ch` reads bytes `32 ch..32 ch + 32` of each weight row
    // (only the tail's bytes, masked, for the last partial chunk: `32 full + kh % 32 ==
    // kh`), u16 `64 ch..64 ch + 64 <= kp` of each activation row and f32 `ch spc..ch spc
    // + 4 < sstride` of each scale row.
    let step = |tot: &mut [[__m512; NJ]; MI], ch: usize, bytes: [__m256i; NJ]| unsafe {
        for (j, &b) in bytes.iter().enumerate() {
            let (we, wo) = decode(b, c.tbl);
            let s4 = _mm_loadu_ps(sc.add(j * c.sstride + ch * c.spc));
            let s = _mm512_permutexvar_ps(c.sidx, _mm512_castps128_ps512(s4));
            for (i, t) in tot.iter_mut().enumerate() {
                let xp = x.add(i * c.kp + ch * CHUNK);
                let xe = bh(_mm512_loadu_si512(xp.cast()));
                let xo = bh(_mm512_loadu_si512(xp.add(CHUNK / 2).cast()));
                let a = _mm512_dpbf16_ps(zero, xe, we);
                let a = _mm512_dpbf16_ps(a, xo, wo);
                t[j] = _mm512_fmadd_ps(a, s, t[j]);
            }
        }
    };
    for ch in 0..full {
        // SAFETY: as above.
        let bytes = core::array::from_fn(|j| unsafe { _mm256_loadu_si256(wp.add(j * c.kh + ch * 32).cast()) });
        step(&mut tot, ch, bytes);
    }
    if c.tail != 0 {
        // SAFETY: as above; the mask reads only the row's last `kh % 32` bytes.
        let bytes = core::array::from_fn(|j| unsafe {
            _mm512_castsi512_si256(_mm512_maskz_loadu_epi8(c.tail, wp.add(j * c.kh + full * 32).cast()))
        });
        step(&mut tot, full, bytes);
    }
    for (i, t) in tot.iter().enumerate() {
        for (j, &v) in t.iter().enumerate() {
            // SAFETY: the caller guarantees `out[j * m + i]` is writable.
            unsafe { *out.add(j * m + i) = hsum16(v) * c.vscale };
        }
    }
}

/// Decodes the block scales of row `n` into `dst` (`sstride` f32): columns
/// `0..k / block`, then zeros.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn row_scales(w: &NibbleWeights, n: usize, dst: &mut [f32]) {
    let cols = w.k / w.block;
    let (head, rest) = dst.split_at_mut(cols);
    rest.fill(0.0);
    match w.scales {
        Scales::Bytes { data, lut, index } if index.stride() == 4 => {
            // Linear: the row's codes are contiguous.
            let base = index.row_base(n);
            for (d, &code) in head.iter_mut().zip(&data[base..base + cols]) {
                *d = lut[usize::from(code)];
            }
        }
        Scales::Bytes { data, lut, index } => {
            let (base, stride) = (index.row_base(n), index.stride());
            for (g, d4) in head.chunks_mut(4).enumerate() {
                let src = &data[base + g * stride..][..d4.len()];
                for (d, &code) in d4.iter_mut().zip(src) {
                    *d = lut[usize::from(code)];
                }
            }
        }
        Scales::F16 { data, index } => {
            let (base, stride) = (index.row_base(n), index.stride());
            for (g, d4) in head.chunks_mut(4).enumerate() {
                let src = &data[base + g * stride..][..d4.len()];
                if d4.len() == 4 {
                    // SAFETY: `src` is 4 f16 (8 bytes) and `d4` 4 f32, both bounds-checked
                    // slices; F16C (implied by AVX-512 F) converts every f16 exactly.
                    unsafe { _mm_storeu_ps(d4.as_mut_ptr(), _mm_cvtph_ps(_mm_loadl_epi64(src.as_ptr().cast()))) };
                } else {
                    for (d, s) in d4.iter_mut().zip(src) {
                        *d = s.to_f32();
                    }
                }
            }
        }
    }
}

/// Exact mode for rows `n0..n0 + out_t.len() / m` of the output, `out_t` being
/// `[rows, m]`; `xb` holds the `m` activation rows converted by [`bf16_row`].
///
/// # Safety
/// The CPU has AVX-512 F, BW and BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn exact_rows(xb: &[u16], m: usize, w: &NibbleWeights, n0: usize, out_t: &mut [f32]) {
    let (k, block) = (w.k, w.block);
    let kp = k.next_multiple_of(CHUNK);
    assert!(m > 0 && out_t.len().is_multiple_of(m) && xb.len() >= m * kp);
    let rows = out_t.len() / m;
    assert!((block == 16 || block == 32) && k.is_multiple_of(block));
    assert!(n0 + rows <= w.n && w.data.len() >= w.n * (k / 2));
    let (index, len) = match w.scales {
        Scales::Bytes { data, index, .. } => (index, data.len()),
        Scales::F16 { data, index } => (index, data.len()),
    };
    assert!(index.cols() == k / block && len >= index.storage_len(w.n));

    let spc = CHUNK / block;
    let sidx = if block == 32 {
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
    } else {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
    };
    let bits: [u16; 32] = core::array::from_fn(|c| ((f32::from(w.values[c % 16])).to_bits() >> 16) as u16);
    // SAFETY: `bits` is 64 readable bytes.
    let tbl = unsafe { _mm512_loadu_si512(bits.as_ptr().cast()) };
    let tail_bytes = (k % CHUNK) / 2;
    let c = Consts {
        k,
        kp,
        kh: k / 2,
        spc,
        sstride: kp / CHUNK * spc + 4,
        sidx,
        tbl,
        tail: if tail_bytes == 0 { 0 } else { (1u64 << tail_bytes) - 1 },
        vscale: w.vscale,
    };
    let mut sbuf = vec![0f32; NR1 * c.sstride];
    let mut r = 0;
    while r < rows {
        let wp = w.data[(n0 + r) * c.kh..].as_ptr();
        let o = out_t[r * m..].as_mut_ptr();
        if m == 1 && rows - r >= NR1 {
            for (j, dst) in sbuf.chunks_exact_mut(c.sstride).enumerate() {
                row_scales(w, n0 + r + j, dst);
            }
            // SAFETY: weight rows n0 + r .. + NR1 exist (checked above), `xb` holds one
            // row of kp, `sbuf` NR1 rows of sstride, and `out_t` rows r .. r + NR1.
            unsafe { tile::<1, NR1>(&c, xb.as_ptr(), wp, sbuf.as_ptr(), o, m) };
            r += NR1;
            continue;
        }
        row_scales(w, n0 + r, &mut sbuf[..c.sstride]);
        let mut i = 0;
        while i < m {
            let x = xb[i * kp..].as_ptr();
            let (sp, oi) = (sbuf.as_ptr(), o.wrapping_add(i));
            macro_rules! go {
                ($($mi:literal)*) => {
                    match (m - i).min(MR) {
                        // SAFETY: activation rows i .. i + mi exist, weight row n0 + r and
                        // its scales are in place, `out_t[r * m + i + mi - 1]` exists.
                        $($mi => unsafe { tile::<$mi, 1>(&c, x, wp, sp, oi, m) },)*
                        _ => unreachable!("1..=MR rows"),
                    }
                };
            }
            go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
            i += MR;
        }
        r += 1;
    }
}
