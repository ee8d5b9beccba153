//! The AVX2 panel kernel, for CPUs without AVX-512 VNNI: a 64-byte group is two
//! 32-byte halves (rows 0..8 and 8..16), each split into low and high nibbles and
//! mapped to unsigned values with `vpshufb`; `vpmaddubsw` multiplies them with four
//! broadcast activation bytes into i16 pairs (at most 2 * 24 * 127, no saturation) and
//! `vpmaddwd` by ones (after adding up to four such products in i16, at most
//! 4 * 2 * 24 * 127 < 2^15) sums those into the i32 lane of each row: the same exact
//! block sums as `vpdpbusd`. Then, per block, the offset correction, conversion to f32
//! and one FMA with the rows' scales (decoded in registers as the AVX-512 kernel does),
//! as the other kernels do, so the bits are the same.
//!
//! Every function needs AVX2, FMA and F16C: `Kernel::of` only picks this kernel
//! for an ISA that has all three.

use core::arch::x86_64::*;

use super::drive::{self, Run, Tiles};
use super::{ActRows, PanelScales, Panels, ROWS, UE4M3_PLAIN, UE8M0, UE8M0_PLAIN};

/// The AVX2 tiles (see [`Tiles`]).
pub(super) struct Avx2;

/// Int8 mode for panels `p0..p1` and the `m` activation rows of `a`, as
/// `super::portable::rows` (which gives the same bits).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows(a: &ActRows<'_>, m: usize, p: &Panels, p0: usize, p1: usize, buf: &mut [f32]) {
    // SAFETY: the caller guarantees the features, which this function enables for the
    // driver inlined into it.
    unsafe { drive::rows::<Avx2>(a, m, p, p0, p1, buf, (1, 0)) }
}

/// The 16 scales at scale index `at` as two vectors (rows 0..8, 8..16).
///
/// # Safety
/// 16 scales readable at `at`, of the kind `SC` says.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales<const SC: u8>(p: &Panels, at: usize) -> [__m256; 2] {
    // SAFETY: the caller guarantees 16 scales at `at`.
    unsafe {
        match &p.scales {
            PanelScales::F16(data) => {
                let h = data.as_ptr().add(at).cast::<__m128i>();
                [_mm256_cvtph_ps(_mm_loadu_si128(h)), _mm256_cvtph_ps(_mm_loadu_si128(h.add(1)))]
            }
            PanelScales::Bytes { data, .. } => {
                let c = data.as_ptr().add(at).cast::<i64>();
                [bytes8::<SC>(c.read_unaligned()), bytes8::<SC>(c.add(1).read_unaligned())]
            }
        }
    }
}

impl Tiles for Avx2 {
    /// Four rows: two vectors of accumulators each.
    const MR: usize = 4;

