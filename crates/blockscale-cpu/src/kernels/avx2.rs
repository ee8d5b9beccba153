//! AVX2 (+F16C) kernels. Each computes exactly what its portable twin computes (same
//! IEEE operations in the same order, the same rounding algorithm for every code), and
//! the tests compare the two on random and exhaustive inputs.
//!
//! Every function is `unsafe` and `#[target_feature(enable = "avx2,f16c")]`: callers
//! must have checked both features (`Isa::Avx2` is only built after that check).

use blockscale_formats::Source;
use core::arch::x86_64::*;

use super::{Codes, RowBlocks, Target, portable, zero_codes};
use crate::Input;
use crate::scale::Op;
use blockscale_formats::FloatKind;

/// A saturating minifloat encoder's parameters: the same numbers as the formats
/// crate's `Spec`s (`max_code` = `MAX.to_bits()`, `nan_code` = the code NaN gives).
#[derive(Clone, Copy)]
struct Mini {
    man: u32,
    bias: i32,
    max_code: i32,
    nan_code: i32,
    sign_shift: u32,
}

const E2M1: Mini = Mini { man: 1, bias: 1, max_code: 0x7, nan_code: 0x7, sign_shift: 3 };
const E2M3: Mini = Mini { man: 3, bias: 1, max_code: 0x1f, nan_code: 0x1f, sign_shift: 5 };
const E3M2: Mini = Mini { man: 2, bias: 3, max_code: 0x1f, nan_code: 0x1f, sign_shift: 5 };
const E4M3: Mini = Mini { man: 3, bias: 7, max_code: 0x7e, nan_code: 0x7f, sign_shift: 7 };
const E5M2: Mini = Mini { man: 2, bias: 15, max_code: 0x7b, nan_code: 0x7f, sign_shift: 7 };

/// Round-to-nearest-even, saturating encode of 8 lanes to codes in the low bits of each
/// 32-bit lane: the formats crate's branch-free algorithm, lane-parallel.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn encode_lanes(x: __m256, m: Mini) -> __m256i {
    let shift = 23 - m.man;
    let count = _mm_cvtsi32_si128(shift as i32);
    let bits = _mm256_castps_si256(x);
    let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff_ffff));
    // Normal range: integer round of the f32 mantissa, then re-bias.
    let lsb = _mm256_and_si256(_mm256_srl_epi32(abs, count), _mm256_set1_epi32(1));
    let rounded = _mm256_add_epi32(_mm256_add_epi32(abs, _mm256_set1_epi32((1 << (shift - 1)) - 1)), lsb);
    let normal = _mm256_sub_epi32(_mm256_srl_epi32(rounded, count), _mm256_set1_epi32((127 - m.bias) << m.man));
    // Subnormal range: the FPU rounds |x| + 2^(24 - bias - man) to the grid.
    let magic = f32::from_bits(((127 + 24 - m.bias - m.man as i32) as u32) << 23);
    let sum = _mm256_add_ps(_mm256_castsi256_ps(abs), _mm256_set1_ps(magic));
    let sub = _mm256_sub_epi32(_mm256_castps_si256(sum), _mm256_set1_epi32(magic.to_bits() as i32));
    let min_normal = (((127 + 1 - m.bias) as u32) << 23) as i32;
    let is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(min_normal), abs);
    let mag = _mm256_blendv_epi8(normal, sub, is_sub);
    // Both candidates are non-negative 32-bit integers here, so a signed min saturates.
    let mag = _mm256_min_epi32(mag, _mm256_set1_epi32(m.max_code));
    let sign = _mm256_sll_epi32(_mm256_srli_epi32::<31>(bits), _mm_cvtsi32_si128(m.sign_shift as i32));
    let code = _mm256_or_si256(mag, sign);
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
    _mm256_blendv_epi8(code, _mm256_set1_epi32(m.nan_code), nan)
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn apply(op: Op, x: __m256, f: __m256) -> __m256 {
    match op {
        Op::Mul => _mm256_mul_ps(x, f),
        Op::Div => _mm256_div_ps(x, f),
    }
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn hmax_epi32(m: __m256i) -> u32 {
    let x = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
    let x = _mm_max_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
    let x = _mm_max_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x));
    _mm_cvtsi128_si32(x) as u32
}

