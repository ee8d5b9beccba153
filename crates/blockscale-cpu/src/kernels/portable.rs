//! The portable kernels: plain Rust over the formats crate's scalar conversions. They
//! define the bytes; the SIMD kernels are tested against them.

use blockscale_formats::Source;
use blockscale_formats::{E2M1, E2M3, E3M2, E4M3, E5M2, Element, Int4};

use super::{Codes, RowBlocks, Target, zero_codes};
use crate::Input;
use crate::scale::Op;

#[inline(always)]
fn abs_bits<T: Input>(x: T) -> u32 {
    x.to_f32_exact().to_bits() & 0x7fff_ffff
}

pub(super) fn block_amax_bits<T: Input>(row: &[T], block: usize, out: &mut [u32]) {
    for (o, chunk) in out.iter_mut().zip(row.chunks_exact(block)) {
        *o = chunk.iter().fold(0, |m, &x| m.max(abs_bits(x)));
    }
}

pub(super) fn finite_amax_bits<T: Input>(row: &[T]) -> (u32, Option<usize>) {
    let mut amax = 0;
    let mut first = None;
    for (i, &x) in row.iter().enumerate() {
        let a = abs_bits(x);
        if a >= 0x7f80_0000 {
            first.get_or_insert(i);
        } else {
            amax = amax.max(a);
        }
    }
    (amax, first)
}

#[inline(always)]
fn apply(op: Op, x: f32, factor: f32) -> f32 {
    match op {
        Op::Mul => x * factor,
        Op::Div => x / factor,
    }
}

/// One code per byte (E2M3, E3M2, E4M3, E5M2).
fn encode_bytes<T: Input, E: Element>(row: &[T], block: usize, op: Op, factors: &[f32], out: &mut [u8]) {
    for ((chunk, dst), &f) in row.chunks_exact(block).zip(out.chunks_exact_mut(block)).zip(factors) {
        if zero_codes(f) {
            dst.fill(0);
            continue;
        }
        for (d, &x) in dst.iter_mut().zip(chunk) {
            *d = E::encode(apply(op, x.to_f32_exact(), f)).bits();
        }
    }
}

/// Two 4-bit codes per byte, even element in the low nibble.
fn encode_nibbles<T: Input>(
    row: &[T],
    block: usize,
    op: Op,
    factors: &[f32],
    target: Target,
    code: impl Fn(f32) -> u8,
    out: &mut [u8],
) {
    let zero = target.zero_byte();
    for ((chunk, dst), &f) in row.chunks_exact(block).zip(out.chunks_exact_mut(block / 2)).zip(factors) {
        if zero_codes(f) {
            dst.fill(zero);
            continue;
        }
        for (d, pair) in dst.iter_mut().zip(chunk.chunks_exact(2)) {
            let lo = code(apply(op, pair[0].to_f32_exact(), f));
            let hi = code(apply(op, pair[1].to_f32_exact(), f));
            *d = lo | (hi << 4);
        }
    }
}

pub(super) fn encode_row<T: Input>(row: &[T], blocks: RowBlocks<'_>, op: Op, out: &mut [u8]) {
    let RowBlocks { block, factors, target } = blocks;
    match target {
        Target::E2M1 => encode_nibbles(row, block, op, factors, target, |y| E2M1::from_f32(y).to_bits(), out),
        Target::Int4 => encode_nibbles(row, block, op, factors, target, |y| Int4::from_f32(y).to_offset8_bits(), out),
        Target::E2M3 => encode_bytes::<T, E2M3>(row, block, op, factors, out),
        Target::E3M2 => encode_bytes::<T, E3M2>(row, block, op, factors, out),
        Target::E4M3 => encode_bytes::<T, E4M3>(row, block, op, factors, out),
        Target::E5M2 => encode_bytes::<T, E5M2>(row, block, op, factors, out),
    }
}

fn decode_with<O: Source>(
    codes: &[u8],
    block: usize,
    per_byte: usize,
    scales: &[f32],
    post: f32,
    value: impl Fn(u8, usize) -> f32,
    out: &mut [O],
) {
    for ((dst, src), &s) in out.chunks_exact_mut(block).zip(codes.chunks_exact(block / per_byte)).zip(scales) {
        for (i, d) in dst.iter_mut().enumerate() {
            let v = (value(src[i / per_byte], i) * s) * post;
            // NaN payloads are not portable across instruction orders: one canonical NaN.
            *d = O::from_f32(if v.is_nan() { f32::NAN } else { v });
        }
    }
}

pub(super) fn decode_row<O: Source>(codes: &[u8], blocks: RowBlocks<'_>, post: f32, out: &mut [O]) {
    let RowBlocks { block, factors: scales, target } = blocks;
    let nibble = |b: u8, i: usize| (b >> (4 * (i % 2))) & 0xf;
    match target {
        Target::E2M1 => decode_with(codes, block, 2, scales, post, |b, i| E2M1::TABLE[nibble(b, i) as usize], out),
        Target::Int4 => {
            decode_with(codes, block, 2, scales, post, |b, i| Int4::OFFSET8_TABLE[nibble(b, i) as usize], out)
        }
        Target::E2M3 => decode_with(codes, block, 1, scales, post, |b, _| E2M3::from_bits(b).to_f32(), out),
        Target::E3M2 => decode_with(codes, block, 1, scales, post, |b, _| E3M2::from_bits(b).to_f32(), out),
        Target::E4M3 => decode_with(codes, block, 1, scales, post, |b, _| E4M3::TABLE[b as usize], out),
        Target::E5M2 => decode_with(codes, block, 1, scales, post, |b, _| E5M2::TABLE[b as usize], out),
    }
}

/// See `super::pack_fp6`.
pub(super) fn pack_fp6(codes: &[u8], out: &mut [u8]) {
    // The lengths agree (checked by the caller): `codes.len() / 4 * 3` bytes.
    let _ = blockscale_formats::pack::pack_fp6::<u8>(codes, out);
}

/// See `super::unpack_fp6`.
pub(super) fn unpack_fp6(packed: &[u8], codes: &mut [u8]) {
    // The lengths agree (checked by the caller): `packed.len() / 3 * 4` codes.
    let _ = blockscale_formats::pack::unpack_fp6::<u8>(packed, codes);
}
