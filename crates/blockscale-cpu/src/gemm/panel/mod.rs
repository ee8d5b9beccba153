//! 4-bit, MXFP6 E2M3 and E4M3 (MXFP8, FP8 block) weights rearranged once into 16-row
//! panels for the int8 dot-product kernels (AVX-512 VNNI `vpdpbusd`, or AVX2
//! `vpmaddubsw` + `vpmaddwd`), and the weight-only product on them.
//!
//! # Layout
//!
//! Rows are grouped by 16 (the last panel padded with zero codes and zero scales). A
//! panel's codes are `k / 8` groups of 64 bytes; byte `4 r + i` of group `g` holds the
//! code of (row `r`, element `8 g + i`) in its low nibble and of (row `r`, element
//! `8 g + 4 + i`) in its high nibble, `r < 16`, `i < 4`. Masking the low nibbles of a
//! group gives, in 32-bit lane `r`, the four codes of row `r` that meet activations
//! `8 g .. 8 g + 4`; the high nibbles meet `8 g + 4 .. 8 g + 8`. A panel's scales are
//! `k / block` runs of 16, one per row: (block `b`, row `r`) at `16 b + r`. Nothing is
//! reordered on the activation side, which only broadcasts four bytes at a time.
//!
//! # Arithmetic
//!
//! The activations are quantized per 32 elements exactly as the row-major kernels'
//! int8 mode does (see `nibble`'s module docs: `d = amax / 127`, `q` rounded to even).
//! A weight value `v` in `-o..=o'` is stored as the unsigned `v + o` (`o` = 12 for
//! E2M1 times two, 8 for INT4), so `vpdpbusd` forms `Σ (v + o) q` exactly in i32 and
//! `o Σ q` (per weight block and activation row, computed once per call) is taken off
//! before the block sum is converted to f32. Then, as in the row-major int8 kernels,
//! `out = vscale * Σ_b I_b * (s_b * d_b)` accumulated in f32 (the block's scale times
//! its activation factor rounded once, then one FMA), so the error bound of `nibble`'s
//! int8 mode holds unchanged. Rows holding NaN or infinity are not quantized: a plain
//! f32 computation (its bound is `nibble`'s exact one) makes NaN and infinities
//! propagate.
//!
//! The quantized GEMM of two NVFP4 or two MXFP4 matrices feeds the same kernels A's
//! own codes and block scales instead ([`Acts::from_nibbles`]): nothing is quantized,
//! every block sum is exact.
//!
//! # Six-bit panels (MXFP6 E2M3)
//!
//! E2M3 values are `n / 8` with `|n| <= 60`, so `n + 60` is an unsigned byte of at most
//! 120 and the same arithmetic holds with `o = 60`, `vscale = 1/8` (every block sum
//! exact in i32; `vpmaddubsw` pairs reach `2 * 120 * 127 < 2^15`, so the AVX2 kernel
//! widens each product to i32 on its own). A group is 96 bytes: the 64 bytes above,
//! holding the codes' low four bits, then a 32-byte plane of their top two bits (sign
//! and high exponent bit). Call the low-nibble vector of the group vector 0 and the
//! high-nibble one vector 1, and position `v = 4 r + i` in each the code of row `r`,
//! element `8 g + i` (vector 0) or `8 g + 4 + i` (vector 1). Plane byte `v % 32` holds
//! the top bits of position `v` of vector `j` in bits `2c` (high exponent bit) and
//! `2c + 1` (sign), `c = 2 (v / 32) + j`: each byte serves the four positions (one of
//! each 32-byte half of each vector) that sit at the same place of their 32-byte halves.
//! So a shift of the whole plane by a constant (`vpsllw`) brings any one half-vector's
//! bits to bit 7 of the bytes that meet them (AVX2), and a broadcast of the plane to both
//! halves of a 64-byte vector lets AVX-512's `vpmultishiftqb` select them for 64
//! positions at once.
//! Six-bit panels take the same activations; the byte scales are UE8M0.
//!
//! # Eight-bit panels (E4M3: MXFP8 E4M3, FP8 block)
//!
//! E4M3 values are `n / 2^9` with `|n| < 2^18` (`n = m` for subnormal codes, `(8 + m)
//! << (e - 1)` otherwise), too wide for one int8 but exact in three 7-bit parts: `n =
//! n0 + 2^7 n1 + 2^14 n2` with `n0, n1 < 128` and `n2 <= 14`. A group is 128 bytes, one
//! code a byte: vector 0 (bytes `0..64`) holds position `v = 4 r + i` = (row `r`,
//! element `8 g + i`), vector 1 (bytes `64..128`) element `8 g + 4 + i`. The kernels map a
//! code's magnitude (its low seven bits) to each part with a 128-entry table, negate the
//! activation bytes that meet negative codes, and take one `vpdpbusd` per part; the part
//! sums (exact: at most `32 * 127 * 127` in magnitude) combine exactly as `I = S0 + 2^7 S1
//! + 2^14 S2` (`|I| <= 32 * 127 * 229376 < 2^31`). Nothing is offset (`o = 0`). From there the
//! arithmetic is the 4-bit panels': `out = 2^-9 Σ_b I_b (s_b d_b)`. FP8 block's f32
//! scales are stored once per 128 columns (`sblock`), MXFP8's UE8M0 bytes once per 32.
//! A weight row holding an E4M3 NaN code (`0x7f`, `0xff`) gives NaN outputs.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod drive;
mod portable;
#[cfg(test)]
mod tests;