    /// Panel `pi` times activation rows `i0..i0 + TR`.
    ///
    /// # Safety
    /// As [`Tiles::tile`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
        let (a, p) = (run.a, run.p);
        let k = p.k;
        let (cols, groups, xb) = (k / BLOCK, BLOCK / 8, k.div_ceil(a.dblock));
        // SAFETY (this function): as the AVX-512 kernel's `tile`.
        unsafe {
            let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.unsigned.as_ptr().cast()));
            let low = _mm256_set1_epi8(0x0f);
            let ones = _mm256_set1_epi16(1);
            let wbase = run.codes(pi);
            let mut accf = [[_mm256_setzero_ps(); 2]; TR];
            // Decoded block: [group][half] low and high nibbles' values.
            let mut lo = [[_mm256_setzero_si256(); 2]; 4];
            let mut hi = [[_mm256_setzero_si256(); 2]; 4];
            for b in 0..cols {
                let s = scales::<SC>(p, (pi * cols + b) * ROWS);
                for g in 0..groups {
                    let w = wbase.add((b * groups + g) * 64);
                    for h in 0..2 {
                        let v = _mm256_loadu_si256(w.add(32 * h).cast());
                        lo[g][h] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low));
                        hi[g][h] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
                    }
                }
                for (r, acc_f) in accf.iter_mut().enumerate() {
                    let i = i0 + r;
                    let q = a.q.as_ptr().add(i * k + b * BLOCK).cast::<i32>();
                    let corr = _mm256_set1_epi32(*a.corr.get_unchecked(i * cols + b));
                    let mut acc = [corr, corr];
                    // Two groups' four i16 pair sums at a time: |sum| <= 4 * 2 * 24 * 127 < 2^15.
                    for g2 in 0..groups.div_ceil(2) {
                        let mut s16 = [_mm256_setzero_si256(); 2];
                        for g in 2 * g2..(2 * g2 + 2).min(groups) {
                            let q_lo = _mm256_set1_epi32(q.add(2 * g).read_unaligned());
                            let q_hi = _mm256_set1_epi32(q.add(2 * g + 1).read_unaligned());
                            for (h, s_h) in s16.iter_mut().enumerate() {
                                let pl = _mm256_maddubs_epi16(lo[g][h], q_lo);
                                let ph = _mm256_maddubs_epi16(hi[g][h], q_hi);
                                *s_h = _mm256_add_epi16(*s_h, _mm256_add_epi16(pl, ph));
                            }
                        }
                        for (acc_h, s_h) in acc.iter_mut().zip(s16) {
                            *acc_h = _mm256_add_epi32(*acc_h, _mm256_madd_epi16(s_h, ones));
                        }
                    }
                    let dv = _mm256_set1_ps(*a.d.get_unchecked(i * xb + b * BLOCK / a.dblock));
                    for h in 0..2 {
                        let c = _mm256_mul_ps(s[h], dv);
                        acc_f[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h]), c, acc_f[h]);
                    }
                }
            }
            let vscale = _mm256_set1_ps(p.vscale);
            for (r, acc_f) in accf.iter().enumerate() {
                let o = run.out(i0 + r, pi);
                _mm256_storeu_ps(o, _mm256_mul_ps(acc_f[0], vscale));
                _mm256_storeu_ps(o.add(8), _mm256_mul_ps(acc_f[1], vscale));
            }
        }
    }
}

/// 8 UE8M0 or UE4M3 codes (the bytes of `codes`, little-endian) as f32, exactly as the
/// formats' tables decode them (see the AVX-512 kernel's `bytes16`); the `_PLAIN` kinds
/// skip the special codes' patching.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bytes8<const SC: u8>(codes: i64) -> __m256 {
    let c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(codes));
    if SC == UE8M0 || SC == UE8M0_PLAIN {
        let f = _mm256_slli_epi32::<23>(c);
        if SC == UE8M0_PLAIN {
            return _mm256_castsi256_ps(f);
        }
        let zero = _mm256_cmpeq_epi32(c, _mm256_setzero_si256());
        let f = _mm256_blendv_epi8(f, _mm256_set1_epi32(0x0040_0000), zero);
        let nan = _mm256_cmpeq_epi32(c, _mm256_set1_epi32(0xff));
        _mm256_castsi256_ps(_mm256_blendv_epi8(f, _mm256_set1_epi32(0x7fc0_0000), nan))
    } else {
        let f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32::<20>(c)), _mm256_set1_ps(2f32.powi(120)));
        if SC == UE4M3_PLAIN {
            return f;
        }
        // Codes 0x7f and up (all below 256, so a signed compare is right) are NaN.
        let nan = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, _mm256_set1_epi32(0x7e)));
        _mm256_blendv_ps(f, _mm256_set1_ps(f32::NAN), nan)
    }
}

/// [`bytes8`] on 16 codes of scale kind `kind`, for the tests.
#[cfg(test)]
pub(super) fn decode_bytes(kind: u8, codes: &[u8; 16]) -> [f32; 16] {
    use super::UE4M3;

    assert!(crate::avx2_available());
    let mut out = [0f32; 16];
    for (half, o) in codes.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
        let c = i64::from_le_bytes(half.try_into().expect("8 bytes"));
        // SAFETY: the CPU has the features (asserted); 8 f32 stored into 8.
        unsafe {
            let f = match kind {
                UE4M3 => bytes8::<UE4M3>(c),
                UE4M3_PLAIN => bytes8::<UE4M3_PLAIN>(c),
                UE8M0 => bytes8::<UE8M0>(c),
                _ => bytes8::<UE8M0_PLAIN>(c),
            };
            _mm256_storeu_ps(o.as_mut_ptr(), f);
        }
    }
    out
}
