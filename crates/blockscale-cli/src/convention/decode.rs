//! Dequantizing a found weight to f32, f16 or bf16 with the CPU backend.

use blockscale::Source;
use blockscale::{
    DataLayout, DequantizeOptions, E4M3, GlobalScale, QuantizedMatrix, QuantizedParts, ScaleFormat, dequantize_slice,
};
use blockscale_golden::case::scales_from;
use rayon::prelude::*;

use super::{Catalog, Decode, Found, GlobalSource};
use crate::error::CliError;

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The values of float tensor `name` (F32, BF16 or F16, as detection checked), exactly.
fn floats(catalog: &Catalog<'_>, name: &str) -> Result<Vec<f32>, CliError> {
    let missing = || CliError::tensor(catalog.path_of(name), name, "missing");
    let ((_, t), b) = catalog.get(name).zip(catalog.bytes(name)).ok_or_else(missing)?;
    let values = crate::values::from_le_bytes(t.dtype, b)
        .ok_or_else(|| CliError::tensor(catalog.path_of(name), name, "not a whole F32, BF16 or F16 tensor"))?;
    Ok(values.to_f32())
}

/// Little-endian 32-bit words.
fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The signed value of nibble `i` (bits `4i..4i+4`) of an offset-8 word.
fn nibble(word: u32, i: usize) -> i32 {
    ((word >> (4 * i)) & 0xF) as i32 - 8
}

/// The dequantized values of `f`, row-major in `f.out_shape`.
///
/// # Errors
/// [`CliError::Tensor`] for an invalid per-tensor scale or parts that do not form a
/// valid matrix (nonzero swizzle padding, say).
pub fn decode<O: Source>(catalog: &Catalog<'_>, f: &Found) -> Result<Vec<O>, CliError> {
    let bytes =
        |name: &str| catalog.bytes(name).ok_or_else(|| CliError::tensor(catalog.path_of(name), name, "missing"));
    let bad = |name: &str, why: String| CliError::tensor(catalog.path_of(name), name, why);
    match &f.decode {
        Decode::Matrix { scheme, scales, layout, global, transpose_experts } => {
            let sbytes = bytes(scales)?;
            check_block_scales(scheme.scale_format(), sbytes).map_err(|why| bad(scales, why))?;
            let scale_data = scales_from(scheme.scale_format(), sbytes);
            let scalar = |name: &str| -> Result<f32, CliError> { Ok(f32s(bytes(name)?)[0]) };
            let global_scale = match global {
                GlobalSource::None => None,
                GlobalSource::DecodeTensor(n) => Some(
                    GlobalScale::from_decode(scalar(n)?)
                        .map_err(|e| bad(n, format!("invalid per-tensor scale: {e}")))?,
                ),
                GlobalSource::EncodeTensor(n) => Some(
                    GlobalScale::from_encode(scalar(n)?)
                        .map_err(|e| bad(n, format!("invalid per-tensor scale: {e}")))?,
                ),
            };
            let q = QuantizedMatrix::from_parts(QuantizedParts {
                scheme: *scheme,
                rows: f.rows,
                k: f.k,
                data: bytes(&f.main)?.to_vec(),
                data_layout: DataLayout::RowMajor,
                scales: scale_data,
                scale_layout: *layout,
                global_scale,
            })
            .map_err(|e| bad(&f.main, format!("its parts do not form a valid {scheme} matrix: {e}")))?;
            let mut out = vec![O::default(); f.rows * f.k];
            dequantize_slice(&q, &mut out, &DequantizeOptions::default())
                .map_err(|e| bad(&f.main, format!("dequantizing failed: {e}")))?;
            Ok(match transpose_experts {
                Some(e) => transpose_experts_of(&out, *e, f.rows / e, f.k),
                None => out,
            })
        }
        Decode::DeepseekFp8 { scales } => {
            let s = f32s(bytes(scales)?);
            // DeepSeek's writers never store a NaN, infinite or negative block scale:
            // such a value is damage, refused rather than spread over 128 x 128 weights.
            if let Some((i, v)) = s.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
                let cols = f.k.div_ceil(128).max(1);
                return Err(bad(scales, format!("scale [{}, {}] is {v}, not a finite scale >= 0", i / cols, i % cols)));
            }
            Ok(scaled_fp8(bytes(&f.main)?, &s, f.k, [128, 128]))
        }
        Decode::ScaledFp8 { scale, block } => Ok(scaled_fp8(bytes(&f.main)?, &floats(catalog, scale)?, f.k, *block)),
        Decode::PackedInt4 { scales, zero_point, group } => {
            let s = floats(catalog, scales)?;
            let w = words(bytes(&f.main)?);
            let z = zero_point.as_deref().map(bytes).transpose()?.map(words);
            let (k, groups, row_words) = (f.k, f.k / group, f.k.div_ceil(8));
            let mut out = vec![O::default(); f.rows * k];
            out.par_chunks_mut(k.max(1)).enumerate().for_each(|(n, o)| {
                let (w, s) = (&w[n * row_words..(n + 1) * row_words], &s[n * groups..(n + 1) * groups]);
                // The zero points of row n: nibble n % 8 of the words of row n / 8.
                let z = z.as_ref().map(|z| &z[(n / 8) * groups..(n / 8 + 1) * groups]);
                for (c, o) in o.iter_mut().enumerate() {
                    let g = c / group;
                    let zp = z.map_or(0, |z| nibble(z[g], n % 8));
                    // (q - zp) is exact; the product is exact for BF16 and F16 scales and
                    // rounds once for F32 ones, as the package's own float32 product does.
                    *o = O::from_f32((nibble(w[c / 8], c % 8) - zp) as f32 * s[g]);
                }
            });
            Ok(out)
        }
        Decode::PerTensorFp8 { scale } => {
            let s = f32s(bytes(scale)?)[0];
            // 0 is an all-zero weight's scale (amax / 448), as fp8-per-tensor writes it.
            if !(s.is_finite() && s >= 0.0) || s.is_sign_negative() {
                return Err(bad(scale, format!("the per-tensor scale is {s}, not a finite number >= 0")));
            }
            // One tile covering the whole tensor.
            Ok(scaled_fp8(bytes(&f.main)?, &[s], f.k, [f.rows.max(1), f.k.max(1)]))
        }
    }
}