use half::f16;
use rayon::prelude::*;

use blockscale_formats::ScaleFormat;

use super::nibble::{NibbleWeights, ScaleIndex, Scales};
use crate::kernels::Isa;
pub use crate::kernels::{vbmi_available, vnni_available};

/// Rows per panel.
pub(crate) const ROWS: usize = 16;

/// Elements per activation quantization block.
const XBLOCK: usize = 32;

/// The code width of a [`Panels`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    /// 4-bit codes (E2M1, INT4): 64-byte groups.
    Four,
    /// E2M3 codes: 96-byte groups (low nibbles, then a plane of the top two bits).
    Six,
    /// E4M3 codes, one a byte: 128-byte groups, three int8 parts a value.
    Eight,
}

impl Width {
    /// Bytes per group of 16 rows x 8 elements.
    pub(crate) const fn group_bytes(self) -> usize {
        match self {
            Self::Four => 64,
            Self::Six => 96,
            Self::Eight => 128,
        }
    }
}

/// The block scales of a [`Panels`], in panel order.
pub(crate) enum PanelScales {
    /// One byte per scale, UE4M3 or UE8M0, with its decoding table. `plain` says that
    /// no scale of a real row is a code the SIMD kernels' shift decoding gets wrong
    /// (UE8M0 `0x00` and `0xff`, UE4M3 `0x7f` and up), so they may skip the patching.
    Bytes { data: Vec<u8>, format: ScaleFormat, lut: Box<[f32; 256]>, plain: bool },
    /// f16 scales (INT4-G32).
    F16(Vec<f16>),
    /// f32 scales (FP8 block).
    F32(Vec<f32>),
}

/// Weights in the panel layout (see the module docs).
pub(crate) struct Panels {
    /// Output features (rows of W).
    pub n: usize,
    /// Reduction length, a multiple of `block`.
    pub k: usize,
    /// Elements per product block (one activation factor, one i32 block sum): 16 or 32.
    pub block: usize,
    /// Elements per stored scale along K: `block`, or 128 for FP8 block's scales.
    pub sblock: usize,
    /// The code width.
    pub width: Width,
    /// Code to the unsigned operand `value + offset` (four- and six-bit codes; entries
    /// past 16 unused for four-bit ones).
    pub unsigned: [u8; 64],
    /// E4M3 magnitude (code & 0x7f) to its three parts `n_i` (see the module docs);
    /// empty for other widths.
    pub parts: Vec<[u8; 128]>,
    /// Code to its integer value (as [`NibbleWeights::values`]; E2M3 codes give eight
    /// times their value, E4M3 codes `2^9` times theirs, NaN codes 0).
    pub values: [i32; 256],
    /// Weight rows holding a NaN code: their outputs are NaN.
    pub nan_rows: Vec<usize>,
    /// What `unsigned` adds to every value.
    pub offset: i32,
    /// Element value = `values[code] * vscale`.
    pub vscale: f32,
    /// `[panels, k / 8, width.group_bytes()]` bytes (see the module docs).
    pub codes: Vec<u8>,
    /// `[panels, k / sblock, 16]`.
    pub scales: PanelScales,
}

