//! `Backend::load_weights`: a checkpoint's weights prepared on each backend present give
//! the products of the matrices that were written, bit for bit (the CUDA backend when
//! the build has it and the machine has a GPU).

use blockscale::checkpoint::{Reader, by_name, save};
use blockscale::half::bf16;
use blockscale::ndarray::{Array1, Array2};
use blockscale::{Backend, Epilogue, LoadedWeight, QuantizeOptions, Scheme};

#[test]
fn loaded_weights_multiply_as_the_written_matrices() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let w = Array2::from_shape_fn((96, 256), |(r, c)| ((r * 37 + c * 11) % 29) as f32 / 7.0 - 2.0);
    let q = Backend::Cpu.quantize(w.view(), Scheme::NvFp4, &QuantizeOptions::default()).unwrap();
    let modelopt = by_name("modelopt").unwrap().writes().unwrap();
    save(&path, modelopt, vec![("l.weight".into(), q.clone())], vec![], false).unwrap();
    let reader = Reader::open(&path).unwrap();
    let x = Array1::from_shape_fn(256, |c| bf16::from_f32((c % 7) as f32 * 0.25 - 0.75));
    let mut backends = vec![Backend::Cpu];
    backends.extend(Backend::cuda_if_available(0).ok().filter(|b| b.name() == "cuda"));
    for backend in backends {
        let loaded: Vec<_> = backend.load_weights(&reader).collect::<Result<_, _>>().unwrap();
        assert_eq!(loaded.len(), 1);
        let (found, LoadedWeight::Prepared(p)) = &loaded[0] else { panic!("NVFP4 is a library scheme") };
        assert_eq!((found.output.as_str(), found.convention), ("l.weight", "modelopt"));
        let got: Array1<f32> = backend.gemv_prepared(x.view(), p, &Epilogue::default()).unwrap();
        // The same matrix prepared directly (prepared and general GPU kernels may group
        // their sums differently, so the comparison stays on the prepared path). ModelOpt
        // stores the per-tensor decode scale, which is the GEMV's alpha either way.
        let direct = backend.prepare(&q).unwrap();
        let want: Array1<f32> = backend.gemv_prepared(x.view(), &direct, &Epilogue::default()).unwrap();
        assert_eq!(got, want, "{}", backend.name());
    }
}
