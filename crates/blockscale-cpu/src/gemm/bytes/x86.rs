//! The AVX2 and AVX-512 kernels: one generic function over the lane type ([`Lanes`]),
//! with the codes decoded to f16 bits by the same AVX2 code for both.

use core::arch::x86_64::*;

use super::{Elem, LANES, Row};
use crate::gemm::lanes::{hsum8, hsum16};

/// Sixteen f32 lanes: one AVX-512 vector, or two AVX2 vectors (lanes 0..8, 8..16).
///
/// # Safety
/// Every method needs the CPU features of its implementation; callers are functions
/// compiled with those features, into which these are inlined.
trait Lanes: Copy {
    /// Whether the AVX-512 BW and VL variable shifts may decode (else the AVX2 forms).
    const BW: bool;
    unsafe fn zero() -> Self;
    /// Sixteen f16 (exact widening).
    unsafe fn widen(h: __m256i) -> Self;
    /// Sixteen f32 from `p`.
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn splat(s: f32) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `a * b + c`, one rounding per lane.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// The fixed tree `(l, l + 8)`, `(l, l + 4)`, `(l, l + 2)`, `(0, 1)`.
    unsafe fn hsum(self) -> f32;
}

#[derive(Clone, Copy)]
struct Avx2(__m256, __m256);