impl Panels {
    /// Rearranges row-major nibble weights (`w.k` a multiple of 16) into panels.
    pub(crate) fn pack(w: &NibbleWeights<'_>, format: Option<ScaleFormat>) -> Self {
        let kh = w.k / 2;
        let values = core::array::from_fn(|c| if c < 16 { i32::from(w.values[c]) } else { 0 });
        let codes = |row: usize, out: &mut [u8]| {
            for (two, b) in out.chunks_exact_mut(2).zip(&w.data[row * kh..(row + 1) * kh]) {
                two[0] = b & 0xf;
                two[1] = b >> 4;
            }
        };
        let scales = panel_scales(&w.scales, format, w.n, w.k / w.block);
        Self::build((w.n, w.k, w.block, Width::Four), values, w.vscale, scales, w.block, codes)
    }

    /// Rearranges row-major MXFP6 E2M3 weights (`data`: each row's `k` codes packed four
    /// per three bytes, `k` a multiple of 32) into six-bit panels, with their UE8M0 block
    /// scales already in panel order ([`panel_scales`]).
    pub(crate) fn pack_e2m3(data: &[u8], n: usize, k: usize, scales: PanelScales) -> Self {
        let values = core::array::from_fn(|c| (blockscale_formats::E2M3::from_bits(c as u8).to_f32() * 8.0) as i32);
        let kp = k / 4 * 3;
        let codes = |row: usize, out: &mut [u8]| {
            crate::kernels::unpack_fp6(Isa::Portable, &data[row * kp..(row + 1) * kp], out);
        };
        Self::build((n, k, 32, Width::Six), values, 0.125, scales, 32, codes)
    }

    /// Rearranges row-major E4M3 weights (`data`: `n x k` codes, `k` a multiple of 32)
    /// into eight-bit panels, with `scales` already in panel order and covering `sblock`
    /// elements each (32 for MXFP8's UE8M0 bytes, 128 for FP8 block's f32).
    pub(crate) fn pack_e4m3(data: &[u8], n: usize, k: usize, scales: PanelScales, sblock: usize) -> Self {
        // `2^9` times the value (an integer below 2^18); NaN codes 0 (their rows are
        // flagged below).
        let values: [i32; 256] = core::array::from_fn(|c| {
            let v = blockscale_formats::E4M3::from_bits(c as u8).to_f32();
            if v.is_nan() { 0 } else { (v * 512.0) as i32 }
        });
        let codes = |row: usize, out: &mut [u8]| out.copy_from_slice(&data[row * k..(row + 1) * k]);
        let mut p = Self::build((n, k, 32, Width::Eight), values, 2f32.powi(-9), scales, sblock, codes);
        p.parts = (0..3)
            .map(|i| {
                core::array::from_fn(|mag| {
                    let n = values[mag];
                    (if i < 2 { (n >> (7 * i)) & 127 } else { n >> 14 }) as u8
                })
            })
            .collect();
        p.offset = 0;
        p.nan_rows = (0..n).filter(|&r| data[r * k..(r + 1) * k].iter().any(|&c| c & 0x7f == 0x7f)).collect();
        p
    }

    /// The panels of `n x k` codes in blocks of `block` (`codes(row, out)` writes row
    /// `row`'s `k` codes), with their integer `values`, `vscale` and block scales (in
    /// panel order, one per `sblock` elements).
    fn build(
        (n, k, block, width): (usize, usize, usize, Width),
        values: [i32; 256],
        vscale: f32,
        scales: PanelScales,
        sblock: usize,
        codes_of: impl Fn(usize, &mut [u8]) + Sync,
    ) -> Self {
        assert!(k.is_multiple_of(16) && k.is_multiple_of(sblock) && sblock.is_multiple_of(block), "k = {k}");
        let panels = n.div_ceil(ROWS);
        let (groups, gb) = (k / 8, width.group_bytes());
        let mut codes = vec![0u8; panels * groups * gb];
        codes.par_chunks_mut(groups * gb).enumerate().for_each(|(p, panel)| {
            // The panel's rows as one code per byte (padding rows: code 0).
            let mut rows = vec![0u8; ROWS * k];
            for (r, out) in rows.chunks_exact_mut(k.max(1)).enumerate() {
                if p * ROWS + r < n {
                    codes_of(p * ROWS + r, out);
                }
            }
            for (g, group) in panel.chunks_exact_mut(gb).enumerate() {
                for r in 0..ROWS {
                    for i in 0..4 {
                        let (c0, c1) = (rows[r * k + 8 * g + i], rows[r * k + 8 * g + 4 + i]);
                        let v = 4 * r + i;
                        if width == Width::Eight {
                            (group[v], group[64 + v]) = (c0, c1);
                            continue;
                        }
                        group[v] = (c0 & 0xf) | (c1 << 4);
                        if width == Width::Six {
                            for (vector, c) in [(0, c0), (1, c1)] {
                                group[64 + plane_byte(v)] |= (c >> 4) << plane_shift(vector, v);
                            }
                        }
                    }
                }
            }
        });
        let used = match width {
            Width::Four => 16,
            Width::Six => 64,
            Width::Eight => 0,
        };
        let offset = -values[..used].iter().copied().min().unwrap_or(0).min(0);
        let unsigned = core::array::from_fn(|c| if c < used { (values[c] + offset) as u8 } else { 0 });
        let (parts, nan_rows) = (Vec::new(), Vec::new());
        Self { n, k, block, sblock, width, unsigned, parts, values, nan_rows, offset, vscale, codes, scales }
    }

