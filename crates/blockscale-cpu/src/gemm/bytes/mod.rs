//! Weight-only GEMV and small GEMM with 8- and 6-bit minifloat weights (MXFP8 E4M3 and
//! E5M2, FP8 block, MXFP6 E2M3 and E3M2) and f32 activations, streaming the row-major
//! weights once per call: no packing, no decoded copy of the matrix.
//!
//! ```text
//! out[m * N + n] = post * Σ_kb s(n, kb) * Σ_{k in block kb} x[m, k] * h(code(n, k))
//! ```
//!
//! # Exact form
//!
//! Every element of these formats is exactly an f16 times a power of two, and the f16
//! comes from the code with integer shifts alone (one rule for normal and subnormal
//! codes, because both formats keep the implicit-bit convention):
//!
//! | element | f16 bits `h` | `h` as a value | `post` |
//! |---|---|---|---|
//! | E4M3 | `sign << 15 \| (code & 0x7f) << 7` | `value * 2^-8` | `2^8` |
//! | E5M2 | `code << 8` | `value` (infinities and NaN included) | 1 |
//! | E2M3 | `sign << 15 \| (code & 0x1f) << 7` | `value * 2^-14` | `2^14` |
//! | E3M2 | `sign << 15 \| (code & 0x1f) << 8` | `value * 2^-12` | `2^12` |
//!
//! (A format with `e` exponent bits and bias `b` placed under f16's five-bit exponent
//! keeps its mantissa and gains the factor `2^(b - 15)`; subnormals match because f16's
//! subnormal exponent `-14` is f16's bias minus one, as theirs is.) `vcvtph2ps` then
//! widens the f16 exactly. E4M3's NaN codes (`0x7f`, `0xff`) would become finite f16
//! values, so a weight row holding one is not multiplied: its outputs are NaN, which is
//! what any sum with a NaN term gives. The tests check `h` against the formats' own
//! decoding for every code.
//!
//! # Arithmetic and error bound
//!
//! One order of operations defines the result, and every path follows it, so the
//! portable, AVX2 and AVX-512 kernels give the same bits. Sixteen f32 lanes; lane `l`
//! takes elements `16 c + l` of a block (`c < block / 16`). Per block and lane,
//! `p = x * h` for `c = 0`, then `p = fma(x, h, p)`; per block `acc = fma(p, s, acc)`
//! with the scale broadcast, into `even` for blocks 0, 2, 4, .. and `odd` for blocks
//! 1, 3, .. (two dependency chains); at the end `even + odd`, the lanes summed by the
//! fixed tree `(l, l + 8)`, `(l, l + 4)`, `(l, l + 2)`, `(0, 1)`, and the sum multiplied
//! by `post`. Each term `t_k = x_k * value_k * s` thus passes through at most
//! `block / 16` roundings in its lane's block sum, one in the scale FMA,
//! `ceil(K / (2 block))` in its chain, one for `even + odd`, four in the tree and one
//! for `post`, so with `u = 2^-24`, `n = block / 16 + K / block + 7` and
//! `γ_n = n u / (1 - n u)`, barring underflow and overflow:
//!
//! ```text
//! |out - exact| <= γ_n * Σ_k |x_k * value_k * s(n, kb(k))|
//! ```
//!
//! (`n` is at most the `block + K / block + 2` of the 4-bit kernels' bound for every
//! block of 32 or more.) The factor `2^-8`, `2^-14` or `2^-12` carried until `post`
//! shifts the underflow threshold of the intermediate sums by as much: a result whose
//! magnitude is below about `2^-112` may lose bits that the reference keeps.
//!
//! # Paths
//!
//! Portable: plain safe Rust over arrays of 16 lanes, the f16 values through a 256-entry
//! table. AVX2 (with F16C and FMA): the shifts on sixteen 16-bit lanes (`vpmovsxbw`,
//! `vpsllw`, `vpand` for E4M3; for FP6 one `vpshufb` gathers each code's two bytes and
//! one `vpmullw` by a power of two aligns it), `vcvtph2ps`, FMAs on two 8-lane halves.
//! AVX-512: the same decoding (FP6 aligned by `vpsllvw` instead of the multiply), one
//! 16-lane vector. The AVX2 and AVX-512 kernels are one generic function over the lane
//! type (`x86.rs`). Work is split by chunks of output rows, never along K, so results do
//! not depend on the thread count.

mod portable;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use blockscale_formats::{DataLayout, ElementFormat, QuantizedMatrix, ScaleData, ScaleFormat, ScaleLayout, UE8M0};

use super::nibble::{ScaleIndex, run_tasks};
use crate::kernels::Isa;

/// Lanes of the kernels (and elements per decoding step).
pub(crate) const LANES: usize = 16;

/// The element formats these kernels take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    E4M3,
    E5M2,
    E2M3,
    E3M2,
}

