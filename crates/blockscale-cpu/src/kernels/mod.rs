//! The hot loops, in a portable version and (on x86-64) an AVX2 version that gives
//! identical bytes, and the crate's ISA layer: [`Isa`] picks the instruction set once
//! per call; every function here dispatches on it.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod portable;

use blockscale_formats::ElementFormat;
use blockscale_formats::Source;

use crate::scale::{self, Op};
use crate::{CpuError, Input, NvFp4Recipe, Simd};

/// The instruction set one call's kernels use, chosen once per call by [`Isa::select`]:
/// the crate's one ISA layer. `Avx512` means AVX-512 F, BW and VL on top of the AVX2 set;
/// its kernels use BF16 and VNNI where the CPU has them ([`Isa::bf16`],
/// [`Isa::vnni`]), and the kernel families written for AVX2 only (the element encoders
/// and decoders here, the f32 tiles) run their AVX2 code under it. Every variant exists
/// on every target so that callers match one type; only `Portable` is ever selected
/// off x86-64.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    Avx2,
    Avx512,
}

/// The CPU's vector features, detected once per process.
#[derive(Clone, Copy, Debug, Default)]
struct Features {
    /// AVX2, F16C and FMA.
    avx2: bool,
    /// AVX-512 F, BW and VL (every CPU with BW has VL; the FP6 decoders use its
    /// 256-bit variable shifts), and `avx2`.
    avx512: bool,
    /// `avx512` and AVX-512 BF16.
    bf16: bool,
    /// `avx512` and AVX-512 VNNI.
    vnni: bool,
    /// `vnni` and AVX-512 VBMI (byte permutes: the six- and eight-bit panel kernels).
    vbmi: bool,
}

fn features() -> Features {
    static F: std::sync::OnceLock<Features> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") && is_x86_feature_detected!("fma");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl");
            let vnni = avx512 && is_x86_feature_detected!("avx512vnni");
            Features {
                avx2,
                avx512,
                bf16: avx512 && is_x86_feature_detected!("avx512bf16"),
                vnni,
                vbmi: vnni && is_x86_feature_detected!("avx512vbmi"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Features::default()
    })
}

impl Isa {
    /// The instruction set `simd` asks for: `Auto` takes `BLOCKSCALE_SIMD` (`portable`,
    /// `avx2` or `avx512`) if set, else the best the CPU has.
    ///
    /// # Errors
    /// [`CpuError::SimdUnavailable`] for a forced set this CPU lacks.
    pub(crate) fn select(simd: Simd) -> Result<Self, CpuError> {
        let f = features();
        match requested(simd) {
            Simd::Portable => Ok(Self::Portable),
            Simd::Avx2 if f.avx2 => Ok(Self::Avx2),
            Simd::Avx2 => Err(CpuError::SimdUnavailable("AVX2 + F16C + FMA")),
            Simd::Avx512 if f.avx512 => Ok(Self::Avx512),
            Simd::Avx512 => Err(CpuError::SimdUnavailable("AVX-512 F + BW")),
            Simd::Auto if f.avx512 => Ok(Self::Avx512),
            Simd::Auto if f.avx2 => Ok(Self::Avx2),
            Simd::Auto => Ok(Self::Portable),
        }
    }

    /// Whether this call may use AVX-512 BF16 dot products.
    pub(crate) fn bf16(self) -> bool {
        self == Self::Avx512 && features().bf16
    }

    /// Whether this call may use AVX-512 VNNI dot products.
    pub(crate) fn vnni(self) -> bool {
        self == Self::Avx512 && features().vnni
    }

    /// Whether this call may use AVX-512 VNNI dot products and VBMI byte permutes.
    pub(crate) fn vbmi(self) -> bool {
        self == Self::Avx512 && features().vbmi
    }
}

/// What `simd` asks for: `Auto` becomes the set `BLOCKSCALE_SIMD` names (`portable`,
/// `avx2` or `avx512`), and stays `Auto` (the best the CPU has) when it names none. The
/// variable is read once per process.
fn requested(simd: Simd) -> Simd {
    static FROM_ENV: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    match simd {
        Simd::Auto => *FROM_ENV.get_or_init(|| match std::env::var("BLOCKSCALE_SIMD").as_deref() {
            Ok("portable") => Simd::Portable,
            Ok("avx2") => Simd::Avx2,
            Ok("avx512") => Simd::Avx512,
            _ => Simd::Auto,
        }),
        other => other,
    }
}

/// Whether this CPU can run `Simd::Avx512`: AVX-512 F, BW and VL (plus AVX2, F16C and FMA).
/// Its kernels use BF16 and VNNI where present ([`vnni_available`](crate::vnni_available)).
pub fn avx512_available() -> bool {
    features().avx512
}

/// Whether this CPU can run `Simd::Avx2`: AVX2, F16C and FMA.
pub fn avx2_available() -> bool {
    features().avx2
}

/// Whether this CPU has AVX-512 F, BW and VNNI (the int8 panel kernels' set).
pub fn vnni_available() -> bool {
    features().vnni
}

/// Whether this CPU has AVX-512 F, BW, VNNI and VBMI (the six- and eight-bit panel
/// kernels' set).
pub fn vbmi_available() -> bool {
    features().vbmi
}

/// The element format the kernels write, with how it sits in bytes: E2M1 and offset-8
/// INT4 two per byte (even element in the low nibble), every other format one code per
/// byte (FP6 codes are packed to the bitstream by the caller).
pub(crate) type Target = ElementFormat;