    /// Bytes per group of 16 rows x 8 elements.
    pub(crate) fn group_bytes(&self) -> usize {
        self.width.group_bytes()
    }

    /// Index of the first of the 16 scales of panel `pi` and product block `b`.
    #[inline(always)]
    pub(crate) fn scale_at(&self, pi: usize, b: usize) -> usize {
        (pi * (self.k / self.sblock) + b * self.block / self.sblock) * ROWS
    }

    /// Panels.
    pub(crate) fn panels(&self) -> usize {
        self.n.div_ceil(ROWS)
    }

    /// Scale (panel `p`, product block `b`, row `r`) as f32.
    pub(crate) fn scale(&self, p: usize, b: usize, r: usize) -> f32 {
        let i = self.scale_at(p, b) + r;
        match &self.scales {
            PanelScales::Bytes { data, lut, .. } => lut[usize::from(data[i])],
            PanelScales::F16(data) => data[i].to_f32(),
            PanelScales::F32(data) => data[i],
        }
    }

    /// Code of (row `row`, element `e`).
    pub(crate) fn code(&self, row: usize, e: usize) -> u8 {
        let (p, r) = (row / ROWS, row % ROWS);
        let (g, j) = (e / 8, e % 8);
        let (base, v, vector) = ((p * (self.k / 8) + g) * self.group_bytes(), 4 * r + j % 4, j / 4);
        if self.width == Width::Eight {
            return self.codes[base + 64 * vector + v];
        }
        let b = self.codes[base + v];
        let low = if vector == 0 { b & 0xf } else { b >> 4 };
        if self.width == Width::Four {
            return low;
        }
        low | ((self.codes[base + 64 + plane_byte(v)] >> plane_shift(vector, v)) & 3) << 4
    }

    /// Bytes held (codes and scales).
    pub(crate) fn storage_bytes(&self) -> usize {
        self.codes.len()
            + match &self.scales {
                PanelScales::Bytes { data, .. } => data.len(),
                PanelScales::F16(data) => 2 * data.len(),
                PanelScales::F32(data) => 4 * data.len(),
            }
    }
}

/// Byte or f16 block scales (`cols` per row of `n`) in panel order.
pub(crate) fn panel_scales(w_scales: &Scales<'_>, format: Option<ScaleFormat>, n: usize, cols: usize) -> PanelScales {
    let index = w_scales.index();
    match w_scales {
        Scales::Bytes { data, lut, .. } => {
            let format = format.expect("byte scales have a format");
            let data = panel_order(data, n, cols, index);
            let plain = plain_codes(&data, format, n, cols);
            PanelScales::Bytes { data, format, lut: Box::new(**lut), plain }
        }
        Scales::F16 { data, .. } => PanelScales::F16(panel_order(data, n, cols, index)),
    }
}

/// f32 scales of `n` rows in panel order (padding rows 0), `rows(r, dst)` writing row
/// `r`'s `cols` of them.
pub(crate) fn panel_scales_f32(n: usize, cols: usize, rows: impl Fn(usize, &mut [f32])) -> PanelScales {
    let mut out = vec![0f32; n.div_ceil(ROWS) * cols * ROWS];
    let mut row = vec![0f32; cols];
    for r in 0..n {
        rows(r, &mut row);
        for (c, &v) in row.iter().enumerate() {
            out[((r / ROWS) * cols + c) * ROWS + r % ROWS] = v;
        }
    }
    PanelScales::F32(out)
}

