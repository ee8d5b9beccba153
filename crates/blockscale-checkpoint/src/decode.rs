//! Reading a found weight's data: a library scheme's matrix as a [`QuantizedMatrix`]
//! (its parts checked as they are stored), and the formats the library has no scheme
//! for (FP8 per tensor, channel or arbitrary block; INT4 with zero points or other
//! groups) decoded to floats here.

use blockscale_formats::{
    DataLayout, E4M3, Fp8Tile, GlobalScale, QuantizedMatrix, QuantizedParts, ScaleData, ScaleFormat, Scheme, Source,
};
use half::f16;
use rayon::prelude::*;

use crate::dtypes::scales_from;
use crate::{Catalog, CheckpointError, Decode, Found, GlobalSource};

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The values of float tensor `name` (F32, BF16 or F16, as detection checked), exactly.
fn floats(catalog: &Catalog<'_>, name: &str) -> Result<Vec<f32>, CheckpointError> {
    let missing = || CheckpointError::tensor(catalog.path_of(name), name, "missing");
    let ((_, t), b) = catalog.get(name).zip(catalog.bytes(name)).ok_or_else(missing)?;
    let values = crate::values::from_le_bytes(t.dtype, b)
        .ok_or_else(|| CheckpointError::tensor(catalog.path_of(name), name, "not a whole F32, BF16 or F16 tensor"))?;
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

/// A weight read from a checkpoint, ready for a backend.
#[derive(Clone, Debug, PartialEq)]
pub enum Weight {
    /// A block-scaled matrix of a library scheme (`rows x k` of the [`Found`]), for
    /// `gemm`, `gemv`, `dequantize` and `prepare` on either backend, with the activation
    /// scale the checkpoint carries for its layer, if any (ModelOpt `input_scale`,
    /// compressed-tensors `input_global_scale`).
    Matrix {
        /// The matrix, exactly as stored.
        q: QuantizedMatrix,
        /// The layer's activation scale.
        input_scale: Option<GlobalScale>,
        /// gpt-oss experts: the logical weight is each of these experts' `[out, K]`
        /// matrix transposed (`out_shape` `[E, K, out]`).
        transpose_experts: Option<usize>,
    },
    /// A format the library has no scheme for (FP8 per tensor or channel, INT4 with zero
    /// points, ...): its values, decoded exactly as the convention defines them and
    /// rounded once to f32, row-major in the [`Found`]'s `out_shape`.
    Values(Vec<f32>),
}

/// The weight `f` of `catalog`: a [`Weight::Matrix`] for every library scheme, including
/// FP8 in 128 x 128 blocks with K a multiple of 128 (DeepSeek's, and compressed-tensors'
/// with finite f32 scales) and symmetric compressed-tensors INT4 in groups of 32 or 128
/// whose scales f16 holds exactly; [`Weight::Values`] otherwise.
///
/// # Errors
/// As [`matrix`] and [`values`].
pub fn weight(catalog: &Catalog<'_>, f: &Found) -> Result<Weight, CheckpointError> {
    let bytes =
        |name: &str| catalog.bytes(name).ok_or_else(|| CheckpointError::tensor(catalog.path_of(name), name, "missing"));
    let bad = |name: &str, why: String| CheckpointError::tensor(catalog.path_of(name), name, why);
    let input_scale = input_scale(catalog, f)?;
    let parts = |scheme, data: &[u8], scales| QuantizedParts {
        scheme,
        rows: f.rows,
        k: f.k,
        data: data.to_vec(),
        data_layout: DataLayout::RowMajor,
        scales,
        scale_layout: blockscale_formats::ScaleLayout::Linear,
        global_scale: None,
    };
    let from_parts = |p: QuantizedParts| {
        let scheme = p.scheme;
        QuantizedMatrix::from_parts(p)
            .map_err(|e| bad(&f.main, format!("its parts do not form a valid {scheme} matrix: {e}")))
    };
    match &f.decode {
        Decode::Matrix { transpose_experts, .. } => {
            let q = matrix(catalog, f)?.expect("a Matrix decode");
            Ok(Weight::Matrix { q, input_scale, transpose_experts: *transpose_experts })
        }
        Decode::DeepseekFp8 { scales } if f.k.is_multiple_of(128) => {
            let s = deepseek_scales(catalog, f, scales)?;
            let q = from_parts(parts(Scheme::Fp8Block(Fp8Tile::Tile128x128), bytes(&f.main)?, ScaleData::F32(s)))?;
            Ok(Weight::Matrix { q, input_scale, transpose_experts: None })
        }
        // compressed-tensors FP8 in 128 x 128 blocks with f32 scales is the library's
        // fp8-block (what `quantize --convention compressed-tensors` writes).
        Decode::ScaledFp8 { scale, block: [128, 128] }
            if f.k.is_multiple_of(128)
                && catalog.get(scale).is_some_and(|(_, t)| t.dtype == safetensors::Dtype::F32) =>
        {
            let s = f32s(bytes(scale)?);
            if s.iter().all(|v| v.is_finite() && *v >= 0.0) {
                let q = from_parts(parts(Scheme::Fp8Block(Fp8Tile::Tile128x128), bytes(&f.main)?, ScaleData::F32(s)))?;
                Ok(Weight::Matrix { q, input_scale, transpose_experts: None })
            } else {
                Ok(Weight::Values(values(catalog, f)?))
            }
        }
        Decode::PackedInt4 { scales, zero_point: None, group: group @ (32 | 128) } if f.k.is_multiple_of(*group) => {
            let s = floats(catalog, scales)?;
            let exact: Option<Vec<f16>> =
                s.iter().map(|&v| Some(f16::from_f32(v)).filter(|h| h.to_f32().to_bits() == v.to_bits())).collect();
            let scheme = if *group == 32 { Scheme::Int4G32 } else { Scheme::Int4G128 };
            match exact {
                // Eight nibbles a little-endian word, element i in bits 4i..4i+4: the
                // library's two codes a byte, even element low, byte for byte.
                Some(h) => {
                    let q = from_parts(parts(scheme, bytes(&f.main)?, ScaleData::F16(h)))?;
                    Ok(Weight::Matrix { q, input_scale, transpose_experts: None })
                }
                None => Ok(Weight::Values(values(catalog, f)?)),
            }
        }
        _ => Ok(Weight::Values(values(catalog, f)?)),
    }
}

/// The activation scale `f`'s layer carries (the optional last part of the NVFP4
/// conventions), if any.
fn input_scale(catalog: &Catalog<'_>, f: &Found) -> Result<Option<GlobalScale>, CheckpointError> {
    let Decode::Matrix { global, .. } = &f.decode else { return Ok(None) };
    let Some(name) = f.parts.iter().find(|p| p.ends_with(".input_scale") || p.ends_with(".input_global_scale")) else {
        return Ok(None);
    };
    let Some(v) = catalog.bytes(name).map(f32s).and_then(|v| v.first().copied()) else { return Ok(None) };
    let bad = |e: blockscale_formats::FormatError| {
        CheckpointError::tensor(catalog.path_of(name), name, format!("invalid activation scale: {e}"))
    };
    // Stored as the per-tensor scale is: a decode scale (ModelOpt) or an encode scale.
    match global {
        GlobalSource::EncodeTensor(_) => GlobalScale::from_encode(v).map(Some).map_err(bad),
        _ => GlobalScale::from_decode(v).map(Some).map_err(bad),
    }
}

/// The [`QuantizedMatrix`] of a [`Decode::Matrix`] weight, exactly as stored (`None`
/// for the other decodes).
///
/// # Errors
/// [`CheckpointError::Tensor`] for an invalid per-tensor scale, a block scale that is no
/// value of its format, or parts that do not form a valid matrix (nonzero swizzle
/// padding, say).
pub fn matrix(catalog: &Catalog<'_>, f: &Found) -> Result<Option<QuantizedMatrix>, CheckpointError> {
    let Decode::Matrix { scheme, scales, layout, global, .. } = &f.decode else { return Ok(None) };
    let bytes =
        |name: &str| catalog.bytes(name).ok_or_else(|| CheckpointError::tensor(catalog.path_of(name), name, "missing"));
    let bad = |name: &str, why: String| CheckpointError::tensor(catalog.path_of(name), name, why);
    let sbytes = bytes(scales)?;
    check_block_scales(scheme.scale_format(), sbytes).map_err(|why| bad(scales, why))?;
    let scale_data = scales_from(scheme.scale_format(), sbytes);
    let scalar = |name: &str| -> Result<f32, CheckpointError> { Ok(f32s(bytes(name)?)[0]) };
    let global_scale = match global {
        GlobalSource::None => None,
        GlobalSource::DecodeTensor(n) => {
            Some(GlobalScale::from_decode(scalar(n)?).map_err(|e| bad(n, format!("invalid per-tensor scale: {e}")))?)
        }
        GlobalSource::EncodeTensor(n) => {
            Some(GlobalScale::from_encode(scalar(n)?).map_err(|e| bad(n, format!("invalid per-tensor scale: {e}")))?)
        }
    };
    QuantizedMatrix::from_parts(QuantizedParts {
        scheme: *scheme,
        rows: f.rows,
        k: f.k,
        data: bytes(&f.main)?.to_vec(),
        data_layout: DataLayout::RowMajor,
        scales: scale_data,
        scale_layout: *layout,
        global_scale,
    })
    .map(Some)
    .map_err(|e| bad(&f.main, format!("its parts do not form a valid {scheme} matrix: {e}")))
}

/// DeepSeek's tile scales, refused if any is NaN, infinite or negative: DeepSeek's
/// writers never store one, so such a value is damage, refused rather than spread over
/// 128 x 128 weights.
fn deepseek_scales(catalog: &Catalog<'_>, f: &Found, scales: &str) -> Result<Vec<f32>, CheckpointError> {
    let bytes =
        catalog.bytes(scales).ok_or_else(|| CheckpointError::tensor(catalog.path_of(scales), scales, "missing"))?;
    let s = f32s(bytes);
    if let Some((i, v)) = s.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
        let cols = f.k.div_ceil(128).max(1);
        return Err(CheckpointError::tensor(
            catalog.path_of(scales),
            scales,
            format!("scale [{}, {}] is {v}, not a finite scale >= 0", i / cols, i % cols),
        ));
    }
    Ok(s)
}

