//! The one reinterpretation the AVX-512 BF16 kernels share.

use core::arch::x86_64::{__m512bh, __m512i};

/// The same 64 bytes as 32 bf16 (for `_mm512_dpbf16_ps`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) fn bh(v: __m512i) -> __m512bh {
    // SAFETY: both are plain 64-byte vectors; every bit pattern is a valid bf16 vector.
    unsafe { core::mem::transmute::<__m512i, __m512bh>(v) }
}
