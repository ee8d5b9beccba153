//! The reader against the writer: every (convention, scheme) pair blockscale writes,
//! saved and read back, gives the quantizer's matrix (codes and scales byte for byte,
//! the per-tensor scale as the convention stores it), plain tensors come back as they
//! went in, and broken files end in typed errors naming the file and tensor.

use std::path::Path;

use blockscale_checkpoint::{CheckpointError, Reader, Weight, by_name, save};
use blockscale_formats::rng::SplitMix64;
use blockscale_formats::{Fp8Tile, QuantizeOptions, QuantizedMatrix, ScaleLayout, Scheme};
use ndarray::Array2;
use safetensors::Dtype;

/// A deterministic `rows x k` matrix with a few outliers.
fn weights(rows: usize, k: usize, seed: u64) -> Array2<f32> {
    let mut rng = SplitMix64::new(seed);
    Array2::from_shape_fn((rows, k), |_| {
        let x = rng.uniform_f32(-1.0, 1.0);
        if rng.below(97) == 0 { x * 40.0 } else { x }
    })
}

fn quantize(w: &Array2<f32>, scheme: Scheme, layout: ScaleLayout) -> QuantizedMatrix {
    blockscale_cpu::quantize(w.view(), scheme, &QuantizeOptions::default().with_scale_layout(layout)).unwrap()
}

/// What the convention keeps of a quantized matrix: everything but the per-tensor
/// scale's other half (ModelOpt stores the decode scale, the others the encode scale,
/// and `1 / (1 / x)` need not be `x` in f32).
fn assert_same(got: &QuantizedMatrix, want: &QuantizedMatrix, stores_decode: bool, what: &str) {
    assert_eq!((got.scheme(), got.rows(), got.k()), (want.scheme(), want.rows(), want.k()), "{what}");
    assert_eq!(got.data(), want.data(), "{what}: codes");
    assert_eq!(got.scales(), want.scales(), "{what}: scales");
    assert_eq!(got.scale_layout(), want.scale_layout(), "{what}: scale layout");
    let g = |q: &QuantizedMatrix| q.global_scale().map(|g| if stores_decode { g.decode() } else { g.encode() });
    assert_eq!(g(got).map(f32::to_bits), g(want).map(f32::to_bits), "{what}: per-tensor scale");
}

