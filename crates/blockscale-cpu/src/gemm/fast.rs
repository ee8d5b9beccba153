//! The fast path: operands decoded once per call into SIMD-friendly arrays, block
//! sums in int8 SIMD (small-integer elements) or f32 SIMD, f32 accumulation, rayon over
//! output tiles.

use blockscale_formats::{ElementFormat, QuantizedMatrix};
use ndarray::Array2;
use rayon::prelude::*;

use super::operand::{Decoded, element_exp};
use super::reference::format_of;
use super::{Activation, GemmOptions, Resolved, exact::round_f64};
use crate::Output;
use crate::kernels::Path;

mod dot;

/// Output rows and columns per task.
const TILE: usize = 64;

/// Applies the epilogue in f32 (`alpha * acc`, then `+ bias`), the activation in f64,
/// and rounds to `O`.
pub(super) fn finish<O: Output>(acc: Vec<f32>, m: usize, n: usize, r: &Resolved<'_>) -> Array2<O> {
    let format = format_of::<O>();
    let data: Vec<O> = acc
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let mut y = v * r.alpha;
            if let Some(b) = r.bias {
                y += b[i % n];
            }
            match r.activation {
                Activation::Identity => O::from_f32(y),
                act => O::from_f32(round_f64(act.apply(y as f64), format) as f32),
            }
        })
        .collect();
    Array2::from_shape_vec((m, n), data).unwrap_or_else(|_| unreachable!("m * n values"))
}

/// Runs `tile(i0..i1, j0..j1, out)` over `TILE x TILE` output tiles (in parallel) and
/// assembles the `m x n` result.
fn tiled(m: usize, n: usize, parallel: bool, tile: impl Fn(usize, usize, usize, usize, &mut [f32]) + Sync) -> Vec<f32> {
    let tasks: Vec<(usize, usize)> =
        (0..m.div_ceil(TILE)).flat_map(|ti| (0..n.div_ceil(TILE)).map(move |tj| (ti * TILE, tj * TILE))).collect();
    let run = |&(i0, j0): &(usize, usize)| {
        let (i1, j1) = ((i0 + TILE).min(m), (j0 + TILE).min(n));
        let mut buf = vec![0f32; (i1 - i0) * (j1 - j0)];
        tile(i0, i1, j0, j1, &mut buf);
        buf
    };
    let bufs: Vec<Vec<f32>> =
        if parallel { tasks.par_iter().map(run).collect() } else { tasks.iter().map(run).collect() };
    let mut out = vec![0f32; m * n];
    for (&(i0, j0), buf) in tasks.iter().zip(&bufs) {
        let w = (j0 + TILE).min(n) - j0;
        for (r, row) in buf.chunks_exact(w).enumerate() {
            out[(i0 + r) * n + j0..][..w].copy_from_slice(row);
        }
    }
    out
}

/// Elements whose integer form (value * 2^-exp) fits an i8 with room for the int8
/// dot products: E2M1 (|v| <= 12), E2M3 (60), INT4 (8).
fn small_int(format: ElementFormat) -> bool {
    matches!(format, ElementFormat::E2M1 | ElementFormat::E2M3 | ElementFormat::Int4)
}

/// An operand as int8 values (times `2^exp`) with f32 scales, rows padded to a whole
/// number of 32-byte vectors.
pub(super) struct Int8Operand {
    pub vals: Vec<i8>,
    pub scales: Vec<f32>,
    pub exp: i32,
}

fn int8_operand(d: &Decoded) -> Int8Operand {
    let f = 2f32.powi(-d.elem_exp);
    let vals = d.values.iter().map(|&v| if v.is_finite() { (v * f) as i8 } else { 0 }).collect();
    // A block holding NaN or infinity poisons its scale so the NaN reaches the output.
    let mut scales = d.scales.clone();
    for (i, v) in d.values.iter().enumerate() {
        if !v.is_finite() {
            let s = &mut scales[(i / d.k) * d.nblocks() + (i % d.k) / d.block];
            *s = if v.is_nan() || s.is_nan() { f32::NAN } else { *v * *s };
        }
    }
    Int8Operand { vals, scales, exp: d.elem_exp }
}

/// Quantized x quantized, before the epilogue.
pub(super) fn gemm_qq(a: &QuantizedMatrix, b: &QuantizedMatrix, path: Path, parallel: bool) -> Vec<f32> {
    let (da, db) = (Decoded::new(a, path, parallel), Decoded::new(b, path, parallel));
    let (m, n, k, bs) = (da.rows, db.rows, da.k, da.block);
    if small_int(a.scheme().element()) && small_int(b.scheme().element()) {
        let (ia, ib) = (int8_operand(&da), int8_operand(&db));
        let post = 2f32.powi(ia.exp + ib.exp);
        let nb = k / bs;
        return tiled(m, n, parallel, |i0, i1, j0, j1, out| {
            dot::int8_tile(
                path,
                &ia.vals[i0 * k..i1 * k],
                &ia.scales[i0 * nb..i1 * nb],
                &ib.vals[j0 * k..j1 * k],
                &ib.scales[j0 * nb..j1 * nb],
                k,
                bs,
                post,
                out,
            )
        });
    }
    f32_product(&da.values, &da.scales, &db, m, parallel, path)
}

/// Block-scaled f32 product of values `av` (`m x k`) with scales `asc` and `db`.
fn f32_product(av: &[f32], asc: &[f32], db: &Decoded, m: usize, parallel: bool, path: Path) -> Vec<f32> {
    let (n, k, bs) = (db.rows, db.k, db.block);
    let nb = k / bs;
    tiled(m, n, parallel, |i0, i1, j0, j1, out| {
        dot::f32_tile(
            path,
            &av[i0 * k..i1 * k],
            &asc[i0 * nb..i1 * nb],
            &db.values[j0 * k..j1 * k],
            &db.scales[j0 * nb..j1 * nb],
            k,
            bs,
            out,
        )
    })
}

/// Weight-only, before the epilogue.
pub(super) fn gemm_wq(x: &[f32], m: usize, w: &QuantizedMatrix, path: Path, options: &GemmOptions) -> Vec<f32> {
    let parallel = !options.single_threaded;
    let dw = Decoded::new(w, path, parallel);
    // Activations as an operand whose block scales are all 1.
    let ones = vec![1f32; m * dw.nblocks()];
    let _ = element_exp;
    f32_product(x, &ones, &dw, m, parallel, path)
}
