//! How a quantized weight is stored under each output convention: the tensors (names,
//! dtypes, shapes) are known from the shape alone, before any data is computed, so
//! that a file's header can be written first and its tensors streamed after.

use blockscale::{Fp8Tile, QuantizedMatrix, ScaleData, ScaleLayout, Scheme};
use blockscale_golden::case::{codes_dtype, scale_bytes, scale_dtype, scale_shape};
use safetensors::Dtype;

use crate::checkpoint::PlannedTensor;
use crate::cli::ConventionArg;
use crate::error::CliError;

/// The tensors of one quantized weight, ready to write.
pub struct Encoded {
    /// `(name, bytes)` in plan order.
    pub tensors: Vec<(String, Vec<u8>)>,
}

/// Planned output tensors and the metadata entries that go with them.
pub type Plan = (Vec<PlannedTensor>, Vec<(String, String)>);

/// The layer prefix of a weight name (`a.b.weight` -> `a.b`).
pub fn prefix(name: &str) -> &str {
    name.strip_suffix(".weight").unwrap_or(name)
}

/// The output tensors of weight `name` (`rows x k`), and the metadata entries a native
/// file carries for it. `input_scale`: whether calibration gives this layer an
/// activation scale (NVFP4 conventions only). compressed-tensors stores NVFP4, MXFP4,
/// INT4-G32 and FP8 128x128 blocks.
///
/// # Errors
/// [`CliError::Unsupported`] for a scheme the convention cannot store.
pub fn plan_outputs(
    convention: ConventionArg,
    scheme: Scheme,
    layout: ScaleLayout,
    name: &str,
    rows: usize,
    k: usize,
    input_scale: bool,
) -> Result<Plan, CliError> {
    let shape = scheme.shape(rows, k).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let p = prefix(name);
    let nvfp4 = |data: &str, scale: &str, global: &str, input: &str, global_shape: Vec<usize>| {
        let mut v = vec![
            PlannedTensor::new(format!("{p}.{data}"), Dtype::U8, vec![rows, k / 2]),
            PlannedTensor::new(format!("{p}.{scale}"), Dtype::F8_E4M3, vec![rows, k / 16]),
            PlannedTensor::new(format!("{p}.{global}"), Dtype::F32, global_shape.clone()),
        ];
        if input_scale {
            v.push(PlannedTensor::new(format!("{p}.{input}"), Dtype::F32, global_shape));
        }
        v
    };
    let tile = Scheme::Fp8Block(Fp8Tile::Tile128x128);
    match convention {
        ConventionArg::Deepseek => super::deepseek::plan_outputs(scheme, name, rows, k),
        ConventionArg::Modelopt if scheme != Scheme::NvFp4 => Err(CliError::Unsupported(format!(
            "the modelopt convention stores NVFP4 and (with --scheme fp8-per-tensor) FP8 per tensor, not {scheme}; \
             use --convention native for other schemes"
        ))),
        ConventionArg::Modelopt => {
            Ok((nvfp4("weight", "weight_scale", "weight_scale_2", "input_scale", vec![]), vec![]))
        }
        ConventionArg::CompressedTensors => match scheme {
            Scheme::NvFp4 => Ok((
                nvfp4("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", vec![1]),
                vec![],
            )),
            Scheme::MxFp4 => Ok((
                vec![
                    PlannedTensor::new(format!("{p}.weight_packed"), Dtype::U8, vec![rows, k / 2]),
                    PlannedTensor::new(format!("{p}.weight_scale"), Dtype::U8, vec![rows, k / 32]),
                ],
                vec![],
            )),
            Scheme::Int4G32 | Scheme::Int4G128 => Ok((int4_outputs(name, rows, k, scheme.block_size()), vec![])),
            s if s == tile => Ok((
                vec![
                    PlannedTensor::new(format!("{p}.weight"), Dtype::F8_E4M3, vec![rows, k]),
                    PlannedTensor::new(
                        format!("{p}.weight_scale"),
                        Dtype::F32,
                        vec![shape.scale_rows, shape.scale_cols],
                    ),
                ],
                vec![],
            )),
            _ => Err(CliError::Unsupported(format!(
                "the compressed-tensors convention stores nvfp4, mxfp4, int4-g32, int4-g128 and fp8-block (128x128), not \
                 {scheme}; use --convention native for other schemes"
            ))),
        },
        ConventionArg::Native => {
            let (cd, cs) = codes_dtype(scheme, rows, k);
            let mut v = vec![
                PlannedTensor::new(format!("{name}.codes"), cd, cs),
                PlannedTensor::new(format!("{name}.scales"), scale_dtype(scheme), scale_shape(&shape, layout)),
            ];
            if scheme.has_global_scale() {
                v.push(PlannedTensor::new(format!("{name}.global_encode"), Dtype::F32, vec![1]));
            }
            let meta = vec![
                (format!("{name}.scheme"), scheme.name().to_owned()),
                (format!("{name}.rows"), rows.to_string()),
                (format!("{name}.k"), k.to_string()),
                (format!("{name}.scale_layout"), layout.name().to_owned()),
            ];
            Ok((v, meta))
        }
    }
}

