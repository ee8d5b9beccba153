//! The reference GEMM: exact block sums, exact accumulation, one rounding.
//!
//! Every element is an integer times a power of two fixed by its format
//! ([`super::operand::element_exp`]), every scale and every f32/f16/bf16 activation is
//! an integer below 2^24 times a power of two, so every product and every block sum is
//! an integer (i64 or i128) times a power of two. Block sums times both scales are
//! added to an [`ExactSum`]; `alpha` multiplies it exactly and the bias is added
//! exactly; the result is rounded once to the output type. With an activation, the
//! exact value is rounded to f64, the activation evaluated in f64, and that rounded to
//! the output type (docs/NUMERICS.md, "GEMM").

use rayon::prelude::*;

use super::exact::{ExactSum, Format, f32_parts, round_f64};
use super::operand::Decoded;
use super::{Activation, Resolved};
use blockscale_formats::FloatKind;
use blockscale_formats::Source;

/// The rounding target of an output type.
pub(crate) fn format_of<O: Source>() -> Format {
    match O::KIND {
        FloatKind::F32 => Format::F32,
        FloatKind::F16 => Format::F16,
        FloatKind::Bf16 => Format::BF16,
    }
}

/// Applies the epilogue to an exact sum and rounds it once to `format`.
pub(crate) fn finish(acc: &mut ExactSum, alpha: f32, bias: Option<f32>, act: Activation, format: Format) -> f64 {
    if alpha != 1.0 {
        acc.scale(alpha);
    }
    if let Some(b) = bias {
        acc.add_f32(b);
    }
    match act {
        Activation::Identity => acc.round(format),
        act => round_f64(act.apply(acc.round(Format::F64)), format),
    }
}

/// Element values as integers (times `2^elem_exp`), and which blocks hold a NaN or
/// an infinity.
struct Ints {
    vals: Vec<i64>,
    bad: Vec<bool>,
}

fn ints(d: &Decoded) -> Ints {
    let scale = 2f64.powi(-d.elem_exp);
    let nb = d.nblocks();
    let mut bad = vec![false; d.rows * nb];
    let vals = d
        .values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v.is_finite() {
                let x = v as f64 * scale;
                debug_assert_eq!(x.fract(), 0.0, "element value {v} is not a multiple of 2^{}", d.elem_exp);
                x as i64
            } else {
                bad[(i / d.k) * nb + (i % d.k) / d.block] = true;
                0
            }
        })
        .collect();
    Ints { vals, bad }
}

/// The IEEE f64 value of a block holding a NaN or an infinity (or with a non-finite
/// scale): always NaN or infinite, so its rounding does not matter.
fn special_block(x: &[f32], w: &[f32], sx: f32, sw: f32) -> f64 {
    let s: f64 = x.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum();
    s * sx as f64 * sw as f64
}

/// Fills `out` (`m x n`, row-major, values already rounded to `format`) in parallel.
fn fill(out: &mut [f64], n: usize, parallel: bool, f: impl Fn(usize, usize, &mut ExactSum) -> f64 + Sync) {
    let chunk = 64;
    let work = |(c, dst): (usize, &mut [f64])| {
        let mut acc = ExactSum::default();
        for (i, o) in dst.iter_mut().enumerate() {
            let idx = c * chunk + i;
            acc.reset();
            *o = f(idx / n, idx % n, &mut acc);
        }
    };
    if parallel {
        out.par_chunks_mut(chunk).enumerate().for_each(work);
    } else {
        out.chunks_mut(chunk).enumerate().for_each(work);
    }
}