/// The plane byte (from the plane's start) holding the top bits of position `v` of a
/// vector (see the module docs).
fn plane_byte(v: usize) -> usize {
    v % 32
}

/// Where in its plane byte the top bits of position `v` of `vector` sit.
fn plane_shift(vector: usize, v: usize) -> usize {
    2 * (2 * (v / 32) + vector)
}

/// Scales `data` (rows `0..n`, `cols` per row, stored as `index` says) in panel order
/// `[panels, cols, 16]`, the padding rows `T::default()`.
fn panel_order<T: Copy + Default>(data: &[T], n: usize, cols: usize, index: ScaleIndex) -> Vec<T> {
    let mut out = vec![T::default(); n.div_ceil(ROWS) * cols * ROWS];
    for (p, panel) in out.chunks_exact_mut(cols * ROWS).enumerate() {
        for (c, run) in panel.chunks_exact_mut(ROWS).enumerate() {
            for (r, s) in run.iter_mut().enumerate().take(n.saturating_sub(p * ROWS)) {
                *s = data[index.at(p * ROWS + r, c)];
            }
        }
    }
    out
}

/// Whether no scale code of a real row (panel-ordered `data` of `n` rows, `cols` per
/// row) needs more than a shift to decode: UE8M0 `0x00` (2^-127, an f32 subnormal) and
/// `0xff` (NaN), UE4M3 `0x7f` and up (NaN). Padding rows do not count: their outputs are
/// never read.
fn plain_codes(data: &[u8], format: ScaleFormat, n: usize, cols: usize) -> bool {
    let special = |c: u8| if format == ScaleFormat::UE4M3 { c >= 0x7f } else { c == 0 || c == 0xff };
    if cols == 0 {
        return true;
    }
    data.chunks_exact(cols * ROWS).enumerate().all(|(p, panel)| {
        let rows = (n - p * ROWS).min(ROWS);
        panel.chunks_exact(ROWS).all(|run| !run[..rows].iter().any(|&c| special(c)))
    })
}

/// The int8 activations of a call: `q` (`m x k`), their factors `d` (`m x
/// ceil(k / dblock)`, one per `dblock` elements, a multiple of the weights' block) and
/// the offset corrections `corr[i][b] = -offset * Σ_{k in weight block b} q[i][k]`.
pub(crate) struct Acts {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub dblock: usize,
    pub corr: Vec<i32>,
}

/// Rows of an [`Acts`], as the kernels read them (row 0 here is the first row taken).
pub(crate) struct ActRows<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub dblock: usize,
    pub corr: &'a [i32],
}