/// The dequantized values of a weight whose format the library has no scheme for
/// (every [`Decode`] but [`Decode::Matrix`], which a backend dequantizes from
/// [`matrix`]), row-major in `f.out_shape`, each rounded once to `O`.
///
/// # Errors
/// [`CheckpointError::Tensor`] for a damaged scale; [`CheckpointError::Invalid`] for a
/// [`Decode::Matrix`] weight.
pub fn values<O: Source>(catalog: &Catalog<'_>, f: &Found) -> Result<Vec<O>, CheckpointError> {
    let bytes =
        |name: &str| catalog.bytes(name).ok_or_else(|| CheckpointError::tensor(catalog.path_of(name), name, "missing"));
    let bad = |name: &str, why: String| CheckpointError::tensor(catalog.path_of(name), name, why);
    match &f.decode {
        Decode::Matrix { .. } => Err(CheckpointError::Invalid(format!(
            "{}: a {} matrix: read it with `matrix` and dequantize it on a backend",
            f.main, f.format
        ))),
        Decode::DeepseekFp8 { scales } => {
            let s = deepseek_scales(catalog, f, scales)?;
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

/// `[E, out, K]` to `[E, K, out]` (gpt-oss experts, [`Weight::Matrix`]'s
/// `transpose_experts`).
pub fn transpose_experts<O: Copy + Default + Send + Sync>(v: &[O], experts: usize, out: usize, k: usize) -> Vec<O> {
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
        assert_eq!(transpose_experts(&v, 2, 2, 3), vec![0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
    }
}
