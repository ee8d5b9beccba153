//! Exact accumulation and correct rounding: the arithmetic core of the reference GEMM.
//!
//! [`ExactSum`] is a fixed-point (Kulisch) accumulator wide enough for every value the
//! reference adds: block sums of element products times two scales, times `alpha`,
//! plus an f32 bias, from `2^-800` to beyond `2^900`. Adds never round. Limbs hold
//! 32-bit digits in `i64` words (carry-save), so an add touches at most six limbs and
//! needs no carry loop; carries are resolved when the value is read.
//!
//! [`Format`] and [`round_parts`] round `m * 2^e` to a binary floating-point format
//! with round-to-nearest-even, subnormals and overflow to infinity, from the exact bits.

/// 32-bit digits.
const LIMBS: usize = 56;
/// Exponent of bit 0 of limb 0 when the accumulator is created.
const BASE: i32 = -800;
/// Adds between two carry normalisations: each add puts less than 2^33 into a limb.
const NORMALIZE_EVERY: u32 = 1 << 28;

/// A binary floating-point target of rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// Significand bits, the implicit one included.
    pub precision: u32,
    /// Exponent of the smallest subnormal (the finest ulp).
    pub min_exp: i32,
    /// Exponent of the largest power of two below the largest finite value (`emax`).
    pub max_exp: i32,
}

impl Format {
    pub(crate) const F64: Self = Self { precision: 53, min_exp: -1074, max_exp: 1023 };
    pub(crate) const F32: Self = Self { precision: 24, min_exp: -149, max_exp: 127 };
    pub(crate) const F16: Self = Self { precision: 11, min_exp: -24, max_exp: 15 };
    pub(crate) const BF16: Self = Self { precision: 8, min_exp: -133, max_exp: 127 };
}

/// `2^e` as an f64, exact for `-1074 <= e <= 1023`.
fn pow2(e: i32) -> f64 {
    debug_assert!((-1074..=1023).contains(&e));
    if e >= -1022 { f64::from_bits(((e + 1023) as u64) << 52) } else { f64::from_bits(1u64 << (e + 1074)) }
}

/// Rounds `(-1)^neg * m * 2^e` to `format` (nearest, ties to even; overflow gives
/// infinity) and returns the result as an f64, which holds it exactly.
pub(crate) fn round_parts(neg: bool, m: u128, e: i32, format: Format) -> f64 {
    let sign = if neg { -1.0 } else { 1.0 };
    if m == 0 {
        return sign * 0.0;
    }
    let msb = 127 - m.leading_zeros() as i32;
    // Exponent of the result's last significand bit: precision bits below the leading
    // one, but never finer than the smallest subnormal.
    let ulp = (msb + e - (format.precision as i32 - 1)).max(format.min_exp);
    let shift = ulp - e;
    let q = if shift <= 0 {
        // Every bit is kept: the value is exact (and has at most `precision` bits).
        m << (-shift) as u32
    } else if shift > 128 {
        // m < 2^128 < half an ulp.
        0
    } else if shift == 128 {
        // Half an ulp is 2^127; a tie rounds to the even 0.
        u128::from(m > 1u128 << 127)
    } else {
        let q = m >> shift;
        let rem = m & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q }
    };
    // q <= 2^precision: the result's exponent is at most msb + e + 1.
    let top = 127 - (q.leading_zeros() as i32) + ulp;
    if q != 0 && top > format.max_exp {
        return sign * f64::INFINITY;
    }
    sign * (q as f64) * pow2(ulp)
}

/// Rounds an f64 to `format` (nearest even), exactly as if from its real value.
pub(crate) fn round_f64(x: f64, format: Format) -> f64 {
    if !x.is_finite() || format == Format::F64 {
        return x;
    }
    let (neg, m, e) = f64_parts(x);
    round_parts(neg, m as u128, e, format)
}

/// `x = (-1)^neg * m * 2^e` for a finite f64.
fn f64_parts(x: f64) -> (bool, u64, i32) {
    let bits = x.to_bits();
    let neg = bits >> 63 == 1;
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp == 0 { (neg, frac, -1074) } else { (neg, frac | (1u64 << 52), exp - 1075) }
}

/// `x = m * 2^e` exactly, `|m| < 2^24`, for a finite f32.
pub(crate) fn f32_parts(x: f32) -> (i64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = (bits & 0x7f_ffff) as i64;
    let (m, e) = if exp == 0 { (frac, -149) } else { (frac | (1 << 23), exp - 150) };
    (if bits >> 31 == 1 { -m } else { m }, e)
}

