//! Test support: independent reference conversions written from the format
//! definitions (value lists and nearest-value search in f64, not the crate's bit
//! manipulation), seeded random numbers, the f32 and f64 input sets the oracles are
//! run on, and the oracle-location helpers.
#![allow(dead_code)]

use std::path::PathBuf;

use blockscale_formats::rng::SplitMix64;

/// Which codes of a format are special (the test's own description, written from
/// REFERENCE.md §0, not taken from the crate).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Specials {
    None,
    NanOnly,
    Ieee,
}

/// A small float format, described from its definition.
#[derive(Clone, Copy, Debug)]
pub struct Fmt {
    pub name: &'static str,
    pub ebits: u32,
    pub mbits: u32,
    pub bias: i32,
    pub signed: bool,
    pub specials: Specials,
}

pub const E2M1: Fmt = Fmt { name: "e2m1", ebits: 2, mbits: 1, bias: 1, signed: true, specials: Specials::None };
pub const E2M3: Fmt = Fmt { name: "e2m3", ebits: 2, mbits: 3, bias: 1, signed: true, specials: Specials::None };
pub const E3M2: Fmt = Fmt { name: "e3m2", ebits: 3, mbits: 2, bias: 3, signed: true, specials: Specials::None };
pub const E4M3: Fmt = Fmt { name: "e4m3", ebits: 4, mbits: 3, bias: 7, signed: true, specials: Specials::NanOnly };
pub const E5M2: Fmt = Fmt { name: "e5m2", ebits: 5, mbits: 2, bias: 15, signed: true, specials: Specials::Ieee };
pub const UE4M3: Fmt = Fmt { name: "ue4m3", ebits: 4, mbits: 3, bias: 7, signed: false, specials: Specials::NanOnly };

impl Fmt {
    pub fn mag_bits(&self) -> u32 {
        self.ebits + self.mbits
    }

    /// The value of a magnitude code, or None for Inf/NaN codes.
    pub fn mag_value(&self, mag: u32) -> Option<f64> {
        let e = mag >> self.mbits;
        let m = mag & ((1 << self.mbits) - 1);
        let e_max = (1 << self.ebits) - 1;
        match self.specials {
            Specials::NanOnly if mag == (1 << self.mag_bits()) - 1 => return None,
            Specials::Ieee if e == e_max => return None,
            _ => {}
        }
        let frac = m as f64 / (1u64 << self.mbits) as f64;
        Some(if e == 0 { frac * 2f64.powi(1 - self.bias) } else { (1.0 + frac) * 2f64.powi(e as i32 - self.bias) })
    }

    /// The value of a full code per the definition (sign bit above the magnitude).
    pub fn decode(&self, code: u8) -> f64 {
        let mag = code as u32 & ((1 << self.mag_bits()) - 1);
        let high = code as u32 >> self.mag_bits();
        if !self.signed && high != 0 {
            return f64::NAN;
        }
        let neg = self.signed && high & 1 == 1;
        let v = match self.mag_value(mag) {
            Some(v) => v,
            None => {
                let m = mag & ((1 << self.mbits) - 1);
                if self.specials == Specials::Ieee && m == 0 { f64::INFINITY } else { f64::NAN }
            }
        };
        if neg { -v } else { v }
    }

    /// Every finite non-negative (magnitude code, value), ascending.
    pub fn finite(&self) -> Vec<(u32, f64)> {
        (0..1u32 << self.mag_bits()).filter_map(|c| self.mag_value(c).map(|v| (c, v))).collect()
    }

    pub fn max(&self) -> (u32, f64) {
        *self.finite().last().unwrap()
    }

    /// The grid step of the top binade: the distance from MAX to the value one step
    /// beyond it (used to place the overflow rounding threshold).
    pub fn top_ulp(&self) -> f64 {
        let f = self.finite();
        f[f.len() - 1].1 - f[f.len() - 2].1
    }

    /// Code a NaN input produces (NVIDIA's documented rule: the positive canonical NaN
    /// where the format has one, positive MAX otherwise).
    pub fn nan_code(&self) -> u8 {
        match self.specials {
            Specials::None => self.max().0 as u8,
            _ => ((1u32 << self.mag_bits()) - 1) as u8,
        }
    }

    /// Magnitude code of a non-saturating overflow.
    pub fn overflow_mag(&self) -> u32 {
        match self.specials {
            Specials::None => self.max().0,
            Specials::NanOnly => (1 << self.mag_bits()) - 1,
            Specials::Ieee => ((1 << self.ebits) - 1) << self.mbits,
        }
    }

    /// The reference encoder for this format (value table built once).
    pub fn reference(&self) -> Reference {
        Reference { fmt: *self, vals: self.finite(), max: self.max(), top_ulp: self.top_ulp() }
    }

