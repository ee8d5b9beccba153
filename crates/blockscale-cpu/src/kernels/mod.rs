//! The hot loops, in a portable version and (on x86-64) an AVX2 version that gives
//! identical bytes. [`Path`] picks one once per call; every function here dispatches.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod portable;

use blockscale_formats::ElementFormat;
use blockscale_formats::Source;

use crate::scale::{self, Op};
use crate::{CpuError, Input, NvFp4Recipe, Simd};

/// An implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Path {
    /// The path `simd` asks for: `Auto` takes `BLOCKSCALE_SIMD` (`portable` or `avx2`)
    /// if set, else the best the CPU has.
    pub(crate) fn select(simd: Simd) -> Result<Self, CpuError> {
        match requested(simd) {
            Simd::Portable => Ok(Self::Portable),
            Simd::Avx2 if avx2_available() => Ok(Self::avx2()),
            Simd::Avx2 => Err(CpuError::SimdUnavailable("AVX2 + F16C + FMA")),
            Simd::Avx512 if avx512_available() => Ok(Self::avx2()),
            Simd::Avx512 => Err(CpuError::SimdUnavailable("AVX-512 F + BW + BF16")),
            Simd::Auto => Ok(if avx2_available() { Self::avx2() } else { Self::Portable }),
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn avx2() -> Self {
        Self::Avx2
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn avx2() -> Self {
        Self::Portable
    }
}

/// What `simd` asks for: `Auto` becomes the path `BLOCKSCALE_SIMD` names (`portable`,
/// `avx2` or `avx512`), and stays `Auto` (the best the CPU has) when it names none. The
/// variable is read once per process.
pub(crate) fn requested(simd: Simd) -> Simd {
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

/// Whether this CPU can run the AVX-512 GEMM kernels (F, BW and BF16, plus AVX2).
pub fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2_available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU can run the AVX2 path.
pub fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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

/// Calls kernel `$f` of the portable or the AVX2 module, as `$path` says.
macro_rules! on_path {
    ($path:expr, $f:ident($($arg:expr),*)) => {
        match $path {
            Path::Portable => portable::$f($($arg),*),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Path::Avx2` is only constructed after `avx2_available()` confirmed
            // AVX2 and F16C; every AVX2 kernel checks its slice lengths itself.
            Path::Avx2 => unsafe { avx2::$f($($arg),*) },
        }
    };
}

/// `out[b]` = the largest `|x|` bit pattern (`bits & 0x7fff_ffff`) of block `b`:
/// exact, and `>= 0x7f80_0000` exactly when the block holds a NaN or an infinity.
pub(crate) fn block_amax_bits<T: Input>(path: Path, row: &[T], block: usize, out: &mut [u32]) {
    debug_assert_eq!(row.len(), out.len() * block);
    on_path!(path, block_amax_bits(row, block, out))
}

/// The largest finite `|x|` bit pattern of a row, and the column of its first non-finite
/// value.
pub(crate) fn finite_amax_bits<T: Input>(path: Path, row: &[T]) -> (u32, Option<usize>) {
    on_path!(path, finite_amax_bits(row))
}

/// NVFP4 block scales for a row of block amax bit patterns: what
/// [`crate::scale::nvfp4_entry`] gives for each, vectorised for the LightX2V recipe.
pub(crate) fn nvfp4_scales(
    path: Path,
    amax: &[u32],
    g: f32,
    recipe: NvFp4Recipe,
    scales: &mut [u8],
    factors: &mut [f32],
) {
    debug_assert!(amax.len() == scales.len() && amax.len() == factors.len());
    match (path, recipe) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `on_path!`.
        (Path::Avx2, NvFp4Recipe::LightX2V) => unsafe { avx2::nvfp4_scales(amax, g, scales, factors) },
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
pub(crate) fn encode_row<T: Input>(path: Path, row: &[T], blocks: RowBlocks<'_>, op: Op, out: &mut [u8]) {
    debug_assert_eq!(row.len(), blocks.factors.len() * blocks.block);
    debug_assert_eq!(out.len() * blocks.target.per_byte(), row.len());
    on_path!(path, encode_row(row, blocks, op, out))
}

/// Decodes a row block by block: element `i` of block `b` becomes
/// `O((value(code_i) * factors[b]) * post)` (the factors are the block scales), with every NaN the canonical `f32::NAN`.
/// `codes` holds `out.len() / per_byte` bytes (FP6 codes unpacked, one per byte).
pub(crate) fn decode_row<O: Source>(path: Path, codes: &[u8], blocks: RowBlocks<'_>, post: f32, out: &mut [O]) {
    debug_assert_eq!(out.len(), blocks.factors.len() * blocks.block);
    debug_assert_eq!(codes.len() * blocks.target.per_byte(), out.len());
    on_path!(path, decode_row(codes, blocks, post, out))
}

/// Packs one FP6 code per byte (the low six bits) four per three bytes, LSB-first, as
/// `blockscale_formats::pack::pack_fp6` does; `out` holds `codes.len() / 4 * 3` bytes.
pub(crate) fn pack_fp6(path: Path, codes: &[u8], out: &mut [u8]) {
    debug_assert!(codes.len().is_multiple_of(4) && out.len() == codes.len() / 4 * 3);
    on_path!(path, pack_fp6(codes, out))
}

/// Unpacks FP6 codes (four per three bytes, LSB-first) to one per byte, as
/// `blockscale_formats::pack::unpack_fp6` does; `codes` holds `packed.len() / 3 * 4`.
pub(crate) fn unpack_fp6(path: Path, packed: &[u8], codes: &mut [u8]) {
    debug_assert!(packed.len().is_multiple_of(3) && codes.len() == packed.len() / 3 * 4);
    on_path!(path, unpack_fp6(packed, codes))
}