/// An exact sum of terms `m * 2^e`, with IEEE semantics for non-finite terms.
#[derive(Clone, Debug)]
pub(crate) struct ExactSum {
    limbs: [i64; LIMBS],
    /// Exponent of bit 0 of limb 0.
    base: i32,
    /// The IEEE sum of the non-finite terms (0 while there are none).
    special: f64,
    adds: u32,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self { limbs: [0; LIMBS], base: BASE, special: 0.0, adds: 0 }
    }
}

impl ExactSum {
    /// Clears the sum for reuse.
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }

    /// Adds `m * 2^e` exactly.
    #[inline]
    pub(crate) fn add(&mut self, m: i128, e: i32) {
        if m == 0 {
            return;
        }
        let pos = e - self.base;
        debug_assert!(pos >= 0 && (pos as usize) + 160 < LIMBS * 32, "term 2^{e} outside the accumulator");
        let (limb, sh) = ((pos >> 5) as usize, (pos & 31) as u32);
        let mag = m.unsigned_abs();
        let neg = m < 0;
        for i in 0..4 {
            let digit = ((mag >> (32 * i)) as u64) & 0xffff_ffff;
            if digit == 0 {
                continue;
            }
            let wide = digit << sh;
            let (lo, hi) = ((wide & 0xffff_ffff) as i64, (wide >> 32) as i64);
            if neg {
                self.limbs[limb + i] -= lo;
                self.limbs[limb + i + 1] -= hi;
            } else {
                self.limbs[limb + i] += lo;
                self.limbs[limb + i + 1] += hi;
            }
        }
        self.adds += 1;
        if self.adds >= NORMALIZE_EVERY {
            self.normalize();
        }
    }

    /// Adds `m * f * 2^e` exactly, for any `m` and `|f| < 2^63`.
    #[inline]
    pub(crate) fn add_product(&mut self, m: i128, f: i64, e: i32) {
        match m.checked_mul(f as i128) {
            Some(p) => self.add(p, e),
            None => {
                // Split m into 64-bit halves: m = hi * 2^64 + lo.
                let lo = (m as u128 & u64::MAX as u128) as i128;
                let hi = m >> 64;
                self.add(lo * f as i128, e);
                self.add(hi * f as i128, e + 64);
            }
        }
    }

    /// Adds a non-finite term (NaN or an infinity) with IEEE semantics.
    pub(crate) fn add_special(&mut self, x: f64) {
        self.special += x;
    }

    /// Adds an f32 exactly.
    pub(crate) fn add_f32(&mut self, x: f32) {
        if x.is_finite() {
            let (m, e) = f32_parts(x);
            self.add(m as i128, e);
        } else {
            self.add_special(x as f64);
        }
    }

    /// Multiplies the sum by a finite f32 exactly.
    pub(crate) fn scale(&mut self, x: f32) {
        debug_assert!(x.is_finite());
        if self.special != 0.0 {
            self.special *= x as f64;
        }
        let (m, e) = f32_parts(x);
        self.normalize();
        // Digits are below 2^32 and |m| below 2^24: no product overflows.
        for l in &mut self.limbs {
            *l *= m;
        }
        self.base += e;
        self.adds = 0;
        self.normalize();
    }

    /// Resolves carries: limbs 0.. LIMBS-2 become digits in `0..2^32`, the top limb
    /// carries the sign.
    fn normalize(&mut self) {
        let mut carry = 0i64;
        for l in &mut self.limbs[..LIMBS - 1] {
            let v = *l + carry;
            carry = v >> 32;
            *l = v & 0xffff_ffff;
        }
        self.limbs[LIMBS - 1] += carry;
        self.adds = 0;
    }

    /// The sum rounded once to `format` (nearest even), as an f64 that holds it
    /// exactly. An exact zero is +0; NaN or infinite terms give their IEEE sum.
    pub(crate) fn round(&self, format: Format) -> f64 {
        if self.special != 0.0 || self.special.is_nan() {
            return self.special;
        }
        let mut v = self.clone();
        v.normalize();
        let neg = v.limbs[LIMBS - 1] < 0;
        if neg {
            for l in &mut v.limbs {
                *l = -*l;
            }
            v.normalize();
        }
        let Some(top) = v.limbs.iter().rposition(|&l| l != 0) else { return 0.0 };
        // The top 4 digits (up to 128 bits) with every lower bit folded into a sticky
        // last bit: precision <= 53 sits far above it, so rounding is unaffected.
        let first = top.saturating_sub(3);
        let mut m = 0u128;
        for i in (first..=top).rev() {
            m = (m << 32) | v.limbs[i] as u128;
        }
        if v.limbs[..first].iter().any(|&l| l != 0) {
            // Make room for the sticky bit when the window is full.
            if m.leading_zeros() == 0 {
                let lost = m & 1;
                m = (m >> 1) | lost;
                return round_parts(neg, m | 1, v.base + 32 * first as i32 + 1, format);
            }
            m = (m << 1) | 1;
            return round_parts(neg, m, v.base + 32 * first as i32 - 1, format);
        }
        round_parts(neg, m, v.base + 32 * first as i32, format)
    }
}

