//! The AVX-512 VNNI panel kernel: per 8-element group of a block, one 64-byte load
//! gives 16 rows x 8 codes; masking and shifting split it into two vectors of 16 rows x
//! 4 codes, one `vpshufb` each maps codes to unsigned values, and one `vpdpbusd` each
//! multiplies them with four activation bytes broadcast to every lane. A block's 16
//! i32 lanes (one per weight row) then take the offset correction as their starting
//! value, become f32 and meet the rows' scales in one FMA. The decoded block is reused
//! for up to eight activation rows. A single row (the GEMV) may instead walk two or more
//! panels side by side, each block's activation bytes broadcast once for all of them,
//! with a software prefetch ahead of each panel's codes: what Intel's cores stream
//! faster ([`walk`]).
//!
//! Scales are decoded in registers: UE8M0 by shifting the byte into an f32 exponent
//! (0 and 255 patched to 2^-127 and NaN), UE4M3 by shifting it under an f32's exponent
//! and multiplying by 2^120 (exact, subnormals included; `0x7f` and up patched to
//! NaN), f16 by `vcvtph2ps`. Panels whose scales hold none of the patched codes (the
//! usual case, recorded at pack time) skip the patching. The tests check all 256 byte
//! codes against the tables, and the unpatched decoding on every code it may meet.
//!
//! Every function needs AVX-512 F, BW and VNNI: `Kernel::of` only picks this
//! kernel where `Isa::vnni` holds.

use core::arch::x86_64::*;

use super::drive::{self, Run, Tiles};
use super::{ActRows, PanelScales, Panels, ROWS, UE4M3_PLAIN, UE8M0, UE8M0_PLAIN};

/// The AVX-512 VNNI tiles (see [`Tiles`]).
pub(super) struct Avx512Vnni;

/// Int8 mode for panels `p0..p1` and the `m` activation rows of `a`, as
/// `super::portable::rows` (which gives the same bits).
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn rows(a: &ActRows<'_>, m: usize, p: &Panels, p0: usize, p1: usize, buf: &mut [f32]) {
    // SAFETY: the caller's guarantee.
    unsafe { rows_walking(a, m, p, (p0, p1), buf, walk()) }
}

/// [`rows`] with the single-row walk `(panels, prefetch)` given (see [`walk`]; the
/// tests run every walk on any CPU).
///
/// # Safety
/// As [`rows`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn rows_walking(
    a: &ActRows<'_>,
    m: usize,
    p: &Panels,
    (p0, p1): (usize, usize),
    buf: &mut [f32],
    walk: (usize, usize),
) {
    // SAFETY: the caller guarantees the features, which this function enables for the
    // driver inlined into it.
    unsafe { drive::rows::<Avx512Vnni>(a, m, p, p0, p1, buf, walk) }
}

impl Tiles for Avx512Vnni {
    /// Eight rows: one vector of accumulators each.
    const MR: usize = 8;

