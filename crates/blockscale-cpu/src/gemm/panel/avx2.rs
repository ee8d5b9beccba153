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
//! Six-bit panels (E2M3) take the same tile with another group decoding (see [`Six`]);
//! their values reach 120, so each `vpmaddubsw` result is widened on its own. One
//! activation row (the GEMV) takes [`signed_rows`] instead, two panels side by side:
//! magnitudes up to 60 and the sign on the activations, which decodes in fewer
//! operations when nothing amortizes it.
//!
//! Every function needs AVX2, FMA and F16C: `Kernel::of` only picks this kernel
//! for an ISA that has all three.

use core::arch::x86_64::*;

use super::drive::{self, Run, Tiles};
use super::{ActRows, PanelScales, Panels, UE4M3_PLAIN, UE8M0, UE8M0_PLAIN, Width};

/// The AVX2 tiles of four-bit panels (see [`Tiles`]).
pub(super) struct Avx2;

/// The AVX2 tiles of six-bit panels.
pub(super) struct Avx2Six;

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

/// [`rows`] for six-bit panels.
///
/// # Safety
/// As [`rows`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_six(a: &ActRows<'_>, m: usize, p: &Panels, p0: usize, p1: usize, buf: &mut [f32]) {
    // SAFETY: as `rows`.
    unsafe { drive::rows::<Avx2Six>(a, m, p, p0, p1, buf, (2, 0)) }
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
            PanelScales::F32(data) => {
                [_mm256_loadu_ps(data.as_ptr().add(at)), _mm256_loadu_ps(data.as_ptr().add(at + 8))]
            }
        }
    }
}

/// How a tile turns half a group (rows 0..8 or 8..16) into its two vectors of
/// unsigned operands (8 rows x 4 elements: the low-nibble and high-nibble positions).
trait Groups {
    /// Bytes per group.
    const GB: usize;
    /// Whether four `vpmaddubsw` results may add in i16 before widening (else each
    /// widens on its own).
    const FOUR_IN_I16: bool;
    /// What the decoding keeps in registers for a tile.
    type Consts: Copy;
    /// The constants of panels `p`.
    ///
    /// # Safety
    /// The CPU has AVX2, inlined into a function that enables it.
    unsafe fn consts(p: &Panels) -> Self::Consts;
    /// The two vectors of half `h` of the group at `w`.
    ///
    /// # Safety
    /// As [`Self::consts`], and `Self::GB` bytes readable at `w`.
    unsafe fn half(c: Self::Consts, w: *const u8, h: usize) -> (__m256i, __m256i);
    /// Whether one activation row takes [`Self::signed`] (the sign on the activations)
    /// instead of the offset operands of [`Self::half`].
    const SIGNED_ROW: bool = false;
    /// Half `h` of the group at `w` as magnitudes and sign bytes: `[low-nibble
    /// magnitudes, their signs, high-nibble magnitudes, their signs]`, magnitudes at most
    /// 60 (`8 |value|`) and sign bytes negative where the code is, never zero (for
    /// `vpsignb`). Only groups with `SIGNED_ROW` implement it.
    ///
    /// # Safety
    /// As [`Self::half`].
    unsafe fn signed(_c: Self::Consts, _w: *const u8, _h: usize) -> [__m256i; 4] {
        unreachable!("only groups with SIGNED_ROW decode signed halves")
    }
}

/// Four-bit codes: mask or shift, then `vpshufb`; values up to 24, so four products
/// add in i16 (`4 * 2 * 24 * 127 < 2^15`).
struct Nibbles;

impl Groups for Nibbles {
    const GB: usize = 64;
    const FOUR_IN_I16: bool = true;
    type Consts = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn consts(p: &Panels) -> Self::Consts {
        // SAFETY: `unsigned` holds 64 bytes; the caller guarantees the features.
        unsafe { (_mm256_broadcastsi128_si256(_mm_loadu_si128(p.unsigned.as_ptr().cast())), _mm256_set1_epi8(0x0f)) }
    }

    #[inline(always)]
    unsafe fn half((lut, low): Self::Consts, w: *const u8, h: usize) -> (__m256i, __m256i) {
        // SAFETY: the caller guarantees 64 bytes at `w` and the features.
        unsafe {
            let v = _mm256_loadu_si256(w.add(32 * h).cast());
            let lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low));
            let hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
            (lo, hi)
        }
    }
}