/// See `super::block_amax_bits`.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn block_amax_bits<T: Input>(row: &[T], block: usize, out: &mut [u32]) {
    assert!(block.is_multiple_of(8) && row.len() == out.len() * block);
    let mask = _mm256_set1_epi32(0x7fff_ffff);
    for (b, o) in out.iter_mut().enumerate() {
        let mut m = _mm256_setzero_si256();
        for j in (0..block).step_by(8) {
            // SAFETY: b * block + j + 8 <= out.len() * block == row.len() (asserted above).
            let v = unsafe { T::load8(row.as_ptr().add(b * block + j)) };
            m = _mm256_max_epi32(m, _mm256_and_si256(_mm256_castps_si256(v), mask));
        }
        *o = hmax_epi32(m);
    }
}

/// See `super::finite_amax_bits`.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn finite_amax_bits<T: Input>(row: &[T]) -> (u32, Option<usize>) {
    let mask = _mm256_set1_epi32(0x7fff_ffff);
    let max_finite = _mm256_set1_epi32(0x7f7f_ffff);
    let mut m = _mm256_setzero_si256();
    let mut bad = _mm256_setzero_si256();
    let whole = row.len() / 8 * 8;
    for j in (0..whole).step_by(8) {
        // SAFETY: j + 8 <= whole <= row.len().
        let v = unsafe { T::load8(row.as_ptr().add(j)) };
        let a = _mm256_and_si256(_mm256_castps_si256(v), mask);
        let non_finite = _mm256_cmpgt_epi32(a, max_finite);
        bad = _mm256_or_si256(bad, non_finite);
        m = _mm256_max_epi32(m, _mm256_andnot_si256(non_finite, a));
    }
    let (tail_max, tail_bad) = portable::finite_amax_bits(&row[whole..]);
    let amax = hmax_epi32(m).max(tail_max);
    if _mm256_testz_si256(bad, bad) == 1 {
        (amax, tail_bad.map(|i| whole + i))
    } else {
        // Rare: locate the first non-finite value with the portable scan.
        (amax, portable::finite_amax_bits(row).1)
    }
}

/// Stores the 4-bit codes (E2M1, offset-8 INT4) of 16 lanes (`c0`: elements 0-7, `c1`:
/// 8-15) as 8 bytes, even element in the low nibble.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn store_e2m1_16(c0: __m256i, c1: __m256i, dst: *mut u8) {
    // u16 lanes: [c0 0-3, c1 0-3 | c0 4-7, c1 4-7]; then u8: the same, twice per lane.
    let p = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_setzero_si256());
    // Each u16 is (even | odd << 8): its low byte becomes even | odd << 4.
    let t = _mm256_or_si256(p, _mm256_srli_epi16::<4>(p));
    // Low lane's bytes 0,2 (elements 0-3) and 4,6 (8-11) go to 0,1 and 4,5; the high
    // lane's (4-7 and 12-15) to 2,3 and 6,7.
    #[rustfmt::skip]
    let shuffle = _mm256_setr_epi8(
        0, 2, -128, -128, 4, 6, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128,
        -128, -128, 0, 2, -128, -128, 4, 6, -128, -128, -128, -128, -128, -128, -128, -128,
    );
    let s = _mm256_shuffle_epi8(t, shuffle);
    let r = _mm_or_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    // SAFETY: the caller guarantees 8 writable bytes at `dst`.
    unsafe { _mm_storel_epi64(dst.cast(), r) };
}

/// Stores the 8-bit codes of 32 lanes (`c[0]`: elements 0-7, ...) as 32 bytes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn store_bytes_32(c: [__m256i; 4], dst: *mut u8) {
    let a = _mm256_packus_epi32(c[0], c[1]);
    let b = _mm256_packus_epi32(c[2], c[3]);
    // Dwords now hold [c0 lo, c1 lo, c2 lo, c3 lo | c0 hi, c1 hi, c2 hi, c3 hi].
    let p = _mm256_packus_epi16(a, b);
    let r = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: the caller guarantees 32 writable bytes at `dst`.
    unsafe { _mm256_storeu_si256(dst.cast(), r) };
}