/// Byte-level facts about a [`Target`].
pub(crate) trait Codes {
    /// Elements per output byte.
    fn per_byte(self) -> usize;
    /// The byte a zero (or poisoned) block is filled with: value-zero codes.
    fn zero_byte(self) -> u8;
}

impl Codes for ElementFormat {
    fn per_byte(self) -> usize {
        if self.bits() == 4 { 2 } else { 1 }
    }

    fn zero_byte(self) -> u8 {
        if self == Self::Int4 { 0x88 } else { 0 }
    }
}

/// Whether a factor means "write zero codes": a zero scale or a poisoned block.
#[inline(always)]
pub(crate) fn zero_codes(factor: f32) -> bool {
    factor == 0.0 || factor.is_nan()
}

/// Calls kernel `$f` of the portable or the AVX2 module, as `$isa` says (the AVX2 one
/// under `Isa::Avx512` too).
macro_rules! on_isa {
    ($isa:expr, $f:ident($($arg:expr),*)) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` and `Isa::Avx512` are only selected where AVX2, F16C
            // and FMA are present; every AVX2 kernel checks its slice lengths itself.
            Isa::Avx2 | Isa::Avx512 => unsafe { avx2::$f($($arg),*) },
            _ => portable::$f($($arg),*),
        }
    };
}

/// `out[b]` = the largest `|x|` bit pattern (`bits & 0x7fff_ffff`) of block `b`:
/// exact, and `>= 0x7f80_0000` exactly when the block holds a NaN or an infinity.
pub(crate) fn block_amax_bits<T: Input>(isa: Isa, row: &[T], block: usize, out: &mut [u32]) {
    debug_assert_eq!(row.len(), out.len() * block);
    on_isa!(isa, block_amax_bits(row, block, out))
}

/// The largest finite `|x|` bit pattern of a row, and the column of its first non-finite
/// value.
pub(crate) fn finite_amax_bits<T: Input>(isa: Isa, row: &[T]) -> (u32, Option<usize>) {
    on_isa!(isa, finite_amax_bits(row))
}

/// NVFP4 block scales for a row of block amax bit patterns: what
/// [`crate::scale::nvfp4_entry`] gives for each, vectorised for the LightX2V recipe.
pub(crate) fn nvfp4_scales(
    isa: Isa,
    amax: &[u32],
    g: f32,
    recipe: NvFp4Recipe,
    scales: &mut [u8],
    factors: &mut [f32],
) {
    debug_assert!(amax.len() == scales.len() && amax.len() == factors.len());
    match (isa, recipe) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `on_isa!`.
        (Isa::Avx2 | Isa::Avx512, NvFp4Recipe::LightX2V) => unsafe { avx2::nvfp4_scales(amax, g, scales, factors) },
        _ => scale::each(amax, scales, factors, |a| scale::nvfp4_entry(a, g, recipe)),
    }
}

/// A row's blocks: `block` elements each, one factor per block (the encoder's multiplier
/// or divisor, the decoder's scale), elements in format `target`.
#[derive(Clone, Copy)]
pub(crate) struct RowBlocks<'a> {
    pub block: usize,
    pub factors: &'a [f32],
    pub target: Target,
}

/// Encodes a row block by block: element `x` of block `b` becomes
/// `target(op(x, factors[b]))`, saturating; blocks whose factor is 0 or NaN get
/// [`Target::zero_byte`]. `out` holds `row.len() / target.per_byte()` bytes.
pub(crate) fn encode_row<T: Input>(isa: Isa, row: &[T], blocks: RowBlocks<'_>, op: Op, out: &mut [u8]) {
    debug_assert_eq!(row.len(), blocks.factors.len() * blocks.block);
    debug_assert_eq!(out.len() * blocks.target.per_byte(), row.len());
    on_isa!(isa, encode_row(row, blocks, op, out))
}

/// Decodes a row block by block: element `i` of block `b` becomes
/// `O((value(code_i) * factors[b]) * post)` (the factors are the block scales), with every NaN the canonical `f32::NAN`.
/// `codes` holds `out.len() / per_byte` bytes (FP6 codes unpacked, one per byte).
pub(crate) fn decode_row<O: Source>(isa: Isa, codes: &[u8], blocks: RowBlocks<'_>, post: f32, out: &mut [O]) {
    debug_assert_eq!(out.len(), blocks.factors.len() * blocks.block);
    debug_assert_eq!(codes.len() * blocks.target.per_byte(), out.len());
    on_isa!(isa, decode_row(codes, blocks, post, out))
}

/// Packs one FP6 code per byte (the low six bits) four per three bytes, LSB-first, as
/// `blockscale_formats::pack::pack_fp6` does; `out` holds `codes.len() / 4 * 3` bytes.
pub(crate) fn pack_fp6(isa: Isa, codes: &[u8], out: &mut [u8]) {
    debug_assert!(codes.len().is_multiple_of(4) && out.len() == codes.len() / 4 * 3);
    on_isa!(isa, pack_fp6(codes, out))
}

/// Unpacks FP6 codes (four per three bytes, LSB-first) to one per byte, as
/// `blockscale_formats::pack::unpack_fp6` does; `codes` holds `packed.len() / 3 * 4`.
pub(crate) fn unpack_fp6(isa: Isa, packed: &[u8], codes: &mut [u8]) {
    debug_assert!(packed.len().is_multiple_of(3) && codes.len() == packed.len() / 3 * 4);
    on_isa!(isa, unpack_fp6(packed, codes))
}