/// compressed-tensors' pack-quantized INT4 tensors of weight `name` (`rows x k`) in
/// groups of `group`: `weight_packed` (I32 `[rows, k / 8]`), `weight_scale` (F16
/// `[rows, k / group]`) and `weight_shape` (I64 `[2]`). The offset-8 nibbles, even
/// element low, are pack-quantized's int32 words (element i in bits 4i..4i+4) read
/// little-endian: codes packed two to a byte are stored as they are.
pub(crate) fn int4_outputs(name: &str, rows: usize, k: usize, group: usize) -> Vec<PlannedTensor> {
    let p = prefix(name);
    vec![
        PlannedTensor::new(format!("{p}.weight_packed"), Dtype::I32, vec![rows, k / 8]),
        PlannedTensor::new(format!("{p}.weight_scale"), Dtype::F16, vec![rows, k / group]),
        PlannedTensor::new(format!("{p}.weight_shape"), Dtype::I64, vec![2]),
    ]
}

/// The `weight_shape` tensor [`int4_outputs`] plans, `[rows, k]` as little-endian i64.
pub(crate) fn int4_weight_shape(name: &str, rows: usize, k: usize) -> (String, Vec<u8>) {
    let dims = [rows as i64, k as i64];
    (format!("{}.weight_shape", prefix(name)), dims.iter().flat_map(|d| d.to_le_bytes()).collect())
}

/// The bytes of the tensors [`plan_outputs`] planned, from the quantized weight and,
/// for a calibrated layer, the activation amax.
pub fn encode(
    convention: ConventionArg,
    name: &str,
    q: QuantizedMatrix,
    input: Option<blockscale::GlobalScale>,
) -> Encoded {
    // Moved, not copied: the data and byte scales are output tensors as they are.
    let parts = q.into_parts();
    let scales = match parts.scales {
        ScaleData::Bytes(b) => b,
        other => scale_bytes(&other),
    };
    let (scheme, shape, global) = (parts.scheme, (parts.rows, parts.k), parts.global_scale);
    let p = prefix(name);
    let (data_name, scale_name) = match convention {
        ConventionArg::CompressedTensors if !matches!(scheme, Scheme::Fp8Block(_)) => {
            (format!("{p}.weight_packed"), format!("{p}.weight_scale"))
        }
        ConventionArg::Deepseek => (format!("{p}.weight"), format!("{p}.weight_scale_inv")),
        ConventionArg::Native => (format!("{name}.codes"), format!("{name}.scales")),
        ConventionArg::Modelopt | ConventionArg::CompressedTensors => {
            (format!("{p}.weight"), format!("{p}.weight_scale"))
        }
    };
    let rest = encode_in_place(convention, scheme, name, shape, global, input);
    Encoded { tensors: [(data_name, parts.data), (scale_name, scales)].into_iter().chain(rest).collect() }
}