/// How 8 lanes become codes: a saturating minifloat, or offset-8 INT4.
#[derive(Clone, Copy)]
enum Encoder {
    Mini(Mini),
    Int4,
}

/// The encoder of a target.
fn encoder_of(target: Target) -> Encoder {
    match target {
        Target::E2M1 => Encoder::Mini(E2M1),
        Target::E2M3 => Encoder::Mini(E2M3),
        Target::E3M2 => Encoder::Mini(E3M2),
        Target::E4M3 => Encoder::Mini(E4M3),
        Target::E5M2 => Encoder::Mini(E5M2),
        Target::Int4 => Encoder::Int4,
    }
}

/// `Int4::from_f32(x).to_offset8_bits()` of 8 lanes, the same IEEE operations: clamp to
/// -9..=8, round ties to even by adding and subtracting 1.5 * 2^23, clamp to -8..=7,
/// NaN to 0; then `+ 8`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn int4_lanes(x: __m256) -> __m256i {
    const ROUND: f32 = 12_582_912.0;
    let clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-9.0)), _mm256_set1_ps(8.0));
    let r = _mm256_sub_ps(_mm256_add_ps(clamped, _mm256_set1_ps(ROUND)), _mm256_set1_ps(ROUND));
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let v = _mm256_cvtps_epi32(_mm256_andnot_ps(nan, r));
    let v = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(-8)), _mm256_set1_epi32(7));
    _mm256_add_epi32(v, _mm256_set1_epi32(8))
}

/// The codes of 8 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn encode8(x: __m256, enc: Encoder) -> __m256i {
    match enc {
        Encoder::Mini(m) => encode_lanes(x, m),
        Encoder::Int4 => int4_lanes(x),
    }
}

/// Encodes one block of `block` values at `src` (scaled by `fv`) into `dst`.
///
/// # Safety
/// `src` must be readable for `block` values and `dst` writable for
/// `block / per_byte` bytes; `block` is a multiple of 16 (4-bit) or 32 (bytes).
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn encode_block<T: Input>(
    src: *const T,
    block: usize,
    op: Op,
    fv: __m256,
    enc: Encoder,
    per_byte: usize,
    dst: *mut u8,
) {
    let step = if per_byte == 2 { 16 } else { 32 };
    for j in (0..block).step_by(step) {
        // SAFETY: j + step <= block, so every load and store is in the caller's ranges.
        unsafe {
            let p = src.add(j);
            let c0 = encode8(apply(op, T::load8(p), fv), enc);
            let c1 = encode8(apply(op, T::load8(p.add(8)), fv), enc);
            if per_byte == 2 {
                store_e2m1_16(c0, c1, dst.add(j / 2));
            } else {
                let c2 = encode8(apply(op, T::load8(p.add(16)), fv), enc);
                let c3 = encode8(apply(op, T::load8(p.add(24)), fv), enc);
                store_bytes_32([c0, c1, c2, c3], dst.add(j));
            }
        }
    }
}

/// See `super::encode_row`.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn encode_row<T: Input>(row: &[T], blocks: RowBlocks<'_>, op: Op, out: &mut [u8]) {
    let RowBlocks { block, factors, target } = blocks;
    assert!(row.len() == factors.len() * block && out.len() * target.per_byte() == row.len());
    let enc = encoder_of(target);
    let per_byte = target.per_byte();
    assert!(block.is_multiple_of(32 / per_byte));
    for (b, &f) in factors.iter().enumerate() {
        let dst = &mut out[b * block / per_byte..(b + 1) * block / per_byte];
        if zero_codes(f) {
            dst.fill(target.zero_byte());
            continue;
        }
        // SAFETY: block b spans row[b * block..(b + 1) * block] (asserted lengths) and dst
        // has block / per_byte bytes.
        unsafe {
            encode_block(row.as_ptr().add(b * block), block, op, _mm256_set1_ps(f), enc, per_byte, dst.as_mut_ptr())
        };
    }
}