impl Elem {
    fn of(format: ElementFormat) -> Option<Self> {
        match format {
            ElementFormat::E4M3 => Some(Self::E4M3),
            ElementFormat::E5M2 => Some(Self::E5M2),
            ElementFormat::E2M3 => Some(Self::E2M3),
            ElementFormat::E3M2 => Some(Self::E3M2),
            _ => None,
        }
    }

    /// Bits per code in the row (FP6 as the LSB-first bitstream).
    pub(crate) fn bits(self) -> usize {
        match self {
            Self::E4M3 | Self::E5M2 => 8,
            Self::E2M3 | Self::E3M2 => 6,
        }
    }

    /// The f16 bits `h` of a code (see the module docs).
    pub(crate) fn half_bits(self, code: u8) -> u16 {
        let c = u16::from(code);
        match self {
            Self::E4M3 => (c << 8 & 0x8000) | (c & 0x7f) << 7,
            Self::E5M2 => c << 8,
            Self::E2M3 => (c << 10 & 0x8000) | (c & 0x1f) << 7,
            Self::E3M2 => (c << 10 & 0x8000) | (c & 0x1f) << 8,
        }
    }

    /// What the lanes' sum is multiplied by at the end.
    pub(crate) fn post(self) -> f32 {
        match self {
            Self::E4M3 => 256.0,
            Self::E5M2 => 1.0,
            Self::E2M3 => 16384.0,
            Self::E3M2 => 4096.0,
        }
    }
}

/// Block scales of [`ByteWeights`].
pub(crate) enum ByteScales<'a> {
    /// UE8M0 codes (MX).
    Ue8m0 { data: &'a [u8], index: ScaleIndex },
    /// f32 scales (FP8 block), row-major `[rows / block_rows, cols]`.
    F32 { data: &'a [f32], cols: usize, block_rows: usize },
}

/// Row-major 8- or 6-bit weights, `n x k`, with their block scales.
pub(crate) struct ByteWeights<'a> {
    pub data: &'a [u8],
    pub n: usize,
    pub k: usize,
    /// Elements per scale block along K: 32 or 128.
    pub block: usize,
    pub elem: Elem,
    pub scales: ByteScales<'a>,
}

/// The largest block the kernels hold decoded at once.
pub(crate) const MAX_BLOCK: usize = 128;

impl<'a> ByteWeights<'a> {
    /// The kernels' view of `w`: MXFP8, MXFP6 and FP8 block stored row-major; `None`
    /// for other schemes and layouts.
    pub(crate) fn new(w: &'a QuantizedMatrix) -> Option<Self> {
        let elem = Elem::of(w.scheme().element())?;
        let block = w.scheme().block_size();
        if w.data_layout() != DataLayout::RowMajor || !matches!(block, 32 | 128) {
            return None;
        }
        let cols = w.shape().scale_cols;
        let scales = match w.scales() {
            ScaleData::Bytes(data) if w.scheme().scale_format() == ScaleFormat::UE8M0 => {
                let index = match w.scale_layout() {
                    ScaleLayout::Linear => ScaleIndex::Linear { cols },
                    ScaleLayout::Swizzled128x4 => ScaleIndex::Swizzled128x4 { cols },
                };
                ByteScales::Ue8m0 { data, index }
            }
            ScaleData::F32(data) if w.scale_layout() == ScaleLayout::Linear => {
                ByteScales::F32 { data, cols, block_rows: w.scheme().block_rows() }
            }
            _ => return None,
        };
        Some(Self { data: w.data(), n: w.rows(), k: w.k(), block, elem, scales })
    }

    /// Bytes per weight row.
    fn row_bytes(&self) -> usize {
        self.k * self.elem.bits() / 8
    }

    /// The decoded block scales of rows `n0..n0 + dst.len() / cols` into `dst`, row by
    /// row (`cols = k / block` each).
    fn rows_scales(&self, n0: usize, dst: &mut [f32]) {
        let cols = self.k / self.block;
        match &self.scales {
            ByteScales::Ue8m0 { data, index: index @ ScaleIndex::Swizzled128x4 { .. } } => {
                // Gather each row's codes (runs of four) into row order, then decode
                // them all in one pass that the compiler vectorises (`UE8M0::to_f32`
                // is branch-free).
                let mut codes = vec![0u8; dst.len()];
                for (r, row) in codes.chunks_exact_mut(cols).enumerate() {
                    let base = index.row_base(n0 + r);
                    for (g, run) in row.chunks_mut(4).enumerate() {
                        let src = &data[base + g * index.stride()..][..run.len()];
                        match (<&mut [u8; 4]>::try_from(&mut *run), <&[u8; 4]>::try_from(src)) {
                            // Four bytes: one word moved, no call.
                            (Ok(run), Ok(src)) => *run = *src,
                            _ => run.copy_from_slice(src),
                        }
                    }
                }
                for (o, &code) in dst.iter_mut().zip(&codes) {
                    *o = UE8M0::from_bits(code).to_f32();
                }
            }
            ByteScales::Ue8m0 { data, index } => {
                let (base, len) = (index.row_base(n0), dst.len());
                for (o, &code) in dst.iter_mut().zip(&data[base..base + len]) {
                    *o = UE8M0::from_bits(code).to_f32();
                }
            }
            ByteScales::F32 { data, cols, block_rows } => {
                for (r, d) in dst.chunks_exact_mut(*cols).enumerate() {
                    d.copy_from_slice(&data[(n0 + r) / block_rows * cols..][..*cols]);
                }
            }
        }
    }
}

