//! `cargo xtask bench [--backend cpu|cuda]`: the benchmarks, each printing its ratio to
//! the anchor measured in the same run. CPU: the facade's bench (benches/backend.rs, every
//! operation and scheme through `Backend::Cpu`) and the criterion benches of
//! blockscale-formats and blockscale-cpu. CUDA: blockscale-cuda's benches and the facade's
//! bench on `Backend::Cuda` (needs a GPU here; on a machine without Rust use `cargo xtask
//! gpu-bundle` and `gpu-bundle/run.sh bench` there, which runs the blockscale-cuda ones).

use anyhow::{Result, bail};

use crate::setup_cuda;
use crate::util::{self, cargo};

pub fn run(backend: &str) -> Result<()> {
    match backend {
        "cpu" => {
            util::run(cargo().args(["bench", "-p", "blockscale", "-p", "blockscale-formats", "-p", "blockscale-cpu"]))
        }
        "cuda" => {
            setup_cuda::cuda(false)?;
            util::run(cargo().args(["bench", "-p", "blockscale-cuda", "--bench", "quantize_cuda"]))?;
            util::run(cargo().args(["bench", "-p", "blockscale-cuda", "--bench", "gemm_cuda"]))?;
            util::run(cargo().args(["bench", "-p", "blockscale-cuda", "--bench", "gemv_cuda"]))?;
            let facade = ["bench", "-p", "blockscale", "--features", "cuda", "--bench", "backend"];
            util::run(cargo().args(facade).args(["--", "--backend", "cuda"]))
        }
        other => bail!("unknown backend {other:?}: expected cpu or cuda"),
    }
}