// SAFETY (every method): the trait's contract, AVX2, F16C and FMA present.
impl Lanes for Avx2 {
    const BW: bool = false;
    #[inline(always)]
    unsafe fn zero() -> Self {
        unsafe { Self(_mm256_setzero_ps(), _mm256_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn widen(h: __m256i) -> Self {
        unsafe { Self(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h))) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { Self(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
    }
    #[inline(always)]
    unsafe fn splat(s: f32) -> Self {
        unsafe { Self(_mm256_set1_ps(s), _mm256_set1_ps(s)) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { Self(_mm256_mul_ps(a.0, b.0), _mm256_mul_ps(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { Self(_mm256_add_ps(a.0, b.0), _mm256_add_ps(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { Self(_mm256_fmadd_ps(a.0, b.0, c.0), _mm256_fmadd_ps(a.1, b.1, c.1)) }
    }
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        unsafe { hsum8(_mm256_add_ps(self.0, self.1)) }
    }
}

#[derive(Clone, Copy)]
struct Avx512(__m512);

// SAFETY (every method): the trait's contract, AVX-512 F, BW and VL plus AVX2, F16C, FMA.
impl Lanes for Avx512 {
    const BW: bool = true;
    #[inline(always)]
    unsafe fn zero() -> Self {
        unsafe { Self(_mm512_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn widen(h: __m256i) -> Self {
        unsafe { Self(_mm512_cvtph_ps(h)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { Self(_mm512_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn splat(s: f32) -> Self {
        unsafe { Self(_mm512_set1_ps(s)) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { Self(_mm512_mul_ps(a.0, b.0)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        unsafe { Self(_mm512_add_ps(a.0, b.0)) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { Self(_mm512_fmadd_ps(a.0, b.0, c.0)) }
    }
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        unsafe { hsum16(self.0) }
    }
}

/// `vpshufb` indices gathering, into 16-bit lane `j` of 128-bit half `h`, the two bytes
/// holding FP6 code `i = 8 h + j` of 16 (bytes `6 i / 8` and the next; both halves hold
/// the same 16 bytes).
const FP6_GATHER: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut i = 0;
    while i < 16 {
        let lo = (6 * i / 8) as u8;
        t[2 * i] = lo;
        t[2 * i + 1] = lo + 1;
        i += 1;
    }
    t
};

/// `vpmullw` factors moving FP6 code `i`'s six bits (at bit `6 i % 8` of its lane) to
/// bits 10..16.
const FP6_ALIGN: [u16; 16] = {
    let mut t = [0u16; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = 1 << (10 - (6 * i) % 8);
        i += 1;
    }
    t
};

/// The f16 bits `h` (module docs) of sixteen codes starting at code `at` of the row at
/// `codes`.
///
/// # Safety
/// 16 bytes readable at `codes + at * bits / 8` (for FP6 that is 4 past the 12 the
/// codes take: `Row::codes` guarantees them).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn halves<const E: u8>(codes: *const u8, at: usize) -> __m256i {
    if E < 2 {
        // SAFETY: the caller's.
        let v = unsafe { _mm_loadu_si128(codes.add(at).cast()) };
        return if E == 0 {
            // E4M3: sign-extended, shifted by 7, bit 14 (a copy of the sign) cleared.
            _mm256_and_si256(_mm256_slli_epi16::<7>(_mm256_cvtepi8_epi16(v)), _mm256_set1_epi16(0xbfff_u16 as i16))
        } else {
            _mm256_slli_epi16::<8>(_mm256_cvtepu8_epi16(v))
        };
    }
    // FP6: 16 codes in 12 bytes (16 read).
    // SAFETY: the caller's; the table is 32 bytes.
    let (w, align) = unsafe { (fp6_gathered(codes, at), _mm256_loadu_si256(FP6_ALIGN.as_ptr().cast())) };
    fp6_bits::<E>(_mm256_mullo_epi16(w, align))
}

/// The 16-bit lanes of sixteen FP6 codes from code `at` (each lane the two bytes holding
/// its code, [`FP6_GATHER`]), before their alignment.
///
/// # Safety
/// As [`halves`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fp6_gathered(codes: *const u8, at: usize) -> __m256i {
    // SAFETY: the caller's; the table is 32 bytes.
    let (v, gather) =
        unsafe { (_mm_loadu_si128(codes.add(at / 4 * 3).cast()), _mm256_loadu_si256(FP6_GATHER.as_ptr().cast())) };
    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(v), gather)
}

/// The f16 bits of FP6 lanes whose codes are aligned to bits 10..16 (`E` 2: E2M3, else
/// E3M2).
#[inline]
#[target_feature(enable = "avx2")]
fn fp6_bits<const E: u8>(w: __m256i) -> __m256i {
    if E == 2 {
        // E2M3: sign at bit 15, magnitude to bits 7..12.
        _mm256_and_si256(_mm256_srai_epi16::<3>(w), _mm256_set1_epi16(0x8f80_u16 as i16))
    } else {
        // E3M2: sign at bit 15, magnitude to bits 8..13.
        _mm256_and_si256(_mm256_srai_epi16::<2>(w), _mm256_set1_epi16(0x9f00_u16 as i16))
    }
}

/// `vpsllvw` counts moving FP6 code `i`'s six bits (at bit `6 i % 8` of its lane) to
/// bits 10..16: [`FP6_ALIGN`]'s factors as shifts.
const FP6_SHIFT: [u16; 16] = {
    let mut t = [0u16; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (10 - (6 * i) % 8) as u16;
        i += 1;
    }
    t
};

/// [`halves`] for FP6 with the AVX-512 BW and VL variable shift in place of the multiply
/// (the same bits: a 16-bit lane times `2^n` modulo `2^16` is the lane shifted by `n`):
/// 3% faster on Zen 4 (MXFP6 GEMV of 1024 x 4096, three rounds alternating: 40.2-40.5
/// against 39.2-39.4 GFLOP/s).
///
/// # Safety
/// As [`halves`].
#[inline]
#[target_feature(enable = "avx2,avx512bw,avx512vl")]
unsafe fn halves_bw<const E: u8>(codes: *const u8, at: usize) -> __m256i {
    if E < 2 {
        // SAFETY: the caller's.
        return unsafe { halves::<E>(codes, at) };
    }
    // SAFETY: the caller's; the table is 32 bytes.
    let (w, shift) = unsafe { (fp6_gathered(codes, at), _mm256_loadu_si256(FP6_SHIFT.as_ptr().cast())) };
    fp6_bits::<E>(_mm256_sllv_epi16(w, shift))
}

/// Sixteen weights from code `at` as lanes: [`halves_bw`] where the lanes allow it, else
/// [`halves`].
///
/// # Safety
/// As [`halves`], with the CPU features of `L`'s implementation.
#[inline(always)]
unsafe fn weights<L: Lanes, const E: u8>(codes: *const u8, at: usize) -> L {
    // SAFETY: the caller's (`L::BW` only where AVX-512 BW and VL are present).
    unsafe { L::widen(if L::BW { halves_bw::<E>(codes, at) } else { halves::<E>(codes, at) }) }
}

/// One block `b` with scale `s`: `acc[i] = fma(Σ x h, s, acc[i])` for activation rows
/// `x + i * k`, `i < MI`.
///
/// # Safety
/// As [`rows`]; `x` points at an activation row with `MI` rows from it inside `job.x`,
/// `b < k / block`.
#[inline(always)]
unsafe fn block<L: Lanes, const E: u8, const MI: usize, const STEPS: usize>(
    job: &Row,
    x: *const f32,
    b: usize,
    s: f32,
    acc: &mut [L; MI],
) {
    let (base, codes) = (b * job.block, job.codes.as_ptr());
    // SAFETY: the features, by the contract; activation loads read 16 f32 at
    // `i * k + base + 16 c` with `base + 16 c + 16 <= k`, inside the rows; code loads
    // read what `halves` needs, inside `codes` by `Row::codes`'s promise.
    unsafe {
        let w = weights::<L, E>(codes, base);
        let mut p: [L; MI] = core::array::from_fn(|i| L::mul(L::load(x.add(i * job.k + base)), w));
        for c in 1..STEPS {
            let w = weights::<L, E>(codes, base + c * LANES);
            for (i, pi) in p.iter_mut().enumerate() {
                *pi = L::fma(L::load(x.add(i * job.k + base + c * LANES)), w, *pi);
            }
        }
        let sv = L::splat(s);
        for (a, pi) in acc.iter_mut().zip(p) {
            *a = L::fma(pi, sv, *a);
        }
    }
}

/// Activation rows `i0..i0 + MI` against one weight row (`out[i]` for those rows);
/// blocks of `16 STEPS` elements.
///
/// # Safety
/// The CPU has `L`'s features and AVX2; `job` is as `gemm_bytes` builds it (`x` holds
/// `m * k` values, `codes` one row plus the bytes [`Row::codes`] promises, `scales`
/// `k / block`, `block == 16 STEPS`), `i0 + MI <= m`.
#[inline(always)]
unsafe fn rows<L: Lanes, const E: u8, const MI: usize, const STEPS: usize>(job: &Row, i0: usize, out: &mut [f32]) {
    // The slice lengths: `Row::check`, at the entry points.
    debug_assert!(job.block == STEPS * LANES && i0 + MI <= job.m);
    let x = job.x[i0 * job.k..].as_ptr();
    // Even blocks into `even`, odd ones into `odd` (two dependency chains).
    // SAFETY: the features, by the contract.
    let (mut even, mut odd) = unsafe { ([L::zero(); MI], [L::zero(); MI]) };
    let pairs = job.scales.chunks_exact(2);
    let last = pairs.remainder().first().copied();
    // SAFETY: the features, by the contract; `x` is activation row `i0`, and the
    // blocks are the row's.
    unsafe {
        for (j, s2) in pairs.enumerate() {
            block::<L, E, MI, STEPS>(job, x, 2 * j, s2[0], &mut even);
            block::<L, E, MI, STEPS>(job, x, 2 * j + 1, s2[1], &mut odd);
        }
        if let Some(s) = last {
            block::<L, E, MI, STEPS>(job, x, job.scales.len() - 1, s, &mut even);
        }
    }
    let post = job.elem.post();
    for (o, (e, d)) in out[i0..i0 + MI].iter_mut().zip(even.into_iter().zip(odd)) {
        // SAFETY: the features, by the contract.
        *o = unsafe { L::add(e, d).hsum() } * post;
    }
}

/// Every activation row of `job`, `WIDE` at a time, then one at a time.
///
/// # Safety
/// As [`rows`].
#[inline(always)]
unsafe fn all_rows<L: Lanes, const E: u8, const WIDE: usize, const STEPS: usize>(job: &Row, out: &mut [f32]) {
    let mut i = 0;
    // SAFETY: as the caller's.
    unsafe {
        while i + WIDE <= job.m {
            rows::<L, E, WIDE, STEPS>(job, i, out);
            i += WIDE;
        }
        while i < job.m {
            rows::<L, E, 1, STEPS>(job, i, out);
            i += 1;
        }
    }
}

/// Element and block dispatch (blocks of 32 or 128, as `ByteWeights::new` admits).
macro_rules! by_elem {
    ($lanes:ty, $wide:literal, $job:expr, $out:expr) => {
        match ($job.elem, $job.block == 32) {
            (Elem::E4M3, true) => all_rows::<$lanes, 0, $wide, 2>($job, $out),
            (Elem::E5M2, true) => all_rows::<$lanes, 1, $wide, 2>($job, $out),
            (Elem::E2M3, true) => all_rows::<$lanes, 2, $wide, 2>($job, $out),
            (Elem::E3M2, true) => all_rows::<$lanes, 3, $wide, 2>($job, $out),
            (Elem::E4M3, false) => all_rows::<$lanes, 0, $wide, 8>($job, $out),
            (Elem::E5M2, false) => all_rows::<$lanes, 1, $wide, 8>($job, $out),
            (Elem::E2M3, false) => all_rows::<$lanes, 2, $wide, 8>($job, $out),
            (Elem::E3M2, false) => all_rows::<$lanes, 3, $wide, 8>($job, $out),
        }
    };
}

/// One weight row against every activation row, AVX2 (two 8-lane halves).
///
/// # Safety
/// The CPU has AVX2, F16C and FMA (the slices' lengths are checked here).
#[target_feature(enable = "avx2,f16c,fma")]
pub(super) unsafe fn row_avx2(job: &Row, out: &mut [f32]) {
    job.check();
    // SAFETY: this function's features; the lengths checked above.
    unsafe { by_elem!(Avx2, 2, job, out) }
}

/// One weight row against every activation row, AVX-512.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL, AVX2, F16C and FMA (the slices' lengths are
/// checked here).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c,fma")]
pub(super) unsafe fn row_avx512(job: &Row, out: &mut [f32]) {
    job.check();
    // SAFETY: this function's features; the lengths checked above.
    unsafe { by_elem!(Avx512, 4, job, out) }
}

/// Whether a row of E4M3 codes holds a NaN code (`0x7f` or `0xff`), 32 bytes a step.
#[target_feature(enable = "avx2")]
pub(super) fn has_e4m3_nan(codes: &[u8]) -> bool {
    let chunks = codes.chunks_exact(32);
    let tail = super::has_e4m3_nan_portable(chunks.remainder());
    let (high, ones) = (_mm256_set1_epi8(0x80_u8 as i8), _mm256_set1_epi8(-1));
    let mut any = _mm256_setzero_si256();
    for c in chunks {
        // SAFETY: `c` is 32 readable bytes.
        let v = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
        any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_or_si256(v, high), ones));
    }
    tail || _mm256_testz_si256(any, any) == 0
}

/// [`has_e4m3_nan`] with AVX-512 BW, 64 bytes a step.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn has_e4m3_nan_avx512(codes: &[u8]) -> bool {
    let chunks = codes.chunks_exact(64);
    let tail = super::has_e4m3_nan_portable(chunks.remainder());
    let (high, ones) = (_mm512_set1_epi8(0x80_u8 as i8), _mm512_set1_epi8(-1));
    let mut any: __mmask64 = 0;
    for c in chunks {
        // SAFETY: `c` is 64 readable bytes.
        let v = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
        any |= _mm512_cmpeq_epi8_mask(_mm512_or_si512(v, high), ones);
    }
    tail || any != 0
}