#[cfg(test)]
mod tests {
    use blockscale_formats::rng::SplitMix64;

    use super::*;

    #[test]
    fn f32_rounding_matches_the_hardware_cast_for_random_f64() {
        let mut rng = SplitMix64::new(0x1234_5678);
        for _ in 0..200_000 {
            let s = rng.next_u64();
            let x = f64::from_bits(s >> 1 | (s & (1 << 63)));
            // Covers normals, subnormals and overflow of f32.
            let x = if x.is_finite() { x } else { 1.5 };
            assert_eq!(round_f64(x, Format::F32) as f32, x as f32, "{x:e}");
            let y = x * pow2(-((s >> 50) as i32 % 60)).min(1.0);
            assert_eq!((round_f64(y, Format::F32) as f32).to_bits(), (y as f32).to_bits(), "{y:e}");
        }
    }

    #[test]
    fn every_f16_and_bf16_is_its_own_rounding() {
        for bits in 0..=u16::MAX {
            let h = half::f16::from_bits(bits).to_f64();
            if h.is_finite() {
                assert_eq!(round_f64(h, Format::F16).to_bits(), h.to_bits());
                assert_eq!(half::f16::from_f64(h).to_bits(), bits);
            }
            let b = half::bf16::from_bits(bits).to_f64();
            if b.is_finite() {
                assert_eq!(round_f64(b, Format::BF16).to_bits(), b.to_bits());
                assert_eq!(half::bf16::from_f64(b).to_bits(), bits);
            }
        }
    }

    #[test]
    fn sums_that_cancel_are_exact() {
        let mut s = ExactSum::default();
        s.add(1, 300);
        s.add(3, -700);
        s.add(-1, 300);
        assert_eq!(s.round(Format::F64), 3.0 * 2f64.powi(-700));
        // 2^200 + 1 - 2^200 with a tiny tail decides a tie.
        let mut t = ExactSum::default();
        t.add(1 << 24, 0); // 2^24
        t.add(1, 0); // + 1: a tie between 2^24 and 2^24 + 2 in f32
        assert_eq!(t.round(Format::F32), 16_777_216.0);
        t.add(1, -500); // a sticky bit breaks the tie upwards
        assert_eq!(t.round(Format::F32), 16_777_218.0);
        t.add(-1, -499);
        assert_eq!(t.round(Format::F32), 16_777_216.0);
    }

    #[test]
    fn negative_sums_round_symmetrically() {
        let mut s = ExactSum::default();
        s.add(-((1 << 24) + 1), 0);
        s.add(-1, -300);
        assert_eq!(s.round(Format::F32), -16_777_218.0);
        assert_eq!(s.round(Format::F16), f64::NEG_INFINITY);
    }

    #[test]
    fn scaling_and_specials() {
        let mut s = ExactSum::default();
        s.add(3, -2);
        s.scale(-0.5);
        s.add_f32(1.0);
        assert_eq!(s.round(Format::F64), 0.625);
        s.add_special(f64::INFINITY);
        assert_eq!(s.round(Format::F32), f64::INFINITY);
        s.add_special(f64::NEG_INFINITY);
        assert!(s.round(Format::F32).is_nan());
    }

    #[test]
    fn wide_products_split() {
        let mut s = ExactSum::default();
        s.add_product(i128::MAX / 2, 1 << 40, 0);
        let expect = (i128::MAX / 2) as f64 * 2f64.powi(40);
        assert_eq!(s.round(Format::F64), expect);
    }
}
