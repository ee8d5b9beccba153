//! A program outside the blockscale workspace, as an engine would be: it depends on the
//! `blockscale` package, writes a small checkpoint in every convention blockscale knows
//! (the ones it writes through `blockscale::checkpoint::save`, gpt-oss MXFP4 and ModelOpt
//! FP8 per tensor with a hand-built safetensors header, as those tools write them), and
//! reads each back with `blockscale::checkpoint::Reader`, checking what comes out.
//! `cargo xtask test` runs it; it exits non-zero on the first mismatch.

use std::path::Path;

use blockscale::checkpoint::{Dtype, Reader, Weight, by_name, save};
use blockscale::ndarray::Array2;
use blockscale::{Backend, Fp8Tile, QuantizeOptions, Scheme};

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let dir = tempfile::tempdir()?;
    let w = Array2::from_shape_fn((64, 256), |(r, c)| ((r * 37 + c * 11) % 29) as f32 / 7.0 - 2.0);
    let tile = Scheme::Fp8Block(Fp8Tile::Tile128x128);
    let written = [
        ("native", Scheme::MxFp6E2M3),
        ("modelopt", Scheme::NvFp4),
        ("compressed-tensors", Scheme::NvFp4),
        ("compressed-tensors", Scheme::MxFp4),
        ("compressed-tensors", Scheme::Int4G128),
        ("compressed-tensors", tile),
        ("deepseek", tile),
    ];
    for (i, (convention, scheme)) in written.into_iter().enumerate() {
        let path = dir.path().join(format!("{i}.safetensors"));
        let q = Backend::Cpu.quantize(w.view(), scheme, &QuantizeOptions::default())?;
        let writes = by_name(convention).and_then(|c| c.writes()).ok_or("not a writer")?;
        save(&path, writes, vec![("model.layers.0.mlp.up_proj.weight".into(), q.clone())], vec![], false)?;
        let loaded = one_weight(&path)?;
        check(loaded.found.convention == convention, format!("{convention}: read as {}", loaded.found.convention))?;
        match loaded.weight {
            Weight::Matrix { q: back, .. } => {
                check(back.data() == q.data() && back.scales() == q.scales(), format!("{convention} {scheme}: codes"))?
            }
            Weight::Values(_) => return Err(format!("{convention} {scheme}: not read as a matrix").into()),
        }
        println!("{convention:>18} {scheme:<18} read back as the quantized matrix");
    }

    // gpt-oss MXFP4, as OpenAI ships it: `_blocks` [E, out, K/32, 16] and `_scales`
    // [E, out, K/32] (UE8M0 exponents), experts transposed to [E, K, out] when read.
    let path = dir.path().join("gpt-oss.safetensors");
    let (e, out, k) = (2usize, 4usize, 64usize);
    let blocks: Vec<u8> = (0..e * out * k / 2).map(|i| (i % 251) as u8).collect();
    let scales = vec![127u8; e * out * k / 32];
    write_raw(
        &path,
        &[
            ("block.0.mlp.mlp1_weight_blocks", Dtype::U8, vec![e, out, k / 32, 16], blocks),
            ("block.0.mlp.mlp1_weight_scales", Dtype::U8, vec![e, out, k / 32], scales),
        ],
    )?;
    let loaded = one_weight(&path)?;
    check(loaded.found.out_shape == [e, k, out], format!("gpt-oss: shape {:?}", loaded.found.out_shape))?;
    check(matches!(loaded.weight, Weight::Matrix { transpose_experts: Some(2), .. }), "gpt-oss: experts".into())?;
    println!("{:>18} {:<18} read as {} experts, transposed", "gpt-oss", "mxfp4", e);

    // ModelOpt FP8 per tensor: E4M3 codes and one f32 decode scale.
    let path = dir.path().join("modelopt-fp8.safetensors");
    let codes: Vec<u8> = (0..16 * 32).map(|i| (i % 0x7e) as u8).collect();
    write_raw(
        &path,
        &[
            ("l.weight", Dtype::F8_E4M3, vec![16, 32], codes),
            ("l.weight_scale", Dtype::F32, vec![], 0.5f32.to_le_bytes().to_vec()),
        ],
    )?;
    let loaded = one_weight(&path)?;
    check(loaded.found.format == "fp8-per-tensor", format!("modelopt FP8: {}", loaded.found.format))?;
    let Weight::Values(v) = loaded.weight else { return Err("modelopt FP8: expected values".into()) };
    // Code 0x38 is 1.0 in E4M3: index 0x38 holds 1.0 x 0.5.
    check(v[0x38] == 0.5, format!("modelopt FP8: value {}", v[0x38]))?;
    println!("{:>18} {:<18} read as values", "modelopt", "fp8-per-tensor");
    println!("every convention read from outside the workspace");
    Ok(())
}

/// The only quantized weight of the checkpoint at `path`.
fn one_weight(path: &Path) -> Result<blockscale::checkpoint::Loaded, Failure> {
    let reader = Reader::open(path)?;
    let mut weights = reader.weights();
    let first = weights.next().ok_or("no weight found")??;
    check(weights.next().is_none(), "more than one weight".into())?;
    Ok(first)
}

fn check(ok: bool, what: String) -> Result<(), Failure> {
    if ok { Ok(()) } else { Err(format!("mismatch: {what}").into()) }
}

/// A safetensors file of `tensors` exactly as given (header JSON written by hand).
fn write_raw(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Result<(), Failure> {
    let mut header = String::from("{");
    let mut offset = 0;
    for (i, (name, dtype, shape, bytes)) in tensors.iter().enumerate() {
        let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
        let sep = if i == 0 { "" } else { "," };
        header += &format!(
            "{sep}\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{offset},{}]}}",
            dims.join(","),
            offset + bytes.len()
        );
        offset += bytes.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    for (.., bytes) in tensors {
        file.extend_from_slice(bytes);
    }
    std::fs::write(path, file)?;
    Ok(())
}