/// Six-bit E2M3 codes: the plane shifted by a constant (`vpsllw`, per 16-bit lane; no
/// bit crosses into the bit 7 of another byte) puts each position's high exponent bit,
/// then its sign, at bit 7 of its byte for `vpblendvb`. The low nibble picks `60 +
/// |value|` from one of two `vpshufb` tables (by the exponent bit), and the sign turns it
/// into `120 - it`. Values up to 120: each product widens on its own
/// (`2 * 120 * 127 < 2^15`).
struct Six;

/// `plane` shifted left by `S` (0..=7) within its 16-bit lanes, for the bit 7 of each
/// byte.
///
/// # Safety
/// Inlined into a function that enables AVX2.
#[inline(always)]
unsafe fn plane_bits<const S: i32>(plane: __m256i) -> __m256i {
    // SAFETY: the caller's guarantee.
    unsafe { if S == 0 { plane } else { _mm256_slli_epi16::<S>(plane) } }
}

impl Groups for Six {
    const GB: usize = 96;
    const FOUR_IN_I16: bool = false;
    const SIGNED_ROW: bool = true;
    /// (table of codes 0..16, of codes 16..32, low-nibble mask, 120, magnitudes of codes
    /// 16..32 (`8 v`, at most 60), ones).
    type Consts = (__m256i, __m256i, __m256i, __m256i, __m256i, __m256i);

    #[inline(always)]
    unsafe fn consts(p: &Panels) -> Self::Consts {
        // SAFETY: `unsigned` holds 64 bytes; the caller guarantees the features.
        unsafe {
            let table = |at: usize| _mm256_broadcastsi128_si256(_mm_loadu_si128(p.unsigned.as_ptr().add(at).cast()));
            let all = _mm256_set1_epi8(120);
            // Codes 16..32 are positive: their magnitudes `8 v` are their operands less 60.
            let magnitudes = _mm256_sub_epi8(table(16), _mm256_set1_epi8(60));
            (table(0), table(16), _mm256_set1_epi8(0x0f), all, magnitudes, _mm256_set1_epi8(1))
        }
    }

    #[inline(always)]
    unsafe fn half((t0, t1, low, all, _, _): Self::Consts, w: *const u8, h: usize) -> (__m256i, __m256i) {
        // SAFETY: the caller guarantees 96 bytes at `w` and the features.
        unsafe {
            let v = _mm256_loadu_si256(w.add(32 * h).cast());
            let plane = _mm256_loadu_si256(w.add(64).cast());
            // `exp` and `sign` hold the bits of half-vector `c` at bit 7 (`c = 2 h` for the
            // low nibbles, `2 h + 1` for the high ones: see the module docs).
            let decode = |nibbles: __m256i, exp: __m256i, sign: __m256i| {
                let plus = _mm256_blendv_epi8(_mm256_shuffle_epi8(t0, nibbles), _mm256_shuffle_epi8(t1, nibbles), exp);
                _mm256_blendv_epi8(plus, _mm256_sub_epi8(all, plus), sign)
            };
            let (nlo, nhi) = (_mm256_and_si256(v, low), _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
            if h == 0 {
                let lo = decode(nlo, plane_bits::<7>(plane), plane_bits::<6>(plane));
                (lo, decode(nhi, plane_bits::<5>(plane), plane_bits::<4>(plane)))
            } else {
                let lo = decode(nlo, plane_bits::<3>(plane), plane_bits::<2>(plane));
                (lo, decode(nhi, plane_bits::<1>(plane), plane_bits::<0>(plane)))
            }
        }
    }

    #[inline(always)]
    unsafe fn signed((_, _, low, _, magnitudes, one): Self::Consts, w: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: the caller guarantees 96 bytes at `w` and the features.
        unsafe {
            let v = _mm256_loadu_si256(w.add(32 * h).cast());
            let plane = _mm256_loadu_si256(w.add(64).cast());
            // Codes 0..16 are their own magnitudes (`8 v = code`); 16..32 from the table.
            let magnitude = |nibbles: __m256i, exp: __m256i| {
                _mm256_blendv_epi8(nibbles, _mm256_shuffle_epi8(magnitudes, nibbles), exp)
            };
            let (nlo, nhi) = (_mm256_and_si256(v, low), _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
            if h == 0 {
                [
                    magnitude(nlo, plane_bits::<7>(plane)),
                    _mm256_or_si256(plane_bits::<6>(plane), one),
                    magnitude(nhi, plane_bits::<5>(plane)),
                    _mm256_or_si256(plane_bits::<4>(plane), one),
                ]
            } else {
                [
                    magnitude(nlo, plane_bits::<3>(plane)),
                    _mm256_or_si256(plane_bits::<2>(plane), one),
                    magnitude(nhi, plane_bits::<1>(plane)),
                    _mm256_or_si256(plane_bits::<0>(plane), one),
                ]
            }
        }
    }
}

/// The `Tiles` of an AVX2 tile type (eight rows a tile, two vectors of accumulators
/// each: the decoded block, which does not fit the registers beside them, is read back
/// from L1 for each row; eight rows measured 6-15% faster than four at M = 16 on a Zen 1;
/// the single-row walk is the default one).
macro_rules! tiles {
    ($tiles:ty, $width:expr, $groups:ty) => {
        impl Tiles for $tiles {
            const MR: usize = 8;
            const WIDTH: Width = $width;

            /// # Safety
            /// As [`Tiles::tile`].
            #[inline]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn tile<const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
                // SAFETY: the caller's guarantee; the features are enabled here.
                unsafe { tile::<$groups, BLOCK, SC, TR>(run, pi, i0) }
            }

            /// # Safety
            /// As [`Tiles::tile1`].
            #[inline]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn tile1<const BLOCK: usize, const SC: u8, const NP: usize>(run: &Run<'_>, pi: usize) {
                // SAFETY: the caller's guarantee; the features are enabled here.
                unsafe {
                    if <$groups as Groups>::SIGNED_ROW {
                        signed_rows::<$groups, BLOCK, SC, NP>(run, pi, 0)
                    } else {
                        for j in 0..NP {
                            tile::<$groups, BLOCK, SC, 1>(run, pi + j, 0);
                        }
                    }
                }
            }
        }
    };
}

