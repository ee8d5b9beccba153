//! What the GPU test files share.

use blockscale_cuda::Device;

/// The first GPU, or None (printing why) when there is none; with
/// `BLOCKSCALE_REQUIRE_GPU=1` (the GPU bundle sets it) a missing GPU fails instead.
pub fn device() -> Option<Device> {
    match Device::new(0) {
        Ok(d) => {
            eprintln!("GPU: {} ({:?}, {} SMs)", d.name(), d.arch(), d.sm_count());
            Some(d)
        }
        Err(e) => {
            assert!(std::env::var("BLOCKSCALE_REQUIRE_GPU").as_deref() != Ok("1"), "BLOCKSCALE_REQUIRE_GPU=1 but: {e}");
            eprintln!("SKIPPED: no usable GPU ({e})");
            None
        }
    }
}

pub mod oracle;
pub mod quant;
