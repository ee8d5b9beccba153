//! Dequantization: every element becomes `(value(code) * block_scale) * post`, computed
//! in f32 (`post` is NVFP4's per-tensor decode factor, 1 otherwise), then rounded once
//! to the output type.

use blockscale_formats::Source;
use blockscale_formats::{DataLayout, QuantizedMatrix};
use ndarray::{Array2, ArrayViewMut2};
use rayon::prelude::*;

use crate::kernels::{self, Isa, RowBlocks, Target};
use crate::{CpuError, Simd};

/// Options for [`dequantize_with`] and [`dequantize_into`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DequantizeOptions {
    /// Use one thread instead of rayon's pool.
    pub single_threaded: bool,
    /// Implementation choice (every path gives identical values).
    pub simd: Simd,
}

/// Reads one row of a quantized matrix: its codes (unpacked to one byte per FP6 code),
/// its block scales as f32, and decodes it.
pub(crate) struct RowDecoder<'q> {
    q: &'q QuantizedMatrix,
    isa: Isa,
    target: Target,
    post: f32,
    row_bytes: Vec<u8>,
    codes: Vec<u8>,
    scales: Vec<f32>,
}

impl<'q> RowDecoder<'q> {
    pub(crate) fn new(q: &'q QuantizedMatrix, isa: Isa) -> Self {
        let shape = q.shape();
        Self {
            q,
            isa,
            target: q.scheme().element(),
            post: q.global_scale().map_or(1.0, |g| g.decode()),
            row_bytes: vec![0; shape.row_bytes],
            codes: Vec::new(),
            scales: vec![0.0; shape.scale_cols],
        }
    }

    /// Decodes row `r` into `out` (`k` elements).
    pub(crate) fn decode<O: Source>(&mut self, r: usize, out: &mut [O]) {
        self.decode_scaled(r, out, true, true);
    }

    /// The element values of row `r` alone, without block scales or the per-tensor
    /// factor (exact in f32, and in bf16 and f16 too: every element format has at most
    /// four significant bits and a narrow range; NaN and infinity codes decode as such).
    pub(crate) fn values<O: Source>(&mut self, r: usize, out: &mut [O]) {
        self.decode_scaled(r, out, false, false);
    }

    /// Row `r` times its block scales, without the per-tensor factor.
    pub(crate) fn block_scaled<O: Source>(&mut self, r: usize, out: &mut [O]) {
        self.decode_scaled(r, out, true, false);
    }

    /// Columns `cols` of row `r` into `out` (`cols.len()` elements): the values of each
    /// block times its factor in `factors` (one per block of `cols`), without the
    /// per-tensor factor. `cols` starts on a block boundary and ends on one or at K.
    pub(crate) fn decode_cols<O: Source>(
        &mut self,
        r: usize,
        cols: core::ops::Range<usize>,
        factors: &[f32],
        out: &mut [O],
    ) {
        self.decode_range(r, cols, factors, 1.0, out);
    }

    fn decode_scaled<O: Source>(&mut self, r: usize, out: &mut [O], scaled: bool, with_post: bool) {
        let mut scales = core::mem::take(&mut self.scales);
        for (c, s) in scales.iter_mut().enumerate() {
            // In range by construction: r < rows, c < scale_cols.
            *s = if scaled { self.q.scale(r, c).unwrap_or(f32::NAN) } else { 1.0 };
        }
        let post = if with_post { self.post } else { 1.0 };
        self.decode_range(r, 0..self.q.k(), &scales, post, out);
        self.scales = scales;
    }

