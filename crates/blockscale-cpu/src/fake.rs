//! Fake quantization: `dequantize(quantize(x))` computed band by band, for accuracy
//! studies, without ever holding the packed codes of the whole matrix.

use blockscale_formats::{QuantRequest, QuantizedMatrix, ScaleData, ScaleFormat, ScaleLayout, Scheme};
use half::f16;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::dequantize::RowDecoder;
use crate::quantize::{BAND, Kind, ScaleChunk, Scratch, plan, quantize_band};
use crate::{CpuError, Input, QuantizeOptions};

/// The values [`crate::dequantize`]`::<f32>(&`[`crate::quantize`]`(input, ...)?)` would
/// give, identical to the last bit, computed one 128-row band at a time (the scale
/// layout and data layout options do not change values and are ignored).
///
/// ```
/// use blockscale_cpu::{QuantizeOptions, fake_quantize};
/// use blockscale_formats::Scheme;
/// use ndarray::array;
/// let x = array![[0.1f32, 2.0, -3.0, 6.5, 0.0, 1.0, 1.5, 2.5, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]];
/// let y = fake_quantize(x.view(), Scheme::NvFp4, &QuantizeOptions::default()).unwrap();
/// // 10 -> 6 x UE4M3 448 x decode (1 / 268.8): within an f32 rounding of 10.
/// assert!((y[(0, 15)] - 10.0).abs() < 1e-5);
/// ```
///
/// # Errors
/// As [`crate::quantize`].
pub fn fake_quantize<T: Input>(
    input: ArrayView2<'_, T>,
    scheme: Scheme,
    options: &QuantizeOptions,
) -> Result<Array2<f32>, CpuError> {
    let (rows, k) = input.dim();
    let opts = QuantizeOptions { scale_layout: ScaleLayout::Linear, ..*options };
    let request = QuantRequest::new(scheme, rows, k, &opts)?;
    let shape = *request.shape();
    let plan = plan(&input, &request, &opts)?;
    let global = match plan.kind {
        Kind::NvFp4 { g, .. } => Some(blockscale_formats::GlobalScale::from_encode(g)?),
        _ => None,
    };
    let mut out = Array2::<f32>::zeros((rows, k));
    let band_out = BAND * k;
    let band = |s: &mut Scratch<T>, (b, dst): (usize, &mut [f32])| -> Result<(), CpuError> {
        let r0 = b * BAND;
        let n = dst.len() / k;
        let band_request = QuantRequest::new(scheme, n, k, &opts)?;
        let mut data = vec![0u8; band_request.shape().data_bytes];
        let scale_len = band_request.scale_len();
        let (mut bytes, mut f32s, mut f16s) = (Vec::new(), Vec::new(), Vec::new());
        let chunk = match scheme.scale_format() {
            ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => {
                bytes.resize(scale_len, 0u8);
                ScaleChunk::Bytes(&mut bytes)
            }
            ScaleFormat::F32 => {
                f32s.resize(scale_len, 0f32);
                ScaleChunk::F32(&mut f32s)
            }
            ScaleFormat::F16 => {
                f16s.resize(scale_len, f16::ZERO);
                ScaleChunk::F16(&mut f16s)
            }
        };
        if let Some((row, col, value)) = quantize_band(&plan, &input, r0, &mut data, chunk, s) {
            return Err(CpuError::NonFinite { row, col, value });
        }
        let scales = match scheme.scale_format() {
            ScaleFormat::UE4M3 | ScaleFormat::UE8M0 => ScaleData::Bytes(bytes),
            ScaleFormat::F32 => ScaleData::F32(f32s),
            ScaleFormat::F16 => ScaleData::F16(f16s),
        };
        let q = QuantizedMatrix::from_request(&band_request, data, scales, global);

        let mut dec = RowDecoder::new(&q, plan.isa);
        for (i, row) in dst.chunks_exact_mut(k).enumerate() {
            dec.decode(i, row);
        }
        Ok(())
    };
    let dst = out.as_slice_mut().expect("a fresh array is contiguous");
    if opts.single_threaded {
        let mut s = Scratch::new(&shape);
        dst.chunks_mut(band_out).enumerate().try_for_each(|item| band(&mut s, item))?;
    } else {
        // Bands run in parallel; the first error in row order is reported.
        let results: Vec<Result<(), CpuError>> =
            dst.par_chunks_mut(band_out).enumerate().map_init(|| Scratch::new(&shape), band).collect();
        results.into_iter().collect::<Result<(), CpuError>>()?;
    }
    Ok(out)
}
