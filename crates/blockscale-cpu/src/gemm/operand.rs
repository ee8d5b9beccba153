//! Operands decoded once per call: element values and block scales as plain f32
//! arrays in row order, whatever the data and scale layouts were.

use blockscale_formats::{ElementFormat, QuantizedMatrix};
use rayon::prelude::*;

use crate::dequantize::RowDecoder;
use crate::kernels::Isa;

/// The power of two that makes every value of a format an integer: value =
/// integer * 2^exp (E2M1 counts halves, E4M3 its smallest subnormal 2^-9, ...).
pub(crate) const fn element_exp(format: ElementFormat) -> i32 {
    match format {
        ElementFormat::E2M1 => -1,
        ElementFormat::E2M3 => -3,
        ElementFormat::E3M2 => -4,
        ElementFormat::E4M3 => -9,
        ElementFormat::E5M2 => -16,
        ElementFormat::Int4 => 0,
    }
}

/// A quantized matrix as values and scales.
pub(crate) struct Decoded {
    pub rows: usize,
    pub k: usize,
    pub block: usize,
    /// `rows x k` element values, exact (NaN / infinity codes included as such).
    pub values: Vec<f32>,
    /// `rows x k/block` block scales, exact (a 128x128 tile's scale repeated per row).
    pub scales: Vec<f32>,
    /// Element values are integers times `2^elem_exp`.
    pub elem_exp: i32,
}

impl Decoded {
    pub(crate) fn new(q: &QuantizedMatrix, isa: Isa, parallel: bool) -> Self {
        let (rows, k, block) = (q.rows(), q.k(), q.scheme().block_size());
        let nb = k / block;
        let mut values = vec![0f32; rows * k];
        let mut scales = vec![0f32; rows * nb];
        let work = |dec: &mut RowDecoder<'_>, (r, (v, s)): (usize, (&mut [f32], &mut [f32]))| {
            dec.values(r, v);
            for (c, s) in s.iter_mut().enumerate() {
                // In range: r < rows, c < k / block.
                *s = q.scale(r, c).unwrap_or(f32::NAN);
            }
        };
        if parallel {
            values
                .par_chunks_mut(k)
                .zip(scales.par_chunks_mut(nb))
                .enumerate()
                .for_each_init(|| RowDecoder::new(q, isa), work);
        } else {
            let mut dec = RowDecoder::new(q, isa);
            values.chunks_mut(k).zip(scales.chunks_mut(nb)).enumerate().for_each(|item| work(&mut dec, item));
        }
        Self { rows, k, block, values, scales, elem_exp: element_exp(q.scheme().element()) }
    }

    pub(crate) fn nblocks(&self) -> usize {
        self.k / self.block
    }

    pub(crate) fn row(&self, r: usize) -> &[f32] {
        &self.values[r * self.k..(r + 1) * self.k]
    }
}