    /// Round-to-nearest-even by nearest-value search (builds the table each call:
    /// use [`Fmt::reference`] in loops).
    pub fn encode(&self, x: f64, saturate: bool) -> u8 {
        self.reference().encode(x, saturate)
    }
}

/// A format's reference encoder: nearest-value search over its value list.
pub struct Reference {
    pub fmt: Fmt,
    vals: Vec<(u32, f64)>,
    max: (u32, f64),
    top_ulp: f64,
}

impl Reference {
    /// Round-to-nearest-even by nearest-value search, from the definition.
    pub fn encode(&self, x: f64, saturate: bool) -> u8 {
        let fmt = &self.fmt;
        self.with_sign(x, |a| {
            let vals = &self.vals;
            let (max_code, max) = self.max;
            if a > max {
                // Beyond MAX the grid continues one step further: a rounds back to MAX when
                // below the midpoint, or at the midpoint when MAX's code is even.
                let mid = max + self.top_ulp / 2.0;
                if a < mid || (a == mid && max_code % 2 == 0) || saturate { max_code } else { fmt.overflow_mag() }
            } else {
                let i = vals.partition_point(|&(_, v)| v < a);
                if vals[i].1 == a {
                    vals[i].0
                } else {
                    let (lc, lv) = vals[i - 1];
                    let (hc, hv) = vals[i];
                    let (dl, dh) = (a - lv, hv - a);
                    if dl < dh || (dl == dh && lc % 2 == 0) { lc } else { hc }
                }
            }
        })
    }

    /// Round toward zero with saturation (CUDA's `cudaRoundZero` for FP4/FP6): the
    /// largest value not above |x|, sign kept, ±Inf to ±MAX, NaN to the NaN code.
    pub fn encode_rz(&self, x: f64) -> u8 {
        // The last value not above a (vals[0] is 0, so there is one; Inf gives MAX).
        self.with_sign(x, |a| self.vals[self.vals.partition_point(|&(_, v)| v <= a) - 1].0)
    }

    /// The code of `x` from the magnitude code `mag(|x|)`: NaN gives the NaN code, a
    /// negative input to an unsigned format 0, the sign bit is kept otherwise.
    fn with_sign(&self, x: f64, mag: impl Fn(f64) -> u32) -> u8 {
        let fmt = &self.fmt;
        if x.is_nan() {
            return fmt.nan_code();
        }
        let neg = x.is_sign_negative();
        if neg && !fmt.signed {
            return 0;
        }
        let sign = if fmt.signed && neg { 1u32 << fmt.mag_bits() } else { 0 };
        (mag(x.abs()) | sign) as u8
    }
}

/// `floor(log2 a)` for finite a > 0, exactly (checked with exact powers of two).
pub fn floor_log2(a: f64) -> i32 {
    let mut k = a.log2().floor() as i32;
    while 2f64.powi(k) > a {
        k -= 1;
    }
    while 2f64.powi(k + 1) <= a {
        k += 1;
    }
    k
}

/// UE8M0 from the CUDA documentation of `__nv_cvt_float_to_e8m0`: |x| rounded to a
/// power of two toward zero (`up = false`) or +Inf (`up = true`), clipped below at
/// 2^-127, above 2^127 saturated (0xfe) or NaN (0xff); NaN -> 0xff. Rounding toward
/// zero, a finite value never overflows (IEEE 754 gives the largest finite value;
/// only f64 inputs reach this, and NVIDIA's double conversion agrees).
pub fn e8m0_reference(x: f64, up: bool, saturate: bool) -> u8 {
    if x.is_nan() {
        return 0xff;
    }
    let a = x.abs();
    let overflow = if saturate { 0xfe } else { 0xff };
    if a.is_infinite() {
        return overflow;
    }
    if a == 0.0 {
        return 0;
    }
    let f = floor_log2(a);
    let k = if up && 2f64.powi(f) != a { f + 1 } else { f };
    if k < -127 {
        0
    } else if k > 127 {
        if up { overflow } else { 0xfe }
    } else {
        (k + 127) as u8
    }
}

/// A roughly normal sample (sum of uniforms), enough for test data.
pub fn normal(rng: &mut SplitMix64) -> f32 {
    ((0..4).map(|_| rng.unit_f64()).sum::<f64>() - 2.0) as f32 * 1.7
}

fn push_around(v: &mut Vec<u32>, x: f32, ulps: u32) {
    let b = x.to_bits();
    for d in 0..=ulps {
        v.push(b.wrapping_add(d));
        v.push(b.wrapping_sub(d));
    }
}