impl Acts {
    /// Activation rows `r0..r1` for weights of `k` elements in blocks of `block`.
    pub(crate) fn rows(&self, r0: usize, r1: usize, k: usize, block: usize) -> ActRows<'_> {
        let (xb, cols) = (k.div_ceil(self.dblock), k / block);
        ActRows {
            q: &self.q[r0 * k..r1 * k],
            d: &self.d[r0 * xb..r1 * xb],
            dblock: self.dblock,
            corr: &self.corr[r0 * cols..r1 * cols],
        }
    }

    /// `x` (`m x k`, finite) quantized per 32 elements.
    fn new(x: &[f32], m: usize, p: &Panels) -> Self {
        let k = p.k;
        let xb = k.div_ceil(XBLOCK);
        let mut q = vec![0i8; m * k];
        let mut d = vec![0f32; m * xb];
        for i in 0..m {
            let (row, qr) = (&x[i * k..(i + 1) * k], &mut q[i * k..(i + 1) * k]);
            super::nibble::quantize_row(row, qr, &mut d[i * xb..(i + 1) * xb]);
        }
        Self::with(q, d, XBLOCK, p, false)
    }

    /// A quantized left operand of the panels' scheme (row-major nibbles and block
    /// scales, as `w` describes it): its codes' integer values are the int8
    /// activations, and each block's factor is its scale times the value factor
    /// `vscale` (a power of two, so exact while it stays normal, which the caller checks).
    pub(crate) fn from_nibbles(w: &NibbleWeights<'_>, p: &Panels, parallel: bool) -> Self {
        let (m, k, block) = (w.n, w.k, w.block);
        let cols = k / block;
        let mut q = vec![0i8; m * k];
        let mut d = vec![0f32; m * cols];
        let index = w.scales.index();
        // Both codes of a byte at once.
        let pairs: [[i8; 2]; 256] = core::array::from_fn(|b| [w.values[b & 0xf], w.values[b >> 4]]);
        let work = |(i, (qr, dr)): (usize, (&mut [i8], &mut [f32]))| {
            for (two, byte) in qr.chunks_exact_mut(2).zip(&w.data[i * k / 2..(i + 1) * k / 2]) {
                two.copy_from_slice(&pairs[usize::from(*byte)]);
            }
            for (c, dc) in dr.iter_mut().enumerate() {
                let s = match &w.scales {
                    Scales::Bytes { data, lut, .. } => lut[usize::from(data[index.at(i, c)])],
                    Scales::F16 { data, .. } => data[index.at(i, c)].to_f32(),
                };
                *dc = s * w.vscale;
            }
        };
        let (kc, cc) = (k.max(1), cols.max(1));
        if parallel {
            q.par_chunks_mut(kc).zip(d.par_chunks_mut(cc)).enumerate().for_each(work);
        } else {
            q.chunks_mut(kc).zip(d.chunks_mut(cc)).enumerate().for_each(work);
        }
        Self::with(q, d, block, p, parallel)
    }

    /// Integer activations `q` (`m x k`) with one factor per `dblock` elements.
    pub(crate) fn with(q: Vec<i8>, d: Vec<f32>, dblock: usize, p: &Panels, parallel: bool) -> Self {
        let cols = p.k / p.block;
        let mut corr = vec![0i32; q.len() / p.k.max(1) * cols];
        let row = |(qr, cr): (&[i8], &mut [i32])| {
            for (chunk, c) in qr.chunks_exact(p.block).zip(cr) {
                *c = -p.offset * chunk.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        };
        let (kc, cc) = (p.k.max(1), cols.max(1));
        if parallel {
            q.par_chunks(kc).zip(corr.par_chunks_mut(cc)).for_each(row);
        } else {
            q.chunks(kc).zip(corr.chunks_mut(cc)).for_each(row);
        }
        Self { q, d, dblock, corr }
    }
}

/// Which kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl Kernel {
    /// The panel kernel of an instruction set for panels of `width`: AVX-512 VNNI where
    /// the ISA has it (and VBMI for six- and eight-bit panels), else AVX2 (on AVX-512
    /// CPUs without them too; eight-bit panels have no AVX2 kernel), else the portable
    /// one.
    pub(crate) fn of(isa: Isa, width: Width) -> Self {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 if isa.vnni() && (width == Width::Four || isa.vbmi()) => Self::Avx512Vnni,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 if width != Width::Eight => Self::Avx2,
            _ => Self::Portable,
        }
    }
}

/// Scale kinds, the SIMD kernels' const parameters: the byte formats with every code
/// decoded (special codes patched), the same without the patching for scales that hold
/// no special code (`PanelScales::Bytes::plain`), and f16.
pub(crate) const UE8M0: u8 = 0;
pub(crate) const UE4M3: u8 = 1;
pub(crate) const F16: u8 = 2;
pub(crate) const UE8M0_PLAIN: u8 = 3;
pub(crate) const UE4M3_PLAIN: u8 = 4;
pub(crate) const F32: u8 = 5;