/// See `super::nvfp4_scales` (LightX2V recipe): eight blocks at a time,
/// `sf = ue4m3(g * (amax * C6))`, `mult = sf != 0 ? min(g * (1 / sf), MAX) : 0`, and the
/// poison (`0x7f`, NaN) for non-finite blocks; the same IEEE operations as
/// `scale::nvfp4`, so the same bits.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn nvfp4_scales(amax: &[u32], g: f32, scales: &mut [u8], factors: &mut [f32]) {
    assert!(amax.len() == scales.len() && amax.len() == factors.len());
    let whole = amax.len() / 8 * 8;
    let gv = _mm256_set1_ps(g);
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 <= whole <= the three (equal) lengths.
        let a = unsafe { _mm256_loadu_si256(amax.as_ptr().add(i).cast()) };
        let poison = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7f_ffff));
        let sfv = _mm256_mul_ps(gv, _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(crate::scale::C6)));
        // sfv >= 0, so E4M3's encoder gives the UE4M3 byte.
        let sf = encode_lanes(sfv, E4M3);
        let sfq = decode_fp8_lanes(sf, false);
        let mult = _mm256_min_ps(_mm256_mul_ps(gv, _mm256_div_ps(_mm256_set1_ps(1.0), sfq)), _mm256_set1_ps(f32::MAX));
        let zero = _mm256_cmpeq_epi32(sf, _mm256_setzero_si256());
        let mult = _mm256_andnot_ps(_mm256_castsi256_ps(zero), mult);
        let mult = _mm256_blendv_ps(mult, _mm256_set1_ps(f32::NAN), _mm256_castsi256_ps(poison));
        let sf = _mm256_blendv_epi8(sf, _mm256_set1_epi32(0x7f), poison);
        let bytes = _mm256_permutevar8x32_epi32(
            _mm256_packus_epi16(_mm256_packus_epi32(sf, sf), _mm256_setzero_si256()),
            _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1),
        );
        // SAFETY: as above; 8 bytes and 8 f32 are written at i.
        unsafe {
            _mm_storel_epi64(scales.as_mut_ptr().add(i).cast(), _mm256_castsi256_si128(bytes));
            _mm256_storeu_ps(factors.as_mut_ptr().add(i), mult);
        }
    }
    for i in whole..amax.len() {
        (scales[i], factors[i]) = crate::scale::nvfp4_entry(amax[i], g, crate::NvFp4Recipe::LightX2V);
    }
}

/// Writes 8 f32 lanes as `O`, rounding as `O::from_f32` does.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn store_out<O: Source>(y: __m256, dst: *mut O) {
    // SAFETY (all arms): the caller guarantees 8 writable `O` at `dst`.
    match O::KIND {
        FloatKind::F32 => unsafe { _mm256_storeu_ps(dst.cast(), y) },
        FloatKind::F16 => unsafe { _mm_storeu_si128(dst.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(y)) },
        FloatKind::Bf16 => {
            // half's rounding: nearest even; NaN keeps its top bits with the quiet bit set.
            let bits = _mm256_castps_si256(y);
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
            let rounded =
                _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb));
            let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(0x40));
            let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff_ffff));
            let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
            let h = _mm256_blendv_epi8(rounded, quiet, nan);
            let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(h, h));
            unsafe { _mm_storeu_si128(dst.cast(), _mm256_castsi256_si128(p)) };
        }
    }
}

/// E2M1 magnitudes, indexed by the low three bits of a code.
const E2M1_MAG: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// The 8 nibbles of `word` (low nibble first), one per 32-bit lane.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn nibble_lanes(word: u32) -> __m256i {
    let idx = _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    _mm256_and_si256(idx, _mm256_set1_epi32(0xf))
}

/// The 8 values of 8 E2M1 codes (4 bytes, low nibble first).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn decode_e2m1_8(word: u32) -> __m256 {
    let idx = nibble_lanes(word);
    let table = _mm256_setr_ps(
        E2M1_MAG[0],
        E2M1_MAG[1],
        E2M1_MAG[2],
        E2M1_MAG[3],
        E2M1_MAG[4],
        E2M1_MAG[5],
        E2M1_MAG[6],
        E2M1_MAG[7],
    );
    let mag = _mm256_permutevar8x32_ps(table, idx);
    let sign = _mm256_slli_epi32::<28>(_mm256_and_si256(idx, _mm256_set1_epi32(8)));
    _mm256_or_ps(mag, _mm256_castsi256_ps(sign))
}