tiles!(Avx2, Width::Four, Nibbles);
tiles!(Avx2Six, Width::Six, Six);

/// Panel `pi` times activation rows `i0..i0 + TR`, groups decoded by `G`.
///
/// # Safety
/// As [`Tiles::tile`], inlined into a function enabling AVX2, FMA and F16C.
#[inline(always)]
unsafe fn tile<G: Groups, const BLOCK: usize, const SC: u8, const TR: usize>(run: &Run<'_>, pi: usize, i0: usize) {
    if TR == 1 && G::SIGNED_ROW {
        // SAFETY: the caller's guarantee.
        return unsafe { signed_rows::<G, BLOCK, SC, 1>(run, pi, i0) };
    }
    let (a, p) = (run.a, run.p);
    let k = p.k;
    let (cols, groups, xb) = (k / BLOCK, BLOCK / 8, k.div_ceil(a.dblock));
    // SAFETY (this function): as the AVX-512 kernel's `tile`.
    unsafe {
        let consts = G::consts(p);
        let ones = _mm256_set1_epi16(1);
        let wbase = run.codes(pi);
        let mut accf = [[_mm256_setzero_ps(); 2]; TR];
        // Decoded block: [group][half] low and high nibbles' values.
        let mut lo = [[_mm256_setzero_si256(); 2]; 4];
        let mut hi = [[_mm256_setzero_si256(); 2]; 4];
        for b in 0..cols {
            let s = scales::<SC>(p, p.scale_at(pi, b));
            for g in 0..groups {
                let w = wbase.add((b * groups + g) * G::GB);
                for h in 0..2 {
                    (lo[g][h], hi[g][h]) = G::half(consts, w, h);
                }
            }
            for (r, acc_f) in accf.iter_mut().enumerate() {
                let i = i0 + r;
                let q = a.q.as_ptr().add(i * k + b * BLOCK).cast::<i32>();
                let corr = _mm256_set1_epi32(*a.corr.get_unchecked(i * cols + b));
                let mut acc = [corr, corr];
                if G::FOUR_IN_I16 {
                    // Two groups' four i16 pair sums at a time, then widened.
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
                } else {
                    // Each product widened on its own.
                    for g in 0..groups {
                        let q_lo = _mm256_set1_epi32(q.add(2 * g).read_unaligned());
                        let q_hi = _mm256_set1_epi32(q.add(2 * g + 1).read_unaligned());
                        for (h, acc_h) in acc.iter_mut().enumerate() {
                            let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[g][h], q_lo), ones);
                            let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[g][h], q_hi), ones);
                            *acc_h = _mm256_add_epi32(*acc_h, _mm256_add_epi32(pl, ph));
                        }
                    }
                }
                add_block(acc_f, acc, s, *a.d.get_unchecked(i * xb + b * BLOCK / a.dblock));
            }
        }
        for (r, &acc_f) in accf.iter().enumerate() {
            store_row(run.out(i0 + r, pi), acc_f, p.vscale);
        }
    }
}