/// Checks every length a SIMD kernel reads and writes for panels `p0..p1` and the `m`
/// activation rows of `a` into `buf` (`[m, buf.len() / m]`); returns the row stride of
/// `buf` and the scale kind.
pub(crate) fn check_kernel_inputs(
    a: &ActRows<'_>,
    m: usize,
    p: &Panels,
    p0: usize,
    p1: usize,
    buf: &[f32],
) -> (usize, u8) {
    let (k, block) = (p.k, p.block);
    assert!(m > 0 && buf.len().is_multiple_of(m));
    let stride = buf.len() / m;
    let cols = k / block;
    assert!(p0 <= p1 && p1 <= p.panels() && (p1 - p0) * ROWS <= stride);
    assert!(block == 16 || block == 32);
    assert!(a.dblock > 0 && a.dblock.is_multiple_of(block), "an activation factor covers whole weight blocks");
    assert!(a.q.len() >= m * k && a.d.len() >= m * k.div_ceil(a.dblock) && a.corr.len() >= m * cols);
    assert!(p.codes.len() >= p.panels() * (k / 8) * p.group_bytes());
    let ue8m0 = matches!(p.scales, PanelScales::Bytes { format: ScaleFormat::UE8M0, .. });
    match p.width {
        Width::Four => assert!(p.sblock == block && !matches!(p.scales, PanelScales::F32(_))),
        Width::Six => assert!(block == 32 && p.sblock == 32 && ue8m0, "six-bit panels: UE8M0 scales a block of 32"),
        Width::Eight => {
            let f32s = matches!(p.scales, PanelScales::F32(_));
            assert!(block == 32 && p.parts.len() == 3 && (ue8m0 && p.sblock == 32 || f32s), "eight-bit panels");
        }
    }
    assert!(p.sblock.is_multiple_of(block) && k.is_multiple_of(p.sblock));
    let scales = p.panels() * (k / p.sblock) * ROWS;
    let kind = match &p.scales {
        PanelScales::Bytes { data, format, plain, .. } => {
            assert!(data.len() >= scales);
            match (*format == ScaleFormat::UE4M3, *plain) {
                (true, true) => UE4M3_PLAIN,
                (true, false) => UE4M3,
                (false, true) => UE8M0_PLAIN,
                (false, false) => UE8M0,
            }
        }
        PanelScales::F16(data) => {
            assert!(data.len() >= scales);
            F16
        }
        PanelScales::F32(data) => {
            assert!(data.len() >= scales);
            F32
        }
    };
    (stride, kind)
}

/// Panels per rayon task: enough tasks to balance the pool, each with at least
/// ~32 KiB of weights.
fn panels_per_task(p: &Panels) -> usize {
    let panels = p.panels();
    let tasks = 8 * rayon::current_num_threads();
    let min = (32 * 1024 / (p.k / 8 * p.group_bytes()).max(1)).max(1);
    panels.div_ceil(tasks).max(min).min(panels).max(1)
}

/// `out[i * n + j] = vscale * Σ_b s(j, b) Σ_{k in b} x[i, k] values[code(j, k)]` for
/// the row-major `m x k` activations `x`, activations quantized to int8 per 32 (rows
/// with NaN or infinity computed in f32 instead).
pub(crate) fn gemm_panels(kernel: Kernel, x: &[f32], m: usize, p: &Panels, parallel: bool, out: &mut [f32]) {
    products(kernel, x, m, p, parallel, out);
    // Rows with a NaN code: any sum holding a NaN term is NaN.
    for &j in &p.nan_rows {
        for o in out.iter_mut().skip(j).step_by(p.n) {
            *o = f32::NAN;
        }
    }
}

/// [`gemm_panels`] before the NaN codes' rows are set.
fn products(kernel: Kernel, x: &[f32], m: usize, p: &Panels, parallel: bool, out: &mut [f32]) {
    let (n, k) = (p.n, p.k);
    assert!(x.len() == m * k && out.len() == m * n, "x {} / out {} for {m} x {k} x {n}", x.len(), out.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let finite: Vec<bool> = x.chunks_exact(k).map(|r| r.iter().all(|v| v.is_finite())).collect();
    let int8_rows: Vec<usize> = (0..m).filter(|&i| finite[i]).collect();
    if int8_rows.len() < m {
        for i in (0..m).filter(|&i| !finite[i]) {
            portable::f32_row(&x[i * k..(i + 1) * k], p, &mut out[i * n..(i + 1) * n]);
        }
        if int8_rows.is_empty() {
            return;
        }
    }
    let mi = int8_rows.len();
    let xs: std::borrow::Cow<'_, [f32]> = if mi == m {
        std::borrow::Cow::Borrowed(x)
    } else {
        int8_rows.iter().flat_map(|&i| &x[i * k..(i + 1) * k]).copied().collect()
    };
    let acts = Acts::new(&xs, mi, p);
    let rows = run(kernel, &acts, mi, p, parallel);
    for (r, &i) in int8_rows.iter().enumerate() {
        out[i * n..(i + 1) * n].copy_from_slice(&rows[r * n..(r + 1) * n]);
    }
}

/// Activation rows per task where tasks split the rows (see [`run`]).
const ROWS_PER_TASK: usize = 32;