/// The values of 8 offset-8 INT4 codes (nibbles of `word`, element 0 lowest): `code - 8`,
/// exact.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn decode_int4_8(word: u32) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_sub_epi32(nibble_lanes(word), _mm256_set1_epi32(8)))
}

/// The values of 8 FP6 codes (E2M3 or E3M2, one per 32-bit lane): the five magnitude
/// bits placed in an f32's exponent and mantissa fields, times `2^(127 - bias)` (exact
/// for normals and subnormals alike), and the sign. FP6 has no special codes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn decode_fp6_lanes(c: __m256i, m: Mini) -> __m256 {
    let mag = _mm256_and_si256(c, _mm256_set1_epi32(0x1f));
    let placed = _mm256_sll_epi32(mag, _mm_cvtsi32_si128(23 - m.man as i32));
    let scale = f32::from_bits(((127 + 127 - m.bias) as u32) << 23);
    let v = _mm256_mul_ps(_mm256_castsi256_ps(placed), _mm256_set1_ps(scale));
    let sign = _mm256_slli_epi32::<26>(_mm256_and_si256(c, _mm256_set1_epi32(0x20)));
    _mm256_or_ps(v, _mm256_castsi256_ps(sign))
}

/// The values of 8 E4M3 (`ieee = false`) or E5M2 (`ieee = true`) codes: the magnitude
/// bits placed in an f32's exponent and mantissa fields, times 2^(127 - bias), which is
/// exact for normals and subnormals alike; specials blended in as the tables hold them.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn decode_fp8_lanes(c: __m256i, ieee: bool) -> __m256 {
    let mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(c, _mm256_set1_epi32(0x80)));
    let (placed, scale, special) = if ieee {
        (_mm256_slli_epi32::<21>(mag), (127 + 112) << 23, _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7b)))
    } else {
        (_mm256_slli_epi32::<20>(mag), (127 + 120) << 23, _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)))
    };
    let v = _mm256_mul_ps(_mm256_castsi256_ps(placed), _mm256_castsi256_ps(_mm256_set1_epi32(scale)));
    // Specials: E5M2 0x7c is Inf, 0x7d-0x7f NaN; E4M3 0x7f NaN (f32::NAN's bits).
    let inf = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7c));
    let special_bits = if ieee {
        _mm256_blendv_epi8(_mm256_set1_epi32(0x7fc0_0000), _mm256_set1_epi32(0x7f80_0000), inf)
    } else {
        _mm256_set1_epi32(0x7fc0_0000)
    };
    let v = _mm256_blendv_epi8(_mm256_castps_si256(v), special_bits, special);
    _mm256_castsi256_ps(_mm256_or_si256(v, sign))
}

/// See `super::decode_row`.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn decode_row<O: Source>(codes: &[u8], blocks: RowBlocks<'_>, post: f32, out: &mut [O]) {
    let RowBlocks { block, factors: scales, target } = blocks;
    assert!(
        out.len() == scales.len() * block && codes.len() * target.per_byte() == out.len() && block.is_multiple_of(8)
    );
    let postv = _mm256_set1_ps(post);
    for (b, &s) in scales.iter().enumerate() {
        let sv = _mm256_set1_ps(s);
        for j in (0..block).step_by(8) {
            let i = b * block + j;
            let nibbles = || u32::from_le_bytes([codes[i / 2], codes[i / 2 + 1], codes[i / 2 + 2], codes[i / 2 + 3]]);
            let bytes = || {
                let mut b8 = [0u8; 8];
                b8.copy_from_slice(&codes[i..i + 8]);
                _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(u64::from_le_bytes(b8) as i64))
            };
            let v = match target {
                Target::E2M1 => decode_e2m1_8(nibbles()),
                Target::Int4 => decode_int4_8(nibbles()),
                Target::E4M3 => decode_fp8_lanes(bytes(), false),
                Target::E5M2 => decode_fp8_lanes(bytes(), true),
                Target::E2M3 => decode_fp6_lanes(bytes(), E2M3),
                Target::E3M2 => decode_fp6_lanes(bytes(), E3M2),
            };
            let y = _mm256_mul_ps(_mm256_mul_ps(v, sv), postv);
            // One canonical NaN, as the portable path writes.
            let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::NAN), _mm256_cmp_ps::<_CMP_UNORD_Q>(y, y));
            // SAFETY: i + 8 <= scales.len() * block == out.len() (asserted above).
            unsafe { store_out(y, out.as_mut_ptr().add(i)) };
        }
    }
}

