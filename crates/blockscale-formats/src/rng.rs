//! The project's one seeded generator, for test data, bench data, the CLI's demo
//! weights and the golden files: [`SplitMix64`].
//!
//! Deterministic and not cryptographic: the same seed gives the same numbers on every
//! platform and in every version, which is what the golden files and the demo's
//! published figures rely on. Never use it for anything that must be unpredictable.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): a 64-bit state advanced by `0x9e37_79b9_7f4a_7c15` and
/// mixed by two multiply-xorshift rounds. Tiny, fast, well mixed from any seed (0
/// included), and a deterministic test and bench generator only, not a cryptographic
/// one.
///
/// The output sequence is fixed: the golden files (`cargo xtask golden`) and the
/// demo weights of `blockscale eval --demo` are drawn from it, so changing any method
/// here changes them.
///
/// ```
/// use blockscale_formats::rng::SplitMix64;
///
/// let mut rng = SplitMix64::new(0);
/// assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
/// let x = rng.uniform_f32(-1.0, 1.0);
/// assert!((-1.0..1.0).contains(&x));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits: the high half of [`next_u64`](Self::next_u64).
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n`, by the remainder of [`next_u64`](Self::next_u64) (its bias,
    /// under 2^-40 for `n` below 2^24, does not matter for test data).
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1): the top 24 bits, so every value is a multiple of 2^-24 and
    /// exact in f32.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [0, 1): the top 53 bits, so every value is a multiple of 2^-53 and
    /// exact in f64.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `lo + (hi - lo) * u` with `u` from [`unit_f32`](Self::unit_f32): uniform in
    /// [`lo`, `hi`) (up to rounding when `hi - lo` is not a power of two).
    pub fn uniform_f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit_f32()
    }

    /// `lo + (hi - lo) * u` with `u` from [`unit_f64`](Self::unit_f64): uniform in
    /// [`lo`, `hi`) (up to rounding when `hi - lo` is not a power of two).
    pub fn uniform_f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 for seed 0 (as in Vigna's `splitmix64.c`):
    /// the golden files depend on this sequence staying what it is.
    #[test]
    fn matches_the_reference_sequence() {
        let mut rng = SplitMix64::new(0);
        let first: [u64; 3] = core::array::from_fn(|_| rng.next_u64());
        assert_eq!(first, [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f]);
    }

    #[test]
    fn derived_draws_take_the_high_bits() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        for _ in 0..1000 {
            let x = a.next_u64();
            assert_eq!(b.clone().next_u32(), (x >> 32) as u32);
            assert_eq!(b.clone().below(10), (x % 10) as usize);
            assert_eq!(b.clone().unit_f32(), (x >> 40) as f32 * (1.0 / (1u64 << 24) as f32));
            assert_eq!(b.clone().unit_f64(), (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64));
            // A power-of-two width scales exactly: -1 + 2u is the 24 bits over 2^23, less 1.
            assert_eq!(b.clone().uniform_f32(-1.0, 1.0), (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0);
            assert_eq!(b.clone().uniform_f64(2.0, 6.0), 2.0 + 4.0 * (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64));
            b.next_u64();
        }
    }
}
