//! Input element types of quantization: f32, f16, bf16.

use blockscale_formats::Source;

/// A quantization input type: f32, f16 or bf16 (the formats crate's [`Source`], which
/// seals it, plus what the SIMD kernels need to load it).
pub trait Input: Source {
    /// Loads 8 consecutive values as f32 lanes.
    ///
    /// # Safety
    /// `p` must be valid for reading 8 values, and the CPU must support AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256;
}

impl Input for f32 {
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable f32 at `p`; loadu has no alignment need.
        unsafe { core::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl Input for half::f16 {
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable f16 (16 bytes) at `p`; F16C converts
        // every f16 exactly.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

impl Input for half::bf16 {
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable bf16 (16 bytes) at `p`; a bf16 is the
        // top half of an f32, so widening and shifting is exact.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())))) }
    }
}
