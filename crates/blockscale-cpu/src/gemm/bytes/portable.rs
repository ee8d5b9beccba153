//! The portable kernel: the module docs' order of operations on arrays of 16 lanes.

use std::sync::OnceLock;

use super::{Elem, LANES, MAX_BLOCK, Row};

/// The f32 value of `h(code)` for every code of `elem` (FP6: the first 64 entries).
fn table(elem: Elem) -> &'static [f32; 256] {
    static TABLES: OnceLock<[[f32; 256]; 4]> = OnceLock::new();
    let all = TABLES.get_or_init(|| {
        [Elem::E4M3, Elem::E5M2, Elem::E2M3, Elem::E3M2]
            .map(|e| core::array::from_fn(|c| half::f16::from_bits(e.half_bits(c as u8)).to_f32()))
    });
    &all[elem as usize]
}

/// Block `b`'s codes (`block` of them), one per byte: the row's bytes as they are, or
/// for FP6 unpacked from the bitstream by the formats crate.
fn block_codes<'a>(job: &Row<'a>, b: usize, buf: &'a mut [u8; MAX_BLOCK]) -> &'a [u8] {
    if job.elem.bits() == 8 {
        return &job.codes[b * job.block..][..job.block];
    }
    let bytes = &job.codes[b * job.block / 4 * 3..][..job.block / 4 * 3];
    // The lengths agree: `block` codes from `3 block / 4` bytes.
    let _ = blockscale_formats::pack::unpack_fp6::<u8>(bytes, &mut buf[..job.block]);
    &buf[..job.block]
}

/// The fixed reduction tree of the module docs.
pub(super) fn hsum(v: [f32; LANES]) -> f32 {
    let r8: [f32; 8] = core::array::from_fn(|l| v[l] + v[l + 8]);
    let r4: [f32; 4] = core::array::from_fn(|l| r8[l] + r8[l + 4]);
    let r2: [f32; 2] = core::array::from_fn(|l| r4[l] + r4[l + 2]);
    r2[0] + r2[1]
}

/// `out[i]` for activation rows `i < job.m` against one weight row.
pub(super) fn row(job: &Row, out: &mut [f32]) {
    let table = table(job.elem);
    // Even blocks into `acc[i][0]`, odd ones into `acc[i][1]`.
    let mut acc = vec![[[0f32; LANES]; 2]; job.m];
    let (mut w, mut buf) = ([0f32; MAX_BLOCK], [0u8; MAX_BLOCK]);
    for (b, &s) in job.scales.iter().enumerate() {
        let base = b * job.block;
        for (wv, &c) in w.iter_mut().zip(block_codes(job, b, &mut buf)) {
            *wv = table[usize::from(c)];
        }
        for (i, a) in acc.iter_mut().enumerate() {
            let x = &job.x[i * job.k + base..][..job.block];
            let mut p: [f32; LANES] = core::array::from_fn(|l| x[l] * w[l]);
            for c in 1..job.block / LANES {
                for (l, pl) in p.iter_mut().enumerate() {
                    *pl = x[c * LANES + l].mul_add(w[c * LANES + l], *pl);
                }
            }
            for (al, pl) in a[b % 2].iter_mut().zip(p) {
                *al = pl.mul_add(s, *al);
            }
        }
    }
    let post = job.elem.post();
    for (o, [a0, a1]) in out.iter_mut().zip(acc) {
        *o = hsum(core::array::from_fn(|l| a0[l] + a1[l])) * post;
    }
}