#[test]
fn every_written_pair_reads_back_as_the_quantized_matrix() {
    let tile = Scheme::Fp8Block(Fp8Tile::Tile128x128);
    let mut pairs: Vec<(&str, Scheme, ScaleLayout)> = vec![
        ("modelopt", Scheme::NvFp4, ScaleLayout::Linear),
        ("compressed-tensors", Scheme::NvFp4, ScaleLayout::Linear),
        ("compressed-tensors", Scheme::MxFp4, ScaleLayout::Linear),
        ("compressed-tensors", Scheme::Int4G32, ScaleLayout::Linear),
        ("compressed-tensors", Scheme::Int4G128, ScaleLayout::Linear),
        ("compressed-tensors", tile, ScaleLayout::Linear),
        ("deepseek", tile, ScaleLayout::Linear),
    ];
    for scheme in Scheme::ALL {
        for layout in ScaleLayout::ALL.into_iter().filter(|&l| scheme.supports_layout(l)) {
            pairs.push(("native", scheme, layout));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for (i, (convention, scheme, layout)) in pairs.into_iter().enumerate() {
        let what = format!("{convention} {scheme} {}", layout.name());
        // Ragged rows (not a multiple of 128) and K a multiple of every block.
        let (w1, w2) = (weights(136, 256, i as u64), weights(8, 256, 1000 + i as u64));
        let (q1, q2) = (quantize(&w1, scheme, layout), quantize(&w2, scheme, layout));
        let norm: Vec<u8> = (0..16u16).flat_map(|x| half::bf16::from_f32(f32::from(x)).to_le_bytes()).collect();
        let path = dir.path().join(format!("{i}.safetensors"));
        let writes = by_name(convention).unwrap().writes().unwrap();
        let named = vec![
            ("model.layers.0.mlp.up_proj.weight".to_owned(), q1.clone()),
            ("model.layers.0.mlp.down_proj.weight".to_owned(), q2.clone()),
        ];
        let plain = vec![("model.norm.weight".to_owned(), Dtype::BF16, vec![16], norm.clone())];
        save(&path, writes, named, plain, false).unwrap();

        let reader = Reader::open(&path).unwrap();
        assert_eq!(reader.found().len(), 2, "{what}");
        let stores_decode = convention == "modelopt";
        for (name, want) in [("model.layers.0.mlp.up_proj.weight", &q1), ("model.layers.0.mlp.down_proj.weight", &q2)] {
            let loaded = reader.weight(name).unwrap_or_else(|| panic!("{what}: {name} not found")).unwrap();
            assert_eq!(loaded.found.convention, convention, "{what}");
            assert_eq!(loaded.found.format, scheme.name(), "{what}");
            match &loaded.weight {
                Weight::Matrix { q, input_scale: None, transpose_experts: None } => {
                    assert_same(q, want, stores_decode, &what)
                }
                Weight::Matrix { .. } => panic!("{what}: {name} read with an activation scale or experts"),
                Weight::Values(_) => panic!("{what}: {name} read as values, not a matrix"),
            }
        }
        // In file order through the iterator too.
        assert_eq!(reader.weights().filter(|w| w.is_ok()).count(), 2, "{what}");
        let norm_back = reader.plain_tensor("model.norm.weight").unwrap();
        assert_eq!((norm_back.dtype, norm_back.shape, norm_back.bytes), (Dtype::BF16, &[16][..], &norm[..]), "{what}");
        assert_eq!(norm_back.values().unwrap().to_f32()[3], 3.0);
        assert_eq!(reader.plain_tensors().count(), 1, "{what}");
        // A weight's own tensors are not plain ones, and a name the file lacks is none.
        for part in reader.found().iter().flat_map(|f| &f.parts) {
            assert!(reader.plain_tensor(part).is_none(), "{what}: {part} is part of a weight");
        }
        assert!(reader.plain_tensor("model.missing.weight").is_none(), "{what}");
    }
}

#[test]
fn a_file_of_mixed_schemes_or_no_weights_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let native = by_name("native").unwrap().writes().unwrap();
    let w = weights(16, 128, 7);
    let mixed = vec![
        ("a.weight".to_owned(), quantize(&w, Scheme::NvFp4, ScaleLayout::Linear)),
        ("b.weight".to_owned(), quantize(&w, Scheme::MxFp4, ScaleLayout::Linear)),
    ];
    assert!(matches!(save(&path, native, mixed, vec![], false), Err(CheckpointError::Invalid(_))));
    assert!(matches!(save(&path, native, vec![], vec![], false), Err(CheckpointError::Invalid(_))));
    let deepseek = by_name("deepseek").unwrap().writes().unwrap();
    let nvfp4 = vec![("a.weight".to_owned(), quantize(&w, Scheme::NvFp4, ScaleLayout::Linear))];
    let e = save(&path, deepseek, nvfp4, vec![], false).unwrap_err();
    assert!(matches!(e, CheckpointError::Unsupported(_)), "{e:?}");
    assert!(!path.exists());
}

/// A file written by [`save`] and then damaged by `edit`.
fn damaged(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) -> std::path::PathBuf {
    let path = dir.join("d.safetensors");
    let _ = std::fs::remove_file(&path);
    let w = weights(16, 128, 9);
    let named = vec![("l.weight".to_owned(), quantize(&w, Scheme::NvFp4, ScaleLayout::Linear))];
    save(&path, by_name("modelopt").unwrap().writes().unwrap(), named, vec![], false).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn damaged_files_are_typed_errors_naming_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    // Truncated: the data section no longer matches the header.
    let p = damaged(dir.path(), |b| b.truncate(b.len() - 3));
    match Reader::open(&p) {
        Err(CheckpointError::NotSafetensors { path, reason }) => {
            assert_eq!(path, p);
            assert!(reason.contains("truncated"), "{reason}");
        }
        other => panic!("expected NotSafetensors, got {:?}", other.err()),
    }
    // A companion renamed away: the weight names what is missing.
    let p = damaged(dir.path(), |b| {
        let at = b.windows(12).position(|w| w == b"weight_scale").unwrap();
        b[at..at + 12].copy_from_slice(b"weight_scalX");
    });
    let e = Reader::open(&p).err().unwrap();
    assert!(matches!(&e, CheckpointError::Tensor { path, .. } if *path == p), "{e:?}");
    assert!(e.to_string().contains("l.weight_scale"), "{e}");
    // A UE4M3 block scale with the sign bit set: refused when the weight is read.
    let p = damaged(dir.path(), |b| {
        let n = b.len();
        // The scales (F8_E4M3, 16 x 8) follow the codes; the last tensor's bytes end
        // the file: set a sign bit well inside the data.
        b[n - 40] |= 0x80;
    });
    let reader = Reader::open(&p).unwrap();
    let errors: Vec<CheckpointError> = reader.weights().filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].to_string().contains("sign bit"), "{}", errors[0]);
    assert_eq!(errors[0].path(), Some(p.as_path()));
}

/// Where a convention's own format is read as a library matrix (INT4 words as codes,
/// FP8 128x128 blocks as fp8-block), the library's dequantization of that matrix gives
/// the values the convention defines (`decode_values`, which the CLI's oracle tests
/// check against the producers' own packages).
#[test]
fn convention_formats_read_as_matrices_dequantize_as_the_convention_defines() {
    use blockscale_checkpoint::{Catalog, Declared, Shard, decode_values, detect, weight};
    let dir = tempfile::tempdir().unwrap();
    let tile = Scheme::Fp8Block(Fp8Tile::Tile128x128);
    for (i, (convention, scheme)) in [
        ("compressed-tensors", Scheme::Int4G32),
        ("compressed-tensors", Scheme::Int4G128),
        ("compressed-tensors", tile),
        ("deepseek", tile),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("{i}.safetensors"));
        let q = quantize(&weights(200, 384, 50 + i as u64), scheme, ScaleLayout::Linear);
        let writes = by_name(convention).unwrap().writes().unwrap();
        save(&path, writes, vec![("l.weight".to_owned(), q)], vec![], false).unwrap();
        let shards = [Shard::open(&path).unwrap()];
        let catalog = Catalog::new(&shards).unwrap();
        let (found, _) = detect(&catalog, &Declared::read(&catalog, &[])).unwrap();
        let Weight::Matrix { q, .. } = weight(&catalog, &found[0]).unwrap() else {
            panic!("{convention} {scheme}: not read as a matrix")
        };
        let library = blockscale_cpu::dequantize::<f32>(&q);
        let defined = decode_values::<f32>(&catalog, &found[0]).unwrap();
        assert_eq!(library.as_slice().unwrap(), &defined[..], "{convention} {scheme}");
    }
}
