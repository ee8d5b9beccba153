//! Packing element codes into bytes and words, and the block-interleaved GEMV layout.
//!
//! - **FP4 (E2M1)**: two codes per byte, the even-indexed element in the **low**
//!   nibble (`byte = code[2j] | code[2j+1] << 4`). This is `torch.float4_e2m1fn_x2`,
//!   CUTLASS, ModelOpt, compressed-tensors, gpt-oss and the order
//!   `cvt.rn.satfinite.e2m1x2.f32` produces when kernels pass element 2j as its low
//!   operand. Packing the even element into the high nibble swaps every pair of
//!   elements along K: the result still has the right shape and plausible values, so
//!   nothing fails loudly, but every dot product pairs each activation with its
//!   neighbour's weight (docs/FORMATS.md works an example).
//! - **FP6 (E2M3, E3M2)**: four codes in three bytes, as the LSB-first 24-bit bitstream
//!   CUTLASS and the tensor-memory copies use: code i of a group occupies bits
//!   `6i..6i+6` of `b0 | b1 << 8 | b2 << 16`. (torchao's removed `pack_uint6` is a
//!   different, incompatible order.)
//! - **FP8**: one code per byte.
//! - **INT4**: eight codes per `u32`, element i in bits `4i..4i+3`. Read as
//!   little-endian bytes this is exactly the FP4 byte order, so FP4 rows can be viewed
//!   as words with [`words_from_le_bytes`].
//! - **Block-interleaved** (`[k_blocks, n, 4]` u32): for GEMV kernels that load a
//!   32-element K-block of one output row with one 128-bit load, and neighbouring
//!   rows (threads) from neighbouring addresses. See [`to_block_interleaved`].

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use crate::error::{check_len, check_multiple};
use crate::{E2M1, E2M3, E3M2, FormatError, Int4, Int4Storage};

/// Packs E2M1 codes two per byte, even element in the low nibble.
///
/// # Errors
/// [`FormatError::NotMultiple`] for an odd number of codes;
/// [`FormatError::LengthMismatch`] unless `out.len() == codes.len() / 2`.
pub fn pack_e2m1(codes: &[E2M1], out: &mut [u8]) -> Result<(), FormatError> {
    let names = ("E2M1 code count", "two FP4 codes share a byte", "packed E2M1 bytes");
    pack_groups::<2, _, _>(codes, out, names, |pair| pair[0].to_bits() | (pair[1].to_bits() << 4))
}

/// Unpacks bytes of two E2M1 codes (low nibble first).
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `out.len() == 2 * packed.len()`.
pub fn unpack_e2m1(packed: &[u8], out: &mut [E2M1]) -> Result<(), FormatError> {
    unpack_groups::<2, _, _>(packed, out, "E2M1 codes", |b, pair| {
        pair[0] = E2M1::from_bits(b);
        pair[1] = E2M1::from_bits(b >> 4);
    })
}

