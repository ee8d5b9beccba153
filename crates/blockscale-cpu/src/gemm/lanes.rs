//! The horizontal sums the x86 GEMM and GEMV kernels share: one fixed tree, so every
//! kernel that reduces its lanes with these rounds the same way (and the portable
//! kernels that mirror them can follow it).

use core::arch::x86_64::*;

/// Sum of 8 f32 lanes by the fixed tree `(l, l + 4)`, `(l, l + 2)`, `(0, 1)` (three
/// roundings per term).
#[inline]
#[target_feature(enable = "avx")]
pub(crate) fn hsum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Sum of 16 f32 lanes: `(l, l + 8)`, then [`hsum8`] (four roundings per term).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn hsum16(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
}