    fn decode_range<O: Source>(
        &mut self,
        r: usize,
        cols: core::ops::Range<usize>,
        factors: &[f32],
        post: f32,
        out: &mut [O],
    ) {
        let shape = self.q.shape();
        let rb = shape.row_bytes;
        // Bytes per element times four: 2 (4-bit), 3 (6-bit), 4 (8-bit).
        let quarter = self.target.bits() as usize / 2;
        let bytes: &[u8] = match self.q.data_layout() {
            DataLayout::RowMajor => &self.q.data()[r * rb..][cols.start * quarter / 4..cols.end * quarter / 4],
            DataLayout::BlockInterleaved => {
                // Word w of K-block kb (32 elements, 16 bytes) of row r sits at word
                // (kb * rows + r) * 4 + w.
                let data = self.q.data();
                let (kb0, kb1) = (cols.start / 32, cols.end / 32);
                for (kb, chunk) in (kb0..kb1).zip(self.row_bytes.chunks_exact_mut(16)) {
                    let at = (kb * shape.rows + r) * 16;
                    chunk.copy_from_slice(&data[at..at + 16]);
                }
                &self.row_bytes[..(kb1 - kb0) * 16]
            }
        };
        let blocks = RowBlocks { block: self.q.scheme().block_size(), factors, target: self.target };
        if matches!(self.target, Target::E2M3 | Target::E3M2) {
            self.codes.resize(cols.len(), 0);
            kernels::unpack_fp6(self.isa, bytes, &mut self.codes);
            kernels::decode_row(self.isa, &self.codes, blocks, post, out);
        } else {
            kernels::decode_row(self.isa, bytes, blocks, post, out);
        }
    }
}

/// Dequantizes to a new `rows x k` array of `O` (f32, f16 or bf16), in parallel, with
/// the fastest SIMD path.
///
/// Each value is `(code_value * block_scale) * global_decode` in f32 (for NVFP4; the
/// other schemes have no global factor), rounded once to `O`. NaN scales (poisoned
/// blocks) give NaN.
pub fn dequantize<O: Source>(q: &QuantizedMatrix) -> Array2<O> {
    let mut out = Array2::from_elem((q.rows(), q.k()), O::default());
    // Cannot fail: the shape matches and Simd::Auto is always available.
    let _ = dequantize_into(q, out.view_mut(), &DequantizeOptions::default());
    out
}

/// [`dequantize`] with options.
///
/// # Errors
/// [`CpuError::SimdUnavailable`] if a missing SIMD path was forced.
pub fn dequantize_with<O: Source>(q: &QuantizedMatrix, options: &DequantizeOptions) -> Result<Array2<O>, CpuError> {
    let mut out = Array2::from_elem((q.rows(), q.k()), O::default());
    dequantize_into(q, out.view_mut(), options)?;
    Ok(out)
}

/// Dequantizes into an existing array of any strides.
///
/// # Errors
/// [`CpuError::OutputShape`] if `out` is not `rows x k`; [`CpuError::SimdUnavailable`]
/// if a missing SIMD path was forced.
pub fn dequantize_into<O: Source>(
    q: &QuantizedMatrix,
    mut out: ArrayViewMut2<'_, O>,
    options: &DequantizeOptions,
) -> Result<(), CpuError> {
    if out.dim() != (q.rows(), q.k()) {
        return Err(CpuError::OutputShape { expected: (q.rows(), q.k()), actual: out.dim() });
    }
    let isa = Isa::select(options.simd)?;
    let k = q.k();
    let work =
        |(dec, buf): &mut (RowDecoder<'_>, Vec<O>), (r, mut row): (usize, ndarray::ArrayViewMut1<'_, O>)| match row
            .as_slice_mut()
        {
            Some(s) => dec.decode(r, s),
            None => {
                buf.resize(k, O::default());
                dec.decode(r, buf);
                row.iter_mut().zip(buf.iter()).for_each(|(o, &v)| *o = v);
            }
        };
    let init = || (RowDecoder::new(q, isa), Vec::new());
    if options.single_threaded {
        let mut state = init();
        out.outer_iter_mut().enumerate().for_each(|item| work(&mut state, item));
    } else {
        out.outer_iter_mut().into_par_iter().enumerate().for_each_init(init, work);
    }
    Ok(())
}

/// [`dequantize_into`] a flat row-major slice of `rows * k` values.
///
/// # Errors
/// [`CpuError::SliceLength`] if `out.len() != rows * k`; otherwise as
/// [`dequantize_into`].
pub fn dequantize_slice<O: Source>(
    q: &QuantizedMatrix,
    out: &mut [O],
    options: &DequantizeOptions,
) -> Result<(), CpuError> {
    let (rows, k) = (q.rows(), q.k());
    if out.len() != rows * k {
        return Err(CpuError::SliceLength { what: "output", rows, k, expected: rows * k, actual: out.len() });
    }
    let view = ArrayViewMut2::from_shape((rows, k), out).map_err(|_| CpuError::SliceLength {
        what: "output",
        rows,
        k,
        expected: rows * k,
        actual: 0,
    })?;
    dequantize_into(q, view, options)
}