/// Packs each group of `PER` items of `src` into one item of `out`, after checking
/// that `PER` divides the count and that `out` holds one item per group. `names`: the
/// count and why it must be a multiple of `PER` ([`FormatError::NotMultiple`]), and
/// `out` ([`FormatError::LengthMismatch`]).
#[inline(always)]
fn pack_groups<const PER: usize, S, D>(
    src: &[S],
    out: &mut [D],
    (count, why, packed): (&'static str, &'static str, &'static str),
    pack: impl Fn(&[S]) -> D,
) -> Result<(), FormatError> {
    check_multiple(count, src.len(), PER, why)?;
    check_len(packed, src.len() / PER, out.len())?;
    for (o, group) in out.iter_mut().zip(src.chunks_exact(PER)) {
        *o = pack(group);
    }
    Ok(())
}

/// Unpacks each item of `packed` into a group of `PER` items of `out` (`what`, which
/// must hold `PER` per packed item: [`FormatError::LengthMismatch`]).
#[inline(always)]
fn unpack_groups<const PER: usize, S: Copy, D>(
    packed: &[S],
    out: &mut [D],
    what: &'static str,
    unpack: impl Fn(S, &mut [D]),
) -> Result<(), FormatError> {
    check_len(what, packed.len() * PER, out.len())?;
    for (group, &p) in out.chunks_exact_mut(PER).zip(packed) {
        unpack(p, group);
    }
    Ok(())
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::E2M3 {}
    impl Sealed for crate::E3M2 {}
    impl Sealed for u8 {}
}

/// The two 6-bit element types, and raw 6-bit codes in a `u8`, for [`pack_fp6`] and
/// [`unpack_fp6`].
pub trait Fp6: Copy + sealed::Sealed {
    /// The 6-bit code.
    fn code(self) -> u8;
    /// From a 6-bit code (higher bits ignored).
    fn from_code(code: u8) -> Self;
}

macro_rules! fp6_type {
    ($($T:ident),*) => {$(
        impl Fp6 for $T {
            #[inline(always)]
            fn code(self) -> u8 {
                self.to_bits()
            }
            #[inline(always)]
            fn from_code(code: u8) -> Self {
                Self::from_bits(code)
            }
        }
    )*};
}
fp6_type!(E2M3, E3M2);

impl Fp6 for u8 {
    /// The low six bits.
    #[inline(always)]
    fn code(self) -> u8 {
        self & 0x3f
    }
    #[inline(always)]
    fn from_code(code: u8) -> Self {
        code & 0x3f
    }
}

/// Packs FP6 codes four per three bytes, LSB-first (CUTLASS order).
///
/// # Errors
/// [`FormatError::NotMultiple`] unless the count is a multiple of 4;
/// [`FormatError::LengthMismatch`] unless `out.len() == codes.len() * 3 / 4`.
pub fn pack_fp6<T: Fp6>(codes: &[T], out: &mut [u8]) -> Result<(), FormatError> {
    check_multiple("FP6 code count", codes.len(), 4, "four FP6 codes fill three bytes")?;
    check_len("packed FP6 bytes", codes.len() / 4 * 3, out.len())?;
    for (o, quad) in out.chunks_exact_mut(3).zip(codes.chunks_exact(4)) {
        // The four codes as the bytes of one word, each moved down to its 6-bit slot.
        let w = u32::from_le_bytes([quad[0].code(), quad[1].code(), quad[2].code(), quad[3].code()]) & 0x3f3f_3f3f;
        let packed = (w & 0x3f) | (w >> 2 & 0xfc0) | (w >> 4 & 0x3_f000) | (w >> 6 & 0xfc_0000);
        o.copy_from_slice(&packed.to_le_bytes()[..3]);
    }
    Ok(())
}

/// Unpacks FP6 codes from groups of three bytes (LSB-first).
///
/// # Errors
/// [`FormatError::NotMultiple`] unless `packed.len()` is a multiple of 3;
/// [`FormatError::LengthMismatch`] unless `out.len() == packed.len() / 3 * 4`.
pub fn unpack_fp6<T: Fp6>(packed: &[u8], out: &mut [T]) -> Result<(), FormatError> {
    check_multiple("packed FP6 byte count", packed.len(), 3, "four FP6 codes fill three bytes")?;
    check_len("FP6 codes", packed.len() / 3 * 4, out.len())?;
    for (quad, b) in out.chunks_exact_mut(4).zip(packed.chunks_exact(3)) {
        let w = u32::from_le_bytes([b[0], b[1], b[2], 0]);
        for (i, c) in quad.iter_mut().enumerate() {
            *c = T::from_code((w >> (6 * i)) as u8 & 0x3f);
        }
    }
    Ok(())
}

/// Packs INT4 values eight per `u32`, element i in bits `4i..4i+3`, stored as
/// `storage` says.
///
/// # Errors
/// [`FormatError::NotMultiple`] unless the count is a multiple of 8;
/// [`FormatError::LengthMismatch`] unless `out.len() == values.len() / 8`.
pub fn pack_int4(values: &[Int4], storage: Int4Storage, out: &mut [u32]) -> Result<(), FormatError> {
    let names = ("INT4 value count", "eight INT4 values fill a u32", "packed INT4 words");
    pack_groups::<8, _, _>(values, out, names, |oct| {
        oct.iter().enumerate().fold(0u32, |w, (i, &v)| w | (u32::from(storage.encode(v)) << (4 * i)))
    })
}

/// Unpacks INT4 values from `u32` words (element i in bits `4i..4i+3`).
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `out.len() == 8 * words.len()`.
pub fn unpack_int4(words: &[u32], storage: Int4Storage, out: &mut [Int4]) -> Result<(), FormatError> {
    unpack_groups::<8, _, _>(words, out, "INT4 values", |w, oct| {
        for (i, v) in oct.iter_mut().enumerate() {
            *v = storage.decode((w >> (4 * i)) as u8);
        }
    })
}

/// Reads bytes as little-endian `u32` words (byte `4j` is the low byte of word j).
///
/// # Errors
/// [`FormatError::NotMultiple`] unless `bytes.len()` is a multiple of 4;
/// [`FormatError::LengthMismatch`] unless `out.len() == bytes.len() / 4`.
pub fn words_from_le_bytes(bytes: &[u8], out: &mut [u32]) -> Result<(), FormatError> {
    let names = ("byte count", "four bytes make a u32 word", "words");
    pack_groups::<4, _, _>(bytes, out, names, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes `u32` words as little-endian bytes.
///
/// # Errors
/// [`FormatError::LengthMismatch`] unless `out.len() == 4 * words.len()`.
pub fn le_bytes_from_words(words: &[u32], out: &mut [u8]) -> Result<(), FormatError> {
    unpack_groups::<4, _, _>(words, out, "bytes", |w, o| o.copy_from_slice(&w.to_le_bytes()))
}

/// 4-bit elements per K-block of the block-interleaved layout (one 128-bit load).
pub const INTERLEAVE_K: usize = 32;
/// `u32` words per K-block of the block-interleaved layout.
pub const INTERLEAVE_WORDS: usize = INTERLEAVE_K / 8;

/// Checks an interleave of `n` rows of `k` 4-bit elements (`lens`: the two sides'
/// names and lengths, in the order checked, each `n * k / 8` words), then calls
/// `visit(row_major, interleaved)` with the word offsets of every K-block on both sides.
fn for_each_k_block(
    n: usize,
    k: usize,
    lens: [(&'static str, usize); 2],
    mut visit: impl FnMut(usize, usize),
) -> Result<(), FormatError> {
    check_multiple("K", k, INTERLEAVE_K, "the interleaved layout groups 32 4-bit elements per 128-bit load")?;
    let len = n.checked_mul(k / 8).ok_or(FormatError::TooLarge { what: "interleaved weight" })?;
    for (what, actual) in lens {
        check_len(what, len, actual)?;
    }
    let blocks = k / INTERLEAVE_K;
    for r in 0..n {
        for b in 0..blocks {
            visit((r * blocks + b) * INTERLEAVE_WORDS, (b * n + r) * INTERLEAVE_WORDS);
        }
    }
    Ok(())
}

/// Rewrites `n` rows of `k` packed 4-bit elements (row-major `[n, k/8]` words, as
/// [`pack_int4`] or [`words_from_le_bytes`] of FP4 rows produce) into the
/// block-interleaved `[k/32, n, 4]` layout: word `w` of K-block `kb` of row `r` moves
/// to `(kb * n + r) * 4 + w`. A GEMV thread for row `r` then reads each K-block with
/// one 16-byte load, and adjacent rows' loads are adjacent in memory.
///
/// # Errors
/// [`FormatError::NotMultiple`] unless `k` is a multiple of 32;
/// [`FormatError::LengthMismatch`] unless `rows.len() == out.len() == n * k / 8`.
pub fn to_block_interleaved(rows: &[u32], n: usize, k: usize, out: &mut [u32]) -> Result<(), FormatError> {
    let lens = [("row-major words", rows.len()), ("interleaved words", out.len())];
    for_each_k_block(n, k, lens, |row_major, interleaved| {
        out[interleaved..interleaved + INTERLEAVE_WORDS]
            .copy_from_slice(&rows[row_major..row_major + INTERLEAVE_WORDS]);
    })
}

/// Inverse of [`to_block_interleaved`].
///
/// # Errors
/// As [`to_block_interleaved`].
pub fn from_block_interleaved(interleaved: &[u32], n: usize, k: usize, out: &mut [u32]) -> Result<(), FormatError> {
    let lens = [("interleaved words", interleaved.len()), ("row-major words", out.len())];
    for_each_k_block(n, k, lens, |row_major, at| {
        out[row_major..row_major + INTERLEAVE_WORDS].copy_from_slice(&interleaved[at..at + INTERLEAVE_WORDS]);
    })
}

/// [`pack_e2m1`] into a new vector.
///
/// # Errors
/// As [`pack_e2m1`].
#[cfg(feature = "alloc")]
pub fn pack_e2m1_vec(codes: &[E2M1]) -> Result<Vec<u8>, FormatError> {
    let mut out = alloc::vec![0u8; codes.len() / 2];
    pack_e2m1(codes, &mut out)?;
    Ok(out)
}

/// [`unpack_e2m1`] into a new vector.
#[cfg(feature = "alloc")]
pub fn unpack_e2m1_vec(packed: &[u8]) -> Vec<E2M1> {
    let mut out = alloc::vec![E2M1::ZERO; packed.len() * 2];
    // The lengths agree by construction.
    let _ = unpack_e2m1(packed, &mut out);
    out
}

/// [`pack_fp6`] into a new vector.
///
/// # Errors
/// As [`pack_fp6`].
#[cfg(feature = "alloc")]
pub fn pack_fp6_vec<T: Fp6>(codes: &[T]) -> Result<Vec<u8>, FormatError> {
    let mut out = alloc::vec![0u8; codes.len() / 4 * 3];
    pack_fp6(codes, &mut out)?;
    Ok(out)
}

/// [`unpack_fp6`] into a new vector.
///
/// # Errors
/// As [`unpack_fp6`].
#[cfg(feature = "alloc")]
pub fn unpack_fp6_vec<T: Fp6>(packed: &[u8]) -> Result<Vec<T>, FormatError> {
    let mut out = alloc::vec![T::from_code(0); packed.len() / 3 * 4];
    unpack_fp6(packed, &mut out)?;
    Ok(out)
}

/// [`pack_int4`] into a new vector.
///
/// # Errors
/// As [`pack_int4`].
#[cfg(feature = "alloc")]
pub fn pack_int4_vec(values: &[Int4], storage: Int4Storage) -> Result<Vec<u32>, FormatError> {
    let mut out = alloc::vec![0u32; values.len() / 8];
    pack_int4(values, storage, &mut out)?;
    Ok(out)
}

/// [`to_block_interleaved`] into a new vector.
///
/// # Errors
/// As [`to_block_interleaved`].
#[cfg(feature = "alloc")]
pub fn to_block_interleaved_vec(rows: &[u32], n: usize, k: usize) -> Result<Vec<u32>, FormatError> {
    let mut out = alloc::vec![0u32; rows.len()];
    to_block_interleaved(rows, n, k, &mut out)?;
    Ok(out)
}