/// The f32 inputs the NVIDIA oracle is run on (well over a million): every
/// representable value and every rounding midpoint of every format (including the
/// overflow midpoint above MAX) with two ulps either side, every power of two (E8M0's
/// boundaries) with neighbours, subnormals, ±0, ±Inf, NaN payloads, the largest finite
/// f32, both signs of everything, and a seeded random sample of bit patterns and of
/// values in each format's range.
pub fn f32_oracle_inputs() -> Vec<u32> {
    let mut v = Vec::new();
    for fmt in [E2M1, E2M3, E3M2, E4M3, E5M2] {
        let vals: Vec<f64> = fmt.finite().iter().map(|&(_, x)| x).collect();
        let mut points: Vec<f64> = vals.clone();
        points.extend(vals.windows(2).map(|w| (w[0] + w[1]) / 2.0));
        let max = *vals.last().unwrap();
        points.push(max + fmt.top_ulp() / 2.0);
        points.push(max + fmt.top_ulp());
        for p in points {
            push_around(&mut v, p as f32, 2);
        }
    }
    for k in -149..=127 {
        push_around(&mut v, 2f32.powi(k), 3);
        // 1.5 * 2^k: E8M0 rounding has no midpoints, but both directions matter here.
        push_around(&mut v, 1.5 * 2f32.powi(k), 1);
    }
    // Scaled midpoints: the values an MX quantizer feeds the element encoders are x / 2^e.
    for fmt in [E2M1, E4M3] {
        let vals: Vec<f64> = fmt.finite().iter().map(|&(_, x)| x).collect();
        for e in [-20, -10, -3, 3, 10, 20] {
            for w in vals.windows(2) {
                push_around(&mut v, ((w[0] + w[1]) / 2.0 * 2f64.powi(e)) as f32, 1);
            }
        }
    }
    for m in 0..4096u32 {
        v.push(m); // smallest subnormals
        v.push(0x007f_ffff - m); // largest subnormals
        v.push(0x0040_0000 ^ m); // around 2^-127, E8M0's byte 0
    }
    v.extend([
        0x0000_0000,
        0x7f80_0000,
        0x7f7f_ffff,
        0x7f7f_fffe,
        0x0080_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0x7fbf_ffff,
        0x7fff_ffff,
        0x7fa0_0000,
        0x7fc0_0001,
    ]);
    let mut rng = SplitMix64::new(0x5eed_b10c_5ca1_e000);
    for _ in 0..600_000 {
        v.push(rng.next_u32());
    }
    for _ in 0..300_000 {
        // Values spread over the formats' ranges: 2^-20 .. 2^18.
        let x = (rng.unit_f64() * 2.0 - 1.0) * 2f64.powf(rng.unit_f64() * 38.0 - 20.0);
        v.push((x as f32).to_bits());
    }
    let n = v.len();
    for i in 0..n {
        v.push(v[i] ^ 0x8000_0000);
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn push_around64(v: &mut Vec<u64>, x: f64, ulps: u64) {
    let b = x.to_bits();
    for d in 0..=ulps {
        v.push(b.wrapping_add(d));
        v.push(b.wrapping_sub(d));
    }
}

/// The f64 interval that narrows (round to nearest even) to the f32 value `m`: the
/// midpoints to its f32 neighbours, exact in f64. `m` must be a positive normal f32
/// with an even mantissa (ties then go to `m`), which every format value, midpoint and
/// power of two in the f32 normal range is.
fn f32_rounding_interval(m: f32) -> (f64, f64) {
    let b = m.to_bits();
    let (below, above) = (f32::from_bits(b - 1) as f64, f32::from_bits(b + 1) as f64);
    ((below + m as f64) / 2.0, (above + m as f64) / 2.0)
}

/// The rounding points of a format: every finite value, every midpoint between
/// neighbours, the overflow midpoint above MAX and the next grid value after MAX.
fn rounding_points(fmt: &Fmt) -> Vec<f64> {
    let vals: Vec<f64> = fmt.finite().iter().map(|&(_, x)| x).collect();
    let mut points = vals.clone();
    points.extend(vals.windows(2).map(|w| (w[0] + w[1]) / 2.0));
    let max = *vals.last().unwrap();
    points.push(max + fmt.top_ulp() / 2.0);
    points.push(max + fmt.top_ulp());
    points
}

/// The f64 inputs the NVIDIA oracle's double conversions are run on (several
/// million), aimed at double rounding: an f64 that narrows to an f32 lying exactly on
/// a rounding boundary is where converting through f32 goes wrong.
///
/// - Every value and midpoint of every format (including the overflow midpoint),
///   with 4 f64 ulps either side, and the edges of the f64 interval that narrows to
///   it in f32 (the widest hazard), with 2 ulps either side.
/// - Those points scaled by 2^e, e in -24..=24, 2 ulps either side (every binade
///   the formats reach, from underflow to overflow).
/// - For UE8M0, every power of two of f64 (2^-1074 .. 2^1023) with 4 ulps either
///   side, the edges of its f32 narrowing interval, and 1.5 * 2^k.
/// - Specials: ±0, ±Inf, NaNs with chosen and random payloads, f64 subnormals, the
///   f64 and f32 extremes and the f32 overflow threshold.
/// - Both signs of everything above; then seeded random samples: 3 million f64 bit
///   patterns, 1 million values spread over the formats' ranges (2^-20 .. 2^18), and
///   1 million points inside the f32 narrowing interval of a random format midpoint
///   or power of two (each one a double-rounding hazard), random signs.
pub fn f64_oracle_inputs() -> Vec<u64> {
    let mut v = Vec::new();
    let formats = [E2M1, E2M3, E3M2, E4M3, E5M2];
    // Midpoints (and powers of two) whose f32 narrowing interval the random part samples.
    let mut hazards: Vec<f64> = Vec::new();
    for fmt in formats {
        for p in rounding_points(&fmt) {
            if p == 0.0 {
                continue;
            }
            push_around64(&mut v, p, 4);
            let (lo, hi) = f32_rounding_interval(p as f32);
            push_around64(&mut v, lo, 2);
            push_around64(&mut v, hi, 2);
            for e in -24..=24 {
                push_around64(&mut v, p * 2f64.powi(e), 2);
            }
            hazards.push(p);
        }
    }
    for k in -1074..=1023 {
        let p = 2f64.powi(k);
        push_around64(&mut v, p, 4);
        push_around64(&mut v, 1.5 * p, 1);
        if (-126..=127).contains(&k) {
            let (lo, hi) = f32_rounding_interval(p as f32);
            push_around64(&mut v, lo, 2);
            push_around64(&mut v, hi, 2);
            hazards.push(p);
        }
    }
    for m in 0..4096u64 {
        v.push(m); // smallest f64 subnormals
        v.push(0x000f_ffff_ffff_ffff - m); // largest f64 subnormals
    }
    let f32_overflow = f32::MAX as f64 + 2f64.powi(103); // rounds to Inf in f32 (a tie, odd MAX)
    for x in [f64::MAX, f64::MIN_POSITIVE, f32::MAX as f64, f32_overflow, f32::MIN_POSITIVE as f64] {
        push_around64(&mut v, x, 4);
    }
    v.extend([
        0x0000_0000_0000_0000,
        0x7ff0_0000_0000_0000, // Inf
        0x7ff0_0000_0000_0001, // signalling NaNs, payload bits 51/50 = 00
        0x7ff4_0000_0000_0000, // 01
        0x7ff8_0000_0000_0000, // quiet NaN, 10
        0x7ffc_0000_0000_0000, // 11
        0x7ff8_0000_0000_0001,
        0x7fff_ffff_ffff_ffff,
        0x7ff7_ffff_ffff_ffff,
        0x7ffb_ffff_ffff_ffff,
        f64::NAN.to_bits(),
    ]);
    let mut rng = SplitMix64::new(0x5eed_b10c_5ca1_e064);
    for _ in 0..1000 {
        // Random NaN payloads.
        v.push(0x7ff0_0000_0000_0000 | (rng.next_u64() & 0x000f_ffff_ffff_ffff).max(1));
    }
    let n = v.len();
    for i in 0..n {
        v.push(v[i] ^ (1 << 63));
    }
    let sign = |rng: &mut SplitMix64| (rng.next_u64() & 1) << 63;
    for _ in 0..3_000_000 {
        v.push(rng.next_u64());
    }
    for _ in 0..1_000_000 {
        let x = 2f64.powf(rng.unit_f64() * 38.0 - 20.0) * (1.0 + rng.unit_f64());
        v.push(x.to_bits() | sign(&mut rng));
    }
    for _ in 0..1_000_000 {
        let p = hazards[rng.below(hazards.len())];
        let (lo, hi) = f32_rounding_interval(p as f32);
        let x = lo + (hi - lo) * rng.unit_f64();
        v.push(x.to_bits() | sign(&mut rng));
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// The target directory these tests were built in (`CARGO_TARGET_DIR` when set), where
/// `cargo xtask setup-cuda` installs the oracles.
pub fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("..")
}

/// Whether a missing oracle must fail the test (`CI` set and not false) rather than
/// skip it.
pub fn oracle_required() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var("BLOCKSCALE_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// Skips (prints why and returns) or, under CI, fails.
pub fn skip_or_fail(what: &str) {
    if oracle_required() {
        panic!("{what}; under CI a missing oracle is a failure. Run `cargo xtask test`, which installs it.");
    }
    eprintln!("SKIPPED: {what}. Run `cargo xtask test` (it installs the oracles under target/).");
}