/// See `super::pack_fp6`: 32 codes a step. `vpmaddubsw` joins pairs (`c0 + 64 c1`),
/// `vpmaddwd` pairs of those (`+ 4096 (c2 + 64 c3)`), a shuffle and a permute gather
/// the low three bytes of each word into 24 contiguous bytes.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn pack_fp6(codes: &[u8], out: &mut [u8]) {
    assert!(codes.len().is_multiple_of(4) && out.len() == codes.len() / 4 * 3);
    let whole = codes.len() / 32;
    #[rustfmt::skip]
    let gather = _mm256_setr_epi8(
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128,
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128,
    );
    for i in 0..whole {
        // SAFETY: 32 codes at 32 i and 24 bytes at 24 i are in bounds (i < whole).
        unsafe {
            let v = _mm256_and_si256(_mm256_loadu_si256(codes.as_ptr().add(32 * i).cast()), _mm256_set1_epi8(0x3f));
            let pairs = _mm256_maddubs_epi16(v, _mm256_set1_epi16(0x4001));
            let words = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x1000_0001));
            let bytes = _mm256_shuffle_epi8(words, gather);
            let packed = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
            let dst = out.as_mut_ptr().add(24 * i);
            _mm_storeu_si128(dst.cast(), _mm256_castsi256_si128(packed));
            _mm_storel_epi64(dst.add(16).cast(), _mm256_extracti128_si256::<1>(packed));
        }
    }
    portable::pack_fp6(&codes[32 * whole..], &mut out[24 * whole..]);
}

/// See `super::unpack_fp6`: 24 bytes (32 codes) a step. A shuffle gives each 32-bit
/// lane one group's three bytes, shifts and masks move its four 6-bit codes to the
/// lane's four bytes.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn unpack_fp6(packed: &[u8], codes: &mut [u8]) {
    assert!(packed.len().is_multiple_of(3) && codes.len() == packed.len() / 3 * 4);
    // Steps whose 32-byte load (24 used) stays inside `packed`.
    let whole = if packed.len() >= 32 { (packed.len() - 32) / 24 + 1 } else { 0 };
    #[rustfmt::skip]
    let spread = _mm256_setr_epi8(
        0, 1, 2, -128, 3, 4, 5, -128, 6, 7, 8, -128, 9, 10, 11, -128,
        4, 5, 6, -128, 7, 8, 9, -128, 10, 11, 12, -128, 13, 14, 15, -128,
    );
    for i in 0..whole {
        // SAFETY: 32 bytes at 24 i and 32 codes at 32 i are in bounds (i < whole).
        unsafe {
            // Bytes 0..12 in the low half, 12..24 in the high half (read from 8: the
            // shuffle's high-half indices are offset by 4).
            let v = _mm256_loadu_si256(packed.as_ptr().add(24 * i).cast());
            let v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 1, 2, 3, 2, 3, 4, 5));
            let w = _mm256_shuffle_epi8(v, spread);
            let c0 = _mm256_and_si256(w, _mm256_set1_epi32(0x3f));
            let c1 = _mm256_and_si256(_mm256_slli_epi32::<2>(w), _mm256_set1_epi32(0x3f00));
            let c2 = _mm256_and_si256(_mm256_slli_epi32::<4>(w), _mm256_set1_epi32(0x3f_0000));
            let c3 = _mm256_and_si256(_mm256_slli_epi32::<6>(w), _mm256_set1_epi32(0x3f00_0000));
            let out = _mm256_or_si256(_mm256_or_si256(c0, c1), _mm256_or_si256(c2, c3));
            _mm256_storeu_si256(codes.as_mut_ptr().add(32 * i).cast(), out);
        }
    }
    portable::unpack_fp6(&packed[24 * whole..], &mut codes[32 * whole..]);
}
