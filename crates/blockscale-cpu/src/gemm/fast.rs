//! The fast path: operands decoded once per call into SIMD-friendly arrays (for the
//! AVX-512 BF16 kernels, straight from the codes into bf16 rows and packed panels:
//! pre-scaled where that is exact, else elements with f32 block scales; int8 or f32
//! values on other CPUs), f32 accumulation, rayon over blocks of output rows, each
//! computing its 64 x 64 tiles into the result in place. Weight-only products with at
//! most [`GEMV_ROWS`] rows stream the weights instead: 4-bit ones through the `nibble`
//! kernels, 6- and 8-bit ones through the `bytes` kernels.

use blockscale_formats::Source;
use std::any::{Any, TypeId};

use blockscale_formats::{
    DataLayout, E2M1, ElementFormat, QuantizedMatrix, ScaleData, ScaleFormat, ScaleLayout, Scheme, UE4M3, UE8M0,
};
use ndarray::Array2;
use rayon::prelude::*;

use super::nibble;
use super::operand::{Decoded, element_exp};
use super::reference::format_of;
use super::{Activation, ActivationPrecision, GemmOptions, Resolved, exact::round_f64};
use crate::dequantize::RowDecoder;
use crate::kernels::Isa;

#[cfg(target_arch = "x86_64")]
mod bf16_operand;
mod dot;

/// Output rows and columns per tile (and at most the rows per task).
const TILE: usize = 64;

/// Outputs from which the epilogue runs on the thread pool.
const PARALLEL_FINISH: usize = 1 << 16;

/// Applies the epilogue in f32 (`alpha * acc`, then `+ bias`), the activation in f64,
/// and rounds to `O`, on the thread pool when `parallel` and large. An f32 output is
/// computed in place.
pub(super) fn finish<O: Source>(acc: Vec<f32>, m: usize, n: usize, r: &Resolved<'_>, parallel: bool) -> Array2<O> {
    let format = format_of::<O>();
    // Column j of a row: `alpha * v`, `+ bias[j]`, the activation.
    let apply = |j: usize, v: f32| {
        let mut y = v * r.alpha;
        if let Some(b) = r.bias {
            y += b[j];
        }
        match r.activation {
            Activation::Identity => y,
            act => round_f64(act.apply(y as f64), format) as f32,
        }
    };
    // The same operations on a whole row, in loops the compiler vectorizes where there
    // is no activation.
    let row_f32 = |row: &mut [f32]| match (r.bias, r.activation) {
        (None, Activation::Identity) => row.iter_mut().for_each(|v| *v *= r.alpha),
        (Some(b), Activation::Identity) => row.iter_mut().zip(b).for_each(|(v, &b)| *v = *v * r.alpha + b),
        _ => row.iter_mut().enumerate().for_each(|(j, v)| *v = apply(j, *v)),
    };
    let chunk = n.max(1);
    let pool = parallel && acc.len() >= PARALLEL_FINISH;
    let data: Vec<O> = if TypeId::of::<O>() == TypeId::of::<f32>() {
        // f32 out: the same buffer, each value replaced by its result.
        let mut acc = acc;
        if pool {
            acc.par_chunks_mut(chunk).for_each(row_f32);
        } else {
            acc.chunks_mut(chunk).for_each(row_f32);
        }
        *(Box::new(acc) as Box<dyn Any>).downcast::<Vec<O>>().unwrap_or_else(|_| unreachable!("O is f32"))
    } else {
        let mut data = vec![O::default(); acc.len()];
        let rows = |(out, src): (&mut [O], &[f32])| {
            for (j, (o, &v)) in out.iter_mut().zip(src).enumerate() {
                *o = O::from_f32(apply(j, v));
            }
        };
        if pool {
            data.par_chunks_mut(chunk).zip(acc.par_chunks(chunk)).for_each(rows);
        } else {
            data.chunks_mut(chunk).zip(acc.chunks(chunk)).for_each(rows);
        }
        data
    };
    Array2::from_shape_vec((m, n), data).unwrap_or_else(|_| unreachable!("m * n values"))
}