    /// Panel `pi` times activation rows `i0..i0 + TR`.
    ///
    /// # Safety
    /// As [`Tiles::tile`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
        let (a, p) = (run.a, run.p);
        let k = p.k;
        let (cols, groups, xb) = (k / BLOCK, BLOCK / 8, k.div_ceil(a.dblock));
        // SAFETY (this function): group (pi, g) is 64 bytes inside `codes`; (pi, b, r)
        // inside the scales; activation row i < m has k bytes of q, xb factors and cols
        // corrections; the output row i holds (pi - p0 + 1) * 16 <= stride floats.
        unsafe {
            let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(p.unsigned.as_ptr().cast()));
            let low = _mm512_set1_epi8(0x0f);
            let wbase = run.codes(pi);
            let mut accf = [_mm512_setzero_ps(); TR];
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for b in 0..cols {
                let s = scales16::<SC>(p, (pi * cols + b) * ROWS);
                for g in 0..groups {
                    let v = _mm512_loadu_si512(wbase.add((b * groups + g) * 64).cast());
                    lo[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
                    hi[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                }
                for (r, acc_f) in accf.iter_mut().enumerate() {
                    let i = i0 + r;
                    let q = a.q.as_ptr().add(i * k + b * BLOCK).cast::<i32>();
                    let mut acc = _mm512_set1_epi32(*a.corr.get_unchecked(i * cols + b));
                    for g in 0..groups {
                        acc = _mm512_dpbusd_epi32(acc, lo[g], _mm512_set1_epi32(q.add(2 * g).read_unaligned()));
                        acc = _mm512_dpbusd_epi32(acc, hi[g], _mm512_set1_epi32(q.add(2 * g + 1).read_unaligned()));
                    }
                    let c = _mm512_mul_ps(s, _mm512_set1_ps(*a.d.get_unchecked(i * xb + b * BLOCK / a.dblock)));
                    *acc_f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), c, *acc_f);
                }
            }
            let vscale = _mm512_set1_ps(p.vscale);
            for (r, acc_f) in accf.iter().enumerate() {
                let o = run.out(i0 + r, pi);
                _mm512_storeu_ps(o, _mm512_mul_ps(*acc_f, vscale));
            }
        }
    }

    /// Panels `pi..pi + NP` times activation row 0 (the GEMV): each block's activation
    /// bytes broadcast once for the NP panels, whose codes stream side by side, each
    /// `walk.1` bytes ahead in the prefetcher. The same operations per panel as
    /// [`Self::tile`] with one row, in the same order: the same bits.
    ///
    /// # Safety
    /// As [`Tiles::tile1`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile1<const BLOCK: usize, const SC: u8, const NP: usize>(run: &Run<'_>, pi: usize) {
        let (a, p) = (run.a, run.p);
        let k = p.k;
        let (cols, groups) = (k / BLOCK, BLOCK / 8);
        let pf = run.walk.1;
        // SAFETY (this function): as `tile` with one activation row, for each of the NP
        // panels; a prefetch is a hint, valid for any address.
        unsafe {
            let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(p.unsigned.as_ptr().cast()));
            let low = _mm512_set1_epi8(0x0f);
            let wbase: [*const u8; NP] = core::array::from_fn(|j| run.codes(pi + j));
            let mut accf = [_mm512_setzero_ps(); NP];
            let mut bq = [_mm512_setzero_si512(); 8];
            for b in 0..cols {
                let q = a.q.as_ptr().add(b * BLOCK).cast::<i32>();
                for (g, v) in bq.iter_mut().enumerate().take(2 * groups) {
                    *v = _mm512_set1_epi32(q.add(g).read_unaligned());
                }
                let corr = _mm512_set1_epi32(*a.corr.get_unchecked(b));
                let d = _mm512_set1_ps(*a.d.get_unchecked(b * BLOCK / a.dblock));
                for (j, acc_f) in accf.iter_mut().enumerate() {
                    let s = scales16::<SC>(p, ((pi + j) * cols + b) * ROWS);
                    let w = wbase[j].add(b * groups * 64);
                    if pf > 0 {
                        for g in 0..groups {
                            _mm_prefetch::<_MM_HINT_T0>(w.add(pf + g * 64).cast());
                        }
                    }
                    let mut acc = corr;
                    for g in 0..groups {
                        let v = _mm512_loadu_si512(w.add(g * 64).cast());
                        let lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
                        let hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                        acc = _mm512_dpbusd_epi32(acc, lo, bq[2 * g]);
                        acc = _mm512_dpbusd_epi32(acc, hi, bq[2 * g + 1]);
                    }
                    *acc_f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(s, d), *acc_f);
                }
            }
            let vscale = _mm512_set1_ps(p.vscale);
            for (j, acc_f) in accf.iter().enumerate() {
                let o = run.out(0, pi + j);
                _mm512_storeu_ps(o, _mm512_mul_ps(*acc_f, vscale));
            }
        }
    }
}