/// The `m x n` products of the activations `a` and the panels, row-major.
///
/// With enough rows (a GEMM), tasks take [`ROWS_PER_TASK`] activation rows each against
/// every panel and write straight into their rows of the output; with few (decode),
/// tasks take a range of panels against every row, each into its own buffer, gathered
/// at the end. The arithmetic of an output is the same either way.
pub(crate) fn run(kernel: Kernel, a: &Acts, m: usize, p: &Panels, parallel: bool) -> Vec<f32> {
    let (n, k, block) = (p.n, p.k, p.block);
    // Six- and eight-bit panels need VBMI on top of VNNI, and eight-bit ones have no
    // AVX2 kernel (`Kernel::of` knows; a kernel named directly without them takes the
    // next one).
    #[cfg(target_arch = "x86_64")]
    let kernel = match kernel {
        Kernel::Avx512Vnni if p.width != Width::Four && !crate::kernels::vbmi_available() => {
            Kernel::of(Isa::Avx2, p.width)
        }
        Kernel::Avx2 if p.width == Width::Eight => Kernel::Portable,
        other => other,
    };
    let call = |rows: &ActRows<'_>, mm: usize, p0: usize, p1: usize, buf: &mut [f32]| match kernel {
        Kernel::Portable => portable::rows(rows, mm, p, p0, p1, buf),
        // SAFETY: `Kernel::of` only picks `Avx512Vnni` where `Isa::vnni` holds (and,
        // as checked above, six-bit panels take it only with VBMI) and `Avx2` where
        // `avx2_available()`; the kernels check every length they read and write.
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni if p.width == Width::Six => unsafe { avx512::rows_six(rows, mm, p, p0, p1, buf) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni if p.width == Width::Eight => unsafe { avx512::rows_eight(rows, mm, p, p0, p1, buf) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni => unsafe { avx512::rows(rows, mm, p, p0, p1, buf) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 if p.width == Width::Six => unsafe { avx2::rows_six(rows, mm, p, p0, p1, buf) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { avx2::rows(rows, mm, p, p0, p1, buf) },
    };
    if m == 0 || n == 0 {
        return vec![0f32; m * n];
    }
    let row_tasks = m.div_ceil(ROWS_PER_TASK);
    if !parallel || row_tasks >= 4 * rayon::current_num_threads() {
        // Rows of `ns` floats (whole panels), trimmed to `n` at the end if they differ.
        let ns = p.panels() * ROWS;
        let mut out = vec![0f32; m * ns];
        let per = if parallel { ROWS_PER_TASK } else { m };
        let task = |(t, buf): (usize, &mut [f32])| {
            let (r0, r1) = (t * per, ((t + 1) * per).min(m));
            call(&a.rows(r0, r1, k, block), r1 - r0, 0, p.panels(), buf);
        };
        if parallel {
            out.par_chunks_mut(per * ns).enumerate().for_each(task);
        } else {
            out.chunks_mut(per * ns).enumerate().for_each(task);
        }
        if ns != n {
            for i in 1..m {
                out.copy_within(i * ns..i * ns + n, i * n);
            }
            out.truncate(m * n);
        }
        return out;
    }
    let per = panels_per_task(p);
    let cols = per * ROWS;
    let all = a.rows(0, m, k, block);
    // Each task computes `m x (its panels' rows)` into its own buffer.
    let task = |t: usize, buf: &mut [f32]| {
        let (p0, p1) = (t * per, ((t + 1) * per).min(p.panels()));
        call(&all, m, p0, p1, buf);
    };
    let tasks = p.panels().div_ceil(per);
    let mut bufs: Vec<Vec<f32>> = (0..tasks).map(|_| vec![0f32; m * cols]).collect();
    bufs.par_iter_mut().enumerate().for_each(|(t, b)| task(t, b));
    let mut out = vec![0f32; m * n];
    let gather = |(i, row): (usize, &mut [f32])| {
        for (t, buf) in bufs.iter().enumerate() {
            let j0 = t * cols;
            let w = cols.min(n - j0);
            row[j0..j0 + w].copy_from_slice(&buf[i * cols..i * cols + w]);
        }
    };
    if m > 1 {
        out.par_chunks_mut(n).enumerate().for_each(gather);
    } else {
        out.chunks_mut(n).enumerate().for_each(gather);
    }
    out
}