/// Runs `tile(i0..i1, j0..j1, out, stride)` over output tiles of at most `TILE x TILE`,
/// each writing its tile into the `m x n` result in place (`out` starts at the tile's
/// first output, rows `stride = n` apart): each block of rows is a task (in parallel)
/// that computes its tiles one after another. Every output is computed by one call,
/// whatever the blocks, so the result does not depend on them.
fn tiled(
    m: usize,
    n: usize,
    parallel: bool,
    tile: impl Fn(usize, usize, usize, usize, &mut [f32], usize) + Sync,
) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    // Rows per task: `TILE`, or fewer (a multiple of 8) where that leaves threads idle.
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    let h = m.div_ceil(4 * threads).next_multiple_of(8).min(TILE);
    let work = |(b, rows): (usize, &mut [f32])| {
        let (i0, i1) = (b * h, (b * h + h).min(m));
        for j0 in (0..n).step_by(TILE) {
            tile(i0, i1, j0, (j0 + TILE).min(n), &mut rows[j0..], n);
        }
    };
    if parallel {
        out.par_chunks_mut(h * n).enumerate().for_each(work);
    } else {
        out.chunks_mut(h * n).enumerate().for_each(work);
    }
    out
}

/// Elements whose integer form (value * 2^-exp) fits an i8 with room for the int8
/// dot products: E2M1 (|v| <= 12), E2M3 (60), INT4 (8).
fn small_int(format: ElementFormat) -> bool {
    matches!(format, ElementFormat::E2M1 | ElementFormat::E2M3 | ElementFormat::Int4)
}

/// An operand as int8 values (times `2^exp`) with f32 scales.
pub(super) struct Int8Operand {
    pub vals: Vec<i8>,
    pub scales: Vec<f32>,
    pub exp: i32,
}

/// The [`small_int`] formats have no NaN or infinity codes, so every value converts; a
/// NaN scale (a poisoned block) stays in `scales` and reaches the output.
fn int8_operand(d: &Decoded) -> Int8Operand {
    let f = 2f32.powi(-d.elem_exp);
    let vals = d.values.iter().map(|&v| (v * f) as i8).collect();
    Int8Operand { vals, scales: d.scales.clone(), exp: d.elem_exp }
}

/// Significant bits of a finite non-zero f32 (from its leading to its last set bit),
/// and the exponent of that last bit.
fn sig_bits(x: f32) -> (u32, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = bits & 0x7f_ffff;
    let (m, e) = if exp == 0 { (frac, -149) } else { (frac | 1 << 23, exp - 150) };
    let tz = m.trailing_zeros();
    (32 - m.leading_zeros() - tz, e + tz as i32)
}

/// Whether every element times its block scale is at most 2^50 and, with `Some(budget)`,
/// exact in a format with `budget` significand bits and a multiple of 2^-63 (so that
/// every non-zero partial sum of two such operands' products is a normal f32: the BF16
/// dot product flushes subnormals); then the block-scaled product is a plain product of
/// the block-scaled values. With `None` the products may round (once each, in f32) but
/// every non-zero one is at least 2^-63, far from f32's subnormals.
fn prescale_ok(q: &QuantizedMatrix, budget: Option<u32>) -> bool {
    let element = q.scheme().element();
    let (elem_bits, elem_exp) = (element.mantissa_bits() + 1, element_exp(element));
    let elem_max = if element == ElementFormat::Int4 { 8.0 } else { element.max() as f64 };
    let ok = |s: f32| {
        if s == 0.0 {
            return true;
        }
        if !s.is_finite() {
            return false;
        }
        let (bits, low) = sig_bits(s);
        let small_ok = match budget {
            Some(b) => elem_bits + bits <= b && low + elem_exp >= -63,
            None => s.abs() as f64 * 2f64.powi(elem_exp) >= 2f64.powi(-63),
        };
        small_ok && elem_max * s.abs() as f64 <= (1u64 << 50) as f64
    };
    // Every scale the matrix uses (not the swizzled layout's padding), as `q.scale`
    // reads it.
    let (shape, layout) = (q.shape(), q.scale_layout());
    let (rows, cols) = (shape.scale_rows, shape.scale_cols);
    let all = |good: &dyn Fn(usize) -> bool| (0..rows).all(|sr| (0..cols).all(|c| good(layout.offset(sr, c, cols))));
    match q.scales() {
        ScaleData::Bytes(v) => {
            let lut = scale_lut(q.scheme().scale_format());
            let code_ok: [bool; 256] = core::array::from_fn(|b| ok(lut[b]));
            all(&|i| code_ok[usize::from(v[i])])
        }
        ScaleData::F32(v) => all(&|i| ok(v[i])),
        ScaleData::F16(v) => all(&|i| ok(v[i].to_f32())),
    }
}