/// The tensors [`encode`] writes after a weight's codes and scales (every convention
/// stores those exactly as a [`QuantizedMatrix`] holds them: `data()`, and the scales
/// as little-endian bytes, the first two planned tensors), so that a weight quantized
/// into buffers written as they are needs only these.
pub fn encode_in_place(
    convention: ConventionArg,
    scheme: Scheme,
    name: &str,
    (rows, k): (usize, usize),
    global: Option<blockscale::GlobalScale>,
    input: Option<blockscale::GlobalScale>,
) -> Vec<(String, Vec<u8>)> {
    let p = prefix(name);
    let f32b = |x: f32| x.to_le_bytes().to_vec();
    let mut tensors = Vec::new();
    match convention {
        ConventionArg::Modelopt => {
            // Decode scales: the reciprocal of the encode scale quantization used.
            tensors.push((format!("{p}.weight_scale_2"), f32b(global.map_or(1.0, |g| g.decode()))));
            if let Some(i) = input {
                tensors.push((format!("{p}.input_scale"), f32b(i.decode())));
            }
        }
        ConventionArg::CompressedTensors => match scheme {
            Scheme::NvFp4 => {
                // Encode scales ("divisor" semantics).
                tensors.push((format!("{p}.weight_global_scale"), f32b(global.map_or(1.0, |g| g.encode()))));
                if let Some(i) = input {
                    tensors.push((format!("{p}.input_global_scale"), f32b(i.encode())));
                }
            }
            Scheme::Int4G32 | Scheme::Int4G128 => tensors.push(int4_weight_shape(name, rows, k)),
            _ => {}
        },
        // DeepSeek's layout has only the codes and the tile scales.
        ConventionArg::Deepseek => {}
        ConventionArg::Native => {
            if let Some(g) = global {
                tensors.push((format!("{name}.global_encode"), f32b(g.encode())));
            }
        }
    }
    tensors
}

#[cfg(test)]
mod in_place_tests {
    use blockscale::{GlobalScale, QuantizeOptions, quantize};
    use ndarray::Array2;

    use super::*;

    /// Every (convention, scheme) pair `quantize` can write, with and without an
    /// activation scale: the codes and scales stored verbatim first, then exactly the
    /// tensors `encode_in_place` gives.
    #[test]
    fn in_place_is_encode_split_after_codes_and_scales() {
        let x = Array2::from_shape_fn((4, 256), |(r, c)| ((r * 37 + c * 11) % 29) as f32 - 14.0);
        let cases = [
            (ConventionArg::Modelopt, Scheme::NvFp4),
            (ConventionArg::CompressedTensors, Scheme::NvFp4),
            (ConventionArg::Native, Scheme::NvFp4),
            (ConventionArg::Native, Scheme::MxFp6E3M2),
            (ConventionArg::Native, Scheme::Fp8Block(blockscale::Fp8Tile::Row1x128)),
            (ConventionArg::Native, Scheme::Int4G32),
            (ConventionArg::CompressedTensors, Scheme::MxFp4),
            (ConventionArg::CompressedTensors, Scheme::Int4G32),
            (ConventionArg::CompressedTensors, Scheme::Int4G128),
            (ConventionArg::Native, Scheme::Int4G128),
            (ConventionArg::CompressedTensors, Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128)),
            (ConventionArg::Deepseek, Scheme::Fp8Block(blockscale::Fp8Tile::Tile128x128)),
        ];
        for (convention, scheme) in cases {
            for input in [None, Some(GlobalScale::from_amax(3.5).unwrap())] {
                let o = QuantizeOptions::default().with_scale_layout(ScaleLayout::Linear);
                let q = quantize(x.view(), scheme, &o).unwrap();
                let (data, scales, global) = (q.data().to_vec(), scale_bytes(q.scales()), q.global_scale());
                let mut all = encode(convention, "l.weight", q, input).tensors;
                let rest = all.split_off(2);
                assert_eq!((&all[0].1, &all[1].1), (&data, &scales), "{convention:?} {scheme}");
                let in_place = encode_in_place(convention, scheme, "l.weight", (4, 256), global, input);
                assert_eq!(in_place, rest, "{convention:?} {scheme}");
            }
        }
    }
}