/// Quantized x quantized: `out[i, j] = finish(sum_kb sa * sb * sum_k a_k * b_k)`.
pub(crate) fn gemm_qq(a: &Decoded, b: &Decoded, r: &Resolved<'_>, format: Format, parallel: bool) -> Vec<f64> {
    let (ai, bi) = (ints(a), ints(b));
    let (k, bs, nb, n) = (a.k, a.block, a.nblocks(), b.rows);
    let e_elems = a.elem_exp + b.elem_exp;
    // i64 block sums cannot overflow unless both formats are wide (E5M2 x E5M2).
    let max_a = ai.vals.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0) as u128;
    let max_b = bi.vals.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0) as u128;
    let narrow = max_a * max_b * bs as u128 <= i64::MAX as u128;
    let mut out = vec![0f64; a.rows * n];
    fill(&mut out, n, parallel, |i, j, acc| {
        let (xa, xb) = (&ai.vals[i * k..(i + 1) * k], &bi.vals[j * k..(j + 1) * k]);
        for kb in 0..nb {
            let (sa, sb) = (a.scales[i * nb + kb], b.scales[j * nb + kb]);
            let range = kb * bs..(kb + 1) * bs;
            if ai.bad[i * nb + kb] || bi.bad[j * nb + kb] || !sa.is_finite() || !sb.is_finite() {
                let (va, vb) = (&a.row(i)[range.clone()], &b.row(j)[range]);
                acc.add_special(special_block(va, vb, sa, sb));
                continue;
            }
            let (pa, pb) = (&xa[range.clone()], &xb[range]);
            let sum: i128 = if narrow {
                pa.iter().zip(pb).map(|(&x, &y)| x * y).sum::<i64>() as i128
            } else {
                pa.iter().zip(pb).map(|(&x, &y)| x as i128 * y as i128).sum()
            };
            if sum != 0 {
                let ((ma, ea), (mb, eb)) = (f32_parts(sa), f32_parts(sb));
                acc.add_product(sum * ma as i128, mb, ea + eb + e_elems);
            }
        }
        finish(acc, r.alpha, r.bias.map(|b| b[j]), r.activation, format)
    });
    out
}

/// f32 activations (already exact conversions of f32, f16 or bf16) x quantized weights.
pub(crate) fn gemm_wq(x: &[f32], m: usize, w: &Decoded, r: &Resolved<'_>, format: Format, parallel: bool) -> Vec<f64> {
    let wi = ints(w);
    let (k, bs, nb, n) = (w.k, w.block, w.nblocks(), w.rows);
    // Activations as m * 2^e; per block the exponent range of its non-zero values.
    let parts: Vec<(i64, i32)> = x.iter().map(|&v| if v.is_finite() { f32_parts(v) } else { (0, 0) }).collect();
    let mut bad = vec![false; m * nb];
    let mut range = vec![(i32::MAX, i32::MIN); m * nb];
    for (i, (&v, &(mv, e))) in x.iter().zip(&parts).enumerate() {
        let blk = (i / k) * nb + (i % k) / bs;
        if !v.is_finite() {
            bad[blk] = true;
        } else if mv != 0 {
            let r = &mut range[blk];
            *r = (r.0.min(e), r.1.max(e));
        }
    }
    let mut out = vec![0f64; m * n];
    fill(&mut out, n, parallel, |i, j, acc| {
        for kb in 0..nb {
            let blk = i * nb + kb;
            let sw = w.scales[j * nb + kb];
            let span = kb * bs..(kb + 1) * bs;
            if bad[blk] || wi.bad[j * nb + kb] || !sw.is_finite() {
                acc.add_special(special_block(&x[i * k..][span.clone()], &w.row(j)[span], 1.0, sw));
                continue;
            }
            let (lo, hi) = range[blk];
            if lo > hi {
                continue; // an all-zero block of activations
            }
            let (ms, es) = f32_parts(sw);
            let xs = &parts[i * k..][span.clone()];
            let ws = &wi.vals[j * k..][span];
            if hi - lo <= 60 {
                // Align every activation to the block's smallest exponent: at most
                // 24 + 60 bits, times a weight below 2^32, 128 of them: below 2^127.
                let sum: i128 =
                    xs.iter().zip(ws).map(|(&(mv, e), &wv)| ((mv as i128) << (e - lo).max(0)) * wv as i128).sum();
                acc.add_product(sum, ms, lo + w.elem_exp + es);
            } else {
                for (&(mv, e), &wv) in xs.iter().zip(ws) {
                    acc.add_product(mv as i128 * wv as i128, ms, e + w.elem_exp + es);
                }
            }
        }
        finish(acc, r.alpha, r.bias.map(|b| b[j]), r.activation, format)
    });
    out
}
