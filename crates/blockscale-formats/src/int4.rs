//! Int4: the 4-bit integer of weight-only INT4 quantization.

/// A 4-bit signed integer, -8..=7.
///
/// Weight-only INT4 kernels store it in one of two ways ([`Int4Storage`]):
/// - **offset-8** (`value + 8`, 0..=15; dequantized as `(code - 8) * scale`), the form
///   AWQ/GPTQ-style W4A16 GEMV kernels and blockscale's `Int4G32` use;
/// - **two's complement** in the low nibble (the form `int4` tensor libraries use).
///
/// The two differ only in the top bit of the nibble: offset-8 bits are the two's
/// complement bits with bit 3 flipped.
///
/// [`Int4::from_f32`] rounds to nearest, ties to even (as `torch.round` does), then
/// clamps to -8..=7; NaN becomes 0.
///
/// ```
/// use blockscale_formats::Int4;
/// assert_eq!(Int4::from_f32(2.5).value(), 2);
/// assert_eq!(Int4::from_f32(-3.5).value(), -4);
/// assert_eq!(Int4::from_f32(99.0).value(), 7);
/// assert_eq!(Int4::from_f32(-1.0).to_offset8_bits(), 7);
/// assert_eq!(Int4::from_f32(-1.0).to_bits(), 0xf);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Int4(u8);

/// How an [`Int4`] is stored in its nibble.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Int4Storage {
    /// `value + 8`, 0..=15: zero is code 8.
    #[default]
    Offset8,
    /// Two's complement: zero is code 0, -1 is code 15.
    TwosComplement,
}

impl Int4Storage {
    /// The nibble storing `v` in this form.
    #[inline]
    pub const fn encode(self, v: Int4) -> u8 {
        match self {
            Self::Offset8 => v.to_offset8_bits(),
            Self::TwosComplement => v.to_bits(),
        }
    }

    /// The value stored in the low nibble of `bits` (higher bits are ignored).
    #[inline]
    pub const fn decode(self, bits: u8) -> Int4 {
        match self {
            Self::Offset8 => Int4::from_offset8_bits(bits),
            Self::TwosComplement => Int4::from_bits(bits),
        }
    }
}

impl Int4 {
    /// 0.
    pub const ZERO: Self = Self(0);
    /// 7.
    pub const MAX: Self = Self(0x7);
    /// -8.
    pub const MIN: Self = Self(0x8);
    /// Largest value as f32.
    pub const MAX_F32: f32 = 7.0;
    /// Code width in bits.
    pub const BITS: u32 = 4;
    /// Mantissa bits as a float would count them: 7 = 1.11b x 2^2, so 2.
    pub const MANTISSA_BITS: u32 = 2;

    /// Value of every two's-complement nibble, indexed by nibble.
    pub const TABLE: [f32; 16] = {
        let mut t = [0.0f32; 16];
        let mut i = 0;
        while i < 16 {
            t[i] = Self(i as u8).value() as f32;
            i += 1;
        }
        t
    };

    /// Value of every offset-8 nibble, indexed by nibble (`code - 8`).
    pub const OFFSET8_TABLE: [f32; 16] = {
        let mut t = [0.0f32; 16];
        let mut i = 0;
        while i < 16 {
            t[i] = i as f32 - 8.0;
            i += 1;
        }
        t
    };

    /// The integer `v`, or `None` outside -8..=7.
    #[inline]
    pub const fn new(v: i8) -> Option<Self> {
        if v >= -8 && v <= 7 { Some(Self((v as u8) & 0xf)) } else { None }
    }

    /// From a two's-complement nibble (bits above the low nibble are ignored).
    #[inline]
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits & 0xf)
    }

    /// The two's-complement nibble.
    #[inline]
    pub const fn to_bits(self) -> u8 {
        self.0
    }

    /// From an offset-8 nibble (`value + 8`; bits above the low nibble are ignored).
    #[inline]
    pub const fn from_offset8_bits(bits: u8) -> Self {
        Self((bits & 0xf) ^ 0x8)
    }

    /// The offset-8 nibble, `value + 8`.
    #[inline]
    pub const fn to_offset8_bits(self) -> u8 {
        self.0 ^ 0x8
    }

    /// The integer value.
    #[inline]
    pub const fn value(self) -> i8 {
        ((self.0 << 4) as i8) >> 4
    }

    /// The value as an f32.
    #[inline]
    pub const fn to_f32(self) -> f32 {
        self.value() as f32
    }

    /// Rounds to nearest (ties to even), clamps to -8..=7; NaN becomes 0.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        // 1.5 * 2^23: adding and subtracting it rounds any |x| <= 2^22 to an integer,
        // ties to even, in the default floating-point environment.
        const ROUND: f32 = 12_582_912.0;
        let clamped = x.clamp(-9.0, 8.0);
        let r = (clamped + ROUND) - ROUND;
        let v = (r as i32).clamp(-8, 7);
        // `as` maps NaN to 0; the clamp keeps it there.
        Self((v as u8) & 0xf)
    }

    /// [`Self::from_f32`] of the f16's exact value.
    #[inline]
    pub fn from_f16(x: half::f16) -> Self {
        Self::from_f32(x.to_f32())
    }

    /// [`Self::from_f32`] of the bf16's exact value.
    #[inline]
    pub fn from_bf16(x: half::bf16) -> Self {
        Self::from_f32(crate::source::bf16_to_f32(x))
    }
}

impl core::fmt::Display for Int4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.value(), f)
    }
}

impl core::fmt::Debug for Int4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Int4({})", self.value())
    }
}