/// Rows of values times block scales (no per-tensor factor), `rows x k` in f32; `None`
/// if any is NaN or infinite.
fn scaled_rows(q: &QuantizedMatrix, isa: Isa, parallel: bool) -> Option<Vec<f32>> {
    let k = q.k();
    let mut out = vec![0f32; q.rows() * k];
    let work = |dec: &mut RowDecoder<'_>, (r, row): (usize, &mut [f32])| {
        dec.block_scaled(r, row);
        row.iter().all(|v| v.is_finite())
    };
    let init = || RowDecoder::new(q, isa);
    let ok = if parallel {
        out.par_chunks_mut(k).enumerate().map_init(init, work).all(|x| x)
    } else {
        let mut dec = init();
        out.chunks_mut(k).enumerate().map(|item| work(&mut dec, item)).fold(true, |a, b| a & b)
    };
    ok.then_some(out)
}

/// Quantized x quantized, before the epilogue.
pub(super) fn gemm_qq(a: &QuantizedMatrix, b: &QuantizedMatrix, isa: Isa, parallel: bool) -> Vec<f32> {
    let (m, n, k) = (a.rows(), b.rows(), a.k());
    if let Some(out) = panel_product(a, b, isa, parallel) {
        return out;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.bf16() && prescale_ok(a, Some(8)) && prescale_ok(b, Some(8)) {
        use bf16_operand::Values::Scaled;
        let kp = k.next_multiple_of(32);
        if let Some(pa) = bf16_operand::rows(a, isa, Scaled, kp, parallel)
            && let Some(pb) = bf16_operand::panels(b, isa, Scaled, kp, parallel)
        {
            return bf16_product(&pa.values, &pb.values, m, n, kp, parallel);
        }
    }
    if !isa.bf16() && prescale_ok(a, None) && prescale_ok(b, None) {
        // Values times scales in f32 (exact for NVFP4, MX and power-of-two scales, one
        // rounding each otherwise): a plain f32 product with the packed AVX2 kernel.
        if let (Some(pa), Some(pb)) = (scaled_rows(a, isa, parallel), scaled_rows(b, isa, parallel)) {
            return f32_packed_product(isa, &pa, &pb, m, n, k, parallel);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if isa.bf16()
        && let Some(pa) = bf16_operand::rows(a, isa, bf16_operand::Values::Elements, k, parallel)
        && let Some(pb) = bf16_operand::panels(b, isa, bf16_operand::Values::Elements, k, parallel)
    {
        // Elements (at most 4 significant bits) are exact in bf16; scales stay f32.
        let bs = a.scheme().block_size();
        return bf16_scaled_product(&pa, &pb, m, n, k, bs, parallel);
    }
    let (da, db) = (Decoded::new(a, isa, parallel), Decoded::new(b, isa, parallel));
    let bs = da.block;
    if small_int(a.scheme().element()) && small_int(b.scheme().element()) {
        let (ia, ib) = (int8_operand(&da), int8_operand(&db));
        let post = 2f32.powi(ia.exp + ib.exp);
        let nb = k / bs;
        return tiled(m, n, parallel, |i0, i1, j0, j1, out, stride| {
            let ops = dot::Blocks {
                a: &ia.vals[i0 * k..i1 * k],
                sa: &ia.scales[i0 * nb..i1 * nb],
                b: &ib.vals[j0 * k..j1 * k],
                sb: &ib.scales[j0 * nb..j1 * nb],
                k,
                bs,
            };
            dot::int8_tile(isa, ops, post, out, stride)
        });
    }
    f32_product(&da.values, &da.scales, &db, m, parallel, isa)
}

/// NVFP4 x NVFP4 and MXFP4 x MXFP4 on the panel kernels, where the ISA has one
/// (AVX-512 VNNI, or AVX2; see `panel::Kernel::of`): B is packed into panels,
/// A's codes (E2M1 times two) are the int8 operand exactly and its block scales the
/// factors, so each block sum is exact in i32 and `acc += I * (s_b * s_a / 2)` in f32
/// (the scale product exact: 4-bit mantissas or powers of two, kept in range by the
/// check below), within the fast path's bound and exact on friendly data. `None`
/// elsewhere.
fn panel_product(a: &QuantizedMatrix, b: &QuantizedMatrix, isa: Isa, parallel: bool) -> Option<Vec<f32>> {
    if a.scheme() != b.scheme() || !matches!(a.scheme(), Scheme::NvFp4 | Scheme::MxFp4) {
        return None;
    }
    let kernel = super::panel::Kernel::of(isa, super::panel::Width::Four);
    if kernel == super::panel::Kernel::Portable {
        return None;
    }
    // MX scales within 2^±50 (NaN codes allowed): a product of two, halved, lies in
    // 2^-101 .. 2^100, and a block sum (|I| < 2^16) times it stays a normal f32 far
    // from overflow. NVFP4's UE4M3 scales always do.
    let moderate = |q: &QuantizedMatrix| match q.scales() {
        ScaleData::Bytes(s) if q.scheme() == Scheme::MxFp4 => s.iter().all(|&c| (77..=177).contains(&c) || c == 0xff),
        _ => true,
    };
    if !moderate(a) || !moderate(b) {
        return None;
    }
    let lut = scale_lut(a.scheme().scale_format());
    let (wa, wb) = (nibble_weights(a, &lut, None)?, nibble_weights(b, &lut, None)?);
    let panels = super::panel::Panels::pack(&wb, Some(b.scheme().scale_format()));
    let acts = super::panel::Acts::from_nibbles(&wa, &panels, parallel);
    Some(super::panel::run(kernel, &acts, a.rows(), &panels, parallel))
}

/// The product of bf16 rows `a` (`m x kp`) and B's packed panels ([`bf16_operand::panels`]
/// of `n` rows), f32 accumulation.
#[cfg(target_arch = "x86_64")]
fn bf16_product(a: &[half::bf16], packed: &[u32], m: usize, n: usize, kp: usize, parallel: bool) -> Vec<f32> {
    tiled(m, n, parallel, |i0, i1, j0, j1, out, stride| {
        dot::bf16_tile(&a[i0 * kp..i1 * kp], packed, kp, (j0, j1), out, stride)
    })
}

/// The f32 product of pre-scaled rows `a` (`m x k`) and `b` (`n x k`), B packed into
/// 16-column panels (a 6 x 16 register tile on AVX2).
fn f32_packed_product(isa: Isa, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, parallel: bool) -> Vec<f32> {
    let packed = dot::pack_f32_panels(b, n, k);
    tiled(m, n, parallel, |i0, i1, j0, j1, out, stride| {
        dot::f32_panel_tile(isa, &a[i0 * k..i1 * k], &packed, k, (j0, j1), out, stride)
    })
}

/// Block-scaled product of A's bf16 element rows (`m x k`) with its f32 block scales
/// and B's packed panels and scales ([`bf16_operand::Values::Elements`]).
#[cfg(target_arch = "x86_64")]
fn bf16_scaled_product(
    a: &bf16_operand::Rows,
    b: &bf16_operand::Panels,
    m: usize,
    n: usize,
    k: usize,
    bs: usize,
    parallel: bool,
) -> Vec<f32> {
    let nb = k / bs;
    tiled(m, n, parallel, |i0, i1, j0, j1, out, stride| {
        let (a, sa) = (&a.values[i0 * k..i1 * k], &a.scales[i0 * nb..i1 * nb]);
        let ops = dot::Blocks { a, sa, b: &b.values, sb: &b.scales, k, bs };
        dot::bf16_scaled_tile(ops, (j0, j1), out, stride)
    })
}

/// Block-scaled f32 product of values `av` (`m x k`) with scales `asc` and `db`.
fn f32_product(av: &[f32], asc: &[f32], db: &Decoded, m: usize, parallel: bool, isa: Isa) -> Vec<f32> {
    let (n, k, bs) = (db.rows, db.k, db.block);
    let nb = k / bs;
    tiled(m, n, parallel, |i0, i1, j0, j1, out, stride| {
        let ops = dot::Blocks {
            a: &av[i0 * k..i1 * k],
            sa: &asc[i0 * nb..i1 * nb],
            b: &db.values[j0 * k..j1 * k],
            sb: &db.scales[j0 * nb..j1 * nb],
            k,
            bs,
        };
        dot::f32_tile(isa, ops, out, stride)
    })
}

/// Rows of activations up to which the 4-, 6- and 8-bit kernels stream the weights
/// directly (decoding a block once for every row) instead of packing them for the GEMM
/// kernels.
const GEMV_ROWS: usize = 16;

/// Lookup tables of the one-byte scale formats.
pub(super) fn scale_lut(format: ScaleFormat) -> [f32; 256] {
    core::array::from_fn(|b| match format {
        ScaleFormat::UE4M3 => UE4M3::from_bits(b as u8).to_f32(),
        _ => UE8M0::from_bits(b as u8).to_f32(),
    })
}

/// INT4-G128 scales as the nibble kernels take them (blocks of 16 or 32): each f16
/// repeated for the four 32-element blocks of its group, row-major. The products are
/// the same; they are summed per 32 elements, as INT4-G32's are. `None` for other
/// schemes and for block-interleaved data.
pub(super) fn int4_g128_as_g32_scales(w: &QuantizedMatrix) -> Option<Vec<half::f16>> {
    let ScaleData::F16(v) = w.scales() else { return None };
    if w.scheme() != Scheme::Int4G128 || w.data_layout() != DataLayout::RowMajor {
        return None;
    }
    let cols = w.shape().scale_cols;
    let mut out = vec![half::f16::ZERO; v.len() * 4];
    out.par_chunks_mut(cols * 4).zip(v.par_chunks(cols)).for_each(|(o, s)| {
        for (o4, &x) in o.chunks_exact_mut(4).zip(s) {
            o4.fill(x);
        }
    });
    Some(out)
}

/// The nibble kernels' view of 4-bit row-major weights (NVFP4, MXFP4, INT4-G32, and
/// INT4-G128 given its scales as [`int4_g128_as_g32_scales`] writes them), with `lut`
/// the byte scales' table ([`scale_lut`] of the scheme's scale format); `None` for other
/// schemes and layouts.
pub(super) fn nibble_weights<'a>(
    w: &'a QuantizedMatrix,
    lut: &'a [f32; 256],
    g128_scales: Option<&'a [half::f16]>,
) -> Option<nibble::NibbleWeights<'a>> {
    let (values, vscale): ([i8; 16], f32) = match w.scheme() {
        Scheme::NvFp4 | Scheme::MxFp4 => (core::array::from_fn(|c| (E2M1::TABLE[c] * 2.0) as i8), 0.5),
        Scheme::Int4G32 | Scheme::Int4G128 => (core::array::from_fn(|c| c as i8 - 8), 1.0),
        _ => return None,
    };
    if w.data_layout() != DataLayout::RowMajor {
        return None;
    }
    if w.scheme() == Scheme::Int4G128 {
        let data = g128_scales?;
        let cols = w.k() / 32;
        if data.len() != w.rows() * cols {
            return None;
        }
        let index = nibble::ScaleIndex::Linear { cols };
        let scales = nibble::Scales::F16 { data, index };
        return Some(nibble::NibbleWeights {
            data: w.data(),
            n: w.rows(),
            k: w.k(),
            block: 32,
            values,
            vscale,
            scales,
        });
    }
    let cols = w.shape().scale_cols;
    let index = match w.scale_layout() {
        ScaleLayout::Linear => nibble::ScaleIndex::Linear { cols },
        ScaleLayout::Swizzled128x4 => nibble::ScaleIndex::Swizzled128x4 { cols },
    };
    let scales = match w.scales() {
        ScaleData::Bytes(data) => nibble::Scales::Bytes { data, lut, index },
        ScaleData::F16(data) => nibble::Scales::F16 { data, index },
        ScaleData::F32(_) => return None,
    };
    Some(nibble::NibbleWeights {
        data: w.data(),
        n: w.rows(),
        k: w.k(),
        block: w.scheme().block_size(),
        values,
        vscale,
        scales,
    })
}

/// The 4-bit GEMV kernels, for NVFP4, MXFP4 and INT4-G32 weights stored row-major;
/// an ISA with AVX-512 BF16 lets bf16 activations take their BF16 kernel.
fn nibble_product(x: &[f32], m: usize, w: &QuantizedMatrix, isa: Isa, options: &GemmOptions) -> Option<Vec<f32>> {
    let lut = scale_lut(w.scheme().scale_format());
    let g128 = int4_g128_as_g32_scales(w);
    let weights = nibble_weights(w, &lut, g128.as_deref())?;
    let mode = match options.activations {
        ActivationPrecision::Exact => nibble::ActMode::Exact,
        ActivationPrecision::Int8Blocks => nibble::ActMode::Int8,
    };
    let mut out = vec![0f32; m * w.rows()];
    nibble::gemm_nibble(isa, x, m, &weights, mode, !options.single_threaded, &mut out);
    Some(out)
}

/// Weight-only, before the epilogue.
pub(super) fn gemm_wq(x: &[f32], m: usize, w: &QuantizedMatrix, isa: Isa, options: &GemmOptions) -> Vec<f32> {
    let parallel = !options.single_threaded;
    let k = w.k();
    if m <= GEMV_ROWS
        && let Some(out) = nibble_product(x, m, w, isa, options)
    {
        return out;
    }
    if m <= GEMV_ROWS
        && let Some(bw) = super::bytes::ByteWeights::new(w)
    {
        let mut out = vec![0f32; m * w.rows()];
        super::bytes::gemm_bytes(isa, x, m, &bw, parallel, &mut out);
        return out;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.bf16() && x.iter().all(|v| v.is_finite() && v.to_bits() & 0xffff == 0) && prescale_ok(w, Some(8)) {
        let kp = k.next_multiple_of(32);
        if let Some(pw) = bf16_operand::panels(w, isa, bf16_operand::Values::Scaled, kp, parallel) {
            let mut xp = vec![half::bf16::ZERO; m * kp];
            // Exact: the activations' low halves were checked to be zero.
            for (dst, src) in xp.chunks_exact_mut(kp).zip(x.chunks_exact(k)) {
                dst.iter_mut().zip(src).for_each(|(d, &v)| *d = half::bf16::from_f32(v));
            }
            return bf16_product(&xp, &pw.values, m, w.rows(), kp, parallel);
        }
    }
    if isa != Isa::Portable
        && prescale_ok(w, None)
        && x.iter().all(|v| v.is_finite())
        && let Some(pw) = scaled_rows(w, isa, parallel)
    {
        return f32_packed_product(isa, x, &pw, m, w.rows(), k, parallel);
    }
    let dw = Decoded::new(w, isa, parallel);
    // Activations as an operand whose block scales are all 1.
    let ones = vec![1f32; m * dw.nblocks()];
    f32_product(x, &ones, &dw, m, parallel, isa)
}
