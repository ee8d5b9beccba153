//! The committed golden files against the CPU backend, and every way a golden file can
//! be unusable, each reported as its own typed error.

use std::path::{Path, PathBuf};

use blockscale::Backend;
use blockscale_golden::verify::{Verdict, verify_file};
use blockscale_golden::{GoldenError, GoldenFile};
use safetensors::Dtype;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden")
}

fn golden(name: &str) -> GoldenFile {
    GoldenFile::open(&dir().join(format!("{name}.safetensors"))).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blockscale-golden-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn every_committed_case_passes_on_the_cpu() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    assert!(files.len() >= 70, "the golden set is missing: {} files", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let file = GoldenFile::open(f).unwrap_or_else(|e| panic!("{e}"));
        for o in verify_file(&file, &Backend::Cpu).unwrap() {
            if o.verdict != Verdict::Pass {
                failures.push(o.to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "regenerate with `cargo xtask golden` only if the change is intended:\n{}",
        failures.join("\n")
    );
}

fn rewrite(name: &str, edit: impl FnOnce(&mut blockscale_golden::Writer)) -> PathBuf {
    let mut w = golden(name).to_writer();
    edit(&mut w);
    let p = tmp(&format!("{name}-{}.safetensors", rand_suffix()));
    w.write(&p).unwrap();
    p
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn open_and_verify(p: &Path) -> Result<Vec<blockscale_golden::verify::Outcome>, GoldenError> {
    let f = GoldenFile::open(p)?;
    verify_file(&f, &Backend::Cpu)
}

#[test]
fn a_truncated_file_is_a_format_error() {
    let src = dir().join("q-mxfp4-f32-ragged.safetensors");
    let bytes = std::fs::read(&src).unwrap();
    for cut in [4, 100, bytes.len() - 1] {
        let p = tmp(&format!("truncated-{cut}.safetensors"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = GoldenFile::open(&p).unwrap_err();
        assert!(matches!(e, GoldenError::Format { .. }), "cut at {cut}: {e}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
    let p = tmp("not-safetensors.safetensors");
    std::fs::write(&p, b"this is not a safetensors file at all, just text").unwrap();
    assert!(matches!(GoldenFile::open(&p), Err(GoldenError::Format { .. })));
    assert!(matches!(GoldenFile::open(&tmp("absent.safetensors")), Err(GoldenError::Io { .. })));
}

#[test]
fn wrong_dtype_shape_or_missing_tensor_are_typed() {
    let p = rewrite("q-nvfp4-f32-ragged", |w| {
        w.tensor("dequant", Dtype::F16, &[130, 112], vec![0; 130 * 112 * 2]);
    });
    assert!(matches!(open_and_verify(&p), Err(GoldenError::Dtype { tensor, .. }) if tensor == "dequant"));
    let p = rewrite("q-nvfp4-f32-ragged", |w| {
        w.tensor("q.codes", Dtype::F4, &[112, 130], vec![0; 130 * 112 / 2]);
    });
    assert!(matches!(open_and_verify(&p), Err(GoldenError::Shape { tensor, .. }) if tensor == "q.codes"));
    let p = rewrite("gemm-mxfp4-x-mxfp4-exact", |w| {
        w.remove("b.scales");
    });
    assert!(matches!(open_and_verify(&p), Err(GoldenError::MissingTensor { tensor, .. }) if tensor == "b.scales"));
    let p = rewrite("gemm-mxfp4-x-mxfp4-exact", |w| {
        w.tensor("other", Dtype::F32, &[1], vec![0; 4]);
    });
    assert!(open_and_verify(&p).is_ok(), "extra tensors are fine");
}

#[test]
fn metadata_and_version_problems_are_typed() {
    let p = rewrite("q-mxfp8-e4m3-f16-small", |w| {
        w.meta("blockscale_version", "0.0.9");
    });
    let e = GoldenFile::open(&p).unwrap_err();
    assert!(matches!(e, GoldenError::Version { what: "blockscale", .. }), "{e}");
    let p = rewrite("q-mxfp8-e4m3-f16-small", |w| {
        w.meta("golden_format", "0");
    });
    assert!(matches!(GoldenFile::open(&p), Err(GoldenError::Version { what: "golden format", .. })));
    let p = rewrite("q-mxfp8-e4m3-f16-small", |w| {
        w.meta("q.scheme", "mxfp9");
    });
    assert!(matches!(open_and_verify(&p), Err(GoldenError::Metadata { key, .. }) if key == "q.scheme"));
    let p = rewrite("q-mxfp8-e4m3-f16-small", |w| {
        w.meta("kind", "convolution");
    });
    assert!(matches!(open_and_verify(&p), Err(GoldenError::Metadata { key, .. }) if key == "kind"));
}

#[test]
fn a_changed_value_is_a_failed_case_with_its_place() {
    let f = golden("q-mxfp4-f32-ragged");
    let mut dequant = f.f32s("dequant", &[130, 224]).unwrap();
    let at = 3 * 224 + 100; // row 3, column 100, block 3
    dequant[at] = f32::from_bits(dequant[at].to_bits() ^ 1);
    let p = rewrite("q-mxfp4-f32-ragged", |w| {
        w.f32s("dequant", &[130, 224], &dequant);
    });
    let outcomes = open_and_verify(&p).unwrap();
    let bad: Vec<_> = outcomes.iter().filter(|o| o.verdict == Verdict::Fail).collect();
    assert_eq!(bad.len(), 1, "{outcomes:?}");
    assert!(bad[0].detail.contains("[3, 100] (block 3)"), "{}", bad[0]);
    assert_eq!(bad[0].max_ulps, 1);

    let g = golden("gemm-nvfp4-x-nvfp4-exact");
    let mut out = g.f32s("out", &[33, 70]).unwrap();
    out[70 + 5] += 1.0;
    let p = rewrite("gemm-nvfp4-x-nvfp4-exact", |w| {
        w.f32s("out", &[33, 70], &out);
    });
    let outcomes = open_and_verify(&p).unwrap();
    assert!(outcomes.iter().all(|o| o.verdict == Verdict::Fail), "{outcomes:?}");
    assert!(outcomes[0].detail.contains("[1, 5]"), "{}", outcomes[0]);
}