/// Panels `pi..pi + NP` side by side (the same operations per panel in the same order,
/// so the same bits) times activation row `i`, with the sign on the activations (groups
/// with `SIGNED_ROW`): the codes' magnitudes times the activation bytes negated where the
/// codes are negative (`vpsignb`), two products (at most `2 * 2 * 60 * 127 < 2^15`)
/// added in i16 before they widen, and no offset. The block sums are the same integers
/// as [`tile`]'s, and so are the bits; one row skips the offset form's subtraction and
/// blend and half its widening. It relies on the activations lying in `-127..=127`
/// (`quantize_row` clamps them): `vpsignb` would leave a -128 negative.
///
/// # Safety
/// As [`tile`] with one row, for each of the `NP` panels.
#[inline(always)]
unsafe fn signed_rows<G: Groups, const BLOCK: usize, const SC: u8, const NP: usize>(
    run: &Run<'_>,
    pi: usize,
    i: usize,
) {
    let (a, p) = (run.a, run.p);
    let k = p.k;
    let (cols, groups, xb) = (k / BLOCK, BLOCK / 8, k.div_ceil(a.dblock));
    // SAFETY (this function): as `tile`.
    unsafe {
        let consts = G::consts(p);
        let ones = _mm256_set1_epi16(1);
        let wbase: [*const u8; NP] = core::array::from_fn(|j| run.codes(pi + j));
        let mut accf = [[_mm256_setzero_ps(); 2]; NP];
        for b in 0..cols {
            let q = a.q.as_ptr().add(i * k + b * BLOCK).cast::<i32>();
            let mut acc = [[_mm256_setzero_si256(); 2]; NP];
            for g in 0..groups {
                let q_lo = _mm256_set1_epi32(q.add(2 * g).read_unaligned());
                let q_hi = _mm256_set1_epi32(q.add(2 * g + 1).read_unaligned());
                for (j, acc_j) in acc.iter_mut().enumerate() {
                    let w = wbase[j].add((b * groups + g) * G::GB);
                    for (h, acc_h) in acc_j.iter_mut().enumerate() {
                        let [ml, sl, mh, sh] = G::signed(consts, w, h);
                        let pl = _mm256_maddubs_epi16(ml, _mm256_sign_epi8(q_lo, sl));
                        let ph = _mm256_maddubs_epi16(mh, _mm256_sign_epi8(q_hi, sh));
                        *acc_h = _mm256_add_epi32(*acc_h, _mm256_madd_epi16(_mm256_add_epi16(pl, ph), ones));
                    }
                }
            }
            let d = *a.d.get_unchecked(i * xb + b * BLOCK / a.dblock);
            for (j, (accf_j, acc_j)) in accf.iter_mut().zip(acc).enumerate() {
                add_block(accf_j, acc_j, scales::<SC>(p, p.scale_at(pi + j, b)), d);
            }
        }
        for (j, &accf_j) in accf.iter().enumerate() {
            store_row(run.out(i, pi + j), accf_j, p.vscale);
        }
    }
}

/// One block's exact sums into a row's 16 f32 accumulators: `acc_f += f32(acc) * (s *
/// d)`, the block scales times the activation factor rounded once, then one FMA (the
/// order every panel kernel follows).
///
/// # Safety
/// Inlined into a function that enables AVX2 and FMA.
#[inline(always)]
unsafe fn add_block(acc_f: &mut [__m256; 2], acc: [__m256i; 2], s: [__m256; 2], d: f32) {
    // SAFETY: the caller's guarantee.
    unsafe {
        let dv = _mm256_set1_ps(d);
        for h in 0..2 {
            acc_f[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h]), _mm256_mul_ps(s[h], dv), acc_f[h]);
        }
    }
}

/// A row's 16 outputs, times `vscale`, stored at `o`.
///
/// # Safety
/// 16 floats writable at `o`; inlined into a function that enables AVX2.
#[inline(always)]
unsafe fn store_row(o: *mut f32, acc_f: [__m256; 2], vscale: f32) {
    // SAFETY: the caller's guarantee.
    unsafe {
        let v = _mm256_set1_ps(vscale);
        _mm256_storeu_ps(o, _mm256_mul_ps(acc_f[0], v));
        _mm256_storeu_ps(o.add(8), _mm256_mul_ps(acc_f[1], v));
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
