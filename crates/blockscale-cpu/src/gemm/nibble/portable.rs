//! The portable kernels: one output at a time, blocks in order, plain f32 arithmetic.

use super::{NibbleWeights, Scales, XBLOCK};

/// Decodes row `n`'s codes to their integer values and its scales to f32.
fn decode_row(w: &NibbleWeights, n: usize, vals: &mut [i8], scales: &mut [f32]) {
    let row = &w.data[n * (w.k / 2)..(n + 1) * (w.k / 2)];
    for (pair, &b) in vals.chunks_exact_mut(2).zip(row) {
        pair[0] = w.values[usize::from(b & 0xf)];
        pair[1] = w.values[usize::from(b >> 4)];
    }
    match w.scales {
        Scales::Bytes { data, lut, index } => {
            for (c, s) in scales.iter_mut().enumerate() {
                *s = lut[usize::from(data[index.at(n, c)])];
            }
        }
        Scales::F16 { data, index } => {
            for (c, s) in scales.iter_mut().enumerate() {
                *s = data[index.at(n, c)].to_f32();
            }
        }
    }
}

/// Exact mode for rows `n0..n0 + out_t.len() / m`; `out_t` is `[rows, m]`.
pub(super) fn exact_rows(x: &[f32], m: usize, w: &NibbleWeights, n0: usize, out_t: &mut [f32]) {
    let (k, block) = (w.k, w.block);
    let mut vals = vec![0i8; k];
    let mut scales = vec![0f32; k / block];
    for (r, o) in out_t.chunks_exact_mut(m).enumerate() {
        decode_row(w, n0 + r, &mut vals, &mut scales);
        for (xr, o) in x.chunks_exact(k).zip(o) {
            let mut acc = 0f32;
            for ((xb, vb), &s) in xr.chunks_exact(block).zip(vals.chunks_exact(block)).zip(&scales) {
                let mut p = 0f32;
                for (&xv, &v) in xb.iter().zip(vb) {
                    p += xv * f32::from(v);
                }
                acc += s * p;
            }
            *o = acc * w.vscale;
        }
    }
}

/// Int8 mode for rows `n0..n0 + out_t.len() / m`: `q` is `[m, k]` (natural order), `d`
/// `[m, k.div_ceil(32)]`.
pub(super) fn int8_rows(q: &[i8], d: &[f32], m: usize, w: &NibbleWeights, n0: usize, out_t: &mut [f32]) {
    let (k, block) = (w.k, w.block);
    let xblocks = k.div_ceil(XBLOCK);
    let mut vals = vec![0i8; k];
    let mut scales = vec![0f32; k / block];
    for (r, o) in out_t.chunks_exact_mut(m).enumerate() {
        decode_row(w, n0 + r, &mut vals, &mut scales);
        for ((qr, dr), o) in q.chunks_exact(k).zip(d.chunks_exact(xblocks)).zip(o) {
            let mut acc = 0f32;
            for (b, ((qb, vb), &s)) in qr.chunks_exact(block).zip(vals.chunks_exact(block)).zip(&scales).enumerate() {
                let dot: i32 = qb.iter().zip(vb).map(|(&a, &v)| i32::from(a) * i32::from(v)).sum();
                // Exact: |dot| <= 32 * 127 * 128 < 2^24.
                acc += dot as f32 * (dr[b * block / XBLOCK] * s);
            }
            *o = acc * w.vscale;
        }
    }
}
