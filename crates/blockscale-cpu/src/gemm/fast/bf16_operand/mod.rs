//! The operands of the BF16 dot-product kernels (`dot::bf16_tile`,
//! `dot::bf16_scaled_tile`), decoded straight from the codes in one pass: A as rows of
//! bf16, B packed into panels of [`PANEL`] rows, each as either the element values
//! with the f32 block scales beside them or the elements already times their scales
//! (where that is exact in bf16). No f32 copy of either matrix is made.
//!
//! Two routes give the same bits: row-major 8-bit codes (MXFP8, FP8 block) take the
//! AVX-512 decoder (`avx512.rs`, 32 codes a step, panels through a word
//! transposition); the other formats and layouts are decoded by `RowDecoder` into a
//! buffer (a panel 128 columns at a time, so the part being written stays in L1) and
//! copied. Both compute each value as `value * factor` in f32, exactly, and keep its
//! high half.

mod avx512;
#[cfg(test)]
mod tests;

use blockscale_formats::{DataLayout, ElementFormat, QuantizedMatrix, ScaleData};
use half::bf16;
use rayon::prelude::*;

use super::dot::PANEL;
use crate::dequantize::RowDecoder;
use crate::kernels::Isa;

/// What an operand's bf16 values are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Values {
    /// The element values (exact in bf16: at most four significant bits), the block
    /// scales kept apart in f32.
    Elements,
    /// The elements times their block scales, for operands whose products are exact
    /// in bf16 (`prescale_ok` with a budget of 8 bits); no scales kept.
    Scaled,
}

/// A's rows: `rows x kp` bf16 values (columns `k..kp` zero) and, for
/// [`Values::Elements`], the `rows x k/block` block scales.
pub(super) struct Rows {
    pub values: Vec<bf16>,
    pub scales: Vec<f32>,
}

/// B's panels: for each panel of [`PANEL`] rows and each K pair `t < kp / 2`, the words
/// `b[32p + l, 2t] | b[32p + l, 2t + 1] << 16` (the operand layout of a BF16 pair dot
/// product), and for [`Values::Elements`] the block scales laid out the same way (for
/// each block, the panel's 32 rows); missing rows and columns zero.
pub(super) struct Panels {
    pub values: Vec<u32>,
    pub scales: Vec<f32>,
}

/// Columns decoded at a time into a panel (a multiple of every block size).
const CHUNK: usize = 128;

/// Whether every bf16 is finite (no NaN or infinity: exponent bits not all ones).
fn all_finite(v: &[bf16]) -> bool {
    v.iter().fold(0u16, |bad, x| bad | u16::from(x.to_bits() & 0x7f80 == 0x7f80)) == 0
}

/// Every block scale of `q` (`rows x k/block`, a 128 x 128 tile's scale repeated for
/// each of its rows), as `q.scale` gives them; `None` if any is NaN or infinite.
fn scale_table(q: &QuantizedMatrix, parallel: bool) -> Option<Vec<f32>> {
    let (nb, br) = (q.k() / q.scheme().block_size(), q.scheme().block_rows());
    let lut = super::scale_lut(q.scheme().scale_format());
    let (layout, cols) = (q.scale_layout(), q.shape().scale_cols);
    let mut out = vec![0f32; q.rows() * nb];
    let row = |(r, s): (usize, &mut [f32])| {
        let sr = r / br;
        for (c, s) in s.iter_mut().enumerate() {
            let i = layout.offset(sr, c, cols);
            *s = match q.scales() {
                ScaleData::Bytes(v) => lut[usize::from(v[i])],
                ScaleData::F32(v) => v[i],
                ScaleData::F16(v) => v[i].to_f32(),
            };
        }
        s.iter().all(|v| v.is_finite())
    };
    let ok = match (parallel, nb) {
        (_, 0) => true,
        (true, _) => out.par_chunks_mut(nb).enumerate().map(row).all(|ok| ok),
        (false, _) => out.chunks_mut(nb).enumerate().map(row).fold(true, |a, b| a & b),
    };
    ok.then_some(out)
}