/// E4M3 codes `w` (row-major, rows of `k`) times one scale per `br x bc` tile:
/// `w[n, c] * s[n / br, c / bc]`, `s` row-major with `ceil(k / bc)` scales per row of
/// tiles (the DeepSeek, compressed-tensors and ModelOpt FP8 layouts).
fn scaled_fp8<O: Source>(w: &[u8], s: &[f32], k: usize, [br, bc]: [usize; 2]) -> Vec<O> {
    let kb = k.div_ceil(bc);
    let mut out = vec![O::default(); w.len()];
    out.par_chunks_mut(k.max(1)).zip(w.par_chunks(k.max(1))).enumerate().for_each(|(n, (o, w))| {
        let srow = &s[(n / br) * kb..(n / br + 1) * kb];
        for (c, (o, &b)) in o.iter_mut().zip(w).enumerate() {
            *o = O::from_f32(E4M3::from_bits(b).to_f32() * srow[c / bc]);
        }
    });
    out
}

/// Checks block scales as stored: each format's NaN (UE4M3 `0x7f`, UE8M0 `0xff`, a NaN
/// float) is a NaN block, what `quantize --non-finite poison` writes, and decodes as
/// one; what is no value of the format (a UE4M3 byte with the sign bit set) or no valid
/// scale (an infinite or negative float) is an error naming its position in storage.
fn check_block_scales(format: ScaleFormat, bytes: &[u8]) -> Result<(), String> {
    let bad_float = |i: usize, v: f32| Err(format!("block scale {i} (in storage order) is {v}, not a scale"));
    match format {
        ScaleFormat::UE4M3 => match bytes.iter().position(|&b| b & 0x80 != 0) {
            Some(i) => Err(format!(
                "block scale {i} (in storage order) is 0x{:02x}, which has the sign bit set: not a UE4M3 value",
                bytes[i]
            )),
            None => Ok(()),
        },
        ScaleFormat::UE8M0 => Ok(()),
        ScaleFormat::F32 => match f32s(bytes).into_iter().enumerate().find(|(_, v)| v.is_infinite() || *v < 0.0) {
            Some((i, v)) => bad_float(i, v),
            None => Ok(()),
        },
        ScaleFormat::F16 => {
            let v = bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32());
            match v.enumerate().find(|(_, v)| v.is_infinite() || *v < 0.0) {
                Some((i, v)) => bad_float(i, v),
                None => Ok(()),
            }
        }
    }
}

/// `[E, out, K]` to `[E, K, out]`.
fn transpose_experts_of<O: Copy + Default + Send + Sync>(v: &[O], experts: usize, out: usize, k: usize) -> Vec<O> {
    let mut t = vec![O::default(); v.len()];
    t.par_chunks_mut((out * k).max(1)).zip(v.par_chunks((out * k).max(1))).take(experts).for_each(|(t, v)| {
        for r in 0..out {
            for c in 0..k {
                t[c * out + r] = v[r * k + c];
            }
        }
    });
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_each_expert() {
        // Two experts of 2 x 3: [[0 1 2] [3 4 5]] and [[6 7 8] [9 10 11]].
        let v: Vec<u32> = (0..12).collect();
        assert_eq!(transpose_experts_of(&v, 2, 2, 3), vec![0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
    }
}