/// Whether a row of E4M3 codes holds a NaN code (`0x7f` or `0xff`).
fn has_e4m3_nan_portable(codes: &[u8]) -> bool {
    codes.iter().fold(0u8, |acc, &b| acc | u8::from(b | 0x80 == 0xff)) != 0
}

/// [`has_e4m3_nan_portable`], with AVX2 where `isa` has it.
fn has_e4m3_nan(isa: Isa, codes: &[u8]) -> bool {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only selected where AVX2 is present.
        Isa::Avx2 => unsafe { x86::has_e4m3_nan(codes) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only selected where AVX-512 F and BW are present.
        Isa::Avx512 => unsafe { x86::has_e4m3_nan_avx512(codes) },
        _ => has_e4m3_nan_portable(codes),
    }
}

/// `out[m * N + n]` as the module docs define it, for the `m x k` row-major activations
/// `x`, with the kernels of `isa`. Results are the same on every ISA.
pub(crate) fn gemm_bytes(isa: Isa, x: &[f32], m: usize, w: &ByteWeights, parallel: bool, out: &mut [f32]) {
    let (n, k) = (w.n, w.k);
    assert!(matches!(w.block, 32 | 128), "block = {}", w.block);
    assert!(k.is_multiple_of(w.block), "k = {k} is not a multiple of block = {}", w.block);
    assert!(x.len() >= m * k, "x holds {} values, {m} x {k} needed", x.len());
    assert!(w.data.len() >= n * w.row_bytes(), "weights hold {} bytes", w.data.len());
    assert_eq!(out.len(), m * n, "out length");
    if m == 0 || n == 0 {
        return;
    }
    let x = &x[..m * k];
    let (row_bytes, cols) = (w.row_bytes(), k / w.block);
    let over = if w.elem.bits() == 6 { OVERREAD } else { 0 };
    run_tasks(m, n, row_bytes, parallel, out, |n0, out_t| {
        let mut all_scales = vec![0f32; out_t.len() / m * cols];
        w.rows_scales(n0, &mut all_scales);
        let mut padded = Vec::new();
        for ((r, o), scales) in out_t.chunks_exact_mut(m).enumerate().zip(all_scales.chunks_exact(cols)) {
            let row = n0 + r;
            let rest = &w.data[row * row_bytes..];
            if w.elem == Elem::E4M3 && has_e4m3_nan(isa, &rest[..row_bytes]) {
                o.fill(f32::NAN);
                continue;
            }
            // The row and the bytes after it that the FP6 loads read (the next row's, or
            // zeros after the last row).
            let codes = if rest.len() >= row_bytes + over {
                rest
            } else {
                padded.clear();
                padded.extend_from_slice(&rest[..row_bytes]);
                padded.resize(row_bytes + over, 0);
                &padded[..]
            };
            let job = Row { x, m, k, codes, scales, block: w.block, elem: w.elem };
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx2` is only selected where `avx2_available()` holds
                // (AVX2, F16C, FMA); the kernel reads only inside `job`'s slices.
                Isa::Avx2 => unsafe { x86::row_avx2(&job, o) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx512` is only selected where `avx512_available()` holds
                // (AVX-512 F, BW and VL on top of AVX2, F16C, FMA).
                Isa::Avx512 => unsafe { x86::row_avx512(&job, o) },
                _ => portable::row(&job, o),
            }
        }
    });
}

/// Bytes past a row of FP6 codes that the SIMD decoder reads (it loads 16 bytes for
/// the 12 that hold 16 codes).
const OVERREAD: usize = 4;

impl Row<'_> {
    /// Panics unless the slices hold what the SIMD kernels read through raw pointers
    /// (their entry points call this once per weight row).
    pub(crate) fn check(&self) {
        let over = if self.elem.bits() == 6 { OVERREAD } else { 0 };
        assert!(matches!(self.block, 32 | 128) && self.k.is_multiple_of(self.block), "block {}", self.block);
        assert!(self.x.len() >= self.m * self.k, "x holds {} values", self.x.len());
        assert_eq!(self.scales.len() * self.block, self.k, "scales");
        assert!(self.codes.len() >= self.k * self.elem.bits() / 8 + over, "codes hold {} bytes", self.codes.len());
    }
}

/// One weight row's work: its codes and decoded scales, against all `m` activation rows.
pub(crate) struct Row<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub k: usize,
    /// The row's codes first, then at least [`OVERREAD`] more bytes for FP6.
    pub codes: &'a [u8],
    pub scales: &'a [f32],
    pub block: usize,
    pub elem: Elem,
}
