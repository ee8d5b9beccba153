//! The panel kernels in plain Rust: the int8 products any CPU can run, and the f32
//! computation of rows holding NaN or infinity.

use super::{ActRows, Panels, ROWS};

/// Int8 mode for panels `p0..p1` and the `m` activation rows of `a`: `buf` is
/// `[m, buf.len() / m]`, row `i` getting the outputs of the panels' rows in order.
pub(super) fn rows(a: &ActRows<'_>, m: usize, p: &Panels, p0: usize, p1: usize, buf: &mut [f32]) {
    let (k, block) = (p.k, p.block);
    let (xb, cols, stride) = (k.div_ceil(a.dblock), k / block, buf.len() / m);
    assert!((p1 - p0) * ROWS <= stride && a.q.len() >= m * k);
    for pi in p0..p1 {
        for r in 0..ROWS {
            let row = pi * ROWS + r;
            for i in 0..m {
                let q = &a.q[i * k..(i + 1) * k];
                let mut acc = 0f32;
                for b in 0..cols {
                    // Σ v q, exact in i32: what the SIMD kernels form as Σ (v + o) q less
                    // the offset's share (and, for E4M3, from three parts).
                    let mut dot = 0i32;
                    for (e, &qe) in q.iter().enumerate().skip(b * block).take(block) {
                        dot += p.values[usize::from(p.code(row, e))] * i32::from(qe);
                    }
                    let s = p.scale(pi, b, r) * a.d[i * xb + b * block / a.dblock];
                    acc = (dot as f32).mul_add(s, acc);
                }
                buf[i * stride + (pi - p0) * ROWS + r] = acc * p.vscale;
            }
        }
    }
}

/// One activation row (any values) times every weight row, in f32: block sums of exact
/// products, each times its scale, summed; NaN and infinities propagate.
pub(super) fn f32_row(x: &[f32], p: &Panels, out: &mut [f32]) {
    let (k, block) = (p.k, p.block);
    for (row, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for b in 0..k / block {
            let mut sum = 0f32;
            for (e, &xe) in x.iter().enumerate().skip(b * block).take(block) {
                // Integer values below 2^18: exact in f32.
                sum += xe * p.values[usize::from(p.code(row, e))] as f32;
            }
            acc = sum.mul_add(p.scale(row / ROWS, b, row % ROWS), acc);
        }
        *o = acc * p.vscale;
    }
}
