//! 8-bit codes (E4M3, E5M2) to bf16 with AVX-512, 32 codes a step: each code becomes
//! f16 bits by shifts (`gemm/bytes`' exact form: E4M3 as `value * 2^-8`, E5M2 as its
//! value), `vcvtph2ps` widens them exactly, one multiply by the block's factor (times
//! `2^8` for E4M3) gives `value * factor` (exact: the caller only asks for products
//! that are exact in bf16), and the high halves of the f32 are the bf16 bits. B's
//! panels are written through a 16 x 16 transposition of 32-bit words.

use core::arch::x86_64::*;

use super::super::dot::PANEL;

/// Codes per step.
pub(super) const STEP: usize = 32;

/// The 8-bit element formats, as the const parameter of the functions here.
pub(super) const E4M3: bool = false;
/// See [`E4M3`].
pub(super) const E5M2: bool = true;

/// What the f16 form of a code is multiplied by to give its value.
pub(super) const fn post(e5m2: bool) -> f32 {
    if e5m2 { 1.0 } else { 256.0 }
}

/// `vpermt2w` indices taking the high 16 bits of each of 32 f32 (16 in each source).
const HIGH_HALVES: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = 2 * i as u16 + 1;
        i += 1;
    }
    t
};

/// 32 codes at `src` times `factor` (the block factor times [`post`]) as 32 bf16, and
/// a mask of the codes that are NaN or infinite.
///
/// # Safety
/// 32 bytes readable at `src`; AVX-512 F and BW present.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn decode<const E5: bool>(src: *const u8, factor: __m512) -> (__m512i, __mmask32) {
    // SAFETY: the caller's: 32 readable bytes; the table is 64 bytes.
    let (c, high) = unsafe { (_mm256_loadu_si256(src.cast()), _mm512_loadu_si512(HIGH_HALVES.as_ptr().cast())) };
    let (h, bad) = if E5 {
        let w = _mm512_cvtepu8_epi16(c);
        // Exponent all ones: infinity or NaN.
        let e = _mm512_set1_epi16(0x7c);
        (_mm512_slli_epi16::<8>(w), _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, e), e))
    } else {
        // Sign-extended, shifted by 7, bit 14 (a copy of the sign) cleared.
        let w = _mm512_cvtepi8_epi16(c);
        let h = _mm512_and_si512(_mm512_slli_epi16::<7>(w), _mm512_set1_epi16(0xbfff_u16 as i16));
        // 0x7f and 0xff (sign-extended: 0x007f and 0xffff) are NaN.
        let nan =
            _mm512_cmpeq_epi16_mask(_mm512_or_si512(w, _mm512_set1_epi16(0xff80_u16 as i16)), _mm512_set1_epi16(-1));
        (h, nan)
    };
    let lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), factor);
    let hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(h)), factor);
    (_mm512_permutex2var_epi16(_mm512_castps_si512(lo), high, _mm512_castps_si512(hi)), bad)
}

/// Transposes 16 vectors of 16 words: word `j` of vector `i` moves to word `i` of
/// vector `j`.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose(r: &mut [__m512i; 16]) {
    // Pairs of rows interleaved by words, then by pairs of words: `u[4 i + c]` holds, in
    // 128-bit lane `l`, column `4 l + c` of rows `4 i .. 4 i + 4`.
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // Then the 4 x 4 matrix of 128-bit lanes of `u[c], u[4 + c], u[8 + c], u[12 + c]`.
    for c in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let v1 = _mm512_shuffle_i32x4::<0xee>(u[c], u[4 + c]);
        let v2 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let v3 = _mm512_shuffle_i32x4::<0xee>(u[8 + c], u[12 + c]);
        r[c] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
        r[4 + c] = _mm512_shuffle_i32x4::<0xdd>(v0, v2);
        r[8 + c] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
        r[12 + c] = _mm512_shuffle_i32x4::<0xdd>(v1, v3);
    }
}

/// One row: `codes.len()` codes (a multiple of [`STEP`]) into `out`, step `g` times
/// `factors[g]` (already times [`post`]); whether any code is NaN or infinite.
///
/// # Safety
/// AVX-512 F and BW present.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn row<const E5: bool>(codes: &[u8], factors: impl Fn(usize) -> f32, out: &mut [half::bf16]) -> bool {
    assert!(codes.len().is_multiple_of(STEP) && out.len() >= codes.len());
    let mut bad: __mmask32 = 0;
    for (g, (c, o)) in codes.chunks_exact(STEP).zip(out.chunks_exact_mut(STEP)).enumerate() {
        // SAFETY: `c` is 32 bytes, `o` 32 bf16 (64 bytes); the features are this function's.
        unsafe {
            let (v, b) = decode::<E5>(c.as_ptr(), _mm512_set1_ps(factors(g)));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
            bad |= b;
        }
    }
    bad != 0
}

/// One panel: rows `rows[l]` (`None` past the matrix: zero) of `k` codes each, step `g`
/// of row `l` times `factor(l, g)` (already times [`post`]), into `panel` (for each K
/// pair `t < k / 2`, [`PANEL`] words); whether any code is NaN or infinite.
///
/// # Safety
/// AVX-512 F and BW present.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn panel<const E5: bool>(
    rows: &[Option<&[u8]>; PANEL],
    k: usize,
    factor: impl Fn(usize, usize) -> f32,
    panel: &mut [u32],
) -> bool {
    assert!(k.is_multiple_of(STEP) && panel.len() >= k / 2 * PANEL);
    assert!(rows.iter().flatten().all(|r| r.len() >= k));
    let mut bad: __mmask32 = 0;
    for g in 0..k / STEP {
        for half in 0..PANEL / 16 {
            let mut v = [_mm512_setzero_si512(); 16];
            for (i, v) in v.iter_mut().enumerate() {
                let l = half * 16 + i;
                if let Some(codes) = rows[l] {
                    // SAFETY: (g + 1) * 32 <= k <= codes.len() (asserted); this function's features.
                    let (d, b) = unsafe { decode::<E5>(codes.as_ptr().add(g * STEP), _mm512_set1_ps(factor(l, g))) };
                    *v = d;
                    bad |= b;
                }
            }
            transpose(&mut v);
            // Vector j now holds K pair 16 g + j of the sixteen rows.
            for (j, v) in v.iter().enumerate() {
                let at = (g * STEP / 2 + j) * PANEL + half * 16;
                let dst = &mut panel[at..at + 16];
                // SAFETY: `dst` is 16 words.
                unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), *v) };
            }
        }
    }
    bad != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads 16 vectors of 16 words, transposes them, stores them back.
    #[target_feature(enable = "avx512f")]
    fn transposed(words: &[u32; 256]) -> [u32; 256] {
        let mut v = [_mm512_setzero_si512(); 16];
        for (i, v) in v.iter_mut().enumerate() {
            // SAFETY: 16 words at 16 i.
            *v = unsafe { _mm512_loadu_si512(words[16 * i..].as_ptr().cast()) };
        }
        transpose(&mut v);
        let mut out = [0u32; 256];
        for (j, v) in v.iter().enumerate() {
            // SAFETY: 16 words at 16 j.
            unsafe { _mm512_storeu_si512(out[16 * j..].as_mut_ptr().cast(), *v) };
        }
        out
    }

    #[test]
    fn transpose_moves_every_word() {
        if !crate::avx512_available() {
            return;
        }
        let words: [u32; 256] = core::array::from_fn(|i| i as u32);
        // SAFETY: AVX-512 F was just confirmed.
        let out = unsafe { transposed(&words) };
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(out[16 * j + i], words[16 * i + j], "({i}, {j})");
            }
        }
    }
}