/// How the single-row kernel walks the panels here: how many panels side by side per
/// pass over a block's activation bytes (1: the general tile), and how far ahead (bytes)
/// it prefetches each panel's codes (0: not at all). Intel's cores stream the codes
/// faster with two panels and a prefetch 512 bytes ahead (the Xeon host of the GPU
/// machine: MXFP4 4096 x 4096 0.19-0.24 ms against 0.22-0.26, 16384 x 2048 0.35-0.37
/// against 0.46-0.68; docs/BENCHMARKS.md); AMD's Zen 4 measured the same or up to 3%
/// slower with them and keeps one panel. Decided once from the CPU's vendor;
/// `BLOCKSCALE_PANEL_WALK=panels,prefetch` overrides it (for measurements).
fn walk() -> (usize, usize) {
    static S: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        let set = std::env::var("BLOCKSCALE_PANEL_WALK").ok().and_then(|v| {
            let (a, b) = v.split_once(',')?;
            Some((a.trim().parse::<usize>().ok()?.clamp(1, 4), b.trim().parse::<usize>().ok()?.min(4096)))
        });
        set.unwrap_or(if intel() { (2, 512) } else { (1, 0) })
    })
}

/// Whether the CPU's vendor string is Intel's.
fn intel() -> bool {
    let id = __cpuid(0);
    let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
    vendor == b"GenuineIntel"
}

/// The 16 scales of (panel, block) starting at scale index `at`, as f32.
///
/// # Safety
/// 16 scales readable at `at`, of the kind `SC` says.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn scales16<const SC: u8>(p: &Panels, at: usize) -> __m512 {
    // SAFETY: the caller guarantees the 16 entries exist.
    unsafe {
        match &p.scales {
            PanelScales::Bytes { data, .. } => bytes16::<SC>(_mm_loadu_si128(data.as_ptr().add(at).cast())),
            PanelScales::F16(data) => _mm512_cvtph_ps(_mm256_loadu_si256(data.as_ptr().add(at).cast())),
        }
    }
}

/// 16 UE8M0 or UE4M3 codes as f32, exactly as the formats' tables decode them; the
/// `_PLAIN` kinds skip the special codes' patching.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn bytes16<const SC: u8>(codes: __m128i) -> __m512 {
    let c = _mm512_cvtepu8_epi32(codes);
    if SC == UE8M0 || SC == UE8M0_PLAIN {
        // 2^(c - 127): the byte is the f32 exponent; 0 is the subnormal 2^-127.
        let f = _mm512_slli_epi32::<23>(c);
        if SC == UE8M0_PLAIN {
            return _mm512_castsi512_ps(f);
        }
        let f = _mm512_mask_mov_epi32(
            f,
            _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()),
            _mm512_set1_epi32(0x0040_0000),
        );
        let f = _mm512_mask_mov_epi32(
            f,
            _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(0xff)),
            _mm512_set1_epi32(0x7fc0_0000),
        );
        _mm512_castsi512_ps(f)
    } else {
        // eeee.mmm under the f32's exponent and mantissa: 2^-120 times the value (an f32
        // subnormal for UE4M3 subnormals), which the exact multiplication rescales.
        let f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32::<20>(c)), _mm512_set1_ps(2f32.powi(120)));
        if SC == UE4M3_PLAIN {
            return f;
        }
        _mm512_mask_mov_ps(f, _mm512_cmpge_epu32_mask(c, _mm512_set1_epi32(0x7f)), _mm512_set1_ps(f32::NAN))
    }
}

/// [`bytes16`] on 16 codes of scale kind `kind`, for the tests.
#[cfg(test)]
pub(super) fn decode_bytes(kind: u8, codes: &[u8; 16]) -> [f32; 16] {
    use super::UE4M3;

    assert!(super::vnni_available());
    let mut out = [0f32; 16];
    // SAFETY: the CPU has the features (asserted); 16 bytes in, 16 f32 out.
    unsafe {
        let v = _mm_loadu_si128(codes.as_ptr().cast());
        let f = match kind {
            UE4M3 => bytes16::<UE4M3>(v),
            UE4M3_PLAIN => bytes16::<UE4M3_PLAIN>(v),
            UE8M0 => bytes16::<UE8M0>(v),
            _ => bytes16::<UE8M0_PLAIN>(v),
        };
        _mm512_storeu_ps(out.as_mut_ptr(), f);
    }
    out
}