/// The scales `values` needs (none for [`Values::Scaled`]) and the factors each block
/// is decoded with: the row's scales for [`Values::Scaled`], ones otherwise.
struct Factors {
    table: Vec<f32>,
    ones: Vec<f32>,
    nb: usize,
    values: Values,
}

impl Factors {
    fn new(q: &QuantizedMatrix, values: Values, parallel: bool) -> Option<Self> {
        let nb = q.k() / q.scheme().block_size();
        // `Scaled` operands passed `prescale_ok`, so their scales are finite.
        let table = scale_table(q, parallel)?;
        Some(Self { table, ones: vec![1.0; nb], nb, values })
    }

    /// The factors of blocks `b0..b1` of row `r`.
    fn of(&self, r: usize, b0: usize, b1: usize) -> &[f32] {
        match self.values {
            Values::Elements => &self.ones[b0..b1],
            Values::Scaled => &self.table[r * self.nb + b0..r * self.nb + b1],
        }
    }

    /// The factor of block `b` of row `r`.
    fn one(&self, r: usize, b: usize) -> f32 {
        match self.values {
            Values::Elements => 1.0,
            Values::Scaled => self.table[r * self.nb + b],
        }
    }

    /// The scales the kernel takes: the table for [`Values::Elements`], none otherwise.
    fn kept(self) -> Vec<f32> {
        match self.values {
            Values::Elements => self.table,
            Values::Scaled => Vec::new(),
        }
    }
}

/// Row-major 8-bit codes on a CPU with AVX-512: whether they are E5M2 (else E4M3).
fn codes8(q: &QuantizedMatrix, isa: Isa) -> Option<bool> {
    let e5m2 = match q.scheme().element() {
        ElementFormat::E4M3 => false,
        ElementFormat::E5M2 => true,
        _ => return None,
    };
    let ok = isa == Isa::Avx512 && crate::avx512_available() && q.data_layout() == DataLayout::RowMajor;
    (ok && q.k().is_multiple_of(avx512::STEP) && q.scheme().block_size().is_multiple_of(avx512::STEP)).then_some(e5m2)
}

/// A's rows, each row of `q` decoded into `kp` (>= K) bf16; `None` if any value or
/// scale is NaN or infinite (the kernels need them finite).
pub(super) fn rows(q: &QuantizedMatrix, isa: Isa, values: Values, kp: usize, parallel: bool) -> Option<Rows> {
    let (k, nb) = (q.k(), q.k() / q.scheme().block_size());
    let factors = Factors::new(q, values, parallel)?;
    let mut out = vec![bf16::ZERO; q.rows() * kp];
    let ok = if let Some(e5m2) = codes8(q, isa) {
        let (data, bs) = (q.data(), q.scheme().block_size());
        let post = avx512::post(e5m2);
        let work = |(r, row): (usize, &mut [bf16])| {
            let (codes, factor) = (&data[r * k..(r + 1) * k], |g| factors.one(r, g * avx512::STEP / bs) * post);
            // SAFETY: `codes8` found AVX-512 F and BW.
            let bad = unsafe {
                if e5m2 {
                    avx512::row::<{ avx512::E5M2 }>(codes, factor, row)
                } else {
                    avx512::row::<{ avx512::E4M3 }>(codes, factor, row)
                }
            };
            !bad
        };
        if parallel {
            out.par_chunks_mut(kp).enumerate().map(work).all(|ok| ok)
        } else {
            out.chunks_mut(kp).enumerate().map(work).fold(true, |a, b| a & b)
        }
    } else {
        let work = |dec: &mut RowDecoder<'_>, (r, row): (usize, &mut [bf16])| {
            dec.decode_cols(r, 0..k, factors.of(r, 0, nb), &mut row[..k]);
            all_finite(&row[..k])
        };
        if parallel {
            out.par_chunks_mut(kp).enumerate().map_init(|| RowDecoder::new(q, isa), work).all(|ok| ok)
        } else {
            let mut dec = RowDecoder::new(q, isa);
            out.chunks_mut(kp).enumerate().map(|item| work(&mut dec, item)).fold(true, |a, b| a & b)
        }
    };
    ok.then(|| Rows { values: out, scales: factors.kept() })
}

/// B's panels, each row of `q` decoded into `kp` (>= K) bf16; `None` if any value or
/// scale is NaN or infinite.
pub(super) fn panels(q: &QuantizedMatrix, isa: Isa, values: Values, kp: usize, parallel: bool) -> Option<Panels> {
    let (n, k, bs) = (q.rows(), q.k(), q.scheme().block_size());
    let nb = k / bs;
    let factors = Factors::new(q, values, parallel)?;
    let (pairs, count) = (kp / 2, n.div_ceil(PANEL));
    let mut out = vec![0u32; count * pairs * PANEL];
    let ok = if let Some(e5m2) = codes8(q, isa) {
        let post = avx512::post(e5m2);
        let work = |(p, panel): (usize, &mut [u32])| {
            let rows: [Option<&[u8]>; PANEL] = core::array::from_fn(|l| {
                let r = p * PANEL + l;
                (r < n).then(|| &q.data()[r * k..(r + 1) * k])
            });
            let factor = |l, g| factors.one(p * PANEL + l, g * avx512::STEP / bs) * post;
            // SAFETY: `codes8` found AVX-512 F and BW.
            let bad = unsafe {
                if e5m2 {
                    avx512::panel::<{ avx512::E5M2 }>(&rows, k, factor, panel)
                } else {
                    avx512::panel::<{ avx512::E4M3 }>(&rows, k, factor, panel)
                }
            };
            !bad
        };
        if parallel {
            out.par_chunks_mut(pairs * PANEL).enumerate().map(work).all(|ok| ok)
        } else {
            out.chunks_mut(pairs * PANEL).enumerate().map(work).fold(true, |a, b| a & b)
        }
    } else {
        let work = |(dec, buf): &mut (RowDecoder<'_>, Vec<bf16>), (p, panel): (usize, &mut [u32])| {
            let lanes = PANEL.min(n - p * PANEL);
            let mut finite = true;
            for c0 in (0..k).step_by(CHUNK) {
                let c1 = (c0 + CHUNK).min(k);
                let buf = &mut buf[..c1 - c0];
                let dst = &mut panel[c0 / 2 * PANEL..c1 / 2 * PANEL];
                for lane in 0..lanes {
                    let r = p * PANEL + lane;
                    dec.decode_cols(r, c0..c1, factors.of(r, c0 / bs, c1 / bs), buf);
                    finite &= all_finite(buf);
                    for (t, pair) in buf.chunks_exact(2).enumerate() {
                        dst[t * PANEL + lane] = u32::from(pair[0].to_bits()) | u32::from(pair[1].to_bits()) << 16;
                    }
                }
            }
            finite
        };
        let init = || (RowDecoder::new(q, isa), vec![bf16::ZERO; CHUNK]);
        if parallel {
            out.par_chunks_mut(pairs * PANEL).enumerate().map_init(init, work).all(|ok| ok)
        } else {
            let mut state = init();
            out.chunks_mut(pairs * PANEL).enumerate().map(|item| work(&mut state, item)).fold(true, |a, b| a & b)
        }
    };
    if !ok {
        return None;
    }
    let scales = match values {
        Values::Scaled => Vec::new(),
        Values::Elements => {
            let table = factors.kept();
            let mut packed = vec![0f32; count * nb * PANEL];
            for (r, row) in table.chunks_exact(nb.max(1)).enumerate().take(n) {
                let base = (r / PANEL) * nb * PANEL + r % PANEL;
                for (kb, &s) in row.iter().enumerate() {
                    packed[base + kb * PANEL] = s;
                }
            }
            packed
        }
    };
    Some(Panels { values: out, scales })
}
